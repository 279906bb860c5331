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
//   The CPU twin always accumulates into dinp and dweight; here the caller chooses. Bias
//   gradients are NOT computed here (a deterministic reduction kernel of its own does them).
//
// The row-major -> column-major mapping is done in exactly one place, mm_plan_layouts()
// below; every public function goes through matmul_gemm_cuda().
//
// The context (MatmulContext) owns the cuBLASLt handle, ONE workspace of
// MATMUL_WORKSPACE_BYTES allocated at init, and a fixed table of MATMUL_PLAN_CACHE plans
// (descriptor + layouts + the heuristic's algorithm) keyed by everything the heuristic
// depends on (shapes, leading dimensions, transposes, types, epilogue, pointer alignments).
// A training step issues the same few dozen shapes every layer, so after the first step no
// heuristic query is made. When the table is full, further shapes are planned per call and
// their descriptors destroyed right after the (asynchronous) launch: always correct, never
// an unbounded allocation. The cache is host state: a context is used by one host thread,
// and, because of the shared workspace, by one stream at a time (or streams ordered with
// events).
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
// -ge: 0 = the matmul and the GELU kernels of cuda_kernels.cuh run separately, 1 = fuse the
// forward (GELU_AUX epilogue), 2 = fuse the forward and the backward (DGELU epilogue; the
// default). When the heuristic has no algorithm for a fused epilogue, the context says so
// once on stderr, turns that fusion off, and runs the separate form from then on: a run
// never stops for want of an epilogue. Unfused, the pre-GELU values are rounded to bf16
// before the GELU (fused, it is applied to the fp32 accumulator), so the two differ in the
// last bits; each stays within the tests' bf16 tolerance of the CPU twin.
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
#include "kernels/cuda_kernels.cuh"  // the GELU kernels of the unfused form

#define MATMUL_WORKSPACE_BYTES ((size_t)32 << 20)  // 32 MiB: plenty on Ampere/Hopper
#define MATMUL_PLAN_CACHE 64                         // distinct GEMM shapes kept planned

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
} MatmulEpilogue;

// One row-major GEMM (possibly strided-batched):
//   D[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * D      for each of `batch` matrices
// A is stored [M,K] (lda >= K), or [K,M] (lda >= M) when transA; B is stored [K,N]
// (ldb >= N), or [N,K] (ldb >= K) when transB; D is [M,N] with ldd >= N. Strides are in
// elements between consecutive matrices of the batch. A, B are bf16; D is bf16 or fp32
// (d_type CUDA_R_16BF / CUDA_R_32F). C is D itself (in place when beta != 0).
// Epilogues (batch must be 1): bias is bf16[N]; aux is bf16 [M,N] row-major with ld ldaux.
typedef struct {
    int M, N, K;
    const bf16* A; int lda; int transA; long long strideA;
    const bf16* B; int ldb; int transB; long long strideB;
    void* D; int ldd; cudaDataType_t d_type; long long strideD;
    int batch;
    float alpha, beta;
    MatmulEpilogue epilogue;
    const bf16* bias;
    bf16* aux; int ldaux;
} MatmulGemm;

// Everything the heuristic's choice depends on. Compared with memcmp: always memset first.
typedef struct {
    int64_t M, N, K, lda, ldb, ldd, transA, transB, strideA, strideB, strideD, batch;
    int64_t d_type, epilogue, ldaux;
    int64_t alignA, alignB, alignD, alignBias, alignAux;
} MatmulKey;

