#include "fsdp/fsdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Op slots as the backend sees them: gathers use the parameter slot's index, reductions
// come after them.
// Parameter slots: the root's, then enough for the block in use plus the prefetched ones,
// or every block when they stay gathered between forward and backward. Gradient slots: the
// root's, then a double-buffered pool (a block's gradient is reduced while the next block's
// backward runs), or one per block when gradients stay unsharded until the last micro-step.
static void slot_counts(const FsdpConfig* cfg, int n_units, int* param_slots, int* grad_slots) {
    int n_blocks = n_units - 1;
    int pool = cfg->reshard_after_forward ? cfg->prefetch + 1 : n_blocks;
    if (pool > n_blocks) pool = n_blocks;
    int grad_pool = cfg->sync_every_micro_step ? (n_blocks < 2 ? n_blocks : 2) : n_blocks;
    *param_slots = 1 + pool;
    *grad_slots = 1 + grad_pool;
}

int fsdp_max_ops(const FsdpConfig* cfg, int n_units) {
    int param_slots, grad_slots;
    slot_counts(cfg, n_units, &param_slots, &grad_slots);
    return param_slots + grad_slots;
}

void fsdp_op_padded(const FsdpConfig* cfg, const FlatUnit* units, int n_units, size_t* out) {
    int param_slots, grad_slots;
    slot_counts(cfg, n_units, &param_slots, &grad_slots);
    size_t block = 0;
    for (int u = 1; u < n_units; u++)
        if (units[u].padded > block) block = units[u].padded;
    // Slot 0 of each kind is the root's (acquire / fsdp_grad); the ops follow gather_op and
    // reduce_op below.
    for (int s = 0; s < param_slots; s++) out[s] = s == 0 ? units[0].padded : block;
    for (int g = 0; g < grad_slots; g++) out[param_slots + g] = g == 0 ? units[0].padded : block;
}

// --offload optimizer: a unit's device shard against the host's (Fsdp.unit_stale).
enum { SHARD_FRESH = 0, SHARD_STALE, SHARD_UPLOADED };

static int gather_op(const Fsdp* f, int slot) { (void)f; return slot; }
static int reduce_op(const Fsdp* f, int gslot) { return f->n_param_slots + gslot; }

// Per unit, the element indices of its shard where weight decay switches on or off (the
// pieces of matrices decay, those of biases and LayerNorms do not; padding does not), as
// the backend's one-launch AdamW reads them: sorted, in device memory.
static int build_decay_tables(Fsdp* f, char* err, size_t errlen) {
    uint64_t* host = (uint64_t*)calloc((size_t)2 * f->n_pieces + 1, sizeof(uint64_t));
    f->unit_folded = (unsigned char*)calloc((size_t)f->n_units, 1);
    f->toggle_at = (int*)calloc((size_t)f->n_units + 1, sizeof(int));
    if (!host || !f->unit_folded || !f->toggle_at) { free(host); snprintf(err, errlen, "fsdp: out of host memory"); return 1; }
    int n = 0, i = 0;
    for (int u = 0; u < f->n_units; u++) {
        f->toggle_at[u] = n;
        int open = 0;        // inside a decayed run
        uint64_t end = 0;    // where the last piece ended
        for (; i < f->n_pieces && f->pieces[i].unit == u; i++) {
            const FlatPiece* p = &f->pieces[i];
            const uint64_t a = p->at - f->shard_offset[u], b = a + (p->hi - p->lo);
            const int decays = f->units[u].tensors[p->tensor].decay;
            if (decays && !(open && a == end)) {
                if (open) host[n++] = end;
                host[n++] = a;
                open = 1;
            } else if (!decays && open) {
                host[n++] = end;
                open = 0;
            }
            end = b;
        }
        if (open) host[n++] = end;
    }
    f->toggle_at[f->n_units] = n;
    if (f->offload) {  // the host's AdamW reads it where it is
        f->decay_toggles = host;
        return 0;
    }
    // Whole 256-byte blocks, counted in the budget like every device buffer of the engine.
    size_t bytes = ((size_t)n * sizeof(uint64_t) + 255) / 256 * 256;
    if (bytes == 0) bytes = 256;
    f->decay_toggles = (uint64_t*)f->be.alloc(f->be.ctx, bytes);
    if (n > 0) f->be.copy_to_device(f->be.ctx, f->decay_toggles, host, (size_t)n * sizeof(uint64_t));
    f->memory.shard_state += bytes;
    free(host);
    return 0;
}

// Per unit, its stochastic-rounding key table (flat_unit_key_runs: under tensor parallelism,
// where each element of this rank's unit is in the unit at TP 1), back to back, where the
// rounding reads it: device memory, or host memory with --offload optimizer. Without tensor
// parallelism every table is the identity: nothing is allocated, and the rounding keys each
// element by its own index as it always has.
static int build_key_tables(Fsdp* f, char* err, size_t errlen) {
    f->key_run_at = (int*)calloc((size_t)f->n_units + 1, sizeof(int));
    SrKeyRun* host = (SrKeyRun*)malloc(sizeof(SrKeyRun) * FLAT_UNIT_MAX_KEY_RUNS);
    if (!f->key_run_at || !host) { free(host); snprintf(err, errlen, "fsdp: out of host memory"); return 1; }
    int n = 0;
    for (int u = 0; u < f->n_units; u++) {
        f->key_run_at[u] = n;
        n += flat_unit_key_runs(&f->units[u], host);
    }
    f->key_run_at[f->n_units] = n;
    if (n == 0) { free(host); return 0; }
    SrKeyRun* all = (SrKeyRun*)realloc(host, sizeof(SrKeyRun) * ((size_t)n + FLAT_UNIT_MAX_KEY_RUNS));
    if (!all) { free(host); snprintf(err, errlen, "fsdp: out of host memory"); return 1; }
    for (int u = 0; u < f->n_units; u++) flat_unit_key_runs(&f->units[u], all + f->key_run_at[u]);
    if (f->offload) {  // the host's rounding reads it where it is
        f->key_runs = all;
        return 0;
    }
    // Whole 256-byte blocks, counted in the budget like every device buffer of the engine.
    const size_t bytes = ((size_t)n * sizeof(SrKeyRun) + 255) / 256 * 256;
    f->key_runs = (SrKeyRun*)f->be.alloc(f->be.ctx, bytes);
    f->be.copy_to_device(f->be.ctx, f->key_runs, all, (size_t)n * sizeof(SrKeyRun));
    f->memory.shard_state += bytes;
    free(all);
    return 0;
}

