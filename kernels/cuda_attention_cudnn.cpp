// --attention cudnn: cuDNN's fused SDPA through NVIDIA's header-only cudnn-frontend, with the
// library loaded at run time (interface, search order and contract: cuda_attention_cudnn.cuh).
// The one C++ translation unit that includes the frontend: compiled with the host compiler
// against cudnn.h and the frontend's headers (Makefile: CUDNN_INC, CUDNN_FE_INC); where either
// is missing it is compiled with FSDP_NO_CUDNN and every create says so.
//
// Graphs (the frontend's SDPA nodes, as its samples and llm.c's cudnn_att.cpp build them): the
// packed qkv [B,T,QW] is read in place through strides: Q as [B,NH,T,hs] with strides
// {T*QW, hs, QW, 1} at qkv, K and V as [B,KVH,T,hs] at qkv + C and qkv + C + KVH*hs (the
// frontend's GQA: query head h uses kv head h / (NH/KVH), as ours); O [B,NH,T,hs] strides
// {T*C, hs, C, 1}; Stats [B,NH,T,1] fp32, packed, which is our lse [B,NH,T]: cuDNN's softmax
// statistic is max + log(sum exp(s - max)) of the scaled scores s, the natural-log LSE that
// our kernels write, so the two are exchangeable (test_attention_cuda checks cudnn forward +
// flash backward). dQ, dK, dV are written at the same offsets of dqkv: the three cover all QW
// columns, so dqkv is overwritten whole. Causal (top-left diagonal), scale 1/sqrt(hs) passed
// by value, fp32 intermediates and compute, the backward with the frontend's deterministic
// algorithm (refused where the library has none: prepare fails, auto falls back).
#include "kernels/cuda_attention_cudnn.cuh"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FSDP_NO_CUDNN

struct CudnnAttention { int unused; };
CudnnAttention* cudnn_attention_create(const CudnnAllocator*, char* why, size_t why_len) {
    snprintf(why, why_len, "this train_gpt was built without cuDNN headers (cudnn.h and the cudnn-frontend: "
             "scripts/setup.sh installs the frontend; make CUDNN_INC=DIR names cudnn.h's folder)");
    return NULL;
}
void cudnn_attention_destroy(CudnnAttention*) {}
const char* cudnn_attention_describe(const CudnnAttention*) { return "none"; }
int cudnn_attention_prepare(CudnnAttention*, int, int, int, int, int, int, char* why, size_t why_len) {
    snprintf(why, why_len, "built without cuDNN");
    return -1;
}
size_t cudnn_attention_workspace_bytes(const CudnnAttention*) { return 0; }
int cudnn_attention_forward(CudnnAttention*, void*, float*, const void*, int, int, int, int, int, int, void*, char* why,
                            size_t why_len) {
    snprintf(why, why_len, "built without cuDNN");
    return -1;
}
int cudnn_attention_backward(CudnnAttention*, void*, const void*, const void*, const void*, const float*, int, int, int,
                             int, int, int, void*, char* why, size_t why_len) {
    snprintf(why, why_len, "built without cuDNN");
    return -1;
}

#else

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

namespace fe = cudnn_frontend;

// The frontend's dynamic loading looks every backend symbol up in this handle: its one global,
// a requirement of the frontend (defined by its user), set once when the library is loaded.
// dlopen of the same file returns the same handle, so a second context agrees with the first.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

