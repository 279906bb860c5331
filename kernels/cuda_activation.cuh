// The MLP's activations on the GPU: GELU (GPT-2; tanh approximation, forward, backward and the
// in-place backward the matmul's unfused form uses) and SwiGLU (Llama: silu(gate) * up),
// both families' in one place, as llm.c's llmc/gelu.cuh. GELU usually runs in cuBLASLt's
// matmul epilogues (kernels/cuda_matmul.cuh); these kernels are its unfused form and the
// recompute's. CPU twins: gelu_forward / gelu_backward in kernels/cpu_kernels.h,
// swiglu_forward / swiglu_backward in kernels/cpu_kernels_llama.h. The conventions are
// kernels/cuda_common.cuh's (flat kernels: any n, any alignment; SwiGLU: any F).
//
// Kernels (for SwiGLU, e = 2 bytes per T16 element; bytes are each launch's DRAM traffic)
//   gelu_forward_cuda           out = gelu(inp), tanh approximation (out may alias inp)
//   gelu_backward_cuda          dinp += gelu'(inp) * dout (dinp must not alias dout)
//   gelu_backward_inplace_cuda  d = gelu'(inp) * d (overwrites)                      no scratch
//   swiglu_forward_cuda         out[N, F] = silu(gate) up from inp [N, 2F] = (gate | up).
//                               One thread per 8 outputs of a row, 256 per block.
//                               Reads 2 N F e; writes N F e.                   no scratch
//   swiglu_backward_cuda        dinp [N, 2F] OVERWRITTEN. Launch as the forward.
//                               Reads N F e (dout) + 2 N F e; writes 2 N F e.  no scratch
#ifndef FSDP_KERNELS_CUDA_ACTIVATION_CUH
#define FSDP_KERNELS_CUDA_ACTIVATION_CUH

#include <math.h>

#include "kernels/cuda_common.cuh"

static constexpr float kGeluScale = 0.7978845608028654f;     // sqrt(2/pi)

// ----------------------------------------------------------------------------
// GELU

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

#endif  // FSDP_KERNELS_CUDA_ACTIVATION_CUH
