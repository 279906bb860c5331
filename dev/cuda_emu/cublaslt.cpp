// The CPU emulator's cuBLASLt (see emu.h), from the cuBLASLt documentation:
//   column-major matrices: element (r, c) of a layout (rows, cols, ld) is at ptr[r + c ld]
//   (+ b * stride for matrix b of a strided batch); op T reads the stored matrix transposed.
//   D (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C, with m, n = D's rows, cols.
//   Epilogues: BIAS adds bias[row] (a vector of m); GELU_AUX(_BIAS) writes the pre-GELU
//   value (after the bias) to aux (m x n, ld = EPILOGUE_AUX_LD) and stores gelu() of it;
//   DGELU multiplies by gelu'(aux). GELU is the tanh approximation. EMU_CUBLASLT_NO_GELU=1
//   makes the heuristic find no algorithm for the GELU epilogues.
//   BGRADA / BGRADB (cublasLt.h: "bias gradient based on the input matrix A / B"): D is
//   computed as without an epilogue, and the bias gradient is WRITTEN (never accumulated,
//   whatever beta is) to BIAS_POINTER: for BGRADA a vector of m (D's rows), bias[i] = sum
//   over the GEMM's k of op(A)[i, p]; for BGRADB a vector of n (D's columns), bias[j] = sum
//   over k of op(B)[p, j]. Its elements have the output's type (cublasLt.h: "the same type
//   as the output elements"): BIAS_DATA_TYPE unset (-1) or set to D's type; any other type
//   finds no algorithm. Summed in double in k order (one fixed order: deterministic), then
//   rounded like D. Batches and alpha != 1 are refused (not emulated: the header does not
//   say whether alpha scales the gradient). EMU_CUBLASLT_NO_BGRAD=1 makes the heuristic
//   find no algorithm for them.
// The heuristic returns several algorithms (up to the number requested), best first, so that
// callers' choice among candidates runs here too. Which ones: EMU_CUBLASLT_ALGOS, a comma-
// separated list, one entry per candidate, read at every heuristic call (default
// "ok,ok,ok,ok": four interchangeable algorithms). An entry is KIND or KIND:MS:
//   ok      computes as described below;
//   ulp     the same, then flips the lowest bit of every element of D: an algorithm whose
//           bits differ (another reduction order), for tests that must tell them apart;
//   fail    cublasLtMatmul refuses it (CUBLAS_STATUS_NOT_SUPPORTED, nothing runs): a
//           candidate that fails at run time;
//   nogelu  like ok, but refused for the GELU_AUX(_BIAS) / DGELU epilogues;
//   ulp and noisy flip the lowest bit of a BGRAD epilogue's bias gradient too;
//   noisy   like ulp on every other call of a noisy candidate (the process's 2nd, 4th, ...),
//           like ok on the others: an algorithm whose bits vary from call to call;
//   :MS     the device thread spends MS more milliseconds on each call (the events, which
//           measure host time, see a slower algorithm).
// Strict where cuBLASLt is: attribute sizes, ld >= rows, operand shapes, C == D in place
// only with the same layout, supported types (A, B both bf16 or both fp16; C, D that type
// or fp32; fp32 compute and scale: the 16-bit rows of cublasLtMatmul's table of supported
// type combinations). Extra checks: every operand lies inside one device buffer, and its
// pointer has the alignment promised to the heuristic (the algorithm is only valid for that).
// Arithmetic: the (exact) products of the 16-bit inputs summed in double, the epilogue in
// double, then rounded to D's (and aux's) type: fp16 and fp32 once, bf16 through fp32
// (to nearest even both times).
// cublasLtMatmul checks its arguments and reads the host-side ones (alpha, beta, descriptor,
// layouts) when called; the product is stream work (emu::enqueue_compute), done when the
// stream gets to it.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

