// The flash attention kernels (--attention flash, the default where the head size is 64 or
// 128), in FlashAttention-2's shape, with their tensor-core and copy primitives (mma.sync,
// ldmatrix, cp.async) and their launches. They implement the interface of
// kernels/cuda_attention.cuh (layouts, grouped-query attention, overwritten outputs,
// determinism, the AttentionContext), which dispatches here; the cuBLAS reference path they
// are checked against (kernels/cuda_attention_cublas.cuh) shares nothing with them but that
// interface, hence a header each.
//
// Fused kernels that never materialise T x T, on tensor cores
// (mma.sync.m16n8k16 BF16 -> FP32, sm_80+; fragments loaded with ldmatrix, tiles brought
// into shared memory with cp.async, rows of HS + 8 bf16 so that ldmatrix is conflict-free).
// Head sizes 64 and 128 (attention_flash_supports; others are refused with a message
// pointing at --attention cublas), any T >= 1 (tail tiles are masked), C % 8 == 0 (true for
// those head sizes), 16-byte aligned qkv/out/dout/dqkv, B*NH < 65536. P and dS are rounded
// to bf16 for their tensor-core products (P's row sums stay fp32). GQA: the forward and the
// dQ side run per query head and read K/V of its kv head (the group's blocks, adjacent in
// the grid, read the same K/V rows); the dK/dV side runs one block per (key block, b, kv
// head) that walks the group's query heads one after the other, their query blocks each,
// accumulating dK/dV in registers before one store: the group's sum in a fixed order, no
// atomics and no extra scratch (grid B*KVH instead of B*NH, each block doing group times
// the work).
//
// The kernels:
//   forward: one block of 4 warps per 128 queries of one (b, head); each warp owns 32 query
//     rows as TWO 16-row m-tiles, so every K fragment (S = Q K^T) and V fragment (O += P V)
//     it loads from shared memory feeds two MMAs (half the shared-memory operand traffic
//     per MMA of a warp with one m-tile). Loops over key tiles of 64 (hs 64) or 32 (hs 128)
//     up to the causal limit, K/V double-buffered; running max and sum in fp32 registers,
//     accumulator rescaled, out and lse stored. A warp whose 32 rows see no key of a tile
//     skips it. hs 64 keeps its Q fragments in registers for the whole loop; hs 128 reloads
//     them from shared memory (registers).
//   backward, three launches: (1) D_i = dout_i . out_i per row into scratch; (2) ONE main
//     kernel per key block of 128 keys (8 warps, 16 keys each) that loops over the query
//     blocks from its first key on (64 queries for hs 64, 32 for hs 128; Q, dO, lse, D
//     double-buffered) and per query block computes S^T = K Q^T, dP^T = V dO^T, P^T =
//     exp(S^T scale - lse), dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q in registers,
//     stores dS^T (bf16) in shared memory, and computes that block's dQ contribution
//     dS K (the 8 warps split the query block's rows x head columns): 5 GEMM-equivalents
//     (separate dQ and dK/dV kernels need 7). The dQ contribution is not added atomically:
//     each key block writes its own fp32 slice of scratch (rows from its first key to T, the
//     rows it can reach), and (3) a small kernel sums, for each row, the slices of the key
//     blocks 0..t/128 in that order, scales, and writes dq in bf16. dK, dV are stored by
//     their key block's warps.
//   Scratch: forward none; backward B*NH*T floats (D) + B*C*R floats (the dQ slices),
//   R = nkb T - 128 nkb (nkb - 1) / 2 rows per (b, head), nkb = ceil(T / 128) (about
//   4.5 T at T = 1024): see attention_backward_scratch_bytes.
//   Dynamic shared memory per block: hs 64: 54 / 91 KiB (forward / backward main kernel);
//   hs 128: 68 / 112.5 KiB (the backward is over the 99 KiB of sm_86/sm_89: refused there).
//   Registers (ptxas -v, nvcc 13.0, sm_90 / sm_80, no spills): forward 243 / 239 (hs 64),
//   244 / 242 (hs 128); backward main kernel 232 / 231, 246 / 255 (234 / 229, 245 / 253
//   before its step moved into attn_bwd_keys_step / attn_bwd_dq_step, shared with
//   flash-pipelined: the same arithmetic, another register allocation); D and dQ-sum kernels
//   24 and 44.
#ifndef FSDP_KERNELS_CUDA_ATTENTION_FLASH_CUH
#define FSDP_KERNELS_CUDA_ATTENTION_FLASH_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda_common.cuh"

// Head sizes the flash kernels are instantiated for.
static inline int attention_flash_supports(int hs) { return hs == 64 || hs == 128; }

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

// ----------------------------------------------------------------------------
// Tensor-core and copy primitives (sm_80+)
//
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, D (16x8) += A (16x16) B (16x8).
// Register fragments (PTX ISA, "matrix fragments for mma.m16n8k16"), with g = lane / 4 and
// c = lane % 4; each 32-bit register holds two bf16, the lower-indexed one in the low half:
//   A: a0 = A[g][2c..2c+1]   a1 = A[g+8][2c..2c+1]   a2 = A[g][2c+8..2c+9]   a3 = A[g+8][2c+8..2c+9]
//   B: b0 = B[2c..2c+1][g]   b1 = B[2c+8..2c+9][g]    (two consecutive k of column n = g)
//   D: d0 = D[g][2c]  d1 = D[g][2c+1]  d2 = D[g+8][2c]  d3 = D[g+8][2c+1]
// Fragments come from row-major shared-memory tiles through ldmatrix.m8n8.x4 (PTX ISA,
// "warp-level matrix load instruction: ldmatrix"): lanes 8i..8i+7 give the addresses of the
// 8 rows (16 bytes each) of matrix i, and register i of lane l receives, of matrix i,
// elements (row l/4, cols 2(l%4), 2(l%4)+1), i.e. (row g, cols 2c, 2c+1); with .trans it
// receives (rows 2c, 2c+1, col g). Hence (see attn_ldsm_a/_b/_bt):
// - A (16 x 16 at rows r0, cols k0): the four 8x8 quarters in the order a0..a3.
// - B[k][n] = X[n][k] for X row-major (K for S = Q K^T): quarters of X, no transpose.
// - B[k][n] = X[k][n] for X row-major (V for O = P V): quarters of X with .trans.
// - Two adjacent D tiles (columns 8j..8j+15) of fp32 accumulators, packed to bf16 pairs,
//   are exactly an A fragment with k = those 16 columns: P stays in registers from S to P V.
// Shared-memory tiles have rows of HS + 8 bf16 (a 16-byte pad): each 8-row phase of an
// ldmatrix then touches 8 rows whose starts are 36 (HS 64) or 68 (HS 128) words apart, i.e.
// banks 4r..4r+3 for row r: conflict-free.

