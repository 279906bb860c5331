// fsdp/: the FSDP / ZeRO-3 engine (fsdp.h: sharded state, gathered-parameter slots, the
// gather / prefetch / reduce-scatter schedule, sharded AdamW), the flat units it shards
// (flat_unit.h), and its backends: this file the cpu one, backend_cuda.cuh the GPU one.
#include "fsdp/backend_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"

typedef struct {
    const ProcessGroup* pg;
    int max_ops;
    CommTicket* tickets;     // [max_ops], 0 when idle
} CpuBackend;

static CommTicket* ticket(CpuBackend* c, int op) {
    if (op < 0 || op >= c->max_ops) fatal(c->pg, "fsdp: collective slot %d out of range", op);
    if (c->tickets[op] != 0) fatal(c->pg, "fsdp: collective slot %d reused while in flight", op);
    return &c->tickets[op];
}

static void* cpu_alloc(void* ctx, size_t bytes) {
    CpuBackend* c = (CpuBackend*)ctx;
    // 64-byte aligned for vector loads; memset touches every page so that resident memory
    // (what the run reports) matches what the budget says.
    void* p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0) fatal(c->pg, "out of host memory allocating %zu bytes", bytes);
    memset(p, 0, rounded);
    return p;
}
static void cpu_release(void* ctx, void* p) { (void)ctx; free(p); }
// Host memory is device memory here: the engine's host mirror is the state itself, so these
// copies only run when a caller copies between distinct buffers.
static void cpu_copy(void* ctx, void* dst, const void* src, size_t bytes) {
    (void)ctx;
    if (dst != src) memcpy(dst, src, bytes);
}
static void cpu_zero(void* ctx, void* p, size_t bytes) { (void)ctx; memset(p, 0, bytes); }

static void cpu_all_gather_start(void* ctx, int op, const void* shard, void* full, size_t n) {
    CpuBackend* c = (CpuBackend*)ctx;
    *ticket(c, op) = comm_all_gather_start(c->pg->shard_comm, shard, full, n * sizeof(float));
}

static void cpu_reduce_scatter_start(void* ctx, int op, const void* full, void* shard_out, size_t n) {
    CpuBackend* c = (CpuBackend*)ctx;
    *ticket(c, op) = comm_reduce_scatter_f32_start(c->pg->shard_comm, (const float*)full, (float*)shard_out, n);
}

static void cpu_wait(void* ctx, int op) {
    CpuBackend* c = (CpuBackend*)ctx;
    if (op < 0 || op >= c->max_ops) fatal(c->pg, "fsdp: collective slot %d out of range", op);
    comm_wait(c->pg->shard_comm, c->tickets[op]);
    c->tickets[op] = 0;
}

static void cpu_all_reduce_replicas(void* ctx, float* buf, size_t n) {
    CpuBackend* c = (CpuBackend*)ctx;
    comm_all_reduce_f32_sum(c->pg->replicate_comm, buf, n);
}

static void cpu_all_reduce_tp(void* ctx, void* buf, size_t n) {
    CpuBackend* c = (CpuBackend*)ctx;
    comm_all_reduce_f32(c->pg->tp_comm, (float*)buf, n, COMM_SUM);
}

// The world's loss sum (shard group, tensor-parallel group, then replicas) and the sum of
// squares of the shard group and the TP group (every replica holds the same shards after the
// HSDP all-reduce; the first rank of a TP group alone has counted the losses and the
// replicated tensors), then the decision.
static void cpu_step_decide(void* ctx, FsdpStepStats* s, double tokens, float grad_clip) {
    CpuBackend* c = (CpuBackend*)ctx;
    comm_all_reduce_f64(c->pg->shard_comm, &s->loss_sum, 2, COMM_SUM);
    if (c->pg->tp_size > 1) comm_all_reduce_f64(c->pg->tp_comm, &s->loss_sum, 2, COMM_SUM);
    if (c->pg->replicate_size > 1) comm_all_reduce_f64(c->pg->replicate_comm, &s->loss_sum, 1, COMM_SUM);
    fsdp_decide_from_sums(s, tokens, grad_clip);
}

static void cpu_accumulate(void* ctx, float* dst, const float* src, size_t n) {
    (void)ctx;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static double cpu_sum_squares(void* ctx, const float* x, size_t n) { (void)ctx; return sum_squares(x, n); }

static void cpu_adamw(void* ctx, float* param, float* m, float* v, const float* grad, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                      float grad_scale) {
    (void)ctx;
    adamw_update(param, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

void fsdp_backend_cpu_init(FsdpBackend* be, const ProcessGroup* pg, int max_ops) {
    CpuBackend* c = (CpuBackend*)calloc(1, sizeof(CpuBackend));
    c->pg = pg;
    c->max_ops = max_ops;
    c->tickets = (CommTicket*)calloc((size_t)max_ops, sizeof(CommTicket));
    memset(be, 0, sizeof(*be));
    be->ctx = c;
    be->param_bytes = sizeof(float);
    be->reduce_out_bytes = sizeof(float);
    be->host_is_device = 1;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->alloc_host = cpu_alloc;
    be->release_host = cpu_release;
    be->copy_to_host = cpu_copy;
    be->copy_to_device = cpu_copy;
    be->zero = cpu_zero;
    be->all_gather_start = cpu_all_gather_start;
    be->reduce_scatter_start = cpu_reduce_scatter_start;
    be->wait = cpu_wait;
    be->all_reduce_replicas = cpu_all_reduce_replicas;
    be->all_reduce_tp = cpu_all_reduce_tp;
    be->step_decide = cpu_step_decide;
    be->accumulate = cpu_accumulate;
    be->sum_squares = cpu_sum_squares;
    be->adamw = cpu_adamw;
    be->refresh_param_shard = NULL;
}

void fsdp_backend_cpu_free(FsdpBackend* be) {
    CpuBackend* c = (CpuBackend*)be->ctx;
    if (c) { free(c->tickets); free(c); }
    be->ctx = NULL;
}