struct cublasLtContext { int unused; };
struct cublasLtMatmulDescOpaque_t {
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, bias_type = -1, aux_type = -1;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = NULL;
    void* aux = NULL;
    int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1;
    int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t { uint64_t workspace = 0; uint32_t align[4] = {256, 256, 256, 256}; };
static const uint64_t kAlgoMagic = 0x656d75616c676f31ull;  // "emualgo1"
// cublasLtMatmulAlgo_t.data: [0] kAlgoMagic, [1..4] the alignments promised to the heuristic
// (A, B, C, D), [5] the candidate's index in the heuristic's list, [6] its kind, [7] its
// extra milliseconds per call.
enum AlgoKind { kAlgoOk = 0, kAlgoUlp, kAlgoFail, kAlgoNoGelu, kAlgoNoisy };
static std::atomic<uint64_t> g_noisy_calls{0};

static cublasStatus_t bad(cublasStatus_t st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static cublasStatus_t bad(cublasStatus_t st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "EMU: note: cuBLASLt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return st;
}
#define SET(field, type)                                                                                \
    do {                                                                                                \
        if (size != sizeof(type)) return bad(CUBLAS_STATUS_INVALID_VALUE, "attribute %d: %zu bytes, expected %zu", \
                                             (int)attr, size, sizeof(type));                            \
        memcpy(&(field), buf, sizeof(type));                                                            \
    } while (0)

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new cublasLtContext(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
const char* cublasLtGetStatusName(cublasStatus_t st) {
    switch (st) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_COMPUTE_32F with CUDA_R_32F scale is emulated");
    *d = new cublasLtMatmulDescOpaque_t();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA: SET(d->transa, int32_t); break;
        case CUBLASLT_MATMUL_DESC_TRANSB: SET(d->transb, int32_t); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: SET(d->epilogue, uint32_t); break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: SET(d->bias, void*); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: SET(d->aux, void*); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: SET(d->aux_ld, int64_t); break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: SET(d->bias_type, int32_t); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: SET(d->aux_type, int32_t); break;
        default: return bad(CUBLAS_STATUS_INVALID_VALUE, "matmul desc attribute %d not emulated", (int)attr);
    }
    if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) || (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_OP_N and CUBLAS_OP_T are emulated");
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (ld < (int64_t)rows || ld < 1) return bad(CUBLAS_STATUS_INVALID_VALUE, "layout ld %lld < rows %llu", (long long)ld, (unsigned long long)rows);
    *l = new cublasLtMatrixLayoutOpaque_t();
    (*l)->type = type;
    (*l)->rows = rows;
    (*l)->cols = cols;
    (*l)->ld = ld;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: SET(l->batch, int32_t); break;
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: SET(l->stride, int64_t); break;
        default: return bad(CUBLAS_STATUS_INVALID_VALUE, "layout attribute %d not emulated", (int)attr);
    }
    return l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : bad(CUBLAS_STATUS_INVALID_VALUE, "batch count %d", l->batch);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = new cublasLtMatmulPreferenceOpaque_t();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
    int which = -1;
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: SET(p->workspace, uint64_t); return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: which = 0; break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: which = 1; break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: which = 2; break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: which = 3; break;
        default: return bad(CUBLAS_STATUS_INVALID_VALUE, "preference attribute %d not emulated", (int)attr);
    }
    SET(p->align[which], uint32_t);
    const uint32_t v = p->align[which];
    if (v == 0 || (v & (v - 1))) return bad(CUBLAS_STATUS_INVALID_VALUE, "alignment %u is not a power of two", v);
    return CUBLAS_STATUS_SUCCESS;
}