// mma.sync m16n8k16 and cp.async need sm_80. A build for an older GPU (GPU_ARCH=75: a T4,
// which trains with --param-dtype fp16 and --attention cublas) compiles these primitives as
// traps: the host never launches a flash kernel there (attention_context_init refuses it).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define ATTN_BEFORE_SM80 1
#endif

// T16 selects the instruction: .bf16 or .f16 inputs (the same fragments), fp32 accumulators.
template <class T16>
__device__ __forceinline__ void attn_mma(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
#ifdef ATTN_BEFORE_SM80
    __trap();
#else
    if constexpr (std::is_same<T16, bf16>::value) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        static_assert(std::is_same<T16, fp16>::value, "attn_mma: bf16 or fp16");
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
#endif
}

// Two floats -> a pair of T16 (round to nearest even); lo in the low half.
template <class T16>
__device__ __forceinline__ uint32_t attn_pack(float lo, float hi) {
    const T16 v[2] = {from_float<T16>(lo), from_float<T16>(hi)};
    uint32_t u;
    memcpy(&u, v, sizeof u);
    return u;
}
// Four 8x8 bf16 matrices from shared memory; p is this lane's row address (16-byte aligned).
template <class T16>
static __device__ __forceinline__ void attn_ldsm_x4(uint32_t* r, const T16* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
template <class T16>
static __device__ __forceinline__ void attn_ldsm_x4_trans(uint32_t* r, const T16* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

static __device__ __forceinline__ void attn_cp_async16(void* smem_dst, const void* gmem_src) {
#ifdef ATTN_BEFORE_SM80
    __trap();
#else
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem_src) : "memory");
#endif
}
static __device__ __forceinline__ void attn_cp_async_commit() {
#ifndef ATTN_BEFORE_SM80
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void attn_cp_async_wait() {
#ifndef ATTN_BEFORE_SM80
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// FlashAttention-2's shape
#define FLASH_FWD_THREADS 128  // 4 warps
#define FLASH_FWD_BR 128       // queries per forward block: 32 per warp, two m-tiles of 16
#define FLASH_BWD_THREADS 256  // 8 warps
#define FLASH_BWD_BC 128       // keys per backward block: 16 per warp

// The flash kernels' tiles (see the top of the file).
template <int HS>
struct FlashShape {
    static constexpr int LDS = HS + 8;                 // shared-memory row stride (elements)
    static constexpr int FWD_BC = HS <= 64 ? 64 : 32;  // keys per forward tile
    static constexpr bool FWD_Q_IN_REGS = HS <= 64;    // Q fragments held in registers
    static constexpr size_t fwd_smem = (size_t)(FLASH_FWD_BR + 4 * FWD_BC) * LDS * sizeof(uint16_t);
    static constexpr int BWD_BR = HS <= 64 ? 64 : 32;  // queries per backward iteration
    static constexpr int LDSS = BWD_BR + 8;            // row stride of the dS^T tile
    static constexpr size_t bwd_smem = (size_t)(2 * FLASH_BWD_BC + 4 * BWD_BR) * LDS * sizeof(uint16_t) +
                                       (size_t)FLASH_BWD_BC * LDSS * sizeof(uint16_t) + 4 * BWD_BR * sizeof(float);
};

// ROWS rows of HS bf16 from a [T, row_stride] matrix (row t at g + t * row_stride), rows
// row0.. into a [ROWS][HS+8] shared tile, 16 bytes per cp.async; rows >= T are zero-filled.
// NT: the block's thread count (every thread takes part).
template <int HS, int ROWS, int NT, class T16>
static __device__ __forceinline__ void attn_load_tile(T16* tile, const T16* g, size_t row_stride, int row0, int T) {
    constexpr int CHUNKS = HS / 8;
    constexpr int LDS = HS + 8;
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * CHUNKS; i += NT) {
        const int r = i / CHUNKS, col = (i % CHUNKS) * 8;
        T16* dst = tile + r * LDS + col;
        const int t = row0 + r;
        if (t < T) attn_cp_async16(dst, g + (size_t)t * row_stride + col);
        else *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
    }
}

// Fragment loads from a row-major shared tile X with row stride LDS; lane = threadIdx % 32.
// Lane l addresses row l % 8 of matrix l / 8.
// A fragment of X[r0 .. r0+15][k0 .. k0+15]: matrices (rows +0, cols +0), (+8, +0), (+0, +8),
// (+8, +8) are a0..a3.
template <int LDS, class T16>
static __device__ __forceinline__ void attn_ldsm_a(uint32_t* a, const T16* X, int r0, int k0, int lane) {
    attn_ldsm_x4(a, X + (r0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LDS + k0 + (lane >> 4) * 8);
}
// B fragments with B[k][n] = X[n][k], k in k0..k0+15, for the two 8-column blocks n0 and
// n0 + 8: b = {b0(n0), b1(n0), b0(n0+8), b1(n0+8)}; matrices (rows +0, cols +0), (+0, +8),
// (+8, +0), (+8, +8) of X[n0..][k0..].
template <int LDS, class T16>
static __device__ __forceinline__ void attn_ldsm_b(uint32_t* b, const T16* X, int n0, int k0, int lane) {
    attn_ldsm_x4(b, X + (n0 + (lane >> 4) * 8 + (lane & 7)) * LDS + k0 + ((lane >> 3) & 1) * 8);
}
// B fragments with B[k][n] = X[k][n], k in k0..k0+15, for the blocks n0 and n0 + 8 (same
// order as attn_ldsm_b): transposed matrices (rows +0, cols +0), (+8, +0), (+0, +8), (+8, +8).
template <int LDS, class T16>
static __device__ __forceinline__ void attn_ldsm_bt(uint32_t* b, const T16* X, int k0, int n0, int lane) {
    attn_ldsm_x4_trans(b, X + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LDS + n0 + (lane >> 4) * 8);
}
// An A fragment of A = X^T for X row-major [k][m] (k-major storage, e.g. dS^T with keys as
// rows for A = dS): A[m0 .. m0+15][k0 .. k0+15] from transposed matrices of X (rows +0,
// cols +0), (+0, +8), (+8, +0), (+8, +8), i.e. a0..a3 = (m +0, k +0), (m +8, k +0),
// (m +0, k +8), (m +8, k +8): with .trans lane l receives X rows 2c, 2c+1 of column g,
// i.e. A[g][2c..2c+1] of that quarter.
template <int LDX, class T16>
static __device__ __forceinline__ void attn_ldsm_at(uint32_t* a, const T16* X, int k0, int m0, int lane) {
    attn_ldsm_x4_trans(a, X + (k0 + (lane >> 4) * 8 + (lane & 7)) * LDX + m0 + ((lane >> 3) & 1) * 8);
}

// Two adjacent 16 x 8 output tiles from one A fragment and the B fragments of attn_ldsm_b/_bt
// (b0, b1 of columns n0.., then of n0 + 8..).
template <class T16>
__device__ __forceinline__ void attn_mma2(float* acc0, float* acc1, const uint32_t* a, const uint32_t* b) {
    attn_mma<T16>(acc0, a, b[0], b[1]);
    attn_mma<T16>(acc1, a, b[2], b[3]);
}

// The warp-level products every flash kernel is made of (16 rows per warp; accumulators in
// the mma D layout, acc[j] holding columns 8j..8j+7). Each is fully unrolled into its caller.
template <int N>
static __device__ __forceinline__ void attn_zero(float (&acc)[N][4]) {
#pragma unroll
    for (int j = 0; j < N; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}
// acc[16 x 8NB] += A X^T over the head dimension (KC chunks of 16): A = rows ar0..ar0+15 of
// the shared tile A_s, X = rows 0..8NB-1 of the shared tile X_s (both [.][LDS], k-contiguous).
template <int KC, int NB, int LDS, class T16>
static __device__ __forceinline__ void attn_mma_abt(float (&acc)[NB][4], const T16* A_s, int ar0, const T16* X_s,
                                                    int lane) {
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
        uint32_t a[4];
        attn_ldsm_a<LDS>(a, A_s, ar0, kc * 16, lane);
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
            uint32_t xb[4];
            attn_ldsm_b<LDS>(xb, X_s, nb * 8, kc * 16, lane);
            attn_mma2<T16>(acc[nb], acc[nb + 1], a, xb);
        }
    }
}
// acc[16 x 8ND] += P X: P is 16 x 16PC in registers (fp32 accumulators of an earlier product,
// rounded to bf16: two adjacent D tiles form one A fragment), X = rows 0..16PC-1 of the shared
// tile X_s ([.][LDS], column-contiguous: loaded transposed).
template <int PC, int ND, int LDS, class T16>
static __device__ __forceinline__ void attn_mma_px(float (&acc)[ND][4], const float (&p)[2 * PC][4], const T16* X_s,
                                                   int lane) {
#pragma unroll
    for (int pc = 0; pc < PC; pc++) {
        uint32_t pa[4];
        pa[0] = attn_pack<T16>(p[2 * pc][0], p[2 * pc][1]);
        pa[1] = attn_pack<T16>(p[2 * pc][2], p[2 * pc][3]);
        pa[2] = attn_pack<T16>(p[2 * pc + 1][0], p[2 * pc + 1][1]);
        pa[3] = attn_pack<T16>(p[2 * pc + 1][2], p[2 * pc + 1][3]);
#pragma unroll
        for (int nd = 0; nd < ND; nd += 2) {
            uint32_t xb[4];
            attn_ldsm_bt<LDS>(xb, X_s, pc * 16, nd * 8, lane);
            attn_mma2<T16>(acc[nd], acc[nd + 1], pa, xb);
        }
    }
}
// One row of a 16 x 8ND accumulator, times scale, to global memory as bf16: this thread's
// pairs of columns 8nd + 2c, 2c + 1; half 0 is the row g (d0, d1), half 1 the row g + 8 (d2, d3).
template <int ND, class T16>
static __device__ __forceinline__ void attn_store_row(T16* p, const float (&acc)[ND][4], int half, float scale) {
#pragma unroll
    for (int nd = 0; nd < ND; nd++)
        *reinterpret_cast<uint32_t*>(p + nd * 8) = attn_pack<T16>(acc[nd][2 * half] * scale, acc[nd][2 * half + 1] * scale);
}

// The K/V loop of the forward kernel: before key tile kt of ntiles, starts loading tile
// kt + 1 into the other half of the double-buffered tiles Ks, Vs
// ([2][BC][LDS]; BC keys per tile, NT threads in the block; QW the row stride of qkv), then
// waits until tile kt has landed (this thread's copies, then the whole block's). Returns the
// half (0 or 1) that holds tile kt.
template <int HS, int BC, int NT, class T16>
static __device__ __forceinline__ int attn_next_kv_tile(T16* Ks, T16* Vs, const T16* kg, const T16* vg,
                                                        size_t QW, int kt, int ntiles, int T) {
    constexpr int LDS = HS + 8;
    const int buf = kt & 1;
    if (kt + 1 < ntiles) {
        attn_load_tile<HS, BC, NT>(Ks + (buf ^ 1) * BC * LDS, kg, QW, (kt + 1) * BC, T);
        attn_load_tile<HS, BC, NT>(Vs + (buf ^ 1) * BC * LDS, vg, QW, (kt + 1) * BC, T);
        attn_cp_async_commit();
        attn_cp_async_wait<1>();
    } else {
        attn_cp_async_wait<0>();
    }
    __syncthreads();
    return buf;
}

// ----------------------------------------------------------------------------
// flash forward (--attention flash): FlashAttention-2's tiling
// grid (ceil(T/128), B*NH), 128 threads (4 warps). Warp w owns query rows 32w .. 32w+31 of
// the block's 128 as two m-tiles (mt = 0, 1: rows +0..15, +16..31); this thread holds rows
// g and g + 8 of each. Query tiles are visited last-first (the most key tiles start first).
// K and V are those of the query head's kv head (qkv rows of QW = C + 2 KVH HS).

template <int HS, class T16>
__global__ void __launch_bounds__(FLASH_FWD_THREADS)
attn_flash_fwd_kernel(T16* __restrict__ out, float* __restrict__ lse, const T16* __restrict__ qkv,
                      int T, int C, int NH, int KVH, float scale_log2) {
    using SH = FlashShape<HS>;
    constexpr int LDS = SH::LDS, BR = FLASH_FWD_BR, BC = SH::FWD_BC, NT = FLASH_FWD_THREADS;
    constexpr int KC = HS / 16;  // k-chunks of the head dimension
    constexpr int ND = HS / 8;   // 8-wide column blocks of the output
    constexpr int NB = BC / 8;   // 8-key column blocks of S
    constexpr int PC = BC / 16;  // 16-key chunks of P
    constexpr bool QREG = SH::FWD_Q_IN_REGS;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    T16* Qs = reinterpret_cast<T16*>(attn_smem);  // [BR][LDS]
    T16* Ks = Qs + BR * LDS;                        // [2][BC][LDS]
    T16* Vs = Ks + 2 * BC * LDS;                    // [2][BC][LDS]

    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * HS;
    const T16* qg = qkv + (size_t)b * T * QW + (size_t)h * HS;
    const T16* kg = qkv + (size_t)b * T * QW + C + (size_t)(h / (NH / KVH)) * HS;
    const T16* vg = kg + (size_t)KVH * HS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int wr = warp * 32;  // the warp's first row in the tile

    const int kend = min(q0 + BR, T);  // keys [0, kend) are visible to some row
    const int ntiles = (kend + BC - 1) / BC;

    attn_load_tile<HS, BR, NT>(Qs, qg, QW, q0, T);
    attn_cp_async_commit();  // group: Q
    attn_load_tile<HS, BC, NT>(Ks, kg, QW, 0, T);
    attn_load_tile<HS, BC, NT>(Vs, vg, QW, 0, T);
    attn_cp_async_commit();   // group: K/V tile 0
    attn_cp_async_wait<1>();  // Q has landed (this thread's part) ...
    __syncthreads();          // ... and everyone's
    [[maybe_unused]] uint32_t qa[2][QREG ? KC : 1][4];  // hs 64: the warp's 32 query rows as A fragments, for the whole loop
    if constexpr (QREG) {
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int kc = 0; kc < KC; kc++) attn_ldsm_a<LDS>(qa[mt][kc], Qs, wr + 16 * mt, kc * 16, lane);
    }

    float o[2][ND][4];
    attn_zero(o[0]);
    attn_zero(o[1]);
    float m[2][2], l[2][2];  // [m-tile][row g, row g + 8]: running max (log2 units), this thread's part of the sum
#pragma unroll
    for (int mt = 0; mt < 2; mt++) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

    for (int kt = 0; kt < ntiles; kt++) {
        const int buf = attn_next_kv_tile<HS, BC, NT>(Ks, Vs, kg, vg, QW, kt, ntiles, T);
        const T16* Kt = Ks + buf * BC * LDS;
        const T16* Vt = Vs + buf * BC * LDS;
        const int j0 = kt * BC;
        if (j0 <= q0 + wr + 31) {  // some row of the warp sees a key of this tile (warp-uniform)
            // S = Q K^T (2 x 16 x BC per warp): each K fragment feeds both m-tiles.
            float s[2][NB][4];
            attn_zero(s[0]);
            attn_zero(s[1]);
#pragma unroll
            for (int kc = 0; kc < KC; kc++) {
                uint32_t a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    if constexpr (QREG) {
#pragma unroll
                        for (int i = 0; i < 4; i++) a[mt][i] = qa[mt][kc][i];
                    } else {
                        attn_ldsm_a<LDS>(a[mt], Qs, wr + 16 * mt, kc * 16, lane);
                    }
                }
#pragma unroll
                for (int nb = 0; nb < NB; nb += 2) {
                    uint32_t kb[4];
                    attn_ldsm_b<LDS>(kb, Kt, nb * 8, kc * 16, lane);
                    attn_mma2<T16>(s[0][nb], s[0][nb + 1], a[0], kb);
                    attn_mma2<T16>(s[1][nb], s[1][nb + 1], a[1], kb);
                }
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int row0 = q0 + wr + 16 * mt + g, row1 = row0 + 8;
                // Scale into log2 units; causal mask (key > row) and tail mask (key >= T), only
                // on tiles where some key can be masked for this m-tile's rows.
                const bool masked = (j0 + BC - 1 > q0 + wr + 16 * mt) || (j0 + BC > T);
#pragma unroll
                for (int nb = 0; nb < NB; nb++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float x = s[mt][nb][i] * scale_log2;
                        if (masked) {
                            const int key = j0 + nb * 8 + 2 * c + (i & 1);
                            const int row = i < 2 ? row0 : row1;
                            if (key > row || key >= T) x = -INFINITY;
                        }
                        s[mt][nb][i] = x;
                    }
                }
                // New running max over the row (the 4 lanes of a group hold the row's columns).
                float mx0 = m[mt][0], mx1 = m[mt][1];
#pragma unroll
                for (int nb = 0; nb < NB; nb++) {
                    mx0 = fmaxf(mx0, fmaxf(s[mt][nb][0], s[mt][nb][1]));
                    mx1 = fmaxf(mx1, fmaxf(s[mt][nb][2], s[mt][nb][3]));
                }
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
                // A row with nothing visible yet keeps max -inf: subtract 0 then (exp2(-inf) = 0).
                const float base0 = mx0 == -INFINITY ? 0.0f : mx0;
                const float base1 = mx1 == -INFINITY ? 0.0f : mx1;
                const float corr0 = exp2f(m[mt][0] - base0), corr1 = exp2f(m[mt][1] - base1);  // 0 on the first tile
                m[mt][0] = mx0;
                m[mt][1] = mx1;
                float ls0 = 0.0f, ls1 = 0.0f;
#pragma unroll
                for (int nb = 0; nb < NB; nb++) {
                    s[mt][nb][0] = exp2f(s[mt][nb][0] - base0);
                    s[mt][nb][1] = exp2f(s[mt][nb][1] - base0);
                    s[mt][nb][2] = exp2f(s[mt][nb][2] - base1);
                    s[mt][nb][3] = exp2f(s[mt][nb][3] - base1);
                    ls0 += s[mt][nb][0] + s[mt][nb][1];
                    ls1 += s[mt][nb][2] + s[mt][nb][3];
                }
                l[mt][0] = l[mt][0] * corr0 + ls0;
                l[mt][1] = l[mt][1] * corr1 + ls1;
#pragma unroll
                for (int nd = 0; nd < ND; nd++) {
                    o[mt][nd][0] *= corr0; o[mt][nd][1] *= corr0;
                    o[mt][nd][2] *= corr1; o[mt][nd][3] *= corr1;
                }
            }
            // O += P V: P as T16 A fragments (two adjacent S tiles each); each V fragment
            // feeds both m-tiles.
#pragma unroll
            for (int pc = 0; pc < PC; pc++) {
                uint32_t pa[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    pa[mt][0] = attn_pack<T16>(s[mt][2 * pc][0], s[mt][2 * pc][1]);
                    pa[mt][1] = attn_pack<T16>(s[mt][2 * pc][2], s[mt][2 * pc][3]);
                    pa[mt][2] = attn_pack<T16>(s[mt][2 * pc + 1][0], s[mt][2 * pc + 1][1]);
                    pa[mt][3] = attn_pack<T16>(s[mt][2 * pc + 1][2], s[mt][2 * pc + 1][3]);
                }
#pragma unroll
                for (int nd = 0; nd < ND; nd += 2) {
                    uint32_t vb[4];
                    attn_ldsm_bt<LDS>(vb, Vt, pc * 16, nd * 8, lane);
                    attn_mma2<T16>(o[0][nd], o[0][nd + 1], pa[0], vb);
                    attn_mma2<T16>(o[1][nd], o[1][nd + 1], pa[1], vb);
                }
            }
        }
        __syncthreads();  // the next iteration's prefetch overwrites this buffer
    }

    // Row sums over the group's 4 lanes (fixed butterfly order), normalise, store.
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float lt = l[mt][half];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const int row = q0 + wr + 16 * mt + 8 * half + g;
            if (row < T) {
                attn_store_row(out + ((size_t)b * T + row) * C + (size_t)h * HS + 2 * c, o[mt], half, 1.0f / lt);
                if (c == 0) lse[(size_t)bh * T + row] = (m[mt][half] + log2f(lt)) * ATTN_LN2;
            }
        }
    }
}

