// The traffic audit (dev/test/test_traffic_emu.sh): the emulated train_gpt --device cuda,
// built with `-include dev/cuda_emu/traffic_audit.h` (train/ includes nothing from dev/:
// device_open calls the hook FSDP_TRAFFIC_AUDIT, defined below, when it is defined) and the
// counting hooks (emu.h, "Traffic counts"), puts each
// operation of its kernel table and each compute operation of its FSDP backend beside what
// the planner (train_gpt --plan) charges for the same call. Every call runs twice: on the
// sim device's table and backend (kernels/kernels_sim.c, fsdp/backend_sim.c: the modelled
// bytes and FLOPs, read off a SimClock), then on the cuda device with the emulator's
// counters read around it. At exit one line per operation and shape:
//
//   traffic: OP SHAPE calls N launches L counted_bytes X planned_bytes Y counted_flops F
//            planned_flops G accessed_bytes A
//
// counted_bytes: distinct 32-byte sectors loaded plus stored, per launch (DRAM traffic
// with caches that keep whatever a launch touches twice); accessed_bytes: every load and
// store of every thread (what a kernel asks of its caches); counted_flops: tensor-core
// (mma.sync) and cuBLASLt multiply-adds x 2 (scalar FLOPs are not counted).
//
// One audit per process (g_audit): the table's and the backend's function pointers are
// replaced by the wrappers below, which find it there. An operation that calls another
// through the table is counted once, as the outer one.
#ifndef FSDP_TRAFFIC_AUDIT_H
#define FSDP_TRAFFIC_AUDIT_H

#include <stdio.h>
#include <string.h>

#include "fsdp/backend_sim.h"
#include "kernels/cuda_common.cuh"
#include "kernels/kernels_sim.h"
#include "train/device.h"

#define FSDP_TRAFFIC_AUDIT traffic_audit_attach

typedef struct {
    char op[40], shape[96];
    long calls;
    long long launches;
    double sectors, accessed, flops, planned_bytes, planned_flops;
} TrafficRow;

typedef struct {
    Kernels inner;          // the cuda device's table, as cuda_open built it
    FsdpBackend inner_be;   // ... and its backend
    Kernels sim;            // the planner's table and backend, on clock
    FsdpBackend sim_be;
    SimClock clock;
    void (*inner_close)(Device* d);
    int depth;              // > 0 inside an audited call
    int print;              // rank 0 prints the table (the ranks' lines would interleave)
    double shard_elements;  // this rank's shard of every unit: the optimizer path's line
    int n_rows;
    TrafficRow rows[256];
} TrafficAudit;

static TrafficAudit* g_audit = NULL;

static double audit_planned_bytes(void) {
    double b = 0;
    for (int p = 0; p < SIM_PHASES; p++) b += g_audit->clock.mem_bytes[p];
    return b;
}
static double audit_planned_flops(void) {
    double f = 0;
    for (int p = 0; p < SIM_PHASES; p++) f += g_audit->clock.flops[p];
    return f;
}

// Runs sim() (the planner's cost) and real() (the cuda device's work), the latter between two
// reads of the emulator's counters, and adds the difference to the row of (op, shape).
template <class Sim, class Real>
static void audit_call(const char* op, const char* shape, Sim sim, Real real) {
    TrafficAudit* A = g_audit;
    if (A->depth) { real(); return; }
    A->depth++;
    CUDA_CHECK(cudaDeviceSynchronize());
    emu::Traffic t0, t1;
    emu::traffic_totals(&t0);
    const double pb0 = audit_planned_bytes(), pf0 = audit_planned_flops();
    sim();
    real();
    CUDA_CHECK(cudaDeviceSynchronize());
    emu::traffic_totals(&t1);
    TrafficRow* r = NULL;
    for (int i = 0; i < A->n_rows && !r; i++)
        if (!strcmp(A->rows[i].op, op) && !strcmp(A->rows[i].shape, shape)) r = &A->rows[i];
    if (!r) {
        if (A->n_rows == (int)(sizeof(A->rows) / sizeof(A->rows[0]))) emu::die("traffic audit: more than 256 rows");
        r = &A->rows[A->n_rows++];
        memset(r, 0, sizeof(*r));
        snprintf(r->op, sizeof(r->op), "%s", op);
        snprintf(r->shape, sizeof(r->shape), "%s", shape);
    }
    r->calls++;
    r->launches += t1.launches - t0.launches;
    r->sectors += (t1.sectors[0] + t1.sectors[1]) - (t0.sectors[0] + t0.sectors[1]);
    r->accessed += (t1.accessed[0] + t1.accessed[1]) - (t0.accessed[0] + t0.accessed[1]);
    r->flops += t1.flops - t0.flops;
    r->planned_bytes += audit_planned_bytes() - pb0;
    r->planned_flops += audit_planned_flops() - pf0;
    A->depth--;
}

