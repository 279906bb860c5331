// kernels/: the compute kernels of both devices and the tables the model schedule calls
// (kernels.h): this file's fp32 reference kernels and their table (kernels_cpu.c), the BF16
// CUDA kernels (cuda_*.cuh) and theirs (kernels_cuda.cuh).
//
// CPU fp32 reference kernels. The contract (shapes, accumulation, determinism) is in
// cpu_kernels.h; this file explains how each kernel meets it.
//
// How the code is written, and why:
// - Hot inner loops run over contiguous channels with restrict pointers so that GCC
//   vectorises them at -O3 without -ffast-math. A float sum is only vectorised when we say
//   reassociation is fine, hence the explicit `#pragma omp simd reduction(...)`. The
//   order of operations is still fixed by the binary, so results stay deterministic.
// - Determinism for a fixed thread count: every output element is written by exactly one
//   thread, in a fixed order of operations, whatever the schedule. Reductions over rows
//   into parameter gradients (layernorm dweight/dbias, matmul dbias, encoder dwte/dwpe)
//   are parallelised over tiles of output columns, each tile walking the rows in order;
//   this is even independent of the thread count. No atomics anywhere.
// - exp() comes from fast_expf below instead of libm: without -ffast-math glibc's expf and
//   tanhf are scalar calls, and they would dominate the softmax (N x 50257 of them), the
//   attention and the GELU. fast_expf is within 1 ulp of the correctly rounded result.
// - No heap allocation: the only scratch memory is fixed-size stack buffers (at most
//   about 110 KB per thread, in attention_backward).
#include "kernels/cpu_kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Width of the column tiles used for parameter-gradient reductions over rows: 64 floats
// (4 cache lines) vectorise well, and C = 768 still gives 12 tiles to share among threads.
#define COL_TILE 64
// Attention (see the attention section): blocks of ATT_Q queries (the vector dimension
// of the micro-kernel), key tiles of ATT_KEYS (forward) and ATT_BWD_KEYS (backward) keys,
// both multiples of ATT_Q. Stack buffers are sized for head sizes up to ATT_MAX_HS
// (GPT-2 uses 64): about 20 KB per thread forward and 110 KB backward.
#define ATT_Q 16
#define ATT_KEYS 64
#define ATT_BWD_KEYS 32
#define ATT_MAX_HS 128
_Static_assert(ATT_KEYS % ATT_Q == 0 && ATT_BWD_KEYS % ATT_Q == 0,
               "key tiles must start at query block boundaries");
// Chunks of sum_squares: partial sums live on the stack and are added in a fixed order.
#define SUMSQ_CHUNKS 256

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2/pi)

static inline int min_int(int a, int b) { return a < b ? a : b; }

// ----------------------------------------------------------------------------
// fast_expf: exp(x) in float with no library call and no branch, so that loops calling
// it vectorise. Classic Cephes scheme: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split
// of ln2 so that r is accurate), exp(r) by a degree-6 polynomial, 2^n by building the
// exponent bits. Max error 1 ulp (8.5e-8 relative; every float in [-87, 88] was checked
// against double exp). Inputs are clamped to [-87, 88] so that 2^n stays a normal float;
// anything below -87 returns 0 (including -inf), which is what softmax-style callers
// want. NaN returns NaN, as CUDA's expf does: a NaN weight makes the loss NaN (so the step is
// skipped) instead of vanishing from a softmax. The exponent arithmetic is unsigned: t's bits
// minus the magic's are small for every number, but a NaN's (n + 127) << 23 overflowed an int
// (undefined behaviour; the result is discarded, but UBSan and the optimiser may not).

static inline float bits_to_float(int32_t i) { float f; memcpy(&f, &i, sizeof f); return f; }
static inline int32_t float_to_bits(float f) { int32_t i; memcpy(&i, &f, sizeof i); return i; }

// cond ? a : b through integer masks. A plain float ?: followed by float arithmetic gets
// turned into a branch (GCC may not speculate float operations under the default
// -ftrapping-math), and the loop around it would no longer vectorise; this compiles to a
// compare and a blend.
static inline float select_f(int cond, float a, float b) {
    const int32_t mask = -(int32_t)(cond != 0);
    return bits_to_float((float_to_bits(a) & mask) | (float_to_bits(b) & ~mask));
}