// Unit u's table and its length (NULL and 0 without tensor parallelism: no table at all).
static const SrKeyRun* unit_key_runs(const Fsdp* f, int u) { return f->key_runs ? f->key_runs + f->key_run_at[u] : NULL; }
static int unit_key_count(const Fsdp* f, int u) { return f->key_run_at[u + 1] - f->key_run_at[u]; }

int fsdp_init(Fsdp* f, const ProcessGroup* pg, const FsdpBackend* be, const FsdpConfig* cfg,
              const FlatUnit* units, int n_units, char* err, size_t errlen) {
    memset(f, 0, sizeof(*f));
    f->pg = pg;
    f->be = *be;
    f->cfg = *cfg;
    f->units = units;
    f->n_units = n_units;
    if (n_units < 1) { snprintf(err, errlen, "fsdp: no units"); return 1; }
    if (cfg->prefetch < 0) { snprintf(err, errlen, "--prefetch must be >= 0"); return 1; }

    f->shard_offset = (size_t*)calloc((size_t)n_units, sizeof(size_t));
    for (int u = 0; u < n_units; u++) {
        f->shard_offset[u] = f->total_shard;
        f->total_shard += units[u].shard;
        if (u > 0 && units[u].padded > f->block_padded) f->block_padded = units[u].padded;
    }
    f->pieces = (FlatPiece*)calloc((size_t)flat_tensor_count(units, n_units) + 1, sizeof(FlatPiece));
    if (!f->pieces) { snprintf(err, errlen, "fsdp: out of host memory"); return 1; }
    f->n_pieces = flat_owned_pieces(units, n_units, pg->shard_rank, f->pieces);
    // --offload optimizer: the fp32 state in host memory, the optimizer on the host.
    f->offload = cfg->offload;
    if (f->offload) {
        if (be->host_is_device) {
            snprintf(err, errlen, "--offload optimizer: this device's state is in host memory already (cuda only)");
            return 1;
        }
        if (!be->offload_fold || !be->offload_guard || !be->offload_sum_squares || !be->offload_decide ||
            !be->offload_adamw || !be->offload_round || !be->offload_upload || !be->offload_drain ||
            !be->offload_all_reduce_replicas || !be->sum_into ||
            !be->refresh_param_shard) {
            snprintf(err, errlen, "--offload optimizer: this device cannot offload the optimizer");
            return 1;
        }
    }
    // (It decides the step on the device too: its AdamW reads the decision from there.)
    f->fused = !f->offload && be->fold_grad && be->folded_sum_squares && be->adamw_unit && be->sum_into &&
               be->sum_squares_into && be->step_stats_fetch && be->step_stats_wait;
    // Tensor parallelism: the replicated tensors' gradients are summed over the group before
    // the shard group's reduce-scatter, and the norm counts them on the group's first rank only:
    // the unfused (host-decided) path piece by piece, the fused one in its folds (fold_unit) or,
    // with HSDP, in its pass over the shards after the replica all-reduce (norm_from_shards),
    // the offloaded one on the host over the shards (offload_norm_in_runs).
    if (pg->tp_size > 1 && !be->all_reduce_tp) {
        snprintf(err, errlen, "--tp: this device has no tensor-parallel gradient all-reduce");
        return 1;
    }
    // The unfused path adds fp32 reduce-scatter outputs (accumulate); only fold_grad and the
    // offloaded fold read others.
    if (be->reduce_out_bytes != sizeof(float) && (!(f->fused || f->offload) || be->reduce_out_bytes != be->param_bytes)) {
        snprintf(err, errlen, "fsdp: a backend whose reduce-scatter writes %zu-byte elements needs fold_grad", be->reduce_out_bytes);
        return 1;
    }
    // The norm comes with the folds unless an HSDP all-reduce changes the shards after them.
    f->fused_norm = f->fused && pg->replicate_size == 1;
    // With one rank per shard group the shard is the whole unit: compute reads it in place
    // (no all-gather copy) and the gradient is folded straight from its slot.
    f->alias_params = (f->fused || f->offload) && pg->shard_size == 1;

    size_t fp32_bytes = f->total_shard * sizeof(float);
    if (f->offload) {
        // Pinned host memory: master, m and v are their own host mirror; the device keeps the
        // compute-dtype shard only. Staging: the reduced gradients' copies, the new shards.
        f->master = f->host_master = (float*)be->alloc_host(be->ctx, fp32_bytes);
        f->adam_m = f->host_m = (float*)be->alloc_host(be->ctx, fp32_bytes);
        f->adam_v = f->host_v = (float*)be->alloc_host(be->ctx, fp32_bytes);
        f->grad_shard = (float*)be->alloc_host(be->ctx, fp32_bytes);
        f->grad_stage_bytes = f->alias_params ? be->param_bytes : be->reduce_out_bytes;
        f->grad_stage = be->alloc_host(be->ctx, f->total_shard * f->grad_stage_bytes);
        f->param_stage = be->alloc_host(be->ctx, f->total_shard * be->param_bytes);
        f->param_shard = be->alloc(be->ctx, f->total_shard * be->param_bytes);
        // (the loss sum is the first field of a device FsdpStepStats that step_stats_fetch copies
        // to a sink: the copy orders the host's reading of the figures after the step's end)
        f->d_loss_sum = (double*)be->alloc(be->ctx, sizeof(FsdpStepStats));
        f->stats_sink = (FsdpStepStats*)be->alloc_host(be->ctx, sizeof(FsdpStepStats));
        f->unit_stale = (unsigned char*)calloc((size_t)n_units, 1);
        f->memory.shard_state = f->total_shard * be->param_bytes;
        f->memory.host_offload = 4 * fp32_bytes + f->total_shard * (f->grad_stage_bytes + be->param_bytes);
    } else {
        f->master = (float*)be->alloc(be->ctx, fp32_bytes);
        f->adam_m = (float*)be->alloc(be->ctx, fp32_bytes);
        f->adam_v = (float*)be->alloc(be->ctx, fp32_bytes);
        f->grad_shard = (float*)be->alloc(be->ctx, fp32_bytes);
        f->memory.shard_state = 4 * fp32_bytes;
        if (be->host_is_device) {
            f->host_master = f->master;
            f->host_m = f->adam_m;
            f->host_v = f->adam_v;
        } else {
            f->host_master = (float*)be->alloc_host(be->ctx, fp32_bytes);
            f->host_m = (float*)be->alloc_host(be->ctx, fp32_bytes);
            f->host_v = (float*)be->alloc_host(be->ctx, fp32_bytes);
            f->memory.host_mirror = 3 * fp32_bytes;
        }
        if (be->param_bytes == sizeof(float)) {
            f->param_shard = f->master;
        } else {
            f->param_shard = be->alloc(be->ctx, f->total_shard * be->param_bytes);
            f->memory.shard_state += f->total_shard * be->param_bytes;
        }
    }

    slot_counts(cfg, n_units, &f->n_param_slots, &f->n_grad_slots);
    f->param_slot = (void**)calloc((size_t)f->n_param_slots, sizeof(void*));
    f->param_slot_unit = (int*)malloc((size_t)f->n_param_slots * sizeof(int));
    f->param_slot_state = (int*)calloc((size_t)f->n_param_slots, sizeof(int));
    f->unit_param_slot = (int*)malloc((size_t)n_units * sizeof(int));
    for (int s = 0; s < f->n_param_slots; s++) {
        size_t n = s == 0 ? units[0].padded : f->block_padded;
        f->param_slot[s] = f->alias_params ? NULL : be->alloc(be->ctx, n * be->param_bytes);
        f->param_slot_unit[s] = -1;
        if (!f->alias_params) f->memory.gathered += n * be->param_bytes;
    }
    for (int u = 0; u < n_units; u++) f->unit_param_slot[u] = -1;

    f->grad_slot = (void**)calloc((size_t)f->n_grad_slots, sizeof(void*));
    f->rs_out = (void**)calloc((size_t)f->n_grad_slots, sizeof(void*));
    f->grad_slot_unit = (int*)malloc((size_t)f->n_grad_slots * sizeof(int));
    f->grad_slot_busy = (int*)calloc((size_t)f->n_grad_slots, sizeof(int));
    f->unit_grad_slot = (int*)malloc((size_t)n_units * sizeof(int));
    f->grad_slot_copy = (int*)malloc((size_t)f->n_grad_slots * sizeof(int));
    for (int g = 0; g < f->n_grad_slots; g++) {
        size_t n = g == 0 ? units[0].padded : f->block_padded;
        size_t shard = n / (size_t)pg->shard_size;
        f->grad_slot[g] = be->alloc(be->ctx, n * be->param_bytes);
        f->rs_out[g] = f->alias_params ? NULL : be->alloc(be->ctx, shard * be->reduce_out_bytes);
        f->grad_slot_unit[g] = -1;
        f->grad_slot_copy[g] = -1;
        f->memory.full_grads += n * be->param_bytes + (f->alias_params ? 0 : shard * be->reduce_out_bytes);
    }
    for (int u = 0; u < n_units; u++) f->unit_grad_slot[u] = -1;
    if ((f->fused || f->offload) && build_decay_tables(f, err, errlen)) return 1;
    if ((f->fused || f->offload || be->refresh_param_shard) && build_key_tables(f, err, errlen)) return 1;
    // The step's decision: on the device on the fused path (then the host only reads a copy
    // of it, when it asks), else in host memory.
    if (f->fused) {
        f->stats = (FsdpStepStats*)be->alloc(be->ctx, sizeof(FsdpStepStats));
        f->host_stats = (FsdpStepStats*)be->alloc_host(be->ctx, sizeof(FsdpStepStats));
    } else {
        f->stats = f->host_stats = (FsdpStepStats*)calloc(1, sizeof(FsdpStepStats));
    }
    if (!f->stats || !f->host_stats) { snprintf(err, errlen, "fsdp: out of memory"); return 1; }
    if (cfg->loss_scale > 0.0f && !f->fused) {
        snprintf(err, errlen, "--param-dtype fp16: loss scaling needs the optimizer on a GPU (the cuda device or a GPU "
                 "profile of --plan, without --offload optimizer)");
        return 1;
    }
    fsdp_set_loss_scaler(f, cfg->loss_scale > 0.0f ? cfg->loss_scale : 1.0f, 0);
    f->params_dirty = 1;
    f->micro_steps = 1;
    return 0;
}

