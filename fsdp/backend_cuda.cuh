// The CUDA device's FsdpBackend (fsdp/fsdp.h): device memory, 16-bit compute dtype (bf16, or
// fp16 with --param-dtype fp16: "bf16" below stands for either) (gathered parameters and full
// gradients), fp32 master weights / Adam moments / gradient shards, and
// the shard group's collectives in one of two ways:
//
//   NCCL (cfg.use_nccl = 1)  one NCCL communicator per group (shard group; replica group for
//       HSDP; the TP group at --tp > 1, whose collectives alone run on the compute stream: see
//       "Tensor parallelism" below), the others on one dedicated, high-priority comm stream, every hand-off
//       between the compute stream and the comm stream an event. Nothing synchronises the
//       host inside a step: the step's loss and norm are all-reduced and decided on the
//       device (step_decide), AdamW reads the decision there, and the host reads a copy when
//       it asks (step_stats_wait: the previous step's, long done). Only the staged path waits.
//   staged (cfg.use_nccl = 0, `--comm mpi`)  through pinned host buffers over comm/comm.h (MPI
//       or TCP), so that several ranks may share one GPU (NCCL refuses that). Same numbers as
//       NCCL up to the order of the reduction.
//
// Header-only (everything static / static inline): included by train_gpt.cu and the GPU tests,
// which nvcc compiles. Errors end the job through fatal(pg, ...) naming the call and the error.
//
// Streams and events (CUDA_NOTES.md, "Stream and event ordering"), NCCL path. `compute` is the
// caller's stream, `comm` is created here; for op slot k, ready[k] is recorded on compute and
// waited by comm, done[k] is recorded on comm and waited by compute:
//
//   all_gather_start(k, shard, full):
//       compute --record ready[k]--> comm waits           (arrows 2 and 5: the gather comes after
//                                                          every kernel enqueued so far on compute:
//                                                          the last reads of the destination slot,
//                                                          and the optimizer / refresh that wrote
//                                                          the bf16 shard)
//       comm: ncclAllGather(shard -> full, bf16)          (in place when shard == full + rank*n)
//       comm --record done[k]
//   reduce_scatter_start(k, full, shard_out):
//       compute --record ready[k]--> comm waits           (arrow 3: the unit's backward wrote full)
//       comm: [reduce_fp32: cast full -> fp32 scratch] ncclReduceScatter -> shard_out (bf16,
//             which fold_grad reads as such: reduce_out_bytes 2; or fp32)
//       comm --record done[k]
//   wait(k):  compute waits done[k]                        (arrow 1: gather ready; arrow 3': the
//                                                          full-gradient slot and shard_out are
//                                                          the compute stream's again; arrow 4:
//                                                          the optimizer comes after the waits)
//   all_reduce_replicas (HSDP): compute --rep_ready--> comm: ncclAllReduce in place
//                                --rep_done--> compute waits (before the grad norm and AdamW).
//   step_decide: compute --stats_ready--> comm: ncclAllReduce of (loss sum, sum of squares),
//                shard group [, the loss over the replica group] --stats_done--> compute
//                waits, then one thread decides (norm, clip scale, skip) before AdamW.
// Scratch on the comm stream (the fp32 copy of a full gradient, --reduce-dtype fp32) is ONE
// buffer shared by every op: the comm stream runs its work in issue order, so the next op's use
// of the scratch starts after the previous op's last read of it. At world size 1 the same
// events and NCCL calls run (a 1-rank gather is a copy), so W=1 exercises the same ordering.
// HSDP's two communicators are never active at the same time: every collective goes to the
// one comm stream, issued in the same order on every rank (what NCCL requires of several
// communicators); one device per process, so no ncclGroupStart/End is needed.
//
// Staged path (no comm stream): all_gather_start copies the shard D2H on compute into the op's
// pinned buffer and waits on the host for compute (the host needs the bytes), then starts
// comm_all_gather_start; wait(k) = comm_wait, then an H2D copy into `full` on compute.
// reduce_scatter_start casts the bf16 gradient to fp32 on compute (one device scratch: the host
// waits for the D2H before returning, so the scratch is free again), copies it D2H, waits,
// starts comm_reduce_scatter_f32_start; wait(k) = comm_wait, H2D into shard_out on compute and,
// when reducing in bf16, rounds the fp32 sum to bf16 (what NCCL's bf16 reduction returns).
// A pinned buffer is written again only by the next start on the same op slot, which waits for
// compute first, and so for the H2D copy of the previous wait.
//
// Host waits (copies, the staged path, teardown) poll an event with a deadline
// of the process group's timeout (comm_timeout), checking the NCCL communicators'
// asynchronous errors meanwhile; an error or timeout aborts the communicators
// (ncclCommAbort) and ends the job with fatal(). NCCL communicators are created non-blocking
// (blocking = 0): any NCCL call that answers ncclInProgress is polled the same way.
#ifndef FSDP_BACKEND_CUDA_CUH
#define FSDP_BACKEND_CUDA_CUH

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "fsdp/fsdp.h"
#include "fsdp/offload.h"
#include "comm/process_group.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_optimizer.cuh"

typedef struct {
    int use_nccl;            // 1: NCCL on a dedicated comm stream; 0: staged through pinned host memory over comm.h
    int param_fp16;          // the compute dtype: 1 fp16 (--param-dtype fp16), 0 bf16
    int reduce_fp32;         // 1: reduce-scatter in fp32 (the 16-bit full gradient is cast first); 0: in 16 bits
    size_t max_unit_padded;  // largest unit's padded element count: all scratch is sized from it, up front
    const size_t* op_padded; // [max_ops] or NULL: the largest unit each op slot carries (fsdp_op_padded);
                             // the staged path pins per slot from it (NULL: max_unit_padded each). Read at init.
    uint64_t seed;           // stochastic-rounding seed
    cudaStream_t compute;    // the model's stream (created by the caller)
    int offload_units;       // --offload optimizer: the engine's unit count (0: no offload)
    int offload_threads;     // ... and the host threads of each of its tasks
    size_t tp_max_elems;     // tensor parallel (pg->tp_size > 1): the most elements one TP collective
                             // carries (its full side), for the staged path's buffers
} CudaBackendConfig;

enum { CUDA_OP_IDLE = 0, CUDA_OP_GATHER, CUDA_OP_REDUCE };

typedef struct {
    int kind;                // CUDA_OP_*: what is in flight on this slot (IDLE: nothing)
    // staged path
    CommTicket ticket;
    void* dst;               // device destination written at wait
    size_t bytes;            // bytes copied H2D at wait
    size_t n;                // reduce: shard elements (for the bf16 rounding)
    size_t capacity;         // the largest unit (padded elements) this slot may carry
    void* host_full;         // staged: pinned, capacity * 4 bytes
    void* host_shard;        // staged: pinned, ceil(capacity / shard_size) * 4 bytes
    // NCCL path
    cudaEvent_t ready;       // compute -> comm
    cudaEvent_t done;        // comm -> compute
} CudaOpSlot;

// --profile-step on the NCCL path: a pair of timing events around each collective's work on
// the comm stream (its own time, beside the compute that hides it). Grows only during the
// one profiled step, like the model's marks.
enum { CB_PROF_GATHER = 0, CB_PROF_REDUCE, CB_PROF_REPLICA, CB_PROF_KINDS };
// The byte ledger's kinds: zeroing gradient slots, folding gradients into the fp32 shards
// (with the norm's sum of squares), AdamW (with the bf16 shard's rounding).
enum { CB_LEDGER_ZERO = 0, CB_LEDGER_FOLD, CB_LEDGER_ADAMW, CB_LEDGER_KINDS };
#define CB_MAX_WAIT_KINDS 8
typedef struct {
    int on, n, cap;
    int ledger;                // counting optimizer bytes and host waits (profiling, either path)
    int host_waits;            // while ledger: every host wait, and per distinct reason
    int n_wait_kinds;
    const char* wait_what[CB_MAX_WAIT_KINDS];
    int wait_count[CB_MAX_WAIT_KINDS];
    cudaEvent_t *start, *end;  // [cap]
    unsigned char* kind;       // CB_PROF_*
} CbCommProfile;

typedef struct {
    const ProcessGroup* pg;
    CudaBackendConfig cfg;
    int device;
    int max_ops;
    int shard_size, shard_rank;
    size_t max_shard;                // ceil(max_unit_padded / shard_size)
    CudaOpSlot* ops;                 // [max_ops]
    cudaStream_t compute;            // the caller's
    cudaStream_t comm;               // NCCL path only (created here)
    ncclComm_t nccl_shard;           // NCCL path: the shard group
    ncclComm_t nccl_replica;         // NCCL path, HSDP: the replica group (NULL otherwise)
    ncclComm_t nccl_tp;              // NCCL path, tensor parallel: the TP group, on compute and tp_stream
    cudaStream_t tp_stream;          // NCCL, tensor parallel: the started reduce-scatter's (created here)
    cudaEvent_t tp_ready, tp_done;   // compute -> tp_stream, tp_stream -> compute
    cudaEvent_t host_ev;             // host waits
    cudaEvent_t rep_ready, rep_done; // all_reduce_replicas (NCCL)
    cudaEvent_t stats_ready, stats_done;  // step_decide's all-reduce (NCCL)
    cudaEvent_t stats_fetched;       // step_stats_fetch's copy has landed
    // device scratch
    float* f32_scratch;              // [max_unit_padded]: NCCL with reduce_fp32, staged always
    void* sumsq_scratch;             // sum_squares_cuda's partials, then one double
    double* d_sumsq;
    // pinned host memory
    double* h_sumsq;                 // [2]: the staged step_decide's loss sum and sum of squares
    float* h_chunk;                  // staged all_reduce_replicas: chunk buffer
    size_t chunk_elems;
    // staged, tensor parallel: fp32 device scratch and two pinned buffers of tp_max_elems
    // fp32 each (the full side and this rank's part of a TP collective)
    float* tp_f32;
    void *tp_host_full, *tp_host_part;
    // --profile-step's byte ledger: what the optimizer path's kernels (gradient folds and
    // accumulates, the norm, AdamW, bf16 refreshes) read and write on the compute stream,
    // counted from their arguments while profiling.
    double ledger[CB_LEDGER_KINDS];
    size_t device_bytes;             // what this backend cudaMalloc'd itself
    size_t host_bytes;               // what this backend cudaMallocHost'd itself
    CbCommProfile prof;              // --profile-step (NCCL path)
    // --offload optimizer: the copy stream, per unit the events of its gradient's copy to the
    // host and its new shard's upload, and the host worker (fsdp/offload.h)
    cudaStream_t copy;
    cudaEvent_t *to_host, *to_device;    // [offload_units]
    cudaEvent_t copy_ready;              // compute -> copy
    cudaEvent_t reads_done;              // the step's last reads of the shards (at the decision)
    HostOptimizer* host_opt;
} CudaBackend;

