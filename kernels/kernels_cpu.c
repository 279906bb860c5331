// The cpu device's kernel table (kernels.h) over the fp32 reference kernels of cpu_kernels.h.
// The table zeroes where a CPU kernel accumulates, in the order the cpu device always
// ran them: its results are bitwise those of the reference.
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu_kernels.h"
#include "kernels/cpu_kernels_llama.h"

static void cpu_op_encoder_forward(Kernels* k, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                                   int vocab_begin, int vocab_end) {
    encoder_forward((float*)out, inp, (const float*)wte, (const float*)wpe, B, T, C, vocab_begin, vocab_end);
}
static void cpu_op_encoder_backward(Kernels* k, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                    int vocab_begin, int vocab_end, int accumulate) {
    if (!accumulate && dwpe) memset(dwpe, 0, (size_t)T * C * sizeof(float));  // the CPU kernel adds
    encoder_backward((float*)dwte, (float*)dwpe, (const float*)dout, inp, B, T, C, vocab_begin, vocab_end);
}
static void cpu_op_layernorm_forward(Kernels* k, void* out, float* mean, float* rstd, const void* inp,
                                  const void* weight, const void* bias, int N, int C, float eps) {
    layernorm_forward((float*)out, mean, rstd, (const float*)inp, (const float*)weight, (const float*)bias, N, C, eps);
}
static void cpu_op_residual_layernorm_forward(Kernels* k, void* residual, void* out, float* mean, float* rstd, const void* a,
                                           const void* b, const void* weight, const void* bias, int N, int C, float eps) {
    residual_forward((float*)residual, (const float*)a, (const float*)b, (size_t)N * C);
    layernorm_forward((float*)out, mean, rstd, (const float*)residual, (const float*)weight, (const float*)bias, N, C, eps);
}
// accumulate 0 (a fresh gradient buffer): the CPU kernels add, so they start from zero.
static void cpu_op_layernorm_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                   const void* weight, const float* mean, const float* rstd, int N, int C, int accumulate) {
    if (!accumulate) {
        memset(dweight, 0, (size_t)C * sizeof(float));
        memset(dbias, 0, (size_t)C * sizeof(float));
    }
    layernorm_backward((float*)dinp, (float*)dweight, (float*)dbias, (const float*)dout, (const float*)inp,
                       (const float*)weight, mean, rstd, N, C);
}
static void cpu_op_matmul_forward(Kernels* k, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                               int N, int C, int OC) {
    if (pre_gelu) {
        matmul_forward((float*)pre_gelu, (const float*)inp, (const float*)weight, (const float*)bias, N, C, OC);
        gelu_forward((float*)out, (const float*)pre_gelu, (size_t)N * OC);
    } else {
        matmul_forward((float*)out, (const float*)inp, (const float*)weight, (const float*)bias, N, C, OC);
    }
}
static void cpu_op_matmul_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                const void* weight, const void* pre_gelu, int N, int C, int OC, int accumulate) {
    size_t n = (size_t)N * C;
    if (!accumulate && dweight) {
        memset(dweight, 0, (size_t)OC * C * sizeof(float));
        if (dbias) memset(dbias, 0, (size_t)OC * sizeof(float));
    }
    // matmul_backward accumulates into dinp: start from zero. Through a GELU, the product is
    // the gradient w.r.t. the GELU's output (gelu_scratch), and gelu_backward (which
    // accumulates too) takes it to the input. (dinp NULL: the weight's half alone.)
    float* dact = !dinp ? NULL : pre_gelu ? (float*)k->gelu_scratch : (float*)dinp;
    if (dact) memset(dact, 0, n * sizeof(float));
    matmul_backward(dact, (float*)dweight, (float*)dbias, (const float*)dout, (const float*)inp, (const float*)weight, N, C, OC);
    if (dinp && pre_gelu) {
        memset(dinp, 0, n * sizeof(float));
        gelu_backward((float*)dinp, (const float*)pre_gelu, dact, n);
    }
}
static void cpu_op_attention_forward(Kernels* k, void* out, float* lse, const void* qkv, int B, int T, int C, int NH, int KVH) {
    attention_forward((float*)out, lse, (const float*)qkv, B, T, C, NH, KVH);
}
static void cpu_op_attention_backward(Kernels* k, void* dqkv, const void* dout, const void* qkv, const void* out,
                                   const float* lse, int B, int T, int C, int NH, int KVH) {
    memset(dqkv, 0, (size_t)B * T * (C + 2 * (size_t)(C / NH) * KVH) * sizeof(float));  // the CPU kernel accumulates
    attention_backward((float*)dqkv, (const float*)dout, (const float*)qkv, (const float*)out, lse, B, T, C, NH, KVH);
}
static void cpu_op_crossentropy(Kernels* k, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    crossentropy_softmax_fused((float*)logits, losses, targets, N, V, Vp, dloss);
}
static void cpu_op_crossentropy_tp_max(Kernels* k, float* row_max, const void* logits, int N, int V_local, int Vp_local) {
    crossentropy_tp_max(row_max, (const float*)logits, N, V_local, Vp_local);
}
static void cpu_op_crossentropy_tp_sums(Kernels* k, float* sums, const void* logits, const float* row_max, const int* targets,
                                        int N, int V_local, int Vp_local, int vocab_begin) {
    crossentropy_tp_sums(sums, (const float*)logits, row_max, targets, N, V_local, Vp_local, vocab_begin);
}
static void cpu_op_crossentropy_tp_finish(Kernels* k, void* logits, float* losses, const float* row_max, const float* sums,
                                          const int* targets, int N, int V_local, int Vp_local, int vocab_begin, float dloss) {
    crossentropy_tp_finish((float*)logits, losses, row_max, sums, targets, N, V_local, Vp_local, vocab_begin, dloss);
}
static void cpu_op_gelu_forward(Kernels* k, void* out, const void* inp, size_t n) {
    gelu_forward((float*)out, (const float*)inp, n);
}
static void cpu_op_zero(Kernels* k, void* p, size_t bytes) { memset(p, 0, bytes); }
static const int* cpu_op_tokens(Kernels* k, int slot, const int* host, size_t n) { return host; }
static void cpu_op_to_host_async(Kernels* k, void* dst, const void* src, size_t bytes) { if (dst != src) memcpy(dst, src, bytes); }
static void cpu_op_act_to_host_f32(Kernels* k, float* dst, const void* src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
static void cpu_op_synchronize(Kernels* k) {}
static void cpu_op_rmsnorm_forward(Kernels* k, void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                                   float eps) {
    rmsnorm_forward((float*)out, rstd, (const float*)inp, (const float*)weight, N, C, eps);
}
static void cpu_op_residual_rmsnorm_forward(Kernels* k, void* residual, void* out, float* rstd, const void* a, const void* b,
                                            const void* weight, int N, int C, float eps) {
    residual_forward((float*)residual, (const float*)a, (const float*)b, (size_t)N * C);
    rmsnorm_forward((float*)out, rstd, (const float*)residual, (const float*)weight, N, C, eps);
}
static void cpu_op_rmsnorm_backward(Kernels* k, void* dinp, void* dweight, const void* dout, const void* inp,
                                    const void* weight, const float* rstd, int N, int C, int accumulate) {
    if (!accumulate) memset(dweight, 0, (size_t)C * sizeof(float));
    rmsnorm_backward((float*)dinp, (float*)dweight, (const float*)dout, (const float*)inp, (const float*)weight, rstd, N, C);
}
static void cpu_op_rope(Kernels* k, void* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse) {
    rope_forward((float*)qkv, B, T, NH, KVH, hs, p, inverse);
}
static void cpu_op_swiglu_forward(Kernels* k, void* out, const void* inp, int N, int F) {
    swiglu_forward((float*)out, (const float*)inp, N, F);
}
static void cpu_op_swiglu_backward(Kernels* k, void* dinp, const void* dout, const void* inp, int N, int F) {
    swiglu_backward((float*)dinp, (const float*)dout, (const float*)inp, N, F);
}
static void* cpu_op_mark(Kernels* k) {
    struct timespec* t = (struct timespec*)malloc(sizeof(*t));
    clock_gettime(CLOCK_MONOTONIC, t);
    return t;
}
static double cpu_op_mark_ms(Kernels* k, void* from, void* to) {
    const struct timespec *a = (const struct timespec*)from, *b = (const struct timespec*)to;
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) * 1e-6;
}
static void cpu_op_mark_free(Kernels* k, void* m) { free(m); }

