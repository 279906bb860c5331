// Process group: who am I, how many of us, and the groups the FSDP engine communicates in.
//
// How the ranks find each other (comm/comm.h):
//   - an MPI world when an MPI launcher started us (mpirun/mpiexec of Open MPI or MPICH, srun
//     with PMI/PMIx); the launcher's variables must agree with what MPI sees;
//   - the TCP transport when --rendezvous is given, or when a launcher that is not MPI says
//     we are one of several ranks (srun without PMI: SLURM_PROCID/SLURM_NTASKS; torchrun
//     style: RANK/WORLD_SIZE with MASTER_ADDR/MASTER_PORT);
//   - a single rank otherwise.
// A job started as several ranks with no way to meet is refused with a clear message:
// otherwise it would silently train W independent copies.
#ifndef FSDP_PROCESS_GROUP_H
#define FSDP_PROCESS_GROUP_H

#include <stdio.h>
#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rank, world;            // global
    int local_rank, local_world;// within this node (for picking a GPU)
    const char* launcher;       // "openmpi", "mpich", "slurm", "torchrun", "single"
    long launcher_pid;          // the parent process when a launcher started us (mpirun, mpiexec's
                                // proxy, slurmstepd, launch_local.sh), read before MPI_Init; else 0
    const char* transport;      // "mpi" or "tcp"
    // Sharding: ranks are split into groups of shard_size consecutive ranks (one node, usually).
    // Parameters are sharded inside a group and replicated across groups (HSDP). With
    // shard_size == world this is plain FSDP and replicate_size == 1.
    int shard_size, shard_rank;       // within the shard group
    int replicate_size, replicate_rank;
    CommWorld* comm;
    Comm *world_comm, *shard_comm, *replicate_comm;
} ProcessGroup;

typedef struct {
    const char* rendezvous;     // NULL, "file:DIR" or "tcp://HOST:PORT"
    const char* run_id;         // NULL: from the launcher (Slurm job/step/restart, torchrun)
    double timeout_s;           // collectives and rendezvous; <= 0 disables the MPI watchdog
} ProcessGroupOptions;

// The rank the launcher's environment gives this process (0 when there is none): lets
// exactly one process report an error found before the ranks have met.
int launcher_rank(void);

// Forms the world. On failure prints nothing, returns non-zero with one line in err; the
// caller reports it (from launcher_rank() == 0) and exits.
int process_group_init(ProcessGroup* pg, int* argc, char*** argv, const ProcessGroupOptions* opt,
                       char* err, size_t errlen);
// Splits the world into shard groups of shard_size ranks (0 means world). Fails (non-zero,
// message in err) when shard_size does not divide the world size.
int process_group_split(ProcessGroup* pg, int shard_size, char* err, size_t errlen);
void process_group_finalize(ProcessGroup* pg);

// Abort the whole job from any rank: prints "error: <msg>" (prefixed with the rank when
// W > 1) and ends every rank (MPI_Abort, or closing the TCP mesh) so that none is left
// waiting in a collective.
void fatal(const ProcessGroup* pg, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

// For an error every rank has reached together (one they agreed on): rank 0 prints it once
// and every rank exits with status 1 after closing the transport.
void fatal_agreed(const ProcessGroup* pg, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

// For a check each rank makes of its own part (failed: this rank's verdict); every rank calls
// it. When no rank failed it returns; else every rank ends as fatal_agreed does, with the
// message of the lowest failing rank (formatted there; rank 0 prints it once).
void fatal_agreed_any(const ProcessGroup* pg, int failed, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