void fsdp_free(Fsdp* f) {
    const FsdpBackend* be = &f->be;
    if (f->offload) {  // the host threads may still be writing the state and the staging
        be->offload_drain(be->ctx);
        be->release_host(be->ctx, f->grad_shard);
        be->release_host(be->ctx, f->grad_stage);
        be->release_host(be->ctx, f->param_stage);
        be->release(be->ctx, f->d_loss_sum);
        be->release_host(be->ctx, f->stats_sink);
        free(f->unit_stale);
        // master, m, v are the host mirror (released below); the decay table is host memory
        free(f->decay_toggles);
        f->decay_toggles = NULL;
        free(f->key_runs);
        f->key_runs = NULL;
    }
    for (int s = 0; s < f->n_param_slots; s++) if (f->param_slot[s]) be->release(be->ctx, f->param_slot[s]);
    for (int g = 0; g < f->n_grad_slots; g++) {
        be->release(be->ctx, f->grad_slot[g]);
        if (f->rs_out[g]) be->release(be->ctx, f->rs_out[g]);
    }
    if (f->decay_toggles) be->release(be->ctx, f->decay_toggles);
    if (f->key_runs) be->release(be->ctx, f->key_runs);
    free(f->unit_folded); free(f->toggle_at); free(f->key_run_at);
    if (f->param_shard != f->master) be->release(be->ctx, f->param_shard);
    if (f->host_master != f->master) {
        be->release_host(be->ctx, f->host_master);
        be->release_host(be->ctx, f->host_m);
        be->release_host(be->ctx, f->host_v);
    }
    if (f->offload) {
        be->release_host(be->ctx, f->master);
        be->release_host(be->ctx, f->adam_m);
        be->release_host(be->ctx, f->adam_v);
    } else {
        be->release(be->ctx, f->master);
        be->release(be->ctx, f->adam_m);
        be->release(be->ctx, f->adam_v);
        be->release(be->ctx, f->grad_shard);
    }
    if (f->fused) {
        be->release(be->ctx, f->stats);
        be->release_host(be->ctx, f->host_stats);
    } else {
        free(f->stats);
    }
    free(f->param_slot); free(f->param_slot_unit); free(f->param_slot_state); free(f->unit_param_slot);
    free(f->grad_slot); free(f->rs_out); free(f->grad_slot_unit); free(f->grad_slot_busy);
    free(f->unit_grad_slot); free(f->grad_slot_copy); free(f->shard_offset); free(f->pieces);
    memset(f, 0, sizeof(*f));
}

