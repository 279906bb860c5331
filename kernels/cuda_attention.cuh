// Causal multi-head self-attention on the GPU, 16-bit storage, FP32 softmax, with
// grouped-query attention (GQA): NH query heads share KVH key/value heads. The CPU twin is
// attention_forward / attention_backward in kernels/cpu_kernels.h; the layouts are the same:
//   hs = C / NH (every head); KVH >= 1, NH % KVH == 0 (else refused); group = NH / KVH;
//   QW = C + 2*KVH*hs (3C when KVH == NH, GPT-2)
//   qkv  [B,T,QW]  (q | k | v): q head h at qkv[b,t, h*hs : (h+1)*hs], k head j at C + j*hs,
//                  v head j at C + KVH*hs + j*hs; query head h uses kv head h / group
//                  (consecutive query heads share one, as Llama's / HF's repeat_kv)
//   out  [B,T,C]   heads concatenated                                (bf16, OVERWRITTEN)
//   lse  [B,NH,T]  log-sum-exp of each row of scaled scores, natural log (fp32, OVERWRITTEN)
//   dqkv [B,T,QW]  gradient w.r.t. qkv; dk, dv of kv head j summed over its group's query
//                  heads (in fp32, rounded once)                     (bf16, OVERWRITTEN)
// Unlike the CPU twin (which accumulates), the backward OVERWRITES every element of dqkv:
// the attention's input gradient is a fresh activation gradient in GPT-2, nothing to add to.
// With KVH == NH every implementation runs exactly the multi-head computation (same
// kernels, grids and operation order: bitwise the results of before GQA existed).
// Scale 1/sqrt(hs) in fp32. Both implementations share this interface (out + lse in
// the forward; the backward takes out, lse, dout and needs nothing else from the forward).
// Every one is deterministic: no atomics; each output element is written by one thread
// after sums in an order fixed by the shapes, so two runs are bitwise equal.
// The 16-bit type is the run's --param-dtype: every function is a template on T16, bf16 or
// fp16 (__half), deduced from the tensors; "bf16" below stands for either, and the flash
// kernels' mma takes .bf16 or .f16 operands accordingly (the same fragments).
//
// The caller owns an AttentionContext (attention_context_init, once, with the GPU current):
// it holds the implementation and the GPU's shared-memory opt-in limit, and its init sets
// the kernels' dynamic shared-memory attribute once; launches make no attribute call or
// device query (a kernel that needs more than the GPU allows is refused at launch with a
// message pointing at --attention cublas). No global or static mutable state.
//
// Four implementations, each in a file of its own:
//   ATTENTION_FLASH (--attention flash): fused kernels on tensor cores, FlashAttention-2's
//     shape, head sizes 64 and 128 (kernels/cuda_attention_flash.cuh).
//   ATTENTION_FLASH_PIPELINED (--attention flash-pipelined): flash pipelined: a forward with
//     128-key tiles at hs 64, a 3-stage cp.async ring, one barrier per tile and S(j+1) issued
//     over softmax(j); flash's backward with its main kernel's tiles in a 3-stage ring and one
//     barrier per step (kernels/cuda_attention_flash_pipelined.cuh); the same head sizes and
//     scratch as flash. Not measured on a GPU yet, so auto does not pick it
//     (scripts/device_check.sh times it beside flash).
//   ATTENTION_CUBLAS (--attention cublas, the reference path for any head size): cuBLASLt GEMMs
//     around a softmax kernel (kernels/cuda_attention_cublas.cuh).
//   ATTENTION_CUDNN (--attention cudnn): cuDNN's fused SDPA, the library loaded at run time
//     (kernels/cuda_attention_cudnn.cuh/.cpp); its context (handle, graphs, workspace) lives
//     in the AttentionContext. Its backward is cuDNN's deterministic algorithm.
// --attention auto's choice (train/device.cuh): cudnn where it loads and builds the run's
// graphs, else flash where the head size allows, else cublas (never flash-pipelined, yet).
// This header is what the caller uses: the implementation's name, the context, the scratch
// sizes, the argument checks and the two entry points, attention_forward_cuda and
// attention_backward_cuda, which dispatch to the implementation.
//
// The caller provides the scratch (device memory, sub-buffers are 256-byte aligned inside
// it) and a MatmulContext (only the cublas path uses it; it may be NULL for flash).
#ifndef FSDP_KERNELS_CUDA_ATTENTION_CUH
#define FSDP_KERNELS_CUDA_ATTENTION_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda_attention_cublas.cuh"
#include "kernels/cuda_attention_cudnn.cuh"
#include "kernels/cuda_attention_flash.cuh"
#include "kernels/cuda_attention_flash_pipelined.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_matmul.cuh"

