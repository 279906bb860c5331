// The loss on the GPU: softmax and cross-entropy fused, one block per row of logits, the
// gradient written over the logits in place (the logits are never needed again), as llm.c's
// llmc/fused_classifier.cuh. CPU twin: crossentropy_softmax_fused in kernels/cpu_kernels.h.
// The conventions are kernels/cuda_common.cuh's (a row kernel: Vp % 8 == 0).
//
//   crossentropy_softmax_fused_cuda
//                               losses[N] fp32; dloss != 0: logits overwritten in place
//                               with dlogits (T16), padded columns 0                 no scratch
//   crossentropy_tp_max_cuda, crossentropy_tp_sums_cuda, crossentropy_tp_finish_cuda
//                               the same loss over logits split by vocabulary columns over
//                               a tensor-parallel group, in three phases (kernels.h:
//                               crossentropy_tp_*); logits [N, Vp_local], Vp_local % 8 == 0,
//                               the first V_local columns real                      no scratch
#ifndef FSDP_KERNELS_CUDA_CROSSENTROPY_CUH
#define FSDP_KERNELS_CUDA_CROSSENTROPY_CUH

#include <math.h>

#include "kernels/cuda_common.cuh"

static constexpr int kCrossEntropyThreads = 512;
static constexpr int kCrossEntropyLoads = 4;  // packs a thread loads before using the first (pass 1)

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

