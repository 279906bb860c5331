// The optimizer's path on the GPU, from a reduced gradient shard to the updated parameters,
// as llm.c's llmc/adamw.cuh and llmc/global_norm.cuh: dtype casts and accumulation of shards,
// the fold of a shard into the fp32 gradient accumulator with its sum of squares (the
// gradient norm costs no pass of its own), the clip scale, and AdamW with the compute-dtype
// parameter copy in the same pass. Flat kernels over fp32 ranges (the FSDP backend calls them
// per unit). CPU twins: adamw_update and sum_squares in kernels/cpu_kernels.h; the
// per-element arithmetic and the rounding bits are kernels/optimizer_math.h's, shared with
// the host's --offload optimizer. The conventions are kernels/cuda_common.cuh's.
//
//   cast_from_f32_cuda, cast_to_f32_cuda, accumulate_f32_cuda, accumulate_to_f32_cuda
//                                                                                   no scratch
//   fold_grad_cuda              dst (fp32) = or += src (fp32 or T16), optionally adding the
//                               new values' sum of squares to a device double (scratch as
//                               sum_squares_cuda)
//   sum_squares_cuda            out (double, device) = [out +] sum x^2
//   sum_f32_cuda                out (double, device) = [out +] sum x (same scratch)
//                               scratch: sum_squares_scratch_bytes() (8 KiB)
//   grad_clip_scale_cuda        scale = clip / norm if 0 < clip < norm, else 1 (as fsdp.c)
//   adamw_update_cuda           adamw_update's formula on a flat fp32 range (weight decay per
//                               element from a table of decayed runs, so one launch covers a
//                               unit), plus the compute-dtype parameter copy (param_copy_cuda)
//   param_copy_cuda             the compute-dtype copy of fp32 master weights (bf16:
//                               stochastic rounding; fp16: to nearest)
//
// Stochastic rounding (adamw_update_cuda, param_copy_cuda, bf16): the random bits of
// element i are sr_bits(sr_key(seed, step), global_offset + i) (cuda_common.cuh), where
// global_offset is the GLOBAL index of element 0 of the range in its flat unit (under
// tensor parallelism, the index of global_offset + i in this rank's unit goes through the
// unit's key runs, optimizer_math.h's sr_key_index, to its index in the unit at TP 1). So the
// result does not depend on the world size, on the sharding, on --tp, nor on how a range is split
// into launches, and the fused AdamW copy equals param_copy_cuda of the updated
// master with the same (seed, step, global_offset). Give each flat unit its own seed
// (e.g. a hash of the run seed and the unit index) so that units do not share bits.
#ifndef FSDP_KERNELS_CUDA_OPTIMIZER_CUH
#define FSDP_KERNELS_CUDA_OPTIMIZER_CUH

#include <math.h>
#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/optimizer_math.h"

static constexpr int kSumSqThreads = 256;
static constexpr int kSumSqMaxBlocks = 1024;                 // also the finish kernel's width

// ----------------------------------------------------------------------------
// Casts and accumulation of shards

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

// ----------------------------------------------------------------------------
// The gradient's sum of squares: on its own, or folded into the accumulation of a shard

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

// ----------------------------------------------------------------------------
// The clip scale