// ----------------------------------------------------------------------------
// Errors, time, host waits

#define CB_CUDA(c, call) cb_cuda_check((c), (call), #call, __FILE__, __LINE__)

static inline void cb_cuda_check(const CudaBackend* c, cudaError_t e, const char* call, const char* file,
                                 int line) {
    if (e != cudaSuccess)
        fatal(c->pg, "CUDA error in %s: %s (%s:%d)", call, cudaGetErrorString(e), file, line);
}

static inline double cb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double cb_timeout(const CudaBackend* c) {
    return c->pg && c->pg->comm ? comm_timeout(c->pg->comm) : 0.0;
}

// Polling back-off: yield first (short waits stay cheap in latency), then sleep 20 us.
static inline void cb_pause(unsigned* spins) {
    if (*spins < 2000) {
        (*spins)++;
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

static inline void cb_nccl_abort_all(CudaBackend* c) {
    // Abort (not destroy): returns even when operations are stuck; peers then fail theirs.
    if (c->nccl_shard) { ncclCommAbort(c->nccl_shard); c->nccl_shard = NULL; }
    if (c->nccl_replica) { ncclCommAbort(c->nccl_replica); c->nccl_replica = NULL; }
    if (c->nccl_tp) { ncclCommAbort(c->nccl_tp); c->nccl_tp = NULL; }
}

static inline void cb_nccl_fail(CudaBackend* c, ncclComm_t comm, ncclResult_t r, const char* what) {
    char last[512];
    const char* l = ncclGetLastError(comm);
    snprintf(last, sizeof last, "%s", l ? l : "");
    if (comm && comm != c->nccl_shard && comm != c->nccl_replica && comm != c->nccl_tp) ncclCommAbort(comm);
    cb_nccl_abort_all(c);
    fatal(c->pg, "NCCL error in %s: %s%s%s%s%s", what, ncclGetErrorString(r), last[0] ? " (" : "", last,
          last[0] ? ")" : "",
          !strncmp(what, "ncclCommInitRankConfig", 22)
              ? "; NCCL needs one GPU per rank: ranks sharing a GPU must use --comm mpi"
              : "");
}

// Checks every communicator for an asynchronous error (a peer died, a network failure).
static inline void cb_nccl_check_async(CudaBackend* c, const char* what) {
    ncclComm_t comms[3] = {c->nccl_shard, c->nccl_replica, c->nccl_tp};
    for (int i = 0; i < 3; i++) {
        if (!comms[i]) continue;
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comms[i], &state);
        if (r != ncclSuccess) cb_nccl_fail(c, comms[i], r, what);
        if (state != ncclSuccess && state != ncclInProgress) cb_nccl_fail(c, comms[i], state, what);
    }
}

// A non-blocking communicator answered ncclInProgress: poll its state until it is ncclSuccess
// (no other NCCL call may be made meanwhile), an error, or the deadline.
static inline void cb_nccl_settle(CudaBackend* c, ncclComm_t comm, const char* what) {
    const double t0 = cb_now(), timeout = cb_timeout(c);
    unsigned spins = 0;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) cb_nccl_fail(c, comm, r, what);
        if (state == ncclSuccess) return;
        if (state != ncclInProgress) cb_nccl_fail(c, comm, state, what);
        if (timeout > 0 && cb_now() - t0 > timeout) {
            if (comm != c->nccl_shard && comm != c->nccl_replica && comm != c->nccl_tp) ncclCommAbort(comm);
            cb_nccl_abort_all(c);
            fatal(c->pg, "NCCL: %s did not complete within --comm-timeout %.0f s (a rank is stalled or dead)",
                  what, timeout);
        }
        cb_pause(&spins);
    }
}

static inline void cb_nccl_call(CudaBackend* c, ncclComm_t comm, ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) { cb_nccl_settle(c, comm, what); return; }
    cb_nccl_fail(c, comm, r, what);
}

// The host waits until everything enqueued on stream s so far has run. Polls an event with
// the process group's timeout as deadline and watches the NCCL communicators meanwhile (the
// compute stream may be waiting on a collective that never ends).
static inline void cb_wait_event(CudaBackend* c, cudaEvent_t ev, const char* what);
static inline void cb_host_wait(CudaBackend* c, cudaStream_t s, const char* what) {
    if (c->prof.ledger) {  // --profile-step counts the host waits of the step, and names them
        CbCommProfile* p = &c->prof;
        int k = 0;
        while (k < p->n_wait_kinds && strcmp(p->wait_what[k], what) != 0) k++;
        if (k == p->n_wait_kinds && k < CB_MAX_WAIT_KINDS) p->wait_what[p->n_wait_kinds++] = what;
        if (k < CB_MAX_WAIT_KINDS) p->wait_count[k]++;
        p->host_waits++;
    }
    CB_CUDA(c, cudaEventRecord(c->host_ev, s));
    cb_wait_event(c, c->host_ev, what);
}

// The host waits until event ev (recorded earlier) has completed, with the deadline and the
// NCCL checks of cb_host_wait. (Not counted as a host wait: callers wait on work the device
// has long moved past, e.g. the previous step's statistics, which does not drain a stream.)
static inline void cb_wait_event(CudaBackend* c, cudaEvent_t ev, const char* what) {
    const double t0 = cb_now(), timeout = cb_timeout(c);
    double last_check = t0;
    unsigned spins = 0;
    for (;;) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady)
            fatal(c->pg, "CUDA error while waiting for %s: %s", what, cudaGetErrorString(e));
        const double now = cb_now();
        if (now - last_check > 1e-3) {
            cb_nccl_check_async(c, what);
            last_check = now;
        }
        if (timeout > 0 && now - t0 > timeout) {
            cb_nccl_abort_all(c);
            fatal(c->pg, "%s did not complete within --comm-timeout %.0f s (GPU work or a collective is stuck)",
                  what, timeout);
        }
        cb_pause(&spins);
    }
}

// Device memory (at least 256 bytes) or zero-filled pinned host memory (at least 64), or the
// job ends naming what it was for. The cb_* forms count it as the backend's own (its budget
// line); the FsdpBackend's alloc / alloc_host (the engine's buffers, counted by the engine)
// use the plain ones.
static inline void* cb_malloc(CudaBackend* c, size_t* bytes, const char* what) {
    void* p = NULL;
    *bytes = *bytes ? *bytes : 256;
    const cudaError_t e = cudaMalloc(&p, *bytes);
    if (e != cudaSuccess)
        fatal(c->pg, "out of GPU memory allocating %zu bytes (%.2f GiB) for %s: %s", *bytes,
              (double)*bytes / (1 << 30), what, cudaGetErrorString(e));
    return p;
}
static inline void* cb_malloc_host(CudaBackend* c, size_t* bytes, const char* what) {
    void* p = NULL;
    *bytes = *bytes ? *bytes : 64;
    const cudaError_t e = cudaMallocHost(&p, *bytes);
    if (e != cudaSuccess)
        fatal(c->pg, "cannot allocate %zu bytes (%.2f GiB) of pinned host memory for %s: %s", *bytes,
              (double)*bytes / (1 << 30), what, cudaGetErrorString(e));
    memset(p, 0, *bytes);
    return p;
}
static inline void* cb_device_alloc(CudaBackend* c, size_t bytes, const char* what) {
    void* p = cb_malloc(c, &bytes, what);
    c->device_bytes += bytes;
    return p;
}
static inline void* cb_host_alloc(CudaBackend* c, size_t bytes, const char* what) {
    void* p = cb_malloc_host(c, &bytes, what);
    c->host_bytes += bytes;
    return p;
}

static inline CudaOpSlot* cb_op(CudaBackend* c, int op, int must_be_idle) {
    if (op < 0 || op >= c->max_ops) fatal(c->pg, "fsdp: collective slot %d out of range (max %d)", op, c->max_ops);
    CudaOpSlot* s = &c->ops[op];
    if (must_be_idle && s->kind != CUDA_OP_IDLE) fatal(c->pg, "fsdp: collective slot %d reused while in flight", op);
    return s;
}

// x[i] = T16(x[i]) (round to nearest even), in place, fp32 storage: the staged path's 16-bit
// reduce-scatter result, as NCCL's 16-bit reduction returns it.
template <class T16>
static __global__ void cb_round_to_16_kernel(float* x, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = to_float(from_float<T16>(x[i]));
}

static inline void cb_round_to_16(const CudaBackend* c, float* x, size_t n, cudaStream_t s) {
    if (n == 0) return;
    size_t blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    if (c->cfg.param_fp16) cb_round_to_16_kernel<fp16><<<(unsigned)blocks, 256, 0, s>>>(x, n);
    else cb_round_to_16_kernel<bf16><<<(unsigned)blocks, 256, 0, s>>>(x, n);
    CUDA_LAUNCH_CHECK();
}

// The compute dtype's NCCL type, and a 16-bit buffer (of that dtype) cast to fp32.
static inline ncclDataType_t cb_nccl16(const CudaBackend* c) { return c->cfg.param_fp16 ? ncclFloat16 : ncclBfloat16; }
static inline void cb_cast16_to_f32(const CudaBackend* c, float* dst, const void* src, size_t n, cudaStream_t s) {
    if (c->cfg.param_fp16) cast_to_f32_cuda(dst, (const fp16*)src, n, s);
    else cast_to_f32_cuda(dst, (const bf16*)src, n, s);
}

