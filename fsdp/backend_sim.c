// The sim FsdpBackend: costs only (backend_sim.h).
#include "fsdp/backend_sim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    SimClock* clock;
    SimBackendConfig cfg;
    int max_ops;
    double* op_end;           // [max_ops] when the collective in that slot ends (comm clock)
    uintptr_t next;           // the next fake address
    // --offload optimizer: the copy stream's and the host thread's clocks, and per unit when
    // its gradient copy, its host work and its upload end
    double copy, host;
    double *to_host_end, *host_end, *to_device_end;
    int units;
} SimBackend;

double sim_ring_time(const SimLink* link, int ranks, double chunk_bytes, int all_reduce) {
    if (ranks <= 1) return 0.0;
    double t = (ranks - 1) * (link->latency + chunk_bytes / link->bw);
    return all_reduce ? 2.0 * t : t;
}

// Fake device addresses, 256-byte aligned like the real ones, far from anything mapped; the
// sim never dereferences them (nor does the schedule: it only offsets pointers).
static void* sim_alloc(void* ctx, size_t bytes) {
    SimBackend* s = (SimBackend*)ctx;
    void* p = (void*)s->next;
    s->next += (bytes + 255) / 256 * 256 + 256;
    return p;
}
static void sim_release(void* ctx, void* p) { (void)ctx; (void)p; }
static void sim_copy(void* ctx, void* dst, const void* src, size_t bytes) { (void)ctx; }
static void sim_zero(void* ctx, void* p, size_t bytes) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 0, (double)bytes);
}

// A collective in slot op taking `seconds` and moving `bytes` to or from this rank.
static void start_collective(SimBackend* s, int op, double seconds, double bytes) {
    SimClock* c = s->clock;
    double start = c->comm > c->compute ? c->comm : c->compute;
    c->comm = start + seconds;
    c->comm_busy[c->phase] += seconds;
    c->comm_bytes[c->phase] += bytes;
    if (op >= 0 && op < s->max_ops) s->op_end[op] = c->comm;
}
// The compute stream waits for the comm clock to reach `end`.
static void wait_until(SimClock* c, double end) {
    if (end > c->compute) {
        c->exposed[c->phase] += end - c->compute;
        c->compute = end;
    }
}

static size_t elem_bytes(const SimBackend* s) { return s->cfg.fp32 ? 4 : 2; }

static void sim_all_gather_start(void* ctx, int op, const void* shard, void* full, size_t n) {
    SimBackend* s = (SimBackend*)ctx;
    int p = s->cfg.shard_size;
    double chunk = (double)n * elem_bytes(s);
    start_collective(s, op, sim_ring_time(&s->cfg.shard_link, p, chunk, 0), (p - 1) * chunk);
}
static void sim_reduce_scatter_start(void* ctx, int op, const void* full, void* shard_out, size_t n) {
    SimBackend* s = (SimBackend*)ctx;
    int p = s->cfg.shard_size;
    double chunk = (double)n * (s->cfg.fp32 || s->cfg.reduce_fp32 ? 4 : 2);
    start_collective(s, op, sim_ring_time(&s->cfg.shard_link, p, chunk, 0), (p - 1) * chunk);
}
static void sim_wait(void* ctx, int op) {
    SimBackend* s = (SimBackend*)ctx;
    if (op >= 0 && op < s->max_ops) wait_until(s->clock, s->op_end[op]);
}
static void sim_all_reduce_replicas(void* ctx, float* buf, size_t n) {
    SimBackend* s = (SimBackend*)ctx;
    int r = s->cfg.replicate_size;
    double chunk = (double)n * sizeof(float) / r;
    start_collective(s, -1, sim_ring_time(&s->cfg.replica_link, r, chunk, 1), 2.0 * (r - 1) * chunk);
    wait_until(s->clock, s->clock->comm);  // blocking
}
// The step's decision: the loss and the sum of squares all-reduced (two doubles, waited for:
// the decision follows it), then one small kernel on the bf16 profiles (the fp32 one decides
// on the host) reading and writing s. s is never read: a fake address on the bf16 profiles.
static void sim_step_decide(void* ctx, FsdpStepStats* st, double tokens, float grad_clip) {
    SimBackend* s = (SimBackend*)ctx;
    start_collective(s, -1, sim_ring_time(&s->cfg.shard_link, s->cfg.shard_size, 2 * sizeof(double), 1), 0);
    if (s->cfg.replicate_size > 1)
        start_collective(s, -1, sim_ring_time(&s->cfg.replica_link, s->cfg.replicate_size, sizeof(double), 1), 0);
    wait_until(s->clock, s->clock->comm);
    if (!s->cfg.fp32) sim_kernel(s->clock, SIM_WORK_VECTOR, 0, 2.0 * sizeof(FsdpStepStats));  // read, then written
}
// The per-token losses' sum (one kernel reading them) and the sum of squares of a shard.
static void sim_sum_into(void* ctx, double* acc, const float* x, size_t n, int accumulate) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, (double)n, 4.0 * n);
}
static void sim_sum_squares_into(void* ctx, double* out, const float* x, size_t n, int accumulate) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 2.0 * n, 4.0 * n);
}
// The decision's copy to the host: a few bytes, behind the step.
static void sim_step_stats_fetch(void* ctx, FsdpStepStats* host, const FsdpStepStats* st) {}
static void sim_step_stats_wait(void* ctx) {}
static void sim_accumulate(void* ctx, float* dst, const float* src, size_t n) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, (double)n, 12.0 * n);
}
static double sim_sum_squares(void* ctx, const float* x, size_t n) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 2.0 * n, 4.0 * n);
    return 0.0;
}
// AdamW: master, m, v, grad read; master, m, v written.
static void sim_adamw(void* ctx, float* param, float* m, float* v, const float* grad, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int t, float grad_scale) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 15.0 * n, 28.0 * n);
}
static void sim_refresh_param_shard(void* ctx, void* param_shard, const float* master, size_t n, uint64_t unit_stream,
                                    size_t global_begin, const SrKeyRun* key_runs, int n_key_runs, int step) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 4.0 * n, 6.0 * n);
}
static void sim_fold_grad(void* ctx, float* dst, const void* src, size_t src_bytes, size_t n, int first, int sum_squares) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, (sum_squares ? 3.0 : 1.0) * n,
               (double)n * (src_bytes + (first ? 4 : 8)));
}
// The folds' sum copied out, then cleared: two launches of one double each.
static void sim_folded_sum_squares(void* ctx, double* out) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 0, 2.0 * sizeof(double));
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 0, sizeof(double));
}
// The fused AdamW also writes the bf16 shard.
static void sim_adamw_unit(void* ctx, float* param, float* m, float* v, const float* grad, void* param_shard, size_t n,
                           const uint64_t* decay_toggles, int n_toggles, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int t, const FsdpStepStats* stats, uint64_t unit_stream,
                           size_t global_begin, const SrKeyRun* key_runs, int n_key_runs) {
    sim_kernel(((SimBackend*)ctx)->clock, SIM_WORK_VECTOR, 18.0 * n, 30.0 * n);
}


