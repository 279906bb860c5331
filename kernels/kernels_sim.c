// The sim device's kernel table: costs from shapes (kernels_sim.h). The FLOP and byte counts
// follow what the kernels read and write (e bytes per activation or parameter element, fp32
// statistics); they are a model, not the kernels' exact traffic (caches, fusion details).
#include "kernels/kernels_sim.h"

#include <stdlib.h>
#include <string.h>

void sim_clock_reset(SimClock* c) {
    SimCosts keep = c->costs;
    double compute = c->compute, comm = c->comm;
    SimPhase phase = c->phase;
    SimGroup group = c->group;
    memset(c, 0, sizeof(*c));
    c->costs = keep;
    c->compute = compute;
    c->comm = comm;
    c->phase = phase;
    c->group = group;
}

SimGroup sim_group_of_kind(KernelKind kind) {
    return kind == KERNEL_MATMUL || kind == KERNEL_LM_HEAD ? SIM_GROUP_MATMUL
         : kind == KERNEL_ATTENTION                        ? SIM_GROUP_ATTENTION
                                                           : SIM_GROUP_VECTOR;
}

double sim_kernel(SimClock* c, SimWork work, double flops, double bytes) {
    const SimCosts* s = &c->costs;
    double eff = work == SIM_WORK_MATMUL ? s->matmul_eff : work == SIM_WORK_ATTENTION ? s->attention_eff : s->vector_eff;
    double t_flops = flops > 0 ? flops / (s->peak_flops * eff) : 0.0;
    double t_bytes = bytes > 0 ? bytes / (s->mem_bw * s->mem_eff) : 0.0;
    // A calibration's factor applies to the whole kernel (its launch included), as a real
    // run's profile times it.
    const SimGroup g = c->phase == SIM_OPTIMIZER ? SIM_GROUP_OPTIMIZER : c->group;
    const double scale = g < SIM_GROUPS && s->time_scale[g] > 0 ? s->time_scale[g] : 1.0;
    t_flops *= scale;
    t_bytes *= scale;
    const double launch = s->launch_s * scale;
    double t = (t_flops > t_bytes ? t_flops : t_bytes) + launch;
    if (t_flops > t_bytes) c->bound_time[work == SIM_WORK_ATTENTION ? SIM_BOUND_ATTENTION : SIM_BOUND_MATMUL] += t_flops;
    else c->bound_time[SIM_BOUND_MEMORY] += t_bytes;
    c->bound_time[SIM_BOUND_LAUNCH] += launch;
    c->group_time[g] += t;
    c->compute += t;
    c->busy[c->phase] += t;
    c->flops[c->phase] += flops;
    c->mem_bytes[c->phase] += bytes;
    c->kernels++;
    return t;
}

static SimClock* clk(Kernels* k) { return (SimClock*)k->impl; }

