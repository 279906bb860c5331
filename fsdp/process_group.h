// Process group: who am I, how many of us, and the communicators the FSDP engine uses.
//
// Ranks come from MPI (mpirun, srun with PMI/PMIx). The launcher's own variables
// (OMPI_COMM_WORLD_*, PMI_*, SLURM_*, torchrun's RANK/WORLD_SIZE) are read too and must
// agree with MPI's view: a job started torchrun-style without an MPI world would otherwise
// silently train W independent copies, so it is refused with a clear message.
#ifndef FSDP_PROCESS_GROUP_H
#define FSDP_PROCESS_GROUP_H

#include <mpi.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rank, world;            // global
    int local_rank, local_world;// within this node (for picking a GPU)
    const char* launcher;       // "openmpi", "mpich", "slurm", "torchrun", "single"
    // Sharding: ranks are split into groups of shard_size consecutive ranks (one node, usually).
    // Parameters are sharded inside a group and replicated across groups (HSDP). With
    // shard_size == world this is plain FSDP and replicate_size == 1.
    int shard_size, shard_rank;       // within the shard group
    int replicate_size, replicate_rank;
    MPI_Comm world_comm, shard_comm, replicate_comm;
} ProcessGroup;

// MPI_Init + launcher detection. On an inconsistent environment prints one line to stderr
// and returns non-zero (after MPI_Init, so the caller can finalize and exit).
int process_group_init(ProcessGroup* pg, int* argc, char*** argv, char* err, size_t errlen);
// Splits the world into shard groups of shard_size ranks (0 means world). Fails (non-zero,
// message in err) when shard_size does not divide the world size.
int process_group_split(ProcessGroup* pg, int shard_size, char* err, size_t errlen);
void process_group_finalize(ProcessGroup* pg);

// Abort the whole job from any rank: prints "error: <msg>" (prefixed with the rank when
// W > 1) and calls MPI_Abort so that no rank is left waiting in a collective.
void fatal(const ProcessGroup* pg, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

// For an error every rank has reached together (one they agreed on): rank 0 prints it once
// and every rank exits with status 1 after finalizing MPI.
void fatal_agreed(const ProcessGroup* pg, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

#ifdef __cplusplus
}
#endif
#endif
