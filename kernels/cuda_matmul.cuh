// Matmuls through cuBLASLt: BF16 inputs, FP32 accumulation (CUBLAS_COMPUTE_32F, fp32
// alpha/beta), BF16 (or FP32) outputs, with the bias / GELU epilogues of GPT-2's linear
// layers. The CPU twins are matmul_forward / matmul_backward in kernels/cpu_kernels.h.
//
// Everything is row-major, like the CPU twin:
//   forward   out[N,OC]     = inp[N,C] @ weight[OC,C]^T (+ bias[OC])      OVERWRITES out
//             optional GELU: out = gelu(pre), pre = inp @ W^T + bias stored in pre_gelu[N,OC]
//   backward  dinp[N,C]     = dout[N,OC] @ weight[OC,C]       accumulate=0: overwrite
//                                                             accumulate=1: += (beta = 1)
//             optional DGELU: dinp = gelu'(pre_gelu[N,C]) * (dout @ weight)   (overwrite only)
//             dweight[OC,C] = dout^T @ inp                    accumulate=1: += (beta = 1),
//                                                             how gradient accumulation works
//             (the bias gradient in this GEMM's BGRADB epilogue: kernels/cuda_bias.cuh)
//   The CPU twin always accumulates into dinp and dweight; here the caller chooses.
//
// The row-major -> column-major mapping is done in exactly one place, mm_plan_layouts()
// below; every public function goes through matmul_gemm_cuda().
//
// The context (MatmulContext) owns the cuBLASLt handle, ONE workspace of
// MATMUL_WORKSPACE_BYTES allocated at init, and a fixed table of MATMUL_PLAN_CACHE plans
// (descriptor + layouts + the algorithm in use) keyed by everything the heuristic depends on
// (shapes, leading dimensions, transposes, types, epilogue, pointer alignments; not alpha or
// beta). A training step issues the same few dozen shapes every layer, so after the first
// step no heuristic query is made. When the table is full, further shapes are planned per
// call (never tuned) and their descriptors destroyed right after the (asynchronous) launch:
// always correct, never an unbounded allocation. The cache is host state: a context is used
// by one host thread, and, because of the shared workspace, by one stream at a time (or
// streams ordered with events).
//
// Algorithm choice (matmul_set_autotune, MatmulTuneMode). A new shape asks the heuristic
// for up to MATMUL_MAX_CANDIDATES algorithms (one query per shape: heuristic_queries).
//   - Candidates that fail at run time (cublasLtMatmul returns an error: nothing ran) are
//     skipped, never fatal (failed_candidates); only when every one fails is the shape "not
//     runnable" (a GELU epilogue then falls back to the kernels, see below; a plain GEMM
//     exits naming the problem, as when the heuristic finds nothing).
//   - MATMUL_TUNE_OFF: the first candidate that runs is kept: the heuristic's first, as
//     cuBLASLt would pick with one result requested.
//   - MATMUL_TUNE_EXACT (the default on a GPU): the first call of the shape times every
//     candidate (below) and keeps the fastest among those whose output is BITWISE EQUAL to
//     the heuristic's first's on that call's operands. Why: algorithms differ in how they
//     split and order the K reduction (split-K, stream-K, another MMA shape), which changes
//     the last bits, and timings are noisy, so "the fastest" can differ from run to run; a
//     run must repeat bit for bit on one machine (the determinism tests compare losses
//     bitwise). Among algorithms that give the heuristic's first's bits (same reduction
//     order: other tile shapes, stages, swizzles, cluster shapes), any choice gives the same
//     results, so timing noise can change the speed but never the numbers, and a run trains
//     exactly as MATMUL_TUNE_OFF does (and every rank computes what it would untuned). The
//     equality is checked on one call's real operands (a 64-bit hash of every output bit),
//     not proven for all inputs: an algorithm with another reduction order that agreed on
//     all of the thousands to millions of outputs of real activations is not a practical
//     case. What this leaves on the table: faster algorithms with another reduction order.
//   - MATMUL_TUNE_FASTEST: the fastest of all candidates. Bits may differ from
//     MATMUL_TUNE_OFF, between GPUs, and between runs (timing noise): for benchmarking, not
//     for runs that must repeat.
//   In both timed modes a candidate replaces the heuristic's first only when it is
//   MATMUL_TUNE_MARGIN faster (a noise-level gain is not worth a change). Under the CPU
//   emulator (FSDP_CUBLASLT_EMULATED, defined by dev/cuda_emu/include/cublasLt.h) timings
//   mean nothing, so the default there is MATMUL_TUNE_OFF; the emulator's tests turn tuning
//   on explicitly to check its logic (its fake cuBLASLt can return failing, slow and
//   other-bits candidates: EMU_CUBLASLT_ALGOS in dev/cuda_emu/cublaslt.cpp).
//
// How a candidate is timed without touching the real call's results: every candidate runs
// twice untimed (each output hashed on the device: a candidate whose two outputs differ,
// e.g. one that reduces with atomics, is never chosen, in either timed mode), then
// MATMUL_TUNE_REPS times between cudaEvents, on the caller's stream (the real operands: the
// same memory traffic as the real call); the host waits once per shape (ctx->host_wait when
// set: the caller's deadline-aware wait), reads the events (the fastest repetition counts)
// and the hashes; THEN the real call runs once with the chosen algorithm, on the real
// operands, like any later call. Where the candidates write:
//   - beta == 0 and D overlaps no input (every call train_gpt makes with beta 0): into the
//     real D (and the real aux for GELU_AUX). The real call, issued after them on the same
//     stream, overwrites all of it, reading only inputs the candidates did not write, so
//     what remains is exactly the real call's result. No extra memory.
//   - beta != 0 (accumulation: D = AB + D, e.g. every weight gradient) or D overlapping an
//     input: running candidates on the real D would add AB to it several times. They run on
//     a scratch copy instead: a transient cudaMalloc of D's extent (at the same alignment
//     modulo 256 as the real D, which the algorithm was chosen for), refilled from the real D
//     before each untimed run so that every hash is of the same computation,
//     freed after the shape's wait. The real D is only read. If the scratch cannot be
//     allocated, the shape is not tuned (untuned_shapes) and keeps the heuristic's first.
//     The aux of GELU_AUX (never a C input: always fully overwritten) goes to the real aux.
// Tuning costs one host wait per new shape and, on the scratch path, a cudaMalloc/cudaFree
// (which synchronises the device): in the first step only. matmul_autotune_report() prints
// one summary line ("matmul: tuned 14 shapes ...") when tuning ran (never under the emulator,
// where it is off, unless a test turns it on); matmul_context_destroy() calls it, and
// ctx->tune_report = 0 silences it (all ranks but one).
//
// Pointers: any alignment works (the heuristic is told the actual alignment of every
// pointer, capped at 256 bytes); 16-byte aligned pointers and leading dimensions that are
// multiples of 8 elements get the fast kernels. Epilogue aux buffers (pre-GELU) must be
// 16-byte aligned with a leading dimension that is a multiple of 8 (cuBLASLt's rule).
// cuBLASLt's GELU epilogues are expected to be the tanh approximation used by GPT-2 (the
// CPU twin's gelu_forward / gelu_backward); dev/test/test_attention_cuda.cu checks this on
// the GPU, including a test that tells the tanh form from the erf form.
//
// GELU fusion is a choice and has a fallback. matmul_set_gelu_fusion() picks it like llm.c's
// -ge: 0 = the matmul and the GELU kernels of cuda_activation.cuh run separately, 1 = fuse the
// forward (GELU_AUX epilogue), 2 = fuse the forward and the backward (DGELU epilogue; the
// default). When the heuristic has no algorithm for a fused epilogue, the context says so
// once on stderr, turns that fusion off, and runs the separate form from then on: a run
// never stops for want of an epilogue. Unfused, the pre-GELU values are rounded to 16 bits
// before the GELU (fused, it is applied to the fp32 accumulator), so the two differ in the
// last bits; each stays within the tests' tolerance of the CPU twin.
#ifndef FSDP_KERNELS_CUDA_MATMUL_CUH
#define FSDP_KERNELS_CUDA_MATMUL_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_activation.cuh"  // the GELU kernels of the unfused form

