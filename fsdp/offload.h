// The host side of --offload optimizer (ZeRO-Offload): one worker thread that folds the
// gradient shards copied from the GPU into the fp32 accumulators, and runs AdamW and the
// stochastic rounding of the new bf16 shard, all in pinned host memory, with OpenMP threads
// inside each task. A GPU backend (fsdp/backend_cuda.cuh) owns it and queues its tasks while
// the device goes on: a unit's fold as soon as its gradient copy is queued (the worker waits
// for the copy to land), the AdamW of every unit in forward order after the step's decision,
// so that the next step's forward uploads unit 0 while the worker updates unit 1.
//
// Numbers: the arithmetic is kernels/optimizer_math.h's, the GPU kernels' own (same update,
// same random bits keyed on the global element index), so an offloaded run computes the
// same master weights, moments and bf16 shards as one on the GPU. The sum of squares of each
// unit's accumulated gradient is counted in fixed chunks added in order, and the units' sums
// in unit order: deterministic, whatever the thread count.
#ifndef FSDP_OFFLOAD_H
#define FSDP_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/optimizer_math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HostOptimizer HostOptimizer;

// copy_landed(ctx, u): 1 when unit u's last gradient copy to the host has landed, 0 not yet,
// -1 on a device error (called from the worker thread: it must be thread-safe). timeout_s > 0:
// a copy that does not land within it is an error. threads: OpenMP threads per task.
HostOptimizer* host_optimizer_create(int n_units, int threads, double timeout_s, int (*copy_landed)(void* ctx, int u),
                                     void* ctx);
void host_optimizer_free(HostOptimizer* h);

// Queued tasks (they return at once; tasks run in the order queued).
// dst[n] = (first) or += src[n], src holding src_bytes per element (4: fp32, 2: bf16 bits),
// after unit u's copy has landed; with sum_squares the new values' squares are counted as
// unit u's sum (host_optimizer_take_sum_squares).
void host_optimizer_fold(HostOptimizer* h, int u, float* dst, const void* src, size_t src_bytes, size_t n, int first,
                         int sum_squares);
// AdamW over a unit's shard (adamw_element per element, grad scaled by clip_scale; nothing
// when skip), weight decay inside decay_toggles' runs (sorted element indices where it
// switches on or off), then param_bf16[i] = the stochastic rounding of param[i] with the
// bits of (seed, t, sr_key_index(key_runs, n_key_runs, global_begin + i)): the element's
// index in the unit at TP 1 (no runs: global_begin + i).
typedef struct {
    float *param, *m, *v;
    const float* grad;
    uint16_t* param_bf16;
    size_t n;
    const uint64_t* decay_toggles;
    int n_toggles;
    float lr, beta1, beta2, eps, weight_decay, clip_scale;
    int t, skip;
    uint64_t seed;
    size_t global_begin;
    const SrKeyRun* key_runs;
    int n_key_runs;
} HostAdamw;
void host_optimizer_adamw(HostOptimizer* h, int u, const HostAdamw* a);
// dst[i] = the stochastic rounding of master[i] with the bits of (seed, step, the key index
// of global_begin + i), as HostAdamw's.
void host_optimizer_round(HostOptimizer* h, int u, uint16_t* dst, const float* master, size_t n, uint64_t seed,
                          int step, size_t global_begin, const SrKeyRun* key_runs, int n_key_runs);

// Waits until every task queued for unit u (or every task) has run. 0, or 1 with the
// worker's error in err (a copy that failed or never landed).
int host_optimizer_wait_unit(HostOptimizer* h, int u, char* err, size_t errlen);
int host_optimizer_drain(HostOptimizer* h, char* err, size_t errlen);
// After a drain: the folds' sums of squares added in unit order; cleared for the next step.
double host_optimizer_take_sum_squares(HostOptimizer* h);
// Sum of x[n]^2 in fixed chunks added in order (deterministic), on the calling thread's team.
double host_sum_squares(const float* x, size_t n);

#ifdef __cplusplus
}
#endif
#endif
