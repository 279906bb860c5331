// The MPI transport of comm.h: each operation is the matching MPI call on the group's
// communicator. A watchdog thread bounds every blocking call and every wait: MPI itself
// would wait forever for a rank that is alive but stuck (a dead rank is noticed by the
// launcher, which ends the job). The watchdog never calls MPI: it prints and exits, and the
// launcher (mpirun, srun --kill-on-bad-exit) tears the job down. It also keeps the stop
// watch: srun ends a step whose rank died with SIGTERM to the others, which sit in a
// collective with the dead rank and would otherwise wait for Slurm's SIGKILL (KillWait).
#include "comm/comm_impl.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_IN_FLIGHT = 64 };  // non-blocking operations outstanding at once, per process

typedef struct {
    int rank;                         // in the world, for messages
    // Non-blocking operations: ticket t lives in slot t % MAX_IN_FLIGHT until waited.
    MPI_Request requests[MAX_IN_FLIGHT];
    CommTicket slot_ticket[MAX_IN_FLIGHT];
    CommTicket next_ticket;
    // The watchdog: what the caller is blocked in, and since when.
    pthread_t watchdog;
    int watchdog_running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const char* blocked_in;           // NULL when not inside a call
    int blocked_group_size;
    double blocked_since;
    int stop;
} MpiWorld;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static MpiWorld* mw(const Comm* c) { return (MpiWorld*)c->w->impl; }
static MPI_Comm mc(const Comm* c) { return *(MPI_Comm*)c->impl; }

static void die(const MpiWorld* m, const char* fmt, const char* what, size_t n) {
    fprintf(stderr, "error: [rank %d] comm mpi: ", m->rank);
    fprintf(stderr, fmt, what, n);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static int int_count(const MpiWorld* m, const char* op, size_t n) {
    if (n > (size_t)INT_MAX) die(m, "%s of %zu elements exceeds MPI's int count", op, n);
    return (int)n;
}

static void* watchdog_main(void* arg) {
    CommWorld* w = (CommWorld*)arg;
    MpiWorld* m = (MpiWorld*)w->impl;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&m->cv, &m->mu, &until);
        if (m->blocked_in) comm_stop_check(w, m->rank, "mpi", m->blocked_in, m->blocked_group_size, now_s() - m->blocked_since);
        if (m->blocked_in && now_s() - m->blocked_since > w->timeout_s) {
            fprintf(stderr, "error: [rank %d] comm mpi: %s on a group of %d ranks did not complete within "
                            "--comm-timeout %.0f s (a rank is stalled or dead); ending the job\n",
                    m->rank, m->blocked_in, m->blocked_group_size, w->timeout_s);
            fflush(stderr);
            _exit(1);  // no MPI from this thread: the launcher ends the other ranks
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static void watch_begin(const Comm* c, const char* op) {
    MpiWorld* m = mw(c);
    if (!m->watchdog_running) return;
    pthread_mutex_lock(&m->mu);
    m->blocked_in = op;
    m->blocked_group_size = c->size;
    m->blocked_since = now_s();
    pthread_mutex_unlock(&m->mu);
}

static void watch_end(const Comm* c) {
    MpiWorld* m = mw(c);
    if (!m->watchdog_running) return;
    pthread_mutex_lock(&m->mu);
    m->blocked_in = NULL;
    pthread_mutex_unlock(&m->mu);
}

static Comm* new_comm(CommWorld* w, MPI_Comm comm) {
    Comm* c = (Comm*)calloc(1, sizeof(Comm));
    MPI_Comm* handle = (MPI_Comm*)malloc(sizeof(MPI_Comm));
    *handle = comm;
    c->w = w;
    c->impl = handle;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    return c;
}

static Comm* mpi_split(Comm* c, int color, int key) {
    MPI_Comm sub;
    watch_begin(c, "split");
    MPI_Comm_split(mc(c), color, key, &sub);
    watch_end(c);
    Comm* out = new_comm(c->w, sub);
    comm_register_group(c->w, out);
    return out;
}

static void mpi_barrier(Comm* c) {
    watch_begin(c, "barrier");
    MPI_Barrier(mc(c));
    watch_end(c);
}

static void mpi_all_reduce(Comm* c, void* x, size_t n, CommDtype dtype, CommOp op) {
    MPI_Datatype type = dtype == COMM_F64 ? MPI_DOUBLE : dtype == COMM_I32 ? MPI_INT : MPI_FLOAT;
    size_t elem = dtype == COMM_F64 ? 8 : 4;
    MPI_Op mop = op == COMM_SUM ? MPI_SUM : op == COMM_MAX ? MPI_MAX : MPI_MIN;
    // In chunks, so that any size fits MPI's int count.
    const size_t chunk = (size_t)1 << 30;
    watch_begin(c, "all-reduce");
    for (size_t at = 0; at < n; at += chunk) {
        size_t len = n - at < chunk ? n - at : chunk;
        MPI_Allreduce(MPI_IN_PLACE, (char*)x + at * elem, (int)len, type, mop, mc(c));
    }
    watch_end(c);
}

static void mpi_broadcast(Comm* c, void* buf, size_t bytes, int root) {
    const size_t chunk = (size_t)1 << 30;
    watch_begin(c, "broadcast");
    for (size_t at = 0; at < bytes; at += chunk) {
        size_t len = bytes - at < chunk ? bytes - at : chunk;
        MPI_Bcast((char*)buf + at, (int)len, MPI_BYTE, root, mc(c));
    }
    watch_end(c);
}

static void mpi_gather(Comm* c, const void* send, size_t bytes, void* recv, int root) {
    int count = int_count(mw(c), "gather", bytes);
    watch_begin(c, "gather");
    MPI_Gather(send, count, MPI_BYTE, recv, count, MPI_BYTE, root, mc(c));
    watch_end(c);
}

static void mpi_gatherv(Comm* c, const void* send, size_t bytes, void* recv, const size_t* recv_bytes, int root) {
    MpiWorld* m = mw(c);
    int* counts = NULL;
    int* displs = NULL;
    if (c->rank == root) {
        counts = (int*)malloc((size_t)c->size * sizeof(int));
        displs = (int*)malloc((size_t)c->size * sizeof(int));
        size_t at = 0;
        for (int r = 0; r < c->size; r++) {
            counts[r] = int_count(m, "gatherv", recv_bytes[r]);
            displs[r] = int_count(m, "gatherv", at);
            at += recv_bytes[r];
        }
    }
    watch_begin(c, "gatherv");
    MPI_Gatherv(send, int_count(m, "gatherv", bytes), MPI_BYTE, recv, counts, displs, MPI_BYTE, root, mc(c));
    watch_end(c);
    free(counts);
    free(displs);
}

static MPI_Request* take_slot(Comm* c, CommTicket* ticket) {
    MpiWorld* m = mw(c);
    CommTicket t = ++m->next_ticket;
    int slot = (int)(t % MAX_IN_FLIGHT);
    if (m->requests[slot] != MPI_REQUEST_NULL)
        die(m, "%s: more than %zu non-blocking operations in flight", "start", (size_t)MAX_IN_FLIGHT);
    m->slot_ticket[slot] = t;
    *ticket = t;
    return &m->requests[slot];
}

static CommTicket mpi_all_gather_start(Comm* c, const void* shard, void* full, size_t bytes) {
    CommTicket t;
    MPI_Request* req = take_slot(c, &t);
    // Shards are whole floats in practice; counting in 4-byte words keeps 8 GiB shards legal.
    if (bytes % 4 == 0) {
        int count = int_count(mw(c), "all-gather", bytes / 4);
        MPI_Iallgather(shard, count, MPI_FLOAT, full, count, MPI_FLOAT, mc(c), req);
    } else {
        int count = int_count(mw(c), "all-gather", bytes);
        MPI_Iallgather(shard, count, MPI_BYTE, full, count, MPI_BYTE, mc(c), req);
    }
    return t;
}

static CommTicket mpi_reduce_scatter_f32_start(Comm* c, const float* full, float* shard, size_t n) {
    CommTicket t;
    MPI_Request* req = take_slot(c, &t);
    int count = int_count(mw(c), "reduce-scatter", n);
    MPI_Ireduce_scatter_block(full, shard, count, MPI_FLOAT, MPI_SUM, mc(c), req);
    return t;
}

static void mpi_wait(Comm* c, CommTicket t) {
    MpiWorld* m = mw(c);
    int slot = (int)(t % MAX_IN_FLIGHT);
    if (m->slot_ticket[slot] != t) return;  // already waited
    watch_begin(c, "wait for a non-blocking collective");
    MPI_Wait(&m->requests[slot], MPI_STATUS_IGNORE);
    watch_end(c);
    m->slot_ticket[slot] = 0;
}

static void mpi_finalize(CommWorld* w) {
    MpiWorld* m = (MpiWorld*)w->impl;
    mpi_barrier(w->world);
    if (m->watchdog_running) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->watchdog, NULL);
    }
    for (int i = 0; i < w->n_groups; i++) {
        MPI_Comm_free((MPI_Comm*)w->groups[i]->impl);
        free(w->groups[i]->impl);
        free(w->groups[i]);
    }
    free(w->groups);
    free(w->world->impl);
    free(w->world);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
    free(w);
    MPI_Finalize();
}