typedef enum {
    ATTENTION_FLASH = 0,
    ATTENTION_CUBLAS = 1,
    ATTENTION_CUDNN = 2,
    ATTENTION_FLASH_PIPELINED = 3,
    ATTENTION_IMPLS = 4
} AttentionImpl;

static const char* const attention_impl_names[ATTENTION_IMPLS] = {"flash", "cublas", "cudnn", "flash-pipelined"};

// An implementation's name (attention_impl_names) -> its AttentionImpl, else -1.
static inline int attention_impl_from_name(const char* name) {
    for (int i = 0; name && i < ATTENTION_IMPLS; i++) if (strcmp(name, attention_impl_names[i]) == 0) return i;
    return -1;
}
static inline int attention_impl_valid(int impl) { return impl >= 0 && impl < ATTENTION_IMPLS; }
// flash and flash-pipelined: the same head sizes, scratch and shared-memory setup.
static inline bool attention_impl_is_flash(AttentionImpl impl) {
    return impl == ATTENTION_FLASH || impl == ATTENTION_FLASH_PIPELINED;
}
static inline const char* attention_impl_name(AttentionImpl impl) {
    return attention_impl_valid(impl) ? attention_impl_names[impl] : "unknown";
}

// What the caller keeps for the attention kernels (see the top of the file).
typedef struct {
    AttentionImpl impl;
    int smem_optin;          // dynamic shared memory a block may opt into on this GPU (bytes); 0: not initialised
    CudnnAttention* cudnn;   // ATTENTION_CUDNN: the loaded library, its handle, graphs and workspace
} AttentionContext;

// ----------------------------------------------------------------------------
// Scratch and argument checks

// Bytes of scratch attention_forward_cuda needs (0 for flash, flash-pipelined and cudnn, whose
// workspace is its context's own).
static inline size_t attention_forward_scratch_bytes(AttentionImpl impl, int B, int T, int C, int NH) {
    if (impl != ATTENTION_CUBLAS) return 0;
    return attn_cublas_scratch_bytes(4, B, T, C, NH);  // q, k, v, out in [B,NH,T,hs]; S; P
}
// Bytes of scratch attention_backward_cuda needs: flash (and flash-pipelined, whose backward
// has flash's launches and slices) B*NH*T floats (D) and the dQ slices,
// B*C*R floats (R = attn_flash_dq_rows(T), about 4.5 T at T = 1024); cublas B*NH*T*T*6 bytes
// and more. None depends on the kv-head count: D and the dQ slices are per query head, the
// group's dK/dV sums stay in registers (flash) or in the GEMMs
// (cublas, whose k, v, dk, dv copies are sized for KVH == NH, the largest).
static inline size_t attention_backward_scratch_bytes(AttentionImpl impl, int B, int T, int C, int NH) {
    const size_t d_bytes = align_up_256((size_t)B * NH * T * sizeof(float));
    if (impl == ATTENTION_CUDNN) return 0;
    if (attention_impl_is_flash(impl)) return d_bytes + align_up_256((size_t)B * C * attn_flash_dq_rows(T) * sizeof(float));
    return attn_cublas_scratch_bytes(7, B, T, C, NH);  // q, k, v, dout, dq, dk, dv; S/dP; P/dS
}