// The seed of a unit's stochastic-rounding stream (optimizer_math.h's sr_unit_seed): element
// i of the unit at step t then uses sr_bits(sr_key(cuda_backend_sr_seed(seed, unit), t), i)
// with i its global index in the unit's flat buffer: the same whatever W and however the
// range is split, on the GPU and on the host (--offload optimizer).
static __host__ __device__ inline uint64_t cuda_backend_sr_seed(uint64_t seed, uint64_t unit_stream) {
    return sr_unit_seed(seed, unit_stream);
}

// ----------------------------------------------------------------------------
// Memory

static inline void* cuda_alloc(void* ctx, size_t bytes) {
    CudaBackend* c = (CudaBackend*)ctx;
    void* p = cb_malloc(c, &bytes, "an engine buffer");
    // Zero on the compute stream and wait: the buffer is zero for any stream that uses it next
    // (allocation is init-time only).
    CB_CUDA(c, cudaMemsetAsync(p, 0, bytes, c->compute));
    cb_host_wait(c, c->compute, "zeroing a new allocation");
    return p;
}

static inline void cuda_release(void* ctx, void* p) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (p) CB_CUDA(c, cudaFree(p));
}

// --profile-step's ledger (see CudaBackend.ledger).
static inline void cb_count(CudaBackend* c, int kind, double bytes) {
    if (c->prof.ledger) c->ledger[kind] += bytes;
}

// (The engine zeroes gradient slots with it, and on the unfused path the gradient shards.)
static inline void cuda_zero(void* ctx, void* p, size_t bytes) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (bytes) CB_CUDA(c, cudaMemsetAsync(p, 0, bytes, c->compute));
    cb_count(c, CB_LEDGER_ZERO, (double)bytes);
}

// Pinned host memory, zero-filled.
static inline void* cuda_alloc_host(void* ctx, size_t bytes) {
    return cb_malloc_host((CudaBackend*)ctx, &bytes, "an engine buffer");
}

static inline void cuda_release_host(void* ctx, void* p) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (p) CB_CUDA(c, cudaFreeHost(p));
}

// Blocking copies (complete when they return), ordered after everything enqueued on compute.
static inline void cuda_copy_to_host(void* ctx, void* dst_host, const void* src, size_t bytes) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (!bytes) return;
    CB_CUDA(c, cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->compute));
    cb_host_wait(c, c->compute, "a device-to-host copy");
}

static inline void cuda_copy_to_device(void* ctx, void* dst, const void* src_host, size_t bytes) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (!bytes) return;
    CB_CUDA(c, cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, c->compute));
    cb_host_wait(c, c->compute, "a host-to-device copy");
}

// ----------------------------------------------------------------------------
// Collectives

// Brackets one collective's comm-stream work when profiling (NCCL path): the index to pass
// to cb_prof_end, or -1.
static inline int cb_prof_begin(CudaBackend* c, int kind) {
    CbCommProfile* p = &c->prof;
    if (!p->on || !c->comm) return -1;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->start = (cudaEvent_t*)realloc(p->start, (size_t)p->cap * sizeof(cudaEvent_t));
        p->end = (cudaEvent_t*)realloc(p->end, (size_t)p->cap * sizeof(cudaEvent_t));
        p->kind = (unsigned char*)realloc(p->kind, (size_t)p->cap);
        if (!p->start || !p->end || !p->kind) fatal(c->pg, "out of host memory (--profile-step)");
    }
    CB_CUDA(c, cudaEventCreate(&p->start[p->n]));
    CB_CUDA(c, cudaEventCreate(&p->end[p->n]));
    CB_CUDA(c, cudaEventRecord(p->start[p->n], c->comm));
    p->kind[p->n] = (unsigned char)kind;
    return p->n++;
}
static inline void cb_prof_end(CudaBackend* c, int i) {
    if (i >= 0) CB_CUDA(c, cudaEventRecord(c->prof.end[i], c->comm));
}

// compute -> comm: the comm stream's next work starts after everything enqueued on compute.
static inline void cb_handoff(CudaBackend* c, cudaEvent_t ev) {
    CB_CUDA(c, cudaEventRecord(ev, c->compute));
    CB_CUDA(c, cudaStreamWaitEvent(c->comm, ev, 0));
}

static inline void cuda_all_gather_start(void* ctx, int op, const void* shard, void* full, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    CudaOpSlot* s = cb_op(c, op, 1);
    const size_t W = (size_t)c->shard_size;
    if (n * W > s->capacity)
        fatal(c->pg, "fsdp cuda: all-gather of %zu x %zu elements exceeds op slot %d's %zu", W, n, op, s->capacity);
    const size_t shard_bytes = n * sizeof(uint16_t);  // the 16-bit compute dtype
    if (c->cfg.use_nccl) {
        const char* mine = (const char*)full + (size_t)c->shard_rank * shard_bytes;
        const char* sp = (const char*)shard;
        if (sp != mine && sp < (const char*)full + W * shard_bytes && sp + shard_bytes > (const char*)full)
            fatal(c->pg, "fsdp cuda: all-gather source overlaps its destination but is not this rank's slice");
        cb_handoff(c, s->ready);
        const int pi = cb_prof_begin(c, CB_PROF_GATHER);
        if (n > 0)
            cb_nccl_call(c, c->nccl_shard,
                         ncclAllGather(shard, full, n, cb_nccl16(c), c->nccl_shard, c->comm),
                         "ncclAllGather (shard group)");
        cb_prof_end(c, pi);
        CB_CUDA(c, cudaEventRecord(s->done, c->comm));
    } else {
        if (n > 0) {
            CB_CUDA(c, cudaMemcpyAsync(s->host_shard, shard, shard_bytes, cudaMemcpyDeviceToHost, c->compute));
            cb_host_wait(c, c->compute, "the staged all-gather's device-to-host copy");
            s->ticket = comm_all_gather_start(c->pg->shard_comm, s->host_shard, s->host_full, shard_bytes);
        }
        s->dst = full;
        s->bytes = W * shard_bytes;
        s->n = n;
    }
    s->kind = CUDA_OP_GATHER;
}

static inline void cuda_reduce_scatter_start(void* ctx, int op, const void* full, void* shard_out, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    CudaOpSlot* s = cb_op(c, op, 1);
    const size_t W = (size_t)c->shard_size;
    if (n * W > s->capacity)
        fatal(c->pg, "fsdp cuda: reduce-scatter of %zu x %zu elements exceeds op slot %d's %zu", W, n, op, s->capacity);
    const void* g = full;  // the compute dtype
    if (c->cfg.use_nccl) {
        cb_handoff(c, s->ready);
        const int pi = cb_prof_begin(c, CB_PROF_REDUCE);
        if (n > 0) {
            if (c->cfg.reduce_fp32) {
                cb_cast16_to_f32(c, c->f32_scratch, g, W * n, c->comm);
                cb_nccl_call(c, c->nccl_shard,
                             ncclReduceScatter(c->f32_scratch, shard_out, n, ncclFloat32, ncclSum, c->nccl_shard,
                                               c->comm),
                             "ncclReduceScatter fp32 (shard group)");
            } else {
                cb_nccl_call(c, c->nccl_shard,
                             ncclReduceScatter(g, shard_out, n, cb_nccl16(c), ncclSum, c->nccl_shard, c->comm),
                             "ncclReduceScatter 16-bit (shard group)");
            }
        }
        cb_prof_end(c, pi);
        CB_CUDA(c, cudaEventRecord(s->done, c->comm));
    } else {
        if (n > 0) {
            cb_cast16_to_f32(c, c->f32_scratch, g, W * n, c->compute);
            CB_CUDA(c, cudaMemcpyAsync(s->host_full, c->f32_scratch, W * n * sizeof(float), cudaMemcpyDeviceToHost,
                                       c->compute));
            cb_host_wait(c, c->compute, "the staged reduce-scatter's device-to-host copy");
            s->ticket = comm_reduce_scatter_f32_start(c->pg->shard_comm, (const float*)s->host_full,
                                                      (float*)s->host_shard, n);
        }
        s->dst = shard_out;
        s->bytes = n * sizeof(float);
        s->n = n;
    }
    s->kind = CUDA_OP_REDUCE;
}

// Makes the compute stream wait for op's collective (NCCL: an event wait, never a host sync;
// staged: the host waits for the transport, then the result is copied in on compute).
static inline void cuda_wait(void* ctx, int op) {
    CudaBackend* c = (CudaBackend*)ctx;
    CudaOpSlot* s = cb_op(c, op, 0);
    if (s->kind == CUDA_OP_IDLE) return;
    if (c->cfg.use_nccl) {
        CB_CUDA(c, cudaStreamWaitEvent(c->compute, s->done, 0));
    } else if (s->n > 0) {
        comm_wait(c->pg->shard_comm, s->ticket);
        void* src = s->kind == CUDA_OP_GATHER ? s->host_full : s->host_shard;
        CB_CUDA(c, cudaMemcpyAsync(s->dst, src, s->bytes, cudaMemcpyHostToDevice, c->compute));
        if (s->kind == CUDA_OP_REDUCE && !c->cfg.reduce_fp32) cb_round_to_16(c, (float*)s->dst, s->n, c->compute);
    }
    s->ticket = 0;
    s->kind = CUDA_OP_IDLE;
}

