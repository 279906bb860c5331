// The bias gradient on the GPU: dbias[OC] += (accumulate) or = the column sums of dout[N, OC],
// a deterministic two-pass reduction (no atomics), for the matmuls whose bias cuBLASLt's
// epilogues add in the forward (kernels/cuda_matmul.cuh computes no bias gradient). CPU twin:
// the dbias part of matmul_backward in kernels/cpu_kernels.h. The conventions are
// kernels/cuda_common.cuh's (a row kernel: OC % 8 == 0).
//
//   bias_backward_cuda          dbias[OC] += (accumulate 1) or = (0) sum over N rows of dout
//                               scratch: bias_backward_scratch_bytes(N, OC)
//                               (G * OC floats, G = row blocks <= 256)
#ifndef FSDP_KERNELS_CUDA_BIAS_CUH
#define FSDP_KERNELS_CUDA_BIAS_CUH

#include "kernels/cuda_common.cuh"

static constexpr int kBiasBwdMaxBlocks = 256;
static constexpr int kBiasBwdMinRows = 32;

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

#endif  // FSDP_KERNELS_CUDA_BIAS_CUH
