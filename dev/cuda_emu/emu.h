// cuda_emu: a CPU emulator for fsdp.c's CUDA test programs (a logic check, not a GPU).
//
// What it is
//   dev/test/test_kernels_emu.sh runs dev/test/test_kernels_cuda.cu and
//   dev/test/test_attention_cuda.cu, unchanged, on the CPU: transform.py rewrites a copy of
//   them and of kernels/*.cuh (kernel<<<...>>> launches, asm("PTX") statements, __shared__
//   declarations), g++ compiles the copy against the shim headers in include/ (cuda_runtime.h,
//   cuda_bf16.h, cuda_fp16.h, cublasLt.h, cub, nccl.h), and this runtime executes the
//   kernels. dev/test/test_train_emu.sh does the same to train_gpt.cu (with -D__CUDACC__) and
//   fsdp/backend_cuda.cuh: the whole `train_gpt --device cuda --comm mpi|nccl` path, compared
//   with the cpu device.
//
// What it emulates (written from the CUDA programming guide / runtime API / PTX ISA /
// cuBLASLt documentation, not from the kernels, so that it is an independent check)
//   - Execution: every CUDA thread of a block is a fiber with its own stack; blocks run one
//     after another. A thread runs until it reaches a barrier: __syncthreads, a warp
//     collective (__shfl*_sync, __ballot_sync, __syncwarp, mma.sync, ldmatrix), or its end.
//     The block runs one warp at a time, as far as that warp can go (to __syncthreads or
//     its end), its lanes in lockstep from one warp collective to the next; the order of
//     warps and lanes (ascending / descending) alternates every round and by block. So
//     warps drift as far apart as the barriers allow: a read that lacks its __syncthreads,
//     or a write that does not wait for the other warps' reads, meets poisoned or
//     overwritten data.
//   - Barrier rules, enforced with an "EMU:" message and abort(): __syncthreads must be
//     reached by every thread of the block (none exited: "conditional only if uniform over
//     the block"); a full-mask warp collective by all 32 lanes of the warp, all at the same
//     kind of collective; a blocked block with nothing runnable is a deadlock. Masks other
//     than the full warp are not emulated (abort).
//   - Memory: cudaMalloc returns 256-byte aligned buffers filled with 0xff bytes (NaN as
//     bf16 and fp32) with guard zones on both sides, checked after every launch and at
//     cudaFree (writes out of bounds abort). cudaMemcpy/cudaMemset/cuBLASLt operands/CUB
//     arrays/cp.async sources must lie inside a live allocation. Dynamic shared memory is
//     per block, poisoned with 0xff; so is a static __shared__ variable when a block first
//     reaches its declaration. Launches are checked like the runtime does: block <= 1024
//     threads (and <= __launch_bounds__), grid limits, dynamic shared memory <= 48 KiB
//     unless cudaFuncSetAttribute(MaxDynamicSharedMemorySize) opted in (<= 227 KiB, sm_90).
//   - PTX (asm statements): mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 (T: bf16 or f16) and
//     ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 from the fragment layouts of
//     the PTX ISA; cp.async.{ca,cg}.shared.global, commit_group, wait_group N, wait_all:
//     the destination is undefined from the issue (poisoned then) until the wait that
//     completes its group (the copy happens then): reading it before the right wait, or
//     issuing it while other warps still read the old contents, meets poison.
//   - Runtime: one device ("cuda_emu", sm_90, 132 SMs, 227 KiB opt-in shared memory, 80 GiB;
//     EMU_DEVICE_COUNT=N reports N alike, all backed by the process's memory);
//     EMU_SM=75 reports an sm_75 GPU instead of sm_90 (the host's choices for older GPUs);
//     EMU_SKIP_BARRIER=NAME drops every __syncthreads of kernel NAME (a fault injected to
//     check that the emulator catches the race a missing barrier opens);
//     device work is asynchronous (Streams below); events measure host time (when the device
//     thread reached the record; cudaEventElapsedTime refuses cudaEventDisableTiming events
//     and answers cudaErrorNotReady before both are complete); stream and event handles are
//     checked for liveness; cudaMallocHost/cudaFreeHost are checked host allocations;
//     cudaMemGetInfo reports 80 GiB less the live cudaMalloc buffers. NCCL (include/nccl.h,
//     nccl.cpp): communicators between the processes of this machine through POSIX shared
//     memory, collectives as stream work (emu::enqueue), reductions in rank order, non-blocking
//     init, abort, a dead peer as ncclRemoteError (include/nccl.h says what else).
//     cuBLASLt (cublaslt.cpp): column-major (A, B both bf16 or both fp16; C, D that or fp32)
//     D = alpha op(A) op(B) + beta C per matrix of a strided batch, bias / GELU_AUX(_BIAS) /
//     DGELU epilogues (tanh GELU), strict about attribute sizes, layouts, in-place C == D
//     and the alignments promised to the heuristic. CUB DeviceRadixSort::SortPairs: a
//     stable sort on the key bits [begin_bit, end_bit), temp storage scribbled over.
//   - Streams (emu.cpp, "Streams and events"; the runtime API's "API synchronization
//     behavior" and "Stream synchronization behavior"): a device thread runs the work of
//     every stream while the host goes on. Each stream is a FIFO; streams are unordered
//     except through events (cudaEventRecord captures the work issued to the stream so far,
//     cudaStreamWaitEvent makes later work wait for it; a re-record does not move an earlier
//     wait; a never-recorded event is complete) and the legacy default stream (NULL), which
//     waits for and is waited for by every blocking stream (not cudaStreamNonBlocking ones).
//     Kernels, cudaMemcpyAsync, cudaMemsetAsync/cudaMemset (asynchronous to the host),
//     cuBLASLt matmuls and CUB sorts run when their stream gets there, with the values they
//     had at the call (kernel arguments, alpha/beta, descriptors); their errors are reported
//     at the call where the runtime would, their aborts ("EMU:") name the kernel or
//     operation and its stream. Copies: from or to pinned memory (cudaMallocHost) and
//     device-to-device they are asynchronous; cudaMemcpyAsync from pageable memory stages
//     the source before returning, to pageable memory returns once done; cudaMemcpy to the
//     host returns once done, from pinned memory too, from pageable memory after
//     synchronising the legacy stream and staging. Host waits: cudaStreamSynchronize (of
//     NULL: also the blocking streams), cudaEventSynchronize, cudaDeviceSynchronize, cudaFree
//     and cudaFreeHost (they synchronise the device first); cudaEventQuery/cudaStreamQuery
//     answer cudaErrorNotReady until the work is done. Whenever several streams can go on,
//     the device thread picks one at random (EMU_SEED, default 1, printed in the
//     "# cuda_emu:" line), and it lags behind the host (it starts on the work only after a
//     random number of operations, a synchronising call or poll, or a few ms of host
//     silence): a consumer stream that does not wait for its producer reads poison (NaN)
//     or stale data for some seeds, and so does a host that reads a pinned buffer before
//     synchronising. emu::enqueue work (the NCCL shim's) runs on a thread of its stream and
//     may block; other streams go on. Work still queued at exit is dropped.
//     EMU_STREAMS=sync: the old synchronous emulator (everything runs when issued).
//
// What it does not emulate (a pass here says nothing about these)
//   - Timing and performance, occupancy, registers, bank conflicts, memory coalescing.
//   - Concurrency and data races: the device runs one operation at a time (a kernel's blocks
//     one after another, its threads interleaving only at barriers), so two unordered
//     streams never overlap inside a kernel: a race between streams or with the host shows
//     only as one whole operation running before or after the other (for some seeds; run
//     several: EMU_SEED), never as torn data, and a race inside a kernel (inside a warp,
//     between warps) only when one of the two block orders above exposes it. There is no
//     race detector; warp scheduling beyond barriers (independent thread scheduling, lanes
//     of a warp drifting apart between collectives) is not modelled. A replay with the same
//     EMU_SEED repeats the device's picks only as far as the host's timing does not matter
//     (a host silent for milliseconds with work queued, emu::enqueue work of other
//     processes); stream priorities are ignored.
//   - Out-of-bounds READS of global memory (only writes past a buffer's guard zones, and
//     cp.async/cuBLASLt/CUB operands, are checked); memory limits of a real GPU.
//   - Real device math: expf, exp2f, sqrtf... are the host's libm (different ulps), no
//     FMA contraction the way nvcc does it, mma accumulates exactly (double) then rounds.
//   - cuBLASLt's algorithm choice, its accumulation order and its exact GELU (the test
//     that tells tanh from erf GELU checks the fake here); the heuristic always "finds"
//     an algorithm. Bitwise determinism checks pass trivially (everything is sequential
//     inside an operation).
//   - Anything not listed above (other intrinsics, PTX, float atomics, cooperative groups...):
//     it fails to compile or aborts with "EMU: unsupported".
// So a pass under emulation is a logic check (indexing, fragment layouts, barriers,
// masking, host-side planning), not a GPU result: the GPU tests must still run on a GPU.
#ifndef FSDP_CUDA_EMU_H
#define FSDP_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <initializer_list>
#include <tuple>
#include <utility>