// The uids of the graphs' tensors (the variant pack's keys).
enum { UID_Q = 1, UID_K, UID_V, UID_SCALE, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

typedef std::tuple<int, int, int, int, int, int> ShapeKey;  // B, T, NH, KVH, hs, fp16
// A shape's graph of one direction: built on first use; a refusal is kept too (with its
// reason), so that a shape cuDNN does not take costs one build attempt, not one per call.
struct DirGraph {
    std::shared_ptr<fe::graph::Graph> g;
    std::string refused;
};
struct ShapeGraphs {
    DirGraph dir[2];  // forward, backward
};

struct CudnnAttention {
    void* lib;
    cudnnHandle_t handle;
    CudnnAllocator allocator;
    void* workspace;  // one allocation, grown to the largest graph's need
    size_t workspace_bytes;
    std::map<ShapeKey, ShapeGraphs> graphs;  // built once per shape (the slow part)
    char description[512];
    // Resolved here (not through the frontend) so that a library without them is refused
    // before the frontend's first call.
    size_t (*get_version)(void);
    cudnnStatus_t (*create)(cudnnHandle_t*);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    const char* (*error_string)(cudnnStatus_t);
    void (*last_error)(char*, size_t);
};

static int fail(char* why, size_t why_len, const std::string& msg) {
    // One line: the frontend's messages may span several.
    std::string line = msg;
    for (char& ch : line) if (ch == '\n' || ch == '\r') ch = ' ';
    snprintf(why, why_len, "%s", line.c_str());
    return -1;
}

// cuDNN's own account of the last failure where the library has one, else the status name.
static std::string status_text(const CudnnAttention* ca, cudnnStatus_t st) {
    std::string s = ca->error_string ? ca->error_string(st) : "status " + std::to_string((int)st);
    if (ca->last_error) {
        char buf[512] = "";
        ca->last_error(buf, sizeof(buf));
        if (buf[0]) s += std::string(": ") + buf;
    }
    return s;
}

template <class F>
static bool resolve(void* lib, const char* name, F* fn) {
    *fn = reinterpret_cast<F>(dlsym(lib, name));
    return *fn != nullptr;
}

extern "C" CudnnAttention* cudnn_attention_create(const CudnnAllocator* allocator, char* why, size_t why_len) {
    const char* env = getenv("FSDP_CUDNN_LIB");
    const char* name = env && env[0] ? env : "libcudnn_graph.so.9";
    dlerror();
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = dlerror();
        fail(why, why_len, std::string("cannot load ") + name + (env && env[0] ? " (FSDP_CUDNN_LIB)" : "") + ": " +
                               (e ? e : "unknown error"));
        return NULL;
    }
    CudnnAttention* ca = new CudnnAttention();
    ca->lib = lib;
    ca->allocator = *allocator;
    const char* missing = NULL;
    if (!resolve(lib, "cudnnGetVersion", &ca->get_version)) missing = "cudnnGetVersion";
    else if (!resolve(lib, "cudnnCreate", &ca->create)) missing = "cudnnCreate";
    else if (!resolve(lib, "cudnnDestroy", &ca->destroy)) missing = "cudnnDestroy";
    else if (!resolve(lib, "cudnnSetStream", &ca->set_stream)) missing = "cudnnSetStream";
    else if (!resolve(lib, "cudnnGetErrorString", &ca->error_string)) missing = "cudnnGetErrorString";
    resolve(lib, "cudnnGetLastErrorString", &ca->last_error);  // cuDNN 9; optional
    if (missing) {
        fail(why, why_len, std::string(name) + " is not a cuDNN graph library (no " + missing + ")");
        dlclose(lib);
        delete ca;
        return NULL;
    }
    const size_t version = ca->get_version();
    if (version < 90000) {
        fail(why, why_len, std::string(name) + " is cuDNN " + std::to_string(version) + ", SDPA here needs cuDNN 9");
        dlclose(lib);
        delete ca;
        return NULL;
    }
    fe::cudnn_dlhandle = lib;
    try {  // the frontend's own runtime calls need a loadable libcudart (it throws otherwise)
        if (fe::detail::get_cuda_runtime_version() == 0) throw std::runtime_error("cudaRuntimeGetVersion failed");
    } catch (const std::exception& e) {
        fail(why, why_len, std::string("the cuDNN frontend cannot use the CUDA runtime: ") + e.what() +
                               " (set CUDNN_FRONTEND_CUDART_LIB_NAME or LD_LIBRARY_PATH)");
        delete ca;  // the library stays loaded: the frontend's symbol lookups are static
        return NULL;
    }
    cudnnStatus_t st = ca->create(&ca->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        fail(why, why_len, std::string("cudnnCreate failed: ") + status_text(ca, st));
        delete ca;
        return NULL;
    }
    Dl_info info;
    const char* path = dladdr((void*)ca->get_version, &info) && info.dli_fname ? info.dli_fname : name;
    snprintf(ca->description, sizeof(ca->description), "%s, cuDNN %zu.%zu.%zu", path, version / 10000,
             version / 100 % 100, version % 100);
    return ca;
}

extern "C" void cudnn_attention_destroy(CudnnAttention* ca) {
    if (!ca) return;
    ca->graphs.clear();
    if (ca->workspace) ca->allocator.release(ca->allocator.ctx, ca->workspace);
    ca->destroy(ca->handle);
    delete ca;  // not dlclose: the frontend keeps the symbols it looked up
}

extern "C" const char* cudnn_attention_describe(const CudnnAttention* ca) { return ca->description; }
extern "C" size_t cudnn_attention_workspace_bytes(const CudnnAttention* ca) { return ca->workspace_bytes; }

// Q, K, V of the packed qkv as the frontend's [B,H,T,hs] tensors (strides in elements).
static std::shared_ptr<fe::graph::Tensor_attributes> qkv_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                                 int B, int H, int T, int hs, int64_t QW) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({B, H, T, hs})
                        .set_stride({T * QW, hs, QW, 1}));
}

static std::shared_ptr<fe::graph::Graph> new_graph(int fp16) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fp16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

