// The FSDP / ZeRO-3 engine: sharded state, gathered-parameter slots, the gather/prefetch and
// reduce-scatter schedule, and the sharded AdamW step. Written once for every device: what a
// device does differently (memory, collectives, elementwise math) lives in an FsdpBackend.
//
// Units are numbered in forward order. Unit 0 is the root (embeddings and final LayerNorm):
// it is needed first in the forward and last in the backward, so it stays gathered for the
// whole step ("pinned"). The other units are transformer blocks (k per unit), gathered just
// before use into a small pool of slots and released after.
//
// Per step, the model schedule calls:
//   fsdp_zero_grad
//   for each micro-step:
//     forward:  p = fsdp_forward_pre(u) ... compute with p ... fsdp_forward_post(u)   u = 0..n-1
//     backward: p = fsdp_backward_pre(u); g = fsdp_grad(u) ... fsdp_backward_post(u)  u = n-1..0
//               (the root's gradient buffer may be taken early: the LM head comes first;
//               each tensor's first gradient write overwrites g unless fsdp_grad_accumulates)
//     fsdp_add_loss (the micro-step's per-token losses); fsdp_end_micro_step
//   fsdp_step_decide: the global loss and gradient norm, the clip scale, skip or not
//   fsdp_optimizer_step: AdamW, which does nothing when the decision was to skip
//   fsdp_step_stats_fetch ... fsdp_step_stats_wait: the decision's figures on the host
// With a backend that decides on the device (step_decide: cuda), the host never waits
// inside a step: the loss and norm reach it when it asks for them, typically one step later.
// With --offload optimizer (cfg.offload; the backend's offload_* ops) the fp32 state is pinned
// host memory: each reduced gradient shard is copied to the host and folded there, the host
// decides (its one wait per step), runs AdamW per unit in forward order, and each unit's new
// compute-dtype shard is uploaded just before that unit's next gather.
// Outside the steps, initialisation, model files and checkpoints read and write the host
// mirror of the fp32 state (host_master, host_m, host_v): fsdp_upload_state after writing it,
// fsdp_download_state before reading it. On the CPU the mirror is the state itself.
#ifndef FSDP_FSDP_H
#define FSDP_FSDP_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "fsdp/flat_unit.h"
#include "comm/process_group.h"

