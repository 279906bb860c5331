// Shared CUDA helpers for fsdp.c: error checks, 16-bit float helpers, 128-bit vector access,
// warp/block reductions, ceil_div, the stochastic-rounding hash, and the launch helpers the op
// headers share (flat kernels, the two-pass row reduction). The hand-written kernels live one
// op per header, as llm.c's llmc/: cuda_encoder.cuh, cuda_norm.cuh (LayerNorm, RMSNorm, the
// residual add), cuda_activation.cuh (GELU, SwiGLU), cuda_bias.cuh, cuda_rope.cuh,
// cuda_crossentropy.cuh, cuda_optimizer.cuh, beside the library-backed cuda_matmul.cuh and
// the attention (cuda_attention.cuh). Each has a CPU twin in kernels/cpu_kernels.h or
// kernels/cpu_kernels_llama.h, which is the numerical definition; dev/test/test_kernels_cuda.cu
// compares the two.
//
// Everything here has internal linkage (static) or is a template, so any number of
// translation units may include this header, and one that uses nothing of it still compiles
// warning-free under -Wall -Wextra -Werror.
//
// Conventions of every op header
//   B batch, T sequence length, C channels, N = B*T rows, OC output channels, V real
//   vocabulary, Vp padded vocabulary (Vp >= V). Row-major, like the CPU twins.
//   Storage: activations, parameters and their gradients are 16-bit, T16 = bf16 or fp16 (the
//   run's --param-dtype; every launcher is a template on it, deduced from its pointers);
//   LayerNorm mean/rstd, losses, master weights, Adam moments and gradient shards are fp32.
//   All arithmetic is fp32 (the grad-norm sum is double). 16-bit results are rounded to
//   nearest even, except the optimizer's bf16 parameter copy, which is stochastically rounded
//   (fp16's is rounded to nearest: store8_param).
//   Accumulate vs overwrite: exactly as the CPU twins. Every *_backward ACCUMULATES (+=)
//   into its gradient outputs (dwte, dwpe, dinp, dweight, dbias); the caller zeroes them.
//   Exceptions, by design: gelu_backward_inplace_cuda overwrites dout with dinp (no twin; it
//   equals the twin applied to a zeroed dinp), and swiglu_backward_cuda overwrites dinp.
//   Forward kernels overwrite their outputs.
//   Launchers: every launcher takes a cudaStream_t and only enqueues work on it: no
//   allocation, no synchronisation, no host reads of device data. Scratch memory is passed
//   in by the caller together with its size; the *_scratch_bytes functions say how much is
//   needed (a pure function of the shapes, so it can be sized once before step 0).
//   Preconditions are checked on the host; a violated one prints one line naming the
//   launcher and exits(1) (CUDA_REQUIRE), never a silent wrong answer.
//   Row kernels (encoder, LayerNorm, bias gradient, cross-entropy) use 128-bit accesses
//   along rows and REQUIRE C (OC, Vp) % 8 == 0 and 16-byte aligned pointers (true for
//   every GPT-2 shape and for cudaMalloc'd buffers at offsets that are multiples of 8
//   elements). The Llama kernels (RMSNorm, RoPE, SwiGLU) accept any C (F, head size): 128-bit
//   accesses when it is a multiple of 8 and every pointer is 16-byte aligned (every Llama
//   shape), otherwise a scalar path with the same arithmetic in the same order. Flat
//   kernels (GELU, residual, casts, accumulate, AdamW, sum of squares) accept any n and any
//   alignment: 128-bit accesses when every pointer is 16-byte aligned, a scalar path
//   otherwise, and a scalar tail for the last n % 8 elements.
//   Determinism: no float atomics anywhere. Reductions over rows (embedding, LayerNorm and
//   RMSNorm weight/bias, bias gradients, sum of squares) run in an order fixed by the shapes
//   only, so two identical calls give bitwise identical results.
//
// Conventions of the helpers
// - Storage is 16-bit, arithmetic fp32. The 16-bit type is the run's --param-dtype: bf16
//   (__nv_bfloat16, the default) or fp16 (__half, IEEE binary16, with loss scaling); every
//   kernel that stores activations, parameters or their gradients is a template on it,
//   named T16 throughout. to_float / from_float<T16> convert (round to nearest even).
// - 128-bit access: 8 16-bit values or 4 fp32 per int4. The pointer must be 16-byte aligned; the
//   callers (the op headers' launchers) check alignment and sizes on the host.
// - Reductions: warp_reduce_* are xor butterflies, so every lane ends with the same,
//   bitwise identical value, and the order of operations depends only on the lane, never
//   on timing. block_reduce_* add the warps' results in warp order. Both are deterministic.
#ifndef FSDP_KERNELS_CUDA_COMMON_CUH
#define FSDP_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optimizer_math.h"