static inline float fast_expf(float x) {
    const float LOG2E = 1.44269504088896341f;
    const float LN2_HI = 0.693359375f;       // few mantissa bits: n * LN2_HI is exact
    const float LN2_LO = -2.12194440e-4f;
    const float ROUND_MAGIC = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    float xc = select_f(x < -87.0f, -87.0f, x);
    xc = select_f(xc > 88.0f, 88.0f, xc);
    // t's low mantissa bits hold round(xc * log2(e)); n is that integer as a float.
    const float t = xc * LOG2E + ROUND_MAGIC;
    const float n = t - ROUND_MAGIC;
    const uint32_t ni = (uint32_t)float_to_bits(t) - (uint32_t)float_to_bits(ROUND_MAGIC);
    float r = xc - n * LN2_HI;
    r = r - n * LN2_LO;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * (r * r) + r + 1.0f;
    const uint32_t scale_bits = (ni + 127u) << 23;  // 2^n (n in [-126, 127]: a normal float)
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return select_f(x < -87.0f, 0.0f, y * scale);   // NaN compares false: it stays NaN
}

float cpu_fast_expf(float x) { return fast_expf(x); }

// ----------------------------------------------------------------------------
// Encoder

// A token another tensor-parallel rank holds embeds as zero here: out = wpe[t] (or 0), which
// the group's sum of partial embeddings completes.
void encoder_forward(float* restrict out, const int* restrict inp, const float* restrict wte,
                     const float* restrict wpe, int B, int T, int C, int vocab_begin, int vocab_end) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        float* o = out + (size_t)n * C;
        const float* p = wpe ? wpe + (size_t)(n % T) * C : NULL;
        if (inp[n] < vocab_begin || inp[n] >= vocab_end) {
            for (int c = 0; c < C; c++) o[c] = p ? p[c] : 0.0f;
            continue;
        }
        const float* w = wte + (size_t)(inp[n] - vocab_begin) * C;
        if (!p) { for (int c = 0; c < C; c++) o[c] = w[c]; continue; }  // no learned positions (Llama)
        for (int c = 0; c < C; c++) o[c] = w[c] + p[c];
    }
}

// dst[c] += sum over rows r (in order) of src[r * stride + c], for c < ncols <= COL_TILE.
// Summing into a private accumulator first and adding once keeps `+=` meaning "add the
// sum", however many rows there are.
static inline void add_column_sums_tile(float* restrict dst, const float* restrict src,
                                        int nrows, size_t stride, int ncols) {
    float acc[COL_TILE];
    for (int c = 0; c < ncols; c++) acc[c] = 0.0f;
    for (int r = 0; r < nrows; r++) {
        const float* row = src + (size_t)r * stride;
        for (int c = 0; c < ncols; c++) acc[c] += row[c];
    }
    for (int c = 0; c < ncols; c++) dst[c] += acc[c];
}

void encoder_backward(float* restrict dwte, float* restrict dwpe, const float* restrict dout,
                      const int* restrict inp, int B, int T, int C, int vocab_begin, int vocab_end) {
    const int N = B * T;
    const int ntiles = (C + COL_TILE - 1) / COL_TILE;
    #pragma omp parallel
    {
        // dwte: rows sharing a token id hit the same dwte row, so rows cannot be split
        // among threads. Channels can: each thread owns column tiles of dwte and walks
        // all rows in order, so repeated ids accumulate in a fixed order.
        #pragma omp for schedule(static) nowait
        for (int tile = 0; tile < ntiles; tile++) {
            const int c0 = tile * COL_TILE, nc = min_int(COL_TILE, C - c0);
            for (int n = 0; n < N; n++) {
                if (inp[n] < vocab_begin || inp[n] >= vocab_end) continue;  // another rank's row
                float* restrict dst = dwte + (size_t)(inp[n] - vocab_begin) * C + c0;
                const float* restrict src = dout + (size_t)n * C + c0;
                for (int c = 0; c < nc; c++) dst[c] += src[c];
            }
        }
        // dwpe: row t receives the sum over the batch; rows t are independent.
        #pragma omp for schedule(static)
        for (int t = 0; t < (dwpe ? T : 0); t++) {
            for (int c0 = 0; c0 < C; c0 += COL_TILE) {
                add_column_sums_tile(dwpe + (size_t)t * C + c0, dout + (size_t)t * C + c0,
                                     B, (size_t)T * C, min_int(COL_TILE, C - c0));
            }
        }
    }
}

// ----------------------------------------------------------------------------
// LayerNorm