// HSDP: buf[n] (fp32, device) <- its sum over the replica group, in place. Ordered on the
// compute stream: what compute runs next sees the sum (NCCL: event hand-offs, no host sync;
// staged: chunks through pinned memory, host waits).
static inline void cuda_all_reduce_replicas(void* ctx, float* buf, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (c->pg->replicate_size <= 1 || n == 0) return;
    if (c->cfg.use_nccl) {
        cb_handoff(c, c->rep_ready);
        const int pi = cb_prof_begin(c, CB_PROF_REPLICA);
        cb_nccl_call(c, c->nccl_replica,
                     ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c->nccl_replica, c->comm),
                     "ncclAllReduce (replica group)");
        cb_prof_end(c, pi);
        CB_CUDA(c, cudaEventRecord(c->rep_done, c->comm));
        CB_CUDA(c, cudaStreamWaitEvent(c->compute, c->rep_done, 0));
    } else {
        for (size_t at = 0; at < n; at += c->chunk_elems) {
            const size_t len = n - at < c->chunk_elems ? n - at : c->chunk_elems;
            // The D2H is ordered after the previous chunk's H2D (same stream), which read h_chunk.
            CB_CUDA(c, cudaMemcpyAsync(c->h_chunk, buf + at, len * sizeof(float), cudaMemcpyDeviceToHost, c->compute));
            cb_host_wait(c, c->compute, "the staged replica all-reduce's device-to-host copy");
            comm_all_reduce_f32_sum(c->pg->replicate_comm, c->h_chunk, len);
            CB_CUDA(c, cudaMemcpyAsync(buf + at, c->h_chunk, len * sizeof(float), cudaMemcpyHostToDevice, c->compute));
        }
        // h_chunk must not be rewritten before the last H2D has read it: wait now (this is
        // once per step, and the staged path waits anyway).
        cb_host_wait(c, c->compute, "the staged replica all-reduce's host-to-device copy");
    }
}

// ----------------------------------------------------------------------------
// Tensor parallelism (pg->tp_size > 1): the TP group's collectives, for the schedule's TpComm
// (train/device.h: activations in the compute dtype, the loss's fp32 statistics) and the
// engine's all_reduce_tp (a gathered gradient's replicated tensors). Each is in order with the
// compute stream's kernels: the schedule needs its result before its next kernel, so there is
// nothing to overlap - but for the backward's reduce-scatter of a column-parallel matmul's
// input gradient, started before the weight-gradient GEMM and waited for after it
// (cuda_tp_reduce_scatter_start, cuda_tp_wait).
//   NCCL: on the compute stream itself, over the TP communicator (the ranks of one dp_rank),
//       no event and no host wait; a started reduce-scatter on tp_stream, which waits for
//       compute's kernels before it (tp_ready), and compute waits for it at the wait
//       (tp_done). The TP communicator's calls stay serial (the schedule starts no other TP
//       collective while one is in flight: compute's next one is enqueued after the wait),
//       the shard and replica ones on the comm stream only; each gets its calls in the same
//       order on every rank.
//   staged: device -> pinned host on compute, the host waits, the collective over
//       pg->tp_comm (comm.h), host -> device on compute. 16-bit sums go through fp32 and are
//       rounded once to the compute dtype (to nearest even), as the staged reduce-scatter does:
//       NCCL's 16-bit sum of two ranks rounds the same fp32 sum once, so TP 2 is bitwise equal
//       on both paths. A pinned buffer is written again only after the next collective's host
//       wait, which follows this one's host-to-device copy on compute.

static inline void cb_tp_fits(const CudaBackend* c, size_t n, const char* what) {
    if (n > c->cfg.tp_max_elems)
        fatal(c->pg, "fsdp cuda: a tensor-parallel %s of %zu elements exceeds the TP buffers' %zu", what, n,
              c->cfg.tp_max_elems);
}

// Staged: 16-bit src[n] (device) -> fp32 in tp_host_full; the host waits for it.
static inline void cb_tp_stage16(CudaBackend* c, const void* src, size_t n) {
    cb_cast16_to_f32(c, c->tp_f32, src, n, c->compute);
    CB_CUDA(c, cudaMemcpyAsync(c->tp_host_full, c->tp_f32, n * sizeof(float), cudaMemcpyDeviceToHost, c->compute));
    cb_host_wait(c, c->compute, "the staged tensor-parallel collective's device-to-host copy");
}

// Staged: dst[n] (16-bit, device) <- host fp32 h[n], rounded, on compute.
static inline void cb_tp_unstage16(CudaBackend* c, void* dst, const float* h, size_t n) {
    CB_CUDA(c, cudaMemcpyAsync(c->tp_f32, h, n * sizeof(float), cudaMemcpyHostToDevice, c->compute));
    if (c->cfg.param_fp16) cast_from_f32_cuda((fp16*)dst, c->tp_f32, n, c->compute);
    else cast_from_f32_cuda((bf16*)dst, c->tp_f32, n, c->compute);
}

// The TpComm's (train/device.h; ctx: the backend's). full[tp * n] <- every TP rank's
// local[n], in rank order (16-bit).
static inline void cuda_tp_all_gather(void* ctx, void* full, const void* local, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    const size_t tp = (size_t)c->pg->tp_size, bytes = n * sizeof(uint16_t);
    if (n == 0) return;
    if (c->cfg.use_nccl) {
        cb_nccl_call(c, c->nccl_tp, ncclAllGather(local, full, n, cb_nccl16(c), c->nccl_tp, c->compute),
                     "ncclAllGather (tensor-parallel group)");
        return;
    }
    cb_tp_fits(c, tp * n, "all-gather");
    CB_CUDA(c, cudaMemcpyAsync(c->tp_host_part, local, bytes, cudaMemcpyDeviceToHost, c->compute));
    cb_host_wait(c, c->compute, "the staged tensor-parallel all-gather's device-to-host copy");
    comm_wait(c->pg->tp_comm, comm_all_gather_start(c->pg->tp_comm, c->tp_host_part, c->tp_host_full, bytes));
    CB_CUDA(c, cudaMemcpyAsync(full, c->tp_host_full, tp * bytes, cudaMemcpyHostToDevice, c->compute));
}

// local[n] <- the TP group's sum of full[rank * n : (rank + 1) * n] (16-bit).
static inline void cuda_tp_reduce_scatter(void* ctx, void* local, const void* full, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    const size_t tp = (size_t)c->pg->tp_size;
    if (n == 0) return;
    if (c->cfg.use_nccl) {
        cb_nccl_call(c, c->nccl_tp, ncclReduceScatter(full, local, n, cb_nccl16(c), ncclSum, c->nccl_tp, c->compute),
                     "ncclReduceScatter (tensor-parallel group)");
        return;
    }
    cb_tp_fits(c, tp * n, "reduce-scatter");
    cb_tp_stage16(c, full, tp * n);
    comm_wait(c->pg->tp_comm, comm_reduce_scatter_f32_start(c->pg->tp_comm, (const float*)c->tp_host_full,
                                                            (float*)c->tp_host_part, n));
    cb_tp_unstage16(c, local, (const float*)c->tp_host_part, n);
}

// The same, started (train/device.h): NCCL on tp_stream after compute's kernels so far;
// the staged path blocks here (its host waits for the copies anyway), ticket 0.
static inline int64_t cuda_tp_reduce_scatter_start(void* ctx, void* local, const void* full, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (!c->cfg.use_nccl || n == 0) {
        cuda_tp_reduce_scatter(ctx, local, full, n);
        return 0;
    }
    CB_CUDA(c, cudaEventRecord(c->tp_ready, c->compute));
    CB_CUDA(c, cudaStreamWaitEvent(c->tp_stream, c->tp_ready, 0));
    cb_nccl_call(c, c->nccl_tp, ncclReduceScatter(full, local, n, cb_nccl16(c), ncclSum, c->nccl_tp, c->tp_stream),
                 "ncclReduceScatter (tensor-parallel group, started)");
    CB_CUDA(c, cudaEventRecord(c->tp_done, c->tp_stream));
    return 1;
}
// compute's next kernels wait for the started reduce-scatter (the host does not).
static inline void cuda_tp_wait(void* ctx, int64_t ticket) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (ticket) CB_CUDA(c, cudaStreamWaitEvent(c->compute, c->tp_done, 0));
}

// x[n] (fp32) <- the TP group's sum, or with max its maximum, in place.
static inline void cuda_tp_all_reduce_f32(void* ctx, float* x, size_t n, int max) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (n == 0) return;
    if (c->cfg.use_nccl) {
        cb_nccl_call(c, c->nccl_tp, ncclAllReduce(x, x, n, ncclFloat32, max ? ncclMax : ncclSum, c->nccl_tp, c->compute),
                     "ncclAllReduce fp32 (tensor-parallel group)");
        return;
    }
    cb_tp_fits(c, n, "all-reduce");
    CB_CUDA(c, cudaMemcpyAsync(c->tp_host_full, x, n * sizeof(float), cudaMemcpyDeviceToHost, c->compute));
    cb_host_wait(c, c->compute, "the staged tensor-parallel all-reduce's device-to-host copy");
    comm_all_reduce_f32(c->pg->tp_comm, (float*)c->tp_host_full, n, max ? COMM_MAX : COMM_SUM);
    CB_CUDA(c, cudaMemcpyAsync(x, c->tp_host_full, n * sizeof(float), cudaMemcpyHostToDevice, c->compute));
}

// The engine's all_reduce_tp: buf[n] (16-bit, a gradient slot's replicated tensors) <- its sum
// over the TP group, in place, before the shard group's reduce-scatter (which the comm stream
// starts after compute, so after this).
static inline void cuda_all_reduce_tp(void* ctx, void* buf, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (c->pg->tp_size <= 1 || n == 0) return;
    if (c->cfg.use_nccl) {
        cb_nccl_call(c, c->nccl_tp, ncclAllReduce(buf, buf, n, cb_nccl16(c), ncclSum, c->nccl_tp, c->compute),
                     "ncclAllReduce 16-bit (tensor-parallel group)");
        return;
    }
    cb_tp_fits(c, n, "gradient all-reduce");
    cb_tp_stage16(c, buf, n);
    comm_all_reduce_f32(c->pg->tp_comm, (float*)c->tp_host_full, n, COMM_SUM);
    cb_tp_unstage16(c, buf, (const float*)c->tp_host_full, n);
}

// ----------------------------------------------------------------------------
// Elementwise work, all on the compute stream