// ----------------------------------------------------------------------------
// flash backward, launch 1: D[bh, t] = dout[b,t,head h] . out[b,t,head h] (fp32), for the
// main kernel. One thread per 8 channels; the HS / 8 lanes of one (row, head) are adjacent
// in a warp and add their partial dots by an xor butterfly (fixed order). Every lane of a
// warp takes part in the shuffles, also past the end (with zeros).

template <int HS, class T16>
__global__ void __launch_bounds__(256)
attn_flash_bwd_dot_kernel(float* __restrict__ Dbuf, const T16* __restrict__ dout, const T16* __restrict__ out,
                          int B, int T, int C, int NH) {
    constexpr int LPH = HS / 8;  // lanes per (row, head): 8 or 16
    const size_t chunks = (size_t)B * T * C / 8;
    const size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int C8 = C / 8;
    float dot = 0.0f;
    if (k < chunks) {
        float fd[8], fo[8];
        load8(fd, dout + 8 * k);
        load8(fo, out + 8 * k);
#pragma unroll
        for (int e = 0; e < 8; e++) dot = fmaf(fd[e], fo[e], dot);
    }
#pragma unroll
    for (int o = LPH / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (k < chunks && (k % LPH) == 0) {
        const size_t row = k / C8;  // b * T + t
        const int h = (int)(k % C8) / LPH;
        const size_t b = row / T, t = row % T;
        Dbuf[(b * NH + h) * T + t] = dot;
    }
}

// The dQ slices of the main kernel's scratch: per (b, head), key block j (keys 128j ..)
// writes the rows t in [128 j, T) of its own slice, which starts at row
// sum_{j' < j} (T - 128 j') of that head's part; R(T) rows per (b, head) in all.
static __host__ __device__ __forceinline__ size_t attn_flash_slice_row(int j, int T) {
    return (size_t)j * T - (size_t)FLASH_BWD_BC * ((size_t)j * (size_t)(j > 0 ? j - 1 : 0) / 2);
}
static __host__ __device__ __forceinline__ size_t attn_flash_dq_rows(int T) { return attn_flash_slice_row(ceil_div(T, FLASH_BWD_BC), T); }

// The two halves of a step of the backward main kernel (one query block against the block's
// 128 keys), shared with flash-pipelined's (kernels/cuda_attention_flash_pipelined.cuh).
// attn_bwd_keys_step: the warp's 16 keys kw.. (this thread: rows g, g + 8 of them) against
// the BR queries i0.. of the shared tiles Qt, dOt (lse * log2e in Lt, D in Dt): S^T = K Q^T,
// dP^T = V dO^T, P^T[key][query] = exp2(S^T scale log2e - lse_q log2e), masked where
// query < key or query >= T (which covers key >= T), dS^T = P^T (dP^T - D_q); dV += P^T dO
// and dK += dS^T Q in registers; dS^T (T16, as the products used it) into rows kw + g,
// kw + g + 8 of the shared tile dSs ([128][BR + 8]).
template <int HS, int BR, class T16>
static __device__ __forceinline__ void attn_bwd_keys_step(float (&dk)[HS / 8][4], float (&dv)[HS / 8][4],
                                                          const T16* Ks, const T16* Vs, const T16* Qt,
                                                          const T16* dOt, const float* Lt, const float* Dt,
                                                          T16* dSs, int kw, int i0, int j0, int T,
                                                          float scale_log2, int lane) {
    constexpr int LDS = HS + 8, LDSS = BR + 8, KC = HS / 16, ND = HS / 8, NB = BR / 8, PC = BR / 16;
    const int g = lane >> 2, c = lane & 3;
    const int key0 = j0 + kw + g, key1 = key0 + 8;
    float st[NB][4], dpt[NB][4];
    attn_zero(st);
    attn_zero(dpt);
    attn_mma_abt<KC, NB, LDS>(st, Ks, kw, Qt, lane);    // S^T = K Q^T
    attn_mma_abt<KC, NB, LDS>(dpt, Vs, kw, dOt, lane);  // dP^T = V dO^T
    const bool masked = (i0 < j0 + kw + 15) || (i0 + BR > T);
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int qi = nb * 8 + 2 * c + (i & 1);  // query index within the block
            float p = exp2f(fmaf(st[nb][i], scale_log2, -Lt[qi]));
            if (masked) {
                const int q = i0 + qi;
                const int key = i < 2 ? key0 : key1;
                if (q < key || q >= T) p = 0.0f;
            }
            st[nb][i] = p;
            dpt[nb][i] = p * (dpt[nb][i] - Dt[qi]);
        }
    }
    attn_mma_px<PC, ND, LDS>(dv, st, dOt, lane);  // dV += P^T dO
    attn_mma_px<PC, ND, LDS>(dk, dpt, Qt, lane);  // dK += dS^T Q
    T16* srow = dSs + (kw + g) * LDSS + 2 * c;
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        *reinterpret_cast<uint32_t*>(srow + nb * 8) = attn_pack<T16>(dpt[nb][0], dpt[nb][1]);
        *reinterpret_cast<uint32_t*>(srow + 8 * LDSS + nb * 8) = attn_pack<T16>(dpt[nb][2], dpt[nb][3]);
    }
}
// attn_bwd_dq_step: dQ_part = dS K for the query block i0.. over the nkc visible 16-key chunks,
// from the complete dS^T tile dSs (every warp's rows) and the key tile Ks: warp w takes 16
// rows (w % (BR/16)) and HS / (8 / (BR/16)) columns; stored in fp32 into the block's dQ slice
// `part` (its row 0 is query j0), rows < T.
template <int HS, int BR, class T16>
static __device__ __forceinline__ void attn_bwd_dq_step(float* part, const T16* dSs, const T16* Ks, int nkc, int i0,
                                                        int j0, int T, int lane) {
    constexpr int LDS = HS + 8, LDSS = BR + 8, BC = FLASH_BWD_BC;
    constexpr int RT = BR / 16;       // 16-row tiles of the dQ product
    constexpr int CG = 8 / RT;        // column groups of it: 8 warps = RT x CG
    constexpr int DN = HS / CG / 8;   // 8-column blocks per warp in the dQ product
    static_assert(RT * CG == FLASH_BWD_THREADS / 32 && DN % 2 == 0, "dQ product: the 8 warps must tile BR x HS");
    const int warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int qr = (warp % RT) * 16, qc = (warp / RT) * (DN * 8);  // the warp's tile of the dQ product
    float dq[DN][4];
    attn_zero(dq);
#pragma unroll
    for (int kc = 0; kc < BC / 16; kc++) {
        if (kc < nkc) {
            uint32_t a[4];
            attn_ldsm_at<LDSS>(a, dSs, kc * 16, qr, lane);
#pragma unroll
            for (int dn = 0; dn < DN; dn += 2) {
                uint32_t kb[4];
                attn_ldsm_bt<LDS>(kb, Ks, kc * 16, qc + dn * 8, lane);
                attn_mma2<T16>(dq[dn], dq[dn + 1], a, kb);
            }
        }
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int q = i0 + qr + 8 * half + g;
        if (q < T) {
            float* p = part + (size_t)(q - j0) * HS + qc + 2 * c;
#pragma unroll
            for (int dn = 0; dn < DN; dn++) {  // two floats per 8-byte store
                const float pair[2] = {dq[dn][2 * half], dq[dn][2 * half + 1]};
                uint64_t u;
                memcpy(&u, pair, sizeof u);
                *reinterpret_cast<uint64_t*>(p + dn * 8) = u;
            }
        }
    }
}