void layernorm_forward(float* restrict out, float* restrict mean, float* restrict rstd,
                       const float* restrict inp, const float* restrict weight,
                       const float* restrict bias, int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* o = out + (size_t)n * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int c = 0; c < C; c++) sum += x[c];
        const float m = sum / C;
        // Two-pass variance: no cancellation when |mean| >> std.
        float var = 0.0f;
        #pragma omp simd reduction(+:var)
        for (int c = 0; c < C; c++) { float d = x[c] - m; var += d * d; }
        const float s = 1.0f / sqrtf(var / C + eps);
        for (int c = 0; c < C; c++) o[c] = ((x[c] - m) * s) * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void layernorm_backward(float* restrict dinp, float* restrict dweight, float* restrict dbias,
                        const float* restrict dout, const float* restrict inp,
                        const float* restrict weight, const float* restrict mean,
                        const float* restrict rstd, int N, int C) {
    const int ntiles = (C + COL_TILE - 1) / COL_TILE;
    #pragma omp parallel
    {
        // dinp, one row at a time: with norm = (x - mean) * rstd and dnorm = weight * dout,
        // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)).
        #pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            const float m = mean[n], s = rstd[n];
            float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
            #pragma omp simd reduction(+:dnorm_mean, dnorm_norm_mean)
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * s;
                float dnorm = weight[c] * d[c];
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * norm;
            }
            dnorm_mean /= C;
            dnorm_norm_mean /= C;
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * s;
                float dnorm = weight[c] * d[c];
                dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
            }
        }
        // dweight, dbias: sums over all rows, so parallel over column tiles instead (reads
        // inp and dout a second time, but keeps the reduction order fixed).
        #pragma omp for schedule(static)
        for (int tile = 0; tile < ntiles; tile++) {
            const int c0 = tile * COL_TILE, nc = min_int(COL_TILE, C - c0);
            float accw[COL_TILE], accb[COL_TILE];
            for (int c = 0; c < nc; c++) { accw[c] = 0.0f; accb[c] = 0.0f; }
            for (int n = 0; n < N; n++) {
                const float* x = inp + (size_t)n * C + c0;
                const float* d = dout + (size_t)n * C + c0;
                const float m = mean[n], s = rstd[n];
                for (int c = 0; c < nc; c++) {
                    float norm = (x[c] - m) * s;
                    accw[c] += norm * d[c];
                    accb[c] += d[c];
                }
            }
            for (int c = 0; c < nc; c++) {
                dweight[c0 + c] += accw[c];
                dbias[c0 + c] += accb[c];
            }
        }
    }
}

// ----------------------------------------------------------------------------
// Matmul (OpenBLAS; deterministic for a fixed thread count)

void matmul_forward(float* restrict out, const float* restrict inp, const float* restrict weight,
                    const float* restrict bias, int N, int C, int OC) {
    // out[N,OC] = inp[N,C] @ weight[OC,C]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C,
                1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (bias != NULL) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float* o = out + (size_t)n * OC;
            for (int j = 0; j < OC; j++) o[j] += bias[j];
        }
    }
}

void matmul_backward(float* restrict dinp, float* restrict dweight, float* restrict dbias,
                     const float* restrict dout, const float* restrict inp,
                     const float* restrict weight, int N, int C, int OC) {
    // beta = 1: accumulate into the caller's gradients.
    if (dinp != NULL) {  // dinp[N,C] += dout[N,OC] @ weight[OC,C]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC,
                    1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    }
    if (dweight != NULL) {  // dweight[OC,C] += dout[N,OC]^T @ inp[N,C]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N,
                    1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    }
    if (dbias != NULL) {
        const int ntiles = (OC + COL_TILE - 1) / COL_TILE;
        #pragma omp parallel for schedule(static)
        for (int tile = 0; tile < ntiles; tile++) {
            const int c0 = tile * COL_TILE;
            add_column_sums_tile(dbias + c0, dout + c0, N, (size_t)OC, min_int(COL_TILE, OC - c0));
        }
    }
}

// ----------------------------------------------------------------------------
// Attention
//
// Flash-style, on blocks of ATT_Q = 16 queries against tiles of keys, with every product
// a small matrix multiply done by microkernel_4x16 below. That kernel reads one operand a
// scalar at a time (any layout, e.g. rows of qkv in place, 3C floats apart) and the other
// as contiguous 16-float rows, along which it vectorises.
// - Forward: queries are the vector dimension. Scores are kept transposed, st[j][i] for key
//   j and query i, so the online softmax of 16 queries runs across vector lanes; keys and
//   values are read in place; the block's scaled q and running output are kept transposed
//   in stack buffers.
// - Backward: keys are the vector dimension (p[i][j], ds[i][j]); each key tile is copied
//   once, transposed for the scores and row-major for dq, and its dk, dv are summed in
//   stack buffers over all query blocks before being added to dqkv.
// Key positions are compared as floats (exact below 2^24) so that the masks vectorise.

// Eight floats, through GCC/Clang's generic vector extension: one AVX register here, two
// SSE/NEON registers elsewhere. Used only inside microkernel_4x16 (never passed by value,
// so no ABI concerns), because GCC does not keep a 4 x 16 accumulator block in registers
// when it is written as plain loops over arrays.
typedef float vec8 __attribute__((vector_size(32)));

