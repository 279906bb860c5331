// The pipelined flash kernels (--attention flash-pipelined): the flash kernels of
// kernels/cuda_attention_flash.cuh reshaped toward FlashAttention-2's Hopper rates, on the same
// primitives (attn_mma, ldmatrix fragment loads, cp.async tile loads, attn_mma_px, attn_store_row:
// included from there, not repeated). Same interface, layouts and outputs as flash (out + fp32
// natural-log lse; GQA: K/V of the query head's kv head; causal; any T >= 1; head sizes 64
// and 128; bf16 or fp16), dispatched from kernels/cuda_attention.cuh. NOT MEASURED: no GPU has
// timed it yet, so flash stays the default and auto's fallback until scripts/device_check.sh
// shows this one faster (its attention timings run every implementation by name).
//
// What differs from flash's forward (each aimed at a stall flash's has; none measured):
//   - Key tiles of 128 for hs 64 (flash: 64), so one barrier and one softmax pass serve twice
//     the keys. hs 128 keeps 64-key tiles: a 3-stage ring of 128-key K and V tiles is
//     3 x 2 x 128 x 136 x 2 B = 204 KiB, plus Q's 34 KiB = 238 KiB, over the 227 KiB a block
//     may have on sm_90; and S twice (below) at 128 keys would be 128 more registers.
//   - One 16-row m-tile per warp, 8 warps (256 threads) per 128 queries (flash: 4 warps of two
//     m-tiles), so that a warp can hold TWO tiles of scores in registers: S(j+1) = Q K(j+1)^T
//     is issued before softmax(j)'s max/exp/sum and O += P(j) V(j). The MMAs of S(j+1) do not
//     depend on softmax(j)'s FMA/MUFU work, so the warp scheduler overlaps the tensor cores
//     with it (software pipelining inside the warp, as FlashAttention-3 does across warps).
//     Q's fragments stay in registers for the whole loop (both head sizes).
//   - A 3-stage cp.async ring for K and V with ONE __syncthreads per key tile (flash: a double
//     buffer, two barriers per tile). K runs one tile ahead of V, because iteration j reads
//     K(j+1) (for S(j+1)) and V(j): at the top of iteration j the block waits for the copy
//     group issued two iterations earlier, {K(j+1), V(j)} (cp.async.wait_group 1: the group of
//     the previous iteration, {K(j+2), V(j+1)}, may still be in flight), passes the barrier,
//     and issues {K(j+3), V(j+2)}. Ring reuse: K(t) and V(t) live in slot t % 3 of their ring.
//     K(j+3) overwrites K(j), last read in iteration j - 1 (as S(j)); V(j+2) overwrites
//     V(j-1), last read in iteration j - 1 (P(j-1) V(j-1)). The barrier at the top of
//     iteration j is passed only when every warp has finished iteration j - 1, so no warp
//     still reads a slot that the copies issued after it overwrite; and it is also what makes
//     every thread's landed copies of {K(j+1), V(j)} visible to every warp. Each iteration
//     commits one group, empty past the last tile, so that "wait_group 1" always means "the
//     group of two iterations ago" (the prologue commits {Q, K(0)}, {K(1), V(0)},
//     {K(2), V(1)} and waits for the first with wait_group 2).
//   - Causal: key tiles past the block's last query are never loaded; a warp skips the tiles
//     none of its 16 rows can see (warp-uniform: it still takes part in the barriers); only
//     tiles that reach past the warp's first row or past T are masked.
// The online softmax runs over 128-key tiles (hs 64) instead of 64, so the running max
// changes at other points than flash's: the results agree with flash's within rounding,
// not bitwise (dev/test/test_attention_cuda.cu compares them, and each with the CPU twin).
// Deterministic: no atomics, fixed order.
//
// Forward: grid (ceil(T/128), B*NH), 256 threads; query blocks last-first (the most key tiles
// first). Dynamic shared memory per block: hs 64: (128 + 6 x 128) rows x 72 x 2 B = 126 KiB;
// hs 128: (128 + 6 x 64) rows x 136 x 2 B = 136 KiB (one block per SM either way; both over
// the 99 KiB of sm_86/sm_89: refused there with a message, as flash's hs 128 backward is).
//
// Backward: flash's three launches (D = rowsum(dO * O), the main kernel per 128 keys, the
// dQ-slice sum; the same scratch and the same fp32 dQ slices, so the same fixed order of
// every sum) with the main kernel pipelined as the forward is (option (c) of #32's three):
// the Q/dO/lse/D tiles it streams in a 3-stage ring, ONE barrier per step instead of two,
// the dQ product of step s deferred to iteration s + 1 over a double-buffered dS^T tile (see
// attn_flash_pl_bwd_kernel). Its per-step arithmetic is flash's (the shared helpers
// attn_bwd_keys_step, attn_bwd_dq_step), so its dqkv is bitwise flash's given the same
// out and lse. Not done, and why: (a) D inside the main kernel costs every key block a
// recomputation of D for each query tile it visits (an O tile more per step in the ring,
// and D needed by all 8 warps before the step's products: a second barrier, or each warp
// computing all BR rows), against one launch that reads dO and O once; (b) fewer dQ slices
// (a block over 256 keys) would double dK/dV's registers past the 255 a thread has at 8
// warps. Both want a GPU's measurement before their complexity; the slice sum and D stay
// separate launches (~6-7 ms of a d48 step, README).
// Backward main kernel: grid (ceil(T/128), B*KVH), 256 threads; shared memory per block:
// hs 64: K, V 2 x 128 rows + Q, dO 6 x 64 rows of 72 bf16, dS^T 2 x 128 x 72 bf16, lse and D
// 6 x 64 floats = 127.5 KiB; hs 128: (256 + 6 x 32) rows x 136 x 2 B + 2 x 128 x 40 x 2 B +
// 6 x 32 x 4 B = 139.8 KiB (flash's: 91 / 112.5 KiB).
// Registers (ptxas -v, nvcc 13.0, sm_90 / sm_80, bf16 and fp16 alike, no spills): forward
// 255 / 252 (hs 64: two 16 x 128 score tiles of 64 floats each, O 32, Q 16: at the limit of
// 256 threads per block) and 236 / 241 (hs 128: two 16 x 64 score tiles, O 64, Q 32);
// backward main kernel 224 / 224 (hs 64) and 246 / 244 (hs 128).
#ifndef FSDP_KERNELS_CUDA_ATTENTION_FLASH_PIPELINED_CUH
#define FSDP_KERNELS_CUDA_ATTENTION_FLASH_PIPELINED_CUH

