#include "fsdp/backend_cpu.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"

typedef struct {
    const ProcessGroup* pg;
    int max_ops;
    MPI_Request* requests;   // [max_ops], MPI_REQUEST_NULL when idle
} CpuBackend;

static int count_or_die(const CpuBackend* c, size_t n) {
    if (n > (size_t)INT_MAX) fatal(c->pg, "fsdp: a shard of %zu elements exceeds MPI's int count", n);
    return (int)n;
}

static MPI_Request* request(CpuBackend* c, int op) {
    if (op < 0 || op >= c->max_ops) fatal(c->pg, "fsdp: collective slot %d out of range", op);
    if (c->requests[op] != MPI_REQUEST_NULL) fatal(c->pg, "fsdp: collective slot %d reused while in flight", op);
    return &c->requests[op];
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
static void cpu_zero(void* ctx, void* p, size_t bytes) { (void)ctx; memset(p, 0, bytes); }

static void cpu_all_gather_start(void* ctx, int op, const void* shard, void* full, size_t n) {
    CpuBackend* c = (CpuBackend*)ctx;
    int count = count_or_die(c, n);
    MPI_Iallgather(shard, count, MPI_FLOAT, full, count, MPI_FLOAT, c->pg->shard_comm, request(c, op));
}

static void cpu_reduce_scatter_start(void* ctx, int op, const void* full, float* shard_out, size_t n) {
    CpuBackend* c = (CpuBackend*)ctx;
    int count = count_or_die(c, n);
    MPI_Ireduce_scatter_block(full, shard_out, count, MPI_FLOAT, MPI_SUM, c->pg->shard_comm, request(c, op));
}

static void cpu_wait(void* ctx, int op) {
    CpuBackend* c = (CpuBackend*)ctx;
    if (op < 0 || op >= c->max_ops) fatal(c->pg, "fsdp: collective slot %d out of range", op);
    MPI_Wait(&c->requests[op], MPI_STATUS_IGNORE);
}

static void cpu_all_reduce_replicas(void* ctx, float* buf, size_t n) {
    CpuBackend* c = (CpuBackend*)ctx;
    // In chunks, so that any size fits MPI's int count.
    const size_t chunk = (size_t)1 << 30;
    for (size_t at = 0; at < n; at += chunk) {
        size_t len = n - at < chunk ? n - at : chunk;
        MPI_Allreduce(MPI_IN_PLACE, buf + at, (int)len, MPI_FLOAT, MPI_SUM, c->pg->replicate_comm);
    }
}

static double cpu_all_reduce_sum(void* ctx, double x) {
    CpuBackend* c = (CpuBackend*)ctx;
    double out = 0.0;
    MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, c->pg->shard_comm);
    return out;
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
    c->requests = (MPI_Request*)malloc((size_t)max_ops * sizeof(MPI_Request));
    for (int i = 0; i < max_ops; i++) c->requests[i] = MPI_REQUEST_NULL;
    memset(be, 0, sizeof(*be));
    be->ctx = c;
    be->param_bytes = sizeof(float);
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->zero = cpu_zero;
    be->all_gather_start = cpu_all_gather_start;
    be->reduce_scatter_start = cpu_reduce_scatter_start;
    be->wait = cpu_wait;
    be->all_reduce_replicas = cpu_all_reduce_replicas;
    be->all_reduce_sum = cpu_all_reduce_sum;
    be->accumulate = cpu_accumulate;
    be->sum_squares = cpu_sum_squares;
    be->adamw = cpu_adamw;
    be->refresh_param_shard = NULL;
}

void fsdp_backend_cpu_free(FsdpBackend* be) {
    CpuBackend* c = (CpuBackend*)be->ctx;
    if (c) { free(c->requests); free(c); }
    be->ctx = NULL;
}