// The shape D (m x n) = op(A) (m x k) op(B) (k x n), or an error.
static cublasStatus_t check_shapes(const cublasLtMatmulDescOpaque_t* d, const cublasLtMatrixLayoutOpaque_t* a,
                                   const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                                   const cublasLtMatrixLayoutOpaque_t* o, uint64_t* k) {
    const uint64_t am = d->transa == CUBLAS_OP_N ? a->rows : a->cols, ak = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t bk = d->transb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != o->rows || bn != o->cols || ak != bk || c->rows != o->rows || c->cols != o->cols)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "shapes: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu",
                   (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
                   (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)o->rows,
                   (unsigned long long)o->cols);
    if ((a->type != CUDA_R_16BF && a->type != CUDA_R_16F) || b->type != a->type || c->type != o->type ||
        (o->type != a->type && o->type != CUDA_R_32F))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "types A %d B %d C %d D %d", a->type, b->type, c->type, o->type);
    if (a->batch != o->batch || b->batch != o->batch || c->batch != o->batch)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "batch counts A %d B %d C %d D %d", a->batch, b->batch, c->batch, o->batch);
    *k = ak;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t o,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* res, int* returned) {
    uint64_t k;
    if (!h || requested < 1) return bad(CUBLAS_STATUS_INVALID_VALUE, "heuristic: no handle or nothing requested");
    const cublasStatus_t st = check_shapes(d, a, b, c, o, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    memset(res, 0, sizeof *res);
    // EMU_CUBLASLT_NO_GELU=1 plays a library without GELU epilogue kernels: the heuristic
    // finds nothing for them (real cuBLASLt: NOT_SUPPORTED, no result), as callers must handle.
    const char* no_gelu = getenv("EMU_CUBLASLT_NO_GELU");
    if (no_gelu && strcmp(no_gelu, "0") &&
        (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         d->epilogue == CUBLASLT_EPILOGUE_DGELU)) {
        *returned = 0;
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    // EMU_CUBLASLT_NO_BGRAD=1: a library without the bias-gradient epilogues. Without it the
    // bias gradient must still have the output's type, and one matrix (no batch).
    const bool bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADA || d->epilogue == CUBLASLT_EPILOGUE_BGRADB;
    const char* no_bgrad = getenv("EMU_CUBLASLT_NO_BGRAD");
    if (bgrad && ((no_bgrad && strcmp(no_bgrad, "0")) || (d->bias_type >= 0 && d->bias_type != (int32_t)o->type) ||
                  o->batch != 1)) {
        *returned = 0;
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const char* spec = getenv("EMU_CUBLASLT_ALGOS");
    if (!spec || !*spec) spec = "ok,ok,ok,ok";
    int n = 0;
    for (const char* q = spec; *q && n < requested;) {
        const char* end = strchr(q, ',');
        const size_t len = end ? (size_t)(end - q) : strlen(q);
        char entry[32];
        if (len == 0 || len >= sizeof entry) {
            fprintf(stderr, "EMU: EMU_CUBLASLT_ALGOS=\"%s\": an empty or too long entry\n", spec);
            abort();
        }
        memcpy(entry, q, len);
        entry[len] = '\0';
        uint64_t ms = 0;
        char* colon = strchr(entry, ':');
        if (colon) {
            char* rest = NULL;
            ms = strtoull(colon + 1, &rest, 10);
            *colon = '\0';
            if (rest == colon + 1 || *rest) {
                fprintf(stderr, "EMU: EMU_CUBLASLT_ALGOS=\"%s\": bad milliseconds in an entry\n", spec);
                abort();
            }
        }
        uint64_t kind;
        if (!strcmp(entry, "ok")) kind = kAlgoOk;
        else if (!strcmp(entry, "ulp")) kind = kAlgoUlp;
        else if (!strcmp(entry, "fail")) kind = kAlgoFail;
        else if (!strcmp(entry, "nogelu")) kind = kAlgoNoGelu;
        else if (!strcmp(entry, "noisy")) kind = kAlgoNoisy;
        else {
            fprintf(stderr, "EMU: EMU_CUBLASLT_ALGOS=\"%s\": unknown kind \"%s\" (ok, ulp, fail, nogelu, noisy)\n",
                    spec, entry);
            abort();
        }
        memset(&res[n], 0, sizeof res[n]);
        res[n].algo.data[0] = kAlgoMagic;
        for (int i = 0; i < 4; i++) res[n].algo.data[1 + i] = p->align[i];
        res[n].algo.data[5] = (uint64_t)n;
        res[n].algo.data[6] = kind;
        res[n].algo.data[7] = ms;
        res[n].state = CUBLAS_STATUS_SUCCESS;
        res[n].wavesCount = 1.0f;
        n++;
        q = end ? end + 1 : q + len;
    }
    *returned = n;
    return n > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

static float load(const void* p, cudaDataType t, size_t i) {
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    if (t == CUDA_R_16F) return __half2float(((const __half*)p)[i]);
    return ((const float*)p)[i];
}
static void store(void* p, cudaDataType t, size_t i, double v) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn((float)v);
    else if (t == CUDA_R_16F) ((__half*)p)[i] = __double2half(v);
    else ((float*)p)[i] = (float)v;
}
static size_t type_bytes(cudaDataType t) { return t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 4; }
// Bytes spanned by a layout's batch: the last column needs only `rows` elements.
static size_t extent(const cublasLtMatrixLayoutOpaque_t* l) {
    if (l->rows == 0 || l->cols == 0) return 0;
    return ((l->cols - 1) * (uint64_t)l->ld + l->rows + (uint64_t)(l->batch - 1) * (uint64_t)l->stride) * type_bytes(l->type);
}
static double gelu(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double dgelu(double x) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

static void matmul_run(const cublasLtMatmulDescOpaque_t& desc, float alpha, const void* A,
                       const cublasLtMatrixLayoutOpaque_t& LA, const void* B, const cublasLtMatrixLayoutOpaque_t& LB,
                       float beta, const void* C, const cublasLtMatrixLayoutOpaque_t& LC, void* D,
                       const cublasLtMatrixLayoutOpaque_t& LO, uint64_t k, bool bias, cudaDataType bias_type,
                       bool gelu_aux, bool dgelu_aux, cudaDataType aux_type, int bgrad, bool flip);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t lo,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    uint64_t k;
    if (!h) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "no handle");
    cublasStatus_t st = check_shapes(d, la, lb, lc, lo, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const uint64_t m = lo->rows, n = lo->cols;
    const float alpha = *(const float*)alpha_p, beta = *(const float*)beta_p;
    const uint32_t e = d->epilogue;
    const bool bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool gelu_aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool dgelu_aux = e == CUBLASLT_EPILOGUE_DGELU;
    // The bias gradient's operand: 'A' (a vector of m), 'B' (of n), or 0.
    const int bgrad = e == CUBLASLT_EPILOGUE_BGRADA ? 'A' : e == CUBLASLT_EPILOGUE_BGRADB ? 'B' : 0;
    if (!(e == CUBLASLT_EPILOGUE_DEFAULT || bias || gelu_aux || dgelu_aux || bgrad))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u not emulated", e);
    if (e != CUBLASLT_EPILOGUE_DEFAULT && lo->batch != 1) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue with a batch");
    const cudaDataType bias_type = d->bias_type < 0 ? lo->type : (cudaDataType)d->bias_type;
    const cudaDataType aux_type = d->aux_type < 0 ? lo->type : (cudaDataType)d->aux_type;
    if (bias && (!d->bias || !emu::device_range_ok(d->bias, m * type_bytes(bias_type))))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "bias: %llu elements not inside a device buffer", (unsigned long long)m);
    if (bgrad && bias_type != lo->type)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "bias gradient of type %d for an output of type %d", bias_type, lo->type);
    if (bgrad && *(const float*)alpha_p != 1.0f)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "bias gradient epilogue with alpha %g not emulated", *(const float*)alpha_p);
    const uint64_t bgrad_len = bgrad == 'A' ? m : n;
    if (bgrad && (!d->bias || !emu::device_range_ok(d->bias, bgrad_len * type_bytes(bias_type))))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "bias gradient: %llu elements not inside a device buffer",
                   (unsigned long long)bgrad_len);
    if ((gelu_aux || dgelu_aux) &&
        (!d->aux || d->aux_ld < (int64_t)m || d->aux_ld % 8 || ((uintptr_t)d->aux & 15) ||
         !emu::device_range_ok(d->aux, ((n - 1) * d->aux_ld + m) * type_bytes(aux_type))))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "aux: pointer %p ld %lld for %llux%llu", d->aux, (long long)d->aux_ld,
                   (unsigned long long)m, (unsigned long long)n);
    const void* ptrs[4] = {A, B, C, D};
    const cublasLtMatrixLayoutOpaque_t* lays[4] = {la, lb, lc, lo};
    for (int i = 0; i < 4; i++) {
        if (i == 2 && beta == 0.0f) continue;  // C is not read
        if (!emu::device_range_ok(ptrs[i], extent(lays[i])))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "operand %c (%p, %llux%llu ld %lld, batch %d stride %lld) is not inside one device buffer",
                       "ABCD"[i], ptrs[i], (unsigned long long)lays[i]->rows, (unsigned long long)lays[i]->cols,
                       (long long)lays[i]->ld, lays[i]->batch, (long long)lays[i]->stride);
    }
    if (C == D && (lc->ld != lo->ld || lc->stride != lo->stride))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "in place (C == D) with different C and D layouts");
    uint64_t kind = kAlgoOk, delay_ms = 0;
    if (algo) {
        if (algo->data[0] != kAlgoMagic) return bad(CUBLAS_STATUS_INVALID_VALUE, "algo not from the heuristic");
        for (int i = 0; i < 4; i++)
            if ((uintptr_t)ptrs[i] % algo->data[1 + i])
                return bad(CUBLAS_STATUS_INVALID_VALUE, "operand %c at %p is less aligned than the %llu bytes promised to the heuristic",
                           "ABCD"[i], ptrs[i], (unsigned long long)algo->data[1 + i]);
        kind = algo->data[6];
        delay_ms = algo->data[7];
        if (kind == kAlgoFail || (kind == kAlgoNoGelu && (gelu_aux || dgelu_aux)))
            return bad(CUBLAS_STATUS_NOT_SUPPORTED, "candidate %llu of the heuristic's list fails (EMU_CUBLASLT_ALGOS)",
                       (unsigned long long)algo->data[5]);
    }
    if (workspace_bytes && !emu::device_range_ok(workspace, workspace_bytes))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "workspace is not %zu bytes of device memory", workspace_bytes);

    // The call is checked now and reads its host-side arguments now (alpha, beta, the
    // descriptor and layouts: the caller may change or destroy them once it returns); the
    // product is computed when the stream gets to it.
    const cublasLtMatmulDescOpaque_t desc = *d;
    const cublasLtMatrixLayoutOpaque_t LA = *la, LB = *lb, LC = *lc, LO = *lo;
    const bool flip = kind == kAlgoUlp || (kind == kAlgoNoisy && (g_noisy_calls++ & 1));
    emu::report_launch(1, "cublasLtMatmul");  // at least one kernel (cuLaunchKernel)
    emu::enqueue_compute(stream, "cublasLtMatmul", [=]() {
        if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        matmul_run(desc, alpha, A, LA, B, LB, beta, C, LC, D, LO, k, bias, bias_type, gelu_aux, dgelu_aux, aux_type, bgrad,
                   flip);
    });
    return CUBLAS_STATUS_SUCCESS;
}