#include "kernels/cuda_attention_flash.cuh"

#define FLASH_PL_THREADS 256  // 8 warps, 16 query rows each
#define FLASH_PL_BR 128       // queries per block
#define FLASH_PL_STAGES 3     // slots of the K and V rings

template <int HS>
struct FlashPipelinedShape {
    static constexpr int LDS = HS + 8;              // shared-memory row stride (elements), as flash's
    static constexpr int BC = HS <= 64 ? 128 : 64;  // keys per tile (see the top of the file)
    static constexpr size_t fwd_smem =
        (size_t)(FLASH_PL_BR + 2 * FLASH_PL_STAGES * BC) * LDS * sizeof(uint16_t);
};

// s[16 x 8NB] = Q K^T for the warp's 16 rows: Q as A fragments in registers (qa[kc], head
// columns 16kc..), K = rows 0..8NB-1 of the shared tile Kt ([.][LDS]).
template <int KC, int NB, int LDS, class T16>
static __device__ __forceinline__ void attn_pl_scores(float (&s)[NB][4], const uint32_t (&qa)[KC][4], const T16* Kt,
                                                      int lane) {
    attn_zero(s);
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
            uint32_t kb[4];
            attn_ldsm_b<LDS>(kb, Kt, nb * 8, kc * 16, lane);
            attn_mma2<T16>(s[nb], s[nb + 1], qa[kc], kb);
        }
    }
}

