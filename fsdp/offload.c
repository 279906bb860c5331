// --offload optimizer's host worker (offload.h). Compiled with -ffp-contract=off (Makefile):
// the AdamW arithmetic must not be fused into FMAs the GPU kernel does not use.
#include "fsdp/offload.h"

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/optimizer_math.h"

enum { TASK_FOLD, TASK_ADAMW, TASK_ROUND };

typedef struct {
    int kind, unit;
    // fold
    float* dst;
    const void* src;
    size_t src_bytes, n;
    int first, sum_squares;
    // adamw
    HostAdamw adamw;
    // round
    uint16_t* round_dst;
    const float* round_src;
    uint64_t seed;
    int step;
    size_t global_begin;
    const SrKeyRun* key_runs;
    int n_key_runs;
} Task;

struct HostOptimizer {
    int n_units, threads;
    double timeout_s;
    int (*copy_landed)(void* ctx, int u);
    void* ctx;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t queued_cv, done_cv;
    Task* ring;                  // [cap], tasks [head, tail) modulo cap
    size_t cap, head, tail;
    uint64_t* unit_queued;       // [n_units] tasks queued for u so far
    uint64_t* unit_done;         // ... and run
    double* unit_sumsq;          // [n_units] the folds' sums of squares this step
    int stop;
    char error[256];             // set once; every waiter reports it
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Fixed chunks (boundaries depend on n only), partial sums added in chunk order.
#define SQ_CHUNKS 64
static double fold(float* dst, const void* src, size_t src_bytes, size_t n, int first, int squares) {
    double partial[SQ_CHUNKS];
    const size_t chunk = (n + SQ_CHUNKS - 1) / SQ_CHUNKS;
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < SQ_CHUNKS; c++) {
        const size_t lo = (size_t)c * chunk < n ? (size_t)c * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) {
            float x;
            if (src_bytes == 2) {
                const uint32_t bits = (uint32_t)((const uint16_t*)src)[i] << 16;
                memcpy(&x, &bits, sizeof x);
            } else {
                x = ((const float*)src)[i];
            }
            const float y = first ? x : dst[i] + x;
            dst[i] = y;
            if (squares) s += (double)y * (double)y;
        }
        partial[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < SQ_CHUNKS; c++) total += partial[c];
    return total;
}

double host_sum_squares(const float* x, size_t n) {
    double partial[SQ_CHUNKS];
    const size_t chunk = (n + SQ_CHUNKS - 1) / SQ_CHUNKS;
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < SQ_CHUNKS; c++) {
        const size_t lo = (size_t)c * chunk < n ? (size_t)c * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];
        partial[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < SQ_CHUNKS; c++) total += partial[c];
    return total;
}

static inline uint16_t round_bf16(float x, uint64_t key, uint64_t index) {
    if (sr_finite(x)) return sr_round_bf16_bits(x, sr_bits(key, index));
    uint32_t u;  // inf unchanged, NaN quiet
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u >> 16) | ((u & 0x007fffffu) ? 0x0040u : 0u));
}

// The rounding key index of element i of a unit, for i rising through a block: *at is the
// key run of the previous one (the block's first: sr_run_find), walked on as the kernels do.
static inline uint64_t key_index_walk(const SrKeyRun* runs, int n_runs, int* at, uint64_t i) {
    if (n_runs == 0) return i;
    while (*at + 1 < n_runs && runs[*at + 1].local_begin <= i) (*at)++;
    return sr_run_index(&runs[*at], i);
}