// ----------------------------------------------------------------------------
// Vector types, qualifiers

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(16) int4 { int x, y, z, w; };
static inline int4 make_int4(int x, int y, int z, int w) { int4 r = {x, y, z, w}; return r; }
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { uint3 r = {x, y, z}; return r; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static  // transform.py rewrites the declarations; this is a fallback

// ----------------------------------------------------------------------------
// Runtime API types (the subset the code uses; numeric values as in the CUDA headers)

typedef enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9, cudaErrorInvalidDevicePointer = 17,
    cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101, cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600, cudaErrorLaunchOutOfResources = 701,
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef enum cudaDataType_t {
    CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_8I = 3, CUDA_R_32I = 10, CUDA_R_16BF = 14,
} cudaDataType;
typedef enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10, cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
} cudaDeviceAttr;
typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9,
} cudaFuncAttribute;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int multiProcessorCount, major, minor, l2CacheSize, maxThreadsPerMultiProcessor;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev);
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <class T> cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc((void**)p, bytes); }  // C++ API
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
template <class T> cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaMallocHost((void**)p, bytes); }  // C++ API
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);

// ----------------------------------------------------------------------------
// The emulator's interface (used by the transformed sources and the other shims)

namespace emu {
extern uint3 tid, bid;     // threadIdx, blockIdx of the running thread
extern dim3 bdim, gdim;    // blockDim, gridDim of the running launch

// What transform.py turns name<<<grid, block, smem, stream>>>(args) into: the launch is
// checked now (errors as the runtime reports them at launch), the kernel runs when the stream
// gets to it. body calls the kernel with the argument values captured at the launch.
void launch_impl(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                 unsigned max_threads, std::function<void()> body);
template <class F>
void launch(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            unsigned max_threads, F&& body) {
    launch_impl(name, fn, grid, block, smem, s, max_threads, std::function<void()>(std::forward<F>(body)));
}

// The kernel arguments' values, evaluated at the launch (by value: as a call passes them to
// the kernel's parameters, without odr-using a static const member).
template <class... T> std::tuple<T...> launch_args(T... a) { return std::tuple<T...>(a...); }

// Device work issued on stream s (a collective of the NCCL shim...): runs after everything
// enqueued on s before it (and, on the legacy stream NULL, after the blocking streams' work),
// in the order the streams and events impose, asynchronously to the host. `what` names it in
// messages. It may block for as long as it needs (on peer processes): it runs on a thread of
// its stream, never the host's, and other streams go on meanwhile. Checks of the API's
// arguments belong before the call (the host's error); `work` runs later.
void enqueue(cudaStream_t s, const char* what, std::function<void()> work);
// The same for short, non-blocking compute (cuBLASLt, CUB): runs on the device thread.
void enqueue_compute(cudaStream_t s, const char* what, std::function<void()> work);
// Emulated devices: EMU_DEVICE_COUNT (default 1). Each process has its own memory, so with N
// set, N local ranks each "own" a device (what NCCL requires); they share the host's memory.
int device_count();
// A kernel launch for the CUPTI shim's subscriber (include/cupti.h), if any: domain 1 driver
// (cuLaunchKernel: a cuBLASLt matmul, an NCCL collective), 2 runtime (cudaLaunchKernel: a
// launch_impl), called back at its enter and exit.
void report_launch(int domain, const char* what);

void syncthreads();
// A warp collective: deposits `bytes` of `in` for this lane, waits for all 32 lanes (same
// `kind`), returns the 32 deposited slots (SLOT bytes apart), valid until the lane's next
// collective.
enum { SLOT = 64 };
enum Kind { K_SHFL = 1, K_BALLOT, K_SYNCWARP, K_MMA, K_LDMATRIX };
const unsigned char* warp_collective(int kind, unsigned mask, const void* in, size_t bytes);
int lane();

void* dynamic_smem();                      // extern __shared__ arrays
void shared_var(void* p, size_t bytes);    // static __shared__: poisons once per block
bool device_range_ok(const void* p, size_t bytes);  // inside one live cudaMalloc buffer?
[[noreturn]] void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// asm("..." : outputs : inputs): operands %0.. in order; outputs by address.
struct AsmArg { void* p; uint64_t v; unsigned size; };
template <class T> AsmArg asm_out(T& x) { AsmArg a = {(void*)&x, 0, (unsigned)sizeof(T)}; return a; }
template <class T> AsmArg asm_in(const T& x) {
    static_assert(sizeof(T) <= 8, "asm operand wider than 64 bits");
    AsmArg a = {NULL, 0, (unsigned)sizeof(T)};
    memcpy(&a.v, &x, sizeof(T));
    return a;
}
void ptx(const char* text, std::initializer_list<AsmArg> args);

// Traffic counts (dev/test/test_traffic_emu.sh sets them beside the planner's cost model):
// what the device operations moved in device memory and how many tensor-core FLOPs they
// issued, counted, not timed. A kernel's own loads and stores are seen only in a build
// whose kernels are compiled with -fsanitize=kernel-address and linked with
// dev/cuda_emu/traffic_hooks.cpp (the compiler then calls a hook at every access, and the
// hook calls traffic_access; built at -O0, since at -O1 and above GCC drops a check it
// deems redundant, a store's after a load of the same address); cp.async sources, mma.sync, cuBLASLt operands, CUB sorts,
// memsets and device-to-device copies are counted in every build. A "launch" is one kernel
// grid, one cuBLASLt matmul, one sort, one memset or copy.
struct Traffic {
    double accessed[2];  // bytes [0] loaded, [1] stored: every access of every thread
    double sectors[2];   // 32 x the distinct 32-byte sectors loaded / stored, per launch, summed
                         // (a load of a sector the launch stored before is not counted): what
                         // a launch moves to and from DRAM when nothing it touches twice leaves
                         // the caches in between (the quantity a cost model prices)
    double flops;        // 2 x the multiply-adds of mma.sync and cuBLASLt matmuls
    long long launches;
};
void traffic_totals(Traffic* out);  // the totals so far (synchronise the device first)
// An access of n bytes at p by the running kernel (counted only inside a device buffer).
void traffic_access(const void* p, size_t n, int store);
// An operand of a library call or copy on the device thread: every byte of it once.
void traffic_range(const void* p, size_t n, int store);
void traffic_flops(double flops);
void traffic_launch_done();  // folds the running launch's distinct sectors into the totals
}  // namespace emu

