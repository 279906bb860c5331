// The bias gradient on the GPU: dbias[OC] += (accumulate) or = the column sums of dout[N, OC],
// for the matmuls whose bias cuBLASLt's epilogues add in the forward. Two ways, both
// deterministic: in the weight-gradient GEMM's epilogue where it can be (below), else a
// two-pass reduction of its own (no atomics). CPU twin: the dbias part of matmul_backward in
// kernels/cpu_kernels.h. The conventions are kernels/cuda_common.cuh's (a row kernel:
// OC % 8 == 0).
//
//   matmul_backward_dweight_dbias_cuda   dweight (cuda_matmul.cuh's GEMM) and, when it can,
//                               dbias = (never +=) in the GEMM's BGRADB epilogue; returns
//                               whether it wrote dbias (else the caller reduces it)
//   bias_backward_cuda          dbias[OC] += (accumulate 1) or = (0) sum over N rows of dout
//                               scratch: bias_backward_scratch_bytes(N, OC)
//                               (G * OC floats, G = row blocks <= 256)
//
// The bias gradient in the weight-gradient GEMM. cuBLASLt's BGRADB epilogue ("bias gradient based on the input matrix B": a vector of D's columns,
// summed over the GEMM's k) is, through the mapping of mm_plan_layouts (cuBLAS's B is our A,
// D's columns are our D's rows), dbias[OC] = the sum over the N tokens of dout[N,OC]: the
// bias gradient, in the GEMM that reads dout anyway, with no launch of its own (the
// reduction kernels took two). What the epilogue does and does not do:
//   - it WRITES the gradient (beta applies to D only), in the output's type (cublasLt.h: the
//     bias gradient has "the same type as the output elements"; BIAS_DATA_TYPE is left
//     unset). So it is used only where the gradient is overwritten: accumulate=0, which is
//     every micro-step of an ordinary run (each micro-step's gradient is reduce-scattered
//     and folded into the fp32 shard, fsdp/: the accumulation across micro-steps happens in
//     that fold, in fp32) and the first micro-step of --no-grad-sync-until-last. The later
//     micro-steps of --no-grad-sync-until-last add to a 16-bit slot: there the two reduction
//     kernels run as before (an fp32 sum, one rounding of slot + sum), since the epilogue
//     would need a 16-bit scratch (a second rounding) and an add kernel anyway.
//   - its summation order is the algorithm's: the tuning hashes the bias gradient with D (a
//     candidate whose gradient bits vary between calls, or differ from the reference's in the
//     exact mode, is not chosen), and the reference for a BGRAD shape is the heuristic's
//     first REPEATABLE candidate; when none repeats, or the heuristic has no algorithm for the
//     epilogue, or every candidate fails, that shape is refused: the context remembers it
//     (no further heuristic query), says so once on stderr (and in the tuning's summary), and
//     the caller runs the reduction kernels for it from then on. Under MATMUL_TUNE_OFF there
//     is no timing, so no repeatability check: the heuristic's first is trusted, as for every
//     other GEMM.
#ifndef FSDP_KERNELS_CUDA_BIAS_CUH
#define FSDP_KERNELS_CUDA_BIAS_CUH

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_matmul.cuh"

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

// dweight as matmul_backward_dweight_cuda (accumulate 1 adds, 0 overwrites) and, when dbias is
// given, accumulate is 0 and dweight is 16-bit (the bias gradient takes the output's type),
// dbias[OC] = the column sums of dout WRITTEN by the same GEMM's BGRADB epilogue (see the
// top): returns 1. Returns 0 when it did not (no dbias, accumulate 1, or cuBLASLt refused
// the epilogue for this shape, said once per shape): the caller then reduces dbias itself.
template <class T16>
static inline int matmul_backward_dweight_dbias_cuda(MatmulContext* ctx, void* dweight, cudaDataType_t dweight_type,
                                                     typename NoDeduce<T16>::type* dbias, const T16* dout,
                                                     const T16* inp, int N, int C, int OC, int accumulate,
                                                     cudaStream_t stream) {
    MatmulGemm g = mm_dweight_gemm(dweight, dweight_type, dout, inp, N, C, OC, accumulate);
    if (dbias && !accumulate && dweight_type == g.ab_type) {
        g.epilogue = MATMUL_EPI_BGRAD;
        g.bias = dbias;
        const long long refused = ctx->bgrad_refused;
        if (matmul_gemm_try_cuda(ctx, &g, stream)) return 1;
        if (ctx->bgrad_refused > refused) {  // the first refusal of this shape
            char desc[512];
            mm_describe(desc, sizeof(desc), &g);
            fprintf(stderr, "matmul: cuBLASLt has no deterministic algorithm for %s; this shape's bias gradient runs "
                            "as the reduction kernels from now on\n", desc);
        }
        g.epilogue = MATMUL_EPI_NONE;
        g.bias = NULL;
    }
    matmul_gemm_cuda(ctx, &g, stream);
    return 0;
}

#endif  // FSDP_KERNELS_CUDA_BIAS_CUH
