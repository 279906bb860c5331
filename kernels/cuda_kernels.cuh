// Hand-written BF16 CUDA kernels of fsdp.c (everything but matmuls and attention), with
// their host launchers. Each has a CPU twin in kernels/cpu_kernels.h, which is the
// numerical definition; dev/test/test_kernels_cuda.cu compares the two.
//
// Conventions
//   B batch, T sequence length, C channels, N = B*T rows, OC output channels, V real
//   vocabulary, Vp padded vocabulary (Vp >= V). Row-major, like the CPU twins.
//   Storage: activations, parameters and their gradients are 16-bit, T16 = bf16 or fp16 (the
//   run's --param-dtype; every launcher below is a template on it, deduced from its
//   pointers); LayerNorm mean/rstd, losses, master weights, Adam moments and gradient shards
//   are fp32. All arithmetic is fp32 (the grad-norm sum is double). 16-bit results are
//   rounded to nearest even, except the optimizer's bf16 parameter copy, which is
//   stochastically rounded (fp16's is rounded to nearest: store8_param).
//   Accumulate vs overwrite: exactly as the CPU twins. Every *_backward ACCUMULATES (+=)
//   into its gradient outputs (dwte, dwpe, dinp, dweight, dbias); the caller zeroes them.
//   Exception, by design: gelu_backward_inplace_cuda overwrites dout with dinp (no twin;
//   it equals the twin applied to a zeroed dinp). Forward kernels overwrite their outputs.
//   Launchers: every launcher takes a cudaStream_t and only enqueues work on it: no
//   allocation, no synchronisation, no host reads of device data. Scratch memory is passed
//   in by the caller together with its size; the *_scratch_bytes functions say how much is
//   needed (a pure function of the shapes, so it can be sized once before step 0).
//   Preconditions are checked on the host; a violated one prints one line naming the
//   launcher and exits(1) (CUDA_REQUIRE), never a silent wrong answer.
//   Row kernels (encoder, layernorm, bias gradient, cross-entropy) use 128-bit accesses
//   along rows and REQUIRE C (OC, Vp) % 8 == 0 and 16-byte aligned pointers (true for
//   every GPT-2 shape and for cudaMalloc'd buffers at offsets that are multiples of 8
//   elements). Flat kernels (GELU, residual, casts, accumulate, AdamW, sum of squares)
//   accept any n and any alignment: 128-bit accesses when every pointer is 16-byte
//   aligned, a scalar path otherwise, and a scalar tail for the last n % 8 elements.
//   Determinism: no float atomics anywhere. Reductions over rows (embedding, LayerNorm
//   weight/bias, bias gradients, sum of squares) run in an order fixed by the shapes only,
//   so two identical calls give bitwise identical results.
//
// Kernels and scratch
//   encoder_forward_cuda        out[N,C] = wte[inp] + wpe[t] (wpe NULL: wte[inp], Llama)
//                                                                                   no scratch
//   encoder_backward_cuda       dwte[inp[n]] += dout[n]; dwpe[t] += (accumulate) or = (not:
//                               dwpe not read) sum_b dout[b,t], t < T (dwpe NULL: none)
//                               scratch: encoder_backward_scratch_bytes(B, T, vocab)
//                               (3 int arrays of N + CUB radix-sort temp storage; needs
//                               the CUDA device current when called). Token ids must be
//                               in [0, vocab). The positions are sorted by token id
//                               (stable CUB radix sort); the first position of each run
//                               sums the run in position order, so every dwte row receives
//                               its additions in the same order as the CPU twin (bitwise
//                               equal fp32 sums before the final 16-bit rounding).
//   layernorm_forward_cuda      out = LN(inp); mean, rstd [N] fp32 (may be NULL)      no scratch
//   fused_residual_layernorm_forward_cuda
//                               residual = T16(a + b); out = LN(residual) (of the ROUNDED
//                               residual, which is what the backward sees)            no scratch
//   layernorm_backward_cuda     dinp += ...; dweight, dbias += ... (accumulate 1) or = ...
//                               (0: a fresh gradient buffer, never read) (one pass over
//                               x and dout; C <= 8192)
//                               scratch: layernorm_backward_scratch_bytes(N, C)
//                               (2 * G * C floats, G = row blocks <= 512)
//   residual_forward_cuda       out = a + b (out may alias a or b)                   no scratch
//   gelu_forward_cuda           out = gelu(inp), tanh approximation (out may alias inp)
//   gelu_backward_cuda          dinp += gelu'(inp) * dout (dinp must not alias dout)
//   gelu_backward_inplace_cuda  d = gelu'(inp) * d (overwrites)                      no scratch
//   bias_backward_cuda          dbias[OC] += (accumulate 1) or = (0) sum over N rows of dout
//                               scratch: bias_backward_scratch_bytes(N, OC)
//                               (G * OC floats, G = row blocks <= 256)
//   crossentropy_softmax_fused_cuda
//                               losses[N] fp32; dloss != 0: logits overwritten in place
//                               with dlogits (T16), padded columns 0                 no scratch
//   adamw_update_cuda           adamw_update's formula on a flat fp32 range (weight decay per
//                               element from a table of decayed runs, so one launch covers a
//                               unit), plus the compute-dtype parameter copy (param_copy_cuda)
//   sum_squares_cuda            out (double, device) = [out +] sum x^2
//   sum_f32_cuda                out (double, device) = [out +] sum x (same scratch)
//                               scratch: sum_squares_scratch_bytes() (8 KiB)
//   fold_grad_cuda              dst (fp32) = or += src (fp32 or T16), optionally adding the
//                               new values' sum of squares to a device double (same scratch)
//   grad_clip_scale_cuda        scale = clip / norm if 0 < clip < norm, else 1 (as fsdp.c)
//   param_copy_cuda             the compute-dtype copy of fp32 master weights (bf16:
//                               stochastic rounding; fp16: to nearest)
//   cast_from_f32_cuda, cast_to_f32_cuda, accumulate_f32_cuda, accumulate_to_f32_cuda
//                                                                                   no scratch
//
// Stochastic rounding (adamw_update_cuda, param_copy_cuda, bf16): the random bits of
// element i are sr_bits(sr_key(seed, step), global_offset + i) (cuda_common.cuh), where
// global_offset is the GLOBAL index of element 0 of the range in its flat unit. So the
// result does not depend on the world size, on the sharding, nor on how a range is split
// into launches, and the fused AdamW copy equals param_copy_cuda of the updated
// master with the same (seed, step, global_offset). Give each flat unit its own seed
// (e.g. a hash of the run seed and the unit index) so that units do not share bits.
#ifndef FSDP_KERNELS_CUDA_KERNELS_CUH
#define FSDP_KERNELS_CUDA_KERNELS_CUH

#include <cub/device/device_radix_sort.cuh>
#include <math.h>
#include <type_traits>

#include "kernels/cuda_common.cuh"

static constexpr float kLayerNormEps = 1e-5f;                // as the CPU twin
static constexpr float kGeluScale = 0.7978845608028654f;     // sqrt(2/pi)
static constexpr int kFlatThreads = 256;                     // flat kernels: 8 elements/thread
static constexpr int kLayerNormFwdWarps = 8;                 // rows (warps) per block
static constexpr int kLayerNormBwdMaxBlocks = 512;
static constexpr int kLayerNormBwdMinRows = 16;
static constexpr int kBiasBwdMaxBlocks = 256;
static constexpr int kBiasBwdMinRows = 32;
static constexpr int kCrossEntropyThreads = 512;
static constexpr int kSumSqThreads = 256;
static constexpr int kSumSqMaxBlocks = 1024;                 // also the finish kernel's width

