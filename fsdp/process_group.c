#include "fsdp/process_group.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char* name, int* out) {
    const char* s = getenv(name);
    if (!s || !*s) return 0;
    char* end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0) return 0;
    *out = (int)v;
    return 1;
}

int process_group_init(ProcessGroup* pg, int* argc, char*** argv, char* err, size_t errlen) {
    memset(pg, 0, sizeof(*pg));
    MPI_Init(argc, argv);
    pg->world_comm = MPI_COMM_WORLD;
    MPI_Comm_rank(MPI_COMM_WORLD, &pg->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &pg->world);

    // What the launcher says we are, in order of specificity.
    int env_rank = -1, env_world = -1;
    pg->launcher = "single";
    if (env_int("OMPI_COMM_WORLD_RANK", &env_rank) && env_int("OMPI_COMM_WORLD_SIZE", &env_world)) {
        pg->launcher = "openmpi";
    } else if (env_int("PMI_RANK", &env_rank) && env_int("PMI_SIZE", &env_world)) {
        pg->launcher = "mpich";
    } else if (env_int("SLURM_PROCID", &env_rank) && env_int("SLURM_NTASKS", &env_world)) {
        pg->launcher = "slurm";
    } else if (env_int("RANK", &env_rank) && env_int("WORLD_SIZE", &env_world)) {
        pg->launcher = "torchrun";
    }
    if (env_world >= 0 && (env_world != pg->world || env_rank != pg->rank)) {
        snprintf(err, errlen,
                 "the %s environment says rank %d of %d but MPI sees rank %d of %d: "
                 "launch with mpirun or srun (with PMI/PMIx) so that all ranks join one MPI world",
                 pg->launcher, env_rank, env_world, pg->rank, pg->world);
        return 1;
    }

    // Local rank from the ranks that share this node's memory: works under every launcher.
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, pg->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &pg->local_rank);
    MPI_Comm_size(node, &pg->local_world);
    MPI_Comm_free(&node);

    pg->shard_size = pg->world; pg->shard_rank = pg->rank;
    pg->replicate_size = 1; pg->replicate_rank = 0;
    pg->shard_comm = MPI_COMM_WORLD;
    pg->replicate_comm = MPI_COMM_SELF;
    return 0;
}

int process_group_split(ProcessGroup* pg, int shard_size, char* err, size_t errlen) {
    if (shard_size == 0 || shard_size == pg->world) return 0;
    if (shard_size < 0 || pg->world % shard_size != 0) {
        snprintf(err, errlen, "--shard-group-size %d does not divide the world size %d",
                 shard_size, pg->world);
        return 1;
    }
    pg->shard_size = shard_size;
    pg->shard_rank = pg->rank % shard_size;
    pg->replicate_size = pg->world / shard_size;
    pg->replicate_rank = pg->rank / shard_size;
    // Consecutive ranks (one node under the usual block mapping) form a shard group.
    MPI_Comm_split(MPI_COMM_WORLD, pg->replicate_rank, pg->shard_rank, &pg->shard_comm);
    MPI_Comm_split(MPI_COMM_WORLD, pg->shard_rank, pg->replicate_rank, &pg->replicate_comm);
    return 0;
}

void process_group_finalize(ProcessGroup* pg) {
    if (pg->shard_comm != MPI_COMM_WORLD) MPI_Comm_free(&pg->shard_comm);
    if (pg->replicate_comm != MPI_COMM_SELF) MPI_Comm_free(&pg->replicate_comm);
    MPI_Finalize();
}

void fatal(const ProcessGroup* pg, const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (pg && pg->world > 1) fprintf(stderr, "error: [rank %d] %s\n", pg->rank, msg);
    else fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    if (pg && pg->world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void fatal_agreed(const ProcessGroup* pg, const char* fmt, ...) {
    if (pg->rank == 0) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fprintf(stderr, "error: %s\n", msg);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(1);
}