// The end of a key block's backward: a thread's two keys' rows (key0 and key0 + 8, those
// below T) of dK (times scale) and dV, stored into dqkv's k and v columns of kv head kvh.
template <int HS, int ND, class T16>
static __device__ __forceinline__ void attn_bwd_store_dkdv(T16* dqkv, const float (&dk)[ND][4], const float (&dv)[ND][4],
                                                           int b, int T, int C, int KVH, int kvh, int key0, int c,
                                                           float scale) {
    const size_t QW = (size_t)C + 2 * (size_t)KVH * HS;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int key = key0 + 8 * half;
        if (key < T) {
            T16* p = dqkv + ((size_t)b * T + key) * QW + C + (size_t)kvh * HS + 2 * c;
            attn_store_row(p, dk, half, scale);
            attn_store_row(p + (size_t)KVH * HS, dv, half, 1.0f);
        }
    }
}

// ----------------------------------------------------------------------------
// flash backward, launch 2: the main kernel, one block per 128 keys of one (b, kv head)
// grid (ceil(T/128), B*KVH), 256 threads (8 warps); key block 0 (the most query blocks) first.
// The block walks the steps (query head of the kv head's group, query block), head-major:
// group * nqt steps, one pipeline across them (with KVH == NH: one head, the query blocks).
// Warp w owns keys 16w .. 16w+15 of the block (this thread: rows g, g + 8 of them) and
// computes, per query block of BR queries (from the block's first key on), transposed
// products with keys as rows: S^T = K Q^T and dP^T = V dO^T, so that P^T and dS^T are A
// fragments for dV += P^T dO and dK += dS^T Q straight from registers. dS^T then goes to
// shared memory (bf16, [128 keys][BR]) and the 8 warps compute dQ_part = dS K for the
// query block: warp w takes 16 rows (w % (BR/16)) and HS / (8 / (BR/16)) columns, the
// k-loop running over the key chunks that can be visible (keys <= the block's last query,
// keys < T). The fp32 result goes to this key block's dQ slice of that query head (no
// atomics). dK and dV stay in registers over all the steps: the group's sum. Barriers per
// step: one after the tile loads (which also orders the previous step's dQ reads of
// dS^T before this step's writes), one between the dS^T stores and the dQ product; the
// prefetch of the next step's Q/dO/lse/D tile into the other buffer is issued after the
// second barrier of the previous step, when nobody reads that buffer any more.