// ----------------------------------------------------------------------------
// Host-side helpers

// Grid for a flat kernel: one thread per group of 8 elements.
static inline unsigned flat_grid(size_t n) {
    const size_t blocks = ceil_div(ceil_div(n, (size_t)8), (size_t)kFlatThreads);
    CUDA_REQUIRE(blocks <= 0x7fffffffu, "n = %zu is too large for one launch", n);
    return (unsigned)blocks;
}

// Rows [g * rows, min(N, (g + 1) * rows)) go to block g of a two-pass row reduction. The
// split depends only on N, never on the device, so the summation order is fixed.
static inline void row_partition(int N, int min_rows, int max_blocks, int* rows, int* blocks) {
    int r = ceil_div(N, max_blocks);
    if (r < min_rows) r = min_rows;
    *rows = r;
    *blocks = ceil_div(N, r);
}

// ----------------------------------------------------------------------------
// Shared device pieces

// 0.5 * (1 + tanh(u)) == sigmoid(2u), from e = exp(-2|u|) <= 1 (no overflow, no
// cancellation for large negative x), exactly as the CPU twin. Also returns
// sigmoid(2u) * (1 - sigmoid(2u)) = e / (1 + e)^2 in *dsig.
static __device__ __forceinline__ float gelu_sigmoid(float u, float* dsig) {
    const float e = expf(-2.0f * fabsf(u));
    const float inv = 1.0f / (1.0f + e);
    *dsig = e * inv * inv;
    return (u >= 0.0f ? 1.0f : e) * inv;
}
static __device__ __forceinline__ float gelu_value(float x) {
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    float dsig;
    return x * gelu_sigmoid(u, &dsig);
}
static __device__ __forceinline__ float gelu_grad(float x) {
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    float dsig;
    const float sig = gelu_sigmoid(u, &dsig);
    return sig + 2.0f * x * dsig * du;
}

// dst[c] += (accumulate) or = (not: dst is not read) the sum over g (in order, strided by 8
// per thread row, then the 8 partial sums in order) of partial[g * C + c]. Block (32, 8),
// grid ceil(C / 32). Deterministic; both forms give the same bits on a zeroed dst.
template <class T16>
static __global__ void __launch_bounds__(256)
sum_partials_kernel(T16* __restrict__ dst, const float* __restrict__ partial, int G, int C, int accumulate) {
    __shared__ float sh[8][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C) {
        for (int g = threadIdx.y; g < G; g += 8) acc += partial[(size_t)g * C + c];
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float total = 0.0f;
#pragma unroll
        for (int y = 0; y < 8; y++) total += sh[y][threadIdx.x];
        dst[c] = from_float<T16>(accumulate ? to_float(dst[c]) + total : total);
    }
}

template <class T16>
static inline void sum_partials(T16* dst, const float* partial, int G, int C, int accumulate, cudaStream_t stream) {
    sum_partials_kernel<<<ceil_div(C, 32), dim3(32, 8), 0, stream>>>(dst, partial, G, C, accumulate);
    CUDA_LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// Encoder

// One thread per 8 channels of one row.
template <class T16>
static __global__ void __launch_bounds__(256)
encoder_forward_kernel(T16* __restrict__ out, const int* __restrict__ inp,
                       const T16* __restrict__ wte, const T16* __restrict__ wpe,
                       int N, int T, int C) {
    const int C8 = C / 8;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C8) return;
    const int n = (int)(idx / C8);
    const size_t col = (idx % C8) * 8;
    const int t = n % T;
    float a[8];
    load8(a, wte + (size_t)inp[n] * C + col);
    if (wpe != NULL) {  // uniform: no learned positions (Llama) is one launch's choice
        float b[8];
        load8(b, wpe + (size_t)t * C + col);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] += b[k];
    }
    store8(out + (size_t)n * C + col, a);
}

static __global__ void iota_kernel(int* __restrict__ x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

// dwte. One warp per (sorted position i, 256-channel chunk blockIdx.y); only the first
// position of each run of equal token ids works: it adds the run's dout rows, in position
// order, to its dwte row, starting from the row's current value (the CPU twin's order).
// Runs are read 32 entries at a time (ballot: a run is a prefix of the chunk) and the rows
// four at a time so that several loads are in flight.
template <class T16>
static __global__ void __launch_bounds__(32)
encoder_backward_wte_kernel(T16* __restrict__ dwte, const T16* __restrict__ dout,
                            const int* __restrict__ sorted_tok, const int* __restrict__ sorted_pos,
                            int N, int C) {
    const int i = blockIdx.x;
    const int tok = sorted_tok[i];
    if (i > 0 && sorted_tok[i - 1] == tok) return;  // uniform over the warp
    const int lane = threadIdx.x;
    const int pack = blockIdx.y * 32 + lane;
    const bool active = pack < C / 8;               // idle lanes still join the shuffles
    const size_t col = (size_t)pack * 8;
    T16* wrow = dwte + (size_t)tok * C + col;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    if (active) load8(acc, wrow);
    for (int j0 = i; j0 < N; j0 += 32) {
        const int j = j0 + lane;
        const bool in_run = j < N && sorted_tok[j] == tok;
        const int my_pos = in_run ? sorted_pos[j] : 0;
        const int cnt = __popc(__ballot_sync(0xffffffffu, in_run));
        for (int q = 0; q < cnt; q += 4) {
            float d[4][8];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int pos = __shfl_sync(0xffffffffu, my_pos, (q + u) & 31);
                if (active && q + u < cnt) {
                    load8(d[u], dout + (size_t)pos * C + col);
                } else {
#pragma unroll
                    for (int k = 0; k < 8; k++) d[u][k] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (q + u < cnt) {
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[k] += d[u][k];
                }
            }
        }
        if (cnt < 32) break;  // the run ended inside this chunk
    }
    if (active) store8(wrow, acc);
}

// dwpe[t] += (accumulate) or = the sum over b (in order) of dout[b, t]. One warp per (t,
// 256-channel chunk).
template <class T16>
static __global__ void __launch_bounds__(32)
encoder_backward_wpe_kernel(T16* __restrict__ dwpe, const T16* __restrict__ dout,
                            int B, int T, int C, int accumulate) {
    const int t = blockIdx.x;
    const int pack = blockIdx.y * 32 + threadIdx.x;
    if (pack >= C / 8) return;
    const size_t col = (size_t)pack * 8;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
#pragma unroll 4
    for (int b = 0; b < B; b++) {
        float d[8];
        load8(d, dout + ((size_t)b * T + t) * C + col);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += d[k];
    }
    float w[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (accumulate) load8(w, dwpe + (size_t)t * C + col);
#pragma unroll
    for (int k = 0; k < 8; k++) w[k] += acc[k];
    store8(dwpe + (size_t)t * C + col, w);
}

// wpe NULL: token embeddings only.
template <class T16>
static inline void encoder_forward_cuda(T16* out, const int* inp, const T16* wte,
                                        const typename NoDeduce<T16>::type* wpe, int B, int T, int C,
                                        cudaStream_t stream) {
    CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && C % 8 == 0, "need C %% 8 == 0 (B=%d T=%d C=%d)", B, T, C);
    CUDA_REQUIRE(is_aligned16(out) && is_aligned16(wte) && is_aligned16(wpe),
                 "out, wte and wpe must be 16-byte aligned");  // a NULL wpe passes
    const int N = B * T;
    if (N == 0) return;
    const size_t threads = (size_t)N * (C / 8);
    encoder_forward_kernel<<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(
        out, inp, wte, wpe, N, T, C);
    CUDA_LAUNCH_CHECK();
}

// Bits of the sort key: token ids are in [0, vocab).
static inline int encoder_sort_bits(int vocab) {
    int bits = 1;
    while (bits < 31 && (1 << bits) < vocab) bits++;
    return bits;
}
static inline size_t encoder_backward_cub_bytes(int N, int vocab) {
    size_t bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs((void*)NULL, bytes, (const int*)NULL, (int*)NULL,
                                               (const int*)NULL, (int*)NULL, N, 0,
                                               encoder_sort_bits(vocab)));
    return bytes;
}
// Scratch layout: sorted ids [N] | positions 0..N-1 [N] | sorted positions [N] | CUB temp.
static inline size_t encoder_backward_scratch_bytes(int B, int T, int vocab) {
    const int N = B * T;
    return 3 * align_up_256((size_t)N * sizeof(int)) + align_up_256(encoder_backward_cub_bytes(N, vocab));
}

