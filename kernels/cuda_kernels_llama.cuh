// The Llama family's CUDA kernels (16-bit storage T16 = bf16 or fp16, fp32 math), with their
// host launchers: RMSNorm (alone and fused with the residual add), rotary position embeddings
// and SwiGLU. Each has an fp32 CPU twin in kernels/cpu_kernels_llama.h, the numerical
// definition; dev/test/test_kernels_cuda.cu compares the two. The conventions are
// cuda_kernels.cuh's (launchers only enqueue on their stream, scratch is the caller's,
// preconditions fail in one line, no float atomics), whose row partition and partial sums
// these reuse, with one difference: C (F) need not be a multiple of 8. 128-bit accesses are
// used when it is and every pointer is 16-byte aligned (every Llama shape); otherwise a
// scalar path runs the same arithmetic in the same order.
//
// Kernels (e = 2 bytes per T16 element; bytes are each launch's DRAM traffic, re-reads of a
// row it just touched counted once)
//   rmsnorm_forward_cuda        out = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps) [N] fp32.
//                               One warp per row, 8 rows per block of 256 threads.
//                               Reads N C e (x) + C e (w); writes N C e + 4 N.   no scratch
//   fused_residual_rmsnorm_forward_cuda
//                               residual = T16(a + b), then the RMSNorm of the ROUNDED
//                               residual (what the backward and a recompute see). Launch as
//                               above. Reads 2 N C e + C e; writes 2 N C e + 4 N. no scratch
//   rmsnorm_backward_cuda       dinp += ...; dweight += (accumulate 1) or = (0: not read) the
//                               sum over rows of x rstd dout. Kernel 1: G = row_partition(N,
//                               16, 512) blocks of up to 256 threads (1, 2 or 4 packs of 8
//                               channels each; C <= 8192), reads N C e (x) + N C e (dout) +
//                               N C e (dinp) + 4 N + C e, writes N C e + 4 G C (fp32 partials).
//                               Kernel 2 (sum_partials): ceil(C / 32) blocks of 256, reads
//                               4 G C (+ C e when accumulating), writes C e.
//                               scratch: rmsnorm_backward_scratch_bytes(N, C) = 4 G C bytes
//   rope_cuda                   in place on the q and k heads of qkv [B, T, (NH + 2 KVH) hs];
//                               one thread per (row, 4 pairs) (hs % 8 == 0) or per (row,
//                               pair), looping over the NH + KVH heads, 256 per block.
//                               Reads and writes B T (NH + KVH) hs e each.      no scratch
//   swiglu_forward_cuda         out[N, F] = silu(gate) up from inp [N, 2F] = (gate | up).
//                               One thread per 8 outputs of a row, 256 per block.
//                               Reads 2 N F e; writes N F e.                   no scratch
//   swiglu_backward_cuda        dinp [N, 2F] OVERWRITTEN. Launch as the forward.
//                               Reads N F e (dout) + 2 N F e; writes 2 N F e.  no scratch
#ifndef FSDP_KERNELS_CUDA_KERNELS_LLAMA_CUH
#define FSDP_KERNELS_CUDA_KERNELS_LLAMA_CUH

#include <math.h>

#include "kernels/cpu_kernels_llama.h"  // RMSNORM_EPS
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.cuh"
#include "kernels/rope.h"

static constexpr int kRopeThreads = 256;

// The 8 elements of a pack as T16 (cnt valid, zeros after them): one 128-bit load when VEC.
template <bool VEC, class T16>
__device__ __forceinline__ Packed128<T16> load_pack(const T16* p, int cnt) {
    if constexpr (VEC) {
        return load128(p);
    } else {
        Packed128<T16> x;
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = k < cnt ? p[k] : from_float<T16>(0.0f);
        return x;
    }
}

// ----------------------------------------------------------------------------
// RMSNorm forward (optionally fused with the residual add before it)