// C[i][0:16] += sum_{k < K} A(i, k) * B[k][0:16], for rows i < mr (1 <= mr <= 4), with
// A(i, k) = A[i * sa + k * sk] (any layout: it is read one scalar at a time), row k of B
// at B + k * ldb, row i of C at C + i * ldc. B and C rows hold 16 contiguous floats.
// Rows i >= mr read row 0 and are never stored.
static inline void microkernel_4x16(int mr, int K, const float* A, size_t sa, size_t sk,
                                    const float* B, size_t ldb, float* Cm, size_t ldc) {
    const float* a0 = A;
    const float* a1 = A + (mr > 1 ? sa : 0);
    const float* a2 = A + (mr > 2 ? 2 * sa : 0);
    const float* a3 = A + (mr > 3 ? 3 * sa : 0);
    float* r0 = Cm;
    float* r1 = Cm + (mr > 1 ? ldc : 0);
    float* r2 = Cm + (mr > 2 ? 2 * ldc : 0);
    float* r3 = Cm + (mr > 3 ? 3 * ldc : 0);
    vec8 c00, c01, c10, c11, c20, c21, c30, c31;
    memcpy(&c00, r0, sizeof c00); memcpy(&c01, r0 + 8, sizeof c01);
    memcpy(&c10, r1, sizeof c10); memcpy(&c11, r1 + 8, sizeof c11);
    memcpy(&c20, r2, sizeof c20); memcpy(&c21, r2 + 8, sizeof c21);
    memcpy(&c30, r3, sizeof c30); memcpy(&c31, r3 + 8, sizeof c31);
    for (int k = 0; k < K; k++) {
        vec8 b0, b1;
        memcpy(&b0, B + (size_t)k * ldb, sizeof b0);
        memcpy(&b1, B + (size_t)k * ldb + 8, sizeof b1);
        const size_t ak = (size_t)k * sk;
        const float x0 = a0[ak], x1 = a1[ak], x2 = a2[ak], x3 = a3[ak];
        c00 += x0 * b0; c01 += x0 * b1;
        c10 += x1 * b0; c11 += x1 * b1;
        c20 += x2 * b0; c21 += x2 * b1;
        c30 += x3 * b0; c31 += x3 * b1;
    }
    memcpy(r0, &c00, sizeof c00); memcpy(r0 + 8, &c01, sizeof c01);
    if (mr > 1) { memcpy(r1, &c10, sizeof c10); memcpy(r1 + 8, &c11, sizeof c11); }
    if (mr > 2) { memcpy(r2, &c20, sizeof c20); memcpy(r2 + 8, &c21, sizeof c21); }
    if (mr > 3) { memcpy(r3, &c30, sizeof c30); memcpy(r3 + 8, &c31, sizeof c31); }
}

// C[M][N] += A(M x K) B[K][N] for N a multiple of 16, in 4 x 16 blocks (layouts as in
// microkernel_4x16; ldb and ldc are the row strides of B and C).
static inline void small_matmul(int M, int N, int K, const float* A, size_t sa, size_t sk,
                                const float* B, size_t ldb, float* Cm, size_t ldc) {
    for (int n0 = 0; n0 < N; n0 += 16)
        for (int i = 0; i < M; i += 4)
            microkernel_4x16(min_int(4, M - i), K, A + (size_t)i * sa, sa, sk, B + n0, ldb,
                             Cm + (size_t)i * ldc + n0, ldc);
}

// res[r] = a_r . b_r (length n) for the nrows row pairs a_r = a + r * lda, b_r = b + r * ldb;
// four rows at a time, so four independent FMA chains are in flight.
static inline void row_dots(int nrows, int n, const float* a, size_t lda, const float* b,
                            size_t ldb, float* restrict res) {
    int r = 0;
    for (; r + 4 <= nrows; r += 4) {
        const float *a0 = a + r * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
        const float *b0 = b + r * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        #pragma omp simd reduction(+:s0, s1, s2, s3)
        for (int i = 0; i < n; i++) {
            s0 += a0[i] * b0[i];
            s1 += a1[i] * b1[i];
            s2 += a2[i] * b2[i];
            s3 += a3[i] * b3[i];
        }
        res[r] = s0; res[r + 1] = s1; res[r + 2] = s2; res[r + 3] = s3;
    }
    for (; r < nrows; r++) {
        const float *ar = a + r * lda, *br = b + r * ldb;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int i = 0; i < n; i++) s += ar[i] * br[i];
        res[r] = s;
    }
}

static void attention_check_head_size(int hs) {
    if (hs > ATT_MAX_HS) {
        fprintf(stderr, "attention: head size %d is larger than the supported %d\n", hs, ATT_MAX_HS);
        abort();
    }
}

static void attention_check_kv_heads(int NH, int KVH) {
    if (KVH < 1 || NH % KVH != 0) {
        fprintf(stderr, "attention: %d kv heads do not divide the %d heads (grouped-query attention needs "
                "NH %% KVH == 0 and KVH >= 1)\n", KVH, NH);
        abort();
    }
}

