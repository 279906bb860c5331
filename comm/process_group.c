#include "comm/process_group.h"

#ifndef FSDP_NO_MPI
#include <mpi.h>
#endif
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_int(const char* name, int* out) {
    const char* s = getenv(name);
    if (!s || !*s) return 0;
    char* end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0) return 0;
    *out = (int)v;
    return 1;
}

static const char* env_str(const char* name) {
    const char* s = getenv(name);
    return s && *s ? s : NULL;
}

// What the launcher says we are, in order of specificity. Returns the launcher's name;
// rank and world are -1 when no launcher variables are set.
static const char* launcher_env(int* rank, int* world, int* mpi_launched) {
    *rank = -1; *world = -1; *mpi_launched = 0;
    if (env_int("OMPI_COMM_WORLD_RANK", rank) && env_int("OMPI_COMM_WORLD_SIZE", world)) {
        *mpi_launched = 1;
        return "openmpi";
    }
    if (env_int("PMI_RANK", rank) && env_int("PMI_SIZE", world)) {  // MPICH's hydra, srun --mpi=pmi2
        *mpi_launched = 1;
        return "mpich";
    }
    // Inside a job step srun sets SLURM_STEP_NUM_TASKS; SLURM_NTASKS alone may describe the
    // whole allocation (as in the batch script itself).
    if (env_int("SLURM_PROCID", rank) && (env_int("SLURM_STEP_NUM_TASKS", world) || env_int("SLURM_NTASKS", world))) {
        *mpi_launched = env_str("PMIX_RANK") != NULL;  // srun --mpi=pmix
        return "slurm";
    }
    if (env_int("RANK", rank) && env_int("WORLD_SIZE", world)) return "torchrun";
    *rank = -1; *world = -1;
    return "single";
}

int launcher_rank(void) {
    int rank, world, mpi_launched;
    launcher_env(&rank, &world, &mpi_launched);
    return rank < 0 ? 0 : rank;
}

static void local_from_env(ProcessGroup* pg) {
    int v;
    if (env_int("SLURM_LOCALID", &v) || env_int("LOCAL_RANK", &v)) pg->local_rank = v;
    if (env_int("SLURM_NTASKS_PER_NODE", &v) || env_int("LOCAL_WORLD_SIZE", &v)) pg->local_world = v;
}