// The online softmax of one key tile for this thread's rows row0 and row0 + 8: s (raw
// scores, keys j0..j0+8NB-1 in the mma D layout) becomes P = exp2(s scale_log2 - max), with
// the causal (key > row) and tail (key >= T) masks where `masked`; m (running max, log2
// units), l (this thread's part of the running sum) and the accumulator o are updated.
template <int NB, int ND>
static __device__ __forceinline__ void attn_pl_softmax(float (&s)[NB][4], float (&o)[ND][4], float (&m)[2],
                                                       float (&l)[2], bool masked, int j0, int row0, int T,
                                                       float scale_log2, int c) {
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float x = s[nb][i] * scale_log2;
            if (masked) {
                const int key = j0 + nb * 8 + 2 * c + (i & 1);
                const int row = i < 2 ? row0 : row0 + 8;
                if (key > row || key >= T) x = -INFINITY;
            }
            s[nb][i] = x;
        }
    }
    // The row's max over its 4 lanes (each holds 2 of every 8 columns).
    float mx0 = m[0], mx1 = m[1];
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        mx0 = fmaxf(mx0, fmaxf(s[nb][0], s[nb][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nb][2], s[nb][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    // A row with nothing visible yet keeps max -inf: subtract 0 then (exp2(-inf) = 0).
    const float base0 = mx0 == -INFINITY ? 0.0f : mx0;
    const float base1 = mx1 == -INFINITY ? 0.0f : mx1;
    const float corr0 = exp2f(m[0] - base0), corr1 = exp2f(m[1] - base1);  // 0 on the first tile
    m[0] = mx0;
    m[1] = mx1;
    float ls0 = 0.0f, ls1 = 0.0f;
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        s[nb][0] = exp2f(s[nb][0] - base0);
        s[nb][1] = exp2f(s[nb][1] - base0);
        s[nb][2] = exp2f(s[nb][2] - base1);
        s[nb][3] = exp2f(s[nb][3] - base1);
        ls0 += s[nb][0] + s[nb][1];
        ls1 += s[nb][2] + s[nb][3];
    }
    l[0] = l[0] * corr0 + ls0;
    l[1] = l[1] * corr1 + ls1;
#pragma unroll
    for (int nd = 0; nd < ND; nd++) {
        o[nd][0] *= corr0; o[nd][1] *= corr0;
        o[nd][2] *= corr1; o[nd][3] *= corr1;
    }
}

// Tile t of ntiles (K or V rows of qkv at g) into slot t % 3 of its ring (nothing past the last tile).
template <int HS, int BC, class T16>
static __device__ __forceinline__ void attn_pl_load(T16* ring, const T16* g, size_t QW, int t, int ntiles, int T) {
    if (t < ntiles)
        attn_load_tile<HS, BC, FLASH_PL_THREADS>(ring + (t % FLASH_PL_STAGES) * BC * (HS + 8), g, QW, t * BC, T);
}

template <int HS, class T16>
__global__ void __launch_bounds__(FLASH_PL_THREADS)
attn_flash_pl_fwd_kernel(T16* __restrict__ out, float* __restrict__ lse, const T16* __restrict__ qkv,
                         int T, int C, int NH, int KVH, float scale_log2) {
    using SH = FlashPipelinedShape<HS>;
    constexpr int LDS = SH::LDS, BR = FLASH_PL_BR, BC = SH::BC, NT = FLASH_PL_THREADS;
    constexpr int KC = HS / 16;  // k-chunks of the head dimension
    constexpr int ND = HS / 8;   // 8-wide column blocks of the output
    constexpr int NB = BC / 8;   // 8-key column blocks of S
    constexpr int PC = BC / 16;  // 16-key chunks of P
    extern __shared__ __align__(16) unsigned char attn_smem[];
    T16* Qs = reinterpret_cast<T16*>(attn_smem);   // [BR][LDS]
    T16* Ks = Qs + BR * LDS;                        // [3][BC][LDS]
    T16* Vs = Ks + FLASH_PL_STAGES * BC * LDS;      // [3][BC][LDS]

    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * HS;
    const T16* qg = qkv + (size_t)b * T * QW + (size_t)h * HS;
    const T16* kg = qkv + (size_t)b * T * QW + C + (size_t)(h / (NH / KVH)) * HS;
    const T16* vg = kg + (size_t)KVH * HS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int wr = q0 + warp * 16;  // the warp's first query row
    const int row0 = wr + g;        // this thread's rows: row0, row0 + 8

    const int ntiles = (min(q0 + BR, T) + BC - 1) / BC;  // keys [0, min(q0 + BR, T)) are visible to some row
    const int wtiles = min(ntiles, wr / BC + 1);         // the tiles some row of this warp sees

    // Prologue (see the top of the file): {Q, K(0)}, {K(1), V(0)}, {K(2), V(1)}.
    attn_load_tile<HS, BR, NT>(Qs, qg, QW, q0, T);
    attn_pl_load<HS, BC>(Ks, kg, QW, 0, ntiles, T);
    attn_cp_async_commit();
    attn_pl_load<HS, BC>(Ks, kg, QW, 1, ntiles, T);
    attn_pl_load<HS, BC>(Vs, vg, QW, 0, ntiles, T);
    attn_cp_async_commit();
    attn_pl_load<HS, BC>(Ks, kg, QW, 2, ntiles, T);
    attn_pl_load<HS, BC>(Vs, vg, QW, 1, ntiles, T);
    attn_cp_async_commit();
    attn_cp_async_wait<2>();  // {Q, K(0)} has landed (this thread's part) ...
    __syncthreads();          // ... and everyone's
    uint32_t qa[KC][4];       // the warp's 16 query rows as A fragments, for the whole loop
#pragma unroll
    for (int kc = 0; kc < KC; kc++) attn_ldsm_a<LDS>(qa[kc], Qs, wr - q0, kc * 16, lane);

    float o[ND][4];
    attn_zero(o);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows row0, row0 + 8
    float s[NB][4];  // S(j) at the top of iteration j (tile 0: here)
    attn_pl_scores<KC, NB, LDS>(s, qa, Ks, lane);

    for (int j = 0; j < ntiles; j++) {
        attn_cp_async_wait<1>();  // {K(j+1), V(j)} has landed (this thread's copies) ...
        __syncthreads();          // ... everyone's; and every warp is done with iteration j - 1
        attn_pl_load<HS, BC>(Ks, kg, QW, j + 3, ntiles, T);
        attn_pl_load<HS, BC>(Vs, vg, QW, j + 2, ntiles, T);
        attn_cp_async_commit();   // (empty past the last tile)
        if (j < wtiles) {
            // S(j+1) first: its MMAs overlap the softmax of tile j below.
            float sn[NB][4];
            if (j + 1 < wtiles) attn_pl_scores<KC, NB, LDS>(sn, qa, Ks + ((j + 1) % FLASH_PL_STAGES) * BC * LDS, lane);
            const int j0 = j * BC;
            const bool masked = (j0 + BC - 1 > wr) || (j0 + BC > T);
            attn_pl_softmax<NB, ND>(s, o, m, l, masked, j0, row0, T, scale_log2, c);
            attn_mma_px<PC, ND, LDS>(o, s, Vs + (j % FLASH_PL_STAGES) * BC * LDS, lane);  // O += P(j) V(j)
            if (j + 1 < wtiles) {
#pragma unroll
                for (int nb = 0; nb < NB; nb++)
#pragma unroll
                    for (int i = 0; i < 4; i++) s[nb][i] = sn[nb][i];
            }
        }
    }

    // Row sums over the group's 4 lanes (fixed butterfly order), normalise, store.
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float lt = l[half];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        const int row = row0 + 8 * half;
        if (row < T) {
            attn_store_row(out + ((size_t)b * T + row) * C + (size_t)h * HS + 2 * c, o, half, 1.0f / lt);
            if (c == 0) lse[(size_t)bh * T + row] = (m[half] + log2f(lt)) * ATTN_LN2;
        }
    }
}