// Blocks of elements per OpenMP iteration: each finds its weight decay and its key run by a
// binary search at its start, then walks them.
#define ADAMW_BLOCK 4096
static void adamw(const HostAdamw* a) {
    if (a->skip || a->n == 0) return;
    const float bc1 = (float)(1.0 - pow((double)a->beta1, (double)a->t));
    const float bc2 = (float)(1.0 - pow((double)a->beta2, (double)a->t));
    const float omb1 = 1.0f - a->beta1, omb2 = 1.0f - a->beta2;
    const uint64_t key = sr_key(a->seed, a->t);
    const size_t blocks = (a->n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        const size_t lo = b * ADAMW_BLOCK, hi = lo + ADAMW_BLOCK < a->n ? lo + ADAMW_BLOCK : a->n;
        int passed = 0, l = 0, r = a->n_toggles;  // toggles <= lo
        while (l < r) {
            const int mid = (l + r) / 2;
            if (a->decay_toggles[mid] <= lo) l = mid + 1;
            else r = mid;
        }
        passed = l;
        int run = sr_run_find(a->key_runs, a->n_key_runs, a->global_begin + lo);
        for (size_t i = lo; i < hi; i++) {
            while (passed < a->n_toggles && a->decay_toggles[passed] <= i) passed++;
            const float wd = (passed & 1) ? a->weight_decay : 0.0f;
            float p = a->param[i], m = a->m[i], v = a->v[i];
            adamw_element(&p, &m, &v, a->grad[i] * a->clip_scale, a->lr, a->beta1, a->beta2, omb1, omb2, bc1, bc2,
                          a->eps, wd);
            a->param[i] = p;
            a->m[i] = m;
            a->v[i] = v;
            a->param_bf16[i] = round_bf16(p, key, key_index_walk(a->key_runs, a->n_key_runs, &run, a->global_begin + i));
        }
    }
}

static void round_shard(const Task* t) {
    const uint64_t key = sr_key(t->seed, t->step);
    const size_t blocks = (t->n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        const size_t lo = b * ADAMW_BLOCK, hi = lo + ADAMW_BLOCK < t->n ? lo + ADAMW_BLOCK : t->n;
        int run = sr_run_find(t->key_runs, t->n_key_runs, t->global_begin + lo);
        for (size_t i = lo; i < hi; i++)
            t->round_dst[i] = round_bf16(t->round_src[i], key,
                                         key_index_walk(t->key_runs, t->n_key_runs, &run, t->global_begin + i));
    }
}

// The worker waits for unit u's copy: yield first, then 50 us sleeps, up to the deadline.
static int await_copy(HostOptimizer* h, int u) {
    const double t0 = now_s();
    unsigned spins = 0;
    for (;;) {
        const int landed = h->copy_landed(h->ctx, u);
        if (landed > 0) return 0;
        if (landed < 0) {
            snprintf(h->error, sizeof h->error, "offload: the gradient copy of unit %d to the host failed", u);
            return 1;
        }
        if (h->timeout_s > 0 && now_s() - t0 > h->timeout_s) {
            snprintf(h->error, sizeof h->error,
                     "offload: the gradient copy of unit %d to the host did not land within %.0f s (the GPU is stuck)",
                     u, h->timeout_s);
            return 1;
        }
        if (spins++ < 1000) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

static void* worker(void* arg) {
    HostOptimizer* h = (HostOptimizer*)arg;
    omp_set_num_threads(h->threads);  // (a new thread starts from the defaults)
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && h->head == h->tail) pthread_cond_wait(&h->queued_cv, &h->mu);
        if (h->head == h->tail) break;  // stopping, nothing left
        Task t = h->ring[h->head % h->cap];
        const int failed = h->error[0] != 0;
        pthread_mutex_unlock(&h->mu);
        if (!failed) {  // after an error, tasks are only retired (waiters report the error)
            if (t.kind == TASK_FOLD) {
                if (await_copy(h, t.unit) == 0) {
                    const double s = fold(t.dst, t.src, t.src_bytes, t.n, t.first, t.sum_squares);
                    if (t.sum_squares) h->unit_sumsq[t.unit] = s;  // (only this thread writes it)
                }
            } else if (t.kind == TASK_ADAMW) {
                adamw(&t.adamw);
            } else {
                round_shard(&t);
            }
        }
        pthread_mutex_lock(&h->mu);
        h->head++;
        h->unit_done[t.unit]++;
        pthread_cond_broadcast(&h->done_cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

HostOptimizer* host_optimizer_create(int n_units, int threads, double timeout_s, int (*copy_landed)(void* ctx, int u),
                                     void* ctx) {
    HostOptimizer* h = (HostOptimizer*)calloc(1, sizeof(HostOptimizer));
    if (!h) return NULL;
    h->n_units = n_units;
    h->threads = threads > 0 ? threads : 1;
    h->timeout_s = timeout_s;
    h->copy_landed = copy_landed;
    h->ctx = ctx;
    h->cap = 4 * (size_t)n_units + 16;  // a step queues at most a fold and an AdamW per unit
    h->ring = (Task*)calloc(h->cap, sizeof(Task));
    h->unit_queued = (uint64_t*)calloc((size_t)n_units, sizeof(uint64_t));
    h->unit_done = (uint64_t*)calloc((size_t)n_units, sizeof(uint64_t));
    h->unit_sumsq = (double*)calloc((size_t)n_units, sizeof(double));
    if (!h->ring || !h->unit_queued || !h->unit_done || !h->unit_sumsq) { host_optimizer_free(h); return NULL; }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->queued_cv, NULL);
    pthread_cond_init(&h->done_cv, NULL);
    if (pthread_create(&h->thread, NULL, worker, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->queued_cv);
        pthread_cond_destroy(&h->done_cv);
        h->thread = 0;
        free(h->ring); free(h->unit_queued); free(h->unit_done); free(h->unit_sumsq); free(h);
        return NULL;
    }
    return h;
}

void host_optimizer_free(HostOptimizer* h) {
    if (!h) return;
    if (h->thread) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_broadcast(&h->queued_cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->thread, NULL);
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->queued_cv);
        pthread_cond_destroy(&h->done_cv);
    }
    free(h->ring); free(h->unit_queued); free(h->unit_done); free(h->unit_sumsq);
    free(h);
}

