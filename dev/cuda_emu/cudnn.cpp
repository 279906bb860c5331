// The CPU emulator's fake cuDNN (as cublaslt.cpp fakes cuBLASLt), for --attention cudnn:
// built as a shared library named libcudnn_graph.so.9 (dev/cuda_emu/build.sh, build_fake_cudnn)
// so that train_gpt's own dlopen path and the cudnn-frontend's dynamic loading are the ones a
// GPU run takes. Written from cuDNN's backend API documentation (cudnn_graph.h), not from the
// frontend or our graphs: it INTERPRETS the operation graph it is given.
//   Descriptors: every attribute set is kept (type, count, bytes) and read back as set;
//     attributes cuDNN derives are answered here: the heuristics' results (one engine unless
//     refused), the engine's notes and knobs (none: deterministic, no tensor-core note), the
//     plan's workspace size (kWorkspace bytes, filled with a pattern at execute so that a
//     workspace that is not device memory shows).
//   Operation graph finalize accepts MATMUL, POINTWISE, REDUCTION and RESHAPE (a view: the
//     same offsets through other dims and strides) operations only, and of them the modes
//     listed in pointwise_name() and describe() below; anything else is
//     CUDNN_STATUS_NOT_SUPPORTED with a cudnnGetLastErrorString line naming it.
//   Execute: waits for the emulated stream (the emulator's cudaStreamSynchronize, found in
//     the process: the emulated programs are linked with -rdynamic), then runs the operations
//     in dependency order on the CPU in fp32 (matmul sums and reductions in double): tensors
//     are read and written through their dims and strides; an input dimension of 1 broadcasts,
//     one that divides the output's maps output index i to i / (out / in) (GQA: query head h
//     reads kv head h / group); an output dimension smaller than the iteration space sums over
//     the group (a GQA matmul whose output has the kv heads). Virtual tensors live in host
//     buffers; every value written to a 16-bit tensor (virtual or not) is rounded to it, as
//     the GPU stores it. Pass-by-value tensors are read from the variant pack's host pointer.
// Switches (read at every heuristics query): EMU_CUDNN_REFUSE=1: the heuristics return no
// engine (a cuDNN that does not support the graph: the fallback path of --attention auto).
// EMU_CUDNN_VERSION=N: what cudnnGetVersion says (default 91900, cuDNN 9.19.0: from
// 9.16 on the frontend needs no padding-mask workaround for T % 128 != 0, which the fake does
// not emulate; EMU_CUDNN_VERSION=91500 shows it refused).
// Not emulated (refused where met): CONCAT/RNG/... operations, paddings and ragged
// offsets, the matmul's M/N/K overrides, reductions other than ADD/MAX/MIN/MUL.
#include <cudnn.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

const int64_t kWorkspace = 4096;

// The last error, per thread as cuDNN's.
thread_local char last_error[512];

cudnnStatus_t refuse(cudnnStatus_t st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(last_error, sizeof(last_error), "fake cuDNN (emulator): ");
    vsnprintf(last_error + n, sizeof(last_error) - n, fmt, ap);
    va_end(ap);
    return st;
}

struct Desc;
struct Attr {
    cudnnBackendAttributeType_t type;
    int64_t count;
    std::vector<uint8_t> bytes;                // descriptors: pointers to `refs`
    std::vector<std::shared_ptr<Desc>> refs;   // copies of the descriptors set (see set_attr)
};

struct Desc {
    cudnnBackendDescriptorType_t type;
    bool finalized = false;
    std::map<int, Attr> attrs;
};

size_t elem_size(cudnnBackendAttributeType_t t) {
    switch (t) {
        case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR: case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void*);
        case CUDNN_TYPE_INT64: case CUDNN_TYPE_DOUBLE: return 8;
        case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
        case CUDNN_TYPE_CHAR: return 1;
        case CUDNN_TYPE_FRACTION: return sizeof(cudnnFraction_t);
        case CUDNN_TYPE_FLOAT: return sizeof(float);
        default: return 4;  // int32 and the enums
    }
}