// One warp per row; lane l owns packs l, l + 32, ... of 8 channels (the last one cnt < 8
// wide when C % 8 != 0, its missing elements loaded as zeros, which add nothing). FUSED:
// residual = T16(a + b) is written first and normalised as rounded; otherwise a is the
// input. The row is read twice (sum of squares, output); the re-read hits L1/L2.
template <bool FUSED, bool VEC, class T16>
static __global__ void __launch_bounds__(kLayerNormFwdWarps * 32)
rmsnorm_forward_kernel(T16* residual, T16* __restrict__ out, float* __restrict__ rstd, const T16* a, const T16* b,
                       const T16* __restrict__ weight, int N, int C) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * kLayerNormFwdWarps + (threadIdx.x >> 5);
    if (row >= N) return;  // whole warp
    const int npacks = ceil_div(C, 8);
    const size_t off = (size_t)row * C;
    const T16* x = FUSED ? residual + off : a + off;

    float ss = 0.0f;
    for (int p = lane; p < npacks; p += 32) {
        const int cnt = min(8, C - 8 * p);
        float v[8];
        if (FUSED) {
            float vb[8];
            load8_or_n(v, a + off + 8 * p, VEC, cnt);
            load8_or_n(vb, b + off + 8 * p, VEC, cnt);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = to_float(from_float<T16>(v[k] + vb[k]));
            store8_or_n(residual + off + 8 * p, v, VEC, cnt);  // exact: v holds T16 values
        } else {
            load8_or_n(v, x + 8 * p, VEC, cnt);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) ss += v[k] * v[k];
    }
    const float s = 1.0f / sqrtf(warp_reduce_sum(ss) / C + RMSNORM_EPS);

    // The lane reads back only the residual packs it wrote itself.
    for (int p = lane; p < npacks; p += 32) {
        const int cnt = min(8, C - 8 * p);
        float v[8], w[8];
        load8_or_n(v, x + 8 * p, VEC, cnt);
        load8_or_n(w, weight + 8 * p, VEC, cnt);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = v[k] * s * w[k];
        store8_or_n(out + off + 8 * p, v, VEC, cnt);
    }
    if (lane == 0 && rstd) rstd[row] = s;
}

template <bool FUSED, class T16>
static inline void rmsnorm_forward_launch(T16* residual, T16* out, float* rstd, const T16* a, const T16* b,
                                          const T16* weight, int N, int C, cudaStream_t stream) {
    CUDA_REQUIRE(N >= 0 && C > 0, "need N >= 0 and C > 0 (N=%d C=%d)", N, C);
    if (N == 0) return;
    const unsigned grid = ceil_div(N, kLayerNormFwdWarps);
    const bool vec = C % 8 == 0 && all_aligned16(residual, out, a, b, weight);
    if (vec)
        rmsnorm_forward_kernel<FUSED, true><<<grid, kLayerNormFwdWarps * 32, 0, stream>>>(residual, out, rstd, a, b,
                                                                                         weight, N, C);
    else
        rmsnorm_forward_kernel<FUSED, false><<<grid, kLayerNormFwdWarps * 32, 0, stream>>>(residual, out, rstd, a, b,
                                                                                          weight, N, C);
    CUDA_LAUNCH_CHECK();
}

// out[N,C] = inp * rstd * weight; rstd [N] fp32 (NULL: not stored). eps = RMSNORM_EPS.
template <class T16>
static inline void rmsnorm_forward_cuda(T16* out, float* rstd, const T16* inp, const T16* weight, int N, int C,
                                        cudaStream_t stream) {
    rmsnorm_forward_launch<false, T16>(NULL, out, rstd, inp, NULL, weight, N, C, stream);
}

// residual[N,C] = a + b (T16, may alias a or b); out = rmsnorm(residual) as above.
template <class T16>
static inline void fused_residual_rmsnorm_forward_cuda(T16* residual, T16* out, float* rstd, const T16* a,
                                                       const T16* b, const T16* weight, int N, int C,
                                                       cudaStream_t stream) {
    rmsnorm_forward_launch<true, T16>(residual, out, rstd, a, b, weight, N, C, stream);
}