// ---- --offload optimizer
static void offload_grow(SimBackend* s, int u) {
    if (u < s->units) return;
    int n = u + 1 > 2 * s->units ? u + 1 : 2 * s->units;
    s->to_host_end = (double*)realloc(s->to_host_end, (size_t)n * sizeof(double));
    s->host_end = (double*)realloc(s->host_end, (size_t)n * sizeof(double));
    s->to_device_end = (double*)realloc(s->to_device_end, (size_t)n * sizeof(double));
    for (int i = s->units; i < n; i++) s->to_host_end[i] = s->host_end[i] = s->to_device_end[i] = 0.0;
    s->units = n;
}
static double later(double a, double b) { return a > b ? a : b; }
static void sim_offload_fold(void* ctx, int u, float* host_grad, void* host_stage, const void* src, size_t src_bytes,
                             size_t n, int op, int first, int sum_squares) {
    SimBackend* s = (SimBackend*)ctx;
    offload_grow(s, u);
    const double ready = op >= 0 && op < s->max_ops ? s->op_end[op] : s->clock->compute;
    s->copy = later(s->copy, ready) + (double)n * src_bytes / s->cfg.host_link_bw;
    s->to_host_end[u] = s->copy;
    if (op >= 0) s->clock->comm = later(s->clock->comm, s->copy);  // the next output into src
    s->host = later(s->host, s->copy) + (double)n * (src_bytes + (first ? 4 : 8)) / s->cfg.host_mem_bw;
    s->host_end[u] = s->host;
}
static void sim_offload_guard(void* ctx, int u, int upload) {
    SimBackend* s = (SimBackend*)ctx;
    offload_grow(s, u);
    wait_until(s->clock, upload ? s->to_device_end[u] : s->to_host_end[u]);
}
static double sim_offload_sum_squares(void* ctx, const float* host_grad, size_t n) { return 0.0; }
// The host waits for the step's compute (the loss), then decides; the uploads follow the
// step's last reads.
static void sim_offload_decide(void* ctx, FsdpStepStats* st, const double* d_loss_sum, double tokens, float grad_clip) {
    SimBackend* s = (SimBackend*)ctx;
    const double t = later(s->clock->compute, s->host) +
                     sim_ring_time(&s->cfg.shard_link, s->cfg.shard_size, 2 * sizeof(double), 1);
    s->host = t;
    s->copy = later(s->copy, s->clock->compute);
}
static void sim_offload_adamw(void* ctx, int u, float* param, float* m, float* v, const float* grad, void* host_stage,
                              size_t n, const uint64_t* decay_toggles, int n_toggles, float lr, float beta1, float beta2,
                              float eps, float weight_decay, int t, const FsdpStepStats* stats, uint64_t unit_stream,
                              size_t global_begin, const SrKeyRun* key_runs, int n_key_runs) {
    SimBackend* s = (SimBackend*)ctx;
    offload_grow(s, u);
    s->host += 30.0 * (double)n / s->cfg.host_mem_bw;  // master, m, v, grad read; master, m, v, bf16 written
    s->host_end[u] = s->host;
}
static void sim_offload_round(void* ctx, int u, void* host_stage, const float* master, size_t n, uint64_t unit_stream,
                              size_t global_begin, const SrKeyRun* key_runs, int n_key_runs, int step) {
    SimBackend* s = (SimBackend*)ctx;
    offload_grow(s, u);
    s->host += 6.0 * (double)n / s->cfg.host_mem_bw;
    s->host_end[u] = s->host;
}
static void sim_offload_upload(void* ctx, int u, void* param_shard, const void* host_stage, size_t bytes,
                               int read_by_compute) {
    SimBackend* s = (SimBackend*)ctx;
    offload_grow(s, u);
    s->copy = later(s->copy, s->host_end[u]) + (double)bytes / s->cfg.host_link_bw;
    s->to_device_end[u] = s->copy;
    if (!read_by_compute) s->clock->comm = later(s->clock->comm, s->copy);  // the gather waits for it
}
static void sim_offload_drain(void* ctx) {}
// HSDP on the host: after the folds, a ring all-reduce over the replicas' links.
static void sim_offload_all_reduce_replicas(void* ctx, float* host_grad, size_t n) {
    SimBackend* s = (SimBackend*)ctx;
    const int r = s->cfg.replicate_size;
    s->host = later(s->host, s->clock->compute) + sim_ring_time(&s->cfg.replica_link, r, (double)n * sizeof(float) / r, 1);
}