void fsdp_owned_range(const Fsdp* f, int u, size_t* begin, size_t* end) {
    *begin = (size_t)f->pg->shard_rank * f->units[u].shard;
    *end = *begin + f->units[u].shard;
}

float* fsdp_master_shard(const Fsdp* f, int u) { return f->master + f->shard_offset[u]; }
float* fsdp_host_master_shard(const Fsdp* f, int u) { return f->host_master + f->shard_offset[u]; }

void fsdp_download_state(Fsdp* f) {
    if (f->offload) f->be.offload_drain(f->be.ctx);  // the state is the host's: once its updates are done
    if (f->host_master == f->master) return;
    size_t bytes = f->total_shard * sizeof(float);
    f->be.copy_to_host(f->be.ctx, f->host_master, f->master, bytes);
    f->be.copy_to_host(f->be.ctx, f->host_m, f->adam_m, bytes);
    f->be.copy_to_host(f->be.ctx, f->host_v, f->adam_v, bytes);
}

// The compute-dtype shard from the master, unit by unit: each unit's rounding stream is its
// own (the unit index) and indexed by global position in the unit, so it does not depend on W.
// With --offload optimizer the host rounds them into the staging, uploaded at their next use.
static void refresh_param_shards(Fsdp* f, int step) {
    if (!f->be.refresh_param_shard) return;
    for (int u = 0; u < f->n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        if (f->offload) {
            f->be.offload_round(f->be.ctx, u, (char*)f->param_stage + f->shard_offset[u] * f->be.param_bytes,
                                f->master + f->shard_offset[u], f->units[u].shard, (uint64_t)u, begin,
                                unit_key_runs(f, u), unit_key_count(f, u), step);
            f->unit_stale[u] = SHARD_STALE;
            continue;
        }
        char* shard = (char*)f->param_shard + f->shard_offset[u] * f->be.param_bytes;
        f->be.refresh_param_shard(f->be.ctx, shard, f->master + f->shard_offset[u], f->units[u].shard,
                                  (uint64_t)u, begin, unit_key_runs(f, u),
                                  unit_key_count(f, u), step);
    }
}

void fsdp_upload_state(Fsdp* f, int step) {
    if (f->offload) f->be.offload_drain(f->be.ctx);
    if (f->host_master != f->master) {
        size_t bytes = f->total_shard * sizeof(float);
        f->be.copy_to_device(f->be.ctx, f->master, f->host_master, bytes);
        f->be.copy_to_device(f->be.ctx, f->adam_m, f->host_m, bytes);
        f->be.copy_to_device(f->be.ctx, f->adam_v, f->host_v, bytes);
    }
    refresh_param_shards(f, step);
    f->params_dirty = 1;
}

// ---------------------------------------------------------------------------------------
// Parameter slots

// --offload optimizer: the host's new shard of unit u goes to the device before its first
// use after the update (the gather, or compute itself when the shard is the unit: then the
// unit stays UPLOADED until acquire_unit has made compute wait for the copy, once).
static void upload_if_stale(Fsdp* f, int u) {
    if (!f->offload || f->unit_stale[u] != SHARD_STALE) return;
    const size_t at = f->shard_offset[u] * f->be.param_bytes;
    f->be.offload_upload(f->be.ctx, u, (char*)f->param_shard + at, (const char*)f->param_stage + at,
                         f->units[u].shard * f->be.param_bytes, f->alias_params);
    f->unit_stale[u] = f->alias_params ? SHARD_UPLOADED : SHARD_FRESH;
}

static void start_gather(Fsdp* f, int u, int slot) {
    const FlatUnit* unit = &f->units[u];
    upload_if_stale(f, u);
    const char* src = (const char*)f->param_shard + f->shard_offset[u] * f->be.param_bytes;
    f->be.all_gather_start(f->be.ctx, gather_op(f, slot), src, f->param_slot[slot], unit->shard);
    f->traffic.gathered += (uint64_t)(unit->padded - unit->shard) * f->be.param_bytes;
    f->param_slot_unit[slot] = u;
    f->param_slot_state[slot] = SLOT_GATHERING;
    f->unit_param_slot[u] = slot;
}

static int free_block_slot(const Fsdp* f) {
    for (int s = 1; s < f->n_param_slots; s++)
        if (f->param_slot_state[s] == SLOT_EMPTY) return s;
    return -1;
}