// The traffic counts (emu.h): every element of a matrix operand once (what a GEMM moves at
// the least; cuBLASLt's kernels may read A or B more than once when they tile it).
static void count_matrix(const void* p, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld, int32_t batch,
                         int64_t stride, int store) {
    const size_t e = type_bytes(t);
    for (int32_t bt = 0; bt < batch; bt++)
        for (uint64_t c = 0; c < cols; c++)
            emu::traffic_range((const char*)p + ((size_t)bt * stride + c * ld) * e, rows * e, store);
}
static void count_layout(const void* p, const cublasLtMatrixLayoutOpaque_t& l, int store) {
    count_matrix(p, l.type, l.rows, l.cols, l.ld, l.batch, l.stride, store);
}

// D = alpha op(A) op(B) + beta C (+ epilogue), on the device thread.
static void matmul_run(const cublasLtMatmulDescOpaque_t& desc, float alpha, const void* A,
                       const cublasLtMatrixLayoutOpaque_t& LA, const void* B, const cublasLtMatrixLayoutOpaque_t& LB,
                       float beta, const void* C, const cublasLtMatrixLayoutOpaque_t& LC, void* D,
                       const cublasLtMatrixLayoutOpaque_t& LO, uint64_t k, bool bias, cudaDataType bias_type,
                       bool gelu_aux, bool dgelu_aux, cudaDataType aux_type, int bgrad, bool flip) {
    const cublasLtMatmulDescOpaque_t* d = &desc;
    const cublasLtMatrixLayoutOpaque_t *la = &LA, *lb = &LB, *lc = &LC, *lo = &LO;
    const uint64_t m = lo->rows, n = lo->cols;
    // op(A) as m rows of k, op(B) as n rows of k (contiguous), then dot products.
    std::vector<float> opa(m * k), opb(n * k);
    for (int32_t bt = 0; bt < lo->batch; bt++) {
        const size_t oa = bt * la->stride, ob = bt * lb->stride, oc = bt * lc->stride, od = bt * lo->stride;
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t p = 0; p < k; p++)
                opa[i * k + p] = load(A, la->type, oa + (d->transa == CUBLAS_OP_N ? i + p * la->ld : p + i * la->ld));
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t p = 0; p < k; p++)
                opb[j * k + p] = load(B, lb->type, ob + (d->transb == CUBLAS_OP_N ? p + j * lb->ld : j + p * lb->ld));
        for (uint64_t j = 0; j < n; j++) {
            for (uint64_t i = 0; i < m; i++) {
                const float* x = &opa[i * k];
                const float* y = &opb[j * k];
                double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                uint64_t p = 0;
                for (; p + 4 <= k; p += 4) {
                    s0 += (double)x[p] * y[p];
                    s1 += (double)x[p + 1] * y[p + 1];
                    s2 += (double)x[p + 2] * y[p + 2];
                    s3 += (double)x[p + 3] * y[p + 3];
                }
                for (; p < k; p++) s0 += (double)x[p] * y[p];
                double v = alpha * ((s0 + s1) + (s2 + s3));
                if (beta != 0.0f) v += beta * (double)load(C, lc->type, oc + i + j * lc->ld);
                if (bias) v += load(d->bias, bias_type, i);
                if (gelu_aux) {
                    store(d->aux, aux_type, i + j * d->aux_ld, v);
                    v = gelu(v);
                }
                if (dgelu_aux) v *= dgelu(load(d->aux, aux_type, i + j * d->aux_ld));
                store(D, lo->type, od + i + j * lo->ld, v);
                if (flip) {  // the "ulp" candidate: the lowest bit of the stored value
                    if (type_bytes(lo->type) == 2) ((uint16_t*)D)[od + i + j * lo->ld] ^= 1u;
                    else ((uint32_t*)D)[od + i + j * lo->ld] ^= 1u;
                }
            }
        }
    }
    // The bias gradient: the rows of op(A) (BGRADA) or columns of op(B) (BGRADB) summed over
    // k, in k order, written (not added) in the output's type.
    if (bgrad) {
        const uint64_t len = bgrad == 'A' ? m : n;
        const std::vector<float>& rows = bgrad == 'A' ? opa : opb;
        void* grad = (void*)d->bias;  // an output here (cublasLt.h: "Bias gradient case: void *")
        for (uint64_t i = 0; i < len; i++) {
            double s = 0;
            for (uint64_t p = 0; p < k; p++) s += rows[i * k + p];
            store(grad, bias_type, i, s);
            if (flip) {
                if (type_bytes(bias_type) == 2) ((uint16_t*)grad)[i] ^= 1u;
                else ((uint32_t*)grad)[i] ^= 1u;
            }
        }
        count_matrix(grad, bias_type, len, 1, (int64_t)len, 1, 0, 1);
    }
    count_layout(A, LA, 0);
    count_layout(B, LB, 0);
    if (beta != 0.0f) count_layout(C, LC, 0);
    count_layout(D, LO, 1);
    if (bias) count_matrix(d->bias, bias_type, m, 1, (int64_t)m, 1, 0, 0);
    if (gelu_aux || dgelu_aux) count_matrix(d->aux, aux_type, m, n, d->aux_ld, 1, 0, gelu_aux ? 1 : 0);
    emu::traffic_flops(2.0 * (double)m * (double)n * (double)k * lo->batch);
    emu::traffic_launch_done();
}