// ----------------------------------------------------------------------------
// RMSNorm backward: layernorm_backward_kernel's scheme (cuda_kernels.cuh) without the bias
//
// With y = x s w, s = rstd: dx = s w dout - x s^3 mean(w dout x), the CPU twin's order of
// operations. Block g owns rows [g R, (g+1) R) (row_partition: fixed by N); thread t owns
// packs t, t + nthreads, ... (P of them) in every row and keeps RB rows of x and dout in
// registers; one row sum per row (sum of w dout x: warp butterfly, then the warps' values in
// warp order, read by every thread from shared memory: all get the same bits), one barrier
// per RB rows (double-buffered). Each thread adds x s dout of its channels to its fp32
// accumulators, rows in order; they become the block's partials [G][C] (scratch), which
// sum_partials adds in order to dweight. dinp must not alias dout or inp.
template <bool VEC, int P, int RB, class T16>
static __global__ void __launch_bounds__(kLayerNormBwdMaxThreads)
rmsnorm_backward_kernel(T16* __restrict__ dinp, float* __restrict__ partial_w, const T16* __restrict__ dout,
                        const T16* __restrict__ inp, const T16* __restrict__ weight, const float* __restrict__ rstd,
                        int N, int C, int rows_per_block) {
    __shared__ float red[2][kLayerNormBwdMaxThreads / 32][RB];  // [round parity][warp][row]
    const int g = blockIdx.x;
    const int r0 = g * rows_per_block;
    const int r1 = min(N, r0 + rows_per_block);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int npacks = ceil_div(C, 8);

    int cnt[P];  // valid channels of each of this thread's packs (0: none)
    float w[P][8], aw[P][8];
#pragma unroll
    for (int i = 0; i < P; i++) {
        const int p = threadIdx.x + i * blockDim.x;
        cnt[i] = p < npacks ? min(8, C - 8 * p) : 0;
        if (cnt[i] > 0) load8_or_n(w[i], weight + 8 * p, VEC, cnt[i]);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (cnt[i] == 0) w[i][k] = 0.0f;
            aw[i][k] = 0.0f;
        }
    }

    int par = 0;  // which half of red this round uses
    for (int rb = r0; rb < r1; rb += RB, par ^= 1) {
        Packed128<T16> xr[RB][P], dr[RB][P];
        float s[RB], sums[RB];
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int row = rb + r;
            const bool live = row < r1;  // uniform over the block
            s[r] = live ? rstd[row] : 0.0f;
            float gx = 0.0f;
#pragma unroll
            for (int i = 0; i < P; i++) {
                const size_t off = (size_t)row * C + 8 * (size_t)(threadIdx.x + i * blockDim.x);
                if (live && cnt[i] > 0) {
                    xr[r][i] = load_pack<VEC>(inp + off, cnt[i]);
                    dr[r][i] = load_pack<VEC>(dout + off, cnt[i]);
                } else {
                    xr[r][i] = Packed128<T16>::from_bits(make_int4(0, 0, 0, 0));
                    dr[r][i] = xr[r][i];
                }
#pragma unroll
                for (int k = 0; k < 8; k++) gx += w[i][k] * to_float(dr[r][i][k]) * to_float(xr[r][i][k]);
            }
            sums[r] = warp_reduce_sum(gx);
        }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RB; r++) red[par][warp][r] = sums[r];
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < RB; r++) {
            float t = 0.0f;
            for (int v = 0; v < nwarps; v++) t += red[par][v][r];
            sums[r] = t;
        }
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int row = rb + r;
            if (row >= r1) break;  // uniform
            const float kx = s[r] * s[r] * s[r] * sums[r] / C;