const Attr* find(const Desc* d, int name) {
    auto it = d->attrs.find(name);
    return it == d->attrs.end() ? nullptr : &it->second;
}
template <class V> V get1(const Desc* d, int name, V dflt) {
    const Attr* a = find(d, name);
    if (!a || a->count < 1) return dflt;
    V v;
    memcpy(&v, a->bytes.data(), sizeof(V));
    return v;
}
Desc* child(const Desc* d, int name) { return get1<Desc*>(d, name, nullptr); }
std::vector<int64_t> ints(const Desc* d, int name) {
    const Attr* a = find(d, name);
    std::vector<int64_t> v;
    if (a) v.assign((const int64_t*)a->bytes.data(), (const int64_t*)a->bytes.data() + a->count);
    return v;
}
// A descriptor given as an attribute is copied, as cuDNN does: the caller may destroy its own
// right after (the frontend does). Tensors are therefore told apart by uid, not by address.
void set_attr(Desc* d, int name, cudnnBackendAttributeType_t t, int64_t n, const void* p) {
    Attr& a = d->attrs[name];
    a.type = t;
    a.count = n;
    a.refs.clear();
    a.bytes.assign((const uint8_t*)p, (const uint8_t*)p + n * elem_size(t));
    if (t != CUDNN_TYPE_BACKEND_DESCRIPTOR) return;
    for (int64_t i = 0; i < n; i++) {
        const Desc* src = ((Desc* const*)p)[i];
        a.refs.push_back(src ? std::make_shared<Desc>(*src) : nullptr);
        ((Desc**)a.bytes.data())[i] = a.refs.back().get();
    }
}

// ---------------------------------------------------------------------------------------
// Tensors

struct Tensor {
    int64_t uid = 0;
    cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
    std::vector<int64_t> dims, strides;
    bool is_virtual = false, by_value = false;
    void* data = nullptr;         // device (emulated) or host pointer, or the virtual buffer
    std::vector<float> storage;   // a virtual tensor's values
};

float bf16_to_f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t f_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float round_to(cudnnDataType_t t, float v) {
    if (t == CUDNN_DATA_BFLOAT16) return bf16_to_f(f_to_bf16(v));
    if (t == CUDNN_DATA_HALF) return (float)(_Float16)v;
    return v;
}

bool storable(cudnnDataType_t t) {
    return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_BFLOAT16 || t == CUDNN_DATA_HALF || t == CUDNN_DATA_INT32 ||
           t == CUDNN_DATA_INT64 || t == CUDNN_DATA_BOOLEAN;
}

float load(const Tensor& t, int64_t off) {
    if (t.is_virtual) return t.storage[off];
    const char* p = (const char*)t.data;
    switch (t.dtype) {
        case CUDNN_DATA_BFLOAT16: return bf16_to_f(((const uint16_t*)p)[off]);
        case CUDNN_DATA_HALF: { _Float16 h; memcpy(&h, p + 2 * off, 2); return (float)h; }
        case CUDNN_DATA_INT32: return (float)((const int32_t*)p)[off];
        case CUDNN_DATA_INT64: return (float)((const int64_t*)p)[off];
        case CUDNN_DATA_BOOLEAN: return ((const uint8_t*)p)[off] ? 1.0f : 0.0f;
        default: return ((const float*)p)[off];
    }
}
void store(Tensor& t, int64_t off, float v) {
    v = round_to(t.dtype, v);
    if (t.is_virtual) { t.storage[off] = v; return; }
    char* p = (char*)t.data;
    switch (t.dtype) {
        case CUDNN_DATA_BFLOAT16: ((uint16_t*)p)[off] = f_to_bf16(v); break;
        case CUDNN_DATA_HALF: { _Float16 h = (_Float16)v; memcpy(p + 2 * off, &h, 2); break; }
        case CUDNN_DATA_INT32: ((int32_t*)p)[off] = (int32_t)v; break;
        case CUDNN_DATA_INT64: ((int64_t*)p)[off] = (int64_t)v; break;
        case CUDNN_DATA_BOOLEAN: ((uint8_t*)p)[off] = v != 0.0f; break;
        default: ((float*)p)[off] = v;
    }
}

// Offset in t of the element at `idx` of an iteration space `space` (same rank): a dim of t
// that divides the space's maps i -> i / (space / dim) (1 broadcasts).
int64_t offset(const Tensor& t, const std::vector<int64_t>& idx, const std::vector<int64_t>& space) {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); k++) off += idx[k] / (space[k] / t.dims[k]) * t.strides[k];
    return off;
}
bool maps_onto(const Tensor& t, const std::vector<int64_t>& space) {
    if (t.dims.size() != space.size()) return false;
    for (size_t k = 0; k < space.size(); k++)
        if (t.dims[k] < 1 || space[k] % t.dims[k]) return false;
    return true;
}
// Next index of a row-major iteration over space; false after the last.
bool next(std::vector<int64_t>& idx, const std::vector<int64_t>& space) {
    for (size_t k = idx.size(); k-- > 0;) {
        if (++idx[k] < space[k]) return true;
        idx[k] = 0;
    }
    return false;
}
int64_t span(const Tensor& t) {
    int64_t s = 1;
    for (size_t k = 0; k < t.dims.size(); k++) s += (t.dims[k] - 1) * t.strides[k];
    return s;
}

