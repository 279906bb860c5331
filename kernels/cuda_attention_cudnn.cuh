// --attention cudnn: cuDNN's fused scaled-dot-product attention (SDPA), loaded at run time.
// The layouts and the contract are kernels/cuda_attention.cuh's (packed qkv [B,T,QW] with GQA,
// out [B,T,C], lse [B,NH,T] fp32 natural-log, dqkv overwritten); this header is the plain C
// interface of kernels/cuda_attention_cudnn.cpp, the one C++ translation unit that includes
// NVIDIA's header-only cudnn-frontend (pinned: scripts/setup.sh) and builds its SDPA graphs.
// Nothing of cuDNN is linked: the frontend's dynamic loading looks every backend function up
// in the library this file dlopens, so a build or a machine without cuDNN still trains with
// flash or cublas.
//
// Where the library comes from (first that applies; README "Attention"):
//   1. FSDP_CUDNN_LIB=PATH: that file only (a missing or wrong file: unavailable, no fallback
//      to another copy, so what a run uses is what it was told);
//   2. libcudnn_graph.so.9 through the normal loader path (LD_LIBRARY_PATH, rpath, ldconfig).
// PyTorch's pip wheel (nvidia-cudnn-cu13) is not searched from here: scripts that want it set
// FSDP_CUDNN_LIB to its lib/libcudnn_graph.so.9.
// The frontend also dlopens the CUDA runtime (libcudart.so.13 or .12, or the file named by its
// own CUDNN_FRONTEND_CUDART_LIB_NAME) for the few runtime calls it makes itself: without one
// the library is reported unavailable too.
//
// Every function reports failure as a non-zero (or NULL) return and one line in `why`; none
// exits. The forward and backward run on `stream`; the graph of a shape and direction is built
// on its first use and kept in the context (build is slow; execution is not), and so is a
// shape cuDNN refuses (the sampler's T = 1, for one: "s_q = s_kv = 1 is not supported").
#ifndef FSDP_KERNELS_CUDA_ATTENTION_CUDNN_CUH
#define FSDP_KERNELS_CUDA_ATTENTION_CUDNN_CUH

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CudnnAttention CudnnAttention;

// The device memory the context's one workspace comes from (it grows when a new graph needs
// more): the caller's allocator, so that this file calls no CUDA runtime function itself.
typedef struct {
    void* (*alloc)(void* ctx, size_t bytes);  // NULL on failure
    void (*release)(void* ctx, void* ptr);    // after the stream's work that used ptr is done
    void* ctx;
} CudnnAllocator;

// Loads the library (the search order above) and creates a cuDNN handle. NULL, with the reason
// in why, when cuDNN cannot be used on this machine.
CudnnAttention* cudnn_attention_create(const CudnnAllocator* allocator, char* why, size_t why_len);
void cudnn_attention_destroy(CudnnAttention* ca);
// "libcudnn_graph.so.9 (PATH), cuDNN 9.19.0": what was loaded, for the run's startup line.
const char* cudnn_attention_describe(const CudnnAttention* ca);
// Builds (once per shape; cached) the forward and backward graphs of this shape and their
// plans, sizing the workspace: 0, or -1 with cuDNN's reason (an unsupported shape, head size,
// GPU, or no deterministic backward). fp16: the 16-bit type is fp16 (else bf16).
int cudnn_attention_prepare(CudnnAttention* ca, int B, int T, int NH, int KVH, int hs, int fp16, char* why,
                            size_t why_len);
// Bytes of device workspace the context holds (0 before the first prepare).
size_t cudnn_attention_workspace_bytes(const CudnnAttention* ca);
// out[B,T,C], lse[B,NH,T] from qkv[B,T,QW] (C = NH*hs, QW = C + 2*KVH*hs): 0 done; 1 cuDNN
// does not take this shape (why says why; nothing ran), 2 the same again (why untouched);
// -1 failure (why).
int cudnn_attention_forward(CudnnAttention* ca, void* out, float* lse, const void* qkv, int B, int T, int NH,
                            int KVH, int hs, int fp16, void* stream, char* why, size_t why_len);
// dqkv[B,T,QW] (overwritten) from dout[B,T,C], qkv, out, lse; deterministic. Returns as the
// forward.
int cudnn_attention_backward(CudnnAttention* ca, void* dqkv, const void* dout, const void* qkv, const void* out,
                             const float* lse, int B, int T, int NH, int KVH, int hs, int fp16, void* stream,
                             char* why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif  // FSDP_KERNELS_CUDA_ATTENTION_CUDNN_CUH
