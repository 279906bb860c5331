// Rotary position embeddings on the GPU (Llama): the q and k heads of qkv rotated in place after
// the qkv matmul, pair (2i, 2i+1) of position t by t * inv_freq(i) (Meta's interleaved pairs,
// with Llama 3.1's frequency scaling: kernels/rope.h, shared with the CPU twin), and the
// backward, which rotates the gradient back. A header of its own: no other op rotates. CPU
// twin: rope_forward (inverse for the backward) in kernels/cpu_kernels_llama.h. The
// conventions are kernels/cuda_common.cuh's (any even head size).
//
//   rope_cuda                   in place on the q and k heads of qkv [B, T, (NH + 2 KVH) hs];
//                               one thread per (row, 4 pairs) (hs % 8 == 0) or per (row,
//                               pair), looping over the NH + KVH heads, 256 per block.
//                               Reads and writes B T (NH + KVH) hs e each (e = 2 bytes per
//                               T16 element).                                   no scratch
#ifndef FSDP_KERNELS_CUDA_ROPE_CUH
#define FSDP_KERNELS_CUDA_ROPE_CUH

#include <math.h>

#include "kernels/cuda_common.cuh"
#include "kernels/rope.h"

static constexpr int kRopeThreads = 256;

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

#endif  // FSDP_KERNELS_CUDA_ROPE_CUH