template <int HS, class T16>
__global__ void __launch_bounds__(FLASH_BWD_THREADS)
attn_flash_bwd_kernel(T16* __restrict__ dqkv, float* __restrict__ dq_part, const float* __restrict__ Dbuf,
                      const T16* __restrict__ dout, const T16* __restrict__ qkv, const float* __restrict__ lse,
                      int T, int C, int NH, int KVH, float scale_log2, float scale) {
    using SH = FlashShape<HS>;
    constexpr int LDS = SH::LDS, BC = FLASH_BWD_BC, BR = SH::BWD_BR, LDSS = SH::LDSS, NT = FLASH_BWD_THREADS;
    constexpr int ND = HS / 8;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    T16* Ks = reinterpret_cast<T16*>(attn_smem);  // [BC][LDS]
    T16* Vs = Ks + BC * LDS;                        // [BC][LDS]
    T16* Qs = Vs + BC * LDS;                        // [2][BR][LDS]
    T16* dOs = Qs + 2 * BR * LDS;                   // [2][BR][LDS]
    T16* dSs = dOs + 2 * BR * LDS;                  // [BC][LDSS] dS^T (keys x queries)
    float* Ls = reinterpret_cast<float*>(dSs + BC * LDSS);  // [2][BR] lse * log2e
    float* Ds = Ls + 2 * BR;                                 // [2][BR] D

    const int jb = blockIdx.x, j0 = jb * BC;
    const int group = NH / KVH;
    const int b = blockIdx.y / KVH, kvh = blockIdx.y % KVH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * HS;
    const T16* kg = qkv + (size_t)b * T * QW + C + (size_t)kvh * HS;
    const T16* vg = kg + (size_t)KVH * HS;
    const T16* qg0 = qkv + (size_t)b * T * QW;  // q of token 0, head 0 (head h at + h HS)
    const T16* dog0 = dout + (size_t)b * T * C;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int kw = warp * 16;                       // the warp's first key in the block
    const int key0 = j0 + kw + g;  // this thread's first key (its second: key0 + 8)

    const int nqt = (T - j0 + BR - 1) / BR;  // query blocks starting at j0, per query head
    const int nsteps = group * nqt;

    attn_load_tile<HS, BC, NT>(Ks, kg, QW, j0, T);
    attn_load_tile<HS, BC, NT>(Vs, vg, QW, j0, T);
    {
        const int h = kvh * group;  // the first step: the group's first head, queries from j0
        attn_load_tile<HS, BR, NT>(Qs, qg0 + (size_t)h * HS, QW, j0, T);
        attn_load_tile<HS, BR, NT>(dOs, dog0 + (size_t)h * HS, C, j0, T);
        const float* lseg = lse + ((size_t)b * NH + h) * T;
        const float* Dg = Dbuf + ((size_t)b * NH + h) * T;
        for (int i = threadIdx.x; i < BR; i += NT) {
            const int t = j0 + i;
            Ls[i] = t < T ? lseg[t] * ATTN_LOG2E : 0.0f;
            Ds[i] = t < T ? Dg[t] : 0.0f;
        }
    }
    attn_cp_async_commit();

    float dk[ND][4], dv[ND][4];
    attn_zero(dk);
    attn_zero(dv);

    for (int step = 0; step < nsteps; step++) {
        const int buf = step & 1;
        const int h = kvh * group + step / nqt;
        const int i0 = j0 + (step % nqt) * BR;
        if (step + 1 < nsteps) {
            const int nb0 = buf ^ 1;
            const int hn = kvh * group + (step + 1) / nqt, in0 = j0 + ((step + 1) % nqt) * BR;
            attn_load_tile<HS, BR, NT>(Qs + nb0 * BR * LDS, qg0 + (size_t)hn * HS, QW, in0, T);
            attn_load_tile<HS, BR, NT>(dOs + nb0 * BR * LDS, dog0 + (size_t)hn * HS, C, in0, T);
            const float* lseg = lse + ((size_t)b * NH + hn) * T;
            const float* Dg = Dbuf + ((size_t)b * NH + hn) * T;
            for (int i = threadIdx.x; i < BR; i += NT) {
                const int t = in0 + i;
                Ls[nb0 * BR + i] = t < T ? lseg[t] * ATTN_LOG2E : 0.0f;
                Ds[nb0 * BR + i] = t < T ? Dg[t] : 0.0f;
            }
            attn_cp_async_commit();
            attn_cp_async_wait<1>();
        } else {
            attn_cp_async_wait<0>();
        }
        __syncthreads();
        const T16* Qt = Qs + buf * BR * LDS;
        const T16* dOt = dOs + buf * BR * LDS;
        const float* Lt = Ls + buf * BR;
        const float* Dt = Ds + buf * BR;
        // The key chunks (warps) with a key that some query of this block can see: key <= the
        // block's last query and key < T. A prefix of the warps (both bounds grow with w).
        const int nkc = min(min((i0 + BR - 1 - j0) / 16 + 1, (T - j0 + 15) / 16), BC / 16);
        if (warp < nkc) attn_bwd_keys_step<HS, BR>(dk, dv, Ks, Vs, Qt, dOt, Lt, Dt, dSs, kw, i0, j0, T, scale_log2, lane);
        __syncthreads();
        // This key block's dQ slice of head h, from its row j0.
        float* part = dq_part + (((size_t)b * NH + h) * attn_flash_dq_rows(T) + attn_flash_slice_row(jb, T)) * HS;
        attn_bwd_dq_step<HS, BR>(part, dSs, Ks, nkc, i0, j0, T, lane);
    }

    attn_bwd_store_dkdv<HS>(dqkv, dk, dv, b, T, C, KVH, kvh, key0, c, scale);
}

