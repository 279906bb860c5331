// The kernel table: the operations the model schedule (train_gpt.cu) runs, one table per
// device. kernels_cpu.c wraps the fp32 reference kernels of cpu_kernels.h; kernels_cuda.cuh
// the BF16 CUDA kernels. Pointers are void* in the device's compute dtype (act_bytes per
// element); LayerNorm statistics, attention log-sum-exps and losses are fp32 on every device.
//
// Semantics, the same on both devices (where a kernel differs, its wrapper makes up for it):
//   forward ops overwrite their outputs;
//   matmul_forward with pre_gelu != NULL: pre_gelu = inp W^T + b, out = gelu(pre_gelu);
//   matmul_backward: dinp is OVERWRITTEN (dout W; times gelu'(pre_gelu) when pre_gelu is
//     given); dweight and dbias ACCUMULATE, or with accumulate 0 are OVERWRITTEN without
//     being read (the first write into a fresh gradient buffer, which is not zeroed);
//     its two halves run alone with dweight and dbias NULL (dinp only) or dinp NULL (dweight
//     and dbias only): the same values as the whole, for a caller that puts something
//     between them (tensor parallelism starts dinp's reduce-scatter before the weight GEMM);
//   attention_backward: dqkv is OVERWRITTEN;
//   layernorm_backward: dinp ACCUMULATES (the residual stream's gradient is summed over the
//     branches), dweight and dbias as matmul_backward's;
//   encoder_backward: dwte ACCUMULATES (only the rows of tokens seen: onto the LM head's
//     gradient), dwpe rows [0, T) as matmul_backward's dweight (rows from T on untouched);
//   rmsnorm_backward: as layernorm_backward (no bias);
//   rope: in place on qkv's q and k heads; inverse rotates back (the backward, on dqkv);
//   swiglu_backward: dinp is OVERWRITTEN;
//   encoder_forward/_backward with wpe/dwpe NULL: token embeddings only (Llama);
//   encoder_forward/_backward's [vocab_begin, vocab_end): the vocabulary rows wte (dwte)
//     holds, row 0 being token vocab_begin (tensor parallelism splits wte by rows over the
//     TP group; (0, padded vocab) is the whole table). A token outside the range embeds as
//     zero (out = wpe[t], or 0 without wpe) and adds nothing to dwte; wpe is added and dwpe
//     written as without a range (where the group sums its partial embeddings, one rank
//     passes wpe, the others NULL);
//   crossentropy: losses[N] fp32; with dloss != 0 the logits become dlogits in place (times
//     *loss_scale where the table has one);
//   crossentropy_tp_max/_sums/_finish: the same loss over logits split by vocabulary columns
//     over the TP group, in three phases with all-reduces between them (the caller's). Each
//     rank holds logits [N, Vp_local] for columns [vocab_begin, vocab_begin + Vp_local), of
//     which the first V_local are real (V_local = clamp(V - vocab_begin, 0, Vp_local)); the
//     rest are padding: out of the max and the sums, dlogits 0. Targets are global ids.
//       max:    row_max[n] = max of the real columns (-inf when V_local is 0); all-reduce MAX;
//       sums:   sums[2n] = sum of exp(logit - row_max[n]) over the real columns (row_max:
//               the group's), sums[2n + 1] = the target's logit where this rank holds it,
//               else 0; all-reduce SUM;
//       finish: losses[n] = log(sums[2n]) + row_max[n] - sums[2n + 1] (every rank the same);
//               with dloss != 0 the logits become dlogits in place, as crossentropy's.
//     row_max [N], sums [2N] and losses [N] are fp32; a target no rank holds contributes
//     no target logit (the caller's data are checked against the vocabulary).
//
// The schedule calls the kernel_* functions at the end of this header rather than the table:
// each tells the profiler (when one listens, --profile-step) what kind of work starts, so the
// schedule itself carries no profiling.
#ifndef FSDP_KERNELS_KERNELS_H
#define FSDP_KERNELS_KERNELS_H

#include <stddef.h>
#include "kernels/rope.h"

