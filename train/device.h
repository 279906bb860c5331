// A device, as the training loop sees it: the kernel table the model schedule runs
// (kernels/kernels.h) and the FSDP backend the engine runs (fsdp/fsdp.h), built together by
// one constructor (device_open in train/device.cuh), with what the run prints about it.
#ifndef FSDP_TRAIN_DEVICE_H
#define FSDP_TRAIN_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include "comm/process_group.h"
#include "fsdp/fsdp.h"
#include "kernels/kernels.h"
#include "kernels/kernels_sim.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

// Activation recompute (--recompute): none keeps every block's activations for its backward;
// selective keeps the matmul and attention outputs and recomputes the LayerNorm and GELU
// outputs; full keeps each block's input only and reruns the block's forward in its backward.
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } Recompute;

// How to build the device (from the command line).
typedef struct {
    int cuda;                  // 0: the cpu device
    const char* comm;          // cuda: "auto", "nccl" or "mpi"
    int reduce_fp32;           // cuda: reduce-scatter gradients in fp32 instead of bf16
    const char* attention;     // cuda: "auto", "flash", "flash-pipelined", "cublas" or "cudnn"
    int gelu_fusion;           // cuda: 0 none, 1 forward, 2 forward + backward (cuda_matmul.cuh)
    uint64_t seed;             // cuda: stochastic-rounding seed of the bf16 parameter copies
    Recompute recompute;       // cuda, selective: the forward's GELU must be recomputable exactly
    int matmul_autotune;       // cuda: MatmulTuneMode, -1 the build's default (cuda_matmul.cuh)
    int param_fp16;            // cuda: the compute dtype is fp16 (--param-dtype fp16), else bf16
    // --plan: the sim device (kernels_sim.h, fsdp/backend_sim.h) modelling this profile
    // (train/plan.h) instead of a real one; its tables advance sim_clock. NULL otherwise.
    const struct SimProfile* sim;
    SimClock* sim_clock;
    int gpus_per_node;         // sim: which groups stay on NVLink
} DeviceOptions;

// A line of the memory budget: what, and how many bytes.
typedef struct { const char* what; size_t bytes; } MemoryLine;

// The collectives of tensor parallelism's schedule (train_gpt.cu) over this rank's TP group,
// on activations in the compute dtype and the loss's fp32 statistics; blocking (in order with
// the kernels) but for reduce_scatter_start. NULL where the device has none (no tensor
// parallelism there).
typedef struct {
    void* ctx;
    // full[size * n] <- every rank's local[n], in rank order
    void (*all_gather)(void* ctx, void* full, const void* local, size_t n);
    // local[n] <- the group's sum of full[rank * n : (rank + 1) * n]
    void (*reduce_scatter)(void* ctx, void* local, const void* full, size_t n);
    // The same, started: the kernels enqueued before it are what it reads; those after it run
    // while it is in flight and must neither write full nor touch local until wait(ticket),
    // after which the kernels see local summed. One in flight at a time, and no other TP
    // collective meanwhile. cpu: comm.h's non-blocking reduce-scatter; cuda NCCL: on a TP
    // stream beside compute, events both ways, the host never waits; cuda staged (--comm
    // mpi): blocking, all done in start (ticket 0, wait nothing).
    int64_t (*reduce_scatter_start)(void* ctx, void* local, const void* full, size_t n);
    void (*wait)(void* ctx, int64_t ticket);
    // x[n] <- the group's sum, or with max its maximum, in place
    void (*all_reduce_f32)(void* ctx, float* x, size_t n, int max);
} TpComm;

// What this rank's TP collectives moved, cumulative since device_open: the schedule's helpers
// (train_gpt.cu) count their calls as a ring moves the bytes, the planner's convention
// (train/plan.c, tp_traffic): an all-gather receives (tp - 1) / tp of what it gathers, a
// reduce-scatter sends (tp - 1) / tp of its input, and an all-reduce sends 2 (tp - 1) / tp of
// its buffer (a reduce-scatter, then an all-gather). all_reduced is the loss's statistics; the
// engine counts its all-reduces of the replicated gradients itself, by their buffers' bytes
// (FsdpTraffic.tp_replicated_reduced), which tp_all_reduce_bytes turns into a ring's.
typedef struct { uint64_t gathered, reduce_scattered, all_reduced; } TpBytes;

// A ring all-reduce of a buffer of `bytes` over tp ranks: what each rank sends (in double: a
// buffer need not divide by tp; the loss's do, N being a multiple of tp).
static inline double tp_all_reduce_bytes(double bytes, int tp) { return bytes * 2.0 * (tp - 1) / tp; }
// What was moved between `before` and `now` (a step's part of the cumulative counts).
static inline TpBytes tp_bytes_since(const TpBytes* now, const TpBytes* before) {
    TpBytes d = {now->gathered - before->gathered, now->reduce_scattered - before->reduce_scattered,
                 now->all_reduced - before->all_reduced};
    return d;
}

typedef struct Device Device;
struct Device {
    const char* name;          // "cpu", "cuda" or "sim"
    Kernels kernels;
    FsdpBackend backend;
    TpComm tp;
    TpBytes tp_bytes;          // what the schedule's TP collectives moved (zero without TP)
    char gpu_name[256];        // the GPU's (the peak-FLOPs table knows GPUs by name); "" on the cpu
    char description[512];     // the startup line about the device; "" on the cpu
    // Memory the device allocated itself beyond the engine's state and the activations, and
    // the pinned host memory it holds (fixed once built).
    MemoryLine device_lines[4], host_lines[2];
    int n_device_lines, n_host_lines;
    void* impl;                // the device's own state (cuda: streams, the baseline)
    // Device memory in use now, MiB above what was in use before this process allocated
    // any (cuda: cudaMemGetInfo, every process on the GPU); NULL where not measured (cpu).
    double (*memory_in_use_mib)(const Device* d);
    // --profile-step, from start to finish: the collectives' own time on their stream (cuda
    // with NCCL), the host waits, and the optimizer path's bytes per element of this rank's
    // shard (shard_elements). finish writes lines for the table ("" when there is nothing).
    void (*profile_start)(Device* d);
    void (*profile_finish)(Device* d, size_t shard_elements, char* lines, size_t n);
    // --profile-step's roofline table: the device's copy bandwidth in GB/s (a copy counted as
    // its read and its write), measured now, and how (into how, n bytes); 0 when it could not
    // be measured (how says why). NULL where not measured (cpu).
    double (*copy_gbs)(Device* d, char* how, size_t n);
    // After each step (NULL: nothing to do): cuda prints the matmul tuning's summary once,
    // after the first step, where the new GEMM shapes were tuned.
    void (*step_done)(Device* d);
    void (*close)(Device* d);
};

// Device bytes beyond the engine and the activations (the sum of device_lines).
static inline size_t device_extra_bytes(const Device* d) {
    size_t n = 0;
    for (int i = 0; i < d->n_device_lines; i++) n += d->device_lines[i].bytes;
    return n;
}

#ifdef __cplusplus
}
#endif
#endif