typedef __nv_bfloat16 bf16;
typedef __half fp16;

// ----------------------------------------------------------------------------
// Error checking

// Any CUDA runtime call: on failure one line "CUDA error at file:line: message (call)", exit(1).
#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t cuda_check_err_ = (call);                                              \
        if (cuda_check_err_ != cudaSuccess) {                                              \
            fprintf(stderr, "CUDA error at %s:%d: %s (%s)\n", __FILE__, __LINE__,          \
                    cudaGetErrorString(cuda_check_err_), #call);                           \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

// After every kernel launch: catches bad launch configurations at once (cheap, no sync).
// Build with -DFSDP_CUDA_SYNC_CHECK to also wait for the device after each launch, so that
// an asynchronous fault is reported at the launch that caused it (debugging only: it
// synchronises the whole device).
#ifdef FSDP_CUDA_SYNC_CHECK
#define CUDA_LAUNCH_CHECK()                          \
    do {                                             \
        CUDA_CHECK(cudaGetLastError());              \
        CUDA_CHECK(cudaDeviceSynchronize());         \
    } while (0)
#else
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
#endif

// A precondition of a launcher (shape, alignment, scratch size): one line naming the
// function and what is wrong, then exit(1). Never a silent wrong answer.
#define CUDA_REQUIRE(cond, ...)                                                            \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, __func__);                  \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

// ----------------------------------------------------------------------------
// Small host/device helpers

template <class T>
__host__ __device__ __forceinline__ constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

static inline bool is_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// Round n bytes up to a multiple of 256 (sub-allocations inside a caller's scratch buffer).
static inline size_t align_up_256(size_t n) { return (n + 255) & ~(size_t)255; }

static __host__ __device__ __forceinline__ float bf16_to_float(bf16 x) { return __bfloat162float(x); }
// Round to nearest even (NaN stays NaN, overflow gives inf), on host and device.
static __host__ __device__ __forceinline__ bf16 float_to_bf16(float x) { return __float2bfloat16_rn(x); }

// The two 16-bit storage types, as template arguments: exact widening, and rounding to
// nearest even (fp16: subnormals below 2^-14, inf beyond 65504; NaN stays NaN).
static __host__ __device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
static __host__ __device__ __forceinline__ float to_float(fp16 x) { return __half2float(x); }
static __host__ __device__ __forceinline__ float to_float(float x) { return x; }
template <class T16> struct Float16Traits;
template <> struct Float16Traits<bf16> {
    static __host__ __device__ __forceinline__ bf16 round(float x) { return __float2bfloat16_rn(x); }
    static __host__ __device__ __forceinline__ bf16 from_bits(unsigned short u) { return __ushort_as_bfloat16(u); }
};
template <> struct Float16Traits<fp16> {
    static __host__ __device__ __forceinline__ fp16 round(float x) { return __float2half_rn(x); }
    static __host__ __device__ __forceinline__ fp16 from_bits(unsigned short u) { return __ushort_as_half(u); }
};
template <class T16>
__host__ __device__ __forceinline__ T16 from_float(float x) { return Float16Traits<T16>::round(x); }
// A launcher's optional (NULL-able) tensor: NoDeduce<T16>::type* takes its type from the other
// tensors, so a plain NULL may be passed.
template <class T> struct NoDeduce { typedef T type; };

// ----------------------------------------------------------------------------
// 128-bit vectors

// 16 bytes of T (8 bf16 or 4 float), aligned like an int4 so that a load or store is one
// 128-bit instruction.
template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = (int)(16 / sizeof(T));
    T v[size];
    __device__ __forceinline__ T& operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
    __device__ __forceinline__ static Packed128 from_bits(int4 bits) {
        Packed128 p;
        memcpy(&p, &bits, sizeof bits);
        return p;
    }
    __device__ __forceinline__ int4 bits() const {
        int4 b;
        memcpy(&b, this, sizeof b);
        return b;
    }
};
typedef Packed128<bf16> bf16x8;
typedef Packed128<float> f32x4;

// Plain and streaming (evict-first: data touched once) 128-bit loads and stores.
template <class T>
__device__ __forceinline__ Packed128<T> load128(const T* p) {
    return Packed128<T>::from_bits(*reinterpret_cast<const int4*>(p));
}
template <class T>
__device__ __forceinline__ Packed128<T> load128cs(const T* p) {
    return Packed128<T>::from_bits(__ldcs(reinterpret_cast<const int4*>(p)));
}
template <class T>
__device__ __forceinline__ void store128(T* p, const Packed128<T>& x) {
    *reinterpret_cast<int4*>(p) = x.bits();
}
template <class T>
__device__ __forceinline__ void store128cs(T* p, const Packed128<T>& x) {
    __stcs(reinterpret_cast<int4*>(p), x.bits());
}

// Groups of 8 elements as 8 floats. The "8" forms (p 16-byte aligned) use 128-bit access:
// one for a 16-bit type, two for fp32. The "n" forms are the scalar fallback for the last,
// partial group of a range, or for unaligned pointers: they touch only the first cnt (<= 8)
// elements and load zeros for the rest. T16 is bf16 or fp16 (the fp32 forms are overloads).
template <class T16>
__device__ __forceinline__ void load8(float* dst, const T16* p) {
    static_assert(sizeof(T16) == 2, "load8: a 16-bit type or float");
    const Packed128<T16> x = load128(p);
#pragma unroll
    for (int k = 0; k < 8; k++) dst[k] = to_float(x[k]);
}
// The streaming form (evict-first): data this kernel reads once and nothing reads soon after.
template <class T16>
__device__ __forceinline__ void load8cs(float* dst, const T16* p) {
    static_assert(sizeof(T16) == 2, "load8cs: a 16-bit type");
    const Packed128<T16> x = load128cs(p);
#pragma unroll
    for (int k = 0; k < 8; k++) dst[k] = to_float(x[k]);
}
static __device__ __forceinline__ void load8(float* dst, const float* p) {
    const f32x4 a = load128(p), b = load128(p + 4);
#pragma unroll
    for (int k = 0; k < 4; k++) { dst[k] = a[k]; dst[k + 4] = b[k]; }
}
template <class T16>
__device__ __forceinline__ void store8(T16* p, const float* src) {  // round to nearest
    static_assert(sizeof(T16) == 2, "store8: a 16-bit type or float");
    Packed128<T16> x;
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = from_float<T16>(src[k]);
    store128(p, x);
}
static __device__ __forceinline__ void store8(float* p, const float* src) {
    f32x4 a, b;
#pragma unroll
    for (int k = 0; k < 4; k++) { a[k] = src[k]; b[k] = src[k + 4]; }
    store128(p, a);
    store128(p + 4, b);
}
template <class T16>
__device__ __forceinline__ void loadn(float* dst, const T16* p, int cnt) {
#pragma unroll
    for (int k = 0; k < 8; k++) dst[k] = k < cnt ? to_float(p[k]) : 0.0f;
}
template <class T16>
__device__ __forceinline__ void storen(T16* p, const float* src, int cnt) {
#pragma unroll
    for (int k = 0; k < 8; k++) if (k < cnt) p[k] = from_float<T16>(src[k]);
}
static __device__ __forceinline__ void storen(float* p, const float* src, int cnt) {
#pragma unroll
    for (int k = 0; k < 8; k++) if (k < cnt) p[k] = src[k];
}
// Either form: full selects the 128-bit path (the caller guarantees alignment then).
template <class T>
__device__ __forceinline__ void load8_or_n(float* dst, const T* p, bool full, int cnt) {
    if (full) load8(dst, p); else loadn(dst, p, cnt);
}
template <class T>
__device__ __forceinline__ void store8_or_n(T* p, const float* src, bool full, int cnt) {
    if (full) store8(p, src); else storen(p, src, cnt);
}

// ----------------------------------------------------------------------------
// Reductions (warp = 32 lanes, full mask: every lane of the warp must call them)

static __device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ double warp_reduce_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a 1-D block whose size is a multiple of 32 (at most 1024); every thread gets the
// result. Ends with a barrier, so it may be called again right away.
template <class T>
__device__ __forceinline__ T block_reduce_sum(T v) {
    __shared__ T block_reduce_buf[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce_sum(v);
    if (lane == 0) block_reduce_buf[warp] = v;
    __syncthreads();
    v = lane < nwarps ? block_reduce_buf[lane] : (T)0;
    v = warp_reduce_sum(v);
    __syncthreads();
    return v;
}

// ----------------------------------------------------------------------------
// Launch helpers shared by the op headers: the flat kernels' grid and prologue, the 128-bit
// path's alignment test, and the two-pass row reduction (a fixed row partition, then the
// partials summed in order) of the LayerNorm, RMSNorm and bias gradients.

static constexpr int kFlatThreads = 256;  // flat kernels: 8 elements/thread

// Grid for a flat kernel: one thread per group of 8 elements.
static inline unsigned flat_grid(size_t n) {
    const size_t blocks = ceil_div(ceil_div(n, (size_t)8), (size_t)kFlatThreads);
    CUDA_REQUIRE(blocks <= 0x7fffffffu, "n = %zu is too large for one launch", n);
    return (unsigned)blocks;
}

// True when every non-NULL pointer is 16-byte aligned: the 128-bit path may be used.
static inline bool all_aligned16(const void* a, const void* b = NULL, const void* c = NULL,
                                 const void* d = NULL, const void* e = NULL) {
    return is_aligned16(a) && is_aligned16(b) && is_aligned16(c) && is_aligned16(d) && is_aligned16(e);
}

// Flat elementwise kernels (residual, GELU, casts, AdamW, ...): one thread per group of 8
// elements. VEC: 128-bit accesses for full groups (every pointer 16-byte aligned); the last
// partial group, and every group when !VEC, element by element. FLAT_PROLOGUE(n) opens such
// a kernel: i0 (the group's first element), cnt (its elements, <= 8) and full (the 128-bit
// path), and returns past the end.

#define FLAT_PROLOGUE(n)                                                                   \
    const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;                 \
    if (i0 >= (n)) return;                                                                 \
    const int cnt = (n) - i0 < 8 ? (int)((n) - i0) : 8;                                     \
    const bool full = VEC && cnt == 8;

// Rows [g * rows, min(N, (g + 1) * rows)) go to block g of a two-pass row reduction. The
// split depends only on N, never on the device, so the summation order is fixed.
static inline void row_partition(int N, int min_rows, int max_blocks, int* rows, int* blocks) {
    int r = ceil_div(N, max_blocks);
    if (r < min_rows) r = min_rows;
    *rows = r;
    *blocks = ceil_div(N, r);
}

// dst[c] += (accumulate) or = (not: dst is not read) the sum over g (in order, strided by 8
// per thread row, then the 8 partial sums in order) of partial[g * C + c]. Block (32, 8),
// grid (ceil(C / 32), 1 or 2): blockIdx.y 1 does the same for a second pair (dst2,
// partial2) of the same shape, so that a reduction with two results (LayerNorm's dweight and
// dbias) finishes in one launch. Deterministic; both forms give the same bits on a zeroed dst.
template <class T16>
static __global__ void __launch_bounds__(256)
sum_partials_kernel(T16* dst1, const float* partial1, T16* dst2, const float* partial2, int G, int C, int accumulate) {
    __shared__ float sh[8][32];
    T16* dst = blockIdx.y == 0 ? dst1 : dst2;
    const float* partial = blockIdx.y == 0 ? partial1 : partial2;
    const int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C) {
        for (int g = threadIdx.y; g < G; g += 8) acc += partial[(size_t)g * C + c];
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float total = 0.0f;
#pragma unroll
        for (int y = 0; y < 8; y++) total += sh[y][threadIdx.x];
        dst[c] = from_float<T16>(accumulate ? to_float(dst[c]) + total : total);
    }
}

template <class T16>
static inline void sum_partials(T16* dst, const float* partial, int G, int C, int accumulate, cudaStream_t stream) {
    sum_partials_kernel<<<ceil_div(C, 32), dim3(32, 8), 0, stream>>>(dst, partial, dst, partial, G, C, accumulate);
    CUDA_LAUNCH_CHECK();
}
// Two reductions of the same shape (G partial rows of C) in one launch.
template <class T16>
static inline void sum_partials_pair(T16* dst1, const float* partial1, T16* dst2, const float* partial2, int G, int C,
                                     int accumulate, cudaStream_t stream) {
    sum_partials_kernel<<<dim3(ceil_div(C, 32), 2), dim3(32, 8), 0, stream>>>(dst1, partial1, dst2, partial2, G, C,
                                                                              accumulate);
    CUDA_LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// Stochastic rounding to bf16: sr_key, sr_bits and the rounding itself are
// kernels/optimizer_math.h's (shared with the host's --offload optimizer). sr_round_bf16
// leaves inf and NaN unchanged (rounded to nearest).

static __host__ __device__ __forceinline__ bf16 sr_round_bf16(float x, uint32_t bits16) {
    if (!sr_finite(x)) return float_to_bf16(x);
    return __ushort_as_bfloat16((unsigned short)sr_round_bf16_bits(x, bits16));
}

// The GPU's device-to-device copy bandwidth in GB/s, what a memory-bound kernel is held to
// (the roofline tables: --profile-step's, dev/bench/bench_vector_cuda.cu): cudaMemcpyAsync
// between two buffers of 256 MiB (less when less is free: a quarter of the free memory, down
// to 32 MiB) on `stream`, one copy to warm up, then the best of 5 timed with events. A copy
// reads and writes its size: 2 x size bytes. wait(ctx, stream) waits for the stream (NULL:
// cudaStreamSynchronize). How it was measured goes to how (n bytes); 0 when no two buffers
// could be allocated (how says so).
static inline double copy_bandwidth_gbs(cudaStream_t stream, void (*wait)(void* ctx, cudaStream_t s), void* ctx, char* how,
                                        size_t n) {
    const size_t MiB = (size_t)1 << 20;
    size_t free_b = 0, total_b = 0, size = 256 * MiB;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b / 4 < size) size = free_b / 4 / MiB * MiB;
    void *a = NULL, *b = NULL;
    while (size >= 32 * MiB && (cudaMalloc(&a, size) != cudaSuccess || cudaMalloc(&b, size) != cudaSuccess)) {
        if (a) CUDA_CHECK(cudaFree(a));
        a = NULL;
        (void)cudaGetLastError();  // the failed allocation's error is not the caller's
        size /= 2;
    }
    if (size < 32 * MiB) {
        snprintf(how, n, "no two buffers of 32 MiB free for cudaMemcpy");
        return 0.0;
    }
    enum { TIMED = 5 };
    cudaEvent_t ev[TIMED + 1];
    for (int i = 0; i <= TIMED; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    CUDA_CHECK(cudaMemcpyAsync(b, a, size, cudaMemcpyDeviceToDevice, stream));  // warm-up
    CUDA_CHECK(cudaEventRecord(ev[0], stream));
    for (int i = 1; i <= TIMED; i++) {  // back and forth
        CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, size, cudaMemcpyDeviceToDevice, stream));
        CUDA_CHECK(cudaEventRecord(ev[i], stream));
    }
    if (wait) wait(ctx, stream);
    else CUDA_CHECK(cudaStreamSynchronize(stream));
    float best = 0.0f;
    for (int i = 1; i <= TIMED; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i - 1], ev[i]));
        if (i == 1 || ms < best) best = ms;
    }
    for (int i = 0; i <= TIMED; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    snprintf(how, n, "cudaMemcpy device to device, %zu MiB x %d, best; read + write counted", size / MiB, (int)TIMED);
    return best > 0.0f ? 2.0 * (double)size / (best * 1e-3) / 1e9 : 0.0;
}

#endif  // FSDP_KERNELS_CUDA_COMMON_CUH