// Issue the gather of unit u unless it is already resident or on its way. Returns 0 when no
// slot is free (only allowed for prefetches, which are then simply not made).
static int request_unit(Fsdp* f, int u) {
    if (f->alias_params) {  // nothing to gather (an offloaded shard's upload starts now)
        upload_if_stale(f, u);
        return 1;
    }
    if (f->unit_param_slot[u] >= 0) return 1;
    int slot = u == 0 ? 0 : free_block_slot(f);
    if (slot < 0) return 0;
    start_gather(f, u, slot);
    return 1;
}

static void notify(const Fsdp* f, FsdpEvent e) {
    if (f->on_event) f->on_event(f->on_event_ctx, e);
}

static void* acquire_unit(Fsdp* f, int u) {
    if (f->alias_params) {
        if (f->offload) {
            upload_if_stale(f, u);
            if (f->unit_stale[u] == SHARD_UPLOADED) {
                f->be.offload_guard(f->be.ctx, u, 1);  // compute waits for unit u's upload
                f->unit_stale[u] = SHARD_FRESH;
            }
        }
        return (char*)f->param_shard + f->shard_offset[u] * f->be.param_bytes;
    }
    if (f->params_dirty) {
        // The optimizer updated the shards: every gathered copy is stale. Nothing can be in
        // flight here (the step ended with every block released).
        for (int s = 0; s < f->n_param_slots; s++) {
            f->param_slot_state[s] = SLOT_EMPTY;
            f->param_slot_unit[s] = -1;
        }
        for (int v = 0; v < f->n_units; v++) f->unit_param_slot[v] = -1;
        f->params_dirty = 0;
    }
    if (!request_unit(f, u)) {
        fatal(f->pg, "fsdp: no free parameter slot for unit %d (schedule bug)", u);
    }
    int slot = f->unit_param_slot[u];
    if (f->param_slot_state[slot] == SLOT_GATHERING) {
        f->be.wait(f->be.ctx, gather_op(f, slot));
        f->param_slot_state[slot] = SLOT_READY;
    }
    return f->param_slot[slot];
}

static void release_unit(Fsdp* f, int u) {
    if (f->alias_params) return;
    int slot = f->unit_param_slot[u];
    if (u == 0 || slot < 0) return;  // the root stays gathered until the optimizer step
    if (f->param_slot_state[slot] == SLOT_GATHERING) f->be.wait(f->be.ctx, gather_op(f, slot));
    f->param_slot_state[slot] = SLOT_EMPTY;
    f->param_slot_unit[slot] = -1;
    f->unit_param_slot[u] = -1;
}

void* fsdp_forward_pre(Fsdp* f, int u) {
    notify(f, FSDP_EVENT_FORWARD);
    void* p = acquire_unit(f, u);
    // Prefetch the next units in forward order while u computes.
    for (int k = 1; k <= f->cfg.prefetch && u + k < f->n_units; k++)
        if (!request_unit(f, u + k)) break;
    return p;
}

void fsdp_forward_post(Fsdp* f, int u) {
    notify(f, FSDP_EVENT_FORWARD);
    if (f->cfg.reshard_after_forward) release_unit(f, u);
}

void* fsdp_backward_pre(Fsdp* f, int u) {
    notify(f, FSDP_EVENT_BACKWARD);
    void* p = acquire_unit(f, u);
    for (int k = 1; k <= f->cfg.prefetch && u - k >= 1; k++)
        if (!request_unit(f, u - k)) break;
    return p;
}

void fsdp_backward_prefetch(Fsdp* f, int u) {
    if (u >= 1 && u < f->n_units) request_unit(f, u);
}

void fsdp_release_all(Fsdp* f) {
    for (int u = 1; u < f->n_units; u++) release_unit(f, u);
}

// ---------------------------------------------------------------------------------------
// Gradients

// The fused path's fold of unit u's reduced gradient src (src_bytes per element) into its fp32
// shard dst, with the norm's squares when sum_squares. Tensor parallel, on the group's ranks
// after the first, the replicated tensors' squares are the first rank's to count: the fold goes
// in runs, squares summed over the others only (the values folded are the same, element by
// element, and so are the replicas everywhere).
static void fold_unit(Fsdp* f, int u, float* dst, const void* src, size_t src_bytes, int sum_squares) {
    const int first = !f->unit_folded[u];
    size_t from = 0;  // the counted run so far: [from, a)
    if (sum_squares && f->pg->tp_size > 1 && f->pg->tp_rank > 0) {
        for (int i = 0; i < f->n_pieces; i++) {
            const FlatPiece* p = &f->pieces[i];
            if (p->unit != u || !f->units[u].tensors[p->tensor].tp_replicated) continue;
            const size_t a = p->at - f->shard_offset[u], b = a + (p->hi - p->lo);
            if (a > from)
                f->be.fold_grad(f->be.ctx, dst + from, (const char*)src + from * src_bytes, src_bytes, a - from, first, 1);
            f->be.fold_grad(f->be.ctx, dst + a, (const char*)src + a * src_bytes, src_bytes, b - a, first, 0);
            from = b;
        }
    }
    if (f->units[u].shard > from)
        f->be.fold_grad(f->be.ctx, dst + from, (const char*)src + from * src_bytes, src_bytes, f->units[u].shard - from,
                        first, sum_squares);
    f->unit_folded[u] = 1;
}