#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
static constexpr int warpSize = 32;

// ----------------------------------------------------------------------------
// Device intrinsics (CUDA programming guide semantics; full masks only)

static inline void __syncthreads() { emu::syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_collective(emu::K_SYNCWARP, mask, NULL, 0); }

template <class T>
static inline T emu_shfl_from(unsigned mask, T v, int (*pick)(int lane, int arg, int width), int arg, int width) {
    static_assert(sizeof(T) <= emu::SLOT, "shuffle of a type wider than a slot");
    const unsigned char* s = emu::warp_collective(emu::K_SHFL, mask, &v, sizeof v);
    T r;
    memcpy(&r, s + emu::SLOT * pick(emu::lane(), arg, width), sizeof r);
    return r;
}
// Source lanes: srcLane modulo width inside the lane's group of width lanes; xor/down
// beyond the group and up below it return the lane's own value.
static inline int emu_pick_idx(int l, int src, int w) { return (l & ~(w - 1)) + (src & (w - 1)); }
static inline int emu_pick_xor(int l, int m, int w) { const int t = l ^ m; return (t & ~(w - 1)) == (l & ~(w - 1)) ? t : l; }
static inline int emu_pick_up(int l, int d, int w) { return (l & (w - 1)) >= d ? l - d : l; }
static inline int emu_pick_down(int l, int d, int w) { return (l & (w - 1)) + d < w ? l + d : l; }
template <class T> static inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return emu_shfl_from(m, v, emu_pick_idx, src, w); }
template <class T> static inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) { return emu_shfl_from(m, v, emu_pick_xor, x, w); }
template <class T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return emu_shfl_from(m, v, emu_pick_up, (int)d, w); }
template <class T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return emu_shfl_from(m, v, emu_pick_down, (int)d, w); }