#pragma unroll
            for (int i = 0; i < P; i++) {
                if (cnt[i] == 0) continue;
                const size_t off = (size_t)row * C + 8 * (size_t)(threadIdx.x + i * blockDim.x);
                float dx[8];
                load8_or_n(dx, dinp + off, VEC, cnt[i]);
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const float d = to_float(dr[r][i][k]), x = to_float(xr[r][i][k]);
                    dx[k] += s[r] * w[i][k] * d - kx * x;
                    aw[i][k] += x * s[r] * d;
                }
                store8_or_n(dinp + off, dx, VEC, cnt[i]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < P; i++) {
        if (cnt[i] == 0) continue;
        const int p = threadIdx.x + i * blockDim.x;
        store8_or_n(partial_w + (size_t)g * C + 8 * p, aw[i], VEC, cnt[i]);
    }
}

// Kernel 1 with P packs per thread, RB = kLayerNormBwdRowsInFlight / P rows at a time.
template <bool VEC, class T16>
static inline void rmsnorm_backward_launch(int packs, int blocks, int threads, T16* dinp, float* partial_w,
                                           const T16* dout, const T16* inp, const T16* weight, const float* rstd,
                                           int N, int C, int rows, cudaStream_t stream) {
    constexpr int RF = kLayerNormBwdRowsInFlight;
    if (packs == 1)
        rmsnorm_backward_kernel<VEC, 1, RF><<<blocks, threads, 0, stream>>>(dinp, partial_w, dout, inp, weight, rstd,
                                                                           N, C, rows);
    else if (packs == 2)
        rmsnorm_backward_kernel<VEC, 2, RF / 2><<<blocks, threads, 0, stream>>>(dinp, partial_w, dout, inp, weight,
                                                                               rstd, N, C, rows);
    else
        rmsnorm_backward_kernel<VEC, 4, RF / 4><<<blocks, threads, 0, stream>>>(dinp, partial_w, dout, inp, weight,
                                                                               rstd, N, C, rows);
}

// One fp32 partial row per block of rows: half of LayerNorm's (no bias).
static inline size_t rmsnorm_backward_scratch_bytes(int N, int C) {
    int rows, blocks;
    row_partition(N > 0 ? N : 1, kLayerNormBwdMinRows, kLayerNormBwdMaxBlocks, &rows, &blocks);
    return (size_t)blocks * (size_t)C * sizeof(float);
}

// dinp[N,C] += ..., dweight[C] += ... (accumulate) or = ... (rmsnorm_backward's formulas);
// inp is the forward's input (the rounded residual), rstd the forward's. C <= 8192.
template <class T16>
static inline void rmsnorm_backward_cuda(T16* dinp, T16* dweight, void* scratch, size_t scratch_bytes,
                                         const T16* dout, const T16* inp, const T16* weight, const float* rstd,
                                         int N, int C, int accumulate, cudaStream_t stream) {
    CUDA_REQUIRE(N >= 0 && C > 0, "need N >= 0 and C > 0 (N=%d C=%d)", N, C);
    int threads = 0;
    const int packs = layernorm_backward_packs(8 * ceil_div(C, 8), &threads);
    CUDA_REQUIRE(packs > 0, "C = %d exceeds the %d channels it supports", C, 4 * 8 * kLayerNormBwdMaxThreads);
    if (N == 0) {  // an empty sum
        if (!accumulate) CUDA_CHECK(cudaMemsetAsync(dweight, 0, (size_t)C * sizeof(T16), stream));
        return;
    }
    const size_t need = rmsnorm_backward_scratch_bytes(N, C);
    CUDA_REQUIRE(scratch != NULL && scratch_bytes >= need && is_aligned16(scratch),
                 "scratch of %zu bytes (16-byte aligned) needed, got %zu", need, scratch_bytes);
    int rows, blocks;
    row_partition(N, kLayerNormBwdMinRows, kLayerNormBwdMaxBlocks, &rows, &blocks);
    float* partial_w = (float*)scratch;
    if (C % 8 == 0 && all_aligned16(dinp, dout, inp, weight))
        rmsnorm_backward_launch<true>(packs, blocks, threads, dinp, partial_w, dout, inp, weight, rstd, N, C, rows, stream);
    else
        rmsnorm_backward_launch<false>(packs, blocks, threads, dinp, partial_w, dout, inp, weight, rstd, N, C, rows, stream);
    CUDA_LAUNCH_CHECK();
    sum_partials(dweight, partial_w, blocks, C, accumulate, stream);
}

