// The normalisations on the GPU, both families' in one place: LayerNorm (GPT-2) and RMSNorm
// (Llama), each alone and fused with the residual add before it (the cuda table adds residuals
// only there), and their backwards, as llm.c's llmc/layernorm.cuh. RMSNorm is LayerNorm's
// scheme without the mean and the bias: its kernels reuse LayerNorm's launch shapes and
// backward partition. CPU twins: layernorm_* (and residual_forward for the fused
// add) in kernels/cpu_kernels.h, rmsnorm_* in kernels/cpu_kernels_llama.h. The conventions are
// kernels/cuda_common.cuh's; LayerNorm needs C % 8 == 0, RMSNorm takes any C.
//
// Kernels (for RMSNorm, e = 2 bytes per T16 element; bytes are each launch's DRAM traffic,
// re-reads of a row it just touched counted once)
//   layernorm_forward_cuda      out = LN(inp); mean, rstd [N] fp32 (may be NULL)      no scratch
//   fused_residual_layernorm_forward_cuda
//                               residual = T16(a + b); out = LN(residual) (of the ROUNDED
//                               residual, which is what the backward sees)            no scratch
//   layernorm_backward_cuda     dinp += ...; dweight, dbias += ... (accumulate 1) or = ...
//                               (0: a fresh gradient buffer, never read) (one pass over
//                               x and dout; C <= 8192)
//                               scratch: layernorm_backward_scratch_bytes(N, C)
//                               (2 * G * C floats, G = row blocks <= 512)
//   rmsnorm_forward_cuda        out = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps) [N] fp32 (eps: the
//                               model's norm_eps, as LayerNorm's; a kernel argument).
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
#ifndef FSDP_KERNELS_CUDA_NORM_CUH
#define FSDP_KERNELS_CUDA_NORM_CUH

#include <math.h>

#include "kernels/cuda_common.cuh"

static constexpr int kLayerNormFwdWarps = 8;                 // rows (warps) per block
static constexpr int kLayerNormBwdMaxBlocks = 512;
static constexpr int kLayerNormBwdMinRows = 16;

// ----------------------------------------------------------------------------
// LayerNorm forward (optionally fused with the residual add before it)

// One warp per row, 8 channels per lane per step. FUSED: residual = T16(a + b) is written
// first and normalised as rounded; otherwise a is the input and residual/b are unused.
// The statistics take three passes over the row (sum, squared deviations, output). PACKS > 0
// (C <= 256 PACKS): each lane keeps its packs of the row in registers between the passes, so
// the row is read once, with streaming loads (evict-first: the block's inputs are not read
// again until the backward, long after); PACKS = 0 (wider rows): each pass reads the row
// again, the re-reads hitting L1/L2. The arithmetic, and its order, is the same either way.
// Bytes in flight (Hopper: ~4.8 TB/s x ~0.7 us = 3-4 MB across 132 SMs, 24-32 KB per SM):
// with the row kept, a lane issues all its 16-byte loads (two per pack when FUSED) before it
// needs any: at d12's C = 768 (3 packs a lane) 1.5 KB per warp (3 KB fused), at d48's
// C = 1600 (6-7) 3.2 KB (6.4 KB). ptxas (sm_90, bf16) gives PACKS 4 62 registers (fused 56):
// 4 blocks, 32 warps per SM, 48 KB (96 KB) in flight; PACKS 8 103 (92): 2 blocks, 16 warps,
// 51 KB (102 KB). (PACKS 0: 32-34 registers, 8 blocks.)
// Re-reading instead, a pass had in flight what the compiler unrolled of its loop (a trip
// count unknown at compile time), and the three passes each waited for their own loads.
template <bool FUSED, int PACKS, class T16>
static __global__ void __launch_bounds__(kLayerNormFwdWarps * 32)
layernorm_forward_kernel(T16* residual, T16* __restrict__ out, float* __restrict__ mean,
                         float* __restrict__ rstd, const T16* a, const T16* b,
                         const T16* __restrict__ weight, const T16* __restrict__ bias,
                         int N, int C, float eps) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * kLayerNormFwdWarps + (threadIdx.x >> 5);
    if (row >= N) return;  // whole warp
    const int C8 = C / 8;
    const size_t off = (size_t)row * C;
    const T16* x = FUSED ? residual + off : a + off;
    constexpr int KEPT = PACKS > 0 ? PACKS : 1;
    float kept[KEPT][8];  // the lane's packs p = lane + 32 i (PACKS > 0)

    // The first read of pack p: the input (FUSED: the residual, rounded, written).
    auto first_read = [&](float* v, int p) {
        if (FUSED) {
            float vb[8];
            if (PACKS > 0) { load8cs(v, a + off + 8 * p); load8cs(vb, b + off + 8 * p); }
            else { load8(v, a + off + 8 * p); load8(vb, b + off + 8 * p); }
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = to_float(from_float<T16>(v[k] + vb[k]));
            store8(residual + off + 8 * p, v);  // exact: v already holds T16 values
        } else if (PACKS > 0) {
            load8cs(v, x + 8 * p);
        } else {
            load8(v, x + 8 * p);
        }
    };
    float sum = 0.0f;
    if (PACKS > 0) {
#pragma unroll
        for (int i = 0; i < KEPT; i++) {
            const int p = lane + 32 * i;
            if (p < C8) {
                first_read(kept[i], p);
#pragma unroll
                for (int k = 0; k < 8; k++) sum += kept[i][k];
            }
        }
    } else {
        for (int p = lane; p < C8; p += 32) {
            float v[8];
            first_read(v, p);
#pragma unroll
            for (int k = 0; k < 8; k++) sum += v[k];
        }
    }
    const float m = warp_reduce_sum(sum) / C;

    // Two-pass variance, as the CPU twin (no cancellation when |mean| >> std). Re-reading, a
    // lane reads back only the residual packs it wrote itself.
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < (PACKS > 0 ? KEPT : 1); i++)
        for (int p = lane + 32 * i; p < C8; p += PACKS > 0 ? C8 : 32) {  // once per kept pack, else every pack
            float v[8];
            if (PACKS > 0) { for (int k = 0; k < 8; k++) v[k] = kept[i][k]; }
            else load8(v, x + 8 * p);
#pragma unroll
            for (int k = 0; k < 8; k++) { const float d = v[k] - m; var += d * d; }
        }
    const float s = 1.0f / sqrtf(warp_reduce_sum(var) / C + eps);