// ----------------------------------------------------------------------------
// flash backward, launch 3: dq[b,t,head h] = scale * sum over key blocks j = 0 .. t/128, in
// that order, of slice j's row t (fp32), rounded to bf16 once. One thread per 8 channels.

template <int HS, class T16>
__global__ void __launch_bounds__(256)
attn_flash_dq_sum_kernel(T16* __restrict__ dqkv, const float* __restrict__ dq_part, int B, int T, int C, int NH,
                         int KVH, float scale) {
    const size_t chunks = (size_t)B * T * C / 8;
    const size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= chunks) return;
    const int C8 = C / 8;
    const size_t row = k / C8;  // b * T + t
    const int cc = (int)(k % C8);
    const int h = cc / (HS / 8), d = (cc % (HS / 8)) * 8;
    const size_t b = row / T;
    const int t = (int)(row % T);
    const float* base = dq_part + ((b * NH + h) * attn_flash_dq_rows(T)) * HS + d;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    const int last = t / FLASH_BWD_BC;
    for (int j = 0; j <= last; j++) {
        float v[8];
        load8(v, base + (attn_flash_slice_row(j, T) + (size_t)(t - j * FLASH_BWD_BC)) * HS);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] += v[e];
    }
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] *= scale;
    store8(dqkv + row * ((size_t)C + 2 * (size_t)KVH * HS) + (size_t)h * HS + d, acc);
}