// dwpe NULL (no learned positions): dwte only, the dwpe kernel is not launched.
template <class T16>
static inline void encoder_backward_cuda(T16* dwte, typename NoDeduce<T16>::type* dwpe, void* scratch, size_t scratch_bytes,
                                         const T16* dout, const int* inp, int B, int T, int C,
                                         int vocab, int accumulate, cudaStream_t stream) {
    CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && C % 8 == 0 && vocab > 0,
                 "need C %% 8 == 0 and vocab > 0 (B=%d T=%d C=%d vocab=%d)", B, T, C, vocab);
    CUDA_REQUIRE(is_aligned16(dwte) && is_aligned16(dwpe) && is_aligned16(dout),
                 "dwte, dwpe and dout must be 16-byte aligned");
    const int N = B * T;
    if (N == 0) {  // empty sums
        if (!accumulate && dwpe != NULL) CUDA_CHECK(cudaMemsetAsync(dwpe, 0, (size_t)T * C * sizeof(T16), stream));
        return;
    }
    const size_t need = encoder_backward_scratch_bytes(B, T, vocab);
    CUDA_REQUIRE(scratch != NULL && scratch_bytes >= need && is_aligned16(scratch),
                 "scratch of %zu bytes (16-byte aligned) needed, got %zu", need, scratch_bytes);
    const size_t ints = align_up_256((size_t)N * sizeof(int));
    char* base = (char*)scratch;
    int* sorted_tok = (int*)base;
    int* pos = (int*)(base + ints);
    int* sorted_pos = (int*)(base + 2 * ints);
    void* cub_temp = base + 3 * ints;
    size_t cub_bytes = need - 3 * ints;

    iota_kernel<<<ceil_div(N, 256), 256, 0, stream>>>(pos, N);
    CUDA_LAUNCH_CHECK();
    // Stable: equal ids keep increasing positions.
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, inp, sorted_tok, pos, sorted_pos,
                                               N, 0, encoder_sort_bits(vocab), stream));
    const int chunks = ceil_div(C / 8, 32);
    encoder_backward_wte_kernel<<<dim3(N, chunks), 32, 0, stream>>>(dwte, dout, sorted_tok,
                                                                    sorted_pos, N, C);
    CUDA_LAUNCH_CHECK();
    if (dwpe == NULL) return;
    encoder_backward_wpe_kernel<<<dim3(T, chunks), 32, 0, stream>>>(dwpe, dout, B, T, C, accumulate);
    CUDA_LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// LayerNorm forward (optionally fused with the residual add before it)