#define AUDIT_SHAPE(...)                                  \
    char shape[96];                                       \
    snprintf(shape, sizeof(shape), __VA_ARGS__)

// ---- the kernel table

static void audit_encoder_forward(Kernels* k, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                                  int vb, int ve) {
    AUDIT_SHAPE("B=%d T=%d C=%d", B, T, C);
    audit_call("encoder_forward", shape, [&] { g_audit->sim.encoder_forward(&g_audit->sim, out, inp, wte, wpe, B, T, C, vb, ve); },
               [&] { g_audit->inner.encoder_forward(k, out, inp, wte, wpe, B, T, C, vb, ve); });
}
static void audit_encoder_backward(Kernels* k, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                   int vb, int ve, int accumulate) {
    AUDIT_SHAPE("B=%d T=%d C=%d acc=%d", B, T, C, accumulate);
    audit_call("encoder_backward", shape,
               [&] { g_audit->sim.encoder_backward(&g_audit->sim, dwte, dwpe, dout, inp, B, T, C, vb, ve, accumulate); },
               [&] { g_audit->inner.encoder_backward(k, dwte, dwpe, dout, inp, B, T, C, vb, ve, accumulate); });
}
static void audit_layernorm_forward(Kernels* k, void* out, float* mean, float* rstd, const void* inp, const void* weight,
                                    const void* bias, int N, int C, float eps) {
    AUDIT_SHAPE("N=%d C=%d", N, C);
    audit_call("layernorm_forward", shape,
               [&] { g_audit->sim.layernorm_forward(&g_audit->sim, out, mean, rstd, inp, weight, bias, N, C, eps); },
               [&] { g_audit->inner.layernorm_forward(k, out, mean, rstd, inp, weight, bias, N, C, eps); });
}
static void audit_residual_layernorm_forward(Kernels* k, void* residual, void* out, float* mean, float* rstd, const void* a,
                                             const void* b, const void* weight, const void* bias, int N, int C, float eps) {
    AUDIT_SHAPE("N=%d C=%d", N, C);
    audit_call("residual_layernorm_forward", shape,
               [&] { g_audit->sim.residual_layernorm_forward(&g_audit->sim, residual, out, mean, rstd, a, b, weight, bias, N, C, eps); },
               [&] { g_audit->inner.residual_layernorm_forward(k, residual, out, mean, rstd, a, b, weight, bias, N, C, eps); });
}
static void audit_layernorm_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                     const void* weight, const float* mean, const float* rstd, int N, int C, int accumulate) {
    AUDIT_SHAPE("N=%d C=%d acc=%d", N, C, accumulate);
    audit_call("layernorm_backward", shape,
               [&] { g_audit->sim.layernorm_backward(&g_audit->sim, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate); },
               [&] { g_audit->inner.layernorm_backward(k, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate); });
}
static void audit_matmul_forward(Kernels* k, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                                 int N, int C, int OC) {
    AUDIT_SHAPE("N=%d C=%d OC=%d%s%s", N, C, OC, bias ? " bias" : "", pre_gelu ? " gelu" : "");
    audit_call("matmul_forward", shape,
               [&] { g_audit->sim.matmul_forward(&g_audit->sim, out, pre_gelu, inp, weight, bias, N, C, OC); },
               [&] { g_audit->inner.matmul_forward(k, out, pre_gelu, inp, weight, bias, N, C, OC); });
}
static void audit_matmul_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                  const void* weight, const void* pre_gelu, int N, int C, int OC, int accumulate) {
    AUDIT_SHAPE("N=%d C=%d OC=%d%s%s acc=%d", N, C, OC, dbias ? " bias" : "", pre_gelu ? " gelu" : "", accumulate);
    audit_call("matmul_backward", shape,
               [&] { g_audit->sim.matmul_backward(&g_audit->sim, dinp, dweight, dbias, dout, inp, weight, pre_gelu, N, C, OC, accumulate); },
               [&] { g_audit->inner.matmul_backward(k, dinp, dweight, dbias, dout, inp, weight, pre_gelu, N, C, OC, accumulate); });
}
static void audit_attention_forward(Kernels* k, void* out, float* lse, const void* qkv, int B, int T, int C, int NH, int KVH) {
    AUDIT_SHAPE("B=%d T=%d C=%d NH=%d KVH=%d", B, T, C, NH, KVH);
    audit_call("attention_forward", shape,
               [&] { g_audit->sim.attention_forward(&g_audit->sim, out, lse, qkv, B, T, C, NH, KVH); },
               [&] { g_audit->inner.attention_forward(k, out, lse, qkv, B, T, C, NH, KVH); });
}
static void audit_attention_backward(Kernels* k, void* dqkv, const void* dout, const void* qkv, const void* out,
                                     const float* lse, int B, int T, int C, int NH, int KVH) {
    AUDIT_SHAPE("B=%d T=%d C=%d NH=%d KVH=%d", B, T, C, NH, KVH);
    audit_call("attention_backward", shape,
               [&] { g_audit->sim.attention_backward(&g_audit->sim, dqkv, dout, qkv, out, lse, B, T, C, NH, KVH); },
               [&] { g_audit->inner.attention_backward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, KVH); });
}
static void audit_crossentropy(Kernels* k, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    AUDIT_SHAPE("N=%d V=%d Vp=%d%s", N, V, Vp, dloss != 0.0f ? " backward" : "");
    audit_call("crossentropy", shape,
               [&] { g_audit->sim.crossentropy(&g_audit->sim, logits, losses, targets, N, V, Vp, dloss); },
               [&] { g_audit->inner.crossentropy(k, logits, losses, targets, N, V, Vp, dloss); });
}
static void audit_gelu_forward(Kernels* k, void* out, const void* inp, size_t n) {
    AUDIT_SHAPE("n=%zu", n);
    audit_call("gelu_forward", shape, [&] { g_audit->sim.gelu_forward(&g_audit->sim, out, inp, n); },
               [&] { g_audit->inner.gelu_forward(k, out, inp, n); });
}
static void audit_rmsnorm_forward(Kernels* k, void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                                  float eps) {
    AUDIT_SHAPE("N=%d C=%d", N, C);
    audit_call("rmsnorm_forward", shape, [&] { g_audit->sim.rmsnorm_forward(&g_audit->sim, out, rstd, inp, weight, N, C, eps); },
               [&] { g_audit->inner.rmsnorm_forward(k, out, rstd, inp, weight, N, C, eps); });
}
static void audit_residual_rmsnorm_forward(Kernels* k, void* residual, void* out, float* rstd, const void* a, const void* b,
                                           const void* weight, int N, int C, float eps) {
    AUDIT_SHAPE("N=%d C=%d", N, C);
    audit_call("residual_rmsnorm_forward", shape,
               [&] { g_audit->sim.residual_rmsnorm_forward(&g_audit->sim, residual, out, rstd, a, b, weight, N, C, eps); },
               [&] { g_audit->inner.residual_rmsnorm_forward(k, residual, out, rstd, a, b, weight, N, C, eps); });
}
static void audit_rmsnorm_backward(Kernels* k, void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                                   const float* rstd, int N, int C, int accumulate) {
    AUDIT_SHAPE("N=%d C=%d acc=%d", N, C, accumulate);
    audit_call("rmsnorm_backward", shape,
               [&] { g_audit->sim.rmsnorm_backward(&g_audit->sim, dinp, dweight, dout, inp, weight, rstd, N, C, accumulate); },
               [&] { g_audit->inner.rmsnorm_backward(k, dinp, dweight, dout, inp, weight, rstd, N, C, accumulate); });
}
static void audit_rope(Kernels* k, void* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse) {
    AUDIT_SHAPE("B=%d T=%d NH=%d KVH=%d hs=%d%s", B, T, NH, KVH, hs, inverse ? " inverse" : "");
    audit_call("rope", shape, [&] { g_audit->sim.rope(&g_audit->sim, qkv, B, T, NH, KVH, hs, p, inverse); },
               [&] { g_audit->inner.rope(k, qkv, B, T, NH, KVH, hs, p, inverse); });
}
static void audit_swiglu_forward(Kernels* k, void* out, const void* inp, int N, int F) {
    AUDIT_SHAPE("N=%d F=%d", N, F);
    audit_call("swiglu_forward", shape, [&] { g_audit->sim.swiglu_forward(&g_audit->sim, out, inp, N, F); },
               [&] { g_audit->inner.swiglu_forward(k, out, inp, N, F); });
}
static void audit_swiglu_backward(Kernels* k, void* dinp, const void* dout, const void* inp, int N, int F) {
    AUDIT_SHAPE("N=%d F=%d", N, F);
    audit_call("swiglu_backward", shape, [&] { g_audit->sim.swiglu_backward(&g_audit->sim, dinp, dout, inp, N, F); },
               [&] { g_audit->inner.swiglu_backward(k, dinp, dout, inp, N, F); });
}
static void audit_zero(Kernels* k, void* p, size_t bytes) {
    AUDIT_SHAPE("bytes=%zu", bytes);
    audit_call("zero", shape, [&] { g_audit->sim.zero(&g_audit->sim, p, bytes); }, [&] { g_audit->inner.zero(k, p, bytes); });
}