#define MATMUL_WORKSPACE_BYTES ((size_t)32 << 20)  // 32 MiB: plenty on Ampere/Hopper
#define MATMUL_PLAN_CACHE 64                         // distinct GEMM shapes kept planned
#define MATMUL_MAX_CANDIDATES 8                      // algorithms asked of the heuristic per shape
#define MATMUL_TUNE_REPS 3                           // timed runs per candidate (after an untimed one)
#define MATMUL_TUNE_MARGIN 0.02                      // how much faster than the heuristic's first to switch

// How a new shape's algorithm is chosen (see the top).
typedef enum {
    MATMUL_TUNE_OFF = 0,      // the first candidate that runs: the heuristic's first
    MATMUL_TUNE_EXACT = 1,    // the fastest with the heuristic's first's bits (repeatable)
    MATMUL_TUNE_FASTEST = 2,  // the fastest (bits may change between runs)
} MatmulTuneMode;
#ifdef FSDP_CUBLASLT_EMULATED  // the CPU emulator's fake cuBLASLt: no meaningful timings
#define MATMUL_TUNE_DEFAULT MATMUL_TUNE_OFF
#else
#define MATMUL_TUNE_DEFAULT MATMUL_TUNE_EXACT
#endif

// Any cuBLAS(Lt) call: on failure one line with the status name, file:line and the call.
#define CUBLASLT_CHECK(call)                                                              \
    do {                                                                                  \
        cublasStatus_t cublaslt_check_st_ = (call);                                       \
        if (cublaslt_check_st_ != CUBLAS_STATUS_SUCCESS) {                                \
            fprintf(stderr, "cuBLASLt error at %s:%d: %s (%s)\n", __FILE__, __LINE__,     \
                    cublasLtGetStatusName(cublaslt_check_st_), #call);                    \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

typedef enum {
    MATMUL_EPI_NONE = 0,       // D = alpha op(A) op(B) + beta D
    MATMUL_EPI_BIAS,           // + bias[N] (one per output column of the row-major D)
    MATMUL_EPI_GELU_AUX,       // D = gelu(AB); aux = AB (pre-GELU)
    MATMUL_EPI_GELU_AUX_BIAS,  // D = gelu(AB + bias); aux = AB + bias
    MATMUL_EPI_DGELU,          // D = gelu'(aux) * AB   (aux: the forward's pre-GELU; beta 0)
    MATMUL_EPI_BGRAD,          // D as NONE; bias[M] = sum over K of op(A) (WRITTEN, D's type)
} MatmulEpilogue;

// One row-major GEMM (possibly strided-batched):
//   D[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * D      for each of `batch` matrices
// A is stored [M,K] (lda >= K), or [K,M] (lda >= M) when transA; B is stored [K,N]
// (ldb >= N), or [N,K] (ldb >= K) when transB; D is [M,N] with ldd >= N. Strides are in
// elements between consecutive matrices of the batch. A, B are 16-bit of type ab_type
// (CUDA_R_16BF or CUDA_R_16F: the run's --param-dtype); D is that type or fp32 (d_type
// CUDA_R_32F). C is D itself (in place when beta != 0).
// Epilogues (batch must be 1): bias is ab_type [N] (an input), or for BGRAD d_type [M] (an
// output: the rows of op(A) summed); aux is ab_type [M,N] row-major with ld ldaux.
typedef struct {
    int M, N, K;
    cudaDataType_t ab_type;
    const void* A; int lda; int transA; long long strideA;
    const void* B; int ldb; int transB; long long strideB;
    void* D; int ldd; cudaDataType_t d_type; long long strideD;
    int batch;
    float alpha, beta;
    MatmulEpilogue epilogue;
    const void* bias;
    void* aux; int ldaux;
} MatmulGemm;

// The cuBLASLt type of a 16-bit storage type.
static inline cudaDataType_t mm_type_of(const bf16*) { return CUDA_R_16BF; }
static inline cudaDataType_t mm_type_of(const fp16*) { return CUDA_R_16F; }
static inline const char* mm_type_name(cudaDataType_t t) {
    return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "fp16" : "another type";
}

// Everything the heuristic's choice depends on. Compared with memcmp: always memset first.
typedef struct {
    int64_t M, N, K, lda, ldb, ldd, transA, transB, strideA, strideB, strideD, batch;
    int64_t ab_type, d_type, epilogue, ldaux;
    int64_t alignA, alignB, alignD, alignBias, alignAux;
} MatmulKey;

typedef struct {
    MatmulKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layoutA, layoutB, layoutD;  // cuBLAS's A, B, D (see mm_plan_layouts)
    cublasLtMatmulAlgo_t algo;   // the algorithm in use
    int ncandidates;             // usable algorithms the heuristic returned
    int chosen;                  // which of them is in use (0: the heuristic's first)
    int tuned;                   // 1: chosen by timing (then the times below are set)
    float first_ms, best_ms;     // per run: the heuristic's first (that ran), the chosen one
} MatmulPlan;

#define MM_HASH_THREADS 256
#define MM_HASH_MAX_BLOCKS 256
#define MM_HASH_SLOTS (4 * MM_HASH_MAX_BLOCKS)  // per candidate: D's and aux's partial hashes, twice

typedef struct {
    cublasLtHandle_t handle;
    void* workspace;        // MATMUL_WORKSPACE_BYTES of device memory
    size_t workspace_bytes;
    MatmulPlan plans[MATMUL_PLAN_CACHE];
    int nplans;
    long long heuristic_queries;  // how many times the heuristic ran (for tests / logging)
    int fuse_gelu_forward;   // GELU_AUX(_BIAS) epilogue in matmul_forward_cuda
    int fuse_gelu_backward;  // DGELU epilogue in matmul_backward_dinp_cuda
    // Algorithm choice (see the top)
    int autotune;            // MatmulTuneMode
    int tune_report;         // 1 (default): matmul_autotune_report prints; 0 on the ranks that stay quiet
    // The host wait of the tuning (once per new shape); NULL: cudaStreamSynchronize.
    void (*host_wait)(void* ctx, cudaStream_t s, const char* what);
    void* host_wait_ctx;
    long long tuned_shapes;          // shapes whose candidates were timed
    long long untuned_shapes;        // shapes a timed mode could not tune (no scratch memory)
    long long timed_candidates;      // candidates timed, over all tuned shapes
    long long other_bits_candidates; // timed candidates whose output differed from the first's
    long long unrepeatable_candidates;  // timed candidates whose two untimed runs differed
    long long failed_candidates;     // candidates whose cublasLtMatmul returned an error
    double tune_ratio_min, tune_ratio_max;  // per tuned shape: first's time / chosen's time
    double tune_first_ms, tune_best_ms;     // sums over the tuned shapes (one run of each)
    long long reported_shapes;       // tuned_shapes at the last matmul_autotune_report
    // Shapes cuBLASLt cannot run (matmul_gemm_try_cuda's 0): asked once, then refused at once.
    MatmulKey refused[MATMUL_PLAN_CACHE];
    int nrefused;
    long long bgrad_refused;         // BGRAD shapes refused (their bias gradients: the kernels)
    // Tuning's resources, made at the first tuning: events, the hashes' partial sums
    // (device, and pinned host memory they are copied to).
    int tune_ready;
    cudaEvent_t tune_ev[MATMUL_MAX_CANDIDATES][MATMUL_TUNE_REPS + 1];
    unsigned long long* tune_hash_dev;   // [MATMUL_MAX_CANDIDATES][MM_HASH_SLOTS]
    unsigned long long* tune_hash_host;  // the same, pinned
} MatmulContext;

// ----------------------------------------------------------------------------
// Context

// Creates the handle and the one workspace on the current device. ctx is plain host memory.
static inline void matmul_context_init(MatmulContext* ctx) {
    memset(ctx, 0, sizeof(*ctx));
    CUBLASLT_CHECK(cublasLtCreate(&ctx->handle));
    ctx->workspace_bytes = MATMUL_WORKSPACE_BYTES;
    CUDA_CHECK(cudaMalloc(&ctx->workspace, ctx->workspace_bytes));
    ctx->fuse_gelu_forward = ctx->fuse_gelu_backward = 1;
    ctx->autotune = MATMUL_TUNE_DEFAULT;
    ctx->tune_report = 1;
}

// 0: no GELU epilogue, 1: the forward's, 2: the forward's and the backward's (see the top).
static inline void matmul_set_gelu_fusion(MatmulContext* ctx, int level) {
    CUDA_REQUIRE(level >= 0 && level <= 2, "matmul: GELU fusion level %d (expected 0, 1 or 2)", level);
    ctx->fuse_gelu_forward = level >= 1;
    ctx->fuse_gelu_backward = level >= 2;
}

// mode: a MatmulTuneMode, or -1 for the build's default (MATMUL_TUNE_DEFAULT: exact on a GPU,
// off under the emulator). Applies to shapes planned from now on.
static inline void matmul_set_autotune(MatmulContext* ctx, int mode) {
    CUDA_REQUIRE(mode >= -1 && mode <= 2, "matmul: autotune mode %d (expected 0, 1 or 2)", mode);
    ctx->autotune = mode < 0 ? MATMUL_TUNE_DEFAULT : mode;
}

static inline const char* matmul_autotune_name(int mode) {
    return mode == MATMUL_TUNE_OFF ? "off" : mode == MATMUL_TUNE_EXACT ? "exact" : "fastest";
}

// The summary of the tuning so far in buf; 0 (and buf "") when no shape was tuned.
static inline int matmul_autotune_summary(const MatmulContext* ctx, char* buf, size_t n) {
    if (n) buf[0] = '\0';
    if (ctx->tuned_shapes == 0) return 0;
    snprintf(buf, n,
             "matmul: tuned %lld shapes, mode %s (best vs heuristic's first: %.2fx-%.2fx per shape, %.2fx "
             "in total; %lld candidates timed, %lld with other bits, %lld not repeatable, %lld failed%s)",
             ctx->tuned_shapes, matmul_autotune_name(ctx->autotune), ctx->tune_ratio_min, ctx->tune_ratio_max,
             ctx->tune_best_ms > 0 ? ctx->tune_first_ms / ctx->tune_best_ms : 1.0, ctx->timed_candidates,
             ctx->other_bits_candidates, ctx->unrepeatable_candidates, ctx->failed_candidates,
             ctx->untuned_shapes ? "; some shapes untuned: no scratch memory" : "");
    const size_t len = strlen(buf);
    if (ctx->bgrad_refused) snprintf(buf + len, n > len ? n - len : 0, "; bias gradient epilogue refused for %lld "
                                     "shapes (the reduction kernels there)", ctx->bgrad_refused);
    return 1;
}

// Prints the summary line (stdout) if shapes were tuned since the last report and
// ctx->tune_report. The caller may call it after the first step; the context's destroy does.
static inline void matmul_autotune_report(MatmulContext* ctx) {
    if (ctx->tuned_shapes == ctx->reported_shapes) return;
    ctx->reported_shapes = ctx->tuned_shapes;
    char line[512];
    if (ctx->tune_report && matmul_autotune_summary(ctx, line, sizeof(line))) {
        printf("%s\n", line);
        fflush(stdout);
    }
}

static inline void mm_plan_destroy(MatmulPlan* p) {
    CUBLASLT_CHECK(cublasLtMatrixLayoutDestroy(p->layoutA));
    CUBLASLT_CHECK(cublasLtMatrixLayoutDestroy(p->layoutB));
    CUBLASLT_CHECK(cublasLtMatrixLayoutDestroy(p->layoutD));
    CUBLASLT_CHECK(cublasLtMatmulDescDestroy(p->desc));
}

// Call when no matmul issued through ctx is still running (e.g. after a stream sync).
static inline void matmul_context_destroy(MatmulContext* ctx) {
    matmul_autotune_report(ctx);
    for (int i = 0; i < ctx->nplans; i++) mm_plan_destroy(&ctx->plans[i]);
    if (ctx->tune_ready) {
        for (int c = 0; c < MATMUL_MAX_CANDIDATES; c++)
            for (int r = 0; r <= MATMUL_TUNE_REPS; r++) CUDA_CHECK(cudaEventDestroy(ctx->tune_ev[c][r]));
        CUDA_CHECK(cudaFree(ctx->tune_hash_dev));
        CUDA_CHECK(cudaFreeHost(ctx->tune_hash_host));
    }
    if (ctx->workspace) CUDA_CHECK(cudaFree(ctx->workspace));
    if (ctx->handle) CUBLASLT_CHECK(cublasLtDestroy(ctx->handle));
    memset(ctx, 0, sizeof(*ctx));
}

// ----------------------------------------------------------------------------
// Planning

// Largest power of two <= 256 dividing the address (256 for NULL: an absent pointer
// constrains nothing).
static inline int64_t mm_alignment(const void* p) {
    const uintptr_t a = (uintptr_t)p;
    int64_t al = 256;
    while (al > 1 && (a % (uintptr_t)al) != 0) al >>= 1;
    return al;
}

static inline cublasLtEpilogue_t mm_cublas_epilogue(MatmulEpilogue e) {
    switch (e) {
        case MATMUL_EPI_NONE: return CUBLASLT_EPILOGUE_DEFAULT;
        case MATMUL_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
        case MATMUL_EPI_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX;
        case MATMUL_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        case MATMUL_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
        case MATMUL_EPI_BGRAD: return CUBLASLT_EPILOGUE_BGRADB;  // cuBLAS's B is our A (mm_plan_layouts)
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

static inline const char* mm_epilogue_name(MatmulEpilogue e) {
    switch (e) {
        case MATMUL_EPI_NONE: return "none";
        case MATMUL_EPI_BIAS: return "bias";
        case MATMUL_EPI_GELU_AUX: return "gelu_aux";
        case MATMUL_EPI_GELU_AUX_BIAS: return "gelu_aux_bias";
        case MATMUL_EPI_DGELU: return "dgelu";
        case MATMUL_EPI_BGRAD: return "bgradb";
    }
    return "?";
}

static inline void mm_make_key(MatmulKey* k, const MatmulGemm* g) {
    memset(k, 0, sizeof(*k));
    k->M = g->M; k->N = g->N; k->K = g->K;
    k->lda = g->lda; k->ldb = g->ldb; k->ldd = g->ldd;
    k->transA = g->transA != 0; k->transB = g->transB != 0;
    k->batch = g->batch;
    if (g->batch > 1) { k->strideA = g->strideA; k->strideB = g->strideB; k->strideD = g->strideD; }
    k->ab_type = (int64_t)g->ab_type;
    k->d_type = (int64_t)g->d_type;
    k->epilogue = (int64_t)g->epilogue;
    k->ldaux = g->aux ? g->ldaux : 0;
    k->alignA = mm_alignment(g->A); k->alignB = mm_alignment(g->B); k->alignD = mm_alignment(g->D);
    k->alignBias = mm_alignment(g->bias); k->alignAux = mm_alignment(g->aux);
}

// THE row-major -> column-major mapping (the only place it is done).
//
// cuBLAS is column-major. A row-major matrix X[r,c] with leading dimension ld is, read
// column-major, the matrix X^T (c rows, r columns) with the same ld. So the row-major
//     D[M,N] = op(A)[M,K] @ op(B)[K,N]
// is computed as the column-major
//     D^T (N x M) = op(B)^T (N x K) @ op(A)^T (K x M)
// i.e. cuBLAS's first operand is our B, its second is our A, and m = N, n = M, k = K.
// - Our B stored [K,N] (not transposed) reads column-major as an N x K matrix = op(B)^T
//   already: cuBLAS op N, stored dims N x K. Stored [N,K] (transB) reads as K x N: op T.
// - Our A stored [M,K] reads column-major as K x M = op(A)^T: op N, stored dims K x M.
//   Stored [K,M] (transA) reads as M x K: op T.
// - D [M,N] reads as N x M, ld = ldd. The bias epilogue adds a vector over cuBLAS's rows
//   (m = N): one bias per output feature of the row-major D, as wanted. The aux matrix has
//   D's shape: column-major N x M with ld ldaux. BGRADB sums cuBLAS's B (our op(A)^T) over
//   k, one value per column of cuBLAS's D = per row of ours: bias[i] = sum_k op(A)[i,k].
// Worked example, the forward out[Nr,OC] = inp[Nr,C] @ W[OC,C]^T: A = inp, B = W with
// transB; cuBLAS computes out^T (OC x Nr) = (W, op T, stored C x OC) @ (inp, op N, stored
// C x Nr), m = OC, n = Nr, k = C -- exactly the mapping in ../shared/CUDA_NOTES.md.
static inline void mm_plan_layouts(MatmulPlan* p, const MatmulGemm* g) {
    const cublasOperation_t opA = g->transB ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS A = our B
    const cublasOperation_t opB = g->transA ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS B = our A
    const uint64_t a_rows = g->transB ? (uint64_t)g->K : (uint64_t)g->N;
    const uint64_t a_cols = g->transB ? (uint64_t)g->N : (uint64_t)g->K;
    const uint64_t b_rows = g->transA ? (uint64_t)g->M : (uint64_t)g->K;
    const uint64_t b_cols = g->transA ? (uint64_t)g->K : (uint64_t)g->M;
    CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
    CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->layoutA, g->ab_type, a_rows, a_cols, (int64_t)g->ldb));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->layoutB, g->ab_type, b_rows, b_cols, (int64_t)g->lda));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->layoutD, g->d_type, (uint64_t)g->N, (uint64_t)g->M, (int64_t)g->ldd));
    if (g->batch > 1) {
        const int32_t count = g->batch;
        const int64_t sA = g->strideB, sB = g->strideA, sD = g->strideD;  // swapped like A, B
        CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(p->layoutA, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(p->layoutB, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(p->layoutD, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(p->layoutA, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sA, sizeof(sA)));
        CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(p->layoutB, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sB, sizeof(sB)));
        CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(p->layoutD, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sD, sizeof(sD)));
    }
    const cublasLtEpilogue_t epi = mm_cublas_epilogue(g->epilogue);
    CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    // (BGRAD: unset = the output's type, the only one cuBLASLt documents for a gradient.)
    if (g->epilogue == MATMUL_EPI_BIAS || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS) {
        const int32_t bias_type = g->ab_type;
        CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    if (g->epilogue == MATMUL_EPI_GELU_AUX || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS ||
        g->epilogue == MATMUL_EPI_DGELU) {
        const int64_t ldaux = g->ldaux;
        CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof(ldaux)));
    }
}

