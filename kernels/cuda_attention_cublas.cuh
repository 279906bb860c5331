// The reference attention path (--attention cublas): cuBLASLt GEMMs around a softmax kernel,
// for any head size. It implements the interface of kernels/cuda_attention.cuh, which
// dispatches here; the flash kernels (kernels/cuda_attention_flash.cuh) are checked against
// it and against the CPU twin. Slow (it materialises T x T) but simple: the path a GPU
// without the flash kernels' instructions (before sm_80) or an unusual head size takes.
//
// How: permutes q to [B,NH,T,hs], k and v to [B,KVH,T,hs], S = q k^T by a strided-batched
// cuBLASLt GEMM in fp32, a causal softmax kernel (fp32 math, writes P in bf16 and lse),
// out = P v, un-permutes. Backward: recomputes S and P from lse, dV = P^T dout, dP = dout v^T, dS = P (dP - rowsum(P dP)) scale
// (a softmax backward kernel, in place over P), dQ = dS k, dK = dS^T q, un-permutes into
// dqkv. GQA: the group's query heads of one kv head are consecutive in [B,NH,T,hs], so
// they form one [group*T, hs] matrix: every GEMM is batched over (b, kv head) with group*T
// rows of q, dout, S, P (k and v are not repeated), and dK = dS^T q, dV = P^T dout sum over
// the group inside the GEMM (k = group*T, fp32 accumulation, one rounding). It
// materialises T x T per (b, head): scratch is about B*NH*T*T*6 bytes plus 4 (forward) or
// 7 (backward) copies of B*T*C bf16, whatever KVH (the k, v, dk, dv copies use B*T*KVH*hs
// of theirs) -- attention_*_scratch_bytes give the exact figures.
// Any head size (cuBLASLt with a fixed algorithm, warp-ordered sums).
#ifndef FSDP_KERNELS_CUDA_ATTENTION_CUBLAS_CUH
#define FSDP_KERNELS_CUDA_ATTENTION_CUBLAS_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_matmul.cuh"

// dst[b,h,t,d] = src[(b*T + t) * src_stride + h*hs + d]   (to [B,NH,T,hs]; NH: the heads of src)
template <class T16>
static __global__ void attn_to_heads_kernel(T16* __restrict__ dst, const T16* __restrict__ src, size_t src_stride,
                                            int B, int T, int NH, int hs) {
    const size_t n = (size_t)B * NH * T * hs;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % hs);
        const size_t r = i / hs;
        const int t = (int)(r % T);
        const size_t bh = r / T;
        const int h = (int)(bh % NH), b = (int)(bh / NH);
        dst[i] = src[((size_t)b * T + t) * src_stride + (size_t)h * hs + d];
    }
}

// dst[(b*T + t) * dst_stride + h*hs + d] = src[b,h,t,d]   (back from [B,NH,T,hs])
template <class T16>
static __global__ void attn_from_heads_kernel(T16* __restrict__ dst, size_t dst_stride, const T16* __restrict__ src,
                                              int B, int T, int NH, int hs) {
    const size_t n = (size_t)B * NH * T * hs;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % hs);
        const size_t r = i / hs;
        const int t = (int)(r % T);
        const size_t bh = r / T;
        const int h = (int)(bh % NH), b = (int)(bh / NH);
        dst[((size_t)b * T + t) * dst_stride + (size_t)h * hs + d] = src[i];
    }
}

// Causal softmax of scaled scores, one warp per row r of S [rows, T] (query i = r % T):
// P[r, j] = exp(S[r, j] scale - lse_r) for j <= i, 0 for j > i (bf16, all T columns written).
// lse_in == NULL: lse_r = max + log(sum exp(. - max)) is computed and stored to lse_out;
// otherwise lse_r = lse_in[r] (the backward's recomputation from the forward's lse).
template <class T16>
static __global__ void attn_softmax_kernel(T16* __restrict__ P, float* __restrict__ lse_out,
                                           const float* __restrict__ lse_in, const float* __restrict__ S,
                                           int rows, int T, float scale) {
    const int warps_per_block = blockDim.x / 32;
    const int r = blockIdx.x * warps_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;  // whole warps exit together
    const int i = r % T;
    const float* srow = S + (size_t)r * T;
    T16* prow = P + (size_t)r * T;
    float L;
    if (lse_in == NULL) {
        float mx = -INFINITY;
        for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, srow[j] * scale);
        mx = warp_reduce_max(mx);
        float sum = 0.0f;
        for (int j = lane; j <= i; j += 32) sum += expf(srow[j] * scale - mx);
        sum = warp_reduce_sum(sum);
        L = mx + logf(sum);
        if (lane == 0) lse_out[r] = L;
    } else {
        L = lse_in[r];
    }
    for (int j = lane; j < T; j += 32) prow[j] = from_float<T16>(j <= i ? expf(srow[j] * scale - L) : 0.0f);
}