static __global__ void grad_clip_scale_kernel(float* scale, float* norm_out, const double* sumsq,
                                              float grad_clip) {
    const float norm = (float)sqrt(*sumsq);
    if (norm_out != NULL) *norm_out = norm;
    *scale = (grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f;
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
// AdamW and the compute-dtype parameter copy

// The compute-dtype copy of 8 fp32 master values (cnt valid), element e being element
// gidx0 + e of its flat unit: bf16 is stochastically rounded, keyed by the element's index in
// the global unit (sr_key_index through runs[n_runs]; n_runs 0: gidx0 + e itself); fp16 (10
// mantissa bits, and loss scaling for its small range) is rounded to nearest even, as
// mixed-precision training with fp32 master weights does (apex, DeepSpeed's fp16 optimizer),
// and key and runs are unused.
template <class T16>
__device__ __forceinline__ void store8_param(T16* p, const float* v, bool full, int cnt, uint64_t key, uint64_t gidx0,
                                             const SrKeyRun* runs, int n_runs) {
    Packed128<T16> r;
    if constexpr (std::is_same<T16, bf16>::value) {
        uint64_t idx[8];
        if (n_runs == 0) {
#pragma unroll
            for (int k = 0; k < 8; k++) idx[k] = gidx0 + k;
        } else {  // one search, then the 8 elements walk on (as adamw_kernel's decay toggles)
            int at = sr_run_find(runs, n_runs, gidx0);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                while (at + 1 < n_runs && runs[at + 1].local_begin <= gidx0 + k) at++;
                idx[k] = sr_run_index(&runs[at], gidx0 + k);
            }
        }
#pragma unroll
        for (int k = 0; k < 8; k++) r[k] = sr_round_bf16(v[k], sr_bits(key, idx[k]));
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) r[k] = from_float<T16>(v[k]);
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
param_copy_kernel(T16* dst, const float* src, size_t n, uint64_t key, uint64_t global_offset,
                  const SrKeyRun* key_runs, int n_key_runs) {
    FLAT_PROLOGUE(n)
    float s[8];
    load8_or_n(s, src + i0, full, cnt);
    store8_param(dst + i0, s, full, cnt, key, global_offset + i0, key_runs, n_key_runs);
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
             uint64_t global_offset, const SrKeyRun* key_runs, int n_key_runs) {
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
    if (param16 != NULL) store8_param(param16 + i0, p, full, cnt, key, global_offset + i0, key_runs, n_key_runs);
}

// dst[n] = the compute-dtype copy of the fp32 master src, as store8_param rounds it: bf16
// stochastically, element i with sr_bits(sr_key(seed, step), sr_key_index(key_runs,
// n_key_runs, global_offset + i)), key_runs in device memory (none: global_offset + i
// itself); fp16 to nearest even.
template <class T16>
static inline void param_copy_cuda(T16* dst, const float* src, size_t n, uint64_t seed,
                                   int step, size_t global_offset, cudaStream_t stream,
                                   const SrKeyRun* key_runs = NULL, int n_key_runs = 0) {
    if (n == 0) return;
    const uint64_t key = sr_key(seed, step);
    if (all_aligned16(dst, src))
        param_copy_kernel<true><<<flat_grid(n), kFlatThreads, 0, stream>>>(dst, src, n, key, global_offset, key_runs, n_key_runs);
    else
        param_copy_kernel<false><<<flat_grid(n), kFlatThreads, 0, stream>>>(dst, src, n, key, global_offset, key_runs, n_key_runs);
    CUDA_LAUNCH_CHECK();
}

// AdamW on a contiguous fp32 range of n elements, adamw_update's formula (cpu_kernels.h):
//   g = grad * grad_scale [* *d_grad_scale when d_grad_scale != NULL, e.g. the clip factor
//   from grad_clip_scale_cuda]; m, v, param updated in place; t is the 1-based step, the
//   bias corrections 1 - beta^t are computed in double on the host and rounded to float.
// d_skip (device) != NULL and *d_skip: nothing is read or written (a skipped step).
// When param16 != NULL, param16[i] = the compute-dtype copy of the new param[i], rounded as
// param_copy_cuda rounds it (bf16: stochastically with sr_bits(sr_key(seed, t),
// sr_key_index(key_runs, n_key_runs, global_offset + i)); fp16: to nearest even). With no
// copy, pass (bf16*)NULL.
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
                                     uint64_t seed, size_t global_offset, cudaStream_t stream,
                                     const SrKeyRun* key_runs = NULL, int n_key_runs = 0) {
    CUDA_REQUIRE(t >= 1, "t = %d: the step count is 1-based", t);
    if (n == 0) return;
    const float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    const float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    const uint64_t key = sr_key(seed, t);
    if (all_aligned16(param, m, v, grad, param16)) {
        adamw_kernel<true><<<flat_grid(n), kFlatThreads, 0, stream>>>(
            param, m, v, param16, grad, n, lr, beta1, beta2, omb1, omb2, bc1, bc2, eps,
            weight_decay, decay_toggles, n_toggles, grad_scale, d_grad_scale, d_skip, key, global_offset,
            key_runs, n_key_runs);
    } else {
        adamw_kernel<false><<<flat_grid(n), kFlatThreads, 0, stream>>>(
            param, m, v, param16, grad, n, lr, beta1, beta2, omb1, omb2, bc1, bc2, eps,
            weight_decay, decay_toggles, n_toggles, grad_scale, d_grad_scale, d_skip, key, global_offset,
            key_runs, n_key_runs);
    }
    CUDA_LAUNCH_CHECK();
}

#endif  // FSDP_KERNELS_CUDA_OPTIMIZER_CUH
