// comm/: how ranks find each other and exchange data (comm.h: collectives over MPI or the
// TCP transport; process_group.h: the world, its shard and replica groups). fsdp/ and
// checkpoint/ both stand on it.
//
// The transport-independent half of comm.h: each call goes to the world's transport.
#include "comm/comm_impl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char* comm_transport(const CommWorld* w) { return w->ops->name; }
Comm* comm_world(CommWorld* w) { return w->world; }
double comm_timeout(const CommWorld* w) { return w->timeout_s; }
void comm_local(const CommWorld* w, int* local_rank, int* local_size) {
    *local_rank = w->local_rank;
    *local_size = w->local_size;
}

void comm_register_group(CommWorld* w, Comm* c) {
    if (w->n_groups == w->cap_groups) {
        w->cap_groups = w->cap_groups ? 2 * w->cap_groups : 4;
        w->groups = (Comm**)realloc(w->groups, (size_t)w->cap_groups * sizeof(Comm*));
    }
    w->groups[w->n_groups++] = c;
}

void comm_set_stop_watch(CommWorld* w, int (*stop_requested)(void), double wait_s) {
    __atomic_store(&w->stop_wait_s, &wait_s, __ATOMIC_RELAXED);
    __atomic_store_n(&w->stop_requested, stop_requested, __ATOMIC_RELEASE);  // the seconds first
}

void comm_stop_check(CommWorld* w, int rank, const char* transport, const char* op, int group_size, double waited_s) {
    int (*stop_requested)(void) = __atomic_load_n(&w->stop_requested, __ATOMIC_ACQUIRE);
    double wait_s;
    __atomic_load(&w->stop_wait_s, &wait_s, __ATOMIC_RELAXED);
    if (!stop_requested || waited_s < wait_s) return;
    int sig = stop_requested();
    if (!sig) return;
    // Not exit(): another thread may be inside the transport. stdout's buffered lines go out
    // first unless another thread holds its lock.
    if (ftrylockfile(stdout) == 0) {
        fflush_unlocked(stdout);
        funlockfile(stdout);
    }
    char line[400];
    int n = snprintf(line, sizeof(line),
                     "error: [rank %d] comm %s: stop signal (%s) while blocked in %s on a group of %d ranks (%.0f s): "
                     "exiting without a checkpoint (a rank it waits for is gone or stuck)\n",
                     rank, transport, sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal", op, group_size,
                     waited_s);
    ssize_t k = write(STDERR_FILENO, line, (size_t)n);
    (void)k;
    _exit(128 + sig);
}

void comm_finalize(CommWorld* w) { w->ops->finalize(w); }
void comm_abort(CommWorld* w, int code) {
    w->ops->abort(w, code);
    exit(code);  // a transport's abort does not return; this keeps the compiler sure of it
}

Comm* comm_split(Comm* c, int color, int key) { return c->w->ops->split(c, color, key); }
int comm_rank(const Comm* c) { return c->rank; }
int comm_size(const Comm* c) { return c->size; }

void comm_barrier(Comm* c) { c->w->ops->barrier(c); }
void comm_all_reduce_f64(Comm* c, double* x, size_t n, CommOp op) { c->w->ops->all_reduce(c, x, n, COMM_F64, op); }
void comm_all_reduce_i32(Comm* c, int32_t* x, size_t n, CommOp op) { c->w->ops->all_reduce(c, x, n, COMM_I32, op); }
void comm_all_reduce_f32(Comm* c, float* x, size_t n, CommOp op) { c->w->ops->all_reduce(c, x, n, COMM_F32, op); }
void comm_all_reduce_f32_sum(Comm* c, float* x, size_t n) { comm_all_reduce_f32(c, x, n, COMM_SUM); }
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) { c->w->ops->broadcast(c, buf, bytes, root); }
void comm_gather(Comm* c, const void* send, size_t bytes, void* recv, int root) {
    c->w->ops->gather(c, send, bytes, recv, root);
}
void comm_gatherv(Comm* c, const void* send, size_t bytes, void* recv, const size_t* recv_bytes, int root) {
    c->w->ops->gatherv(c, send, bytes, recv, recv_bytes, root);
}
CommTicket comm_all_gather_start(Comm* c, const void* shard, void* full, size_t bytes) {
    return c->w->ops->all_gather_start(c, shard, full, bytes);
}
CommTicket comm_reduce_scatter_f32_start(Comm* c, const float* full, float* shard, size_t n) {
    return c->w->ops->reduce_scatter_f32_start(c, full, shard, n);
}
void comm_wait(Comm* c, CommTicket t) {
    if (t != 0) c->w->ops->wait(c, t);
}