typedef struct {
    MatmulKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layoutA, layoutB, layoutD;  // cuBLAS's A, B, D (see mm_plan_layouts)
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

typedef struct {
    cublasLtHandle_t handle;
    void* workspace;        // MATMUL_WORKSPACE_BYTES of device memory
    size_t workspace_bytes;
    MatmulPlan plans[MATMUL_PLAN_CACHE];
    int nplans;
    long long heuristic_queries;  // how many times the heuristic ran (for tests / logging)
    int fuse_gelu_forward;   // GELU_AUX(_BIAS) epilogue in matmul_forward_cuda
    int fuse_gelu_backward;  // DGELU epilogue in matmul_backward_dinp_cuda
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
}

// 0: no GELU epilogue, 1: the forward's, 2: the forward's and the backward's (see the top).
static inline void matmul_set_gelu_fusion(MatmulContext* ctx, int level) {
    CUDA_REQUIRE(level >= 0 && level <= 2, "matmul: GELU fusion level %d (expected 0, 1 or 2)", level);
    ctx->fuse_gelu_forward = level >= 1;
    ctx->fuse_gelu_backward = level >= 2;
}

static inline void mm_plan_destroy(MatmulPlan* p) {
    CUBLASLT_CHECK(cublasLtMatrixLayoutDestroy(p->layoutA));
    CUBLASLT_CHECK(cublasLtMatrixLayoutDestroy(p->layoutB));
    CUBLASLT_CHECK(cublasLtMatrixLayoutDestroy(p->layoutD));
    CUBLASLT_CHECK(cublasLtMatmulDescDestroy(p->desc));
}

// Call when no matmul issued through ctx is still running (e.g. after a stream sync).
static inline void matmul_context_destroy(MatmulContext* ctx) {
    for (int i = 0; i < ctx->nplans; i++) mm_plan_destroy(&ctx->plans[i]);
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
//   D's shape: column-major N x M with ld ldaux.
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
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->layoutA, CUDA_R_16BF, a_rows, a_cols, (int64_t)g->ldb));
    CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->layoutB, CUDA_R_16BF, b_rows, b_cols, (int64_t)g->lda));
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
    if (g->epilogue == MATMUL_EPI_BIAS || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS) {
        const int32_t bias_type = CUDA_R_16BF;
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
    if (g->epilogue == MATMUL_EPI_BIAS || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS) {
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
             "D[%d,%d] (%s, ldd %d) = op(A)[%d,%d] (lda %d%s) @ op(B)[%d,%d] (ldb %d%s), batch %d, "
             "epilogue %s, beta %g, alignment A/B/D %lld/%lld/%lld bytes",
             g->M, g->N, g->d_type == CUDA_R_32F ? "fp32" : "bf16", g->ldd, g->M, g->K, g->lda,
             g->transA ? ", transposed" : "", g->K, g->N, g->ldb, g->transB ? ", transposed" : "",
             g->batch, mm_epilogue_name(g->epilogue), (double)g->beta,
             (long long)mm_alignment(g->A), (long long)mm_alignment(g->B),
             (long long)mm_alignment(g->D));
}

// Fills p (descriptor, layouts, algorithm). Returns 0 when the heuristic has no algorithm
// for this problem (p is then released), 1 on success.
static inline int mm_plan_create(MatmulContext* ctx, MatmulPlan* p, const MatmulGemm* g) {
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
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof(result));
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, p->desc, p->layoutA, p->layoutB,
                                                             p->layoutD, p->layoutD, pref, 1, &result, &returned);
    ctx->heuristic_queries++;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS || returned < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
        mm_plan_destroy(p);
        return 0;
    }
    p->algo = result.algo;
    return 1;
}

static inline void mm_validate(const MatmulGemm* g) {
    CUDA_REQUIRE(g->M > 0 && g->N > 0 && g->K > 0 && g->batch >= 1,
                 "matmul: empty problem M=%d N=%d K=%d batch=%d", g->M, g->N, g->K, g->batch);
    CUDA_REQUIRE(g->A && g->B && g->D, "matmul: NULL operand");
    CUDA_REQUIRE(g->lda >= (g->transA ? g->M : g->K) && g->ldb >= (g->transB ? g->K : g->N) && g->ldd >= g->N,
                 "matmul: leading dimension too small (lda %d ldb %d ldd %d for M=%d N=%d K=%d)",
                 g->lda, g->ldb, g->ldd, g->M, g->N, g->K);
    CUDA_REQUIRE(g->d_type == CUDA_R_16BF || g->d_type == CUDA_R_32F, "matmul: D must be bf16 or fp32");
    const int has_bias = g->epilogue == MATMUL_EPI_BIAS || g->epilogue == MATMUL_EPI_GELU_AUX_BIAS;
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
    CUDA_REQUIRE(!has_aux || g->d_type == CUDA_R_16BF, "matmul: GELU epilogues need a bf16 output");
}