// One warp per row, 8 channels per lane per step. FUSED: residual = T16(a + b) is written
// first and normalised as rounded; otherwise a is the input and residual/b are unused.
// The row is read three times (sum, squared deviations, output); the re-reads hit L1/L2.
template <bool FUSED, class T16>
static __global__ void __launch_bounds__(kLayerNormFwdWarps * 32)
layernorm_forward_kernel(T16* residual, T16* __restrict__ out, float* __restrict__ mean,
                         float* __restrict__ rstd, const T16* a, const T16* b,
                         const T16* __restrict__ weight, const T16* __restrict__ bias,
                         int N, int C) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * kLayerNormFwdWarps + (threadIdx.x >> 5);
    if (row >= N) return;  // whole warp
    const int C8 = C / 8;
    const size_t off = (size_t)row * C;
    const T16* x = FUSED ? residual + off : a + off;

    float sum = 0.0f;
    for (int p = lane; p < C8; p += 32) {
        float v[8];
        if (FUSED) {
            float vb[8];
            load8(v, a + off + 8 * p);
            load8(vb, b + off + 8 * p);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = to_float(from_float<T16>(v[k] + vb[k]));
            store8(residual + off + 8 * p, v);  // exact: v already holds T16 values
        } else {
            load8(v, x + 8 * p);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) sum += v[k];
    }
    const float m = warp_reduce_sum(sum) / C;

    // Two-pass variance, as the CPU twin (no cancellation when |mean| >> std). The lane
    // reads back only the residual packs it wrote itself.
    float var = 0.0f;
    for (int p = lane; p < C8; p += 32) {
        float v[8];
        load8(v, x + 8 * p);
#pragma unroll
        for (int k = 0; k < 8; k++) { const float d = v[k] - m; var += d * d; }
    }
    const float s = 1.0f / sqrtf(warp_reduce_sum(var) / C + kLayerNormEps);

    for (int p = lane; p < C8; p += 32) {
        float v[8], w[8], bb[8];
        load8(v, x + 8 * p);
        load8(w, weight + 8 * p);
        load8(bb, bias + 8 * p);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = ((v[k] - m) * s) * w[k] + bb[k];
        store8(out + off + 8 * p, v);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

static inline void layernorm_check(const char* what, const void* out, const void* inp,
                                   const void* weight, const void* bias, int N, int C) {
    CUDA_REQUIRE(N >= 0 && C > 0 && C % 8 == 0, "%s: need C %% 8 == 0 (N=%d C=%d)", what, N, C);
    CUDA_REQUIRE(is_aligned16(out) && is_aligned16(inp) && is_aligned16(weight) && is_aligned16(bias),
                 "%s: tensors must be 16-byte aligned", what);
}

// out[N,C] = (inp - mean) * rstd * weight + bias; mean, rstd [N] fp32 (NULL: not stored).
template <class T16>
static inline void layernorm_forward_cuda(T16* out, float* mean, float* rstd, const T16* inp,
                                          const T16* weight, const T16* bias, int N, int C,
                                          cudaStream_t stream) {
    layernorm_check("layernorm_forward_cuda", out, inp, weight, bias, N, C);
    if (N == 0) return;
    layernorm_forward_kernel<false, T16><<<ceil_div(N, kLayerNormFwdWarps), kLayerNormFwdWarps * 32, 0, stream>>>(
        NULL, out, mean, rstd, inp, NULL, weight, bias, N, C);
    CUDA_LAUNCH_CHECK();
}

// residual[N,C] = a + b (T16, may alias a or b); out = layernorm(residual) as above.
template <class T16>
static inline void fused_residual_layernorm_forward_cuda(T16* residual, T16* out, float* mean,
                                                         float* rstd, const T16* a, const T16* b,
                                                         const T16* weight, const T16* bias,
                                                         int N, int C, cudaStream_t stream) {
    layernorm_check("fused_residual_layernorm_forward_cuda", out, a, weight, bias, N, C);
    CUDA_REQUIRE(is_aligned16(residual) && is_aligned16(b), "residual and b must be 16-byte aligned");
    if (N == 0) return;
    layernorm_forward_kernel<true, T16><<<ceil_div(N, kLayerNormFwdWarps), kLayerNormFwdWarps * 32, 0, stream>>>(
        residual, out, mean, rstd, a, b, weight, bias, N, C);
    CUDA_LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// LayerNorm backward: one pass over x and dout
//
// Block g owns rows [g R, (g+1) R) (row_partition: fixed by N, never by the device). Its
// threads split a row's C/8 packs of 8 channels: thread t owns packs t, t + nthreads, ...
// (P of them, a template parameter), the same in every row. The block walks its rows RB at a
// time: each thread loads its packs of x and dout for the RB rows ONCE (kept in registers as
// 16-bit), adds its part of the two row sums sum(dnorm), sum(dnorm * norm) (dnorm = w dout,
// norm = (x - mean) rstd), the block totals them (warp butterfly, then the warps' values in
// warp order, which every thread reads itself from shared memory: all get bitwise equal
// totals), and each thread then writes dinp for its packs and adds norm * dout and dout to
// its dweight/dbias accumulators, rows in order. At the end the block's accumulators are its
// fp32 partials [G][C] (scratch), and a second kernel adds the G partials, in order, to
// dweight and dbias. One barrier per RB rows (the row-sum buffer is double-buffered). Reads
// x, dout, dinp once and writes dinp once; the fixed split makes the sums deterministic.
// dinp must not alias dout or inp.
static constexpr int kLayerNormBwdMaxThreads = 256;  // threads per block (at most)
static constexpr int kLayerNormBwdRowsInFlight = 4;   // P x RB: packs x rows in registers

template <int P, int RB, class T16>
static __global__ void __launch_bounds__(kLayerNormBwdMaxThreads)
layernorm_backward_kernel(T16* __restrict__ dinp, float* __restrict__ partial_w,
                          float* __restrict__ partial_b, const T16* __restrict__ dout,
                          const T16* __restrict__ inp, const T16* __restrict__ weight,
                          const float* __restrict__ mean, const float* __restrict__ rstd,
                          int N, int C, int rows_per_block) {
    __shared__ float red[2][kLayerNormBwdMaxThreads / 32][2 * RB];  // [round parity][warp][sums]
    const int g = blockIdx.x;
    const int r0 = g * rows_per_block;
    const int r1 = min(N, r0 + rows_per_block);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int C8 = C / 8;

    bool have[P];
    float w[P][8], aw[P][8], ab[P][8];
#pragma unroll
    for (int i = 0; i < P; i++) {
        const int p = threadIdx.x + i * blockDim.x;
        have[i] = p < C8;
        if (have[i]) load8(w[i], weight + 8 * p);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (!have[i]) w[i][k] = 0.0f;
            aw[i][k] = 0.0f;
            ab[i][k] = 0.0f;
        }
    }

    int par = 0;  // which half of red this round uses
    for (int rb = r0; rb < r1; rb += RB, par ^= 1) {
        Packed128<T16> xr[RB][P], dr[RB][P];
        float m[RB], s[RB], sums[2 * RB];
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int row = rb + r;
            const bool live = row < r1;  // uniform over the block
            m[r] = live ? mean[row] : 0.0f;
            s[r] = live ? rstd[row] : 0.0f;
            float sd = 0.0f, sdn = 0.0f;
#pragma unroll
            for (int i = 0; i < P; i++) {
                const size_t off = (size_t)row * C + 8 * (size_t)(threadIdx.x + i * blockDim.x);
                if (live && have[i]) {
                    xr[r][i] = load128(inp + off);
                    dr[r][i] = load128(dout + off);
                } else {
                    xr[r][i] = Packed128<T16>::from_bits(make_int4(0, 0, 0, 0));
                    dr[r][i] = xr[r][i];
                }
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const float norm = (to_float(xr[r][i][k]) - m[r]) * s[r];
                    const float dnorm = w[i][k] * to_float(dr[r][i][k]);
                    sd += dnorm;
                    sdn += dnorm * norm;
                }
            }
            sums[2 * r] = warp_reduce_sum(sd);
            sums[2 * r + 1] = warp_reduce_sum(sdn);
        }
        if (lane == 0) {
#pragma unroll
            for (int j = 0; j < 2 * RB; j++) red[par][warp][j] = sums[j];
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < 2 * RB; j++) {
            float t = 0.0f;
            for (int v = 0; v < nwarps; v++) t += red[par][v][j];
            sums[j] = t / (float)C;  // dnorm_mean, dnorm_norm_mean of row j / 2
        }
        // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)); then the parameter
        // gradients of the rows, in row order.
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int row = rb + r;
            if (row >= r1) break;  // uniform
#pragma unroll
            for (int i = 0; i < P; i++) {
                if (!have[i]) continue;
                const size_t off = (size_t)row * C + 8 * (size_t)(threadIdx.x + i * blockDim.x);
                float dx[8];
                load8(dx, dinp + off);
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const float d = to_float(dr[r][i][k]);
                    const float norm = (to_float(xr[r][i][k]) - m[r]) * s[r];
                    const float dnorm = w[i][k] * d;
                    dx[k] += (dnorm - sums[2 * r] - norm * sums[2 * r + 1]) * s[r];
                    aw[i][k] += norm * d;
                    ab[i][k] += d;
                }
                store8(dinp + off, dx);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < P; i++) {
        if (!have[i]) continue;
        const int p = threadIdx.x + i * blockDim.x;
        store8(partial_w + (size_t)g * C + 8 * p, aw[i]);
        store8(partial_b + (size_t)g * C + 8 * p, ab[i]);
    }
}

// Packs per thread (1, 2 or 4; 0 when C is too wide) and threads per block (a multiple of 32).
static inline int layernorm_backward_packs(int C, int* threads) {
    const int C8 = C / 8;
    for (int p = 1; p <= 4; p *= 2) {
        if (C8 <= p * kLayerNormBwdMaxThreads) {
            *threads = ceil_div(ceil_div(C8, p), 32) * 32;
            return p;
        }
    }
    *threads = 0;
    return 0;
}

static inline size_t layernorm_backward_scratch_bytes(int N, int C) {
    int rows, blocks;
    row_partition(N > 0 ? N : 1, kLayerNormBwdMinRows, kLayerNormBwdMaxBlocks, &rows, &blocks);
    return 2 * (size_t)blocks * (size_t)C * sizeof(float);
}

// dinp[N,C] += ..., dweight[C] and dbias[C] += ... (accumulate) or = ... (layernorm_backward's
// formulas); inp is the forward's input (the rounded residual), mean/rstd the forward's
// statistics. C <= 8192 (4 packs of 8 channels per thread, 256 threads).
template <class T16>
static inline void layernorm_backward_cuda(T16* dinp, T16* dweight, T16* dbias, void* scratch,
                                           size_t scratch_bytes, const T16* dout, const T16* inp,
                                           const T16* weight, const float* mean, const float* rstd,
                                           int N, int C, int accumulate, cudaStream_t stream) {
    layernorm_check("layernorm_backward_cuda", dinp, inp, weight, dout, N, C);
    int threads = 0;
    const int packs = layernorm_backward_packs(C, &threads);
    CUDA_REQUIRE(packs > 0, "layernorm_backward_cuda: C = %d exceeds the %d channels it supports", C,
                 4 * 8 * kLayerNormBwdMaxThreads);
    if (N == 0) {  // empty sums
        if (!accumulate) {
            CUDA_CHECK(cudaMemsetAsync(dweight, 0, (size_t)C * sizeof(T16), stream));
            CUDA_CHECK(cudaMemsetAsync(dbias, 0, (size_t)C * sizeof(T16), stream));
        }
        return;
    }
    const size_t need = layernorm_backward_scratch_bytes(N, C);
    CUDA_REQUIRE(scratch != NULL && scratch_bytes >= need && is_aligned16(scratch),
                 "scratch of %zu bytes (16-byte aligned) needed, got %zu", need, scratch_bytes);
    int rows, blocks;
    row_partition(N, kLayerNormBwdMinRows, kLayerNormBwdMaxBlocks, &rows, &blocks);
    float* partial_w = (float*)scratch;
    float* partial_b = partial_w + (size_t)blocks * C;
    constexpr int RF = kLayerNormBwdRowsInFlight;
    if (packs == 1)
        layernorm_backward_kernel<1, RF><<<blocks, threads, 0, stream>>>(dinp, partial_w, partial_b, dout, inp, weight,
                                                                        mean, rstd, N, C, rows);
    else if (packs == 2)
        layernorm_backward_kernel<2, RF / 2><<<blocks, threads, 0, stream>>>(dinp, partial_w, partial_b, dout, inp,
                                                                            weight, mean, rstd, N, C, rows);
    else
        layernorm_backward_kernel<4, RF / 4><<<blocks, threads, 0, stream>>>(dinp, partial_w, partial_b, dout, inp,
                                                                            weight, mean, rstd, N, C, rows);
    CUDA_LAUNCH_CHECK();
    sum_partials(dweight, partial_w, blocks, C, accumulate, stream);
    sum_partials(dbias, partial_b, blocks, C, accumulate, stream);
}