// ---- the backend's compute operations (its collectives are not kernels: not audited)

static void audit_be_zero(void* ctx, void* p, size_t bytes) {
    AUDIT_SHAPE("bytes=%zu", bytes);
    audit_call("backend zero", shape, [&] { g_audit->sim_be.zero(g_audit->sim_be.ctx, p, bytes); },
               [&] { g_audit->inner_be.zero(ctx, p, bytes); });
}
static void audit_fold_grad(void* ctx, float* dst, const void* src, size_t src_bytes, size_t n, int first, int sum_squares) {
    AUDIT_SHAPE("n=%zu src_bytes=%zu first=%d sumsq=%d", n, src_bytes, first, sum_squares);
    audit_call("fold_grad", shape,
               [&] { g_audit->sim_be.fold_grad(g_audit->sim_be.ctx, dst, src, src_bytes, n, first, sum_squares); },
               [&] { g_audit->inner_be.fold_grad(ctx, dst, src, src_bytes, n, first, sum_squares); });
}
static void audit_folded_sum_squares(void* ctx, double* out) {
    audit_call("folded_sum_squares", "", [&] { g_audit->sim_be.folded_sum_squares(g_audit->sim_be.ctx, out); },
               [&] { g_audit->inner_be.folded_sum_squares(ctx, out); });
}
static void audit_adamw_unit(void* ctx, float* param, float* m, float* v, const float* grad, void* param_shard, size_t n,
                             const uint64_t* decay_toggles, int n_toggles, float lr, float beta1, float beta2, float eps,
                             float weight_decay, int t, const FsdpStepStats* stats, uint64_t unit_stream, size_t global_begin,
                             const SrKeyRun* key_runs, int n_key_runs) {
    AUDIT_SHAPE("n=%zu", n);
    audit_call("adamw_unit", shape,
               [&] { g_audit->sim_be.adamw_unit(g_audit->sim_be.ctx, param, m, v, grad, param_shard, n, decay_toggles, n_toggles, lr,
                                                beta1, beta2, eps, weight_decay, t, stats, unit_stream, global_begin,
                                                key_runs, n_key_runs); },
               [&] { g_audit->inner_be.adamw_unit(ctx, param, m, v, grad, param_shard, n, decay_toggles, n_toggles, lr, beta1,
                                                  beta2, eps, weight_decay, t, stats, unit_stream, global_begin,
                                                  key_runs, n_key_runs); });
}
static void audit_refresh_param_shard(void* ctx, void* param_shard, const float* master, size_t n, uint64_t unit_stream,
                                      size_t global_begin, const SrKeyRun* key_runs, int n_key_runs, int step) {
    AUDIT_SHAPE("n=%zu", n);
    audit_call("refresh_param_shard", shape,
               [&] { g_audit->sim_be.refresh_param_shard(g_audit->sim_be.ctx, param_shard, master, n, unit_stream, global_begin,
                                                         key_runs, n_key_runs, step); },
               [&] { g_audit->inner_be.refresh_param_shard(ctx, param_shard, master, n, unit_stream, global_begin, key_runs,
                                                           n_key_runs, step); });
}
static void audit_step_decide(void* ctx, FsdpStepStats* s, double tokens, float grad_clip) {
    audit_call("step_decide", "", [&] { g_audit->sim_be.step_decide(g_audit->sim_be.ctx, s, tokens, grad_clip); },
               [&] { g_audit->inner_be.step_decide(ctx, s, tokens, grad_clip); });
}
static void audit_sum_into(void* ctx, double* acc, const float* x, size_t n, int accumulate) {
    AUDIT_SHAPE("n=%zu acc=%d", n, accumulate);
    audit_call("sum_into", shape, [&] { g_audit->sim_be.sum_into(g_audit->sim_be.ctx, acc, x, n, accumulate); },
               [&] { g_audit->inner_be.sum_into(ctx, acc, x, n, accumulate); });
}
static void audit_sum_squares_into(void* ctx, double* out, const float* x, size_t n, int accumulate) {
    AUDIT_SHAPE("n=%zu", n);
    audit_call("sum_squares_into", shape, [&] { g_audit->sim_be.sum_squares_into(g_audit->sim_be.ctx, out, x, n, accumulate); },
               [&] { g_audit->inner_be.sum_squares_into(ctx, out, x, n, accumulate); });
}