#ifdef __cplusplus
extern "C" {
#endif

// One step's statistics and decision. Device memory where the backend decides on the device
// (fsdp_step_decide), host memory otherwise; the layout is the same on both (loss_sum and
// sumsq are adjacent: all-reduced as one array of two doubles).
//
// Loss scaling (fp16 compute, --param-dtype fp16): the backward runs with the loss times
// loss_scale (the cross-entropy's gradient reads it where it lives), so the gradients and
// sumsq carry the scale. The decision divides it out of the norm and folds 1 / loss_scale
// into clip_scale (the factor AdamW multiplies the gradients by), and, when dynamic
// (growth_interval > 0), halves the scale when the gradients overflowed (non-finite norm:
// the step is skipped) and doubles it after growth_interval finite steps in a row, within
// [FSDP_LOSS_SCALE_MIN, FSDP_LOSS_SCALE_MAX]. Without it loss_scale is 1 and growth_interval
// 0: every figure is what it was (x / 1 and x * 1 are exact).
typedef struct {
    double loss_sum;   // this rank's sum of per-token losses, then the world's
    double sumsq;      // this rank's gradient sum of squares, then the shard group's (the global one)
    double loss;       // loss_sum / the step's tokens
    float norm;        // the gradient norm, unscaled, before clipping
    float clip_scale;  // (grad_clip / norm when 0 < grad_clip < norm, else 1) / step_loss_scale
    int skip;          // loss or norm not finite: the optimizer step changes nothing
    float loss_scale;       // the scale of the next backward (the decision updates it)
    float step_loss_scale;  // the scale this step's backward ran with
    int good_steps;         // finite steps in a row at loss_scale (dynamic scaling)
    int growth_interval;    // 0: a static scale; else double after that many finite steps
    int overflow;           // this step's gradients overflowed and the scale was halved
} FsdpStepStats;
#define FSDP_LOSS_SCALE_MIN 1.0f
#define FSDP_LOSS_SCALE_MAX 16777216.0f  // 2^24

#ifdef __host__  // nvcc's (the CPU emulator runs device code on the host: plain functions there)
#define FSDP_HOST_DEVICE __host__ __device__
#else
#define FSDP_HOST_DEVICE
#endif
// The decision from the global sums (every backend's step_decide ends with it: the host's
// and the GPU's are one formula).
static inline FSDP_HOST_DEVICE void fsdp_decide_from_sums(FsdpStepStats* s, double tokens, float grad_clip) {
    const double loss = s->loss_sum / tokens;
    const float scale = s->loss_scale;
    const float norm = (float)sqrt(s->sumsq) / scale;
    s->loss = loss;
    s->norm = norm;
    s->clip_scale = ((grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f) / scale;
    s->skip = !isfinite(loss) || !isfinite(norm);
    s->step_loss_scale = scale;
    s->overflow = 0;
    if (s->growth_interval <= 0) return;
    if (!isfinite(norm)) {
        s->overflow = scale > FSDP_LOSS_SCALE_MIN;
        s->loss_scale = fmaxf(scale * 0.5f, FSDP_LOSS_SCALE_MIN);
        s->good_steps = 0;
    } else if (++s->good_steps >= s->growth_interval) {
        s->loss_scale = fminf(scale * 2.0f, FSDP_LOSS_SCALE_MAX);
        s->good_steps = 0;
    }
}

// What a device provides. Master weights, Adam moments and gradient shards are fp32 on every
// device; gathered parameters and full gradients are in the device's compute dtype
// (param_bytes per element: 4 on the CPU, 2 for bf16 on a GPU). Collective operations are
// non-blocking and named by an op slot so that the engine can wait for one of them.
//
// Memory: alloc/release give device memory (what the kernels and collectives use);
// alloc_host/release_host give host memory the copies move fastest from and to (pinned on
// a GPU). host_is_device says that device memory is host memory (the CPU): the engine's
// host mirror of the sharded state is then the state itself and nothing is copied.
typedef struct FsdpBackend {
    void* ctx;
    size_t param_bytes;
    int host_is_device;
    void* (*alloc)(void* ctx, size_t bytes);        // zero-filled and touched
    void (*release)(void* ctx, void* p);
    void* (*alloc_host)(void* ctx, size_t bytes);   // zero-filled
    void (*release_host)(void* ctx, void* p);
    // Blocking copies between host and device memory (complete when they return).
    void (*copy_to_host)(void* ctx, void* dst_host, const void* src, size_t bytes);
    void (*copy_to_device)(void* ctx, void* dst, const void* src_host, size_t bytes);
    void (*zero)(void* ctx, void* p, size_t bytes);
    // full[shard_count * n] <- concatenation of every rank's shard[n] (shard group)
    void (*all_gather_start)(void* ctx, int op, const void* shard, void* full, size_t n);
    // shard_out[n] <- sum over the shard group of full[rank*n : (rank+1)*n], reduce_out_bytes
    // per element: 4 (fp32), or 2 where the backend reduces in the compute dtype and leaves
    // that sum for fold_grad to read (NCCL in bf16: no cast pass, half the bytes read).
    void (*reduce_scatter_start)(void* ctx, int op, const void* full, void* shard_out, size_t n);
    size_t reduce_out_bytes;
    void (*wait)(void* ctx, int op);
    // Sum over the replica groups (HSDP), in place, blocking.
    void (*all_reduce_replicas)(void* ctx, float* buf, size_t n);
    // Tensor parallelism (pg->tp_size > 1): sum over the tensor-parallel group, in place,
    // blocking, n elements of the compute dtype (a gathered gradient's replicated tensors).
    void (*all_reduce_tp)(void* ctx, void* buf, size_t n);
    void (*accumulate)(void* ctx, float* dst, const float* src, size_t n);   // dst += src
    double (*sum_squares)(void* ctx, const float* x, size_t n);
    void (*adamw)(void* ctx, float* param, float* m, float* v, const float* grad, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                  float grad_scale);
    // Refresh the compute-dtype shard of one unit from its fp32 master after the update (NULL
    // when they are the same buffer, as on the CPU). Rounding may be stochastic: its random
    // stream is a function of (unit_stream, step, the key index of global_begin + i) for
    // element i, where global_begin is the index of master[0] in the unit's flat buffer and
    // the key index is that index in the unit at TP 1 (sr_key_index through the unit's
    // key_runs, flat_unit_key_runs' table in device memory; n_key_runs 0: itself), so the
    // rounded values depend neither on the world size nor on --tp.
    void (*refresh_param_shard)(void* ctx, void* param_shard, const float* master, size_t n,
                                uint64_t unit_stream, size_t global_begin, const SrKeyRun* key_runs,
                                int n_key_runs, int step);

    // Optional fused optimizer path (these and the step decision's below, or none; NULL on the CPU, whose reference
    // order the engine keeps). With it the engine never zeroes the gradient shards, folds
    // each reduced shard in with one pass, and runs one AdamW launch per unit.
    // fold_grad: dst = src (first: the unit's first contribution this step) or dst += src;
    //   src holds src_bytes per element (4: fp32; 2: the compute dtype's, a reduce-scatter's
    //   bf16 output or, when a shard group of one needs no reduce-scatter, the gradient slot
    //   itself); with sum_squares, the new values'
    //   squares are added to a device accumulator that folded_sum_squares reads.
    void (*fold_grad)(void* ctx, float* dst, const void* src, size_t src_bytes, size_t n, int first, int sum_squares);
    // The accumulated sum of squares (this rank's) into *out (device memory), which is then
    // reset to zero. No host wait.
    void (*folded_sum_squares)(void* ctx, double* out);
    // AdamW over one unit's whole shard: weight decay on the elements inside decay_toggles'
    // runs (device memory, sorted element indices where decay switches on or off), and the
    // compute-dtype shard written as refresh_param_shard would round it. The gradient is
    // scaled by stats->clip_scale, and nothing is written when stats->skip (stats: device
    // memory, read by the kernel: no host wait).
    void (*adamw_unit)(void* ctx, float* param, float* m, float* v, const float* grad, void* param_shard, size_t n,
                       const uint64_t* decay_toggles, int n_toggles, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t, const FsdpStepStats* stats, uint64_t unit_stream,
                       size_t global_begin, const SrKeyRun* key_runs, int n_key_runs);

    // The step's decision: s holds this rank's loss_sum and sumsq (adjacent doubles); sums
    // loss_sum over the world and sumsq over the shard group, then fsdp_decide_from_sums. On
    // a GPU (s in device memory) in order on the compute stream, without a host wait.
    void (*step_decide)(void* ctx, FsdpStepStats* s, double tokens, float grad_clip);
    // With the fused path (required by it): the step's figures stay on the device.
    // sum_into: *acc = [*acc +] sum of x[n] (accumulate: add; device memory, deterministic).
    void (*sum_into)(void* ctx, double* acc, const float* x, size_t n, int accumulate);
    // *out = [*out +] sum of x[n]^2 (device memory; the HSDP norm, after the replica
    // all-reduce; at TP, in runs between the replicated tensors).
    void (*sum_squares_into)(void* ctx, double* out, const float* x, size_t n, int accumulate);
    // host <- s without waiting; step_stats_wait: the host waits until that copy has landed
    // (by then, usually long ago: the device has moved on to the next step).
    void (*step_stats_fetch)(void* ctx, FsdpStepStats* host, const FsdpStepStats* s);
    void (*step_stats_wait)(void* ctx);

    // --offload optimizer (optional, all or none: a GPU's backend). The fp32 master weights,
    // Adam moments and gradient shards live in pinned host memory (alloc_host) and host
    // threads fold the gradients and run AdamW; the device keeps only the compute-dtype shard.
    // Unit u names its copies and host work. Staging buffers are the engine's (pinned).
    // offload_fold: src (device) holds unit u's reduced gradient shard, n elements of
    //   src_bytes: the output of collective op (which the engine has waited for), or with
    //   op < 0 of the compute stream's work so far. Copies it into host_stage on a copy stream
    //   as soon as it is ready, then the host folds it into host_grad (= when first, else +=),
    //   counting the new values' squares when sum_squares. Returns at once. The collective
    //   op's next output into src waits for the copy; with op < 0 the engine calls
    //   offload_guard(u, 0) before compute writes src again.
    void (*offload_fold)(void* ctx, int u, float* host_grad, void* host_stage, const void* src, size_t src_bytes,
                         size_t n, int op, int first, int sum_squares);
    // The compute stream's next work waits for unit u's gradient copy (upload 0) or for its
    // shard's upload (upload 1, before compute reads the shard itself).
    void (*offload_guard)(void* ctx, int u, int upload);
    // Waits for the host's folds; the sum of squares they counted (or, host_grad != NULL,
    // counted over host_grad[n]), cleared for the next step.
    double (*offload_sum_squares)(void* ctx, const float* host_grad, size_t n);
    // The decision on the host: s (host memory) gets this rank's loss sum from d_loss_sum
    // (device memory: a host wait for the step's compute) beside its sum of squares, then the
    // world's sums and fsdp_decide_from_sums.
    void (*offload_decide)(void* ctx, FsdpStepStats* s, const double* d_loss_sum, double tokens, float grad_clip);
    // AdamW on the host over unit u's shard (stats: host memory, the decision), the new
    // compute-dtype shard into host_stage as adamw_unit would round it (decay_toggles and
    // key_runs in host memory); queued, returns at once.
    void (*offload_adamw)(void* ctx, int u, float* param, float* m, float* v, const float* grad, void* host_stage,
                          size_t n, const uint64_t* decay_toggles, int n_toggles, float lr, float beta1, float beta2,
                          float eps, float weight_decay, int t, const FsdpStepStats* stats, uint64_t unit_stream,
                          size_t global_begin, const SrKeyRun* key_runs, int n_key_runs);
    // host_stage <- master rounded as refresh_param_shard rounds it (queued on the host;
    // key_runs in host memory).
    void (*offload_round)(void* ctx, int u, void* host_stage, const float* master, size_t n, uint64_t unit_stream,
                          size_t global_begin, const SrKeyRun* key_runs, int n_key_runs, int step);
    // Waits for unit u's host work, then copies host_stage to param_shard (device) on the copy
    // stream, after the previous step's last reads of param_shard (the decision marks them);
    // the next collective waits for the copy (read_by_compute: the engine's offload_guard(u, 1)
    // makes compute wait, where it reads the shard).
    void (*offload_upload)(void* ctx, int u, void* param_shard, const void* host_stage, size_t bytes,
                           int read_by_compute);
    // Waits for all host work (before the host reads or writes the state).
    void (*offload_drain)(void* ctx);
    // HSDP: host_grad[n] <- its sum over the replica group, in place, once the folds are done.
    void (*offload_all_reduce_replicas)(void* ctx, float* host_grad, size_t n);
} FsdpBackend;

typedef struct {
    int prefetch;                // units gathered ahead of the one in use (>= 0)
    int reshard_after_forward;   // 1: release block units after forward (ZeRO-3); 0: keep (ZeRO-2)
    int sync_every_micro_step;   // 1: reduce-scatter every micro-step; 0: only on the last
    int offload;                 // 1: --offload optimizer (the backend's offload_* ops)
    // Loss scaling (FsdpStepStats): the first scale (0: none, i.e. 1) and the dynamic
    // scaler's growth interval (0: the scale stays). Needs the fused path (the scale is read
    // on the device).
    float loss_scale;
    int loss_scale_growth_interval;
} FsdpConfig;

// Bytes this rank exchanged with the other ranks of its shard group (what it received in
// all-gathers, what it sent in reduce-scatters), across replicas (HSDP all-reduces) and over
// its tensor-parallel group (all-reduces of the replicated tensors' gradients).
typedef struct {
    uint64_t gathered, reduce_scattered, replica_reduced;
    uint64_t tp_replicated_reduced;  // the replicated tensors' gradients summed over the TP group
} FsdpTraffic;

typedef struct {
    size_t shard_state;     // master + m + v + grad shards (and the compute-dtype shard)
    size_t gathered;        // parameter slots (root + pool)
    size_t full_grads;      // full-gradient slots and reduce-scatter receive buffers
    size_t host_mirror;     // host copies of master, m, v (0 when host memory is the device's)
    size_t host_offload;    // --offload optimizer: pinned master, m, v, gradient shards and staging
} FsdpMemory;

enum { SLOT_EMPTY = 0, SLOT_GATHERING, SLOT_READY };

// What a profiler hears from the engine (Fsdp.on_event): a forward or backward pre/post call
// (time until the next kernel is communication compute waited for), or the optimizer's start.
typedef enum { FSDP_EVENT_FORWARD, FSDP_EVENT_BACKWARD, FSDP_EVENT_OPTIMIZER } FsdpEvent;

typedef struct {
    const ProcessGroup* pg;
    FsdpBackend be;
    FsdpConfig cfg;
    int n_units;
    const FlatUnit* units;       // caller's array, finalized for pg->shard_size
    size_t* shard_offset;        // [n_units] where unit u's shard starts in the arenas
    size_t total_shard;          // elements per rank over all units
    FlatPiece* pieces;           // this rank's pieces of every tensor (flat_owned_pieces)
    int n_pieces;

    // Sharded state, fp32, one allocation each, [total_shard], in device memory
    float* master;
    float* adam_m;
    float* adam_v;
    float* grad_shard;
    void* param_shard;           // compute dtype; == master when param_bytes == 4
    // Host mirror of master, m and v: what initialisation, model files and checkpoints read
    // and write (fsdp_download_state / fsdp_upload_state move it). The same arrays as the
    // device ones when the backend's host_is_device.
    float* host_master;
    float* host_m;
    float* host_v;

    // Gathered parameters. Slot 0 is the root's; slots 1.. are the block pool.
    int n_param_slots;
    size_t block_padded;         // largest block unit's padded size
    void** param_slot;           // [n_param_slots]
    int* param_slot_unit;        // unit held, or -1
    int* param_slot_state;
    int* unit_param_slot;        // [n_units] slot holding unit u, or -1

    // Full gradients. Slot 0 is the root's. With per-micro-step sync, slots 1..2 are a
    // double-buffered pool for the blocks; otherwise every unit has its own slot.
    int n_grad_slots;
    void** grad_slot;            // [n_grad_slots]
    void** rs_out;               // [n_grad_slots] reduce-scatter receive buffers (a shard each, reduce_out_bytes per element)
    int* grad_slot_unit;         // unit whose gradient is in (or being reduced from) the slot
    int* grad_slot_busy;         // reduce-scatter in flight
    int* grad_slot_copy;         // --offload optimizer, a shard group of one: the unit whose copy to the host reads the slot, or -1
    int* unit_grad_slot;         // [n_units]
    int grad_pool_next;          // round-robin pointer into the pool

    // The fused optimizer path (the backend has fold_grad / adamw_unit and the device-side
    // step ops): the step's decision stays on the device (stats in device memory, the host
    // reads a copy); per unit, whether its gradient shard was written this step, and its
    // decay table in device memory.
    int fused;
    int fused_norm;              // the sum of squares comes with the last folds (no HSDP sum after them)
    int alias_params;            // a shard group of one: gathered units are the shards themselves
    FsdpStepStats* stats;        // this step's (device memory on the fused path)
    FsdpStepStats* host_stats;   // where fsdp_step_stats_fetch puts them (== stats otherwise)
    int test_norm_from_shards;   // fsdp_test_poison_grad: this step's norm from the shards
    unsigned char* unit_folded;  // [n_units]
    uint64_t* decay_toggles;     // device memory, every unit's table back to back
    int* toggle_at;              // [n_units + 1] where unit u's table starts in decay_toggles
    // The units' stochastic-rounding key tables (flat_unit_key_runs), back to back, in device
    // memory (host memory with --offload optimizer); NULL when every unit's is the identity
    // (no tensor parallelism): key_run_at[u + 1] - key_run_at[u] == 0 for every u then.
    SrKeyRun* key_runs;
    int* key_run_at;             // [n_units + 1] where unit u's table starts in key_runs
    // --offload optimizer: master, adam_m, adam_v and grad_shard are pinned host memory (the
    // host mirror is the state itself), decay_toggles and key_runs too; the step's loss sum is summed on
    // the device; per unit, where the device's compute-dtype shard stands against the host's.
    int offload;
    double* d_loss_sum;          // device memory
    FsdpStepStats* stats_sink;   // pinned: where fsdp_step_stats_fetch's copy lands (unread)
    void* grad_stage;            // pinned, [total_shard] reduced-gradient elements (their copies)
    size_t grad_stage_bytes;     // bytes per element there
    void* param_stage;           // pinned, [total_shard] compute-dtype elements (the new shards)
    unsigned char* unit_stale;   // [n_units] fresh, stale (the host has a newer shard) or uploaded (compute has not waited yet)
    int poison_grad_pending;     // fsdp_test_poison_grad, applied once the folds are done

    int micro_step, micro_steps; // position inside the current optimizer step
    int params_dirty;            // the optimizer changed the shards: gathered copies are stale
    FsdpMemory memory;
    FsdpTraffic traffic;         // cumulative since fsdp_init
    // Called at the start of every schedule call when set (--profile-step); NULL otherwise.
    void (*on_event)(void* ctx, FsdpEvent event);
    void* on_event_ctx;
} Fsdp;

// Collectives the engine may have in flight at once (op slots 0 .. fsdp_max_ops - 1): one per
// parameter slot and one per gradient slot. A backend sizes its per-op state from it.
int fsdp_max_ops(const FsdpConfig* cfg, int n_units);

// The largest unit each op slot carries, in padded elements, into out[fsdp_max_ops(...)]:
// the root's for the root's parameter and gradient slots, the largest block's for the
// others. A backend that stages per op sizes its buffers from it.
void fsdp_op_padded(const FsdpConfig* cfg, const FlatUnit* units, int n_units, size_t* out);

// Allocates everything up front. units must be finalized for pg->shard_size.
int fsdp_init(Fsdp* f, const ProcessGroup* pg, const FsdpBackend* be, const FsdpConfig* cfg,
              const FlatUnit* units, int n_units, char* err, size_t errlen);
void fsdp_free(Fsdp* f);

// This rank's slice of unit u in the flat buffer: [begin, end).
void fsdp_owned_range(const Fsdp* f, int u, size_t* begin, size_t* end);
// (What the rank owns of each tensor, and where in the arenas: f->pieces.)
// This rank's fp32 master shard of unit u (f->units[u].shard elements), device memory.
float* fsdp_master_shard(const Fsdp* f, int u);
// The same in the host mirror.
float* fsdp_host_master_shard(const Fsdp* f, int u);
// Host mirror <- device state (master, m, v), e.g. before a checkpoint or model file is written.
void fsdp_download_state(Fsdp* f);
// Device state <- host mirror (after initialisation, a model file or a checkpoint was read
// into it), then the compute-dtype shard is refreshed from the master as the optimizer step
// `step` would have left it (0 before the first step), and gathered copies are dropped.
void fsdp_upload_state(Fsdp* f, int step);

void fsdp_zero_grad(Fsdp* f, int micro_steps);
void* fsdp_forward_pre(Fsdp* f, int u);
void fsdp_forward_post(Fsdp* f, int u);
void* fsdp_backward_pre(Fsdp* f, int u);
// Full-gradient buffer for unit u. Not zeroed (only its padding is): the model's first write
// of each tensor's gradient in a micro-step overwrites it, unless fsdp_grad_accumulates says
// the buffer holds earlier micro-steps' sums to add to (--no-grad-sync-until-last).
void* fsdp_grad(Fsdp* f, int u);
int fsdp_grad_accumulates(const Fsdp* f);
void fsdp_backward_post(Fsdp* f, int u);
// Start gathering unit u now if a slot is free (e.g. the last block while the head's
// backward runs).
void fsdp_backward_prefetch(Fsdp* f, int u);
void fsdp_end_micro_step(Fsdp* f);
// Releases every gathered block unit (after an evaluation-only forward, for instance).
void fsdp_release_all(Fsdp* f);
// Adds a micro-step's n per-token losses (device memory) to this rank's loss sum.
void fsdp_add_loss(Fsdp* f, const float* losses, size_t n);
// The step's decision from every rank's losses and gradient shards: the loss (over tokens,
// the step's token count), the global gradient norm before clipping, the clip scale for
// grad_clip (if > 0), and skip when the loss or norm is not finite (identical on every rank).
void fsdp_step_decide(Fsdp* f, double tokens, float grad_clip);
// AdamW on the owned shards with the decision's clip scale, or nothing when it says skip.
// t is the 1-based step for bias correction.
void fsdp_optimizer_step(Fsdp* f, float lr, float beta1, float beta2, float eps, float weight_decay, int t);
// Starts bringing the decision to the host; fsdp_step_stats_wait returns it (waiting only
// for that copy). Fetch once per step, after fsdp_step_decide, and wait before the next
// step's fsdp_step_decide.
void fsdp_step_stats_fetch(Fsdp* f);
const FsdpStepStats* fsdp_step_stats_wait(Fsdp* f);
// Loss scaling (cfg.loss_scale > 0): sets the scaler's state (a resumed run's; fsdp_init sets
// cfg.loss_scale and 0); good_steps is clamped to [0, growth interval - 1] (0 for a fixed
// scale). The current state is in fsdp_step_stats_wait's figures (loss_scale, good_steps).
// fsdp_loss_scale_device: where the backward reads the scale (device memory), or NULL
// without loss scaling.
void fsdp_set_loss_scaler(Fsdp* f, float scale, int good_steps);
const float* fsdp_loss_scale_device(const Fsdp* f);
// Test hooks: this rank's loss sum becomes NaN; or its first gradient-shard element does, and
// this step's norm is counted from the shards (as a NaN gradient reaching the folds would
// make it). Either way the next decision must skip.
void fsdp_test_poison_loss(Fsdp* f);
void fsdp_test_poison_grad(Fsdp* f);

#ifdef __cplusplus
}
#endif
#endif