static void push(HostOptimizer* h, const Task* t) {
    pthread_mutex_lock(&h->mu);
    while (h->tail - h->head == h->cap) pthread_cond_wait(&h->done_cv, &h->mu);  // full: wait for the worker
    h->ring[h->tail % h->cap] = *t;
    h->tail++;
    h->unit_queued[t->unit]++;
    pthread_cond_signal(&h->queued_cv);
    pthread_mutex_unlock(&h->mu);
}

void host_optimizer_fold(HostOptimizer* h, int u, float* dst, const void* src, size_t src_bytes, size_t n, int first,
                         int sum_squares) {
    const Task t = {.kind = TASK_FOLD, .unit = u, .dst = dst, .src = src, .src_bytes = src_bytes, .n = n,
                    .first = first, .sum_squares = sum_squares};
    push(h, &t);
}

void host_optimizer_adamw(HostOptimizer* h, int u, const HostAdamw* a) {
    const Task t = {.kind = TASK_ADAMW, .unit = u, .adamw = *a};
    push(h, &t);
}

void host_optimizer_round(HostOptimizer* h, int u, uint16_t* dst, const float* master, size_t n, uint64_t seed,
                          int step, size_t global_begin, const SrKeyRun* key_runs, int n_key_runs) {
    const Task t = {.kind = TASK_ROUND, .unit = u, .round_dst = dst, .round_src = master, .n = n, .seed = seed,
                    .step = step, .global_begin = global_begin, .key_runs = key_runs, .n_key_runs = n_key_runs};
    push(h, &t);
}

static int wait_for(HostOptimizer* h, int u, char* err, size_t errlen) {
    pthread_mutex_lock(&h->mu);
    if (u >= 0) {
        while (h->unit_done[u] < h->unit_queued[u]) pthread_cond_wait(&h->done_cv, &h->mu);
    } else {
        while (h->head != h->tail) pthread_cond_wait(&h->done_cv, &h->mu);
    }
    const int failed = h->error[0] != 0;
    if (failed) snprintf(err, errlen, "%s", h->error);
    pthread_mutex_unlock(&h->mu);
    return failed;
}

int host_optimizer_wait_unit(HostOptimizer* h, int u, char* err, size_t errlen) { return wait_for(h, u, err, errlen); }
int host_optimizer_drain(HostOptimizer* h, char* err, size_t errlen) { return wait_for(h, -1, err, errlen); }

double host_optimizer_take_sum_squares(HostOptimizer* h) {
    double s = 0.0;
    for (int u = 0; u < h->n_units; u++) {
        s += h->unit_sumsq[u];
        h->unit_sumsq[u] = 0.0;
    }
    return s;
}