static inline void cuda_accumulate(void* ctx, float* dst, const float* src, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    accumulate_f32_cuda(dst, src, n, c->compute);
    cb_count(c, CB_LEDGER_FOLD, 12.0 * (double)n);
}

// The fused path's fold: dst = or += src (fp32 shard or the 16-bit slot itself), with the sum
// of squares into d_sumsq when asked (folded_sum_squares reads and clears it).
static inline void cuda_fold_grad(void* ctx, float* dst, const void* src, size_t src_bytes, size_t n, int first,
                                  int sum_squares) {
    CudaBackend* c = (CudaBackend*)ctx;
    if (src_bytes != sizeof(float) && src_bytes != sizeof(uint16_t))
        fatal(c->pg, "fsdp cuda: fold of %zu-byte elements", src_bytes);
    double* sumsq = sum_squares ? c->d_sumsq : NULL;
    const size_t sb = sum_squares_scratch_bytes();
    if (src_bytes == sizeof(float)) fold_grad_cuda(dst, (const float*)src, n, first, sumsq, c->sumsq_scratch, sb, c->compute);
    else if (c->cfg.param_fp16) fold_grad_cuda(dst, (const fp16*)src, n, first, sumsq, c->sumsq_scratch, sb, c->compute);
    else fold_grad_cuda(dst, (const bf16*)src, n, first, sumsq, c->sumsq_scratch, sb, c->compute);
    cb_count(c, CB_LEDGER_FOLD, (double)n * (double)(src_bytes + sizeof(float) + (first ? 0 : sizeof(float))));
}

// *out (device) <- the folds' sum of squares, which is cleared for the next step. No host wait.
static inline void cuda_folded_sum_squares(void* ctx, double* out) {
    CudaBackend* c = (CudaBackend*)ctx;
    CB_CUDA(c, cudaMemcpyAsync(out, c->d_sumsq, sizeof(double), cudaMemcpyDeviceToDevice, c->compute));
    CB_CUDA(c, cudaMemsetAsync(c->d_sumsq, 0, sizeof(double), c->compute));
}

// *out (device) <- [*out +] sum of x[n]^2 (HSDP: after the replica all-reduce). No host wait.
static inline void cuda_sum_squares_into(void* ctx, double* out, const float* x, size_t n, int accumulate) {
    CudaBackend* c = (CudaBackend*)ctx;
    sum_squares_cuda(out, c->sumsq_scratch, sum_squares_scratch_bytes(), x, n, accumulate, c->compute);
    cb_count(c, CB_LEDGER_FOLD, 4.0 * (double)n);
}

// Sum of squares in double, to the host. HOST SYNC (tests; the engine uses the forms above).
static inline double cuda_sum_squares(void* ctx, const float* x, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    cuda_sum_squares_into(ctx, c->d_sumsq + 1, x, n, 0);  // (the slot after the folds' accumulator)
    CB_CUDA(c, cudaMemcpyAsync(c->h_sumsq, c->d_sumsq + 1, sizeof(double), cudaMemcpyDeviceToHost, c->compute));
    cb_host_wait(c, c->compute, "the gradient's sum of squares");
    return *c->h_sumsq;
}

// *acc (device) = [*acc +] sum of x[n]: a micro-step's per-token losses. No host wait.
static inline void cuda_sum_into(void* ctx, double* acc, const float* x, size_t n, int accumulate) {
    CudaBackend* c = (CudaBackend*)ctx;
    sum_f32_cuda(acc, c->sumsq_scratch, sum_squares_scratch_bytes(), x, n, accumulate, c->compute);
}

// The step's decision from the global sums, on the device (one thread): the cpu backend's
// formula (fsdp_decide_from_sums).
static __global__ void cb_step_decide_kernel(FsdpStepStats* s, double tokens, float grad_clip) {
    fsdp_decide_from_sums(s, tokens, grad_clip);
}

// s (device) holds this rank's loss_sum and sumsq (adjacent doubles): sums both over the
// shard group, the loss over the replicas, then both over the TP group (whose first rank alone
// counted the losses and the replicated tensors' squares), so over the world; then decides.
// NCCL: the shard and replica sums on the comm stream between event hand-offs, the TP sum on
// compute (as every TP collective), no host wait. Staged: through pinned memory (one host
// wait, as the staged path's collectives always cost), in the same order.
static inline void cuda_step_decide(void* ctx, FsdpStepStats* s, double tokens, float grad_clip) {
    CudaBackend* c = (CudaBackend*)ctx;
    const int shard = c->shard_size > 1, replica = c->pg->replicate_size > 1, tp = c->pg->tp_size > 1;
    if ((shard || replica) && c->cfg.use_nccl) {
        cb_handoff(c, c->stats_ready);
        if (shard)
            cb_nccl_call(c, c->nccl_shard, ncclAllReduce(&s->loss_sum, &s->loss_sum, 2, ncclFloat64, ncclSum, c->nccl_shard,
                                                         c->comm), "ncclAllReduce (the step's loss and norm, shard group)");
        if (replica)
            cb_nccl_call(c, c->nccl_replica, ncclAllReduce(&s->loss_sum, &s->loss_sum, 1, ncclFloat64, ncclSum,
                                                           c->nccl_replica, c->comm),
                         "ncclAllReduce (the step's loss, replica group)");
        CB_CUDA(c, cudaEventRecord(c->stats_done, c->comm));
        CB_CUDA(c, cudaStreamWaitEvent(c->compute, c->stats_done, 0));
    }
    if (tp && c->cfg.use_nccl)
        cb_nccl_call(c, c->nccl_tp, ncclAllReduce(&s->loss_sum, &s->loss_sum, 2, ncclFloat64, ncclSum, c->nccl_tp,
                                                  c->compute), "ncclAllReduce (the step's loss and norm, tensor-parallel group)");
    if ((shard || replica || tp) && !c->cfg.use_nccl) {
        CB_CUDA(c, cudaMemcpyAsync(c->h_sumsq, &s->loss_sum, 2 * sizeof(double), cudaMemcpyDeviceToHost, c->compute));
        cb_host_wait(c, c->compute, "the staged all-reduce of the step's loss and norm");
        comm_all_reduce_f64(c->pg->shard_comm, c->h_sumsq, 2, COMM_SUM);
        if (replica) comm_all_reduce_f64(c->pg->replicate_comm, c->h_sumsq, 1, COMM_SUM);
        if (tp) comm_all_reduce_f64(c->pg->tp_comm, c->h_sumsq, 2, COMM_SUM);
        CB_CUDA(c, cudaMemcpyAsync(&s->loss_sum, c->h_sumsq, 2 * sizeof(double), cudaMemcpyHostToDevice, c->compute));
    }
    cb_step_decide_kernel<<<1, 1, 0, c->compute>>>(s, tokens, grad_clip);
    CB_CUDA(c, cudaGetLastError());
}

// host <- s, queued on compute; cuda_step_stats_wait waits for that copy only.
static inline void cuda_step_stats_fetch(void* ctx, FsdpStepStats* host, const FsdpStepStats* s) {
    CudaBackend* c = (CudaBackend*)ctx;
    CB_CUDA(c, cudaMemcpyAsync(host, s, sizeof(FsdpStepStats), cudaMemcpyDeviceToHost, c->compute));
    CB_CUDA(c, cudaEventRecord(c->stats_fetched, c->compute));
}
static inline void cuda_step_stats_wait(void* ctx) {
    CudaBackend* c = (CudaBackend*)ctx;
    cb_wait_event(c, c->stats_fetched, "the step's loss and gradient norm");
}

// AdamW on the fp32 master / moments. The 16-bit shard is refreshed separately, per unit, by
// refresh_param_shard (so no 16-bit output here).
static inline void cuda_adamw(void* ctx, float* param, float* m, float* v, const float* grad, size_t n, float lr,
                              float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    CudaBackend* c = (CudaBackend*)ctx;
    adamw_update_cuda(param, m, v, (bf16*)NULL, grad, n, lr, beta1, beta2, eps, weight_decay, NULL, 0, t, grad_scale, NULL,
                      NULL, c->cfg.seed, 0, c->compute);
    cb_count(c, CB_LEDGER_ADAMW, 28.0 * (double)n);
}

// One launch over a unit's shard: decay per element from the engine's table, and the 16-bit
// shard written as refresh_param_shard writes it (bf16: with its bits, seed of the unit and
// global index), so the result equals AdamW per tensor followed by the refresh, bit for bit.
static inline void cuda_adamw_unit(void* ctx, float* param, float* m, float* v, const float* grad, void* param_shard,
                                   size_t n, const uint64_t* decay_toggles, int n_toggles, float lr, float beta1,
                                   float beta2, float eps, float weight_decay, int t, const FsdpStepStats* stats,
                                   uint64_t unit_stream, size_t global_begin, const SrKeyRun* key_runs, int n_key_runs) {
    CudaBackend* c = (CudaBackend*)ctx;
    const uint64_t seed = cuda_backend_sr_seed(c->cfg.seed, unit_stream);
    if (c->cfg.param_fp16)
        adamw_update_cuda(param, m, v, (fp16*)param_shard, grad, n, lr, beta1, beta2, eps, weight_decay, decay_toggles,
                          n_toggles, t, 1.0f, &stats->clip_scale, &stats->skip, seed, global_begin, c->compute,
                          key_runs, n_key_runs);
    else
        adamw_update_cuda(param, m, v, (bf16*)param_shard, grad, n, lr, beta1, beta2, eps, weight_decay, decay_toggles,
                          n_toggles, t, 1.0f, &stats->clip_scale, &stats->skip, seed, global_begin, c->compute,
                          key_runs, n_key_runs);
    cb_count(c, CB_LEDGER_ADAMW, 30.0 * (double)n);
}