static void sim_encoder_forward(Kernels* k, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C) {
    double e = (double)k->act_bytes, BTC = (double)B * T * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, BTC, 3 * BTC * e + (double)B * T * 4);
}
static void sim_encoder_backward(Kernels* k, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                 int accumulate) {
    // dout read once, rows of dwte read and written, dwpe's T rows summed over B
    double e = (double)k->act_bytes, BTC = (double)B * T * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 2 * BTC, BTC * e + 2 * BTC * e + 2.0 * T * C * e);
}
static void sim_layernorm_forward(Kernels* k, void* out, float* mean, float* rstd, const void* inp, const void* weight,
                                  const void* bias, int N, int C) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 8 * NC, 2 * NC * e + 8.0 * N + 2.0 * C * e);
}
static void sim_residual_layernorm_forward(Kernels* k, void* residual, void* out, float* mean, float* rstd, const void* a,
                                           const void* b, const void* weight, const void* bias, int N, int C) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 9 * NC, 4 * NC * e + 8.0 * N + 2.0 * C * e);
}
static void sim_layernorm_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                   const void* weight, const float* mean, const float* rstd, int N, int C, int accumulate) {
    // dout and inp read, dinp read and written (it accumulates), the statistics read
    double e = (double)k->act_bytes, NC = (double)N * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 14 * NC, 4 * NC * e + 8.0 * N + 4.0 * C * e);
}
static void sim_matmul_forward(Kernels* k, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                               int N, int C, int OC) {
    double e = (double)k->act_bytes, n = N, c = C, oc = OC;
    double bytes = (n * c + oc * c + n * oc * (pre_gelu ? 2 : 1) + oc) * e;
    sim_kernel(clk(k), SIM_WORK_MATMUL, 2 * n * c * oc, bytes);
}
static void sim_matmul_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                const void* weight, const void* pre_gelu, int N, int C, int OC, int accumulate) {
    // Two GEMMs (dinp = dout W, dweight = dout^T inp): dout read by both, the GELU input
    // read through the epilogue, dweight read when it accumulates.
    double e = (double)k->act_bytes, n = N, c = C, oc = OC;
    double bytes = (2 * n * oc + oc * c + n * c * (pre_gelu ? 2 : 1) + n * c + oc * c * (accumulate ? 2 : 1)) * e;
    sim_kernel(clk(k), SIM_WORK_MATMUL, 4 * n * c * oc + (dbias ? n * oc : 0), bytes);
}
// Causal attention: QK^T and PV over the lower triangle, 2 x 2 x B x T^2/2 x C FLOPs forward
// (FlashAttention's count); the backward recomputes the scores and does four more products.
static void sim_attention_forward(Kernels* k, void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
    double e = (double)k->act_bytes, BT = (double)B * T;
    sim_kernel(clk(k), SIM_WORK_ATTENTION, 2.0 * BT * T * C, (3 * BT * C + BT * C) * e + 4.0 * B * NH * T);
}
static void sim_attention_backward(Kernels* k, void* dqkv, const void* dout, const void* qkv, const void* out,
                                   const float* lse, int B, int T, int C, int NH) {
    double e = (double)k->act_bytes, BT = (double)B * T;
    sim_kernel(clk(k), SIM_WORK_ATTENTION, 5.0 * BT * T * C, (3 * BT * C + 2 * BT * C + 3 * BT * C) * e + 4.0 * B * NH * T);
}
static void sim_crossentropy(Kernels* k, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    double e = (double)k->act_bytes, NV = (double)N * Vp;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 5 * NV, (dloss != 0.0f ? 2 : 1) * NV * e + 8.0 * N);
}
static void sim_gelu_forward(Kernels* k, void* out, const void* inp, size_t n) {
    sim_kernel(clk(k), SIM_WORK_VECTOR, 10.0 * (double)n, 2.0 * (double)n * k->act_bytes);
}
static void sim_zero(Kernels* k, void* p, size_t bytes) { sim_kernel(clk(k), SIM_WORK_VECTOR, 0, (double)bytes); }
// The token ids stay on the host: no kernel reads them.
static const int* sim_tokens(Kernels* k, int slot, const int* host, size_t n) { return host; }
static void sim_to_host_async(Kernels* k, void* dst, const void* src, size_t bytes) {}
// The destination is real host memory (a row of logits): zeros stand for the values.
static void sim_act_to_host_f32(Kernels* k, float* dst, const void* src, size_t n) { memset(dst, 0, n * sizeof(float)); }
static void sim_synchronize(Kernels* k) {}
// A mark is the compute clock at that point.
static void* sim_mark(Kernels* k) {
    double* t = (double*)malloc(sizeof(double));
    if (t) *t = clk(k)->compute;
    return t;
}
static double sim_mark_ms(Kernels* k, void* from, void* to) {
    return from && to ? (*(const double*)to - *(const double*)from) * 1e3 : 0.0;
}
static void sim_mark_free(Kernels* k, void* m) { free(m); }

void kernels_sim_init(Kernels* k, SimClock* clock, int padded_vocab, size_t act_bytes) {
    memset(k, 0, sizeof(*k));
    k->impl = clock;
    k->lm_head_rows = padded_vocab;
    k->act_bytes = act_bytes;
    // The cpu device backpropagates through the GELU via a scratch buffer; cuda's epilogue needs none.
    k->gelu_needs_scratch = act_bytes == sizeof(float);
    k->encoder_forward = sim_encoder_forward;
    k->encoder_backward = sim_encoder_backward;
    k->layernorm_forward = sim_layernorm_forward;
    k->residual_layernorm_forward = sim_residual_layernorm_forward;
    k->layernorm_backward = sim_layernorm_backward;
    k->matmul_forward = sim_matmul_forward;
    k->matmul_backward = sim_matmul_backward;
    k->attention_forward = sim_attention_forward;
    k->attention_backward = sim_attention_backward;
    k->crossentropy = sim_crossentropy;
    k->gelu_forward = sim_gelu_forward;
    k->zero = sim_zero;
    k->tokens = sim_tokens;
    k->to_host_async = sim_to_host_async;
    k->act_to_host_f32 = sim_act_to_host_f32;
    k->synchronize = sim_synchronize;
    k->mark = sim_mark;
    k->mark_ms = sim_mark_ms;
    k->mark_free = sim_mark_free;
}
