// The cuda device's kernel table (kernels.h): 16-bit storage (bf16, or fp16 with
// --param-dtype fp16: the table's ops are cuda_op_*<T16>), fp32 math, every kernel of
// cuda_*.cuh on the model's compute stream. Header-only (static), included by the translation
// unit that builds the device (train/device.cuh) and compiled by nvcc or for the emulator.
#ifndef FSDP_KERNELS_KERNELS_CUDA_CUH
#define FSDP_KERNELS_KERNELS_CUDA_CUH
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "kernels/cuda_activation.cuh"
#include "kernels/cuda_attention.cuh"
#include "kernels/cuda_bias.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_crossentropy.cuh"
#include "kernels/cuda_encoder.cuh"
#include "kernels/cuda_launches.cuh"
#include "kernels/cuda_matmul.cuh"
#include "kernels/cuda_norm.cuh"
#include "kernels/cuda_rope.cuh"
#include "kernels/kernels.h"

// What the table's buffers are sized for.
typedef struct {
    int B, T;              // the largest micro-batch
    int channels, heads;
    int vocab, padded_vocab;
} CudaKernelsShape;

typedef struct {
    cudaStream_t stream;       // the compute stream (the FSDP backend orders its comm against it)
    // Host waits go through the caller (the FSDP backend: its deadline ends a stalled job).
    void (*host_wait)(void* ctx, cudaStream_t s, const char* what);
    void* host_wait_ctx;
    MatmulContext mm;          // cuBLASLt handle + its one workspace
    AttentionContext attn;     // the attention implementation, its shared-memory opt-in done once
    void* scratch;             // one buffer for every kernel's scratch (they run in stream order)
    size_t scratch_bytes;
    int* tokens[2];            // inputs, targets [B*T] on the device
    size_t tokens_cap;
    uint16_t* host_row;        // pinned staging for act_to_host_f32
    size_t host_row_cap;
    int vocab;                 // real vocabulary (the embedding backward sorts ids in [0, vocab))
    size_t device_bytes;       // everything this device state cudaMalloc'ed (budget)
    LaunchCounter launch_count;  // --profile-step's kernel launches (CUPTI)
} CudaKernels;

static CudaKernels* cuda_of(Kernels* k) { return (CudaKernels*)k->impl; }
#define BF(p) ((T16*)(p))
#define CBF(p) ((const T16*)(p))