void attention_forward(float* restrict out, float* restrict lse, const float* restrict qkv,
                       int B, int T, int C, int NH, int KVH) {
    attention_check_kv_heads(NH, KVH);
    const int hs = C / NH, group = NH / KVH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs;  // row stride of qkv
    const float scale = 1.0f / sqrtf((float)hs);
    attention_check_head_size(hs);
    const int nqb = (T + ATT_Q - 1) / ATT_Q;
    // One (b, head, block of 16 queries) per iteration. Work grows with the query
    // position, so blocks are handed out dynamically; each output is computed by one
    // thread in a fixed order whatever the schedule, so the result does not depend on it.
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int qb = 0; qb < nqb; qb++) {
                const int t0 = qb * ATT_Q, nq = min_int(ATT_Q, T - t0), tend = t0 + nq;
                const float* seq = qkv + (size_t)b * T * QW + (size_t)h * hs;  // q of token 0
                const float* keys = qkv + (size_t)b * T * QW + C + (size_t)(h / group) * hs;
                const float* values = keys + (size_t)KVH * hs;
                float qt[ATT_MAX_HS * ATT_Q];  // qt[d][i] = scale * q_i[d] (0 for padding)
                float ot[ATT_MAX_HS * ATT_Q];  // ot[d][i]: running sum of exp(s - m) v[d]
                float st[ATT_KEYS * ATT_Q];    // scores, then probabilities, st[j][i]
                float m[ATT_Q], l[ATT_Q], corr[ATT_Q], last[ATT_Q];
                for (int i = 0; i < ATT_Q; i++) {
                    // Padding queries (i >= nq) copy the last real one; their results are
                    // dropped. With them, every column has at least one unmasked key.
                    const int tq = i < nq ? t0 + i : tend - 1;
                    const float* q = seq + (size_t)tq * QW;
                    for (int d = 0; d < hs; d++) qt[d * ATT_Q + i] = scale * q[d];
                    last[i] = (float)tq;  // the last key this query may see (causal)
                    m[i] = -INFINITY;
                    l[i] = 0.0f;
                }
                memset(ot, 0, (size_t)hs * ATT_Q * sizeof(float));
                for (int j0 = 0; j0 < tend; j0 += ATT_KEYS) {
                    // j0 <= t0 (tiles start at multiples of ATT_KEYS, a multiple of ATT_Q),
                    // so each query has at least key j0 unmasked in every tile.
                    const int nk = min_int(ATT_KEYS, tend - j0);
                    memset(st, 0, (size_t)nk * ATT_Q * sizeof(float));
                    small_matmul(nk, ATT_Q, hs, keys + (size_t)j0 * QW, QW, 1, qt, ATT_Q, st, ATT_Q);
                    // Causal mask, and the tile's max per query.
                    float tmax[ATT_Q];
                    for (int i = 0; i < ATT_Q; i++) tmax[i] = -INFINITY;
                    for (int j = 0; j < nk; j++) {
                        const float key = (float)(j0 + j);
                        float* s = st + j * ATT_Q;
                        for (int i = 0; i < ATT_Q; i++) {
                            s[i] = key > last[i] ? -INFINITY : s[i];
                            tmax[i] = s[i] > tmax[i] ? s[i] : tmax[i];
                        }
                    }
                    // Online softmax: rescale what was accumulated against the new max.
                    for (int i = 0; i < ATT_Q; i++) {
                        const float mnew = tmax[i] > m[i] ? tmax[i] : m[i];
                        corr[i] = fast_expf(m[i] - mnew);  // 0 on the first tile
                        m[i] = mnew;
                    }
                    float lt[ATT_Q];
                    for (int i = 0; i < ATT_Q; i++) lt[i] = 0.0f;
                    for (int j = 0; j < nk; j++) {
                        float* s = st + j * ATT_Q;
                        for (int i = 0; i < ATT_Q; i++) {
                            s[i] = fast_expf(s[i] - m[i]);  // masked: exp(-inf) = 0
                            lt[i] += s[i];
                        }
                    }
                    for (int i = 0; i < ATT_Q; i++) l[i] = l[i] * corr[i] + lt[i];
                    for (int d = 0; d < hs; d++)
                        for (int i = 0; i < ATT_Q; i++) ot[d * ATT_Q + i] *= corr[i];
                    // ot[d][i] += sum_j v_j[d] p[j][i]
                    small_matmul(hs, ATT_Q, nk, values + (size_t)j0 * QW, 1, QW, st, ATT_Q, ot, ATT_Q);
                }
                for (int i = 0; i < nq; i++) {
                    float* o = out + ((size_t)b * T + t0 + i) * C + (size_t)h * hs;
                    const float inv_l = 1.0f / l[i];
                    for (int d = 0; d < hs; d++) o[d] = ot[d * ATT_Q + i] * inv_l;
                    lse[((size_t)b * NH + h) * T + t0 + i] = m[i] + logf(l[i]);
                }
            }
        }
    }
}