// ----------------------------------------------------------------------------
// The shared-memory opt-in (once, by attention_context_init) and the launches

// Opt a kernel into `bytes` of dynamic shared memory if the GPU allows it (otherwise its
// launch is refused with a message: attn_require_smem).
static inline void attn_optin(const void* kernel, size_t bytes, int optin) {
    if (bytes <= (size_t)optin)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// Every flash kernel for one 16-bit type, both head sizes (attention_context_init).
template <class T16>
static inline void attn_flash_optin_kernels(int optin) {
    attn_optin((const void*)attn_flash_fwd_kernel<64, T16>, FlashShape<64>::fwd_smem, optin);
    attn_optin((const void*)attn_flash_fwd_kernel<128, T16>, FlashShape<128>::fwd_smem, optin);
    attn_optin((const void*)attn_flash_bwd_kernel<64, T16>, FlashShape<64>::bwd_smem, optin);
    attn_optin((const void*)attn_flash_bwd_kernel<128, T16>, FlashShape<128>::bwd_smem, optin);
}

// A launch's shared memory against the GPU's opt-in limit, as attention_context_init found it
// (host only: no CUDA call).
static inline void attn_require_smem(int smem_optin, size_t bytes, const char* name) {
    CUDA_REQUIRE(smem_optin > 0, "%s: the AttentionContext is not initialised (attention_context_init)", name);
    CUDA_REQUIRE(bytes <= (size_t)smem_optin,
                 "%s needs %zu bytes of shared memory per block, this GPU allows %d; use --attention cublas",
                 name, bytes, smem_optin);
}

template <int HS, class T16>
static void attn_flash_forward_launch(int smem_optin, T16* out, float* lse, const T16* qkv, int B,
                                      int T, int C, int NH, int KVH, cudaStream_t stream) {
    const float scale_log2 = 1.0f / sqrtf((float)HS) * ATTN_LOG2E;
    const size_t smem = FlashShape<HS>::fwd_smem;
    attn_require_smem(smem_optin, smem, "flash attention forward");
    const dim3 grid((unsigned)ceil_div(T, FLASH_FWD_BR), (unsigned)(B * NH));
    attn_flash_fwd_kernel<HS, T16><<<grid, FLASH_FWD_THREADS, smem, stream>>>(out, lse, qkv, T, C, NH, KVH, scale_log2);
    CUDA_LAUNCH_CHECK();
}

// The backward's three launches: D, then main(Dbuf, dq_part, grid) (the main kernel: flash's
// or flash-pipelined's, same grid and dQ slices), then the dQ-slice sum. scratch: D [B*NH*T]
// floats, then (256-byte aligned) the dQ slices.
template <int HS, class T16, class Main>
static void attn_flash_backward_launches(T16* dqkv, void* scratch, const T16* dout, const T16* out, int B, int T,
                                         int C, int NH, int KVH, cudaStream_t stream, Main main) {
    float* Dbuf = (float*)scratch;
    float* dq_part = (float*)((char*)scratch + align_up_256((size_t)B * NH * T * sizeof(float)));
    const size_t chunks = (size_t)B * T * C / 8;
    const unsigned blocks = (unsigned)ceil_div(chunks, (size_t)256);
    attn_flash_bwd_dot_kernel<HS><<<blocks, 256, 0, stream>>>(Dbuf, dout, out, B, T, C, NH);
    CUDA_LAUNCH_CHECK();
    main(Dbuf, dq_part, dim3((unsigned)ceil_div(T, FLASH_BWD_BC), (unsigned)(B * KVH)));
    CUDA_LAUNCH_CHECK();
    attn_flash_dq_sum_kernel<HS><<<blocks, 256, 0, stream>>>(dqkv, dq_part, B, T, C, NH, KVH, 1.0f / sqrtf((float)HS));
    CUDA_LAUNCH_CHECK();
}

template <int HS, class T16>
static void attn_flash_backward_launch(int smem_optin, T16* dqkv, void* scratch, const T16* dout, const T16* qkv,
                                       const T16* out, const float* lse, int B, int T, int C, int NH, int KVH,
                                       cudaStream_t stream) {
    const float scale = 1.0f / sqrtf((float)HS);
    const float scale_log2 = scale * ATTN_LOG2E;
    const size_t smem = FlashShape<HS>::bwd_smem;
    attn_require_smem(smem_optin, smem, "flash attention backward");
    attn_flash_backward_launches<HS>(dqkv, scratch, dout, out, B, T, C, NH, KVH, stream,
                                     [&](const float* Dbuf, float* dq_part, dim3 grid) {
        attn_flash_bwd_kernel<HS, T16><<<grid, FLASH_BWD_THREADS, smem, stream>>>(dqkv, dq_part, Dbuf, dout, qkv, lse,
                                                                             T, C, NH, KVH, scale_log2, scale);
    });
}

#endif  // FSDP_KERNELS_CUDA_ATTENTION_FLASH_CUH