// A row of Vp logits (x, this block's) becomes its dlogits: (softmax - one-hot at target) x dloss,
// the softmax from the row's max m and sum of exponentials s over its V real columns; the
// padding columns from V on become 0 (target -1: none here). Each thread rewrites its own 8-packs.
template <class T16>
static __device__ void write_dlogits_row(T16* x, int Vp, int V, int target, float m, float s, float dloss) {
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
    // The thread's packs p = threadIdx.x + i blockDim.x in order, kCrossEntropyLoads of them
    // loaded before the first is used: the online state (m, s) chains each pack to the last,
    // the loads do not. Bytes in flight: 4 x 16 B a thread, 32 KB per block of 512; ptxas
    // (sm_90, bf16) gives the kernel 59 registers: 2 resident blocks, 64 KB per SM (Hopper
    // wants ~24-32 KB per SM to keep HBM busy; one load a thread at a time was 8 KB per
    // block). Plain loads: pass 2 reads the row again, from L2.
    for (int p0 = threadIdx.x; p0 < npacks; p0 += kCrossEntropyLoads * blockDim.x) {
        float v[kCrossEntropyLoads][8];
#pragma unroll
        for (int u = 0; u < kCrossEntropyLoads; u++) {
            const int p = p0 + u * blockDim.x;
            if (p < npacks) load8(v[u], x + 8 * (size_t)p);
        }
#pragma unroll
        for (int u = 0; u < kCrossEntropyLoads; u++) {
            const int p = p0 + u * blockDim.x;
            if (p >= npacks) break;
            float pm = -INFINITY;
#pragma unroll
            for (int k = 0; k < 8; k++) if (8 * p + k < V) pm = fmaxf(pm, v[u][k]);
            float ps = 0.0f;
            if (pm != -INFINITY) {
#pragma unroll
                for (int k = 0; k < 8; k++) if (8 * p + k < V) ps += expf(v[u][k] - pm);
            }
            softmax_combine(m, s, pm, ps);
        }
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

    write_dlogits_row(x, Vp, V, target, m, s, dloss);
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

// ----------------------------------------------------------------------------
// Vocab-parallel cross-entropy, one block per row of this rank's logits [N, Vp_local]
// (columns [vocab_begin, vocab_begin + Vp_local) of the full row, the first V_local real).
// The caller all-reduces between the phases: the row maxima (MAX), then the sums (SUM). No
// online softmax here: the sums phase has the group's max already, so each thread sums
// exp(x - max) over its packs and the block adds the threads' sums in a fixed order
// (block_reduce_sum: deterministic). Targets are global ids: the rank whose real columns hold
// one reads its logit (sums) and subtracts dloss there (finish); the others add nothing.
// CPU twins: crossentropy_tp_max / _sums / _finish in kernels/cpu_kernels.h.

// Max over a 1-D block whose size is a multiple of 32 (block_reduce_sum's shape); every
// thread gets it.
static __device__ __forceinline__ float block_reduce_max(float v) {
    __shared__ float block_max_buf[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce_max(v);
    if (lane == 0) block_max_buf[warp] = v;
    __syncthreads();
    v = lane < nwarps ? block_max_buf[lane] : -INFINITY;
    v = warp_reduce_max(v);
    __syncthreads();
    return v;
}

// The target's column in this rank's real columns, or -1 (another rank's, or none).
static __device__ __forceinline__ int tp_local_target(int target, int vocab_begin, int V_local) {
    return target >= vocab_begin && target - vocab_begin < V_local ? target - vocab_begin : -1;
}

template <class T16>
static __global__ void __launch_bounds__(kCrossEntropyThreads)
crossentropy_tp_max_kernel(float* __restrict__ row_max, const T16* __restrict__ logits, int V_local, int Vp_local) {
    const T16* x = logits + blockIdx.x * (size_t)Vp_local;
    float m = -INFINITY;
    for (int p = threadIdx.x; p < ceil_div(V_local, 8); p += blockDim.x) {
        float v[8];
        load8(v, x + 8 * (size_t)p);
#pragma unroll
        for (int k = 0; k < 8; k++) if (8 * p + k < V_local) m = fmaxf(m, v[k]);
    }
    m = block_reduce_max(m);
    if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <class T16>
static __global__ void __launch_bounds__(kCrossEntropyThreads)
crossentropy_tp_sums_kernel(float* __restrict__ sums, const T16* __restrict__ logits, const float* __restrict__ row_max,
                            const int* __restrict__ targets, int V_local, int Vp_local, int vocab_begin) {
    const size_t row = blockIdx.x;
    const T16* x = logits + row * (size_t)Vp_local;
    const float m = row_max[row];
    float s = 0.0f;
    for (int p = threadIdx.x; p < ceil_div(V_local, 8); p += blockDim.x) {
        float v[8];
        load8(v, x + 8 * (size_t)p);
#pragma unroll
        for (int k = 0; k < 8; k++) if (8 * p + k < V_local) s += expf(v[k] - m);
    }
    s = block_reduce_sum(s);
    if (threadIdx.x == 0) {
        const int t = tp_local_target(targets[row], vocab_begin, V_local);
        sums[2 * row] = s;
        sums[2 * row + 1] = t >= 0 ? to_float(x[t]) : 0.0f;
    }
}

// The loss from the group's max and sums; dloss != 0: the row becomes its dlogits, as pass 2
// of crossentropy_softmax_kernel (the same expf, scaling and bf16 rounding).
template <class T16>
static __global__ void __launch_bounds__(kCrossEntropyThreads)
crossentropy_tp_finish_kernel(T16* logits, float* __restrict__ losses, const float* __restrict__ row_max,
                              const float* __restrict__ sums, const int* __restrict__ targets, int V_local, int Vp_local,
                              int vocab_begin, float dloss, const float* __restrict__ dloss_scale) {
    const size_t row = blockIdx.x;
    const float m = row_max[row], s = sums[2 * row];
    if (threadIdx.x == 0) losses[row] = logf(s) + (m - sums[2 * row + 1]);
    if (dloss == 0.0f) return;
    if (dloss_scale != NULL) dloss *= *dloss_scale;  // the loss scale (fp16): exact, a power of two
    write_dlogits_row(logits + row * (size_t)Vp_local, Vp_local, V_local, tp_local_target(targets[row], vocab_begin, V_local),
                      m, s, dloss);
}

static inline void crossentropy_tp_check(const void* logits, int N, int V_local, int Vp_local, int vocab_begin) {
    CUDA_REQUIRE(N >= 0 && 0 <= V_local && V_local <= Vp_local && Vp_local > 0 && Vp_local % 8 == 0 && vocab_begin >= 0,
                 "need 0 <= V_local <= Vp_local, Vp_local %% 8 == 0 and vocab_begin >= 0 (N=%d V_local=%d Vp_local=%d "
                 "vocab_begin=%d)", N, V_local, Vp_local, vocab_begin);
    CUDA_REQUIRE(is_aligned16(logits), "logits must be 16-byte aligned");
}

// row_max[N] (fp32) = max of each row's V_local real columns (-inf when V_local is 0).
template <class T16>
static inline void crossentropy_tp_max_cuda(float* row_max, const T16* logits, int N, int V_local, int Vp_local,
                                            cudaStream_t stream) {
    crossentropy_tp_check(logits, N, V_local, Vp_local, 0);
    if (N == 0) return;
    crossentropy_tp_max_kernel<<<N, kCrossEntropyThreads, 0, stream>>>(row_max, logits, V_local, Vp_local);
    CUDA_LAUNCH_CHECK();
}

// sums[2N] (fp32): per row the sum of exp(x - row_max) over the real columns, then the
// target's logit where this rank holds it (else 0). row_max: the group's maxima.
template <class T16>
static inline void crossentropy_tp_sums_cuda(float* sums, const T16* logits, const float* row_max, const int* targets,
                                             int N, int V_local, int Vp_local, int vocab_begin, cudaStream_t stream) {
    crossentropy_tp_check(logits, N, V_local, Vp_local, vocab_begin);
    if (N == 0) return;
    crossentropy_tp_sums_kernel<<<N, kCrossEntropyThreads, 0, stream>>>(sums, logits, row_max, targets, V_local, Vp_local,
                                                                         vocab_begin);
    CUDA_LAUNCH_CHECK();
}

// losses[N] = log(sums[2n]) + row_max[n] - sums[2n + 1] (the group's sums). dloss != 0: the
// logits are overwritten in place with their gradient (padding 0), times *dloss_scale when
// given. dloss == 0 writes only the losses: a warp per row is plenty.
template <class T16>
static inline void crossentropy_tp_finish_cuda(T16* logits, float* losses, const float* row_max, const float* sums,
                                               const int* targets, int N, int V_local, int Vp_local, int vocab_begin,
                                               float dloss, const float* dloss_scale, cudaStream_t stream) {
    crossentropy_tp_check(logits, N, V_local, Vp_local, vocab_begin);
    if (N == 0) return;
    crossentropy_tp_finish_kernel<<<N, dloss != 0.0f ? kCrossEntropyThreads : 32, 0, stream>>>(
        logits, losses, row_max, sums, targets, V_local, Vp_local, vocab_begin, dloss, dloss_scale);
    CUDA_LAUNCH_CHECK();
}

#endif  // FSDP_KERNELS_CUDA_CROSSENTROPY_CUH