// The table at exit, then the device's own close.
static void audit_close(Device* d) {
    TrafficAudit* A = g_audit;
    CUDA_CHECK(cudaDeviceSynchronize());
    double opt_counted = 0, opt_planned = 0, steps = 0;
    for (int i = 0; i < A->n_rows && A->print; i++) {
        const TrafficRow* r = &A->rows[i];
        printf("traffic: %s [%s] calls %ld launches %lld counted_bytes %.0f planned_bytes %.0f counted_flops %.0f "
               "planned_flops %.0f accessed_bytes %.0f\n", r->op, r->shape, r->calls, r->launches, r->sectors,
               r->planned_bytes, r->flops, r->planned_flops, r->accessed);
        if (!strcmp(r->op, "fold_grad") || !strcmp(r->op, "adamw_unit") || !strcmp(r->op, "backend zero")) {
            opt_counted += r->sectors;
            opt_planned += r->planned_bytes;
        }
        if (!strcmp(r->op, "step_decide")) steps += (double)r->calls;
    }
    const double per = steps > 0 && A->shard_elements > 0 ? 1.0 / (steps * A->shard_elements) : 0.0;
    if (A->print)
        printf("traffic: optimizer path (gradient zeroing, folds, AdamW) per step: counted %.1f B, planned %.1f B per shard "
           "element\n", opt_counted * per, opt_planned * per);
    fflush(stdout);
    d->kernels = A->inner;
    d->backend = A->inner_be;
    A->inner_close(d);
    delete A;
    g_audit = NULL;
}