int process_group_init(ProcessGroup* pg, int* argc, char*** argv, const ProcessGroupOptions* opt,
                       char* err, size_t errlen) {
    memset(pg, 0, sizeof(*pg));
    int env_rank, env_world, mpi_launched;
    pg->launcher = launcher_env(&env_rank, &env_world, &mpi_launched);
    pg->launcher_pid = strcmp(pg->launcher, "single") ? (long)getppid() : 0;

    // Which transport: an explicit rendezvous wins; else MPI when an MPI launcher started us
    // (or nobody did: a single rank); else the TCP rendezvous the environment names.
    char rendezvous[1100] = "";
    if (opt->rendezvous) snprintf(rendezvous, sizeof(rendezvous), "%s", opt->rendezvous);
    else if (!mpi_launched && env_world > 1) {
        const char* addr = env_str("MASTER_ADDR");
        const char* port = env_str("MASTER_PORT");
        if (!addr || !port) {
            snprintf(err, errlen,
                     "the %s environment says rank %d of %d but there is no MPI world (no PMI/PMIx): "
                     "pass --rendezvous file:DIR (a directory every node sees) or tcp://HOST:PORT, set "
                     "MASTER_ADDR and MASTER_PORT, or launch with mpirun or srun --mpi=pmix",
                     pg->launcher, env_rank, env_world);
            return 1;
        }
        snprintf(rendezvous, sizeof(rendezvous), "tcp://%s:%s", addr, port);
    }

    if (rendezvous[0]) {
        if (env_world < 1) {
            snprintf(err, errlen, "--rendezvous %s: no launcher variables say which rank this is "
                     "(SLURM_PROCID/SLURM_NTASKS, RANK/WORLD_SIZE, or an MPI launcher's)", rendezvous);
            return 1;
        }
        // A run id keeps launches apart in a shared rendezvous directory: Slurm's job, step and
        // restart count (a requeued job keeps its id), or torchrun's.
        char run_id[256] = "default";
        const char* job = env_str("SLURM_JOB_ID");
        if (opt->run_id) snprintf(run_id, sizeof(run_id), "%s", opt->run_id);
        else if (env_str("TORCHELASTIC_RUN_ID")) snprintf(run_id, sizeof(run_id), "%s", env_str("TORCHELASTIC_RUN_ID"));
        else if (job) {
            const char* step = env_str("SLURM_STEP_ID");
            const char* restart = env_str("SLURM_RESTART_COUNT");
            snprintf(run_id, sizeof(run_id), "slurm-%s.%s.%s", job, step ? step : "0", restart ? restart : "0");
        } else if (!strncmp(rendezvous, "file:", 5)) {
            snprintf(err, errlen, "--rendezvous %s needs --run-id ID (the same on every rank, new for each launch) "
                     "outside Slurm and torchrun", rendezvous);
            return 1;
        }
        pg->comm = comm_tcp_init(env_rank, env_world, rendezvous, run_id, opt->timeout_s, err, errlen);
        if (!pg->comm) return 1;
    } else {
#ifdef FSDP_NO_MPI
        // Built without MPI (make NO_MPI=1): a single process is a TCP world of one; ranks
        // started by an MPI launcher cannot join one another.
        if (mpi_launched) {
            snprintf(err, errlen,
                     "this train_gpt was built without MPI (NO_MPI=1) but %s started it: launch the ranks "
                     "with scripts/launch_local.sh, srun without --mpi, or RANK/WORLD_SIZE/MASTER_ADDR/"
                     "MASTER_PORT (torchrun style), or rebuild with MPI", pg->launcher);
            return 1;
        }
        pg->comm = comm_tcp_init(0, 1, NULL, "single", opt->timeout_s, err, errlen);
        if (!pg->comm) return 1;
#else
        MPI_Init(argc, argv);
        pg->comm = comm_mpi_init(opt->timeout_s, err, errlen);
        if (!pg->comm) return 1;
        Comm* w = comm_world(pg->comm);
        if (env_world >= 0 && (env_world != comm_size(w) || env_rank != comm_rank(w))) {
            snprintf(err, errlen,
                     "the %s environment says rank %d of %d but MPI sees rank %d of %d: "
                     "launch with mpirun or srun (with PMI/PMIx) so that all ranks join one MPI world, "
                     "or pass --rendezvous",
                     pg->launcher, env_rank, env_world, comm_rank(w), comm_size(w));
            comm_finalize(pg->comm);
            pg->comm = NULL;
            return 1;
        }
#endif
    }
    process_group_attach(pg, pg->comm);
    if (!strcmp(pg->transport, "tcp")) local_from_env(pg);  // the launcher knows best
    return 0;
}

void process_group_attach(ProcessGroup* pg, CommWorld* comm) {
    pg->comm = comm;
    pg->transport = comm_transport(comm);
    pg->world_comm = comm_world(comm);
    pg->rank = comm_rank(pg->world_comm);
    pg->world = comm_size(pg->world_comm);
    comm_local(comm, &pg->local_rank, &pg->local_world);
    pg->tp_size = 1; pg->tp_rank = 0;
    pg->dp_size = pg->world; pg->dp_rank = pg->rank;
    pg->shard_size = pg->world; pg->shard_rank = pg->rank;
    pg->replicate_size = 1; pg->replicate_rank = 0;
    pg->shard_comm = pg->world_comm;
    pg->replicate_comm = NULL;
    pg->tp_comm = NULL;
    pg->model_comm = pg->world_comm;
}