// ----------------------------------------------------------------------------
// Rotary position embeddings

// One thread per (row n = b T + t, P consecutive pairs of a head): the P angles t
// inv_freq(i) in double and their cos/sin in double, rounded to float as the CPU twin does
// (at long T the angle reaches ~1e5 rad, beyond what float sincos reduces accurately), then
// the same P pairs of each q and k head (contiguous in the row: NH + KVH heads of hs).
template <int P, class T16>
static __global__ void __launch_bounds__(kRopeThreads)
rope_kernel(T16* qkv, int N, int T, int heads, int row_width, int hs, RopeParams rp, int inverse) {
    const int packs = hs / (2 * P);  // per head
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * packs) return;
    const int n = (int)(idx / packs), j = (int)(idx % packs);
    const int t = n % T;
    float c[P], s[P];
#pragma unroll
    for (int u = 0; u < P; u++) {
        double sd, cd;
        sincos((double)t * rope_inv_freq(j * P + u, hs, rp), &sd, &cd);
        c[u] = (float)cd;
        s[u] = inverse ? -(float)sd : (float)sd;
    }
    T16* x = qkv + (size_t)n * row_width + 2 * P * j;
    for (int h = 0; h < heads; h++, x += hs) {
        float v[2 * P];
        if constexpr (P == 4) load8(v, x);
        else for (int k = 0; k < 2 * P; k++) v[k] = to_float(x[k]);
#pragma unroll
        for (int u = 0; u < P; u++) {
            const float x0 = v[2 * u], x1 = v[2 * u + 1];
            v[2 * u] = x0 * c[u] - x1 * s[u];
            v[2 * u + 1] = x0 * s[u] + x1 * c[u];
        }
        if constexpr (P == 4) store8(x, v);
        else for (int k = 0; k < 2 * P; k++) x[k] = from_float<T16>(v[k]);
    }
}

// qkv [B, T, (NH + 2 KVH) hs], in place: pair (2i, 2i+1) of every q and k head at position t
// rotated by t * rope_inv_freq(i, hs, rp) (inverse != 0: by minus that, the backward on
// dqkv); the v heads untouched. hs even.
template <class T16>
static inline void rope_cuda(T16* qkv, int B, int T, int NH, int KVH, int hs, RopeParams rp, int inverse,
                             cudaStream_t stream) {
    CUDA_REQUIRE(B >= 0 && T > 0 && NH > 0 && KVH > 0 && hs > 0 && hs % 2 == 0,
                 "need B >= 0, T, NH, KVH > 0 and an even head size (B=%d T=%d NH=%d KVH=%d hs=%d)", B, T, NH, KVH, hs);
    const int N = B * T, heads = NH + KVH, row_width = (NH + 2 * KVH) * hs;
    if (N == 0) return;
    const bool vec = hs % 8 == 0 && is_aligned16(qkv);
    const size_t threads = (size_t)N * (vec ? hs / 8 : hs / 2);
    const size_t blocks = ceil_div(threads, (size_t)kRopeThreads);
    CUDA_REQUIRE(blocks <= 0x7fffffffu, "%zu threads are too many for one launch", threads);
    if (vec) rope_kernel<4><<<(unsigned)blocks, kRopeThreads, 0, stream>>>(qkv, N, T, heads, row_width, hs, rp, inverse);
    else rope_kernel<1><<<(unsigned)blocks, kRopeThreads, 0, stream>>>(qkv, N, T, heads, row_width, hs, rp, inverse);
    CUDA_LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// SwiGLU: one thread per group of 8 columns j of a row (the last group cnt < 8 wide when
// F % 8 != 0); VEC: 128-bit accesses (F % 8 == 0 and every pointer 16-byte aligned).

static __device__ __forceinline__ float swiglu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <bool VEC, class T16>
static __global__ void __launch_bounds__(kFlatThreads)
swiglu_forward_kernel(T16* __restrict__ out, const T16* __restrict__ inp, int N, int F) {
    const int groups = ceil_div(F, 8);
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * groups) return;
    const size_t n = idx / groups;
    const int j = (int)(idx % groups) * 8, cnt = min(8, F - j);
    const T16* gate = inp + n * 2 * F + j;
    float g[8], u[8];
    load8_or_n(g, gate, VEC, cnt);
    load8_or_n(u, gate + F, VEC, cnt);
#pragma unroll
    for (int k = 0; k < 8; k++) g[k] = g[k] * swiglu_sigmoid(g[k]) * u[k];
    store8_or_n(out + n * F + j, g, VEC, cnt);
}