static void mpi_abort(CommWorld* w, int code) {
    (void)w;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static const CommOps mpi_ops = {
    "mpi", mpi_split, mpi_barrier, mpi_all_reduce, mpi_broadcast, mpi_gather, mpi_gatherv,
    mpi_all_gather_start, mpi_reduce_scatter_f32_start, mpi_wait, mpi_finalize, mpi_abort,
};

CommWorld* comm_mpi_init(double timeout_s, char* err, size_t errlen) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) { snprintf(err, errlen, "comm mpi: MPI_Init has not been called"); return NULL; }
    CommWorld* w = (CommWorld*)calloc(1, sizeof(CommWorld));
    MpiWorld* m = (MpiWorld*)calloc(1, sizeof(MpiWorld));
    w->ops = &mpi_ops;
    w->timeout_s = timeout_s;
    w->impl = m;
    for (int i = 0; i < MAX_IN_FLIGHT; i++) m->requests[i] = MPI_REQUEST_NULL;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    w->world = new_comm(w, MPI_COMM_WORLD);
    m->rank = w->world->rank;
    // Local rank: the ranks that share this node's memory, under every launcher.
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->world->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &w->local_rank);
    MPI_Comm_size(node, &w->local_size);
    MPI_Comm_free(&node);
    if (timeout_s > 0) {
        if (pthread_create(&m->watchdog, NULL, watchdog_main, w) != 0) {
            snprintf(err, errlen, "comm mpi: cannot start the watchdog thread");
            return NULL;
        }
        m->watchdog_running = 1;
    }
    return w;
}