// ----------------------------------------------------------------------------
// flash-pipelined backward, launch 2: flash's main kernel (attn_flash_bwd_kernel, whose comment
// says what a step computes; the same helpers attn_bwd_keys_step and attn_bwd_dq_step, the
// same grid, warps, tiles and dQ slices) with its Q/dO/lse/D tiles in a 3-stage ring and ONE
// __syncthreads per step instead of two. Step s (query head, query block) reads slot s % 3 of
// the ring and writes its dS^T into half s % 2 of a double-buffered dS^T tile; the dQ product
// of step s, which needs every warp's dS^T(s), runs in iteration s + 1, after that
// iteration's barrier (and after the loop for the last step), so the one barrier per step
// does both jobs: at the top of iteration s the block waits for the copy group of tile s
// (cp.async.wait_group 1: tile s + 1's may still be in flight), passes the barrier, then
// issues tile s + 2 into slot (s + 2) % 3. Reuse distances: slot (s + 2) % 3 held tile s - 1,
// last read by step s - 1 in iteration s - 1; dS^T half s % 2 (written by step s) was last
// read by the dQ product of step s - 2, in iteration s - 1; both before the barrier at the
// top of iteration s, which every warp passes only when all have finished iteration s - 1.
// And the barrier makes tile s (every thread's copies, and the lse/D rows stored plainly)
// and dS^T(s - 1) (every warp's rows) visible to every warp. Each iteration commits one copy
// group, empty past the last step, so that "wait_group 1" always means tile s's group.
// D and the dQ-slice sum stay flash's launches 1 and 3 (see the top of the file).