// Whether two indices of dims reach one offset: sorted by stride, each dimension (of more than
// one element) must step past everything the smaller ones reach.
bool overlaps(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
    std::vector<size_t> k(dims.size());
    for (size_t i = 0; i < k.size(); i++) k[i] = i;
    std::sort(k.begin(), k.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
    int64_t reach = 0;  // the largest offset the dimensions so far reach
    for (size_t i : k) {
        if (dims[i] <= 1) continue;
        if (strides[i] <= reach) return true;
        reach += (dims[i] - 1) * strides[i];
    }
    return false;
}

cudnnStatus_t tensor_of(const Desc* d, Tensor* t) {
    if (!d || d->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return refuse(CUDNN_STATUS_BAD_PARAM, "an operand is not a tensor");
    t->uid = get1<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
    t->dtype = get1<cudnnDataType_t>(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_DATA_FLOAT);
    t->dims = ints(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    t->strides = ints(d, CUDNN_ATTR_TENSOR_STRIDES);
    t->is_virtual = get1<bool>(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, false);
    t->by_value = get1<bool>(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, false);
    if (t->dims.empty() || t->dims.size() != t->strides.size())
        return refuse(CUDNN_STATUS_BAD_PARAM, "tensor %lld: dims and strides differ in rank", (long long)t->uid);
    if (!storable(t->dtype))
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor %lld: data type %d is not emulated", (long long)t->uid,
                      (int)t->dtype);
    // A virtual tensor's strides are a layout hint, and the frontend gives some that overlap
    // (dO * O as [b, h, s, d] with strides {h s d, s d, h d, 1}: h = 1, s = 0 and h = 0,
    // s = 32 meet at T = 64); such a one is stored packed, row-major.
    if (t->is_virtual && overlaps(t->dims, t->strides)) {
        int64_t st = 1;
        for (size_t k = t->dims.size(); k-- > 0;) { t->strides[k] = st; st *= t->dims[k]; }
    }
    if (find(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC))
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, "tensor %lld: ragged offsets are not emulated", (long long)t->uid);
    return CUDNN_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------------------
// Operations: each names its tensors' descriptors; run() evaluates it.

struct Op {
    const Desc* d;
    std::vector<const Desc*> in, out;
};

const char* pointwise_name(cudnnPointwiseMode_t m) {
    switch (m) {
        case CUDNN_POINTWISE_ADD: return "ADD"; case CUDNN_POINTWISE_SUB: return "SUB";
        case CUDNN_POINTWISE_MUL: return "MUL"; case CUDNN_POINTWISE_DIV: return "DIV";
        case CUDNN_POINTWISE_MAX: return "MAX"; case CUDNN_POINTWISE_MIN: return "MIN";
        case CUDNN_POINTWISE_EXP: return "EXP"; case CUDNN_POINTWISE_LOG: return "LOG";
        case CUDNN_POINTWISE_NEG: return "NEG"; case CUDNN_POINTWISE_ABS: return "ABS";
        case CUDNN_POINTWISE_SQRT: return "SQRT"; case CUDNN_POINTWISE_RSQRT: return "RSQRT";
        case CUDNN_POINTWISE_RECIPROCAL: return "RECIPROCAL"; case CUDNN_POINTWISE_IDENTITY: return "IDENTITY";
        case CUDNN_POINTWISE_CMP_EQ: return "CMP_EQ"; case CUDNN_POINTWISE_CMP_NEQ: return "CMP_NEQ";
        case CUDNN_POINTWISE_CMP_GT: return "CMP_GT"; case CUDNN_POINTWISE_CMP_GE: return "CMP_GE";
        case CUDNN_POINTWISE_CMP_LT: return "CMP_LT"; case CUDNN_POINTWISE_CMP_LE: return "CMP_LE";
        case CUDNN_POINTWISE_LOGICAL_AND: return "LOGICAL_AND"; case CUDNN_POINTWISE_LOGICAL_OR: return "LOGICAL_OR";
        case CUDNN_POINTWISE_LOGICAL_NOT: return "LOGICAL_NOT"; case CUDNN_POINTWISE_GEN_INDEX: return "GEN_INDEX";
        case CUDNN_POINTWISE_BINARY_SELECT: return "BINARY_SELECT";
        default: return nullptr;  // not emulated
    }
}

// y = f(x, b, t) for one element (GEN_INDEX is done by the caller).
float pointwise(cudnnPointwiseMode_t m, float x, float b, float t) {
    switch (m) {
        case CUDNN_POINTWISE_ADD: return x + b;
        case CUDNN_POINTWISE_SUB: return x - b;
        case CUDNN_POINTWISE_MUL: return x * b;
        case CUDNN_POINTWISE_DIV: return x / b;
        case CUDNN_POINTWISE_MAX: return fmaxf(x, b);
        case CUDNN_POINTWISE_MIN: return fminf(x, b);
        case CUDNN_POINTWISE_EXP: return expf(x);
        case CUDNN_POINTWISE_LOG: return logf(x);
        case CUDNN_POINTWISE_NEG: return -x;
        case CUDNN_POINTWISE_ABS: return fabsf(x);
        case CUDNN_POINTWISE_SQRT: return sqrtf(x);
        case CUDNN_POINTWISE_RSQRT: return 1.0f / sqrtf(x);
        case CUDNN_POINTWISE_RECIPROCAL: return 1.0f / x;
        case CUDNN_POINTWISE_IDENTITY: return x;
        case CUDNN_POINTWISE_CMP_EQ: return x == b;
        case CUDNN_POINTWISE_CMP_NEQ: return x != b;
        case CUDNN_POINTWISE_CMP_GT: return x > b;
        case CUDNN_POINTWISE_CMP_GE: return x >= b;
        case CUDNN_POINTWISE_CMP_LT: return x < b;
        case CUDNN_POINTWISE_CMP_LE: return x <= b;
        case CUDNN_POINTWISE_LOGICAL_AND: return x != 0 && b != 0;
        case CUDNN_POINTWISE_LOGICAL_OR: return x != 0 || b != 0;
        case CUDNN_POINTWISE_LOGICAL_NOT: return x == 0;
        default: return t != 0 ? x : b;  // BINARY_SELECT: t picks x, else b
    }
}
bool pointwise_binary(cudnnPointwiseMode_t m) {
    return m == CUDNN_POINTWISE_ADD || m == CUDNN_POINTWISE_SUB || m == CUDNN_POINTWISE_MUL || m == CUDNN_POINTWISE_DIV ||
           m == CUDNN_POINTWISE_MAX || m == CUDNN_POINTWISE_MIN || (m >= CUDNN_POINTWISE_CMP_EQ && m <= CUDNN_POINTWISE_CMP_LE) ||
           m == CUDNN_POINTWISE_LOGICAL_AND || m == CUDNN_POINTWISE_LOGICAL_OR;
}

// The operation's tensors (inputs, outputs) and whether the fake can run it.
cudnnStatus_t describe(const Desc* d, Op* op) {
    op->d = d;
    switch (d->type) {
        case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
            if (find(d, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC) ||
                find(d, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC) ||
                find(d, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC))
                return refuse(CUDNN_STATUS_NOT_SUPPORTED, "MATMUL with M/N/K overrides (padding) is not emulated");
            op->in = {child(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC), child(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC)};
            op->out = {child(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC)};
            break;
        case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
            const Desc* pw = child(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
            if (!pw) return refuse(CUDNN_STATUS_BAD_PARAM, "POINTWISE without its pointwise descriptor");
            cudnnPointwiseMode_t m = get1<cudnnPointwiseMode_t>(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_POINTWISE_ADD);
            if (!pointwise_name(m)) return refuse(CUDNN_STATUS_NOT_SUPPORTED, "POINTWISE mode %d is not emulated", (int)m);
            if (m != CUDNN_POINTWISE_GEN_INDEX) op->in.push_back(child(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC));
            if (pointwise_binary(m) || m == CUDNN_POINTWISE_BINARY_SELECT)
                op->in.push_back(child(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC));
            if (m == CUDNN_POINTWISE_BINARY_SELECT) op->in.push_back(child(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC));
            if (m == CUDNN_POINTWISE_GEN_INDEX) op->in.push_back(child(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC));
            op->out = {child(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC)};
            break;
        }
        case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
            const Desc* rd = child(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
            cudnnReduceTensorOp_t r = get1<cudnnReduceTensorOp_t>(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_REDUCE_TENSOR_ADD);
            if (!rd || (r != CUDNN_REDUCE_TENSOR_ADD && r != CUDNN_REDUCE_TENSOR_MAX && r != CUDNN_REDUCE_TENSOR_MIN &&
                        r != CUDNN_REDUCE_TENSOR_MUL))
                return refuse(CUDNN_STATUS_NOT_SUPPORTED, "REDUCTION operator %d is not emulated", (int)r);
            op->in = {child(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC)};
            op->out = {child(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC)};
            break;
        }
        case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
            op->in = {child(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC)};
            op->out = {child(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC)};
            break;
        default:
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, "operation descriptor type %d is not emulated", (int)d->type);
    }
    for (size_t i = 0; i < op->in.size(); i++)
        if (!op->in[i])
            return refuse(CUDNN_STATUS_BAD_PARAM, "operation type %d (pointwise mode %d) lacks input %zu", (int)d->type,
                          d->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR
                              ? (int)get1<cudnnPointwiseMode_t>(child(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
                                                                CUDNN_ATTR_POINTWISE_MODE, CUDNN_POINTWISE_ADD)
                              : -1,
                          i);
    if (!op->out[0]) return refuse(CUDNN_STATUS_BAD_PARAM, "an operation lacks its output tensor");
    return CUDNN_STATUS_SUCCESS;
}

// Runs op with its tensors resolved (tens: by descriptor).
int64_t uid_of(const Desc* d) { return get1<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0); }

cudnnStatus_t run(const Op& op, std::map<int64_t, Tensor>& tens) {
    Tensor& y = tens.at(uid_of(op.out[0]));
    std::vector<Tensor*> in;
    for (const Desc* d : op.in) in.push_back(&tens.at(uid_of(d)));
    if (op.d->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        // C[..., M, N] = sum_k A[..., M, k] B[..., k, N]; the batch space is the largest dims.
        const Tensor &A = *in[0], &Bt = *in[1];
        const size_t r = y.dims.size();
        if (A.dims.size() != r || Bt.dims.size() != r || r < 2)
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, "MATMUL operands of different ranks");
        const int64_t M = y.dims[r - 2], N = y.dims[r - 1], K = A.dims[r - 1];
        if (A.dims[r - 2] != M || Bt.dims[r - 2] != K || Bt.dims[r - 1] != N)
            return refuse(CUDNN_STATUS_BAD_PARAM, "MATMUL shapes do not agree");
        std::vector<int64_t> space(r);
        for (size_t k = 0; k + 2 < r; k++) space[k] = std::max(std::max(A.dims[k], Bt.dims[k]), y.dims[k]);
        space[r - 2] = M;
        space[r - 1] = N;
        for (size_t k = 0; k + 2 < r; k++)
            if (space[k] % A.dims[k] || space[k] % Bt.dims[k] || space[k] % y.dims[k])
                return refuse(CUDNN_STATUS_NOT_SUPPORTED, "MATMUL batch dims %lld, %lld -> %lld do not broadcast",
                              (long long)A.dims[k], (long long)Bt.dims[k], (long long)y.dims[k]);
        // Sums in double; an output batch smaller than the space sums its group.
        std::vector<double> acc((size_t)span(y), 0.0);
        std::vector<int64_t> idx(r, 0), ia(r), ib(r);
        std::vector<int64_t> sa = space, sb = space;
        sa[r - 1] = K;
        sb[r - 2] = K;
        do {
            double s = 0.0;
            ia = idx;
            ib = idx;
            for (int64_t k = 0; k < K; k++) {
                ia[r - 1] = k;
                ib[r - 2] = k;
                s += (double)load(A, offset(A, ia, sa)) * (double)load(Bt, offset(Bt, ib, sb));
            }
            acc[offset(y, idx, space)] += s;
        } while (next(idx, space));
        std::fill(idx.begin(), idx.end(), 0);
        do store(y, offset(y, idx, y.dims), (float)acc[offset(y, idx, y.dims)]); while (next(idx, y.dims));
        return CUDNN_STATUS_SUCCESS;
    }
    if (op.d->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {
        // The same elements seen through other dims and strides (the frontend's transposes):
        // y's element at offset o is x's at offset o.
        const Tensor& x = *in[0];
        if (span(y) > span(x)) return refuse(CUDNN_STATUS_NOT_SUPPORTED, "RESHAPE %lld -> %lld reaches past its input",
                                            (long long)x.uid, (long long)y.uid);
        std::vector<int64_t> idx(y.dims.size(), 0);
        do {
            const int64_t off = offset(y, idx, y.dims);
            store(y, off, load(x, off));
        } while (next(idx, y.dims));
        return CUDNN_STATUS_SUCCESS;
    }
    if (op.d->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        const Tensor& x = *in[0];
        const Desc* rd = child(op.d, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
        cudnnReduceTensorOp_t r = get1<cudnnReduceTensorOp_t>(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_REDUCE_TENSOR_ADD);
        if (!maps_onto(y, x.dims)) return refuse(CUDNN_STATUS_BAD_PARAM, "REDUCTION output does not divide its input");
        const double init = r == CUDNN_REDUCE_TENSOR_ADD ? 0.0 : r == CUDNN_REDUCE_TENSOR_MUL ? 1.0
                          : r == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY : INFINITY;
        std::vector<double> acc((size_t)span(y), init);
        std::vector<int64_t> idx(x.dims.size(), 0);
        do {
            double v = load(x, offset(x, idx, x.dims));
            double& a = acc[offset(y, idx, x.dims)];
            if (r == CUDNN_REDUCE_TENSOR_ADD) a += v;
            else if (r == CUDNN_REDUCE_TENSOR_MUL) a *= v;
            else if (r == CUDNN_REDUCE_TENSOR_MAX) a = v > a ? v : a;
            else a = v < a ? v : a;
        } while (next(idx, x.dims));
        std::fill(idx.begin(), idx.end(), 0);
        do store(y, offset(y, idx, y.dims), (float)acc[offset(y, idx, y.dims)]); while (next(idx, y.dims));
        return CUDNN_STATUS_SUCCESS;
    }
    // POINTWISE over y's dims; inputs broadcast onto them.
    const Desc* pw = child(op.d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
    cudnnPointwiseMode_t m = get1<cudnnPointwiseMode_t>(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_POINTWISE_ADD);
    for (Tensor* t : in)
        if (!maps_onto(*t, y.dims))
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, "POINTWISE %s: input %lld does not broadcast onto output %lld",
                          pointwise_name(m), (long long)t->uid, (long long)y.uid);
    const int64_t axis = get1<int64_t>(pw, CUDNN_ATTR_POINTWISE_AXIS, 0);
    if (m == CUDNN_POINTWISE_GEN_INDEX && (axis < 0 || axis >= (int64_t)y.dims.size()))
        return refuse(CUDNN_STATUS_BAD_PARAM, "GEN_INDEX axis %lld out of range", (long long)axis);
    std::vector<int64_t> idx(y.dims.size(), 0);
    do {
        float x = 0, b = 0, t = 0;
        if (m == CUDNN_POINTWISE_GEN_INDEX) x = (float)idx[axis];
        else {
            x = load(*in[0], offset(*in[0], idx, y.dims));
            if (in.size() > 1) b = load(*in[1], offset(*in[1], idx, y.dims));
            if (in.size() > 2) t = load(*in[2], offset(*in[2], idx, y.dims));
            x = pointwise(m, x, b, t);
        }
        store(y, offset(y, idx, y.dims), x);
    } while (next(idx, y.dims));
    return CUDNN_STATUS_SUCCESS;
}

// The operations of a graph, each checked.
cudnnStatus_t graph_ops(const Desc* g, std::vector<Op>* ops) {
    const Attr* a = find(g, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!a || a->count < 1) return refuse(CUDNN_STATUS_BAD_PARAM, "an operation graph without operations");
    for (int64_t i = 0; i < a->count; i++) {
        Op op;
        cudnnStatus_t st = describe(((Desc* const*)a->bytes.data())[i], &op);
        if (st != CUDNN_STATUS_SUCCESS) return st;
        ops->push_back(op);
    }
    return CUDNN_STATUS_SUCCESS;
}

// The emulator's cudaStreamSynchronize (C++ linkage in dev/cuda_emu/emu.cpp), from the process.
typedef int (*StreamSync)(void*);
StreamSync emulator_sync() {
    return (StreamSync)dlsym(RTLD_DEFAULT, "_Z21cudaStreamSynchronizeP11CUstream_st");
}

cudnnStatus_t execute(void* stream, const Desc* plan, const Desc* pack) {
    const Desc* cfg = child(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    const Desc* eng = cfg ? child(cfg, CUDNN_ATTR_ENGINECFG_ENGINE) : nullptr;
    const Desc* g = eng ? child(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH) : nullptr;
    if (!g) return refuse(CUDNN_STATUS_BAD_PARAM, "the plan has no engine config / engine / operation graph");
    std::vector<Op> ops;
    cudnnStatus_t st = graph_ops(g, &ops);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    // uid -> pointer from the variant pack
    std::vector<int64_t> uids = ints(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const Attr* ptrs = find(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    if (!ptrs || ptrs->count != (int64_t)uids.size()) return refuse(CUDNN_STATUS_BAD_PARAM, "variant pack: uids and pointers differ");
    std::map<int64_t, void*> bound;
    for (size_t i = 0; i < uids.size(); i++) bound[uids[i]] = ((void* const*)ptrs->bytes.data())[i];
    void* ws = get1<void*>(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, nullptr);
    if (!ws) return refuse(CUDNN_STATUS_BAD_PARAM, "the plan needs %lld bytes of workspace, the variant pack has none",
                           (long long)kWorkspace);
    StreamSync sync = emulator_sync();
    if (!sync) return refuse(CUDNN_STATUS_INTERNAL_ERROR, "the emulator's cudaStreamSynchronize is not in this process "
                                                        "(link the emulated program with -rdynamic)");
    if (sync(stream) != 0) return refuse(CUDNN_STATUS_EXECUTION_FAILED, "cudaStreamSynchronize failed");
    memset(ws, 0xa5, (size_t)kWorkspace);  // writes fault (guard zones) unless it is device memory of that size
    std::map<int64_t, Tensor> tens;  // by uid
    for (const Op& op : ops)
        for (int io = 0; io < 2; io++)
            for (const Desc* d : io ? op.out : op.in) {
                if (tens.count(uid_of(d))) continue;
                Tensor t;
                if ((st = tensor_of(d, &t)) != CUDNN_STATUS_SUCCESS) return st;
                if (t.is_virtual) t.storage.assign((size_t)span(t), NAN);
                else {
                    auto it = bound.find(t.uid);
                    if (it == bound.end() || !it->second)
                        return refuse(CUDNN_STATUS_BAD_PARAM, "tensor %lld is not in the variant pack", (long long)t.uid);
                    t.data = it->second;  // by value: a host pointer to the value, read the same way
                }
                tens[t.uid] = std::move(t);
            }
    // Dependency order: an operation runs once every virtual input has been written.
    std::set<int64_t> ready;
    for (auto& [uid, t] : tens) if (!t.is_virtual) ready.insert(uid);
    std::vector<bool> done(ops.size(), false);
    for (size_t n_done = 0; n_done < ops.size();) {
        bool progress = false;
        for (size_t i = 0; i < ops.size(); i++) {
            if (done[i]) continue;
            bool ok = true;
            for (const Desc* d : ops[i].in) ok = ok && ready.count(uid_of(d));
            if (!ok) continue;
            if ((st = run(ops[i], tens)) != CUDNN_STATUS_SUCCESS) return st;
            ready.insert(uid_of(ops[i].out[0]));
            done[i] = true;
            n_done++;
            progress = true;
        }
        if (!progress) return refuse(CUDNN_STATUS_BAD_PARAM, "the operation graph has a cycle or an unwritten virtual tensor");
    }
    return CUDNN_STATUS_SUCCESS;
}

struct Handle {
    void* stream = nullptr;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// The exported API

extern "C" {

size_t cudnnGetVersion(void) {
    const char* v = getenv("EMU_CUDNN_VERSION");
    return v && v[0] ? (size_t)strtoull(v, NULL, 10) : 91900;
}
size_t cudnnGetCudartVersion(void) { return 13000; }
size_t cudnnGetMaxDeviceVersion(void) { return 1000; }
const char* cudnnGetErrorString(cudnnStatus_t st) {
    switch (st) {
        case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
        case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
        case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
        case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
        default: return "CUDNN_STATUS_(other)";
    }
}
void cudnnGetLastErrorString(char* message, size_t max_size) {
    if (max_size) snprintf(message, max_size, "%s", last_error);
    last_error[0] = 0;
}
cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
    *h = (cudnnHandle_t) new Handle();
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    delete (Handle*)h;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    ((Handle*)h)->stream = (void*)s;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t* s) {
    *s = (cudaStream_t)((Handle*)h)->stream;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* out) {
    Desc* d = new Desc();
    d->type = type;
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
    delete (Desc*)d;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t d) {
    ((Desc*)d)->attrs.clear();
    ((Desc*)d)->finalized = false;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t dv, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
    Desc* d = (Desc*)dv;
    if (d->finalized) return refuse(CUDNN_STATUS_BAD_PARAM, "attribute %d set on a finalized descriptor", (int)name);
    if (count < 0 || (count > 0 && !elements)) return refuse(CUDNN_STATUS_BAD_PARAM, "attribute %d: no elements", (int)name);
    set_attr(d, name, type, count, elements);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t dv) {
    Desc* d = (Desc*)dv;
    if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
        Tensor t;
        cudnnStatus_t st = tensor_of(d, &t);
        if (st != CUDNN_STATUS_SUCCESS) return st;
    } else if (d->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
        std::vector<Op> ops;
        cudnnStatus_t st = graph_ops(d, &ops);
        if (st != CUDNN_STATUS_SUCCESS) return st;
    } else if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) {
        if (!child(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH))
            return refuse(CUDNN_STATUS_BAD_PARAM, "heuristics without an operation graph");
    } else if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
        if (!child(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG))
            return refuse(CUDNN_STATUS_BAD_PARAM, "execution plan without an engine config");
    } else if (d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
        if (get1<int64_t>(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, 0) != 0)
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, "engine %lld does not exist (the fake has engine 0 only)",
                          (long long)get1<int64_t>(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, 0));
    }
    d->finalized = true;
    return CUDNN_STATUS_SUCCESS;
}

// Copies src's attributes into the caller's descriptor dst (a get of a descriptor-typed
// attribute fills descriptors the caller created).
static void fill(Desc* dst, const Desc* src) {
    dst->type = src->type;
    dst->attrs = src->attrs;
    dst->finalized = src->finalized;
}

static cudnnStatus_t answer(cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* out,
                            const void* values, int64_t n) {
    if (count) *count = n;
    if (out && requested > 0) memcpy(out, values, (size_t)(std::min(requested, n) * (int64_t)elem_size(type)));
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const dv, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* elements) {
    Desc* d = (Desc*)dv;
    switch ((int)name) {  // what cuDNN derives
        case CUDNN_ATTR_ENGINEHEUR_RESULTS: {
            const char* refuse_env = getenv("EMU_CUDNN_REFUSE");
            if (refuse_env && !strcmp(refuse_env, "1")) {
                refuse(CUDNN_STATUS_NOT_SUPPORTED, "EMU_CUDNN_REFUSE=1: no engine supports this graph");
                if (count) *count = 0;
                return CUDNN_STATUS_SUCCESS;
            }
            if (count) *count = 1;
            if (requested >= 1 && elements) {
                Desc* cfg = ((Desc**)elements)[0];
                Desc engine, *eng = &engine;  // copied into the config (set_attr)
                eng->type = CUDNN_BACKEND_ENGINE_DESCRIPTOR;
                Desc* g = child(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
                set_attr(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
                int64_t zero = 0;
                set_attr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &zero);
                eng->finalized = true;
                Desc* e = eng;
                cfg->type = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
                cfg->attrs.clear();
                set_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e);
                cfg->finalized = true;
            }
            return CUDNN_STATUS_SUCCESS;
        }
        case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: {
            int64_t one = 1;
            return answer(type, requested, count, elements, &one, 1);
        }
        case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
        case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
            return answer(type, requested, count, elements, &kWorkspace, 1);
        case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
        case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
        case CUDNN_ATTR_ENGINE_KNOB_INFO:
        case CUDNN_ATTR_ENGINE_LAYOUT_INFO:
        case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES:
        case CUDNN_ATTR_ENGINECFG_INTERMEDIATE_INFO:
        case CUDNN_ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS:
        case CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS:
            if (!find(d, name)) return answer(type, requested, count, elements, nullptr, 0);
            break;
        case CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION: {
            static const char json[] = "{\"engine\": \"emulated\"}";
            return answer(type, requested, count, elements, json, (int64_t)sizeof(json));
        }
        default: break;
    }
    const Attr* a = find(d, name);
    if (!a) return refuse(CUDNN_STATUS_NOT_SUPPORTED, "attribute %d of descriptor type %d is not set or not emulated",
                          (int)name, (int)d->type);
    if (count) *count = a->count;
    if (!elements || requested <= 0) return CUDNN_STATUS_SUCCESS;
    const int64_t n = std::min(requested, a->count);
    if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        for (int64_t i = 0; i < n; i++) fill(((Desc**)elements)[i], ((Desc* const*)a->bytes.data())[i]);
        return CUDNN_STATUS_SUCCESS;
    }
    memcpy(elements, a->bytes.data(), (size_t)(n * (int64_t)elem_size(a->type)));
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
    return execute(((Handle*)h)->stream, (const Desc*)plan, (const Desc*)pack);
}

}  // extern "C"