void attention_backward(float* restrict dqkv, const float* restrict dout,
                        const float* restrict qkv, const float* restrict out,
                        const float* restrict lse, int B, int T, int C, int NH, int KVH) {
    attention_check_kv_heads(NH, KVH);
    const int hs = C / NH, group = NH / KVH;
    const int hsp = (hs + 15) / 16 * 16;  // hs padded: rows of the row-major tile copies
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs;  // row stride of qkv and dqkv
    const float scale = 1.0f / sqrtf((float)hs);
    attention_check_head_size(hs);
    // One (b, kv head) pair per iteration: the pair owns the columns of dk, dv of kv head j
    // and of dq of its group's query heads in the rows of batch b, so threads never write
    // the same element, and each pair walks key tiles, query heads and query blocks in a
    // fixed order (deterministic whatever the schedule). A key tile's dk, dv are summed over
    // the group's query heads in its stack buffers, head after head, before one write.
    // Loop order as in FlashAttention-2's backward: the gradients of a key tile are summed
    // over all query blocks in stack buffers; dq is added to once per (tile, block).
    // Here keys are the vector dimension: p[i][j], ds[i][j] for query i, key j.
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int kvh = 0; kvh < KVH; kvh++) {
            const size_t kbase = (size_t)b * T * QW + C + (size_t)kvh * hs;
            const float* kseq = qkv + kbase;  // k of token 0 of this kv head; v at +KVH*hs
            float* dkseq = dqkv + kbase;
            float kt[ATT_MAX_HS * ATT_BWD_KEYS];  // kt[d][j] = k_j[d], transposed tile
            float vt[ATT_MAX_HS * ATT_BWD_KEYS];  // vt[d][j] = v_j[d]
            float kr[ATT_BWD_KEYS * ATT_MAX_HS];  // kr[j][d] = k_j[d], rows of hsp
            float dk[ATT_BWD_KEYS * ATT_MAX_HS];  // the tile's dk, dv, rows of hsp
            float dv[ATT_BWD_KEYS * ATT_MAX_HS];
            float qr[ATT_Q * ATT_MAX_HS];         // the block's q and dout, rows of hsp
            float dor[ATT_Q * ATT_MAX_HS];
            float dqs[ATT_Q * ATT_MAX_HS];        // the block's dq from this tile
            float p[ATT_Q * ATT_BWD_KEYS];        // scores, then probabilities
            float ds[ATT_Q * ATT_BWD_KEYS];       // dP = dout . v, then dS
            for (int j0 = 0; j0 < T; j0 += ATT_BWD_KEYS) {
                const int nk = min_int(ATT_BWD_KEYS, T - j0);
                const int nkp = (nk + 15) / 16 * 16;  // padding keys are zero (and masked)
                memset(kt, 0, (size_t)hs * nkp * sizeof(float));
                memset(vt, 0, (size_t)hs * nkp * sizeof(float));
                memset(kr, 0, (size_t)nkp * hsp * sizeof(float));
                for (int j = 0; j < nk; j++) {
                    const float* k = kseq + (size_t)(j0 + j) * QW;
                    const float* v = k + (size_t)KVH * hs;
                    for (int d = 0; d < hs; d++) {
                        kt[d * nkp + j] = k[d];
                        vt[d * nkp + j] = v[d];
                    }
                    memcpy(kr + (size_t)j * hsp, k, (size_t)hs * sizeof(float));
                }
                memset(dk, 0, (size_t)nk * hsp * sizeof(float));
                memset(dv, 0, (size_t)nk * hsp * sizeof(float));
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    const float* seq = qkv + (size_t)b * T * QW + (size_t)h * hs;  // q of token 0
                    float* dseq = dqkv + (size_t)b * T * QW + (size_t)h * hs;
                    const float* dout_seq = dout + (size_t)b * T * C + (size_t)h * hs;
                    const float* out_seq = out + (size_t)b * T * C + (size_t)h * hs;
                    // The query blocks that see this tile: queries >= j0 (j0 is a multiple
                    // of ATT_Q, so blocks start at j0).
                    for (int t0 = j0; t0 < T; t0 += ATT_Q) {
                        const int nq = min_int(ATT_Q, T - t0);
                        memset(qr, 0, (size_t)nq * hsp * sizeof(float));
                        memset(dor, 0, (size_t)nq * hsp * sizeof(float));
                        memset(p, 0, (size_t)nq * nkp * sizeof(float));
                        memset(ds, 0, (size_t)nq * nkp * sizeof(float));
                        // s[i][j] = q_i . k_j and dP[i][j] = dout_i . v_j, q and dout read in place.
                        small_matmul(nq, nkp, hs, seq + (size_t)t0 * QW, QW, 1, kt, nkp, p, nkp);
                        small_matmul(nq, nkp, hs, dout_seq + (size_t)t0 * C, C, 1, vt, nkp, ds, nkp);
                        // D_i = dout_i . out_i = sum_j p_ij dP_ij: softmax backward is p (dP - D).
                        float D[ATT_Q];
                        row_dots(nq, hs, dout_seq + (size_t)t0 * C, C, out_seq + (size_t)t0 * C, C, D);
                        for (int i = 0; i < nq; i++) {
                            const int tq = t0 + i;
                            const float* q = seq + (size_t)tq * QW;
                            const float* dO = dout_seq + (size_t)tq * C;
                            memcpy(qr + (size_t)i * hsp, q, (size_t)hs * sizeof(float));
                            memcpy(dor + (size_t)i * hsp, dO, (size_t)hs * sizeof(float));
                            const float L = lse[((size_t)b * NH + h) * T + tq];
                            // p = exp(s scale - lse), recomputed, 0 for keys after the query
                            // (and padding keys); dS = p (dP - D) scale.
                            const int nvalid = min_int(nkp, tq + 1 - j0);
                            float* pi = p + (size_t)i * nkp;
                            float* dsi = ds + (size_t)i * nkp;
                            for (int j = 0; j < nkp; j++) {
                                const float x = select_f(j < nvalid, pi[j] * scale - L, -INFINITY);
                                pi[j] = fast_expf(x);
                                dsi[j] = pi[j] * (dsi[j] - D[i]) * scale;
                            }
                        }
                        // dq_i += sum_j dS[i][j] k_j
                        memset(dqs, 0, (size_t)nq * hsp * sizeof(float));
                        small_matmul(nq, hsp, nk, ds, nkp, 1, kr, hsp, dqs, hsp);
                        for (int i = 0; i < nq; i++) {
                            float* dq = dseq + (size_t)(t0 + i) * QW;
                            const float* src = dqs + (size_t)i * hsp;
                            for (int d = 0; d < hs; d++) dq[d] += src[d];
                        }
                        // dk_j += sum_i dS[i][j] q_i and dv_j += sum_i p[i][j] dout_i
                        small_matmul(nk, hsp, nq, ds, 1, nkp, qr, hsp, dk, hsp);
                        small_matmul(nk, hsp, nq, p, 1, nkp, dor, hsp, dv, hsp);
                    }
                }
                // The tile's key and value gradients go back into dqkv (accumulating).
                for (int j = 0; j < nk; j++) {
                    float* dkr = dkseq + (size_t)(j0 + j) * QW;
                    float* dvr = dkr + (size_t)KVH * hs;
                    const float* dks = dk + (size_t)j * hsp;
                    const float* dvs = dv + (size_t)j * hsp;
                    for (int d = 0; d < hs; d++) {
                        dkr[d] += dks[d];
                        dvr[d] += dvs[d];
                    }
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// GELU (tanh approximation), residual

// 0.5 * (1 + tanh(u)) == sigmoid(2u). Evaluating the sigmoid from e = exp(-2|u|) <= 1
// never overflows and has no cancellation for large negative x, where 1 + tanh(u) would
// lose all its digits. Also returns sigmoid(2u) * (1 - sigmoid(2u)) = e / (1 + e)^2.
static inline float gelu_sigmoid(float u, float* restrict dsig) {
    const float e = fast_expf(-2.0f * fabsf(u));
    const float inv = 1.0f / (1.0f + e);
    if (dsig) *dsig = e * inv * inv;
    return select_f(u >= 0.0f, 1.0f, e) * inv;
}

void gelu_forward(float* out, const float* inp, size_t n) {
    // out may alias inp: each element is read before it is written.
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x);
        out[i] = x * gelu_sigmoid(u, NULL);
    }
}