// Tile `step` of the block's steps (its query head and query block from the step index, as
// flash's main kernel walks them) into ring slot step % 3: Q and dO by cp.async, lse * log2e
// and D by plain loads and stores; nothing past the last step.
template <int HS, int BR, class T16>
static __device__ __forceinline__ void attn_pl_bwd_load(T16* Qs, T16* dOs, float* Ls, float* Ds, const T16* qg0,
                                                        const T16* dog0, const float* lse, const float* Dbuf,
                                                        int step, int nsteps, int nqt, int b, int kvh, int group,
                                                        int NH, int j0, int T, size_t QW, int C) {
    if (step >= nsteps) return;
    constexpr int LDS = HS + 8, NT = FLASH_BWD_THREADS;
    const int slot = step % FLASH_PL_STAGES;
    const int h = kvh * group + step / nqt, i0 = j0 + (step % nqt) * BR;
    attn_load_tile<HS, BR, NT>(Qs + slot * BR * LDS, qg0 + (size_t)h * HS, QW, i0, T);
    attn_load_tile<HS, BR, NT>(dOs + slot * BR * LDS, dog0 + (size_t)h * HS, C, i0, T);
    const float* lseg = lse + ((size_t)b * NH + h) * T;
    const float* Dg = Dbuf + ((size_t)b * NH + h) * T;
    for (int i = threadIdx.x; i < BR; i += NT) {
        const int t = i0 + i;
        Ls[slot * BR + i] = t < T ? lseg[t] * ATTN_LOG2E : 0.0f;
        Ds[slot * BR + i] = t < T ? Dg[t] : 0.0f;
    }
}

template <int HS>
struct FlashPipelinedBwdShape {
    static constexpr int LDS = HS + 8;
    static constexpr int BR = FlashShape<HS>::BWD_BR;  // queries per step, as flash's
    static constexpr int LDSS = BR + 8;
    static constexpr size_t bwd_smem =
        (size_t)(2 * FLASH_BWD_BC + 2 * FLASH_PL_STAGES * BR) * LDS * sizeof(uint16_t) +  // K, V; Q, dO ring
        (size_t)2 * FLASH_BWD_BC * LDSS * sizeof(uint16_t) +                              // dS^T, two halves
        (size_t)2 * FLASH_PL_STAGES * BR * sizeof(float);                                 // lse, D ring
};