template <bool VEC, class T16>
static __global__ void __launch_bounds__(kFlatThreads)
swiglu_backward_kernel(T16* __restrict__ dinp, const T16* __restrict__ dout, const T16* __restrict__ inp, int N, int F) {
    const int groups = ceil_div(F, 8);
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * groups) return;
    const size_t n = idx / groups;
    const int j = (int)(idx % groups) * 8, cnt = min(8, F - j);
    const T16* gate = inp + n * 2 * F + j;
    T16* dgate = dinp + n * 2 * F + j;
    float x[8], u[8], d[8], dg[8], du[8];
    load8_or_n(x, gate, VEC, cnt);
    load8_or_n(u, gate + F, VEC, cnt);
    load8_or_n(d, dout + n * F + j, VEC, cnt);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float s = swiglu_sigmoid(x[k]);
        dg[k] = d[k] * u[k] * s * (1.0f + x[k] * (1.0f - s));
        du[k] = d[k] * (x[k] * s);
    }
    store8_or_n(dgate, dg, VEC, cnt);
    store8_or_n(dgate + F, du, VEC, cnt);
}

static inline unsigned swiglu_grid(int N, int F) {
    const size_t blocks = ceil_div((size_t)N * ceil_div(F, 8), (size_t)kFlatThreads);
    CUDA_REQUIRE(blocks <= 0x7fffffffu, "N=%d F=%d is too large for one launch", N, F);
    return (unsigned)blocks;
}

// out[N, F] = silu(gate) * up, inp [N, 2F] = (gate | up) per row. out must not alias inp.
template <class T16>
static inline void swiglu_forward_cuda(T16* out, const T16* inp, int N, int F, cudaStream_t stream) {
    CUDA_REQUIRE(N >= 0 && F > 0, "need N >= 0 and F > 0 (N=%d F=%d)", N, F);
    if (N == 0) return;
    if (F % 8 == 0 && all_aligned16(out, inp))
        swiglu_forward_kernel<true><<<swiglu_grid(N, F), kFlatThreads, 0, stream>>>(out, inp, N, F);
    else
        swiglu_forward_kernel<false><<<swiglu_grid(N, F), kFlatThreads, 0, stream>>>(out, inp, N, F);
    CUDA_LAUNCH_CHECK();
}

// dinp [N, 2F] OVERWRITTEN: (dout up silu'(gate) | dout silu(gate)). dinp must not alias
// dout or inp.
template <class T16>
static inline void swiglu_backward_cuda(T16* dinp, const T16* dout, const T16* inp, int N, int F, cudaStream_t stream) {
    CUDA_REQUIRE(N >= 0 && F > 0, "need N >= 0 and F > 0 (N=%d F=%d)", N, F);
    if (N == 0) return;
    if (F % 8 == 0 && all_aligned16(dinp, dout, inp))
        swiglu_backward_kernel<true><<<swiglu_grid(N, F), kFlatThreads, 0, stream>>>(dinp, dout, inp, N, F);
    else
        swiglu_backward_kernel<false><<<swiglu_grid(N, F), kFlatThreads, 0, stream>>>(dinp, dout, inp, N, F);
    CUDA_LAUNCH_CHECK();
}

#endif  // FSDP_KERNELS_CUDA_KERNELS_LLAMA_CUH