void gelu_backward(float* restrict dinp, const float* restrict inp, const float* restrict dout,
                   size_t n) {
    // d/dx [x * sigmoid(2u)] = sigmoid(2u) + x * 2 sigmoid'(2u) * du/dx; identical to
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx.
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x);
        const float du = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        float dsig;
        const float sig = gelu_sigmoid(u, &dsig);
        dinp[i] += (sig + 2.0f * x * dsig * du) * dout[i];
    }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
    // out may alias a or b (in-place residual add).
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ----------------------------------------------------------------------------
// Fused softmax + cross-entropy

void crossentropy_softmax_fused(float* restrict logits, float* restrict losses,
                                const int* restrict targets, int N, int V, int Vp, float dloss) {
    const int write_grad = dloss != 0.0f;
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float* row = logits + (size_t)i * Vp;
        const int target = targets[i];
        float mx = -INFINITY;
        #pragma omp simd reduction(max:mx)
        for (int j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        const float target_logit = row[target];
        float sum = 0.0f;
        if (write_grad) {
            // The row is about to be overwritten anyway: keep exp(x - max) in it so the
            // gradient pass needs no second exp.
            #pragma omp simd reduction(+:sum)
            for (int j = 0; j < V; j++) {
                const float e = fast_expf(row[j] - mx);
                row[j] = e;
                sum += e;
            }
        } else {
            #pragma omp simd reduction(+:sum)
            for (int j = 0; j < V; j++) sum += fast_expf(row[j] - mx);
        }
        // loss = logsumexp(row) - row[target] = log(sum) + (max - row[target]); both
        // terms are >= 0, so nothing cancels.
        losses[i] = logf(sum) + (mx - target_logit);
        if (write_grad) {
            const float k = dloss / sum;  // softmax * dloss = exp(x - max) * dloss / sum
            for (int j = 0; j < V; j++) row[j] *= k;
            row[target] -= dloss;
            for (int j = V; j < Vp; j++) row[j] = 0.0f;
        }
    }
}