// Softmax backward in place, one warp per row: with D = sum_j P[j] dP[j] (P as stored, bf16),
// PdS[j] = P[j] (dP[j] - D) scale for j <= i, 0 beyond. Each lane reads and then writes only
// its own columns, and the reduction separates the two passes.
template <class T16>
static __global__ void attn_softmax_bwd_kernel(T16* __restrict__ PdS, const float* __restrict__ dP, int rows, int T,
                                               float scale) {
    const int warps_per_block = blockDim.x / 32;
    const int r = blockIdx.x * warps_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const int i = r % T;
    T16* row = PdS + (size_t)r * T;
    const float* dprow = dP + (size_t)r * T;
    float D = 0.0f;
    for (int j = lane; j <= i; j += 32) D += to_float(row[j]) * dprow[j];
    D = warp_reduce_sum(D);
    for (int j = lane; j < T; j += 32)
        row[j] = from_float<T16>(j <= i ? to_float(row[j]) * (dprow[j] - D) * scale : 0.0f);
}

// Sub-buffer layout of the cublas path's scratch: nbf bf16 buffers of B*T*C elements, then
// S (fp32) and P (bf16) of B*NH*T*T elements each, every piece 256-byte aligned.
static inline size_t attn_cublas_scratch_bytes(int nbf, int B, int T, int C, int NH) {  // 16-bit q, k, ...
    const size_t btc = (size_t)B * T * C, tt = (size_t)B * NH * T * T;
    return nbf * align_up_256(btc * sizeof(uint16_t)) + align_up_256(tt * sizeof(float)) + align_up_256(tt * sizeof(uint16_t));
}

static inline unsigned attn_grid_1d(size_t n, int threads) {
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535u * 16u) blocks = 65535u * 16u;  // grid-stride loops cover the rest
    return (unsigned)(blocks ? blocks : 1);
}

// Carves the cublas path's scratch: bf[0..nbf-1] then S, P.
template <class T16>
static inline void attn_cublas_carve(void* scratch, int nbf, int B, int T, int C, int NH, T16** bf, float** S, T16** P) {
    const size_t btc = align_up_256((size_t)B * T * C * sizeof(T16));
    const size_t tt = (size_t)B * NH * T * T;
    char* p = (char*)scratch;
    for (int i = 0; i < nbf; i++) { bf[i] = (T16*)p; p += btc; }
    *S = (float*)p;
    p += align_up_256(tt * sizeof(float));
    *P = (T16*)p;
}

// One row-major strided-batched GEMM over the B*NH heads (see matmul_gemm_cuda).
template <class T16>
static inline void attn_batched_gemm(MatmulContext* mm, void* D, cudaDataType_t d_type, int ldd, long long sD,
                                     const T16* A, int lda, int transA, long long sA, const T16* Bm, int ldb,
                                     int transB, long long sB, int M, int N, int K, int batch, cudaStream_t stream) {
    MatmulGemm g = mm_gemm_init();
    g.M = M; g.N = N; g.K = K; g.batch = batch;
    g.ab_type = mm_type_of(A);
    g.A = A; g.lda = lda; g.transA = transA; g.strideA = sA;
    g.B = Bm; g.ldb = ldb; g.transB = transB; g.strideB = sB;
    g.D = D; g.ldd = ldd; g.d_type = d_type; g.strideD = sD;
    matmul_gemm_cuda(mm, &g, stream);
}

// Every GEMM below is batched over the B*KVH (b, kv head) pairs: the group's query heads
// are consecutive in [B,NH,T,hs], so per pair q, dout, S, P are [group*T, .] matrices (batch
// strides group*T*hs and group*T*T) against one [T,hs] k, v (stride T*hs). KVH == NH is the
// per-head batch of plain multi-head attention.
template <class T16>
static inline void attn_cublas_forward(MatmulContext* mm, T16* out, float* lse, const T16* qkv, void* scratch,
                                       int B, int T, int C, int NH, int KVH, cudaStream_t stream) {
    const int hs = C / NH, group = NH / KVH, batch = B * KVH, gT = group * T;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs;
    const long long th = (long long)T * hs, tt = (long long)T * T, gth = group * th, gtt = group * tt;
    T16* bf[4];
    float* S;
    T16* P;
    attn_cublas_carve(scratch, 4, B, T, C, NH, bf, &S, &P);
    T16 *q = bf[0], *k = bf[1], *v = bf[2], *o = bf[3];
    const size_t n = (size_t)B * T * C, nkv = (size_t)B * T * KVH * hs;
    const unsigned grid = attn_grid_1d(n, 256), grid_kv = attn_grid_1d(nkv, 256);
    attn_to_heads_kernel<<<grid, 256, 0, stream>>>(q, qkv, QW, B, T, NH, hs);
    CUDA_LAUNCH_CHECK();
    attn_to_heads_kernel<<<grid_kv, 256, 0, stream>>>(k, qkv + C, QW, B, T, KVH, hs);
    CUDA_LAUNCH_CHECK();
    attn_to_heads_kernel<<<grid_kv, 256, 0, stream>>>(v, qkv + C + (size_t)KVH * hs, QW, B, T, KVH, hs);
    CUDA_LAUNCH_CHECK();
    // S[gT,T] = q[gT,hs] @ k[T,hs]^T per (b, kv head) (fp32, unscaled)
    attn_batched_gemm(mm, S, CUDA_R_32F, T, gtt, q, hs, 0, gth, k, hs, 1, th, gT, T, hs, batch, stream);
    const int rows = B * NH * T;
    attn_softmax_kernel<<<(unsigned)ceil_div(rows, 8), 256, 0, stream>>>(P, lse, NULL, S, rows, T, 1.0f / sqrtf((float)hs));
    CUDA_LAUNCH_CHECK();
    // o[gT,hs] = P[gT,T] @ v[T,hs]
    attn_batched_gemm(mm, o, mm_type_of(o), hs, gth, P, T, 0, gtt, v, hs, 0, th, gT, hs, T, batch, stream);
    attn_from_heads_kernel<<<grid, 256, 0, stream>>>(out, (size_t)C, o, B, T, NH, hs);
    CUDA_LAUNCH_CHECK();
}

