// The loss on the GPU: softmax and cross-entropy fused, one block per row of logits, the
// gradient written over the logits in place (the logits are never needed again), as llm.c's
// llmc/fused_classifier.cuh. CPU twin: crossentropy_softmax_fused in kernels/cpu_kernels.h.
// The conventions are kernels/cuda_common.cuh's (a row kernel: Vp % 8 == 0).
//
//   crossentropy_softmax_fused_cuda
//                               losses[N] fp32; dloss != 0: logits overwritten in place
//                               with dlogits (T16), padded columns 0                 no scratch
#ifndef FSDP_KERNELS_CUDA_CROSSENTROPY_CUH
#define FSDP_KERNELS_CUDA_CROSSENTROPY_CUH

#include <math.h>

#include "kernels/cuda_common.cuh"

static constexpr int kCrossEntropyThreads = 512;

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

#endif  // FSDP_KERNELS_CUDA_CROSSENTROPY_CUH