template <int HS, class T16>
__global__ void __launch_bounds__(FLASH_BWD_THREADS)
attn_flash_pl_bwd_kernel(T16* __restrict__ dqkv, float* __restrict__ dq_part, const float* __restrict__ Dbuf,
                         const T16* __restrict__ dout, const T16* __restrict__ qkv, const float* __restrict__ lse,
                         int T, int C, int NH, int KVH, float scale_log2, float scale) {
    using SH = FlashPipelinedBwdShape<HS>;
    constexpr int LDS = SH::LDS, BC = FLASH_BWD_BC, BR = SH::BR, LDSS = SH::LDSS, ND = HS / 8;
    constexpr int S = FLASH_PL_STAGES;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    T16* Ks = reinterpret_cast<T16*>(attn_smem);  // [BC][LDS]
    T16* Vs = Ks + BC * LDS;                        // [BC][LDS]
    T16* Qs = Vs + BC * LDS;                        // [3][BR][LDS]
    T16* dOs = Qs + S * BR * LDS;                   // [3][BR][LDS]
    T16* dSs = dOs + S * BR * LDS;                  // [2][BC][LDSS] dS^T (keys x queries)
    float* Ls = reinterpret_cast<float*>(dSs + 2 * BC * LDSS);  // [3][BR] lse * log2e
    float* Ds = Ls + S * BR;                                     // [3][BR] D

    const int jb = blockIdx.x, j0 = jb * BC;
    const int group = NH / KVH;
    const int b = blockIdx.y / KVH, kvh = blockIdx.y % KVH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * HS;
    const T16* kg = qkv + (size_t)b * T * QW + C + (size_t)kvh * HS;
    const T16* vg = kg + (size_t)KVH * HS;
    const T16* qg0 = qkv + (size_t)b * T * QW;
    const T16* dog0 = dout + (size_t)b * T * C;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int kw = warp * 16;
    const int key0 = j0 + kw + g;  // this thread's first key (its second: key0 + 8)
    const int nqt = (T - j0 + BR - 1) / BR;
    const int nsteps = group * nqt;
    // The step's query head, first query, its dQ slice and its visible 16-key chunks (a prefix
    // of the warps: see flash's main kernel).
    auto step_i0 = [&](int step) { return j0 + (step % nqt) * BR; };
    auto step_nkc = [&](int i0) { return min(min((i0 + BR - 1 - j0) / 16 + 1, (T - j0 + 15) / 16), BC / 16); };
    auto dq_of_step = [&](int step) {
        const int h = kvh * group + step / nqt, i0 = step_i0(step);
        float* part = dq_part + (((size_t)b * NH + h) * attn_flash_dq_rows(T) + attn_flash_slice_row(jb, T)) * HS;
        attn_bwd_dq_step<HS, BR>(part, dSs + (step & 1) * BC * LDSS, Ks, step_nkc(i0), i0, j0, T, lane);
    };

    // Prologue: {K, V, tile 0}, {tile 1}.
    attn_load_tile<HS, BC, FLASH_BWD_THREADS>(Ks, kg, QW, j0, T);
    attn_load_tile<HS, BC, FLASH_BWD_THREADS>(Vs, vg, QW, j0, T);
    attn_pl_bwd_load<HS, BR>(Qs, dOs, Ls, Ds, qg0, dog0, lse, Dbuf, 0, nsteps, nqt, b, kvh, group, NH, j0, T, QW, C);
    attn_cp_async_commit();
    attn_pl_bwd_load<HS, BR>(Qs, dOs, Ls, Ds, qg0, dog0, lse, Dbuf, 1, nsteps, nqt, b, kvh, group, NH, j0, T, QW, C);
    attn_cp_async_commit();

    float dk[ND][4], dv[ND][4];
    attn_zero(dk);
    attn_zero(dv);

    for (int step = 0; step < nsteps; step++) {
        attn_cp_async_wait<1>();  // tile `step` has landed (this thread's copies) ...
        __syncthreads();          // ... everyone's, and dS^T(step - 1); iteration step - 1 is done
        attn_pl_bwd_load<HS, BR>(Qs, dOs, Ls, Ds, qg0, dog0, lse, Dbuf, step + 2, nsteps, nqt, b, kvh, group, NH, j0,
                                 T, QW, C);
        attn_cp_async_commit();   // (empty past the last step)
        if (step > 0) dq_of_step(step - 1);
        const int slot = step % S, i0 = step_i0(step);
        if (warp < step_nkc(i0))
            attn_bwd_keys_step<HS, BR>(dk, dv, Ks, Vs, Qs + slot * BR * LDS, dOs + slot * BR * LDS, Ls + slot * BR,
                                       Ds + slot * BR, dSs + (step & 1) * BC * LDSS, kw, i0, j0, T, scale_log2, lane);
    }
    __syncthreads();  // every warp's dS^T of the last step
    dq_of_step(nsteps - 1);

    attn_bwd_store_dkdv<HS>(dqkv, dk, dv, b, T, C, KVH, kvh, key0, c, scale);
}

