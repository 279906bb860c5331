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
    // The mesh: world = replicate x shard x tp, the tensor-parallel position innermost:
    //   rank = (replicate_rank * shard_size + shard_rank) * tp_size + tp_rank.
    // The tp_size consecutive ranks of one dp_rank (one node, usually) hold one data-parallel
    // rank's share of every tensor-parallel tensor. The data-parallel ranks are split into shard
    // groups of shard_size consecutive dp ranks: parameters are sharded inside a group and
    // replicated across groups (HSDP). With shard_size == dp_size this is plain FSDP and
    // replicate_size == 1; with tp_size 1 the dp ranks are the world's ranks.
    int tp_size, tp_rank;             // tensor-parallel group: tp_size consecutive ranks
    int dp_size, dp_rank;             // data-parallel: world / tp_size, rank / tp_size
    int shard_size, shard_rank;       // within the shard group (counted in dp ranks)
    int replicate_size, replicate_rank;
    CommWorld* comm;
    // shard_comm: the same (replicate_rank, tp_rank); replicate_comm: the same (shard_rank,
    // tp_rank), NULL when replicate_size == 1; tp_comm: the same dp_rank (a group of its own even
    // at tp_size 1); model_comm: the same replicate_rank - the ranks holding one copy of the
    // model together (shard group x TP group), ordered by rank. Groups that coincide with one
    // already made are that object (at tp_size 1 model_comm is shard_comm; without HSDP
    // shard_comm or model_comm may be world_comm).
    Comm *world_comm, *shard_comm, *replicate_comm, *tp_comm, *model_comm;
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
// Fills pg's ranks and groups from a world already formed (process_group_init's last step;
// tests that form the world with comm_*_init call it too): every rank one data-parallel rank,
// one shard group of the whole world, no tp_comm until process_group_split.
void process_group_attach(ProcessGroup* pg, CommWorld* comm);
// Lays the mesh over the world (collective: every rank calls it with the same sizes): TP
// groups of tp_size consecutive ranks, and the data-parallel ranks in shard groups of
// shard_size dp ranks (0 means every dp rank). Fails (non-zero, one line in err, pg
// unchanged, nothing communicated) when tp_size < 1, tp_size does not divide the world size,
// or shard_size does not divide the number of data-parallel ranks.
int process_group_split(ProcessGroup* pg, int tp_size, int shard_size, char* err, size_t errlen);
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