void kernels_cpu_init(Kernels* k, int padded_vocab) {
    memset(k, 0, sizeof(*k));
    k->lm_head_rows = padded_vocab;
    k->act_bytes = sizeof(float);
    k->gelu_needs_scratch = 1;
    k->encoder_forward = cpu_op_encoder_forward;
    k->encoder_backward = cpu_op_encoder_backward;
    k->layernorm_forward = cpu_op_layernorm_forward;
    k->residual_layernorm_forward = cpu_op_residual_layernorm_forward;
    k->layernorm_backward = cpu_op_layernorm_backward;
    k->matmul_forward = cpu_op_matmul_forward;
    k->matmul_backward = cpu_op_matmul_backward;
    k->attention_forward = cpu_op_attention_forward;
    k->attention_backward = cpu_op_attention_backward;
    k->crossentropy = cpu_op_crossentropy;
    k->crossentropy_tp_max = cpu_op_crossentropy_tp_max;
    k->crossentropy_tp_sums = cpu_op_crossentropy_tp_sums;
    k->crossentropy_tp_finish = cpu_op_crossentropy_tp_finish;
    k->rmsnorm_forward = cpu_op_rmsnorm_forward;
    k->residual_rmsnorm_forward = cpu_op_residual_rmsnorm_forward;
    k->rmsnorm_backward = cpu_op_rmsnorm_backward;
    k->rope = cpu_op_rope;
    k->swiglu_forward = cpu_op_swiglu_forward;
    k->swiglu_backward = cpu_op_swiglu_backward;
    k->gelu_forward = cpu_op_gelu_forward;
    k->zero = cpu_op_zero;
    k->tokens = cpu_op_tokens;
    k->to_host_async = cpu_op_to_host_async;
    k->act_to_host_f32 = cpu_op_act_to_host_f32;
    k->synchronize = cpu_op_synchronize;
    k->mark = cpu_op_mark;
    k->mark_ms = cpu_op_mark_ms;
    k->mark_free = cpu_op_mark_free;
}