static inline void attn_check_args(const char* fn, bool backward, const AttentionContext* ac, int B, int T, int C,
                                   int NH, int KVH, size_t scratch_bytes, const void* scratch) {
    CUDA_REQUIRE(ac != NULL, "%s: no AttentionContext", fn);
    const AttentionImpl impl = ac->impl;
    CUDA_REQUIRE(attention_impl_valid(impl), "%s: unknown attention implementation %d", fn, (int)impl);
    CUDA_REQUIRE(impl != ATTENTION_CUDNN || ac->cudnn != NULL, "%s: cuDNN is not loaded in this AttentionContext", fn);
    CUDA_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0,
                 "%s: bad shape B=%d T=%d C=%d NH=%d (C must be a multiple of NH)", fn, B, T, C, NH);
    CUDA_REQUIRE(KVH >= 1 && NH % KVH == 0,
                 "%s: %d kv heads do not divide the %d heads (grouped-query attention needs NH %% KVH == 0 "
                 "and KVH >= 1)", fn, KVH, NH);
    const size_t need = backward ? attention_backward_scratch_bytes(impl, B, T, C, NH)
                                 : attention_forward_scratch_bytes(impl, B, T, C, NH);
    CUDA_REQUIRE(scratch_bytes >= need && (need == 0 || scratch != NULL),
                 "%s: scratch of %zu bytes is too small, %s attention needs %zu", fn, scratch_bytes,
                 attention_impl_name(impl), need);
    if (attention_impl_is_flash(impl)) {
        const int hs = C / NH;
        CUDA_REQUIRE(attention_flash_supports(hs),
                     "%s: %s attention supports head sizes 64 and 128, got %d (C=%d, NH=%d); "
                     "use --attention cublas for other head sizes", fn, attention_impl_name(impl), hs, C, NH);
        CUDA_REQUIRE((long long)B * NH < 65536, "%s: B*NH = %lld exceeds the grid limit 65535", fn, (long long)B * NH);
    }
}

// ----------------------------------------------------------------------------
// Context and entry points

// The cudnn path's dtype flag from the template's 16-bit type.
template <class T16> static inline int attn_is_fp16() { return 0; }
template <> inline int attn_is_fp16<fp16>() { return 1; }

// Prepares the attention kernels of `impl` on the current GPU: queries its opt-in shared
// memory per block and sets the dynamic shared-memory attribute of every kernel of impl that
// fits (both head sizes, both 16-bit types), once. cublas needs nothing; cudnn loads the
// library (ending the run with the reason where it cannot: attention_context_try_cudnn is
// the form that returns). Call again after switching GPUs; attention_context_destroy ends it.
static inline int attn_gpu_major(void) {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major;
}
// The flash kernels' shared-memory opt-in on the current GPU (sm_80+), once per context.
static inline void attn_flash_setup(AttentionContext* ac) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    ac->smem_optin = optin;
    attn_flash_optin_kernels<bf16>(optin);
    attn_flash_optin_kernels<fp16>(optin);
    attn_flash_pl_optin_kernels<bf16>(optin);
    attn_flash_pl_optin_kernels<fp16>(optin);
}

// cuDNN's workspace comes from cudaMalloc through these (the .cpp calls no CUDA runtime).
static void* attn_cudnn_alloc(void*, size_t bytes) {
    void* p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}
static void attn_cudnn_release(void*, void* p) { CUDA_CHECK(cudaFree(p)); }  // cudaFree waits for the GPU