int process_group_split(ProcessGroup* pg, int tp_size, int shard_size, char* err, size_t errlen) {
    // Every check comes before the first collective: a refusal leaves every rank where it was.
    if (tp_size < 1) {
        snprintf(err, errlen, "--tp %d must be at least 1", tp_size);
        return 1;
    }
    if (pg->world % tp_size != 0) {
        snprintf(err, errlen, "--tp %d does not divide the world size %d", tp_size, pg->world);
        return 1;
    }
    int dp_size = pg->world / tp_size;
    if (shard_size == 0) shard_size = dp_size;
    if (shard_size < 0 || dp_size % shard_size != 0) {
        if (tp_size == 1)
            snprintf(err, errlen, "--shard-group-size %d does not divide the world size %d", shard_size, pg->world);
        else
            snprintf(err, errlen, "--shard-group-size %d does not divide the %d data-parallel ranks (world size %d / --tp %d)",
                     shard_size, dp_size, pg->world, tp_size);
        return 1;
    }
    int rank = pg->rank;
    pg->tp_size = tp_size;
    pg->tp_rank = rank % tp_size;
    pg->dp_size = dp_size;
    pg->dp_rank = rank / tp_size;
    pg->shard_size = shard_size;
    pg->shard_rank = pg->dp_rank % shard_size;
    pg->replicate_size = dp_size / shard_size;
    pg->replicate_rank = pg->dp_rank / shard_size;
    // The splits, each a collective over the world (the same ones, in the same order, on
    // every rank: the conditions depend on the sizes only). A group's key is its members'
    // position in it, so group rank = that position. Colors: the coordinates the members
    // share, folded into one number. tp_comm comes last so that at tp_size 1 the shard and
    // replica groups are made exactly as before the mesh existed.
    Comm* w = pg->world_comm;
    if (pg->replicate_size == 1) {
        pg->shard_comm = tp_size == 1 ? w : comm_split(w, pg->tp_rank, pg->shard_rank);
        pg->replicate_comm = NULL;
        pg->model_comm = w;
    } else {
        pg->shard_comm = comm_split(w, pg->replicate_rank * tp_size + pg->tp_rank, pg->shard_rank);
        pg->replicate_comm = comm_split(w, pg->shard_rank * tp_size + pg->tp_rank, pg->replicate_rank);
        pg->model_comm = tp_size == 1 ? pg->shard_comm : comm_split(w, pg->replicate_rank, rank);
    }
    pg->tp_comm = comm_split(w, pg->dp_rank, pg->tp_rank);
    return 0;
}

void process_group_finalize(ProcessGroup* pg) {
    if (pg->comm) comm_finalize(pg->comm);
    pg->comm = NULL;
}

void fatal(const ProcessGroup* pg, const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (pg && pg->world > 1) fprintf(stderr, "error: [rank %d] %s\n", pg->rank, msg);
    else fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    if (pg && pg->comm && pg->world > 1) comm_abort(pg->comm, 1);
    exit(1);
}

void fatal_agreed(const ProcessGroup* pg, const char* fmt, ...) {
    fflush(stdout);
    if (pg->rank == 0) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fprintf(stderr, "error: %s\n", msg);
        fflush(stderr);
    }
    process_group_finalize((ProcessGroup*)pg);
    exit(1);
}

void fatal_agreed_any(const ProcessGroup* pg, int failed, const char* fmt, ...) {
    // The lowest failing rank, then its message to every rank.
    int32_t first = failed ? pg->rank : pg->world;
    if (pg->world > 1) comm_all_reduce_i32(pg->world_comm, &first, 1, COMM_MIN);
    if (first == pg->world) return;
    char msg[1024] = "";
    if (pg->rank == first) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    if (pg->world > 1) comm_broadcast(pg->world_comm, msg, sizeof(msg), first);
    fatal_agreed(pg, "%s", msg);
}