template <class T16>
static void cuda_op_encoder_forward(Kernels* k, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                                    int vocab_begin, int vocab_end) {
    encoder_forward_cuda(BF(out), inp, CBF(wte), CBF(wpe), B, T, C, vocab_begin, vocab_end, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_encoder_backward(Kernels* k, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                     int vocab_begin, int vocab_end, int accumulate) {
    CudaKernels* cd = cuda_of(k);
    encoder_backward_cuda(BF(dwte), BF(dwpe), cd->scratch, cd->scratch_bytes, CBF(dout), inp, B, T, C, cd->vocab, vocab_begin,
                          vocab_end, accumulate, cd->stream);
}
template <class T16>
static void cuda_op_layernorm_forward(Kernels* k, void* out, float* mean, float* rstd, const void* inp,
                                   const void* weight, const void* bias, int N, int C, float eps) {
    layernorm_forward_cuda(BF(out), mean, rstd, CBF(inp), CBF(weight), CBF(bias), N, C, eps, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_residual_layernorm_forward(Kernels* k, void* residual, void* out, float* mean, float* rstd, const void* a,
                                            const void* b, const void* weight, const void* bias, int N, int C, float eps) {
    fused_residual_layernorm_forward_cuda(BF(residual), BF(out), mean, rstd, CBF(a), CBF(b), CBF(weight), CBF(bias), N, C,
                                          eps, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_layernorm_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                    const void* weight, const float* mean, const float* rstd, int N, int C, int accumulate) {
    CudaKernels* cd = cuda_of(k);
    layernorm_backward_cuda(BF(dinp), BF(dweight), BF(dbias), cd->scratch, cd->scratch_bytes, CBF(dout), CBF(inp),
                            CBF(weight), mean, rstd, N, C, accumulate, cd->stream);
}
template <class T16>
static void cuda_op_matmul_forward(Kernels* k, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                                int N, int C, int OC) {
    CudaKernels* cd = cuda_of(k);
    matmul_forward_cuda(&cd->mm, BF(out), BF(pre_gelu), CBF(inp), CBF(weight), CBF(bias), N, C, OC, cd->stream);
}
template <class T16>
static void cuda_op_matmul_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                 const void* weight, const void* pre_gelu, int N, int C, int OC, int accumulate) {
    CudaKernels* cd = cuda_of(k);
    // dinp overwritten (with the GELU backward in the epilogue when pre_gelu is given); the
    // weight gradient is written into the 16-bit gradient slot (beta = 0: a fresh slot is
    // neither zeroed nor read) or added to it (beta = 1). The bias gradient: written by the
    // weight-gradient GEMM's epilogue when the slot is fresh (cuda_matmul.cuh: BGRADB), else
    // (accumulating, or a shape cuBLASLt refused) a deterministic reduction of its own. Either
    // half alone where the other's pointers are NULL (kernels.h).
    if (dinp) matmul_backward_dinp_cuda(&cd->mm, BF(dinp), CBF(dout), CBF(weight), CBF(pre_gelu), N, C, OC, 0, cd->stream);
    if (!dweight) return;
    const int dbias_done = matmul_backward_dweight_dbias_cuda(&cd->mm, dweight, mm_type_of(CBF(dout)), BF(dbias),
                                                              CBF(dout), CBF(inp), N, C, OC, accumulate, cd->stream);
    if (dbias && !dbias_done)
        bias_backward_cuda(BF(dbias), cd->scratch, cd->scratch_bytes, CBF(dout), N, OC, accumulate, cd->stream);
}
template <class T16>
static void cuda_op_attention_forward(Kernels* k, void* out, float* lse, const void* qkv, int B, int T, int C, int NH, int KVH) {
    CudaKernels* cd = cuda_of(k);
    attention_forward_cuda(&cd->attn, &cd->mm, BF(out), lse, CBF(qkv), cd->scratch, cd->scratch_bytes, B, T, C, NH, KVH, cd->stream);
}
template <class T16>
static void cuda_op_attention_backward(Kernels* k, void* dqkv, const void* dout, const void* qkv, const void* out,
                                    const float* lse, int B, int T, int C, int NH, int KVH) {
    CudaKernels* cd = cuda_of(k);
    attention_backward_cuda(&cd->attn, &cd->mm, BF(dqkv), CBF(dout), CBF(qkv), CBF(out), lse, cd->scratch,
                            cd->scratch_bytes, B, T, C, NH, KVH, cd->stream);
}
template <class T16>
static void cuda_op_crossentropy(Kernels* k, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    crossentropy_softmax_fused_cuda(BF(logits), losses, targets, N, V, Vp, dloss, k->loss_scale, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_crossentropy_tp_max(Kernels* k, float* row_max, const void* logits, int N, int V_local, int Vp_local) {
    crossentropy_tp_max_cuda(row_max, CBF(logits), N, V_local, Vp_local, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_crossentropy_tp_sums(Kernels* k, float* sums, const void* logits, const float* row_max, const int* targets,
                                         int N, int V_local, int Vp_local, int vocab_begin) {
    crossentropy_tp_sums_cuda(sums, CBF(logits), row_max, targets, N, V_local, Vp_local, vocab_begin, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_crossentropy_tp_finish(Kernels* k, void* logits, float* losses, const float* row_max, const float* sums,
                                           const int* targets, int N, int V_local, int Vp_local, int vocab_begin, float dloss) {
    crossentropy_tp_finish_cuda(BF(logits), losses, row_max, sums, targets, N, V_local, Vp_local, vocab_begin, dloss,
                                k->loss_scale, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_rmsnorm_forward(Kernels* k, void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                                    float eps) {
    rmsnorm_forward_cuda(BF(out), rstd, CBF(inp), CBF(weight), N, C, eps, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_residual_rmsnorm_forward(Kernels* k, void* residual, void* out, float* rstd, const void* a, const void* b,
                                             const void* weight, int N, int C, float eps) {
    fused_residual_rmsnorm_forward_cuda(BF(residual), BF(out), rstd, CBF(a), CBF(b), CBF(weight), N, C, eps,
                                        cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_rmsnorm_backward(Kernels* k, void* dinp, void* dweight, const void* dout, const void* inp,
                                     const void* weight, const float* rstd, int N, int C, int accumulate) {
    CudaKernels* cd = cuda_of(k);
    rmsnorm_backward_cuda(BF(dinp), BF(dweight), cd->scratch, cd->scratch_bytes, CBF(dout), CBF(inp), CBF(weight), rstd, N,
                          C, accumulate, cd->stream);
}
template <class T16>
static void cuda_op_rope(Kernels* k, void* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse) {
    rope_cuda(BF(qkv), B, T, NH, KVH, hs, p, inverse, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_swiglu_forward(Kernels* k, void* out, const void* inp, int N, int F) {
    swiglu_forward_cuda(BF(out), CBF(inp), N, F, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_swiglu_backward(Kernels* k, void* dinp, const void* dout, const void* inp, int N, int F) {
    swiglu_backward_cuda(BF(dinp), CBF(dout), CBF(inp), N, F, cuda_of(k)->stream);
}
template <class T16>
static void cuda_op_gelu_forward(Kernels* k, void* out, const void* inp, size_t n) {
    gelu_forward_cuda(BF(out), CBF(inp), n, cuda_of(k)->stream);
}
static void cuda_op_zero(Kernels* k, void* p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_of(k)->stream)); }
static const int* cuda_op_tokens(Kernels* k, int slot, const int* host, size_t n) {
    CudaKernels* cd = cuda_of(k);
    CUDA_REQUIRE(n <= cd->tokens_cap, "%zu tokens exceed the %zu the device buffers were sized for", n, cd->tokens_cap);
    // From pinned memory (train_gpt's token buffers) the copy runs behind the host, which must
    // not rewrite host before the stream has passed it; from pageable memory (the sampler's)
    // the driver stages it before returning.
    CUDA_CHECK(cudaMemcpyAsync(cd->tokens[slot], host, n * sizeof(int), cudaMemcpyHostToDevice, cd->stream));
    return cd->tokens[slot];
}
static void cuda_op_to_host_async(Kernels* k, void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_of(k)->stream));
}
template <class T16>
static void cuda_op_act_to_host_f32(Kernels* k, float* dst, const void* src, size_t n) {
    CudaKernels* cd = cuda_of(k);
    CUDA_REQUIRE(n <= cd->host_row_cap, "%zu elements exceed the %zu-element staging buffer", n, cd->host_row_cap);
    CUDA_CHECK(cudaMemcpyAsync(cd->host_row, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, cd->stream));
    cd->host_wait(cd->host_wait_ctx, cd->stream, "a device-to-host copy of activations");
    for (size_t i = 0; i < n; i++) dst[i] = to_float(Float16Traits<T16>::from_bits(cd->host_row[i]));
}
static void cuda_op_synchronize(Kernels* k) {
    CudaKernels* cd = cuda_of(k);
    cd->host_wait(cd->host_wait_ctx, cd->stream, "the model's stream");
}
static void* cuda_op_mark(Kernels* k) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventRecord(e, cuda_of(k)->stream));
    return (void*)e;
}
static double cuda_op_mark_ms(Kernels* k, void* from, void* to) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to));
    return ms;
}
static void cuda_op_mark_free(Kernels* k, void* m) { CUDA_CHECK(cudaEventDestroy((cudaEvent_t)m)); }
static long long cuda_op_launches(Kernels* k) {
    const LaunchCounter* c = &cuda_of(k)->launch_count;
    return c->active ? c->launches : -1;
}

// The largest scratch any kernel takes for a B x T micro-batch (smaller forwards, e.g. the
// sampler's B = 1, need less). Everything runs in order on one stream: one buffer serves all.
static size_t cuda_kernels_scratch_bytes(const CudaKernelsShape* s, AttentionImpl attention) {
    int B = s->B, T = s->T, N = B * T, C = s->channels, NH = s->heads;
    size_t need = encoder_backward_scratch_bytes(B, T, s->vocab);
    size_t sizes[] = {layernorm_backward_scratch_bytes(N, C), rmsnorm_backward_scratch_bytes(N, C),
                      bias_backward_scratch_bytes(N, 4 * C),
                      bias_backward_scratch_bytes(N, 3 * C), attention_forward_scratch_bytes(attention, B, T, C, NH),
                      attention_backward_scratch_bytes(attention, B, T, C, NH)};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) if (sizes[i] > need) need = sizes[i];
    return align_up_256(need);
}

// The ops that touch 16-bit tensors, for one compute dtype.
template <class T16>
static void kernels_cuda_set_ops(Kernels* k) {
    k->encoder_forward = cuda_op_encoder_forward<T16>;
    k->encoder_backward = cuda_op_encoder_backward<T16>;
    k->layernorm_forward = cuda_op_layernorm_forward<T16>;
    k->residual_layernorm_forward = cuda_op_residual_layernorm_forward<T16>;
    k->layernorm_backward = cuda_op_layernorm_backward<T16>;
    k->matmul_forward = cuda_op_matmul_forward<T16>;
    k->matmul_backward = cuda_op_matmul_backward<T16>;
    k->attention_forward = cuda_op_attention_forward<T16>;
    k->attention_backward = cuda_op_attention_backward<T16>;
    k->crossentropy = cuda_op_crossentropy<T16>;
    k->crossentropy_tp_max = cuda_op_crossentropy_tp_max<T16>;
    k->crossentropy_tp_sums = cuda_op_crossentropy_tp_sums<T16>;
    k->crossentropy_tp_finish = cuda_op_crossentropy_tp_finish<T16>;
    k->gelu_forward = cuda_op_gelu_forward<T16>;
    k->rmsnorm_forward = cuda_op_rmsnorm_forward<T16>;
    k->residual_rmsnorm_forward = cuda_op_residual_rmsnorm_forward<T16>;
    k->rmsnorm_backward = cuda_op_rmsnorm_backward<T16>;
    k->rope = cuda_op_rope<T16>;
    k->swiglu_forward = cuda_op_swiglu_forward<T16>;
    k->swiglu_backward = cuda_op_swiglu_backward<T16>;
    k->act_to_host_f32 = cuda_op_act_to_host_f32<T16>;
}

// The cuda table on `stream`; host waits go through host_wait(host_wait_ctx, ...).
// gelu_fusion: cuda_matmul.cuh's level; with recomputable_gelu the forward's GELU runs as
// the kernel gelu_forward runs, never in the epilogue, so that a recomputed GELU output
// (activation recompute) equals the forward's bit for bit.
// param_fp16: the compute dtype is fp16 (else bf16). attention: an initialised context (its
// graphs prepared for B x T where it is cudnn), which the table takes over.
static void kernels_cuda_init(Kernels* k, cudaStream_t stream, void (*host_wait)(void*, cudaStream_t, const char*),
                              void* host_wait_ctx, const AttentionContext* attention, int gelu_fusion, int recomputable_gelu,
                              int param_fp16, const CudaKernelsShape* s) {
    memset(k, 0, sizeof(*k));
    CudaKernels* cd = (CudaKernels*)calloc(1, sizeof(CudaKernels));
    cd->stream = stream;
    cd->host_wait = host_wait;
    cd->host_wait_ctx = host_wait_ctx;
    cd->attn = *attention;  // the table owns it from here (kernels_cuda_free destroys it)
    cd->vocab = s->vocab;
    matmul_context_init(&cd->mm);
    matmul_set_gelu_fusion(&cd->mm, gelu_fusion);
    cd->mm.host_wait = host_wait;  // the algorithm timing's one wait per new shape
    cd->mm.host_wait_ctx = host_wait_ctx;
    if (recomputable_gelu) cd->mm.fuse_gelu_forward = 0;
    cd->device_bytes += cd->mm.workspace_bytes;
    cd->device_bytes += attention_context_device_bytes(&cd->attn);  // cuDNN's workspace
    cd->scratch_bytes = cuda_kernels_scratch_bytes(s, attention->impl);
    CUDA_CHECK(cudaMalloc(&cd->scratch, cd->scratch_bytes));
    cd->device_bytes += cd->scratch_bytes;
    cd->tokens_cap = (size_t)s->B * s->T;
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMalloc(&cd->tokens[i], cd->tokens_cap * sizeof(int)));
        // On the model's stream: a legacy-stream memset is not ordered with a non-blocking stream.
        CUDA_CHECK(cudaMemsetAsync(cd->tokens[i], 0, cd->tokens_cap * sizeof(int), stream));
        cd->device_bytes += align_up_256(cd->tokens_cap * sizeof(int));
    }
    cd->host_row_cap = (size_t)s->padded_vocab;
    CUDA_CHECK(cudaMallocHost((void**)&cd->host_row, cd->host_row_cap * sizeof(uint16_t)));
    k->impl = cd;
    k->lm_head_rows = s->padded_vocab;
    k->act_bytes = sizeof(uint16_t);  // bf16 or fp16
    k->gelu_needs_scratch = 0;  // cuBLASLt's DGELU epilogue
    if (param_fp16) kernels_cuda_set_ops<fp16>(k);
    else kernels_cuda_set_ops<bf16>(k);
    k->zero = cuda_op_zero;
    k->tokens = cuda_op_tokens;
    k->to_host_async = cuda_op_to_host_async;
    k->synchronize = cuda_op_synchronize;
    k->mark = cuda_op_mark;
    k->mark_ms = cuda_op_mark_ms;
    k->mark_free = cuda_op_mark_free;
    k->launches = cuda_op_launches;
}

static void kernels_cuda_free(Kernels* k) {
    CudaKernels* cd = cuda_of(k);
    cd->host_wait(cd->host_wait_ctx, cd->stream, "the model's stream at teardown");
    matmul_context_destroy(&cd->mm);
    attention_context_destroy(&cd->attn);
    CUDA_CHECK(cudaFree(cd->scratch));
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaFree(cd->tokens[i]));
    CUDA_CHECK(cudaFreeHost(cd->host_row));
    // libcupti stays loaded: once subscribed, CUPTI has hooked itself into the driver, which
    // calls into it until the process ends (unloading it made train_gpt segfault at exit on
    // an H200, in the CUDA calls after this).
    launch_counter_stop(&cd->launch_count);
    free(cd);
    k->impl = NULL;
}

// Device memory the table allocated (cuBLASLt workspace, kernel scratch, token buffers), and
// the cuBLASLt workspace's part of it.
static size_t kernels_cuda_device_bytes(const Kernels* k) { return ((const CudaKernels*)k->impl)->device_bytes; }
// --matmul-autotune: mode is a MatmulTuneMode or -1 (the build's default); report: whether this
// rank prints the tuning's summary line after the first step.
static void kernels_cuda_set_matmul_autotune(Kernels* k, int mode, int report) {
    CudaKernels* cd = (CudaKernels*)k->impl;
    matmul_set_autotune(&cd->mm, mode);
    cd->mm.tune_report = report;
}
static const char* kernels_cuda_matmul_autotune_name(const Kernels* k) {
    return matmul_autotune_name(((const CudaKernels*)k->impl)->mm.autotune);
}
// --profile-step: count kernel launches from now (0 and *why_not when they cannot be), or stop.
static int kernels_cuda_count_launches(Kernels* k, int on, const char** why_not) {
    LaunchCounter* c = &cuda_of(k)->launch_count;
    if (!on) {
        launch_counter_stop(c);
        return 0;
    }
    const int started = launch_counter_start(c);
    *why_not = c->why_not;
    return started;
}
// The tuning's summary line, once, when shapes were tuned since the last call (the first step's).
static void kernels_cuda_matmul_report(Kernels* k) { matmul_autotune_report(&((CudaKernels*)k->impl)->mm); }
static size_t kernels_cuda_workspace_bytes(const Kernels* k) { return ((const CudaKernels*)k->impl)->mm.workspace_bytes; }
#endif