// ATTENTION_CUDNN: loads cuDNN (kernels/cuda_attention_cudnn.cuh's search order) into ac: 0,
// or -1 with the reason in why (ac then holds nothing). The graphs of a shape are built by
// attention_context_prepare or on first use.
static inline int attention_context_try_cudnn(AttentionContext* ac, char* why, size_t why_len) {
    const CudnnAllocator allocator = {attn_cudnn_alloc, attn_cudnn_release, NULL};
    memset(ac, 0, sizeof(*ac));
    ac->cudnn = cudnn_attention_create(&allocator, why, why_len);
    if (!ac->cudnn) return -1;
    ac->impl = ATTENTION_CUDNN;
    if (attn_gpu_major() >= 8) attn_flash_setup(ac);  // for the forwards of shapes cuDNN refuses
    return 0;
}
// Builds ac's graphs for one shape ahead of use, so that a shape cuDNN refuses is known at
// startup (auto falls back; an explicit choice ends the run): 0, or -1 with why. Nothing to do
// for flash and cublas.
static inline int attention_context_prepare(AttentionContext* ac, int B, int T, int C, int NH, int KVH, int fp16,
                                            char* why, size_t why_len) {
    if (ac->impl != ATTENTION_CUDNN) return 0;
    return cudnn_attention_prepare(ac->cudnn, B, T, NH, KVH, C / NH, fp16, why, why_len);
}
// Device memory the context holds (cuDNN's workspace; 0 for the others).
static inline size_t attention_context_device_bytes(const AttentionContext* ac) {
    return ac->cudnn ? cudnn_attention_workspace_bytes(ac->cudnn) : 0;
}
static inline void attention_context_destroy(AttentionContext* ac) {
    cudnn_attention_destroy(ac->cudnn);
    ac->cudnn = NULL;
}

static inline void attention_context_init(AttentionContext* ac, AttentionImpl impl) {
    CUDA_REQUIRE(attention_impl_valid(impl), "attention_context_init: unknown attention implementation %d", (int)impl);
    if (impl == ATTENTION_CUDNN) {
        char why[512];
        CUDA_REQUIRE(attention_context_try_cudnn(ac, why, sizeof(why)) == 0, "--attention cudnn: %s", why);
        return;
    }
    ac->impl = impl;
    ac->smem_optin = 0;
    ac->cudnn = NULL;
    if (impl == ATTENTION_CUBLAS) return;
    const int major = attn_gpu_major();
    CUDA_REQUIRE(major >= 8, "%s attention needs sm_80 or newer (cp.async, mma.sync m16n8k16), this GPU is sm_%d.x; "
                 "use --attention cublas", attention_impl_name(impl), major);
    attn_flash_setup(ac);
}

// out[B,T,C] and lse[B,NH,T] from qkv[B,T,QW] (both overwritten), by ac's implementation.
// scratch: at least attention_forward_scratch_bytes(ac->impl, ...) bytes (flash: none, may
// be NULL); mm: the matmul context (used by the cublas path only; may be NULL for flash).
template <class T16>
static inline void attention_forward_cuda(const AttentionContext* ac, MatmulContext* mm, T16* out, float* lse,
                                          const T16* qkv, void* scratch, size_t scratch_bytes, int B, int T,
                                          int C, int NH, int KVH, cudaStream_t stream) {
    attn_check_args("attention_forward_cuda", false, ac, B, T, C, NH, KVH, scratch_bytes, scratch);
    CUDA_REQUIRE(out && lse && qkv, "attention_forward_cuda: NULL tensor");
    if (ac->impl == ATTENTION_CUDNN) {
        // A shape cuDNN refuses (not the run's: attention_context_prepare took those) runs on
        // flash where it can: the sampler's and evaluation's forwards (their lse means the same).
        char why[512];
        const int rc = cudnn_attention_forward(ac->cudnn, out, lse, qkv, B, T, NH, KVH, C / NH, attn_is_fp16<T16>(),
                                               (void*)stream, why, sizeof(why));
        if (rc == 0) return;
        CUDA_REQUIRE(rc > 0 && ac->smem_optin > 0 && attention_flash_supports(C / NH) && (long long)B * NH < 65536,
                     "--attention cudnn: %s", why);
        if (rc == 1) fprintf(stderr, "warning: --attention cudnn: %s; this shape's forward runs on flash\n", why);
    }
    if (ac->impl != ATTENTION_CUBLAS) {
        CUDA_REQUIRE(is_aligned16(qkv) && is_aligned16(out) && ((uintptr_t)lse & 3) == 0,
                     "attention_forward_cuda: qkv and out must be 16-byte aligned, lse 4-byte aligned");
        const int optin = ac->smem_optin;
        if (ac->impl == ATTENTION_FLASH_PIPELINED) {
            if (C / NH == 64) attn_flash_pl_forward_launch<64>(optin, out, lse, qkv, B, T, C, NH, KVH, stream);
            else attn_flash_pl_forward_launch<128>(optin, out, lse, qkv, B, T, C, NH, KVH, stream);
        } else if (C / NH == 64) {
            attn_flash_forward_launch<64>(optin, out, lse, qkv, B, T, C, NH, KVH, stream);
        } else {
            attn_flash_forward_launch<128>(optin, out, lse, qkv, B, T, C, NH, KVH, stream);
        }
    } else {
        CUDA_REQUIRE(mm != NULL, "attention_forward_cuda: the cublas path needs a MatmulContext");
        attn_cublas_forward(mm, out, lse, qkv, scratch, B, T, C, NH, KVH, stream);
    }
}