// The bias / aux pointers live in the descriptor; the heuristic reads their alignment, and
// each call sets the current ones (host-side attribute writes, no device work).
static inline void mm_set_pointers(MatmulPlan* p, const MatmulGemm* g) {
    if (g->epilogue == MATMUL_EPI_BIAS || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS || g->epilogue == MATMUL_EPI_BGRAD) {
        const void* bias = g->bias;
        CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (g->epilogue == MATMUL_EPI_GELU_AUX || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS ||
        g->epilogue == MATMUL_EPI_DGELU) {
        void* aux = g->aux;
        CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    }
}

static inline void mm_describe(char* buf, size_t n, const MatmulGemm* g) {
    snprintf(buf, n,
             "D[%d,%d] (%s, ldd %d) = op(A)[%d,%d] (%s, lda %d%s) @ op(B)[%d,%d] (ldb %d%s), batch %d, "
             "epilogue %s, beta %g, alignment A/B/D %lld/%lld/%lld bytes",
             g->M, g->N, mm_type_name(g->d_type), g->ldd, g->M, g->K, mm_type_name(g->ab_type), g->lda,
             g->transA ? ", transposed" : "", g->K, g->N, g->ldb, g->transB ? ", transposed" : "",
             g->batch, mm_epilogue_name(g->epilogue), (double)g->beta,
             (long long)mm_alignment(g->A), (long long)mm_alignment(g->B),
             (long long)mm_alignment(g->D));
}

// Fills p (descriptor, layouts) and cand[0..n) with the heuristic's usable algorithms, best
// first; returns n (at most MATMUL_MAX_CANDIDATES). 0: the heuristic has no algorithm for
// this problem (p is then released).
static inline int mm_plan_create(MatmulContext* ctx, MatmulPlan* p, const MatmulGemm* g,
                                 cublasLtMatmulAlgo_t* cand) {
    mm_make_key(&p->key, g);
    mm_plan_layouts(p, g);
    mm_set_pointers(p, g);
    cublasLtMatmulPreference_t pref;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ctx->workspace_bytes;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // cuBLAS's A is our B and vice versa; C is D.
    const uint32_t al_a = (uint32_t)p->key.alignB, al_b = (uint32_t)p->key.alignA, al_d = (uint32_t)p->key.alignD;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
    CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
    cublasLtMatmulHeuristicResult_t results[MATMUL_MAX_CANDIDATES];
    memset(results, 0, sizeof(results));
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, p->desc, p->layoutA, p->layoutB, p->layoutD,
                                                             p->layoutD, pref, MATMUL_MAX_CANDIDATES, results, &returned);
    ctx->heuristic_queries++;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    int n = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
        for (int i = 0; i < returned && i < MATMUL_MAX_CANDIDATES; i++)
            if (results[i].state == CUBLAS_STATUS_SUCCESS) cand[n++] = results[i].algo;
    }
    if (n == 0) mm_plan_destroy(p);
    p->ncandidates = n;
    p->chosen = 0;
    p->tuned = 0;
    p->first_ms = p->best_ms = 0.0f;
    return n;
}