// Wait for the reduce-scatter out of grad slot g and fold it into the unit's fp32 shard.
static void finish_reduce(Fsdp* f, int g) {
    if (!f->grad_slot_busy[g]) return;
    int u = f->grad_slot_unit[g];
    float* dst = f->grad_shard + f->shard_offset[u];
    if (!f->alias_params) f->be.wait(f->be.ctx, reduce_op(f, g));
    if (f->offload) {
        // To the host, folded there (the last micro-step's folds count the norm's squares; a TP
        // rank after the first counts its own from the shards: offload_norm_in_runs).
        // A shard group of one copies the slot itself: compute must not rewrite it before the
        // copy has read it (fsdp_grad guards it).
        const void* src = f->alias_params ? f->grad_slot[g] : (const void*)f->rs_out[g];
        const size_t src_bytes = f->alias_params ? f->be.param_bytes : f->be.reduce_out_bytes;
        const int last = f->micro_step == f->micro_steps - 1;
        const int tp_later = f->pg->tp_size > 1 && f->pg->tp_rank > 0;
        const size_t at = f->shard_offset[u];
        f->be.offload_fold(f->be.ctx, u, dst, (char*)f->grad_stage + at * f->grad_stage_bytes, src, src_bytes,
                           f->units[u].shard, f->alias_params ? -1 : reduce_op(f, g), !f->unit_folded[u],
                           last && f->pg->replicate_size == 1 && !tp_later);
        f->unit_folded[u] = 1;
        if (f->alias_params) f->grad_slot_copy[g] = u;
    } else if (f->fused) {
        // The shard group of one folds the compute-dtype slot itself (its reduce-scatter would
        // be a copy); the last micro-step's folds carry the norm's sum of squares.
        const void* src = f->alias_params ? f->grad_slot[g] : (const void*)f->rs_out[g];
        const size_t src_bytes = f->alias_params ? f->be.param_bytes : f->be.reduce_out_bytes;
        const int last = f->micro_step == f->micro_steps - 1;
        fold_unit(f, u, dst, src, src_bytes, last && f->fused_norm);
    } else {
        f->be.accumulate(f->be.ctx, dst, (const float*)f->rs_out[g], f->units[u].shard);
    }
    f->grad_slot_busy[g] = 0;
}

void fsdp_zero_grad(Fsdp* f, int micro_steps) {
    f->micro_steps = micro_steps;
    f->micro_step = 0;
    // The fused and offloaded paths write each unit's shard with its first fold: nothing to zero.
    if (f->fused || f->offload) memset(f->unit_folded, 0, (size_t)f->n_units);
    else f->be.zero(f->be.ctx, f->grad_shard, f->total_shard * sizeof(float));
    for (int u = 0; u < f->n_units; u++) f->unit_grad_slot[u] = -1;
    for (int g = 0; g < f->n_grad_slots; g++) f->grad_slot_unit[g] = -1;
}

static int syncing_now(const Fsdp* f) {
    return f->cfg.sync_every_micro_step || f->micro_step == f->micro_steps - 1;
}

void* fsdp_grad(Fsdp* f, int u) {
    int g = f->unit_grad_slot[u];
    if (g >= 0) return f->grad_slot[g];
    if (u == 0) {
        g = 0;
    } else if (f->cfg.sync_every_micro_step) {
        // Take the pool slot used longest ago; its reduction must finish first.
        g = 1 + f->grad_pool_next;
        f->grad_pool_next = (f->grad_pool_next + 1) % (f->n_grad_slots - 1);
        finish_reduce(f, g);
        if (f->grad_slot_unit[g] >= 0) f->unit_grad_slot[f->grad_slot_unit[g]] = -1;
    } else {
        g = u;  // one slot per unit, kept across micro-steps
    }
    // An offloaded fold may still be copying out of this slot (a shard group of one).
    if (f->grad_slot_copy[g] >= 0) {
        f->be.offload_guard(f->be.ctx, f->grad_slot_copy[g], 0);
        f->grad_slot_copy[g] = -1;
    }
    // The model overwrites every tensor of the unit at its first write (fsdp_grad_accumulates
    // 0), so only what no tensor covers is zeroed: the padding, which the reduce-scatter and
    // the norm read, and in a pooled slot the blocks a shorter last unit lacks (a previous
    // unit's gradient would be there).
    size_t n = u == 0 ? f->units[0].padded : f->block_padded, used = f->units[u].numel;
    if (!fsdp_grad_accumulates(f) && n > used)
        f->be.zero(f->be.ctx, (char*)f->grad_slot[g] + used * f->be.param_bytes, (n - used) * f->be.param_bytes);
    f->grad_slot_unit[g] = u;
    f->unit_grad_slot[u] = g;
    return f->grad_slot[g];
}

// Unsharded accumulation keeps each unit's slot across micro-steps: from the second one on,
// gradients add to what is there.
int fsdp_grad_accumulates(const Fsdp* f) {
    return !f->cfg.sync_every_micro_step && f->micro_step > 0;
}

// Tensor parallelism: each rank of the group computed the gradient of a replicated tensor
// from its own part of the work (its rows of the sequence, or, for what one rank adds for the
// group, all of it there and nothing elsewhere): their sum is the gradient, the same on every
// rank, so that the replicas stay equal. Runs of adjacent replicated tensors go in one call.
static void sum_replicated_over_tp(Fsdp* f, int u, void* grad) {
    const FlatUnit* unit = &f->units[u];
    for (int i = 0; i < unit->n_tensors;) {
        if (!unit->tensors[i].tp_replicated) { i++; continue; }
        const size_t begin = unit->tensors[i].offset;
        size_t n = 0;
        for (; i < unit->n_tensors && unit->tensors[i].tp_replicated; i++) n += unit->tensors[i].numel;
        f->be.all_reduce_tp(f->be.ctx, (char*)grad + begin * f->be.param_bytes, n);
        f->traffic.tp_replicated_reduced += (uint64_t)n * f->be.param_bytes;
    }
}

void fsdp_backward_post(Fsdp* f, int u) {
    notify(f, FSDP_EVENT_BACKWARD);
    release_unit(f, u);
    int g = f->unit_grad_slot[u];
    if (g < 0) fatal(f->pg, "fsdp: unit %d finished its backward without a gradient", u);
    if (syncing_now(f)) {
        if (f->pg->tp_size > 1) sum_replicated_over_tp(f, u, f->grad_slot[g]);
        if (!f->alias_params)
            f->be.reduce_scatter_start(f->be.ctx, reduce_op(f, g), f->grad_slot[g], f->rs_out[g],
                                       f->units[u].shard);
        f->grad_slot_busy[g] = 1;
        f->traffic.reduce_scattered += (uint64_t)(f->units[u].padded - f->units[u].shard) * f->be.param_bytes;
        // Offloaded with a shard group of one, the slot is the reduced gradient: its copy to
        // the host starts now, while the next unit's backward runs.
        if (f->offload && f->alias_params) finish_reduce(f, g);
    }
    // In per-micro-step mode the slot returns to the pool; its mapping is dropped when reused.
}