// Runs g on stream. Returns 0 (and does nothing) when cuBLASLt has no algorithm for it.
static inline int matmul_gemm_try_cuda(MatmulContext* ctx, const MatmulGemm* g, cudaStream_t stream) {
    mm_validate(g);
    MatmulKey key;
    mm_make_key(&key, g);
    MatmulPlan* plan = NULL;
    for (int i = 0; i < ctx->nplans; i++) {
        if (memcmp(&ctx->plans[i].key, &key, sizeof(key)) == 0) { plan = &ctx->plans[i]; break; }
    }
    MatmulPlan scratch_plan;  // used when the table is full
    int transient = 0;
    if (!plan) {
        plan = ctx->nplans < MATMUL_PLAN_CACHE ? &ctx->plans[ctx->nplans] : &scratch_plan;
        transient = plan == &scratch_plan;
        if (!mm_plan_create(ctx, plan, g)) return 0;
        if (!transient) ctx->nplans++;
    }
    mm_set_pointers(plan, g);
    const float alpha = g->alpha, beta = g->beta;
    CUBLASLT_CHECK(cublasLtMatmul(ctx->handle, plan->desc, &alpha, g->B, plan->layoutA, g->A, plan->layoutB,
                                  &beta, g->D, plan->layoutD, g->D, plan->layoutD, &plan->algo,
                                  ctx->workspace, ctx->workspace_bytes, stream));
    // The launch has captured everything it needs from the host descriptors.
    if (transient) mm_plan_destroy(plan);
    return 1;
}

// Runs g on stream; exits with a message naming the problem when cuBLASLt cannot run it.
static inline void matmul_gemm_cuda(MatmulContext* ctx, const MatmulGemm* g, cudaStream_t stream) {
    if (!matmul_gemm_try_cuda(ctx, g, stream)) {
        char desc[512];
        mm_describe(desc, sizeof(desc), g);
        fprintf(stderr, "matmul: cuBLASLt heuristic returned no algorithm for %s\n", desc);
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
    g.d_type = CUDA_R_16BF;
    g.epilogue = MATMUL_EPI_NONE;
    return g;
}

// ----------------------------------------------------------------------------
// GPT-2 linear layers (what train_gpt calls)

// out[N,OC] = inp[N,C] @ weight[OC,C]^T (+ bias[OC] when bias != NULL). Overwrites out.
// pre_gelu != NULL adds the GELU: pre_gelu[N,OC] = inp @ W^T (+ bias), out = gelu(pre_gelu)
// (OC % 8 == 0, pre_gelu 16-byte aligned), in the epilogue when ctx->fuse_gelu_forward.
static inline void matmul_forward_cuda(MatmulContext* ctx, bf16* out, bf16* pre_gelu, const bf16* inp,
                                       const bf16* weight, const bf16* bias, int N, int C, int OC,
                                       cudaStream_t stream) {
    MatmulGemm g = mm_gemm_init();
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
static inline void matmul_backward_dinp_cuda(MatmulContext* ctx, bf16* dinp, const bf16* dout,
                                             const bf16* weight, const bf16* pre_gelu, int N, int C,
                                             int OC, int accumulate, cudaStream_t stream) {
    CUDA_REQUIRE(!(pre_gelu && accumulate), "matmul_backward_dinp_cuda: the DGELU form cannot accumulate");
    MatmulGemm g = mm_gemm_init();
    g.M = N; g.N = C; g.K = OC;
    g.A = dout; g.lda = OC;
    g.B = weight; g.ldb = C;
    g.D = dinp; g.ldd = C;
    g.beta = accumulate ? 1.0f : 0.0f;
    if (pre_gelu && ctx->fuse_gelu_backward) {
        g.epilogue = MATMUL_EPI_DGELU;
        g.aux = (bf16*)pre_gelu; g.ldaux = C;  // read only in this epilogue
        if (matmul_gemm_try_cuda(ctx, &g, stream)) return;
        mm_fusion_refused(&g, &ctx->fuse_gelu_backward);
        g.epilogue = MATMUL_EPI_NONE; g.aux = NULL; g.ldaux = 0;
    }
    matmul_gemm_cuda(ctx, &g, stream);
    if (pre_gelu) gelu_backward_inplace_cuda(dinp, pre_gelu, (size_t)N * C, stream);
}

// dweight[OC,C] = dout[N,OC]^T @ inp[N,C]: accumulate = 1 adds (gradient accumulation across
// micro-steps), 0 overwrites. dweight_type is CUDA_R_16BF or CUDA_R_32F (fp32 gradients).
static inline void matmul_backward_dweight_cuda(MatmulContext* ctx, void* dweight, cudaDataType_t dweight_type,
                                                const bf16* dout, const bf16* inp, int N, int C, int OC,
                                                int accumulate, cudaStream_t stream) {
    MatmulGemm g = mm_gemm_init();
    g.M = OC; g.N = C; g.K = N;
    g.A = dout; g.lda = OC; g.transA = 1;
    g.B = inp; g.ldb = C;
    g.D = dweight; g.ldd = C; g.d_type = dweight_type;
    g.beta = accumulate ? 1.0f : 0.0f;
    matmul_gemm_cuda(ctx, &g, stream);
}

#endif  // FSDP_KERNELS_CUDA_MATMUL_CUH