// The vocab-parallel phases. Each does what crossentropy_softmax_fused does to its columns,
// with the same operations in the same order where the row is not split (the max, the sum of
// fast_expf over the real columns, log(sum) + (max - target logit), exp * (dloss / sum)), so
// that with one rank holding the whole row the results are bitwise the fused kernel's.

void crossentropy_tp_max(float* restrict row_max, const float* restrict logits, int N, int V_local, int Vp_local) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float* row = logits + (size_t)i * Vp_local;
        float mx = -INFINITY;
        #pragma omp simd reduction(max:mx)
        for (int j = 0; j < V_local; j++) mx = row[j] > mx ? row[j] : mx;
        row_max[i] = mx;
    }
}

// The column of the target in this rank's range, or -1 where another rank holds it.
static inline int local_target(int target, int vocab_begin, int V_local) {
    return target >= vocab_begin && target - vocab_begin < V_local ? target - vocab_begin : -1;
}

void crossentropy_tp_sums(float* restrict sums, const float* restrict logits, const float* restrict row_max,
                          const int* restrict targets, int N, int V_local, int Vp_local, int vocab_begin) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float* row = logits + (size_t)i * Vp_local;
        const float mx = row_max[i];
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int j = 0; j < V_local; j++) sum += fast_expf(row[j] - mx);
        const int t = local_target(targets[i], vocab_begin, V_local);
        sums[2 * (size_t)i] = sum;
        sums[2 * (size_t)i + 1] = t >= 0 ? row[t] : 0.0f;
    }
}

void crossentropy_tp_finish(float* restrict logits, float* restrict losses, const float* restrict row_max,
                            const float* restrict sums, const int* restrict targets, int N, int V_local, int Vp_local,
                            int vocab_begin, float dloss) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float mx = row_max[i], sum = sums[2 * (size_t)i];
        losses[i] = logf(sum) + (mx - sums[2 * (size_t)i + 1]);
        if (dloss == 0.0f) continue;
        float* row = logits + (size_t)i * Vp_local;
        const float k = dloss / sum;
        for (int j = 0; j < V_local; j++) row[j] = fast_expf(row[j] - mx) * k;
        const int t = local_target(targets[i], vocab_begin, V_local);
        if (t >= 0) row[t] -= dloss;
        for (int j = V_local; j < Vp_local; j++) row[j] = 0.0f;
    }
}

// ----------------------------------------------------------------------------
// Optimizer support

void adamw_update(float* restrict param, float* restrict m, float* restrict v,
                  const float* restrict grad, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t, float grad_scale) {
    // Bias corrections are computed once in double (pow of a float near 1 to a large t
    // loses digits in float) and rounded to float; everything per element is float.
    // Note: GCC only vectorises this loop with -fno-math-errno (sqrtf otherwise keeps a
    // scalar errno path); it is then ~5x faster, with bitwise identical results.
    const float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    const float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = grad[i] * grad_scale;
        const float mi = beta1 * m[i] + omb1 * g;
        const float vi = beta2 * v[i] + omb2 * g * g;
        const float mhat = mi / bc1;
        const float vhat = vi / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
        m[i] = mi;
        v[i] = vi;
    }
}

double sum_squares(const float* restrict x, size_t n) {
    // A fixed number of chunks whose boundaries depend only on n; partial sums are added
    // in chunk order, so the result does not even depend on the thread count.
    double partial[SUMSQ_CHUNKS];
    const size_t chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < SUMSQ_CHUNKS; c++) {
        const size_t lo = (size_t)c * chunk < n ? (size_t)c * chunk : n;
        const size_t hi = lo + chunk < n ? lo + chunk : n;
        double s = 0.0;
        #pragma omp simd reduction(+:s)
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];  // exact products
        partial[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < SUMSQ_CHUNKS; c++) total += partial[c];
    return total;
}