void fsdp_end_micro_step(Fsdp* f) {
    notify(f, FSDP_EVENT_BACKWARD);
    for (int g = 0; g < f->n_grad_slots; g++) finish_reduce(f, g);
    if (f->cfg.sync_every_micro_step) {
        for (int u = 0; u < f->n_units; u++) f->unit_grad_slot[u] = -1;
        for (int g = 0; g < f->n_grad_slots; g++) f->grad_slot_unit[g] = -1;
    }
    fsdp_release_all(f);
    f->micro_step++;
    // HSDP: each replica group reduced its own data; sum the shards across replicas once
    // (offloaded: on the host, in fsdp_step_decide, once the folds are done).
    if (f->micro_step == f->micro_steps && f->pg->replicate_size > 1 && !f->offload) {
        f->be.all_reduce_replicas(f->be.ctx, f->grad_shard, f->total_shard);
        f->traffic.replica_reduced += (uint64_t)f->total_shard * sizeof(float);
    }
}

// ---------------------------------------------------------------------------------------
// The step's decision and the optimizer

void fsdp_add_loss(Fsdp* f, const float* losses, size_t n) {
    const int accumulate = f->micro_step > 0;  // (called before fsdp_end_micro_step)
    // Every rank of a tensor-parallel group holds the same losses: the first one counts them.
    if (f->pg->tp_size > 1 && f->pg->tp_rank > 0) n = 0;
    if (f->offload) {
        f->be.sum_into(f->be.ctx, f->d_loss_sum, losses, n, accumulate);
        return;
    }
    if (f->fused) {
        f->be.sum_into(f->be.ctx, &f->stats->loss_sum, losses, n, accumulate);
        return;
    }
    double s = accumulate ? f->stats->loss_sum : 0.0;  // in order, as the reference sums
    for (size_t i = 0; i < n; i++) s += losses[i];
    f->stats->loss_sum = s;
}

void fsdp_test_poison_loss(Fsdp* f) {
    const double nan = NAN;
    f->be.copy_to_device(f->be.ctx, f->offload ? f->d_loss_sum : &f->stats->loss_sum, &nan, sizeof(nan));
}

void fsdp_test_poison_grad(Fsdp* f) {
    const float nan = NAN;
    if (f->offload) {  // the host's shard, once its folds are done (fsdp_step_decide)
        f->poison_grad_pending = 1;
        f->test_norm_from_shards = 1;
        return;
    }
    f->be.copy_to_device(f->be.ctx, f->grad_shard, &nan, sizeof(nan));
    f->test_norm_from_shards = 1;
}

// The fused path's sum of squares from the gradient shards (device memory) into *out: one pass,
// or, tensor parallel on the group's ranks after the first, runs between the replicated
// tensors' pieces (tp rank 0 counts those), accumulated.
static void norm_from_shards(Fsdp* f, double* out) {
    size_t from = 0;  // the counted run so far: [from, p->at)
    int acc = 0;
    for (int i = 0; f->pg->tp_size > 1 && f->pg->tp_rank > 0 && i < f->n_pieces; i++) {
        const FlatPiece* p = &f->pieces[i];
        if (!f->units[p->unit].tensors[p->tensor].tp_replicated) continue;
        if (p->at > from) {
            f->be.sum_squares_into(f->be.ctx, out, f->grad_shard + from, p->at - from, acc);
            acc = 1;
        }
        from = p->at + (p->hi - p->lo);
    }
    f->be.sum_squares_into(f->be.ctx, out, f->grad_shard + from, f->total_shard - from, acc);
}

// --offload optimizer, tensor parallel on the group's ranks after the first: the sum of squares
// of the host's gradient shards in runs between the replicated tensors' pieces (TP rank 0
// counts those), as norm_from_shards on the device. Waits for the folds (the first call).
static double offload_norm_in_runs(Fsdp* f) {
    double s = 0.0;
    size_t from = 0;  // the counted run so far: [from, p->at)
    for (int i = 0; i < f->n_pieces; i++) {
        const FlatPiece* p = &f->pieces[i];
        if (!f->units[p->unit].tensors[p->tensor].tp_replicated) continue;
        if (p->at > from) s += f->be.offload_sum_squares(f->be.ctx, f->grad_shard + from, p->at - from);
        from = p->at + (p->hi - p->lo);
    }
    return s + f->be.offload_sum_squares(f->be.ctx, f->grad_shard + from, f->total_shard - from);
}

void fsdp_step_decide(Fsdp* f, double tokens, float grad_clip) {
    notify(f, FSDP_EVENT_OPTIMIZER);
    FsdpStepStats* s = f->stats;
    if (f->offload) {
        // On the host: the folds' sum of squares (waiting for them), the loss sum from the
        // device, the world's sums.
        if (f->poison_grad_pending) {
            f->be.offload_drain(f->be.ctx);
            f->grad_shard[0] = NAN;
            f->poison_grad_pending = 0;
        }
        const int hsdp = f->pg->replicate_size > 1;
        if (hsdp) {  // (waits for the folds)
            f->be.offload_all_reduce_replicas(f->be.ctx, f->grad_shard, f->total_shard);
            f->traffic.replica_reduced += (uint64_t)f->total_shard * sizeof(float);
        }
        if (f->pg->tp_size > 1 && f->pg->tp_rank > 0)
            s->sumsq = offload_norm_in_runs(f);
        else
            s->sumsq = f->be.offload_sum_squares(f->be.ctx, f->test_norm_from_shards || hsdp ? f->grad_shard : NULL,
                                                 f->total_shard);
        f->test_norm_from_shards = 0;
        f->be.offload_decide(f->be.ctx, s, f->d_loss_sum, tokens, grad_clip);
        return;
    }
    if (f->fused) {
        // The sum of squares came with the last folds, else (HSDP: the replica all-reduce
        // changed the shards after them) one pass over the shard, on the device.
        if (f->fused_norm) f->be.folded_sum_squares(f->be.ctx, &s->sumsq);  // (and cleared for the next step)
        if (!f->fused_norm || f->test_norm_from_shards) norm_from_shards(f, &s->sumsq);
    } else if (f->pg->tp_size > 1) {
        // A replicated tensor's gradient is on every rank of the tensor-parallel group: the
        // group's first rank counts it (the backend sums the norm over the group).
        s->sumsq = 0.0;
        for (int i = 0; i < f->n_pieces; i++) {
            const FlatPiece* p = &f->pieces[i];
            if (f->pg->tp_rank > 0 && f->units[p->unit].tensors[p->tensor].tp_replicated) continue;
            s->sumsq += f->be.sum_squares(f->be.ctx, f->grad_shard + p->at, p->hi - p->lo);
        }
    } else {
        s->sumsq = f->be.sum_squares(f->be.ctx, f->grad_shard, f->total_shard);
    }
    f->test_norm_from_shards = 0;
    f->be.step_decide(f->be.ctx, s, tokens, grad_clip);
}