// param_shard[n] (16-bit) <- master[n]: bf16 by stochastic rounding, element i with the random
// bits of (seed, unit_stream, step, key index of global_begin + i) (global_begin: master[0]'s
// index in the unit's flat buffer; the key index: its index in the unit at TP 1, through
// key_runs, device memory), so the result depends neither on W, nor on --tp, nor on how a
// range is split; fp16 to nearest even (param_copy_cuda).
static inline void cuda_refresh_param_shard_at(void* ctx, void* param_shard, const float* master, size_t n,
                                               uint64_t unit_stream, size_t global_begin, const SrKeyRun* key_runs,
                                               int n_key_runs, int step) {
    CudaBackend* c = (CudaBackend*)ctx;
    const uint64_t seed = cuda_backend_sr_seed(c->cfg.seed, unit_stream);
    if (c->cfg.param_fp16)
        param_copy_cuda((fp16*)param_shard, master, n, seed, step, global_begin, c->compute, key_runs, n_key_runs);
    else param_copy_cuda((bf16*)param_shard, master, n, seed, step, global_begin, c->compute, key_runs, n_key_runs);
    cb_count(c, CB_LEDGER_ADAMW, 6.0 * (double)n);
}

// The former whole-arena signature (unit 0, global index = position in the arena): kept for
// callers of the old FsdpBackend; depends on W, so the engine should use the per-unit one.
static inline void cuda_refresh_param_shard(void* ctx, void* param_shard, const float* master, size_t n, int step) {
    cuda_refresh_param_shard_at(ctx, param_shard, master, n, 0, 0, NULL, 0, step);
}

// ----------------------------------------------------------------------------
// --offload optimizer (ZeRO-Offload): copies on the copy stream, the optimizer on the host
// worker (fsdp/offload.h). Per unit u:
//   offload_fold:   the reduced shard (the reduce-scatter's output: the copy waits for its
//                   done event; a shard group of one: the gradient slot, after compute) ->
//                   D2H into pinned staging -> record to_host[u]; the worker waits for
//                   to_host[u], then folds. The collective's next output into the same
//                   buffer (comm stream) waits for to_host[u]; a slot compute rewrites waits
//                   through offload_guard.
//   offload_decide: record reads_done on compute (everything that reads the shards this
//                   step is enqueued by then) and make the copy stream wait for it: the
//                   uploads of the new shards come after the step's last reads of the old.
//   offload_upload: the worker's AdamW of u done -> H2D of the new shard on the copy stream
//                   -> record to_device[u]; the gather (comm) or compute waits for it.
// HSDP: the folded shards are summed over the replicas on the host (host transport).
// The host waits once per step for the decision (the loss from the device, the worker's
// folds): the host runs the optimizer, so it must know the clip scale and skip.

static int cb_copy_landed(void* ctx, int u) {  // (on the worker thread)
    const cudaError_t e = cudaEventQuery(((CudaBackend*)ctx)->to_host[u]);
    return e == cudaSuccess ? 1 : e == cudaErrorNotReady ? 0 : -1;
}

static inline void cb_offload_wait_unit(CudaBackend* c, int u) {
    char err[300];
    if (host_optimizer_wait_unit(c->host_opt, u, err, sizeof err)) fatal(c->pg, "%s", err);
}

static inline void cuda_offload_fold(void* ctx, int u, float* host_grad, void* host_stage, const void* src,
                                     size_t src_bytes, size_t n, int op, int first, int sum_squares) {
    CudaBackend* c = (CudaBackend*)ctx;
    cb_offload_wait_unit(c, u);  // its previous fold has read the staging (and to_host[u] is free)
    if (op >= 0 && c->cfg.use_nccl) {
        CB_CUDA(c, cudaStreamWaitEvent(c->copy, cb_op(c, op, 0)->done, 0));
    } else {
        CB_CUDA(c, cudaEventRecord(c->copy_ready, c->compute));
        CB_CUDA(c, cudaStreamWaitEvent(c->copy, c->copy_ready, 0));
    }
    if (n) CB_CUDA(c, cudaMemcpyAsync(host_stage, src, n * src_bytes, cudaMemcpyDeviceToHost, c->copy));
    CB_CUDA(c, cudaEventRecord(c->to_host[u], c->copy));
    // The collective writes src next (NCCL: on comm; staged: its result's H2D on compute).
    if (op >= 0) CB_CUDA(c, cudaStreamWaitEvent(c->cfg.use_nccl ? c->comm : c->compute, c->to_host[u], 0));
    host_optimizer_fold(c->host_opt, u, host_grad, host_stage, src_bytes, n, first, sum_squares);
}

static inline void cuda_offload_guard(void* ctx, int u, int upload) {
    CudaBackend* c = (CudaBackend*)ctx;
    CB_CUDA(c, cudaStreamWaitEvent(c->compute, upload ? c->to_device[u] : c->to_host[u], 0));
}

static inline void cuda_offload_drain(void* ctx) {
    CudaBackend* c = (CudaBackend*)ctx;
    char err[300];
    if (host_optimizer_drain(c->host_opt, err, sizeof err)) fatal(c->pg, "%s", err);
}

// HSDP: over the host transport, as the staged path sums replicas (the same function).
static inline void cuda_offload_all_reduce_replicas(void* ctx, float* host_grad, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    cuda_offload_drain(ctx);
    if (c->pg->replicate_size > 1 && n > 0) comm_all_reduce_f32_sum(c->pg->replicate_comm, host_grad, n);
}

static inline double cuda_offload_sum_squares(void* ctx, const float* host_grad, size_t n) {
    CudaBackend* c = (CudaBackend*)ctx;
    cuda_offload_drain(ctx);
    const double folded = host_optimizer_take_sum_squares(c->host_opt);
    return host_grad ? host_sum_squares(host_grad, n) : folded;
}

// The loss sum from the device (the step's one host wait), the world's sums over the host
// transport (as the cpu device), the decision.
static inline void cuda_offload_decide(void* ctx, FsdpStepStats* s, const double* d_loss_sum, double tokens,
                                       float grad_clip) {
    CudaBackend* c = (CudaBackend*)ctx;
    CB_CUDA(c, cudaEventRecord(c->reads_done, c->compute));
    CB_CUDA(c, cudaStreamWaitEvent(c->copy, c->reads_done, 0));
    CB_CUDA(c, cudaMemcpyAsync(c->h_sumsq, d_loss_sum, sizeof(double), cudaMemcpyDeviceToHost, c->compute));
    cb_host_wait(c, c->compute, "the offloaded step's loss");
    s->loss_sum = c->h_sumsq[0];
    if (c->pg->shard_comm && c->shard_size > 1) comm_all_reduce_f64(c->pg->shard_comm, &s->loss_sum, 2, COMM_SUM);
    if (c->pg->replicate_size > 1) comm_all_reduce_f64(c->pg->replicate_comm, &s->loss_sum, 1, COMM_SUM);
    // Tensor parallel: both over the TP group too, in cuda_step_decide's order (bitwise its sums).
    if (c->pg->tp_size > 1) comm_all_reduce_f64(c->pg->tp_comm, &s->loss_sum, 2, COMM_SUM);
    fsdp_decide_from_sums(s, tokens, grad_clip);
}

static inline void cuda_offload_adamw(void* ctx, int u, float* param, float* m, float* v, const float* grad,
                                      void* host_stage, size_t n, const uint64_t* decay_toggles, int n_toggles,
                                      float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                                      const FsdpStepStats* stats, uint64_t unit_stream, size_t global_begin,
                                      const SrKeyRun* key_runs, int n_key_runs) {
    CudaBackend* c = (CudaBackend*)ctx;
    HostAdamw a;
    memset(&a, 0, sizeof a);
    a.param = param;
    a.m = m;
    a.v = v;
    a.grad = grad;
    a.param_bf16 = (uint16_t*)host_stage;
    a.n = n;
    a.decay_toggles = decay_toggles;
    a.n_toggles = n_toggles;
    a.lr = lr;
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.eps = eps;
    a.weight_decay = weight_decay;
    a.clip_scale = stats->clip_scale;
    a.t = t;
    a.skip = stats->skip;
    a.seed = cuda_backend_sr_seed(c->cfg.seed, unit_stream);
    a.global_begin = global_begin;
    a.key_runs = key_runs;
    a.n_key_runs = n_key_runs;
    host_optimizer_adamw(c->host_opt, u, &a);
}

static inline void cuda_offload_round(void* ctx, int u, void* host_stage, const float* master, size_t n,
                                      uint64_t unit_stream, size_t global_begin, const SrKeyRun* key_runs,
                                      int n_key_runs, int step) {
    CudaBackend* c = (CudaBackend*)ctx;
    host_optimizer_round(c->host_opt, u, (uint16_t*)host_stage, master, n, cuda_backend_sr_seed(c->cfg.seed, unit_stream),
                         step, global_begin, key_runs, n_key_runs);
}

static inline void cuda_offload_upload(void* ctx, int u, void* param_shard, const void* host_stage, size_t bytes,
                                       int read_by_compute) {
    CudaBackend* c = (CudaBackend*)ctx;
    cb_offload_wait_unit(c, u);
    if (bytes) CB_CUDA(c, cudaMemcpyAsync(param_shard, host_stage, bytes, cudaMemcpyHostToDevice, c->copy));
    CB_CUDA(c, cudaEventRecord(c->to_device[u], c->copy));
    // The gather reads it next (NCCL: on comm; staged: its D2H on compute).
    if (!read_by_compute) CB_CUDA(c, cudaStreamWaitEvent(c->cfg.use_nccl ? c->comm : c->compute, c->to_device[u], 0));
}

// ----------------------------------------------------------------------------
// Setup and teardown

static inline ncclComm_t cb_nccl_create(CudaBackend* c, Comm* group, const char* name) {
    const int rank = comm_rank(group), size = comm_size(group);
    char what[128];
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) {
        snprintf(what, sizeof what, "ncclGetUniqueId (%s group)", name);
        cb_nccl_call(c, NULL, ncclGetUniqueId(&id), what);
    }
    comm_broadcast(group, &id, sizeof id, 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // fail fast: we poll with a deadline instead of blocking forever
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 20, 0)
    config.commName = name;  // shows in NCCL's logs and error messages