static std::shared_ptr<fe::graph::Tensor_attributes> scale_tensor(fe::graph::Graph& g) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name("attn_scale")
                        .set_uid(UID_SCALE)
                        .set_dim({1, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_is_pass_by_value(true)
                        .set_data_type(fe::DataType_t::FLOAT));
}

static std::shared_ptr<fe::graph::Graph> forward_graph(int B, int T, int NH, int KVH, int hs, int fp16) {
    const int64_t C = (int64_t)NH * hs, QW = C + 2 * (int64_t)KVH * hs;
    auto g = new_graph(fp16);
    auto Q = qkv_tensor(*g, "Q", UID_Q, B, NH, T, hs, QW);
    auto K = qkv_tensor(*g, "K", UID_K, B, KVH, T, hs, QW);
    auto V = qkv_tensor(*g, "V", UID_V, B, KVH, T, hs, QW);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("sdpa_forward")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(scale_tensor(*g));
    auto [O, stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(UID_O).set_dim({B, NH, T, hs}).set_stride({T * C, hs, C, 1});
    stats->set_output(true)
        .set_uid(UID_STATS)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, NH, T, 1})
        .set_stride({(int64_t)NH * T, T, 1, 1});
    return g;
}

static std::shared_ptr<fe::graph::Graph> backward_graph(int B, int T, int NH, int KVH, int hs, int fp16) {
    const int64_t C = (int64_t)NH * hs, QW = C + 2 * (int64_t)KVH * hs;
    auto g = new_graph(fp16);
    auto Q = qkv_tensor(*g, "Q", UID_Q, B, NH, T, hs, QW);
    auto K = qkv_tensor(*g, "K", UID_K, B, KVH, T, hs, QW);
    auto V = qkv_tensor(*g, "V", UID_V, B, KVH, T, hs, QW);
    auto O = g->tensor(fe::graph::Tensor_attributes().set_name("O").set_uid(UID_O).set_dim({B, NH, T, hs})
                           .set_stride({T * C, hs, C, 1}));
    auto dO = g->tensor(fe::graph::Tensor_attributes().set_name("dO").set_uid(UID_DO).set_dim({B, NH, T, hs})
                            .set_stride({T * C, hs, C, 1}));
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(UID_STATS)
                               .set_dim({B, NH, T, 1})
                               .set_stride({(int64_t)NH * T, T, 1, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("sdpa_backward")
                    .set_causal_mask(true)
                    .set_deterministic_algorithm(true)
                    .set_attn_scale(scale_tensor(*g));
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
    dQ->set_output(true).set_uid(UID_DQ).set_dim({B, NH, T, hs}).set_stride({T * QW, hs, QW, 1});
    dK->set_output(true).set_uid(UID_DK).set_dim({B, KVH, T, hs}).set_stride({T * QW, hs, QW, 1});
    dV->set_output(true).set_uid(UID_DV).set_dim({B, KVH, T, hs}).set_stride({T * QW, hs, QW, 1});
    return g;
}

// validate, lower to the backend's operation graph, heuristics, plans: the frontend's first
// failure as one line.
static std::string build(CudnnAttention* ca, fe::graph::Graph& g) {
    fe::error_object e = g.validate();
    if (e.is_good()) e = g.build_operation_graph(ca->handle);
    if (e.is_good()) e = g.create_execution_plans({fe::HeurMode_t::A});
    if (e.is_good()) e = g.check_support(ca->handle);
    if (e.is_good()) e = g.build_plans(ca->handle);
    return e.is_good() ? std::string() : e.get_message();
}

// The graph of one direction (0 forward, 1 backward) for a shape, built (and the workspace grown)
// on first use: 0 ready, 1 cuDNN does not support it (why: the reason, said by the first call
// only: 2 after), -1 failure (why).
static int graph_for(CudnnAttention* ca, int dir, int B, int T, int NH, int KVH, int hs, int fp16,
                     fe::graph::Graph** out, char* why, size_t why_len) {
    if (B <= 0 || T <= 0 || NH <= 0 || KVH <= 0 || hs <= 0 || NH % KVH)
        return fail(why, why_len, "bad attention shape B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" +
                                      std::to_string(NH) + " KVH=" + std::to_string(KVH) + " hs=" + std::to_string(hs));
    DirGraph& dg = ca->graphs[ShapeKey(B, T, NH, KVH, hs, fp16)].dir[dir];
    if (dg.g) {
        *out = dg.g.get();
        return 0;
    }
    if (!dg.refused.empty()) return 2;
    std::string err;
    int64_t need = 0;
    try {
        auto g = dir ? backward_graph(B, T, NH, KVH, hs, fp16) : forward_graph(B, T, NH, KVH, hs, fp16);
        err = build(ca, *g);
        if (err.empty()) {
            fe::error_object e = g->get_workspace_size(need);
            if (!e.is_good()) err = "workspace size: " + e.get_message();
        }
        if (err.empty()) dg.g = g;
    } catch (const std::exception& ex) {  // the frontend throws where a backend call fails
        err = ex.what();
    }
    if (!err.empty()) {
        dg.refused = "cuDNN SDPA (" + std::string(fp16 ? "fp16" : "bf16") + ", hs " + std::to_string(hs) + ", " +
                     std::to_string(NH) + "/" + std::to_string(KVH) + " heads, T " + std::to_string(T) + "): " +
                     (dir ? "deterministic backward: " : "forward: ") + err;
        fail(why, why_len, dg.refused);
        return 1;
    }
    if ((size_t)need > ca->workspace_bytes) {
        if (ca->workspace) ca->allocator.release(ca->allocator.ctx, ca->workspace);
        ca->workspace_bytes = 0;
        ca->workspace = ca->allocator.alloc(ca->allocator.ctx, (size_t)need);
        if (!ca->workspace) {
            dg.g.reset();
            return fail(why, why_len, "cannot allocate cuDNN's workspace of " + std::to_string(need) + " bytes");
        }
        ca->workspace_bytes = (size_t)need;
    }
    *out = dg.g.get();
    return 0;
}

extern "C" int cudnn_attention_prepare(CudnnAttention* ca, int B, int T, int NH, int KVH, int hs, int fp16, char* why,
                                       size_t why_len) {
    fe::graph::Graph* g = NULL;
    for (int dir = 0; dir < 2; dir++) {
        int rc = graph_for(ca, dir, B, T, NH, KVH, hs, fp16, &g, why, why_len);
        if (rc == 2) rc = fail(why, why_len, ca->graphs[ShapeKey(B, T, NH, KVH, hs, fp16)].dir[dir].refused);
        if (rc) return -1;
    }
    return 0;
}

static int run(CudnnAttention* ca, fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, void* stream,
               const char* what, char* why, size_t why_len) {
    cudnnStatus_t st = ca->set_stream(ca->handle, (cudaStream_t)stream);
    if (st != CUDNN_STATUS_SUCCESS) return fail(why, why_len, std::string("cudnnSetStream: ") + status_text(ca, st));
    try {
        fe::error_object e = g.execute(ca->handle, pack, ca->workspace);
        if (!e.is_good()) return fail(why, why_len, std::string("cuDNN SDPA ") + what + ": " + e.get_message());
    } catch (const std::exception& ex) {
        return fail(why, why_len, std::string("cuDNN SDPA ") + what + ": " + ex.what());
    }
    return 0;
}

// Bytes per element of the 16-bit type (both are 2): offsets into qkv are in elements.
static char* at(const void* base, int64_t elems) { return (char*)base + elems * 2; }

extern "C" int cudnn_attention_forward(CudnnAttention* ca, void* out, float* lse, const void* qkv, int B, int T,
                                       int NH, int KVH, int hs, int fp16, void* stream, char* why, size_t why_len) {
    fe::graph::Graph* g = NULL;
    const int rc = graph_for(ca, 0, B, T, NH, KVH, hs, fp16, &g, why, why_len);
    if (rc) return rc;
    const int64_t C = (int64_t)NH * hs;
    float scale = 1.0f / sqrtf((float)hs);  // passed by value: read when execute returns
    std::unordered_map<int64_t, void*> pack = {{UID_Q, at(qkv, 0)},
                                               {UID_K, at(qkv, C)},
                                               {UID_V, at(qkv, C + (int64_t)KVH * hs)},
                                               {UID_SCALE, &scale},
                                               {UID_O, out},
                                               {UID_STATS, lse}};
    return run(ca, *g, pack, stream, "forward", why, why_len);
}

extern "C" int cudnn_attention_backward(CudnnAttention* ca, void* dqkv, const void* dout, const void* qkv,
                                        const void* out, const float* lse, int B, int T, int NH, int KVH, int hs,
                                        int fp16, void* stream, char* why, size_t why_len) {
    fe::graph::Graph* g = NULL;
    const int rc = graph_for(ca, 1, B, T, NH, KVH, hs, fp16, &g, why, why_len);
    if (rc) return rc;
    const int64_t C = (int64_t)NH * hs, KV = (int64_t)KVH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, at(qkv, 0)},        {UID_K, at(qkv, C)},       {UID_V, at(qkv, C + KV)},
        {UID_O, (void*)out},        {UID_DO, (void*)dout},     {UID_STATS, (void*)lse},
        {UID_DQ, at(dqkv, 0)},      {UID_DK, at(dqkv, C)},     {UID_DV, at(dqkv, C + KV)},
        {UID_SCALE, &scale}};
    return run(ca, *g, pack, stream, "backward", why, why_len);
}

#endif  // FSDP_NO_CUDNN