// ----------------------------------------------------------------------------
// Flat elementwise kernels: one thread per group of 8 elements. VEC: 128-bit accesses for
// full groups (every pointer 16-byte aligned); the last partial group, and every group when
// !VEC, element by element.

#define FLAT_PROLOGUE(n)                                                                   \
    const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;                 \
    if (i0 >= (n)) return;                                                                 \
    const int cnt = (n) - i0 < 8 ? (int)((n) - i0) : 8;                                     \
    const bool full = VEC && cnt == 8;

template <bool VEC, class T16>
static __global__ void __launch_bounds__(kFlatThreads)
residual_forward_kernel(T16* out, const T16* a, const T16* b, size_t n) {
    FLAT_PROLOGUE(n)
    float x[8], y[8];
    load8_or_n(x, a + i0, full, cnt);
    load8_or_n(y, b + i0, full, cnt);
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] += y[k];
    store8_or_n(out + i0, x, full, cnt);
}

template <bool VEC, class T16>
static __global__ void __launch_bounds__(kFlatThreads)
gelu_forward_kernel(T16* out, const T16* inp, size_t n) {
    FLAT_PROLOGUE(n)
    float x[8];
    load8_or_n(x, inp + i0, full, cnt);
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = gelu_value(x[k]);
    store8_or_n(out + i0, x, full, cnt);
}

// INPLACE: dinp == dout and dinp = gelu'(inp) * dout; else dinp += gelu'(inp) * dout.
template <bool VEC, bool INPLACE, class T16>
static __global__ void __launch_bounds__(kFlatThreads)
gelu_backward_kernel(T16* dinp, const T16* inp, const T16* dout, size_t n) {
    FLAT_PROLOGUE(n)
    float x[8], d[8], dx[8];
    load8_or_n(x, inp + i0, full, cnt);
    load8_or_n(d, dout + i0, full, cnt);
    if (!INPLACE) load8_or_n(dx, dinp + i0, full, cnt);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float g = gelu_grad(x[k]) * d[k];
        dx[k] = INPLACE ? g : dx[k] + g;
    }
    store8_or_n(dinp + i0, dx, full, cnt);
}

// dst = src (converted; to 16 bits: round to nearest even), or dst += src when ACC.
template <bool VEC, bool ACC, class Dst, class Src>
static __global__ void __launch_bounds__(kFlatThreads)
convert_kernel(Dst* dst, const Src* src, size_t n) {
    FLAT_PROLOGUE(n)
    float s[8];
    load8_or_n(s, src + i0, full, cnt);
    if (ACC) {
        float d[8];
        load8_or_n(d, dst + i0, full, cnt);
#pragma unroll
        for (int k = 0; k < 8; k++) s[k] = d[k] + s[k];
    }
    store8_or_n(dst + i0, s, full, cnt);
}

// The compute-dtype copy of 8 fp32 master values (cnt valid), element e having global index
// gidx0 + e: bf16 is stochastically rounded; fp16 (10 mantissa bits, and loss scaling for its
// small range) is rounded to nearest even, as mixed-precision training with fp32 master
// weights does (apex, DeepSpeed's fp16 optimizer), and key is unused.
template <class T16>
__device__ __forceinline__ void store8_param(T16* p, const float* v, bool full, int cnt, uint64_t key, uint64_t gidx0) {
    Packed128<T16> r;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if constexpr (std::is_same<T16, bf16>::value) r[k] = sr_round_bf16(v[k], sr_bits(key, gidx0 + k));
        else r[k] = from_float<T16>(v[k]);
    }
    if (full) {
        store128(p, r);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) if (k < cnt) p[k] = r[k];
    }
}

template <bool VEC, class T16>
static __global__ void __launch_bounds__(kFlatThreads)
param_copy_kernel(T16* dst, const float* src, size_t n, uint64_t key, uint64_t global_offset) {
    FLAT_PROLOGUE(n)
    float s[8];
    load8_or_n(s, src + i0, full, cnt);
    store8_param(dst + i0, s, full, cnt, key, global_offset + i0);
}

// adamw_update's arithmetic, element by element, in the same order of float operations
// (optimizer_math.h's adamw_element: explicit roundings, no FMA, so the host's offloaded
// AdamW gives the same bits; the cpu device's loop may fuse and differ in the last bit).
template <bool VEC, class T16>
static __global__ void __launch_bounds__(kFlatThreads)
adamw_kernel(float* param, float* m, float* v, T16* param16, const float* grad, size_t n,
             float lr, float beta1, float beta2, float omb1, float omb2, float bc1, float bc2,
             float eps, float weight_decay, const uint64_t* decay_toggles, int n_toggles,
             float grad_scale, const float* d_grad_scale, const int* d_skip, uint64_t key,
             uint64_t global_offset) {
    if (d_skip != NULL && *d_skip) return;  // the step's decision: a non-finite loss or norm
    FLAT_PROLOGUE(n)
    const float scale = d_grad_scale != NULL ? grad_scale * *d_grad_scale : grad_scale;
    // Per element: weight_decay inside the decayed runs of decay_toggles (an odd number of
    // toggles at or before the index), 0 outside; every element when there is no table.
    float wd[8];
#pragma unroll
    for (int k = 0; k < 8; k++) wd[k] = weight_decay;
    if (decay_toggles != NULL) {
        int lo = 0, hi = n_toggles;  // toggles <= i0: binary search
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (decay_toggles[mid] <= i0) lo = mid + 1;
            else hi = mid;
        }
        int passed = lo;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            while (passed < n_toggles && decay_toggles[passed] <= i0 + k) passed++;
            wd[k] = (passed & 1) ? weight_decay : 0.0f;
        }
    }
    float p[8], mm[8], vv[8], g[8];
    load8_or_n(p, param + i0, full, cnt);
    load8_or_n(mm, m + i0, full, cnt);
    load8_or_n(vv, v + i0, full, cnt);
    load8_or_n(g, grad + i0, full, cnt);
#pragma unroll
    for (int k = 0; k < 8; k++) adamw_element(&p[k], &mm[k], &vv[k], g[k] * scale, lr, beta1, beta2, omb1, omb2, bc1, bc2, eps, wd[k]);
    store8_or_n(param + i0, p, full, cnt);
    store8_or_n(m + i0, mm, full, cnt);
    store8_or_n(v + i0, vv, full, cnt);
    if (param16 != NULL) store8_param(param16 + i0, p, full, cnt, key, global_offset + i0);
}

#undef FLAT_PROLOGUE