// One cuBLASLt call of plan p's problem with algorithm algo; D (C too) may be another buffer
// than g->D of the same layout (the tuning's scratch).
static inline cublasStatus_t mm_launch(MatmulContext* ctx, const MatmulPlan* p, const MatmulGemm* g, void* D,
                                       const cublasLtMatmulAlgo_t* algo, cudaStream_t stream) {
    const float alpha = g->alpha, beta = g->beta;
    return cublasLtMatmul(ctx->handle, p->desc, &alpha, g->B, p->layoutA, g->A, p->layoutB, &beta, D, p->layoutD, D,
                          p->layoutD, algo, ctx->workspace, ctx->workspace_bytes, stream);
}

// ----------------------------------------------------------------------------
// Tuning (see the top): time the candidates of a new shape, keep the fastest allowed

// Bytes spanned by a row-major [rows, cols] matrix with leading dimension ld (elements of
// `elem` bytes), times a strided batch.
static inline size_t mm_extent_bytes(int64_t rows, int64_t cols, int64_t ld, int batch, long long stride, size_t elem) {
    return (size_t)((rows - 1) * ld + cols + (int64_t)(batch - 1) * stride) * elem;
}
static inline int mm_overlap(const void* a, size_t na, const void* b, size_t nb) {
    if (!a || !b || !na || !nb) return 0;
    const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a0 < b0 + nb && b0 < a0 + na;
}

