// Communication between ranks, behind one small interface with two transports:
//
//   mpi  - the ranks form an MPI world (mpirun, or srun with PMI/PMIx). Every operation is
//          the matching MPI call on the group's communicator.
//   tcp  - no MPI world (srun without PMI, torchrun-style environments, or --rendezvous):
//          the ranks find each other through a rendezvous (a file on a shared filesystem,
//          or MASTER_ADDR:MASTER_PORT) and connect a full mesh of TCP sockets. One
//          communication thread per process runs the operations in the order they were
//          issued, so a non-blocking operation really progresses while the caller computes.
//
// Every rank must issue the same collective operations in the same order on each group
// (as with MPI), and - because the TCP transport runs them all on one thread, in the order
// they were issued - the sequence of operations across all groups must fit one global order.
// SPMD code does: HSDP, and the mesh's pattern (process_group.h) of a gather or
// reduce-scatter started on the shard group, then blocking collectives on the TP group, then
// the wait: every rank starts its shard group's operation before its TP collectives, so all
// of those come first in the global order. (On tcp a TP collective issued behind an
// operation in flight starts once that one is done; on mpi it may overtake it.)
//
// Errors are fatal: a peer that closed its connection (it died), or an operation that did
// not complete within the world's timeout, prints one line naming this rank, the operation
// and the peer, and ends the process with status 1; the launcher (or the other ranks' own
// checks) then ends the job. Nothing waits forever. (mpi: an operation must complete within
// the timeout; tcp: it must make progress, move bytes, within it.)
//
// Groups: comm_world() is every rank; comm_split() makes sub-groups (the mesh's shard,
// replica, TP and model groups). A group's ranks are numbered 0..size-1 in the order of
// their keys.
#ifndef FSDP_COMM_H
#define FSDP_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CommWorld CommWorld;   // the transport; one per process
typedef struct Comm Comm;             // a group of ranks on it

typedef enum { COMM_SUM, COMM_MAX, COMM_MIN } CommOp;

// A non-blocking operation in flight; 0 means none. Wait for it with comm_wait.
typedef int64_t CommTicket;

// --- the MPI transport (comm_mpi.c) ------------------------------------------------------
// MPI_Init must have been called. timeout_s > 0: a watchdog thread ends the process when a
// blocking call or a wait has not returned within timeout_s seconds.
CommWorld* comm_mpi_init(double timeout_s, char* err, size_t errlen);

// --- the TCP transport (comm_tcp.c) ------------------------------------------------------
// rendezvous: "file:DIR" (DIR on a filesystem every rank sees) or "tcp://HOST:PORT" (rank 0
// listens on HOST:PORT; the others connect to it). run_id names this launch (e.g. Slurm's
// job id, step and restart count) so that files of another or an earlier launch in DIR are
// never read. Every rank must pass the same rendezvous and run_id. Returns NULL with a
// one-line message in err when the world cannot be formed within timeout_s.
CommWorld* comm_tcp_init(int rank, int world, const char* rendezvous, const char* run_id,
                         double timeout_s, char* err, size_t errlen);

// --- every transport ---------------------------------------------------------------------
const char* comm_transport(const CommWorld* w);   // "mpi" or "tcp"
Comm* comm_world(CommWorld* w);
// Ranks sharing this host (for picking a GPU): local rank and count.
void comm_local(const CommWorld* w, int* local_rank, int* local_size);
double comm_timeout(const CommWorld* w);
// Ends every rank's participation: a barrier, then the transport is closed (MPI_Finalize
// for mpi). Groups made by comm_split are freed too.
void comm_finalize(CommWorld* w);
// Ends the whole job from this rank now (MPI_Abort, or closing every socket so that the
// peers fail their next operation) and exits with status code.
void comm_abort(CommWorld* w, int code) __attribute__((noreturn));

// The stop watch: while stop_requested is set and returns a signal number (a stop signal has
// come, train/signals.h), a collective this rank has waited in for wait_s seconds (mpi: since
// the call began, checked once a second by the watchdog, so only with a timeout > 0; tcp:
// since its last byte moved) ends the process with one line naming the signal, the operation
// and the group, status 128 + signal: a rank blocked on a peer that is gone leaves within
// seconds instead of at the launcher's SIGKILL. NULL turns it off.
void comm_set_stop_watch(CommWorld* w, int (*stop_requested)(void), double wait_s);

// Collective over c: ranks with the same color form a group, ordered by key.
Comm* comm_split(Comm* c, int color, int key);
int comm_rank(const Comm* c);
int comm_size(const Comm* c);

// Blocking collectives.
void comm_barrier(Comm* c);
void comm_all_reduce_f64(Comm* c, double* x, size_t n, CommOp op);    // in place
void comm_all_reduce_i32(Comm* c, int32_t* x, size_t n, CommOp op);   // in place
void comm_all_reduce_f32(Comm* c, float* x, size_t n, CommOp op);    // in place, any n
void comm_all_reduce_f32_sum(Comm* c, float* x, size_t n);            // comm_all_reduce_f32(.., COMM_SUM)
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root);
// recv (root only, size * bytes) <- every rank's send[bytes], in rank order.
void comm_gather(Comm* c, const void* send, size_t bytes, void* recv, int root);
// Variable sizes: root's recv holds the concatenation in rank order; recv_bytes (root only,
// [size]) receives each rank's count. The root sizes recv from a comm_gather of the counts.
void comm_gatherv(Comm* c, const void* send, size_t bytes, void* recv, const size_t* recv_bytes, int root);

// Non-blocking collectives. The buffers must stay untouched until comm_wait returns.
// full[size * bytes] <- every rank's shard[bytes], in rank order.
CommTicket comm_all_gather_start(Comm* c, const void* shard, void* full, size_t bytes);
// shard[n] <- sum over ranks of full[rank * n : (rank + 1) * n]; full is not modified.
// The summation order depends only on the group size, so results are reproducible.
CommTicket comm_reduce_scatter_f32_start(Comm* c, const float* full, float* shard, size_t n);
void comm_wait(Comm* c, CommTicket t);   // no-op for 0

#ifdef __cplusplus
}
#endif
#endif