template <class T16>
static inline void attn_cublas_backward(MatmulContext* mm, T16* dqkv, const T16* dout, const T16* qkv,
                                        const float* lse, void* scratch, int B, int T, int C, int NH, int KVH,
                                        cudaStream_t stream) {
    const int hs = C / NH, group = NH / KVH, batch = B * KVH, gT = group * T;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs;
    const long long th = (long long)T * hs, tt = (long long)T * T, gth = group * th, gtt = group * tt;
    const float scale = 1.0f / sqrtf((float)hs);
    T16* bf[7];
    float* S;
    T16* P;
    attn_cublas_carve(scratch, 7, B, T, C, NH, bf, &S, &P);
    T16 *q = bf[0], *k = bf[1], *v = bf[2], *dO = bf[3], *dq = bf[4], *dk = bf[5], *dv = bf[6];
    const size_t n = (size_t)B * T * C, nkv = (size_t)B * T * KVH * hs;
    const unsigned grid = attn_grid_1d(n, 256), grid_kv = attn_grid_1d(nkv, 256);
    attn_to_heads_kernel<<<grid, 256, 0, stream>>>(q, qkv, QW, B, T, NH, hs);
    CUDA_LAUNCH_CHECK();
    attn_to_heads_kernel<<<grid_kv, 256, 0, stream>>>(k, qkv + C, QW, B, T, KVH, hs);
    CUDA_LAUNCH_CHECK();
    attn_to_heads_kernel<<<grid_kv, 256, 0, stream>>>(v, qkv + C + (size_t)KVH * hs, QW, B, T, KVH, hs);
    CUDA_LAUNCH_CHECK();
    attn_to_heads_kernel<<<grid, 256, 0, stream>>>(dO, dout, (size_t)C, B, T, NH, hs);
    CUDA_LAUNCH_CHECK();
    const int rows = B * NH * T;
    // Recompute P from the forward's lse.
    attn_batched_gemm(mm, S, CUDA_R_32F, T, gtt, q, hs, 0, gth, k, hs, 1, th, gT, T, hs, batch, stream);
    attn_softmax_kernel<<<(unsigned)ceil_div(rows, 8), 256, 0, stream>>>(P, NULL, lse, S, rows, T, scale);
    CUDA_LAUNCH_CHECK();
    // dv[T,hs] = P^T @ dO, the group's sum (k = gT)
    attn_batched_gemm(mm, dv, mm_type_of(dv), hs, th, P, T, 1, gtt, dO, hs, 0, gth, T, hs, gT, batch, stream);
    // dP[gT,T] = dO @ v^T (fp32, into S)
    attn_batched_gemm(mm, S, CUDA_R_32F, T, gtt, dO, hs, 0, gth, v, hs, 1, th, gT, T, hs, batch, stream);
    attn_softmax_bwd_kernel<<<(unsigned)ceil_div(rows, 8), 256, 0, stream>>>(P, S, rows, T, scale);
    CUDA_LAUNCH_CHECK();
    // dq = dS @ k, dk = dS^T @ q (the group's sum, k = gT)
    attn_batched_gemm(mm, dq, mm_type_of(dq), hs, gth, P, T, 0, gtt, k, hs, 0, th, gT, hs, T, batch, stream);
    attn_batched_gemm(mm, dk, mm_type_of(dk), hs, th, P, T, 1, gtt, q, hs, 0, gth, T, hs, gT, batch, stream);
    attn_from_heads_kernel<<<grid, 256, 0, stream>>>(dqkv, QW, dq, B, T, NH, hs);
    CUDA_LAUNCH_CHECK();
    attn_from_heads_kernel<<<grid_kv, 256, 0, stream>>>(dqkv + C, QW, dk, B, T, KVH, hs);
    CUDA_LAUNCH_CHECK();
    attn_from_heads_kernel<<<grid_kv, 256, 0, stream>>>(dqkv + C + (size_t)KVH * hs, QW, dv, B, T, KVH, hs);
    CUDA_LAUNCH_CHECK();
}

#endif  // FSDP_KERNELS_CUDA_ATTENTION_CUBLAS_CUH