static void traffic_audit_attach(Device* d, const ModelLayout* m, const DeviceOptions* o, const ProcessGroup* pg) {
    if (g_audit) emu::die("traffic audit: one device per process");
    TrafficAudit* A = new TrafficAudit();
    g_audit = A;
    A->inner = d->kernels;
    A->inner_be = d->backend;
    A->inner_close = d->close;
    A->print = pg->rank == 0;
    // Rates only set the sim's times, which the audit does not read.
    A->clock.costs = (SimCosts){1e15, 1e12, 1, 1, 1, 1, 0, {0}};
    kernels_sim_init(&A->sim, &A->clock, m->config.padded_vocab_size, 2);
    SimLink link = {1e11, 1e-6};
    SimBackendConfig bc = {0, o->reduce_fp32, pg->shard_size, pg->replicate_size, link, link, 0, 0};
    fsdp_backend_sim_init(&A->sim_be, &A->clock, &bc, 4096);
    for (int u = 0; u < m->n_units; u++) A->shard_elements += (double)m->units[u].shard;
    Kernels* k = &d->kernels;
    k->encoder_forward = audit_encoder_forward;
    k->encoder_backward = audit_encoder_backward;
    k->layernorm_forward = audit_layernorm_forward;
    k->residual_layernorm_forward = audit_residual_layernorm_forward;
    k->layernorm_backward = audit_layernorm_backward;
    k->matmul_forward = audit_matmul_forward;
    k->matmul_backward = audit_matmul_backward;
    k->attention_forward = audit_attention_forward;
    k->attention_backward = audit_attention_backward;
    k->crossentropy = audit_crossentropy;
    k->gelu_forward = audit_gelu_forward;
    k->rmsnorm_forward = audit_rmsnorm_forward;
    k->residual_rmsnorm_forward = audit_residual_rmsnorm_forward;
    k->rmsnorm_backward = audit_rmsnorm_backward;
    k->rope = audit_rope;
    k->swiglu_forward = audit_swiglu_forward;
    k->swiglu_backward = audit_swiglu_backward;
    k->zero = audit_zero;
    FsdpBackend* be = &d->backend;
    be->zero = audit_be_zero;
    be->fold_grad = audit_fold_grad;
    be->folded_sum_squares = audit_folded_sum_squares;
    be->adamw_unit = audit_adamw_unit;
    be->refresh_param_shard = audit_refresh_param_shard;
    be->step_decide = audit_step_decide;
    be->sum_into = audit_sum_into;
    be->sum_squares_into = audit_sum_squares_into;
    d->close = audit_close;
}

#endif