// Per-block partial hashes of n 16-bit words: the sum (mod 2^64) of a mix of every word with
// its index, so the result depends on every bit and position but not on the order of the
// sum (the host adds the partials). Grid-stride, no atomics.
static __global__ void __launch_bounds__(MM_HASH_THREADS)
mm_hash_kernel(unsigned long long* __restrict__ partial, const uint16_t* __restrict__ x, size_t n,
               unsigned long long salt) {
    __shared__ unsigned long long mm_hash_buf[MM_HASH_THREADS];
    unsigned long long h = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        h += splitmix64_mix(salt + ((unsigned long long)i << 16) + x[i]);
    mm_hash_buf[threadIdx.x] = h;
    __syncthreads();
    for (int w = MM_HASH_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) mm_hash_buf[threadIdx.x] += mm_hash_buf[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = mm_hash_buf[0];
}
static inline int mm_hash_blocks(size_t words) {
    const size_t b = ceil_div(words, (size_t)MM_HASH_THREADS * 16);
    return b < 1 ? 1 : b > MM_HASH_MAX_BLOCKS ? MM_HASH_MAX_BLOCKS : (int)b;
}
static inline void mm_hash_launch(unsigned long long* partial, const void* p, size_t bytes, unsigned long long salt,
                                  cudaStream_t stream) {
    const size_t words = bytes / 2;
    mm_hash_kernel<<<mm_hash_blocks(words), MM_HASH_THREADS, 0, stream>>>(partial, (const uint16_t*)p, words, salt);
    CUDA_LAUNCH_CHECK();
}

// The events and hash buffers, made once. 0 when they cannot be (the shape is not tuned).
static inline int mm_tune_resources(MatmulContext* ctx) {
    if (ctx->tune_ready) return 1;
    const size_t bytes = (size_t)MATMUL_MAX_CANDIDATES * MM_HASH_SLOTS * sizeof(unsigned long long);
    if (cudaMalloc((void**)&ctx->tune_hash_dev, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        ctx->tune_hash_dev = NULL;
        return 0;
    }
    if (cudaMallocHost((void**)&ctx->tune_hash_host, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        CUDA_CHECK(cudaFree(ctx->tune_hash_dev));
        ctx->tune_hash_dev = NULL;
        return 0;
    }
    for (int c = 0; c < MATMUL_MAX_CANDIDATES; c++)
        for (int r = 0; r <= MATMUL_TUNE_REPS; r++) CUDA_CHECK(cudaEventCreate(&ctx->tune_ev[c][r]));
    ctx->tune_ready = 1;
    return 1;
}

static inline void mm_host_wait(MatmulContext* ctx, cudaStream_t stream) {
    if (ctx->host_wait) ctx->host_wait(ctx->host_wait_ctx, stream, "the matmul algorithm timing");
    else CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Times the n candidates of plan p (a new shape) on g's operands and returns the index of
// the one to use, or -1 when the shape is not tuned (no scratch memory, or no candidate
// ran): the caller then keeps the first that runs; -2: a BGRAD shape none of whose
// candidates repeats its bits (refused). g's results are left to the real call (see the top;
// a refused BGRAD's candidates may leave a gradient in g->bias: the caller's fallback
// overwrites it, BGRAD being asked for only where the gradient is fresh).
static inline int mm_tune(MatmulContext* ctx, MatmulPlan* p, const MatmulGemm* g, const cublasLtMatmulAlgo_t* cand,
                          int n, cudaStream_t stream) {
    if (!mm_tune_resources(ctx) || p->key.alignD < 2) {  // (the hash reads 16-bit words)
        ctx->untuned_shapes++;
        return -1;
    }
    const size_t delem = g->d_type == CUDA_R_32F ? 4 : 2;
    const size_t d_bytes = mm_extent_bytes(g->M, g->N, g->ldd, g->batch, g->strideD, delem);
    const size_t a_bytes = g->transA ? mm_extent_bytes(g->K, g->M, g->lda, g->batch, g->strideA, 2)
                                     : mm_extent_bytes(g->M, g->K, g->lda, g->batch, g->strideA, 2);
    const size_t b_bytes = g->transB ? mm_extent_bytes(g->N, g->K, g->ldb, g->batch, g->strideB, 2)
                                     : mm_extent_bytes(g->K, g->N, g->ldb, g->batch, g->strideB, 2);
    const int writes_aux = g->epilogue == MATMUL_EPI_GELU_AUX || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS;
    const int reads_aux = g->epilogue == MATMUL_EPI_DGELU;
    const int bgrad = g->epilogue == MATMUL_EPI_BGRAD;
    const size_t aux_bytes = g->aux ? mm_extent_bytes(g->M, g->N, g->ldaux, 1, 0, 2) : 0;
    const size_t bias_bytes = !g->bias ? 0 : bgrad ? (size_t)g->M * delem : (size_t)g->N * 2;
    // The second output hashed beside D: the GELU's aux, or the bias gradient.
    const void* out2 = writes_aux ? g->aux : bgrad ? g->bias : NULL;
    const size_t out2_bytes = writes_aux ? aux_bytes : bgrad ? bias_bytes : 0;
    const int d_is_input = mm_overlap(g->D, d_bytes, g->A, a_bytes) || mm_overlap(g->D, d_bytes, g->B, b_bytes) ||
                           mm_overlap(g->D, d_bytes, g->bias, bias_bytes) ||
                           (reads_aux && mm_overlap(g->D, d_bytes, g->aux, aux_bytes));
    // Where the candidates write D: the real D when the real call will overwrite it from
    // inputs they cannot have changed, else a scratch copy (see the top).
    void* scratch = NULL;
    void* D = g->D;
    const int refill = g->beta != 0.0f;
    if (g->beta != 0.0f || d_is_input) {
        if (cudaMalloc(&scratch, d_bytes + 256) != cudaSuccess) {
            (void)cudaGetLastError();
            ctx->untuned_shapes++;
            return -1;
        }
        D = (char*)scratch + ((uintptr_t)g->D & 255);  // the real D's alignment
    }
    // Per candidate: two untimed runs, each hashed (a candidate must give the same bits
    // twice to be chosen: no algorithm whose results vary from call to call, e.g. by
    // atomics), then the timed runs.
    int ran[MATMUL_MAX_CANDIDATES];
    for (int c = 0; c < n; c++) {
        ran[c] = 0;
        unsigned long long* h = ctx->tune_hash_dev + (size_t)c * MM_HASH_SLOTS;
        int u = 0;
        for (; u < 2; u++) {
            if (refill) CUDA_CHECK(cudaMemcpyAsync(D, g->D, d_bytes, cudaMemcpyDeviceToDevice, stream));
            if (mm_launch(ctx, p, g, D, &cand[c], stream) != CUBLAS_STATUS_SUCCESS) break;
            mm_hash_launch(h + (2 * u) * MM_HASH_MAX_BLOCKS, D, d_bytes, 0x6d6d44ull, stream);
            if (out2) mm_hash_launch(h + (2 * u + 1) * MM_HASH_MAX_BLOCKS, out2, out2_bytes, 0x6d6d41ull, stream);
        }
        if (u < 2) {
            ctx->failed_candidates++;
            continue;
        }
        CUDA_CHECK(cudaEventRecord(ctx->tune_ev[c][0], stream));
        int r = 0;
        for (; r < MATMUL_TUNE_REPS; r++) {
            if (mm_launch(ctx, p, g, D, &cand[c], stream) != CUBLAS_STATUS_SUCCESS) break;
            CUDA_CHECK(cudaEventRecord(ctx->tune_ev[c][r + 1], stream));
        }
        if (r < MATMUL_TUNE_REPS) ctx->failed_candidates++;
        else ran[c] = 1;
    }
    const size_t hash_bytes = (size_t)n * MM_HASH_SLOTS * sizeof(unsigned long long);
    CUDA_CHECK(cudaMemcpyAsync(ctx->tune_hash_host, ctx->tune_hash_dev, hash_bytes, cudaMemcpyDeviceToHost, stream));
    mm_host_wait(ctx, stream);
    if (scratch) CUDA_CHECK(cudaFree(scratch));

    const int d_blocks = mm_hash_blocks(d_bytes / 2), out2_blocks = mm_hash_blocks(out2_bytes / 2);
    unsigned long long hash[MATMUL_MAX_CANDIDATES][4];  // D, out2 of the first run; D, out2 of the second
    int repeats[MATMUL_MAX_CANDIDATES];
    float ms[MATMUL_MAX_CANDIDATES];
    int first = -1;
    for (int c = 0; c < n; c++) {
        if (!ran[c]) continue;
        const unsigned long long* h = ctx->tune_hash_host + (size_t)c * MM_HASH_SLOTS;
        for (int k = 0; k < 4; k++) {
            hash[c][k] = 0;
            const int blocks = k % 2 == 0 ? d_blocks : out2 ? out2_blocks : 0;
            for (int b = 0; b < blocks; b++) hash[c][k] += h[k * MM_HASH_MAX_BLOCKS + b];
        }
        repeats[c] = hash[c][0] == hash[c][2] && hash[c][1] == hash[c][3];
        ms[c] = 0.0f;
        for (int r = 0; r < MATMUL_TUNE_REPS; r++) {  // the fastest repetition
            float t = 0.0f;
            CUDA_CHECK(cudaEventElapsedTime(&t, ctx->tune_ev[c][r], ctx->tune_ev[c][r + 1]));
            if (r == 0 || t < ms[c]) ms[c] = t;
        }
        // The reference: the first that ran (for a bias gradient, the first that repeats).
        if (first < 0 && (repeats[c] || !bgrad)) first = c;
    }
    int any = 0;
    for (int c = 0; c < n; c++) any |= ran[c];
    if (first < 0) return bgrad && any ? -2 : -1;  // none deterministic / nothing ran: the caller's fallback
    int best = first, timed = 0;
    for (int c = 0; c < n; c++) {
        if (!ran[c]) continue;
        timed++;
        const int same_bits = hash[c][0] == hash[first][0] && hash[c][1] == hash[first][1];
        if (!same_bits) ctx->other_bits_candidates++;
        if (!repeats[c]) ctx->unrepeatable_candidates++;
        // Never one whose bits vary; in the exact mode, only the first's bits (and if the
        // first's own bits vary, nothing but the first: as untuned).
        if (c == first || !repeats[c] || !repeats[first]) continue;
        if (!same_bits && ctx->autotune == MATMUL_TUNE_EXACT) continue;
        if (ms[c] < ms[best]) best = c;
    }
    // A noise-level gain over the heuristic's first is no reason to switch.
    if (best != first && !(ms[best] * (1.0 + MATMUL_TUNE_MARGIN) < ms[first])) best = first;
    const double ratio = ms[best] > 0.0f ? (double)ms[first] / ms[best] : 1.0;
    if (ctx->tuned_shapes == 0 || ratio < ctx->tune_ratio_min) ctx->tune_ratio_min = ratio;
    if (ctx->tuned_shapes == 0 || ratio > ctx->tune_ratio_max) ctx->tune_ratio_max = ratio;
    ctx->tuned_shapes++;
    ctx->timed_candidates += timed;
    ctx->tune_first_ms += ms[first];
    ctx->tune_best_ms += ms[best];
    p->tuned = 1;
    p->first_ms = ms[first];
    p->best_ms = ms[best];
    return best;
}

static inline void mm_validate(const MatmulGemm* g) {
    CUDA_REQUIRE(g->M > 0 && g->N > 0 && g->K > 0 && g->batch >= 1,
                 "matmul: empty problem M=%d N=%d K=%d batch=%d", g->M, g->N, g->K, g->batch);
    CUDA_REQUIRE(g->A && g->B && g->D, "matmul: NULL operand");
    CUDA_REQUIRE(g->lda >= (g->transA ? g->M : g->K) && g->ldb >= (g->transB ? g->K : g->N) && g->ldd >= g->N,
                 "matmul: leading dimension too small (lda %d ldb %d ldd %d for M=%d N=%d K=%d)",
                 g->lda, g->ldb, g->ldd, g->M, g->N, g->K);
    CUDA_REQUIRE(g->ab_type == CUDA_R_16BF || g->ab_type == CUDA_R_16F, "matmul: A and B must be bf16 or fp16");
    CUDA_REQUIRE(g->d_type == g->ab_type || g->d_type == CUDA_R_32F, "matmul: D must be %s (as A and B) or fp32",
                 mm_type_name(g->ab_type));
    const int has_bias = g->epilogue == MATMUL_EPI_BIAS || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS ||
                         g->epilogue == MATMUL_EPI_BGRAD;
    const int has_aux = g->epilogue == MATMUL_EPI_GELU_AUX || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS ||
                        g->epilogue == MATMUL_EPI_DGELU;
    CUDA_REQUIRE(!has_bias || g->bias, "matmul: epilogue %s needs a bias", mm_epilogue_name(g->epilogue));
    CUDA_REQUIRE(!has_bias || is_aligned16(g->bias), "matmul: bias must be 16-byte aligned");
    CUDA_REQUIRE(!has_aux || (g->aux && is_aligned16(g->aux) && g->ldaux % 8 == 0 && g->ldaux >= g->N),
                 "matmul: epilogue %s needs a 16-byte aligned aux buffer with ld %% 8 == 0 and ld >= %d (ld %d)",
                 mm_epilogue_name(g->epilogue), g->N, g->ldaux);
    CUDA_REQUIRE(g->epilogue == MATMUL_EPI_NONE || g->batch == 1, "matmul: epilogues need batch 1");
    CUDA_REQUIRE(g->epilogue != MATMUL_EPI_DGELU || g->beta == 0.0f,
                 "matmul: the DGELU epilogue overwrites its output (beta must be 0)");
    CUDA_REQUIRE(!has_aux || g->d_type == g->ab_type, "matmul: GELU epilogues need a %s output",
                 mm_type_name(g->ab_type));
}

// Remembers a shape cuBLASLt cannot run (while there is room). Returns 0 (try_cuda's "no").
static inline int mm_refuse(MatmulContext* ctx, const MatmulKey* key) {
    if (ctx->nrefused < MATMUL_PLAN_CACHE) ctx->refused[ctx->nrefused++] = *key;
    if (key->epilogue == MATMUL_EPI_BGRAD) ctx->bgrad_refused++;
    return 0;
}

// Runs g on stream. Returns 0 (and does nothing) when cuBLASLt has no algorithm for it (the
// heuristic found none, or every candidate failed at run time, or, for a BGRAD epilogue, the
// tuning found no candidate that repeats its bits).
static inline int matmul_gemm_try_cuda(MatmulContext* ctx, const MatmulGemm* g, cudaStream_t stream) {
    mm_validate(g);
    MatmulKey key;
    mm_make_key(&key, g);
    for (int i = 0; i < ctx->nplans; i++) {
        MatmulPlan* plan = &ctx->plans[i];
        if (memcmp(&plan->key, &key, sizeof(key)) != 0) continue;
        mm_set_pointers(plan, g);
        CUBLASLT_CHECK(mm_launch(ctx, plan, g, g->D, &plan->algo, stream));
        return 1;
    }
    for (int i = 0; i < ctx->nrefused; i++) if (!memcmp(&ctx->refused[i], &key, sizeof(key))) return 0;
    // A new shape: plan it, choose its algorithm, run it.
    MatmulPlan scratch_plan;  // used when the table is full
    MatmulPlan* plan = ctx->nplans < MATMUL_PLAN_CACHE ? &ctx->plans[ctx->nplans] : &scratch_plan;
    const int transient = plan == &scratch_plan;
    cublasLtMatmulAlgo_t cand[MATMUL_MAX_CANDIDATES];
    const int n = mm_plan_create(ctx, plan, g, cand);
    if (n == 0) return mm_refuse(ctx, &key);
    // (A BGRAD shape is timed even with one candidate: its repeatability is checked.)
    const int timed = !transient && ctx->autotune != MATMUL_TUNE_OFF && (n > 1 || g->epilogue == MATMUL_EPI_BGRAD);
    const int tuned = timed ? mm_tune(ctx, plan, g, cand, n, stream) : -1;
    if (tuned == -2) {  // a bias gradient no candidate computes the same way twice
        mm_plan_destroy(plan);
        return mm_refuse(ctx, &key);
    }
    // The real call: the tuned choice, else (or should it fail) the candidates in the
    // heuristic's order; the first that runs is kept.
    int chosen = -1;
    for (int k = -1; k < n && chosen < 0; k++) {
        const int c = k < 0 ? tuned : k;
        if (c < 0 || (k >= 0 && c == tuned)) continue;
        if (mm_launch(ctx, plan, g, g->D, &cand[c], stream) == CUBLAS_STATUS_SUCCESS) chosen = c;
        else ctx->failed_candidates++;
    }
    if (chosen < 0) {
        mm_plan_destroy(plan);
        return mm_refuse(ctx, &key);
    }
    plan->algo = cand[chosen];
    plan->chosen = chosen;
    if (chosen != tuned) plan->tuned = 0;
    // The launch has captured everything it needs from the host descriptors.
    if (transient) mm_plan_destroy(plan);
    else ctx->nplans++;
    return 1;
}

// Runs g on stream; exits with a message naming the problem when cuBLASLt cannot run it.
static inline void matmul_gemm_cuda(MatmulContext* ctx, const MatmulGemm* g, cudaStream_t stream) {
    if (!matmul_gemm_try_cuda(ctx, g, stream)) {
        char desc[512];
        mm_describe(desc, sizeof(desc), g);
        fprintf(stderr, "matmul: cuBLASLt has no algorithm that runs %s (the heuristic found none, or each "
                        "of its candidates failed)\n", desc);
        exit(1);
    }
}

// A fused GELU epilogue the heuristic cannot run: say so once and stop asking (*fuse = 0).
static inline void mm_fusion_refused(const MatmulGemm* g, int* fuse) {
    char desc[512];
    mm_describe(desc, sizeof(desc), g);
    fprintf(stderr, "matmul: cuBLASLt has no algorithm for %s; the GELU runs as a kernel of its own from now on\n", desc);
    *fuse = 0;
}

static inline MatmulGemm mm_gemm_init(void) {
    MatmulGemm g;
    memset(&g, 0, sizeof(g));
    g.batch = 1;
    g.alpha = 1.0f;
    g.ab_type = CUDA_R_16BF;
    g.d_type = CUDA_R_16BF;
    g.epilogue = MATMUL_EPI_NONE;
    return g;
}

// ----------------------------------------------------------------------------
// GPT-2 linear layers (what train_gpt calls)

// out[N,OC] = inp[N,C] @ weight[OC,C]^T (+ bias[OC] when bias != NULL). Overwrites out.
// pre_gelu != NULL adds the GELU: pre_gelu[N,OC] = inp @ W^T (+ bias), out = gelu(pre_gelu)
// (OC % 8 == 0, pre_gelu 16-byte aligned), in the epilogue when ctx->fuse_gelu_forward.
template <class T16>
static inline void matmul_forward_cuda(MatmulContext* ctx, T16* out, typename NoDeduce<T16>::type* pre_gelu,
                                       const T16* inp, const T16* weight, const typename NoDeduce<T16>::type* bias,
                                       int N, int C, int OC,
                                       cudaStream_t stream) {
    MatmulGemm g = mm_gemm_init();
    g.ab_type = g.d_type = mm_type_of(inp);
    g.M = N; g.N = OC; g.K = C;
    g.A = inp; g.lda = C;
    g.B = weight; g.ldb = C; g.transB = 1;
    g.D = out; g.ldd = OC;
    g.bias = bias;
    if (pre_gelu && ctx->fuse_gelu_forward) {
        g.epilogue = bias ? MATMUL_EPI_GELU_AUX_BIAS : MATMUL_EPI_GELU_AUX;
        g.aux = pre_gelu; g.ldaux = OC;
        if (matmul_gemm_try_cuda(ctx, &g, stream)) return;
        mm_fusion_refused(&g, &ctx->fuse_gelu_forward);
        g.aux = NULL; g.ldaux = 0;
    }
    g.epilogue = bias ? MATMUL_EPI_BIAS : MATMUL_EPI_NONE;
    if (pre_gelu) g.D = pre_gelu;
    matmul_gemm_cuda(ctx, &g, stream);
    if (pre_gelu) gelu_forward_cuda(out, pre_gelu, (size_t)N * OC, stream);
}

// dinp[N,C] = dout[N,OC] @ weight[OC,C]: accumulate = 0 overwrites dinp, 1 adds to it.
// pre_gelu != NULL (the [N,C] pre-GELU input saved by the forward that produced this
// layer's input) applies the GELU backward, in the epilogue when ctx->fuse_gelu_backward:
//   dinp = gelu'(pre_gelu) * (dout @ weight)
// i.e. dinp is then the gradient w.r.t. pre_gelu; this form must overwrite (accumulate 0).
template <class T16>
static inline void matmul_backward_dinp_cuda(MatmulContext* ctx, T16* dinp, const T16* dout,
                                             const T16* weight, const typename NoDeduce<T16>::type* pre_gelu, int N, int C,
                                             int OC, int accumulate, cudaStream_t stream) {
    CUDA_REQUIRE(!(pre_gelu && accumulate), "matmul_backward_dinp_cuda: the DGELU form cannot accumulate");
    MatmulGemm g = mm_gemm_init();
    g.ab_type = g.d_type = mm_type_of(dout);
    g.M = N; g.N = C; g.K = OC;
    g.A = dout; g.lda = OC;
    g.B = weight; g.ldb = C;
    g.D = dinp; g.ldd = C;
    g.beta = accumulate ? 1.0f : 0.0f;
    if (pre_gelu && ctx->fuse_gelu_backward) {
        g.epilogue = MATMUL_EPI_DGELU;
        g.aux = (void*)pre_gelu; g.ldaux = C;  // read only in this epilogue
        if (matmul_gemm_try_cuda(ctx, &g, stream)) return;
        mm_fusion_refused(&g, &ctx->fuse_gelu_backward);
        g.epilogue = MATMUL_EPI_NONE; g.aux = NULL; g.ldaux = 0;
    }
    matmul_gemm_cuda(ctx, &g, stream);
    if (pre_gelu) gelu_backward_inplace_cuda(dinp, pre_gelu, (size_t)N * C, stream);
}

// The GEMM dweight[OC,C] = dout[N,OC]^T @ inp[N,C]: accumulate = 1 adds (gradient accumulation
// across micro-steps), 0 overwrites. dweight_type is T16's (mm_type_of) or CUDA_R_32F (fp32
// gradients). (cuda_bias.cuh adds the bias gradient's epilogue to it.)
template <class T16>
static inline MatmulGemm mm_dweight_gemm(void* dweight, cudaDataType_t dweight_type, const T16* dout, const T16* inp,
                                         int N, int C, int OC, int accumulate) {
    MatmulGemm g = mm_gemm_init();
    g.ab_type = mm_type_of(dout);
    g.M = OC; g.N = C; g.K = N;
    g.A = dout; g.lda = OC; g.transA = 1;
    g.B = inp; g.ldb = C;
    g.D = dweight; g.ldd = C; g.d_type = dweight_type;
    g.beta = accumulate ? 1.0f : 0.0f;
    return g;
}
template <class T16>
static inline void matmul_backward_dweight_cuda(MatmulContext* ctx, void* dweight, cudaDataType_t dweight_type,
                                                const T16* dout, const T16* inp, int N, int C, int OC, int accumulate,
                                                cudaStream_t stream) {
    MatmulGemm g = mm_dweight_gemm(dweight, dweight_type, dout, inp, N, C, OC, accumulate);
    matmul_gemm_cuda(ctx, &g, stream);
}

#endif  // FSDP_KERNELS_CUDA_MATMUL_CUH