void fsdp_set_loss_scaler(Fsdp* f, float scale, int good_steps) {
    FsdpStepStats s;
    memset(&s, 0, sizeof(s));
    s.loss_scale = s.step_loss_scale = scale;
    s.growth_interval = f->cfg.loss_scale > 0.0f ? f->cfg.loss_scale_growth_interval : 0;
    // Below the window, so that the decision's ++ never overflows: a count at or over it (saved
    // by a run with a larger window) becomes window - 1, and the next finite step doubles the
    // scale. A fixed scale counts nothing.
    const int top = s.growth_interval > 0 ? s.growth_interval - 1 : 0;
    s.good_steps = good_steps < 0 ? 0 : good_steps > top ? top : good_steps;
    // Fused, the device's copy is the state (the host's is a fetched copy, and the planner's
    // host memory is not real); else they are one.
    if (f->fused) f->be.copy_to_device(f->be.ctx, f->stats, &s, sizeof(s));
    else *f->stats = s;
}

const float* fsdp_loss_scale_device(const Fsdp* f) {
    return f->cfg.loss_scale > 0.0f ? &f->stats->loss_scale : NULL;
}

void fsdp_step_stats_fetch(Fsdp* f) {
    if (f->fused) f->be.step_stats_fetch(f->be.ctx, f->host_stats, f->stats);
    // Offloaded, the figures are on the host already; a copy behind the step still tells the
    // host when the device has finished it (what the step's timing marks need).
    if (f->offload && f->be.step_stats_fetch)
        f->be.step_stats_fetch(f->be.ctx, f->stats_sink, (const FsdpStepStats*)f->d_loss_sum);
}

const FsdpStepStats* fsdp_step_stats_wait(Fsdp* f) {
    if (f->fused || (f->offload && f->be.step_stats_wait)) f->be.step_stats_wait(f->be.ctx);
    return f->host_stats;
}

void fsdp_optimizer_step(Fsdp* f, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    if (f->offload) {
        // Queued on the host threads unit by unit in forward order (the decision is known
        // here); each new shard goes up at its unit's next gather, so the next forward starts
        // while the later units are still being updated. A skipped step changes nothing.
        if (f->stats->skip) return;
        for (int u = 0; u < f->n_units; u++) {
            size_t begin, end, at = f->shard_offset[u];
            fsdp_owned_range(f, u, &begin, &end);
            f->be.offload_adamw(f->be.ctx, u, f->master + at, f->adam_m + at, f->adam_v + at, f->grad_shard + at,
                                (char*)f->param_stage + at * f->be.param_bytes, f->units[u].shard,
                                f->decay_toggles + f->toggle_at[u], f->toggle_at[u + 1] - f->toggle_at[u], lr, beta1,
                                beta2, eps, weight_decay, t, f->stats, (uint64_t)u, begin,
                                unit_key_runs(f, u), unit_key_count(f, u));
            f->unit_stale[u] = SHARD_STALE;
        }
        f->params_dirty = 1;
        return;
    }
    if (f->fused) {
        // One pass per unit over master, m, v and the gradient, writing the compute-dtype
        // shard as refresh_param_shards would (so there is no refresh pass). Tensor parallel:
        // an element's rounding key is (unit, step, its index in the unit at TP 1: the key
        // runs), so a value rounds the same whatever N; a replicated tensor, with the same
        // gradient and decision on every rank of the TP group, gets the same key there too:
        // the replicas stay bitwise equal (test_train_emu checks it, FSDP_TEST_TP_REPLICAS).
        for (int u = 0; u < f->n_units; u++) {
            size_t begin, end, at = f->shard_offset[u];
            fsdp_owned_range(f, u, &begin, &end);
            f->be.adamw_unit(f->be.ctx, f->master + at, f->adam_m + at, f->adam_v + at, f->grad_shard + at,
                             (char*)f->param_shard + at * f->be.param_bytes, f->units[u].shard,
                             f->decay_toggles + f->toggle_at[u], f->toggle_at[u + 1] - f->toggle_at[u], lr, beta1,
                             beta2, eps, weight_decay, t, f->stats, (uint64_t)u, begin,
                             unit_key_runs(f, u), unit_key_count(f, u));
        }
        f->params_dirty = 1;
        return;
    }
    // The unfused path decides on the host (stats in host memory).
    if (f->stats->skip) return;
    const float scale = f->stats->clip_scale;
    for (int i = 0; i < f->n_pieces; i++) {
        const FlatPiece* p = &f->pieces[i];
        const FlatTensor* tensor = &f->units[p->unit].tensors[p->tensor];
        f->be.adamw(f->be.ctx, f->master + p->at, f->adam_m + p->at, f->adam_v + p->at,
                    f->grad_shard + p->at, p->hi - p->lo, lr, beta1, beta2, eps,
                    tensor->decay ? weight_decay : 0.0f, t, scale);
    }
    refresh_param_shards(f, t);
    f->params_dirty = 1;
}