// Per-block partial sums (double) of x^2 (SQUARE) or x over a grid-stride loop whose shape
// depends only on n: fixed order, deterministic. The finish kernel adds the partials (one block).
template <bool VEC, bool SQUARE>
static __global__ void __launch_bounds__(kSumSqThreads)
sum_squares_kernel(double* __restrict__ partial, const float* __restrict__ x, size_t n) {
    double acc = 0.0;
    const size_t stride = (size_t)gridDim.x * blockDim.x * 8;
    for (size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i0 < n; i0 += stride) {
        const int cnt = n - i0 < 8 ? (int)(n - i0) : 8;
        const bool full = VEC && cnt == 8;
        float v[8];
        load8_or_n(v, x + i0, full, cnt);
#pragma unroll
        for (int k = 0; k < 8; k++) acc += SQUARE ? (double)v[k] * (double)v[k] : (double)v[k];  // exact products
    }
    acc = block_reduce_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

static __global__ void __launch_bounds__(kSumSqMaxBlocks)
sum_squares_finish_kernel(double* out, const double* __restrict__ partial, int blocks, int accumulate) {
    double v = (int)threadIdx.x < blocks ? partial[threadIdx.x] : 0.0;
    v = block_reduce_sum(v);
    if (threadIdx.x == 0) *out = accumulate ? *out + v : v;
}

// Folds one reduced gradient shard into the fp32 accumulator: dst = src (FIRST: the step's
// first contribution, so nothing was zeroed) or dst += src, and the block's partial sum of
// the new values' squares (double) when partial != NULL. A grid-stride loop shaped by n only,
// as sum_squares_kernel: deterministic.
template <bool VEC, bool FIRST, typename T>
static __global__ void __launch_bounds__(kSumSqThreads)
fold_grad_kernel(float* __restrict__ dst, const T* __restrict__ src, size_t n, double* __restrict__ partial) {
    double acc = 0.0;
    const size_t stride = (size_t)gridDim.x * blockDim.x * 8;
    for (size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i0 < n; i0 += stride) {
        const int cnt = n - i0 < 8 ? (int)(n - i0) : 8;
        const bool full = VEC && cnt == 8;
        float v[8];
        load8_or_n(v, src + i0, full, cnt);
        if (!FIRST) {
            float d[8];
            load8_or_n(d, dst + i0, full, cnt);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = d[k] + v[k];
        }
        store8_or_n(dst + i0, v, full, cnt);
#pragma unroll
        for (int k = 0; k < 8; k++) if (k < cnt) acc += (double)v[k] * (double)v[k];
    }
    if (partial == NULL) return;
    acc = block_reduce_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

static __global__ void grad_clip_scale_kernel(float* scale, float* norm_out, const double* sumsq,
                                              float grad_clip) {
    const float norm = (float)sqrt(*sumsq);
    if (norm_out != NULL) *norm_out = norm;
    *scale = (grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f;
}

// True when every non-NULL pointer is 16-byte aligned: the 128-bit path may be used.
static inline bool all_aligned16(const void* a, const void* b = NULL, const void* c = NULL,
                                 const void* d = NULL, const void* e = NULL) {
    return is_aligned16(a) && is_aligned16(b) && is_aligned16(c) && is_aligned16(d) && is_aligned16(e);
}

// out[n] = a + b (T16). out may alias a or b.
template <class T16>
static inline void residual_forward_cuda(T16* out, const T16* a, const T16* b, size_t n,
                                         cudaStream_t stream) {
    if (n == 0) return;
    if (all_aligned16(out, a, b)) residual_forward_kernel<true><<<flat_grid(n), kFlatThreads, 0, stream>>>(out, a, b, n);
    else residual_forward_kernel<false><<<flat_grid(n), kFlatThreads, 0, stream>>>(out, a, b, n);
    CUDA_LAUNCH_CHECK();
}

// out[n] = gelu(inp) (tanh approximation). out may alias inp.
template <class T16>
static inline void gelu_forward_cuda(T16* out, const T16* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    if (all_aligned16(out, inp)) gelu_forward_kernel<true><<<flat_grid(n), kFlatThreads, 0, stream>>>(out, inp, n);
    else gelu_forward_kernel<false><<<flat_grid(n), kFlatThreads, 0, stream>>>(out, inp, n);
    CUDA_LAUNCH_CHECK();
}

// dinp[n] += gelu'(inp) * dout (the CPU twin's semantics). dinp must not alias dout.
template <class T16>
static inline void gelu_backward_cuda(T16* dinp, const T16* inp, const T16* dout, size_t n,
                                      cudaStream_t stream) {
    CUDA_REQUIRE(dinp != dout, "dinp aliases dout: use gelu_backward_inplace_cuda");
    if (n == 0) return;
    if (all_aligned16(dinp, inp, dout)) gelu_backward_kernel<true, false><<<flat_grid(n), kFlatThreads, 0, stream>>>(dinp, inp, dout, n);
    else gelu_backward_kernel<false, false><<<flat_grid(n), kFlatThreads, 0, stream>>>(dinp, inp, dout, n);
    CUDA_LAUNCH_CHECK();
}

// d_in_out[n] = gelu'(inp) * d_in_out (overwrites: dout becomes dinp, no extra buffer).
template <class T16>
static inline void gelu_backward_inplace_cuda(T16* d_in_out, const T16* inp, size_t n,
                                              cudaStream_t stream) {
    if (n == 0) return;
    if (all_aligned16(d_in_out, inp)) gelu_backward_kernel<true, true><<<flat_grid(n), kFlatThreads, 0, stream>>>(d_in_out, inp, d_in_out, n);
    else gelu_backward_kernel<false, true><<<flat_grid(n), kFlatThreads, 0, stream>>>(d_in_out, inp, d_in_out, n);
    CUDA_LAUNCH_CHECK();
}

template <bool ACC, class Dst, class Src>
static inline void convert_launch(Dst* dst, const Src* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    if (all_aligned16(dst, src)) convert_kernel<true, ACC><<<flat_grid(n), kFlatThreads, 0, stream>>>(dst, src, n);
    else convert_kernel<false, ACC><<<flat_grid(n), kFlatThreads, 0, stream>>>(dst, src, n);
    CUDA_LAUNCH_CHECK();
}

// dst[n] = T16(src), round to nearest even.
template <class T16>
static inline void cast_from_f32_cuda(T16* dst, const float* src, size_t n, cudaStream_t stream) {
    convert_launch<false>(dst, src, n, stream);
}
// dst[n] = float(src) (exact).
template <class T16>
static inline void cast_to_f32_cuda(float* dst, const T16* src, size_t n, cudaStream_t stream) {
    convert_launch<false>(dst, src, n, stream);
}
// dst[n] += src (fp32; e.g. gradient accumulation of shards).
static inline void accumulate_f32_cuda(float* dst, const float* src, size_t n, cudaStream_t stream) {
    convert_launch<true>(dst, src, n, stream);
}
// dst[n] += float(src) (a 16-bit reduce-scatter result into the fp32 shard accumulator).
template <class T16>
static inline void accumulate_to_f32_cuda(float* dst, const T16* src, size_t n, cudaStream_t stream) {
    convert_launch<true>(dst, src, n, stream);
}

// dst[n] = the compute-dtype copy of the fp32 master src, as store8_param rounds it: bf16
// stochastically, element i with sr_bits(sr_key(seed, step), global_offset + i); fp16 to
// nearest even.
template <class T16>
static inline void param_copy_cuda(T16* dst, const float* src, size_t n, uint64_t seed,
                                   int step, size_t global_offset, cudaStream_t stream) {
    if (n == 0) return;
    const uint64_t key = sr_key(seed, step);
    if (all_aligned16(dst, src)) param_copy_kernel<true><<<flat_grid(n), kFlatThreads, 0, stream>>>(dst, src, n, key, global_offset);
    else param_copy_kernel<false><<<flat_grid(n), kFlatThreads, 0, stream>>>(dst, src, n, key, global_offset);
    CUDA_LAUNCH_CHECK();
}

// AdamW on a contiguous fp32 range of n elements, adamw_update's formula (cpu_kernels.h):
//   g = grad * grad_scale [* *d_grad_scale when d_grad_scale != NULL, e.g. the clip factor
//   from grad_clip_scale_cuda]; m, v, param updated in place; t is the 1-based step, the
//   bias corrections 1 - beta^t are computed in double on the host and rounded to float.
// d_skip (device) != NULL and *d_skip: nothing is read or written (a skipped step).
// When param16 != NULL, param16[i] = the compute-dtype copy of the new param[i], rounded as
// param_copy_cuda rounds it (bf16: stochastically with sr_bits(sr_key(seed, t),
// global_offset + i); fp16: to nearest even). With no copy, pass (bf16*)NULL.
//
// decay_toggles (device memory, sorted, n_toggles of them) or NULL: the elements that decay
// are those with an odd number of toggles at or before their index; the others use 0. One
// launch then covers a whole flat unit whose tensors differ in decay (matrices vs biases).
template <class T16>
static inline void adamw_update_cuda(float* param, float* m, float* v, T16* param16,
                                     const float* grad, size_t n, float lr, float beta1,
                                     float beta2, float eps, float weight_decay,
                                     const uint64_t* decay_toggles, int n_toggles, int t,
                                     float grad_scale, const float* d_grad_scale, const int* d_skip,
                                     uint64_t seed, size_t global_offset, cudaStream_t stream) {
    CUDA_REQUIRE(t >= 1, "t = %d: the step count is 1-based", t);
    if (n == 0) return;
    const float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    const float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    const uint64_t key = sr_key(seed, t);
    if (all_aligned16(param, m, v, grad, param16)) {
        adamw_kernel<true><<<flat_grid(n), kFlatThreads, 0, stream>>>(
            param, m, v, param16, grad, n, lr, beta1, beta2, omb1, omb2, bc1, bc2, eps,
            weight_decay, decay_toggles, n_toggles, grad_scale, d_grad_scale, d_skip, key, global_offset);
    } else {
        adamw_kernel<false><<<flat_grid(n), kFlatThreads, 0, stream>>>(
            param, m, v, param16, grad, n, lr, beta1, beta2, omb1, omb2, bc1, bc2, eps,
            weight_decay, decay_toggles, n_toggles, grad_scale, d_grad_scale, d_skip, key, global_offset);
    }
    CUDA_LAUNCH_CHECK();
}

static inline size_t sum_squares_scratch_bytes(void) { return kSumSqMaxBlocks * sizeof(double); }

// *out = sum of x[i]^2 in double (accumulate != 0: *out += that sum). out is device memory;
// nothing is read back to the host. Deterministic for a given n.
template <bool SQUARE>
static inline void sum_f32_launch(double* out, void* scratch, size_t scratch_bytes, const float* x, size_t n,
                                  int accumulate, cudaStream_t stream) {
    CUDA_REQUIRE(scratch != NULL && scratch_bytes >= sum_squares_scratch_bytes() && is_aligned16(scratch),
                 "scratch of %zu bytes (16-byte aligned) needed, got %zu",
                 sum_squares_scratch_bytes(), scratch_bytes);
    size_t blocks = ceil_div(ceil_div(n, (size_t)8), (size_t)kSumSqThreads);
    if (blocks < 1) blocks = 1;
    if (blocks > (size_t)kSumSqMaxBlocks) blocks = kSumSqMaxBlocks;
    double* partial = (double*)scratch;
    if (is_aligned16(x)) sum_squares_kernel<true, SQUARE><<<(unsigned)blocks, kSumSqThreads, 0, stream>>>(partial, x, n);
    else sum_squares_kernel<false, SQUARE><<<(unsigned)blocks, kSumSqThreads, 0, stream>>>(partial, x, n);
    CUDA_LAUNCH_CHECK();
    sum_squares_finish_kernel<<<1, kSumSqMaxBlocks, 0, stream>>>(out, partial, (int)blocks, accumulate);
    CUDA_LAUNCH_CHECK();
}
static inline void sum_squares_cuda(double* out, void* scratch, size_t scratch_bytes, const float* x,
                                    size_t n, int accumulate, cudaStream_t stream) {
    sum_f32_launch<true>(out, scratch, scratch_bytes, x, n, accumulate, stream);
}
// *out = sum of x[i] in double (accumulate != 0: *out += that sum): e.g. a micro-step's
// per-token losses, left on the device. Same scratch and determinism as sum_squares_cuda.
static inline void sum_f32_cuda(double* out, void* scratch, size_t scratch_bytes, const float* x, size_t n,
                                int accumulate, cudaStream_t stream) {
    sum_f32_launch<false>(out, scratch, scratch_bytes, x, n, accumulate, stream);
}

// dst[n] (fp32) = src (first) or dst += src, src fp32 or 16-bit (Src: float, bf16, fp16): a
// reduced gradient shard into the step's accumulator, with no zeroing pass before the first
// one. When sumsq != NULL, *sumsq += the sum of the new dst[i]^2 (double, device; scratch as
// sum_squares_cuda), so the gradient norm costs no pass of its own. Deterministic for a given n.
template <class Src>
static inline void fold_grad_cuda(float* dst, const Src* src, size_t n, int first, double* sumsq,
                                  void* scratch, size_t scratch_bytes, cudaStream_t stream) {
    if (n == 0) return;
    CUDA_REQUIRE(sumsq == NULL || (scratch != NULL && scratch_bytes >= sum_squares_scratch_bytes() && is_aligned16(scratch)),
                 "scratch of %zu bytes (16-byte aligned) needed, got %zu", sum_squares_scratch_bytes(), scratch_bytes);
    size_t blocks = ceil_div(ceil_div(n, (size_t)8), (size_t)kSumSqThreads);
    if (blocks > (size_t)kSumSqMaxBlocks) blocks = kSumSqMaxBlocks;
    double* partial = sumsq != NULL ? (double*)scratch : NULL;
    const bool vec = all_aligned16(dst, src);
    const unsigned g = (unsigned)blocks;
    if (vec && first) fold_grad_kernel<true, true><<<g, kSumSqThreads, 0, stream>>>(dst, src, n, partial);
    else if (vec) fold_grad_kernel<true, false><<<g, kSumSqThreads, 0, stream>>>(dst, src, n, partial);
    else if (first) fold_grad_kernel<false, true><<<g, kSumSqThreads, 0, stream>>>(dst, src, n, partial);
    else fold_grad_kernel<false, false><<<g, kSumSqThreads, 0, stream>>>(dst, src, n, partial);
    CUDA_LAUNCH_CHECK();
    if (sumsq == NULL) return;
    sum_squares_finish_kernel<<<1, kSumSqMaxBlocks, 0, stream>>>(sumsq, partial, (int)blocks, 1);
    CUDA_LAUNCH_CHECK();
}

// From the global sum of squares (after the all-reduce): norm = (float)sqrt(sumsq) and
// scale = grad_clip / norm when grad_clip > 0 and norm > grad_clip, else 1 (fsdp.c's rule),
// both on the device. norm_out may be NULL.
static inline void grad_clip_scale_cuda(float* scale, float* norm_out, const double* sumsq,
                                        float grad_clip, cudaStream_t stream) {
    grad_clip_scale_kernel<<<1, 1, 0, stream>>>(scale, norm_out, sumsq, grad_clip);
    CUDA_LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// Bias gradient: dbias[OC] += column sums of dout[N, OC]
//
// Pass 1: block (32 lanes x 8 row lanes) owns 256 channels (32 x 8) of a block of R rows;
// row lane y sums rows r0 + y, r0 + y + 8, ... in order; the 8 row lanes are added in order
// through shared memory into partial[g][c]. Pass 2: sum_partials over g, in order.
template <class T16>
static __global__ void __launch_bounds__(256)
bias_backward_kernel(float* __restrict__ partial, const T16* __restrict__ dout, int N, int OC,
                     int rows_per_block) {
    __shared__ float sh[8][32 * 8];
    const int g = blockIdx.y;
    const int r0 = g * rows_per_block, r1 = min(N, r0 + rows_per_block);
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int pack = blockIdx.x * 32 + tx;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    if (pack < OC / 8) {
#pragma unroll 4
        for (int r = r0 + ty; r < r1; r += 8) {
            float d[8];
            load8(d, dout + (size_t)r * OC + 8 * (size_t)pack);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += d[k];
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) sh[ty][tx * 8 + k] = acc[k];
    __syncthreads();
    const int t = ty * 32 + tx;
    const int c = blockIdx.x * 256 + t;
    if (c < OC) {
        float s = 0.0f;
#pragma unroll
        for (int y = 0; y < 8; y++) s += sh[y][t];
        partial[(size_t)g * OC + c] = s;
    }
}

static inline size_t bias_backward_scratch_bytes(int N, int OC) {
    int rows, blocks;
    row_partition(N > 0 ? N : 1, kBiasBwdMinRows, kBiasBwdMaxBlocks, &rows, &blocks);
    return (size_t)blocks * (size_t)OC * sizeof(float);
}

template <class T16>
static inline void bias_backward_cuda(T16* dbias, void* scratch, size_t scratch_bytes,
                                      const T16* dout, int N, int OC, int accumulate, cudaStream_t stream) {
    CUDA_REQUIRE(N >= 0 && OC > 0 && OC % 8 == 0, "need OC %% 8 == 0 (N=%d OC=%d)", N, OC);
    CUDA_REQUIRE(is_aligned16(dout), "dout must be 16-byte aligned");
    if (N == 0) {  // an empty sum
        if (!accumulate) CUDA_CHECK(cudaMemsetAsync(dbias, 0, (size_t)OC * sizeof(T16), stream));
        return;
    }
    const size_t need = bias_backward_scratch_bytes(N, OC);
    CUDA_REQUIRE(scratch != NULL && scratch_bytes >= need && is_aligned16(scratch),
                 "scratch of %zu bytes (16-byte aligned) needed, got %zu", need, scratch_bytes);
    int rows, blocks;
    row_partition(N, kBiasBwdMinRows, kBiasBwdMaxBlocks, &rows, &blocks);
    float* partial = (float*)scratch;
    bias_backward_kernel<<<dim3(ceil_div(OC, 256), blocks), dim3(32, 8), 0, stream>>>(
        partial, dout, N, OC, rows);
    CUDA_LAUNCH_CHECK();
    sum_partials(dbias, partial, blocks, OC, accumulate, stream);
}

// ----------------------------------------------------------------------------
// Fused softmax + cross-entropy, one block per row
//
// Pass 1: online max / sum of exp over the V real columns (per thread, then combined over
// the warp and the block in a fixed order). The loss is logsumexp - logit[target] =
// log(sum) + (max - logit[target]), as the CPU twin. Pass 2 (dloss != 0) overwrites the
// row with (softmax - onehot) * dloss for j < V and 0 for V <= j < Vp. Thread 0 reads the
// target logit in pass 1, before the barrier that precedes any write. A target outside
// [0, V) gives a NaN loss (and no one-hot term) instead of an out-of-bounds read.

// (m, s) <- combination of two online-softmax states: s = s1 e^(m1 - m) + s2 e^(m2 - m).
static __device__ __forceinline__ void softmax_combine(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    const float a = (m == -INFINITY) ? 0.0f : s * expf(m - mn);
    const float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - mn);
    m = mn;
    s = a + b;
}

template <class T16>
static __global__ void __launch_bounds__(kCrossEntropyThreads)
crossentropy_softmax_kernel(T16* logits, float* __restrict__ losses, const int* __restrict__ targets,
                            int V, int Vp, float dloss, const float* __restrict__ dloss_scale) {
    __shared__ float sh_m[32], sh_s[32];
    const size_t row = blockIdx.x;
    T16* x = logits + row * (size_t)Vp;
    const int target = targets[row];
    const bool valid = target >= 0 && target < V;
    float target_logit = 0.0f;
    if (threadIdx.x == 0 && valid) target_logit = to_float(x[target]);

    float m = -INFINITY, s = 0.0f;
    const int npacks = ceil_div(V, 8);  // packs touching real columns (inside the row: Vp % 8 == 0)
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
        float v[8];
        load8(v, x + 8 * (size_t)p);
        float pm = -INFINITY;
#pragma unroll
        for (int k = 0; k < 8; k++) if (8 * p + k < V) pm = fmaxf(pm, v[k]);
        float ps = 0.0f;
        if (pm != -INFINITY) {
#pragma unroll
            for (int k = 0; k < 8; k++) if (8 * p + k < V) ps += expf(v[k] - pm);
        }
        softmax_combine(m, s, pm, ps);
    }
    // Warp butterfly (every lane gets the same state), then across warps via shared memory.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        softmax_combine(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }
    __syncthreads();  // after this, the row may be overwritten
    m = -INFINITY;
    s = 0.0f;
    if (lane < nwarps) { m = sh_m[lane]; s = sh_s[lane]; }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        softmax_combine(m, s, m2, s2);
    }
    if (threadIdx.x == 0) losses[row] = valid ? logf(s) + (m - target_logit) : NAN;
    if (dloss == 0.0f) return;
    if (dloss_scale != NULL) dloss *= *dloss_scale;  // the loss scale (fp16): exact, a power of two

    const float kscale = dloss / s;
    for (int p = threadIdx.x; p < Vp / 8; p += blockDim.x) {
        float v[8];
        load8(v, x + 8 * (size_t)p);  // this thread's own pack: not written by anyone else
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int j = 8 * p + k;
            float gk = j < V ? expf(v[k] - m) * kscale : 0.0f;
            if (j == target) gk -= dloss;
            v[k] = gk;
        }
        store8(x + 8 * (size_t)p, v);
    }
}

// losses[N] = -log softmax(logits[i, :V])[targets[i]] (fp32). dloss != 0: logits[N, Vp] is
// overwritten in place with its gradient (T16), padded columns 0; dloss == 0: untouched.
// dloss_scale (device, or NULL): the gradient is that of dloss * *dloss_scale (loss scaling).
template <class T16>
static inline void crossentropy_softmax_fused_cuda(T16* logits, float* losses, const int* targets,
                                                   int N, int V, int Vp, float dloss,
                                                   const float* dloss_scale, cudaStream_t stream) {
    CUDA_REQUIRE(N >= 0 && V > 0 && V <= Vp && Vp % 8 == 0,
                 "need 0 < V <= Vp and Vp %% 8 == 0 (N=%d V=%d Vp=%d)", N, V, Vp);
    CUDA_REQUIRE(is_aligned16(logits), "logits must be 16-byte aligned");
    if (N == 0) return;
    crossentropy_softmax_kernel<<<N, kCrossEntropyThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss,
                                                                         dloss_scale);
    CUDA_LAUNCH_CHECK();
}

#endif  // FSDP_KERNELS_CUDA_KERNELS_CUH