void fsdp_backend_sim_init(FsdpBackend* be, SimClock* clock, const SimBackendConfig* cfg, int max_ops) {
    SimBackend* s = (SimBackend*)calloc(1, sizeof(SimBackend));
    s->clock = clock;
    s->cfg = *cfg;
    s->max_ops = max_ops;
    s->op_end = (double*)calloc((size_t)max_ops, sizeof(double));
    s->next = (uintptr_t)1 << 46;
    memset(be, 0, sizeof(*be));
    be->ctx = s;
    be->param_bytes = elem_bytes(s);
    // The engine's own rule (fsdp_init): a 2-byte reduce output needs the fused fold.
    be->reduce_out_bytes = cfg->fp32 || cfg->reduce_fp32 ? 4 : 2;
    be->host_is_device = cfg->fp32;
    be->alloc = sim_alloc;
    be->release = sim_release;
    be->alloc_host = sim_alloc;
    be->release_host = sim_release;
    be->copy_to_host = sim_copy;
    be->copy_to_device = sim_copy;
    be->zero = sim_zero;
    be->all_gather_start = sim_all_gather_start;
    be->reduce_scatter_start = sim_reduce_scatter_start;
    be->wait = sim_wait;
    be->all_reduce_replicas = sim_all_reduce_replicas;
    be->step_decide = sim_step_decide;
    be->accumulate = sim_accumulate;
    be->sum_squares = sim_sum_squares;
    be->adamw = sim_adamw;
    if (!cfg->fp32) {
        be->refresh_param_shard = sim_refresh_param_shard;
        be->fold_grad = sim_fold_grad;
        be->folded_sum_squares = sim_folded_sum_squares;
        be->adamw_unit = sim_adamw_unit;
        be->sum_into = sim_sum_into;
        be->sum_squares_into = sim_sum_squares_into;
        be->step_stats_fetch = sim_step_stats_fetch;
        be->step_stats_wait = sim_step_stats_wait;
        if (cfg->host_link_bw > 0 && cfg->host_mem_bw > 0) {
            be->offload_fold = sim_offload_fold;
            be->offload_guard = sim_offload_guard;
            be->offload_sum_squares = sim_offload_sum_squares;
            be->offload_decide = sim_offload_decide;
            be->offload_adamw = sim_offload_adamw;
            be->offload_round = sim_offload_round;
            be->offload_upload = sim_offload_upload;
            be->offload_drain = sim_offload_drain;
            be->offload_all_reduce_replicas = sim_offload_all_reduce_replicas;
        }
    }
}

void fsdp_backend_sim_free(FsdpBackend* be) {
    SimBackend* s = (SimBackend*)be->ctx;
    if (s) { free(s->op_end); free(s->to_host_end); free(s->host_end); free(s->to_device_end); free(s); }
    be->ctx = NULL;
}