// dqkv[B,T,QW] (OVERWRITTEN) from dout[B,T,C], the forward's inputs qkv and outputs out, lse.
// scratch: at least attention_backward_scratch_bytes(ac->impl, ...) bytes.
template <class T16>
static inline void attention_backward_cuda(const AttentionContext* ac, MatmulContext* mm, T16* dqkv,
                                           const T16* dout, const T16* qkv, const T16* out, const float* lse,
                                           void* scratch, size_t scratch_bytes, int B, int T, int C, int NH,
                                           int KVH, cudaStream_t stream) {
    attn_check_args("attention_backward_cuda", true, ac, B, T, C, NH, KVH, scratch_bytes, scratch);
    CUDA_REQUIRE(dqkv && dout && qkv && out && lse, "attention_backward_cuda: NULL tensor");
    if (ac->impl == ATTENTION_CUDNN) {  // (no fallback: the scratch is sized for cudnn, which takes none)
        char why[512];
        CUDA_REQUIRE(cudnn_attention_backward(ac->cudnn, dqkv, dout, qkv, out, lse, B, T, NH, KVH, C / NH,
                                              attn_is_fp16<T16>(), (void*)stream, why, sizeof(why)) == 0,
                     "--attention cudnn: %s", why);
    } else if (attention_impl_is_flash(ac->impl)) {
        CUDA_REQUIRE(is_aligned16(dqkv) && is_aligned16(dout) && is_aligned16(qkv) && is_aligned16(out) &&
                     ((uintptr_t)lse & 3) == 0 && is_aligned16(scratch),
                     "attention_backward_cuda: dqkv, dout, qkv, out and scratch must be 16-byte aligned");
        const int optin = ac->smem_optin;
        const bool pl = ac->impl == ATTENTION_FLASH_PIPELINED;
        if (C / NH == 64 && pl)
            attn_flash_pl_backward_launch<64>(optin, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, KVH, stream);
        else if (pl)
            attn_flash_pl_backward_launch<128>(optin, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, KVH, stream);
        else if (C / NH == 64)
            attn_flash_backward_launch<64>(optin, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, KVH, stream);
        else
            attn_flash_backward_launch<128>(optin, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, KVH, stream);
    } else {
        CUDA_REQUIRE(mm != NULL, "attention_backward_cuda: the cublas path needs a MatmulContext");
        attn_cublas_backward(mm, dqkv, dout, qkv, lse, scratch, B, T, C, NH, KVH, stream);
    }
}

#endif  // FSDP_KERNELS_CUDA_ATTENTION_CUH