// flash's launches 1 (D) and 3 (the dQ-slice sum) around the pipelined main kernel; the same
// scratch as flash's (attention_backward_scratch_bytes).
template <int HS, class T16>
static void attn_flash_pl_backward_launch(int smem_optin, T16* dqkv, void* scratch, const T16* dout, const T16* qkv,
                                          const T16* out, const float* lse, int B, int T, int C, int NH, int KVH,
                                          cudaStream_t stream) {
    const float scale = 1.0f / sqrtf((float)HS);
    const float scale_log2 = scale * ATTN_LOG2E;
    const size_t smem = FlashPipelinedBwdShape<HS>::bwd_smem;
    attn_require_smem(smem_optin, smem, "flash-pipelined attention backward");
    attn_flash_backward_launches<HS>(dqkv, scratch, dout, out, B, T, C, NH, KVH, stream,
                                     [&](const float* Dbuf, float* dq_part, dim3 grid) {
        attn_flash_pl_bwd_kernel<HS, T16><<<grid, FLASH_BWD_THREADS, smem, stream>>>(dqkv, dq_part, Dbuf, dout, qkv,
                                                                                lse, T, C, NH, KVH, scale_log2, scale);
    });
}

// Both head sizes of one 16-bit type into the shared-memory opt-in (attention_context_init).
template <class T16>
static inline void attn_flash_pl_optin_kernels(int optin) {
    attn_optin((const void*)attn_flash_pl_fwd_kernel<64, T16>, FlashPipelinedShape<64>::fwd_smem, optin);
    attn_optin((const void*)attn_flash_pl_fwd_kernel<128, T16>, FlashPipelinedShape<128>::fwd_smem, optin);
    attn_optin((const void*)attn_flash_pl_bwd_kernel<64, T16>, FlashPipelinedBwdShape<64>::bwd_smem, optin);
    attn_optin((const void*)attn_flash_pl_bwd_kernel<128, T16>, FlashPipelinedBwdShape<128>::bwd_smem, optin);
}

template <int HS, class T16>
static void attn_flash_pl_forward_launch(int smem_optin, T16* out, float* lse, const T16* qkv, int B, int T, int C,
                                         int NH, int KVH, cudaStream_t stream) {
    const float scale_log2 = 1.0f / sqrtf((float)HS) * ATTN_LOG2E;
    const size_t smem = FlashPipelinedShape<HS>::fwd_smem;
    attn_require_smem(smem_optin, smem, "flash-pipelined attention forward");
    const dim3 grid((unsigned)ceil_div(T, FLASH_PL_BR), (unsigned)(B * NH));
    attn_flash_pl_fwd_kernel<HS, T16><<<grid, FLASH_PL_THREADS, smem, stream>>>(out, lse, qkv, T, C, NH, KVH,
                                                                               scale_log2);
    CUDA_LAUNCH_CHECK();
}

#endif  // FSDP_KERNELS_CUDA_ATTENTION_FLASH_PIPELINED_CUH