#pragma unroll
    for (int i = 0; i < (PACKS > 0 ? KEPT : 1); i++)
        for (int p = lane + 32 * i; p < C8; p += PACKS > 0 ? C8 : 32) {
            float v[8], w[8], bb[8];
            if (PACKS > 0) { for (int k = 0; k < 8; k++) v[k] = kept[i][k]; }
            else load8(v, x + 8 * p);
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

// The layernorm forward's launch: PACKS the fewest of 2, 4, 8 that hold a lane's share of
// the row (ceil(C / 256) packs of 8), else 0 (rows wider than 2048 channels).
template <bool FUSED, class T16>
static inline void layernorm_forward_launch(T16* residual, T16* out, float* mean, float* rstd, const T16* a, const T16* b,
                                            const T16* weight, const T16* bias, int N, int C, float eps, cudaStream_t stream) {
    const int packs = ceil_div(C / 8, 32), grid = ceil_div(N, kLayerNormFwdWarps), threads = kLayerNormFwdWarps * 32;
    if (packs <= 2)
        layernorm_forward_kernel<FUSED, 2, T16><<<grid, threads, 0, stream>>>(residual, out, mean, rstd, a, b, weight, bias, N, C, eps);
    else if (packs <= 4)
        layernorm_forward_kernel<FUSED, 4, T16><<<grid, threads, 0, stream>>>(residual, out, mean, rstd, a, b, weight, bias, N, C, eps);
    else if (packs <= 8)
        layernorm_forward_kernel<FUSED, 8, T16><<<grid, threads, 0, stream>>>(residual, out, mean, rstd, a, b, weight, bias, N, C, eps);
    else
        layernorm_forward_kernel<FUSED, 0, T16><<<grid, threads, 0, stream>>>(residual, out, mean, rstd, a, b, weight, bias, N, C, eps);
    CUDA_LAUNCH_CHECK();
}

static inline void layernorm_check(const char* what, const void* out, const void* inp,
                                   const void* weight, const void* bias, int N, int C) {
    CUDA_REQUIRE(N >= 0 && C > 0 && C % 8 == 0, "%s: need C %% 8 == 0 (N=%d C=%d)", what, N, C);
    CUDA_REQUIRE(is_aligned16(out) && is_aligned16(inp) && is_aligned16(weight) && is_aligned16(bias),
                 "%s: tensors must be 16-byte aligned", what);
}

// out[N,C] = (inp - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps); mean, rstd [N]
// fp32 (NULL: not stored).
template <class T16>
static inline void layernorm_forward_cuda(T16* out, float* mean, float* rstd, const T16* inp,
                                          const T16* weight, const T16* bias, int N, int C, float eps,
                                          cudaStream_t stream) {
    layernorm_check("layernorm_forward_cuda", out, inp, weight, bias, N, C);
    if (N == 0) return;
    layernorm_forward_launch<false, T16>(NULL, out, mean, rstd, inp, NULL, weight, bias, N, C, eps, stream);
}

// residual[N,C] = a + b (T16, may alias a or b); out = layernorm(residual) as above.
template <class T16>
static inline void fused_residual_layernorm_forward_cuda(T16* residual, T16* out, float* mean,
                                                         float* rstd, const T16* a, const T16* b,
                                                         const T16* weight, const T16* bias,
                                                         int N, int C, float eps, cudaStream_t stream) {
    layernorm_check("fused_residual_layernorm_forward_cuda", out, a, weight, bias, N, C);
    CUDA_REQUIRE(is_aligned16(residual) && is_aligned16(b), "residual and b must be 16-byte aligned");
    if (N == 0) return;
    layernorm_forward_launch<true, T16>(residual, out, mean, rstd, a, b, weight, bias, N, C, eps, stream);
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
// dweight and dbias (both in one launch: sum_partials_pair). One barrier per RB rows (the row-sum buffer is double-buffered). Reads
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
    sum_partials_pair(dweight, partial_w, dbias, partial_b, blocks, C, accumulate, stream);  // one launch for both
}

// ----------------------------------------------------------------------------
// RMSNorm forward (optionally fused with the residual add before it)

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

// One warp per row; lane l owns packs l, l + 32, ... of 8 channels (the last one cnt < 8
// wide when C % 8 != 0, its missing elements loaded as zeros, which add nothing). FUSED:
// residual = T16(a + b) is written first and normalised as rounded; otherwise a is the
// input. The row is read twice (sum of squares, output); the re-read hits L1/L2.
template <bool FUSED, bool VEC, class T16>
static __global__ void __launch_bounds__(kLayerNormFwdWarps * 32)
rmsnorm_forward_kernel(T16* residual, T16* __restrict__ out, float* __restrict__ rstd, const T16* a, const T16* b,
                       const T16* __restrict__ weight, int N, int C, float eps) {
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
    const float s = 1.0f / sqrtf(warp_reduce_sum(ss) / C + eps);

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
                                          const T16* weight, int N, int C, float eps, cudaStream_t stream) {
    CUDA_REQUIRE(N >= 0 && C > 0, "need N >= 0 and C > 0 (N=%d C=%d)", N, C);
    if (N == 0) return;
    const unsigned grid = ceil_div(N, kLayerNormFwdWarps);
    const bool vec = C % 8 == 0 && all_aligned16(residual, out, a, b, weight);
    if (vec)
        rmsnorm_forward_kernel<FUSED, true><<<grid, kLayerNormFwdWarps * 32, 0, stream>>>(residual, out, rstd, a, b,
                                                                                         weight, N, C, eps);
    else
        rmsnorm_forward_kernel<FUSED, false><<<grid, kLayerNormFwdWarps * 32, 0, stream>>>(residual, out, rstd, a, b,
                                                                                          weight, N, C, eps);
    CUDA_LAUNCH_CHECK();
}

// out[N,C] = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) [N] fp32 (NULL: not stored).
template <class T16>
static inline void rmsnorm_forward_cuda(T16* out, float* rstd, const T16* inp, const T16* weight, int N, int C,
                                        float eps, cudaStream_t stream) {
    rmsnorm_forward_launch<false, T16>(NULL, out, rstd, inp, NULL, weight, N, C, eps, stream);
}

// residual[N,C] = a + b (T16, may alias a or b); out = rmsnorm(residual) as above.
template <class T16>
static inline void fused_residual_rmsnorm_forward_cuda(T16* residual, T16* out, float* rstd, const T16* a,
                                                       const T16* b, const T16* weight, int N, int C,
                                                       float eps, cudaStream_t stream) {
    rmsnorm_forward_launch<true, T16>(residual, out, rstd, a, b, weight, N, C, eps, stream);
}

// ----------------------------------------------------------------------------
// RMSNorm backward: layernorm_backward_kernel's scheme (above) without the bias
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

#endif  // FSDP_KERNELS_CUDA_NORM_CUH