#endif
    ncclComm_t comm = NULL;
    snprintf(what, sizeof what, "ncclCommInitRankConfig (%s group, rank %d of %d)", name, rank, size);
    const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) cb_nccl_fail(c, comm, r, what);
    if (!comm) fatal(c->pg, "NCCL: %s returned no communicator", what);
    cb_nccl_settle(c, comm, what);
    return comm;
}

static inline void cb_nccl_destroy(CudaBackend* c, ncclComm_t* comm, const char* name) {
    if (!*comm) return;
    char what[96];
    snprintf(what, sizeof what, "ncclCommFinalize (%s group)", name);
    cb_nccl_call(c, *comm, ncclCommFinalize(*comm), what);
    const ncclResult_t r = ncclCommDestroy(*comm);
    *comm = NULL;
    if (r != ncclSuccess) fatal(c->pg, "NCCL error in ncclCommDestroy (%s group): %s", name, ncclGetErrorString(r));
}

// max_ops: op slots the engine may have in flight at once (its parameter slots plus gradient
// slots: pass exactly that number). The CUDA device must be current. Allocates everything up
// front:
//   device:  NCCL: reduce_fp32 ? max_unit_padded fp32 (one scratch, comm stream) : nothing
//            staged: max_unit_padded fp32 (one scratch, compute stream)
//            + 8 KiB + 256 B for sum_squares
//            staged at TP: tp_max_elems fp32 (the TP collectives' scratch, compute stream)
//   pinned:  staged: for each op slot (P + ceil(P / shard_size)) x 4 B, P its op_padded entry
//            (only the root's two slots carry the root, several times a block at GPT-2
//            sizes), and a chunk buffer for HSDP's replica all-reduce; 8 B for sum_squares;
//            staged at TP: (tp_max_elems + tp_max_elems / tp) x 4 B
// (max_shard = ceil(max_unit_padded / shard_size)). Plus NCCL's own buffers (not counted).
static inline void fsdp_backend_cuda_init(FsdpBackend* be, const ProcessGroup* pg, int max_ops,
                                          const CudaBackendConfig* cfg) {
    CudaBackend* c = (CudaBackend*)calloc(1, sizeof(CudaBackend));
    if (!c) fatal(pg, "out of host memory");
    c->pg = pg;
    c->cfg = *cfg;
    c->cfg.op_padded = NULL;  // the caller's array: read below, not kept
    c->compute = cfg->compute;
    c->max_ops = max_ops;
    c->shard_size = pg->shard_size;
    c->shard_rank = pg->shard_rank;
    if (max_ops < 1) fatal(pg, "fsdp cuda backend: max_ops = %d", max_ops);
    if (c->shard_size < 1) fatal(pg, "fsdp cuda backend: shard group of %d ranks", c->shard_size);
    c->max_shard = (cfg->max_unit_padded + (size_t)c->shard_size - 1) / (size_t)c->shard_size;
    CB_CUDA(c, cudaGetDevice(&c->device));
    c->ops = (CudaOpSlot*)calloc((size_t)max_ops, sizeof(CudaOpSlot));
    if (!c->ops) fatal(pg, "out of host memory");
    for (int k = 0; k < max_ops; k++) {
        c->ops[k].capacity = cfg->op_padded ? cfg->op_padded[k] : cfg->max_unit_padded;
        if (c->ops[k].capacity > cfg->max_unit_padded)
            fatal(pg, "fsdp cuda backend: op slot %d carries %zu elements, above max_unit_padded %zu", k,
                  c->ops[k].capacity, cfg->max_unit_padded);
    }
    CB_CUDA(c, cudaEventCreateWithFlags(&c->host_ev, cudaEventDisableTiming));
    CB_CUDA(c, cudaEventCreateWithFlags(&c->stats_fetched, cudaEventDisableTiming));

    if (cfg->use_nccl) {
        int least = 0, greatest = 0;
        CB_CUDA(c, cudaDeviceGetStreamPriorityRange(&least, &greatest));
        // Highest priority: a collective's kernels get SMs as soon as they can run, so that the
        // next unit's gather is not queued behind the current unit's compute kernels.
        CB_CUDA(c, cudaStreamCreateWithPriority(&c->comm, cudaStreamNonBlocking, greatest));
        for (int k = 0; k < max_ops; k++) {
            CB_CUDA(c, cudaEventCreateWithFlags(&c->ops[k].ready, cudaEventDisableTiming));
            CB_CUDA(c, cudaEventCreateWithFlags(&c->ops[k].done, cudaEventDisableTiming));
        }
        CB_CUDA(c, cudaEventCreateWithFlags(&c->rep_ready, cudaEventDisableTiming));
        CB_CUDA(c, cudaEventCreateWithFlags(&c->rep_done, cudaEventDisableTiming));
        CB_CUDA(c, cudaEventCreateWithFlags(&c->stats_ready, cudaEventDisableTiming));
        CB_CUDA(c, cudaEventCreateWithFlags(&c->stats_done, cudaEventDisableTiming));
        // Every rank creates the shard communicator, then (HSDP) the replica one, then (tensor
        // parallel) the TP one: the same order everywhere, each init polled to completion
        // before the next NCCL call.
        c->nccl_shard = cb_nccl_create(c, pg->shard_comm, "shard");
        if (pg->replicate_size > 1) c->nccl_replica = cb_nccl_create(c, pg->replicate_comm, "replica");
        if (pg->tp_size > 1) {
            c->nccl_tp = cb_nccl_create(c, pg->tp_comm, "tensor-parallel");
            CB_CUDA(c, cudaStreamCreateWithPriority(&c->tp_stream, cudaStreamNonBlocking, greatest));
            CB_CUDA(c, cudaEventCreateWithFlags(&c->tp_ready, cudaEventDisableTiming));
            CB_CUDA(c, cudaEventCreateWithFlags(&c->tp_done, cudaEventDisableTiming));
        }
        if (cfg->reduce_fp32)
            c->f32_scratch = (float*)cb_device_alloc(c, cfg->max_unit_padded * sizeof(float),
                                                     "the fp32 reduce-scatter scratch");
    } else {
        c->f32_scratch = (float*)cb_device_alloc(c, cfg->max_unit_padded * sizeof(float),
                                                 "the staged reduce-scatter scratch");
        for (int k = 0; k < max_ops; k++) {
            const size_t p = c->ops[k].capacity;
            c->ops[k].host_full = cb_host_alloc(c, p * sizeof(float), "staging");
            c->ops[k].host_shard = cb_host_alloc(c, (p + (size_t)c->shard_size - 1) / (size_t)c->shard_size * sizeof(float),
                                                 "staging");
        }
        if (pg->replicate_size > 1) {
            size_t chunk = cfg->max_unit_padded > ((size_t)1 << 16) ? cfg->max_unit_padded : ((size_t)1 << 16);
            if (chunk > ((size_t)1 << 22)) chunk = (size_t)1 << 22;
            c->chunk_elems = chunk;
            c->h_chunk = (float*)cb_host_alloc(c, chunk * sizeof(float), "replica all-reduce staging");
        }
        if (pg->tp_size > 1) {
            const size_t tp_bytes = cfg->tp_max_elems * sizeof(float);
            c->tp_f32 = (float*)cb_device_alloc(c, tp_bytes, "the staged tensor-parallel scratch");
            c->tp_host_full = cb_host_alloc(c, tp_bytes, "tensor-parallel staging");
            c->tp_host_part = cb_host_alloc(c, (cfg->tp_max_elems + (size_t)pg->tp_size - 1) / (size_t)pg->tp_size *
                                                   sizeof(float), "tensor-parallel staging");
        }
    }
    const size_t sq = align_up_256(sum_squares_scratch_bytes());
    c->sumsq_scratch = cb_device_alloc(c, sq + 256, "the sum-of-squares scratch");
    c->d_sumsq = (double*)((char*)c->sumsq_scratch + sq);
    // The folds add into it from the first step on (cuda_folded_sum_squares clears it after).
    CB_CUDA(c, cudaMemsetAsync(c->d_sumsq, 0, sizeof(double), c->compute));
    c->h_sumsq = (double*)cb_host_alloc(c, 2 * sizeof(double), "the step's loss and sum of squares");
    if (cfg->offload_units > 0) {
        const int U = cfg->offload_units;
        CB_CUDA(c, cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
        c->to_host = (cudaEvent_t*)calloc((size_t)U, sizeof(cudaEvent_t));
        c->to_device = (cudaEvent_t*)calloc((size_t)U, sizeof(cudaEvent_t));
        if (!c->to_host || !c->to_device) fatal(pg, "out of host memory");
        for (int u = 0; u < U; u++) {
            CB_CUDA(c, cudaEventCreateWithFlags(&c->to_host[u], cudaEventDisableTiming));
            CB_CUDA(c, cudaEventCreateWithFlags(&c->to_device[u], cudaEventDisableTiming));
        }
        CB_CUDA(c, cudaEventCreateWithFlags(&c->copy_ready, cudaEventDisableTiming));
        CB_CUDA(c, cudaEventCreateWithFlags(&c->reads_done, cudaEventDisableTiming));
        c->host_opt = host_optimizer_create(U, cfg->offload_threads, cb_timeout(c), cb_copy_landed, c);
        if (!c->host_opt) fatal(pg, "--offload optimizer: cannot start the host optimizer thread");
    }

    memset(be, 0, sizeof(*be));
    be->ctx = c;
    be->param_bytes = sizeof(uint16_t);  // bf16 or fp16
    // NCCL reducing in 16 bits leaves the 16-bit sum for fold_grad; the staged path (and fp32
    // reduction) hands over fp32, rounded to 16-bit values when reducing in 16 bits.
    be->reduce_out_bytes = cfg->use_nccl && !cfg->reduce_fp32 ? sizeof(uint16_t) : sizeof(float);
    be->host_is_device = 0;
    be->alloc = cuda_alloc;
    be->release = cuda_release;
    be->alloc_host = cuda_alloc_host;
    be->release_host = cuda_release_host;
    be->copy_to_host = cuda_copy_to_host;
    be->copy_to_device = cuda_copy_to_device;
    be->zero = cuda_zero;
    be->all_gather_start = cuda_all_gather_start;
    be->reduce_scatter_start = cuda_reduce_scatter_start;
    be->wait = cuda_wait;
    be->all_reduce_replicas = cuda_all_reduce_replicas;
    be->all_reduce_tp = cuda_all_reduce_tp;
    be->accumulate = cuda_accumulate;
    be->sum_squares = cuda_sum_squares;
    be->adamw = cuda_adamw;
    be->refresh_param_shard = cuda_refresh_param_shard_at;
    be->fold_grad = cuda_fold_grad;
    be->folded_sum_squares = cuda_folded_sum_squares;
    be->adamw_unit = cuda_adamw_unit;
    be->sum_into = cuda_sum_into;
    be->sum_squares_into = cuda_sum_squares_into;
    be->step_decide = cuda_step_decide;
    be->step_stats_fetch = cuda_step_stats_fetch;
    be->step_stats_wait = cuda_step_stats_wait;
    if (c->host_opt) {
        be->offload_fold = cuda_offload_fold;
        be->offload_guard = cuda_offload_guard;
        be->offload_sum_squares = cuda_offload_sum_squares;
        be->offload_decide = cuda_offload_decide;
        be->offload_adamw = cuda_offload_adamw;
        be->offload_round = cuda_offload_round;
        be->offload_upload = cuda_offload_upload;
        be->offload_drain = cuda_offload_drain;
        be->offload_all_reduce_replicas = cuda_offload_all_reduce_replicas;
    }
}

// Waits for both streams (with the deadline), destroys the communicators (collective: every
// rank of each group calls it), frees what init allocated. The compute stream is the caller's.
static inline void fsdp_backend_cuda_free(FsdpBackend* be) {
    CudaBackend* c = (CudaBackend*)be->ctx;
    if (!c) return;
    // An op still in flight: a staged ticket is a collective every rank must finish, but its
    // destination may be engine memory already freed, so nothing is copied back.
    for (int k = 0; k < c->max_ops; k++) {
        CudaOpSlot* s = &c->ops[k];
        if (s->kind != CUDA_OP_IDLE && !c->cfg.use_nccl && s->n > 0) comm_wait(c->pg->shard_comm, s->ticket);
        s->kind = CUDA_OP_IDLE;
    }
    if (c->host_opt) {  // the worker polls the copy events: stop it first
        char err[300];
        const int failed = host_optimizer_drain(c->host_opt, err, sizeof err);
        host_optimizer_free(c->host_opt);
        c->host_opt = NULL;
        if (failed) fatal(c->pg, "%s", err);
    }
    cb_host_wait(c, c->compute, "the compute stream at teardown");
    if (c->comm) cb_host_wait(c, c->comm, "the comm stream at teardown");
    if (c->copy) cb_host_wait(c, c->copy, "the copy stream at teardown");
    if (c->tp_stream) cb_host_wait(c, c->tp_stream, "the tensor-parallel stream at teardown");
    cb_nccl_destroy(c, &c->nccl_tp, "tensor-parallel");
    cb_nccl_destroy(c, &c->nccl_replica, "replica");
    cb_nccl_destroy(c, &c->nccl_shard, "shard");
    for (int k = 0; k < c->max_ops; k++) {
        if (c->ops[k].ready) CB_CUDA(c, cudaEventDestroy(c->ops[k].ready));
        if (c->ops[k].done) CB_CUDA(c, cudaEventDestroy(c->ops[k].done));
        if (c->ops[k].host_full) CB_CUDA(c, cudaFreeHost(c->ops[k].host_full));
        if (c->ops[k].host_shard) CB_CUDA(c, cudaFreeHost(c->ops[k].host_shard));
    }
    if (c->rep_ready) CB_CUDA(c, cudaEventDestroy(c->rep_ready));
    if (c->rep_done) CB_CUDA(c, cudaEventDestroy(c->rep_done));
    if (c->stats_ready) CB_CUDA(c, cudaEventDestroy(c->stats_ready));
    if (c->stats_done) CB_CUDA(c, cudaEventDestroy(c->stats_done));
    if (c->stats_fetched) CB_CUDA(c, cudaEventDestroy(c->stats_fetched));
    if (c->comm) CB_CUDA(c, cudaStreamDestroy(c->comm));
    if (c->tp_ready) CB_CUDA(c, cudaEventDestroy(c->tp_ready));
    if (c->tp_done) CB_CUDA(c, cudaEventDestroy(c->tp_done));
    if (c->tp_stream) CB_CUDA(c, cudaStreamDestroy(c->tp_stream));
    for (int u = 0; c->to_host && u < c->cfg.offload_units; u++) {
        CB_CUDA(c, cudaEventDestroy(c->to_host[u]));
        CB_CUDA(c, cudaEventDestroy(c->to_device[u]));
    }
    free(c->to_host);
    free(c->to_device);
    if (c->copy_ready) CB_CUDA(c, cudaEventDestroy(c->copy_ready));
    if (c->reads_done) CB_CUDA(c, cudaEventDestroy(c->reads_done));
    if (c->copy) CB_CUDA(c, cudaStreamDestroy(c->copy));
    if (c->f32_scratch) CB_CUDA(c, cudaFree(c->f32_scratch));
    if (c->sumsq_scratch) CB_CUDA(c, cudaFree(c->sumsq_scratch));
    if (c->h_sumsq) CB_CUDA(c, cudaFreeHost(c->h_sumsq));
    if (c->h_chunk) CB_CUDA(c, cudaFreeHost(c->h_chunk));
    if (c->tp_f32) CB_CUDA(c, cudaFree(c->tp_f32));
    if (c->tp_host_full) CB_CUDA(c, cudaFreeHost(c->tp_host_full));
    if (c->tp_host_part) CB_CUDA(c, cudaFreeHost(c->tp_host_part));
    CB_CUDA(c, cudaEventDestroy(c->host_ev));
    for (int i = 0; i < c->prof.n; i++) {
        CB_CUDA(c, cudaEventDestroy(c->prof.start[i]));
        CB_CUDA(c, cudaEventDestroy(c->prof.end[i]));
    }
    free(c->prof.start);
    free(c->prof.end);
    free(c->prof.kind);
    free(c->ops);
    free(c);
    memset(be, 0, sizeof(*be));
}

// The host waits until everything enqueued on stream s so far has run, with the backend's
// deadline and NCCL error checks (for the model's own waits: the compute stream may be
// waiting on a collective that a stalled peer never joins, and NCCL itself never times out).
static inline void fsdp_backend_cuda_host_wait(FsdpBackend* be, cudaStream_t s, const char* what) {
    cb_host_wait((CudaBackend*)be->ctx, s, what);
}

// --profile-step: time every collective's comm-stream work from now until
// fsdp_backend_cuda_profile_finish (NCCL path; the staged path's collectives are host-side).
static inline void fsdp_backend_cuda_profile_start(FsdpBackend* be) {
    CudaBackend* c = (CudaBackend*)be->ctx;
    c->prof.on = c->comm != NULL;
    c->prof.ledger = 1;
    for (int k = 0; k < CB_LEDGER_KINDS; k++) c->ledger[k] = 0.0;
    c->prof.host_waits = c->prof.n_wait_kinds = 0;
    memset(c->prof.wait_count, 0, sizeof(c->prof.wait_count));
}

// The host waits since profile_start: how many, and up to CB_MAX_WAIT_KINDS reasons with
// their counts as "what x N, ..." into out.
static inline int fsdp_backend_cuda_host_waits(const FsdpBackend* be, char* out, size_t n) {
    const CbCommProfile* p = &((const CudaBackend*)be->ctx)->prof;
    size_t at = 0;
    out[0] = '\0';
    for (int k = 0; k < p->n_wait_kinds && at < n; k++)
        at += (size_t)snprintf(out + at, n - at, "%s%s x %d", k ? ", " : "", p->wait_what[k], p->wait_count[k]);
    return p->host_waits;
}

// The optimizer path's bytes per CB_LEDGER_* kind since profile_start (counting stops at
// profile_finish).
static inline void fsdp_backend_cuda_ledger(const FsdpBackend* be, double bytes[CB_LEDGER_KINDS]) {
    for (int k = 0; k < CB_LEDGER_KINDS; k++) bytes[k] = ((const CudaBackend*)be->ctx)->ledger[k];
}

// Waits for the comm stream, then per CB_PROF_* kind: the comm stream's milliseconds and how
// many collectives (all zero on the staged path).
static inline void fsdp_backend_cuda_profile_finish(FsdpBackend* be, double ms[CB_PROF_KINDS], int count[CB_PROF_KINDS]) {
    CudaBackend* c = (CudaBackend*)be->ctx;
    CbCommProfile* p = &c->prof;
    for (int k = 0; k < CB_PROF_KINDS; k++) { ms[k] = 0.0; count[k] = 0; }
    p->on = 0;
    p->ledger = 0;
    if (p->n == 0) return;
    cb_host_wait(c, c->comm, "the comm stream (--profile-step)");
    for (int i = 0; i < p->n; i++) {
        float t = 0.0f;
        CB_CUDA(c, cudaEventElapsedTime(&t, p->start[i], p->end[i]));
        ms[p->kind[i]] += t;
        count[p->kind[i]]++;
        CB_CUDA(c, cudaEventDestroy(p->start[i]));
        CB_CUDA(c, cudaEventDestroy(p->end[i]));
    }
    p->n = 0;
}

// Device bytes this backend allocated itself (scratch; not what alloc() handed out, not
// NCCL's internal buffers), for the memory budget.
static inline size_t fsdp_backend_cuda_device_bytes(const FsdpBackend* be) {
    return be->ctx ? ((const CudaBackend*)be->ctx)->device_bytes : 0;
}

// Pinned host bytes this backend allocated itself (staging buffers; not alloc_host's).
static inline size_t fsdp_backend_cuda_host_bytes(const FsdpBackend* be) {
    return be->ctx ? ((const CudaBackend*)be->ctx)->host_bytes : 0;
}

#endif  // FSDP_BACKEND_CUDA_CUH