static inline unsigned __ballot_sync(unsigned mask, int pred) {
    const int p = pred != 0;
    const unsigned char* s = emu::warp_collective(emu::K_BALLOT, mask, &p, sizeof p);
    unsigned r = 0;
    for (int l = 0; l < 32; l++) {
        int q;
        memcpy(&q, s + emu::SLOT * l, sizeof q);
        if (q) r |= 1u << l;
    }
    return r;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }

// Integer atomics (the GPU tests count failures with them; the kernels use none, they must
// be deterministic): the blocks and threads of a launch run one at a time on the device
// thread, so a plain read-modify-write is atomic here.
static inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned old = *p; *p = old + v; return old; }
static inline int atomicAdd(int* p, int v) { const int old = *p; *p = old + v; return old; }
// clock64: the host's monotonic clock in ns (an SM counts cycles at 1-2 GHz: the same order).
long long clock64();

// Cache-hint loads/stores: plain accesses.
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }

// The shared-window address of a generic pointer into (dynamic) shared memory.
size_t __cvta_generic_to_shared(const void* p);

// Device min/max overloads (host code calling them gets the same).
static inline int min(int a, int b) { return a < b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float max(float a, float b) { return fmaxf(a, b); }

#endif  // FSDP_CUDA_EMU_H