#ifdef __cplusplus
extern "C" {
#endif

// What a kernel is, for the profile's table.
typedef enum { KERNEL_EMBED, KERNEL_LAYERNORM, KERNEL_MATMUL, KERNEL_LM_HEAD, KERNEL_ATTENTION, KERNEL_LOSS,
               KERNEL_KINDS } KernelKind;

typedef struct Kernels Kernels;
struct Kernels {
    size_t act_bytes;          // bytes per activation element (4: fp32, 2: bf16)
    int gelu_needs_scratch;    // matmul_backward with pre_gelu needs gelu_scratch [N, 4C]
    void* gelu_scratch;        // set by the model (cpu: the gradient w.r.t. the GELU output)
    int lm_head_rows;          // the padded vocabulary: a matmul of that width is the LM head
    void* impl;                // the device's own state (cuda: stream, cuBLASLt, scratch)
    // Loss scaling (cuda, --param-dtype fp16): device memory holding the scale the backward
    // multiplies dloss by (the engine's dynamic scaler updates it on the device), or NULL.
    const float* loss_scale;
    // --profile-step: called before each kernel while set.
    void (*on_kernel)(void* ctx, KernelKind kind, int backward);
    void* on_kernel_ctx;

    void (*encoder_forward)(Kernels* k, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                            int vocab_begin, int vocab_end);
    void (*encoder_backward)(Kernels* k, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                             int vocab_begin, int vocab_end, int accumulate);
    // eps: the model's norm_eps (every norm forward takes it; the backwards use the saved rstd)
    void (*layernorm_forward)(Kernels* k, void* out, float* mean, float* rstd, const void* inp,
                              const void* weight, const void* bias, int N, int C, float eps);
    // residual = a + b, then out = layernorm(residual)
    void (*residual_layernorm_forward)(Kernels* k, void* residual, void* out, float* mean, float* rstd,
                                       const void* a, const void* b, const void* weight, const void* bias, int N, int C,
                                       float eps);
    void (*layernorm_backward)(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                               const void* weight, const float* mean, const float* rstd, int N, int C, int accumulate);
    void (*matmul_forward)(Kernels* k, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                           int N, int C, int OC);
    void (*matmul_backward)(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                            const void* weight, const void* pre_gelu, int N, int C, int OC, int accumulate);
    void (*attention_forward)(Kernels* k, void* out, float* lse, const void* qkv, int B, int T, int C, int NH, int KVH);
    void (*attention_backward)(Kernels* k, void* dqkv, const void* dout, const void* qkv, const void* out,
                               const float* lse, int B, int T, int C, int NH, int KVH);
    void (*crossentropy)(Kernels* k, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss);
    // The vocab-parallel cross-entropy's three phases (the semantics above).
    void (*crossentropy_tp_max)(Kernels* k, float* row_max, const void* logits, int N, int V_local, int Vp_local);
    void (*crossentropy_tp_sums)(Kernels* k, float* sums, const void* logits, const float* row_max, const int* targets,
                                 int N, int V_local, int Vp_local, int vocab_begin);
    void (*crossentropy_tp_finish)(Kernels* k, void* logits, float* losses, const float* row_max, const float* sums,
                                   const int* targets, int N, int V_local, int Vp_local, int vocab_begin, float dloss);
    // The Llama family (kernels/cpu_kernels_llama.h): RMSNorm (rstd [N] fp32), the fused
    // residual add + RMSNorm, rotary embeddings on qkv [B,T,(NH + 2 KVH) hs], and SwiGLU on
    // the fused gate|up projection [N, 2F] -> [N, F].
    void (*rmsnorm_forward)(Kernels* k, void* out, float* rstd, const void* inp, const void* weight, int N, int C, float eps);
    void (*residual_rmsnorm_forward)(Kernels* k, void* residual, void* out, float* rstd, const void* a, const void* b,
                                     const void* weight, int N, int C, float eps);
    void (*rmsnorm_backward)(Kernels* k, void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                             const float* rstd, int N, int C, int accumulate);
    void (*rope)(Kernels* k, void* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse);
    void (*swiglu_forward)(Kernels* k, void* out, const void* inp, int N, int F);
    void (*swiglu_backward)(Kernels* k, void* dinp, const void* dout, const void* inp, int N, int F);
    // out[n] = gelu(inp), what matmul_forward with pre_gelu leaves in out when its GELU is not
    // in the matmul's epilogue (recompute relies on that: the cuda device then runs unfused).
    void (*gelu_forward)(Kernels* k, void* out, const void* inp, size_t n);
    void (*zero)(Kernels* k, void* p, size_t bytes);
    // Token ids where the kernels can read them (slot 0: inputs, 1: targets); may return host.
    const int* (*tokens)(Kernels* k, int slot, const int* host, size_t n);
    // Device -> host: fp32 bytes, queued behind the work so far (done after synchronize).
    void (*to_host_async)(Kernels* k, void* dst_host, const void* src, size_t bytes);
    // n activation elements -> host fp32 (blocking).
    void (*act_to_host_f32)(Kernels* k, float* dst, const void* src, size_t n);
    void (*synchronize)(Kernels* k);
    // --profile-step: a mark is a point in the device's work (cuda: an event recorded on the
    // model's stream; cpu: the host clock, its kernels being synchronous); mark_ms is the
    // time between two marks, valid once synchronize has returned.
    void* (*mark)(Kernels* k);
    double (*mark_ms)(Kernels* k, void* from, void* to);
    void (*mark_free)(Kernels* k, void* m);
    // --profile-step: kernel launches this process has issued since counting started, on any
    // stream (cuda: CUPTI, kernels/cuda_launches.cuh), or -1 where they are not counted. NULL
    // on a device without kernel launches (cpu).
    long long (*launches)(Kernels* k);
};

// The cpu device's table (fp32, kernels/cpu_kernels.h).
void kernels_cpu_init(Kernels* k, int padded_vocab);

// ---- what the schedule calls

static inline void kernel_starts(Kernels* k, KernelKind kind, int backward) {
    if (k->on_kernel) k->on_kernel(k->on_kernel_ctx, kind, backward);
}
static inline const int* kernel_tokens(Kernels* k, int slot, const int* host, size_t n) {
    kernel_starts(k, KERNEL_EMBED, 0);
    return k->tokens(k, slot, host, n);
}
static inline void kernel_encoder_forward(Kernels* k, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                                          int vocab_begin, int vocab_end) {
    kernel_starts(k, KERNEL_EMBED, 0);
    k->encoder_forward(k, out, inp, wte, wpe, B, T, C, vocab_begin, vocab_end);
}
static inline void kernel_encoder_backward(Kernels* k, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                           int vocab_begin, int vocab_end, int accumulate) {
    kernel_starts(k, KERNEL_EMBED, 1);
    k->encoder_backward(k, dwte, dwpe, dout, inp, B, T, C, vocab_begin, vocab_end, accumulate);
}
static inline void kernel_layernorm_forward(Kernels* k, void* out, float* mean, float* rstd, const void* inp,
                                            const void* weight, const void* bias, int N, int C, float eps) {
    kernel_starts(k, KERNEL_LAYERNORM, 0);
    k->layernorm_forward(k, out, mean, rstd, inp, weight, bias, N, C, eps);
}
static inline void kernel_residual_layernorm_forward(Kernels* k, void* residual, void* out, float* mean, float* rstd,
                                                     const void* a, const void* b, const void* weight, const void* bias,
                                                     int N, int C, float eps) {
    kernel_starts(k, KERNEL_LAYERNORM, 0);
    k->residual_layernorm_forward(k, residual, out, mean, rstd, a, b, weight, bias, N, C, eps);
}
static inline void kernel_layernorm_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout,
                                             const void* inp, const void* weight, const float* mean, const float* rstd,
                                             int N, int C, int accumulate) {
    kernel_starts(k, KERNEL_LAYERNORM, 1);
    k->layernorm_backward(k, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate);
}
static inline void kernel_matmul_forward(Kernels* k, void* out, void* pre_gelu, const void* inp, const void* weight,
                                         const void* bias, int N, int C, int OC) {
    kernel_starts(k, OC == k->lm_head_rows ? KERNEL_LM_HEAD : KERNEL_MATMUL, 0);
    k->matmul_forward(k, out, pre_gelu, inp, weight, bias, N, C, OC);
}
static inline void kernel_matmul_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout,
                                          const void* inp, const void* weight, const void* pre_gelu, int N, int C, int OC,
                                          int accumulate) {
    kernel_starts(k, OC == k->lm_head_rows ? KERNEL_LM_HEAD : KERNEL_MATMUL, 1);
    k->matmul_backward(k, dinp, dweight, dbias, dout, inp, weight, pre_gelu, N, C, OC, accumulate);
}
static inline void kernel_attention_forward(Kernels* k, void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                                            int KVH) {
    kernel_starts(k, KERNEL_ATTENTION, 0);
    k->attention_forward(k, out, lse, qkv, B, T, C, NH, KVH);
}
static inline void kernel_attention_backward(Kernels* k, void* dqkv, const void* dout, const void* qkv, const void* out,
                                             const float* lse, int B, int T, int C, int NH, int KVH) {
    kernel_starts(k, KERNEL_ATTENTION, 1);
    k->attention_backward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, KVH);
}
static inline void kernel_crossentropy(Kernels* k, void* logits, float* losses, const int* targets, int N, int V, int Vp,
                                       float dloss) {
    kernel_starts(k, KERNEL_LOSS, 0);
    k->crossentropy(k, logits, losses, targets, N, V, Vp, dloss);
}
static inline void kernel_crossentropy_tp_max(Kernels* k, float* row_max, const void* logits, int N, int V_local, int Vp_local) {
    kernel_starts(k, KERNEL_LOSS, 0);
    k->crossentropy_tp_max(k, row_max, logits, N, V_local, Vp_local);
}
static inline void kernel_crossentropy_tp_sums(Kernels* k, float* sums, const void* logits, const float* row_max,
                                               const int* targets, int N, int V_local, int Vp_local, int vocab_begin) {
    kernel_starts(k, KERNEL_LOSS, 0);
    k->crossentropy_tp_sums(k, sums, logits, row_max, targets, N, V_local, Vp_local, vocab_begin);
}
static inline void kernel_crossentropy_tp_finish(Kernels* k, void* logits, float* losses, const float* row_max,
                                                 const float* sums, const int* targets, int N, int V_local, int Vp_local,
                                                 int vocab_begin, float dloss) {
    kernel_starts(k, KERNEL_LOSS, 0);
    k->crossentropy_tp_finish(k, logits, losses, row_max, sums, targets, N, V_local, Vp_local, vocab_begin, dloss);
}
static inline void kernel_rmsnorm_forward(Kernels* k, void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                                          float eps) {
    kernel_starts(k, KERNEL_LAYERNORM, 0);
    k->rmsnorm_forward(k, out, rstd, inp, weight, N, C, eps);
}
static inline void kernel_residual_rmsnorm_forward(Kernels* k, void* residual, void* out, float* rstd, const void* a,
                                                   const void* b, const void* weight, int N, int C, float eps) {
    kernel_starts(k, KERNEL_LAYERNORM, 0);
    k->residual_rmsnorm_forward(k, residual, out, rstd, a, b, weight, N, C, eps);
}
static inline void kernel_rmsnorm_backward(Kernels* k, void* dinp, void* dweight, const void* dout, const void* inp,
                                           const void* weight, const float* rstd, int N, int C, int accumulate) {
    kernel_starts(k, KERNEL_LAYERNORM, 1);
    k->rmsnorm_backward(k, dinp, dweight, dout, inp, weight, rstd, N, C, accumulate);
}
// Rotary embeddings run beside attention (its inputs' positions), so they count as attention.
static inline void kernel_rope(Kernels* k, void* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse) {
    kernel_starts(k, KERNEL_ATTENTION, inverse);
    k->rope(k, qkv, B, T, NH, KVH, hs, p, inverse);
}
// SwiGLU is the MLP's activation, as GELU is.
static inline void kernel_swiglu_forward(Kernels* k, void* out, const void* inp, int N, int F) {
    kernel_starts(k, KERNEL_MATMUL, 0);
    k->swiglu_forward(k, out, inp, N, F);
}
static inline void kernel_swiglu_backward(Kernels* k, void* dinp, const void* dout, const void* inp, int N, int F) {
    kernel_starts(k, KERNEL_MATMUL, 1);
    k->swiglu_backward(k, dinp, dout, inp, N, F);
}
static inline void kernel_gelu_forward(Kernels* k, void* out, const void* inp, size_t n) {
    kernel_starts(k, KERNEL_MATMUL, 0);  // the MLP's activation: its matmul's epilogue elsewhere
    k->gelu_forward(k, out, inp, n);
}
// (zero, copies and synchronize are not kernels of the model: their time goes to the phase
// before them.)

#ifdef __cplusplus
}
#endif
#endif
