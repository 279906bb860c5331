/*
train_gpt: GPT pretraining (GPT-2, Llama 3) with full FSDP / ZeRO-3 sharding.

    mpirun -np 4 ./train_gpt --device cpu -m d6 -i "data/tinyshakespeare/tiny_shakespeare_train.bin"

This file is the training story, top to bottom: the model (its activations, and the schedule
of gathers, kernels and reduce-scatters in model_forward / model_backward), one optimizer step
(model_step_grads and model_step_update, which a run's train_step and --plan both call), the
validation loss (evaluate), samples, checkpoints (maybe_checkpoint, maybe_resume), and main.
Around it:
    comm/        how ranks meet and talk (MPI or TCP), the process group
    fsdp/        the sharding engine: flat units, slots, gather/prefetch/reduce-scatter, AdamW
    kernels/     the kernel tables the schedule calls (cpu fp32, cuda bf16)
    model/       the families (one tensor table each: model/gpt2.c, model/llama3.c), their layout,
                 initialisation, checkpoint state, llm.c and Hugging Face files
    checkpoint/  sharded checkpoints (any world size on load)
    dataloader/  token shards, the GPT-2 tokenizer
    train/       what the story calls but need not show: the device constructor, the flags and
                 their checks, metrics and the setup lines (the memory budget), the --plan
                 driver, the profiler, LR schedule, sampler, checkpoint writer, test hooks
Compiled by nvcc when it exists (the cuda device slots in beside the cpu one, train/device.cuh)
and by the host C++ compiler otherwise; either way the cpu device works without a GPU.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "comm/process_group.h"
#include "dataloader/loader.h"
#include "dataloader/tokenizer.h"
#include "fsdp/flat_unit.h"
#include "fsdp/fsdp.h"
#include "kernels/kernels.h"
#include "model/llmc.h"
#include "model/model.h"
#include "model/state.h"
#include "train/activations.h"
#include "train/device.cuh"
#include "train/eval.h"
#include "train/metrics.h"
#include "train/options.h"
#include "train/plan.h"
#include "train/profile.h"
#include "train/run_ckpt.h"
#include "train/run_data.h"
#include "train/run_lock.h"
#include "train/sampler.h"
#include "train/schedulers.h"
#include "train/signals.h"
#include "train/test_hooks.h"
#include "train/tp_schedule.h"

// Element i of a buffer of elem-byte elements (the compute dtype differs by device: fp32 on
// the cpu, bf16 on cuda, so the schedule addresses activations and parameters in bytes).
static inline void* elem_at(const void* base, size_t i, size_t elem) { return (char*)base + i * elem; }

// Pointers into a gathered unit (parameters or gradients: same layout), in the compute dtype,
// by role (model/model.h: the family's table gives each tensor its role), so that one schedule
// runs every family: what a family lacks is NULL (Llama: positions, biases, the norms' bias).
// A family without a head of its own ties it to wte.
typedef union {
    struct { void *wte, *wpe, *lnfw, *lnfb, *head; };
    void* at[NUM_ROOT_ROLES];
} RootTensors;
typedef union {
    struct { void *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb; };
    void* at[NUM_BLOCK_ROLES];
} BlockTensors;

static RootTensors root_tensors(const ModelLayout* m, void* base, size_t elem) {
    const ModelFamily* f = m->family;
    RootTensors r;
    memset(&r, 0, sizeof(r));
    for (int i = 0; i < f->n_root; i++) r.at[f->root[i].role] = elem_at(base, m->units[0].tensors[i].offset, elem);
    if (!r.head) r.head = r.wte;
    return r;
}

static BlockTensors block_tensors(const ModelLayout* m, int u, int layer_in_unit, void* base, size_t elem) {
    const ModelFamily* f = m->family;
    const FlatTensor* t = m->units[u].tensors + (size_t)layer_in_unit * f->n_block;
    BlockTensors b;
    memset(&b, 0, sizeof(b));
    for (int j = 0; j < f->n_block; j++) b.at[f->block[j].role] = elem_at(base, t[j].offset, elem);
    return b;
}

// ----------------------------------------------------------------------------------------
// The model: layout + engine + device + activations

typedef struct {
    ModelLayout layout;        // this rank's part of each tensor (tensor parallelism: its split)
    ModelConfig config;
    const ModelFamily* family; // its table, and the norm, MLP and positions the schedule runs
    Fsdp fsdp;
    Device dev;
    Activations acts;
    void* acts_memory;
    int B, T;                // micro-batch the activations were sized for
    Recompute recompute;     // what the backward rebuilds instead of keeping (--recompute)
    const int* tok_inputs;   // the last forward's token ids, where the device reads them
    int* tok_pad;            // [T] a sampled row's tokens padded to the tensor-parallel group (host)
    float* row_part;         // [Vp / tp] its logits' vocabulary range here (host; tensor parallel)
} Model;

// dopt NULL: the cpu device, no recompute.
static void model_build(Model* model, const ModelConfig* c, int layers_per_unit, const ProcessGroup* pg,
                       const FsdpConfig* fcfg, const DeviceOptions* dopt, int B, int T) {
    char err[512];
    memset(model, 0, sizeof(*model));
    model->config = *c;
    const int tp = pg->tp_size > 1 ? pg->tp_size : 1;
    if (build_layout_tp(&model->layout, c, layers_per_unit, pg->shard_size, tp, tp > 1 ? pg->tp_rank : 0))
        fatal(pg, "model: %s", model_tp_check(c, tp, err, sizeof(err)) ? err : "a unit of more than 5 blocks (--fsdp-unit-layers), or out of memory");
    // The tensors every rank of a tensor-parallel group holds whole: the engine sums their
    // gradients over the group and counts them once in the norm.
    for (int u = 0; tp > 1 && u < model->layout.n_units; u++)
        for (int i = 0; i < model->layout.units[u].n_tensors; i++) {
            TpView v;
            layout_tp_view(&model->layout, u, i, &v);
            model->layout.units[u].tensors[i].tp_replicated = v.replicated;
        }
    device_open(&model->dev, dopt, pg, fcfg, &model->layout, B, T);
    if (tp > 1 && !model->dev.tp.all_gather) fatal(pg, "--tp: the %s device has no tensor parallelism yet", model->dev.name);
    if (fsdp_init(&model->fsdp, pg, &model->dev.backend, fcfg, model->layout.units, model->layout.n_units, err, sizeof(err)))
        fatal(pg, "%s", err);
    model->family = model->layout.family;
    model->B = B;
    model->T = T;
    model->recompute = dopt ? dopt->recompute : RECOMPUTE_NONE;
    Kernels* k = &model->dev.kernels;
    size_t n = carve_activations(&model->acts, &model->layout, (size_t)B, (size_t)T, k, model->recompute, NULL);
    model->acts_memory = model->dev.backend.alloc(model->dev.backend.ctx, n);
    carve_activations(&model->acts, &model->layout, (size_t)B, (size_t)T, k, model->recompute, model->acts_memory);
    k->gelu_scratch = model->acts.gelu_scratch;
    if (model->acts.tp > 1) {  // a sampled row padded to the TP group, its logits' vocabulary range
        model->tok_pad = (int*)calloc((size_t)T, sizeof(int));
        model->row_part = (float*)calloc(model->acts.Vp, sizeof(float));
        if (!model->tok_pad || !model->row_part) fatal(pg, "out of host memory");
    }
    k->lm_head_rows = (int)model->acts.Vp;  // (the profile's LM head: this rank's vocabulary)
}

static void model_free(Model* model) {
    model->dev.kernels.synchronize(&model->dev.kernels);
    model->dev.backend.release(model->dev.backend.ctx, model->acts_memory);
    fsdp_free(&model->fsdp);
    model->dev.close(&model->dev);
    free(model->layout.units);
    free(model->tok_pad);
    free(model->row_part);
}

// Initial weights go into the host mirror of this rank's master shards, then up to the device.
static void model_init_weights(Model* model, uint64_t seed) {
    model_init_parameters(&model->layout, model->fsdp.pieces, model->fsdp.n_pieces, model->fsdp.host_master, seed);
    fsdp_upload_state(&model->fsdp, 0);
}

static int model_load_weights(Model* model, const char* path, int version, char* err, size_t errlen) {
    if (llmc_read_model_file(&model->layout, model->fsdp.pieces, model->fsdp.n_pieces, model->fsdp.host_master, path,
                             version, err, errlen))
        return 1;
    fsdp_upload_state(&model->fsdp, 0);
    return 0;
}

// The rotary embedding (families with RoPE), as the kernels take it.
static RopeParams model_rope(const ModelConfig* c) {
    RopeParams p = {c->rope_theta, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                    c->rope_original_max_pos};
    return p;
}

// ---- tensor parallelism (Megatron's, sequence parallel): between the blocks a rank holds its
// N / tp rows of the residual stream and runs the norms on them; a column-parallel matmul
// (qkv, the MLP's first, the LM head) reads every row, gathered; a row-parallel one (the two
// projections) leaves a partial sum of every row, which the group's reduce-scatter turns into
// this rank's rows. The backward mirrors it. At tp 1 these are nothing: the same buffers.

// Every row of x (this rank's N / tp rows of C): x itself at tp 1, else gathered into tp_full.
static const void* tp_gather_rows(Model* model, const void* x, int N) {
    Activations* a = &model->acts;
    if (a->tp == 1) return x;
    const size_t n = (size_t)(N / a->tp) * model->config.channels;
    model->dev.tp.all_gather(model->dev.tp.ctx, a->tp_full, x, n);
    model->dev.tp_bytes.gathered += (uint64_t)(a->tp - 1) * n * model->dev.kernels.act_bytes;  // the other ranks' rows
    return a->tp_full;
}
// Where a row-parallel op writes its partial sums of every row (tp_full), or at tp 1 out itself.
static void* tp_partial(Model* model, void* out) { return model->acts.tp == 1 ? out : model->acts.tp_full; }
// out (this rank's rows) <- the group's sum of partial (every row); returns where the rows are.
static const void* tp_sum_rows(Model* model, void* out, const void* partial, int N) {
    if (model->acts.tp == 1) return partial;
    const size_t n = (size_t)(N / model->acts.tp) * model->config.channels;
    model->dev.tp.reduce_scatter(model->dev.tp.ctx, out, partial, n);
    model->dev.tp_bytes.reduce_scattered += (uint64_t)(model->acts.tp - 1) * n * model->dev.kernels.act_bytes;  // the others' rows
    return out;
}
// What one rank adds for the whole group (a row-parallel bias, the positions): the first one.
static const void* tp_once(const Model* model, const void* x) { return model->acts.tp_rank == 0 ? x : NULL; }
static void* tp_once_grad(const Model* model, void* x) { return model->acts.tp_rank == 0 ? x : NULL; }

// The loss. Vocabulary parallel, each rank has its columns of the logits: the row maxima, then
// the sums of exponentials and the targets' logits, are all-reduced over the group.
static void loss_forward(Model* model, const int* tgt, int N, float dloss) {
    Activations* a = &model->acts;
    Kernels* k = &model->dev.kernels;
    const int V = (int)a->V, Vp = (int)a->Vp, begin = (int)a->vocab_begin;
    if (a->tp == 1) {
        kernel_crossentropy(k, a->logits, a->losses, tgt, N, model->config.vocab_size, Vp, dloss);
        return;
    }
    kernel_crossentropy_tp_max(k, a->ce_max, a->logits, N, V, Vp);
    model->dev.tp.all_reduce_f32(model->dev.tp.ctx, a->ce_max, (size_t)N, 1);
    kernel_crossentropy_tp_sums(k, a->ce_sums, a->logits, a->ce_max, tgt, N, V, Vp, begin);
    model->dev.tp.all_reduce_f32(model->dev.tp.ctx, a->ce_sums, 2 * (size_t)N, 0);
    model->dev.tp_bytes.all_reduced += (uint64_t)tp_all_reduce_bytes(3.0 * N * sizeof(float), a->tp);  // N maxima, 2N sums
    kernel_crossentropy_tp_finish(k, a->logits, a->losses, a->ce_max, a->ce_sums, tgt, N, V, Vp, begin, dloss);
}

// ---- the pieces where the families differ (everything else in the schedule is shared)

// The block's norms: LayerNorm (GPT-2) or RMSNorm (Llama: no bias, no mean), of a, or with
// b != NULL of residual = a + b (the fused residual add: residual written, then normalised).
static void norm_forward(Model* model, void* residual, void* out, float* mean, float* rstd, const void* a, const void* b,
                         const void* weight, const void* bias, int N) {
    Kernels* k = &model->dev.kernels;
    const int C = model->config.channels;
    const float eps = model->config.norm_eps;
    if (model->family->norm == NORM_RMSNORM) {
        if (b) kernel_residual_rmsnorm_forward(k, residual, out, rstd, a, b, weight, N, C, eps);
        else kernel_rmsnorm_forward(k, out, rstd, a, weight, N, C, eps);
    } else {
        if (b) kernel_residual_layernorm_forward(k, residual, out, mean, rstd, a, b, weight, bias, N, C, eps);
        else kernel_layernorm_forward(k, out, mean, rstd, a, weight, bias, N, C, eps);
    }
}
static void norm_backward(Model* model, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const void* weight, const float* mean, const float* rstd, int N, int acc) {
    Kernels* k = &model->dev.kernels;
    const int C = model->config.channels;
    if (model->family->norm == NORM_RMSNORM) kernel_rmsnorm_backward(k, dinp, dweight, dout, inp, weight, rstd, N, C, acc);
    else kernel_layernorm_backward(k, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, acc);
}

// Attention: qkv = ln1 Wqkv^T (+ b), q and k rotated (RoPE), the causal attention (k and v
// heads shared by groups of query heads with grouped-query attention), the output projection
// into proj_out. Tensor parallel: this rank's heads (qkv column-parallel by whole heads, each
// kv head with its query group), the projection row-parallel.
static void attention_block_forward(Model* model, const BlockTensors* p, const LayerActs* la, int B, int T) {
    const ModelConfig* c = &model->config;
    Activations* a = &model->acts;
    Kernels* k = &model->dev.kernels;
    const int N = B * T, C = c->channels, Q = (int)a->Q, CA = (int)a->CA;
    kernel_matmul_forward(k, la->qkv, NULL, tp_gather_rows(model, la->ln1, N), p->qkvw, p->qkvb, N, C, Q);
    if (model->family->rope) kernel_rope(k, la->qkv, B, T, a->NH, a->KVH, C / c->num_heads, model_rope(c), 0);
    kernel_attention_forward(k, la->atty, la->lse, la->qkv, B, T, CA, a->NH, a->KVH);
    kernel_matmul_forward(k, tp_partial(model, a->proj_out), NULL, la->atty, p->projw, tp_once(model, p->projb), N, CA, C);
    tp_sum_rows(model, a->proj_out, a->tp_full, N);
}
// The MLP's first matmul and its activation: GELU fch = ln2 W^T + b, fch_gelu = gelu(fch)
// (fused in the matmul where the device does); SwiGLU fch = ln2 W13^T (gate|up), fch_gelu =
// swiglu(fch).
// Tensor parallel: column-parallel, this rank's part of the MLP width (of gate and of up).
static void mlp_up_forward(Model* model, const BlockTensors* p, const LayerActs* la, int N) {
    const Activations* a = &model->acts;
    Kernels* k = &model->dev.kernels;
    const void* ln2 = tp_gather_rows(model, la->ln2, N);
    if (model->family->mlp == MLP_SWIGLU) {
        kernel_matmul_forward(k, la->fch, NULL, ln2, p->fcw, p->fcb, N, model->config.channels, (int)a->H);
        kernel_swiglu_forward(k, la->fch_gelu, la->fch, N, (int)a->A);
    } else {
        kernel_matmul_forward(k, la->fch_gelu, la->fch, ln2, p->fcw, p->fcb, N, model->config.channels, (int)a->H);
    }
}

// Forward over B x T tokens. Writes per-position losses to acts.losses (targets required;
// device memory: see model_losses_to_host). With dloss != 0 the logits buffer is left holding
// dlogits for the backward. Tensor parallel: B x T a multiple of the group's size, every rank
// of the group the same tokens (the embedding vocabulary-parallel, summed by the reduce-scatter
// into this rank's rows; the positions added by the first rank).
static void model_forward(Model* model, const int* inputs, const int* targets, int B, int T, float dloss) {
    const ModelConfig* c = &model->config;
    const ModelLayout* m = &model->layout;
    Activations* a = &model->acts;
    Fsdp* f = &model->fsdp;
    Kernels* k = &model->dev.kernels;
    size_t C = (size_t)c->channels, BT = (size_t)B * T, e = k->act_bytes, pe = model->dev.backend.param_bytes;
    int N = (int)BT, Nl = N / a->tp;
    const int* tok = kernel_tokens(k, 0, inputs, BT);
    const int* tgt = kernel_tokens(k, 1, targets, BT);
    model->tok_inputs = tok;

    RootTensors root = root_tensors(m, fsdp_forward_pre(f, 0), pe);
    kernel_encoder_forward(k, tp_partial(model, a->encoded), tok, root.wte, tp_once(model, root.wpe), B, T, (int)C,
                           (int)a->vocab_begin, (int)(a->vocab_begin + a->Vp));  // (Llama: no wpe)
    tp_sum_rows(model, a->encoded, a->tp_full, N);
    // The residual stream: block l's output is residual3[l] = residual2[l] + (MLP projection).
    // That add is fused into the norm that reads its result (the next block's first, or the
    // final one), so until then the stream is the pair (res_a, res_b); res_b NULL: just res_a.
    void* res_a = a->encoded;
    void* res_b = NULL;
    void* res_out = NULL;  // where the pending sum goes
    for (int u = 1; u < m->n_units; u++) {
        void* unit_params = fsdp_forward_pre(f, u);
        for (int j = 0; j < m->layers_per_unit; j++) {
            int l = (u - 1) * m->layers_per_unit + j;
            if (l >= c->num_layers) break;
            BlockTensors p = block_tensors(m, u, j, unit_params, pe);
            LayerActs la = layer_acts(a, l, C, e);

            norm_forward(model, res_out, la.ln1, la.ln1_mean, la.ln1_rstd, res_a, res_b, p.ln1w, p.ln1b, Nl);
            void* residual = res_b ? res_out : res_a;
            attention_block_forward(model, &p, &la, B, T);
            norm_forward(model, la.residual2, la.ln2, la.ln2_mean, la.ln2_rstd, residual, a->proj_out, p.ln2w, p.ln2b, Nl);
            mlp_up_forward(model, &p, &la, N);
            kernel_matmul_forward(k, tp_partial(model, a->proj_out), NULL, la.fch_gelu, p.fcprojw, tp_once(model, p.fcprojb), N,
                                  (int)a->A, (int)C);
            tp_sum_rows(model, a->proj_out, a->tp_full, N);
            res_a = la.residual2;
            res_b = a->proj_out;
            res_out = elem_at(a->residual3, l * a->BTl * C, e);
        }
        fsdp_forward_post(f, u);
    }
    norm_forward(model, res_out, a->lnf, a->lnf_mean, a->lnf_rstd, res_a, res_b, root.lnfw, root.lnfb, Nl);
    // (Tensor parallel, the gathered lnf stays in tp_full for the LM head's backward.)
    kernel_matmul_forward(k, a->logits, NULL, tp_gather_rows(model, a->lnf, N), root.head, NULL, N, (int)C, (int)a->Vp);
    loss_forward(model, tgt, N, dloss);
    fsdp_forward_post(f, 0);
}

// Queues a copy of the last forward's B*T losses into host memory dst (valid after the
// device's synchronize; on the cpu at once).
static void model_losses_to_host(Model* model, float* dst, int B, int T) {
    Kernels* k = &model->dev.kernels;
    k->to_host_async(k, dst, model->acts.losses, (size_t)B * T * sizeof(float));
}

// --recompute: rebuilds what block l's backward reads and the forward did not keep, from the
// block's input (residual: residual3 of the block before, or the embedding) and its gathered
// parameters, with the forward's kernels on the same inputs, so the values are the forward's
// bit for bit. (A norm of a stored residual equals the fused residual-add norm the forward
// ran: both normalise the rounded sum.)
static void recompute_block(Model* model, const BlockTensors* p, const LayerActs* la, void* residual, int B, int T) {
    Activations* a = &model->acts;
    Kernels* k = &model->dev.kernels;
    int N = B * T, Nl = N / a->tp;
    norm_forward(model, NULL, la->ln1, la->ln1_mean, la->ln1_rstd, residual, NULL, p->ln1w, p->ln1b, Nl);
    if (model->recompute == RECOMPUTE_SELECTIVE) {
        norm_forward(model, NULL, la->ln2, la->ln2_mean, la->ln2_rstd, la->residual2, NULL, p->ln2w, p->ln2b, Nl);
        if (model->family->mlp == MLP_SWIGLU) kernel_swiglu_forward(k, la->fch_gelu, la->fch, N, (int)a->A);
        else kernel_gelu_forward(k, la->fch_gelu, la->fch, (size_t)N * a->A);
        return;
    }
    attention_block_forward(model, p, la, B, T);
    norm_forward(model, la->residual2, la->ln2, la->ln2_mean, la->ln2_rstd, residual, a->proj_out, p->ln2w, p->ln2b, Nl);
    mlp_up_forward(model, p, la, N);
}

// Backward of the last forward (which must have had dloss != 0), on the same tokens. Each
// unit's gradient is reduce-scattered as soon as its backward is done. Tensor parallel: the
// residual stream's gradient is on this rank's rows, gathered before each row-parallel
// matmul's backward; the norms' outputs are gathered again for the column-parallel weights'
// gradients, whose input gradients (partial sums of every row) are reduce-scattered while
// those weight gradients are computed (tp_column_backward).
static void model_backward(Model* model, int B, int T) {
    const ModelConfig* c = &model->config;
    const ModelLayout* m = &model->layout;
    Activations* a = &model->acts;
    Fsdp* f = &model->fsdp;
    Kernels* k = &model->dev.kernels;
    size_t C = (size_t)c->channels, BT = (size_t)B * T, e = k->act_bytes, pe = model->dev.backend.param_bytes;
    int N = (int)BT, Nl = N / a->tp, Q = (int)a->Q, A = (int)a->A, CA = (int)a->CA;
    const int swiglu = model->family->mlp == MLP_SWIGLU, rope = model->family->rope;

    RootTensors root = root_tensors(m, fsdp_backward_pre(f, 0), pe);
    RootTensors droot = root_tensors(m, fsdp_grad(f, 0), pe);
    fsdp_backward_prefetch(f, m->n_units - 1);  // the last block, while the head runs
    // Each weight's first gradient write overwrites its part of a fresh gradient buffer (no
    // zeroing pass, no read of zeros), or adds to the earlier micro-steps' sums. (Tensor
    // parallel, what the first rank adds for the group it alone differentiates: elsewhere its
    // gradient is zero, written here in a fresh buffer.)
    const int acc = fsdp_grad_accumulates(f), zero_once = !acc && a->tp_rank > 0;

    void* residual_last = c->num_layers > 0 ? elem_at(a->residual3, (size_t)(c->num_layers - 1) * a->BTl * C, e) : a->encoded;
    const void* lnf = a->tp == 1 ? a->lnf : a->tp_full;  // (gathered by the forward, still there)
    int64_t rs;  // the reduce-scatter in flight (tp_column_backward)
    const void* dlnf =
        tp_column_backward(&model->dev, a, &rs, droot.head, NULL, a->logits, lnf, root.head, N, (int)C, (int)a->Vp, acc);
    k->zero(k, a->dresidual, (size_t)Nl * C * e);
    tp_wait(&model->dev, a, rs);
    norm_backward(model, a->dresidual, droot.lnfw, droot.lnfb, dlnf, residual_last, root.lnfw, a->lnf_mean, a->lnf_rstd, Nl, acc);

    for (int u = m->n_units - 1; u >= 1; u--) {
        void* unit_params = fsdp_backward_pre(f, u);
        void* unit_grads = fsdp_grad(f, u);
        int first = (u - 1) * m->layers_per_unit;
        int last = first + m->layers_per_unit - 1;
        if (last >= c->num_layers) last = c->num_layers - 1;
        for (int l = last; l >= first; l--) {
            BlockTensors p = block_tensors(m, u, l - first, unit_params, pe);
            BlockTensors g = block_tensors(m, u, l - first, unit_grads, pe);
            void* residual = l == 0 ? a->encoded : elem_at(a->residual3, (size_t)(l - 1) * a->BTl * C, e);
            LayerActs la = layer_acts(a, l, C, e);
            if (model->recompute != RECOMPUTE_NONE) recompute_block(model, &p, &la, residual, B, T);
            if (zero_once && g.fcprojb) k->zero(k, g.fcprojb, C * pe);
            if (zero_once && g.projb) k->zero(k, g.projb, C * pe);

            // dresidual holds d(residual3); the MLP branch adds into it to give d(residual2).
            const void* dout = tp_gather_rows(model, a->dresidual, N);
            if (swiglu) {
                kernel_matmul_backward(k, a->dact, g.fcprojw, tp_once_grad(model, g.fcprojb), dout, la.fch_gelu, p.fcprojw, NULL,
                                       N, A, (int)C, acc);
                kernel_swiglu_backward(k, a->dfch, a->dact, la.fch, N, A);
            } else {
                kernel_matmul_backward(k, a->dfch, g.fcprojw, tp_once_grad(model, g.fcprojb), dout, la.fch_gelu, p.fcprojw,
                                       la.fch, N, A, (int)C, acc);
            }
            const void* dln2 = tp_column_backward(&model->dev, a, &rs, g.fcw, g.fcb, a->dfch, tp_gather_rows(model, la.ln2, N),
                                                  p.fcw, N, (int)C, (int)a->H, acc);
            tp_wait(&model->dev, a, rs);
            norm_backward(model, a->dresidual, g.ln2w, g.ln2b, dln2, la.residual2, p.ln2w, la.ln2_mean, la.ln2_rstd, Nl, acc);
            // Attention branch: d(residual2) -> d(residual). (Llama: the gradient w.r.t. the
            // rotated q and k is rotated back before the projection's backward.)
            dout = tp_gather_rows(model, a->dresidual, N);
            kernel_matmul_backward(k, a->dbtc, g.projw, tp_once_grad(model, g.projb), dout, la.atty, p.projw, NULL, N, CA,
                                   (int)C, acc);
            kernel_attention_backward(k, a->dqkv, a->dbtc, la.qkv, la.atty, la.lse, B, T, CA, a->NH, a->KVH);
            if (rope) kernel_rope(k, a->dqkv, B, T, a->NH, a->KVH, (int)C / c->num_heads, model_rope(c), 1);
            const void* dln1 = tp_column_backward(&model->dev, a, &rs, g.qkvw, g.qkvb, a->dqkv, tp_gather_rows(model, la.ln1, N),
                                                  p.qkvw, N, (int)C, Q, acc);
            tp_wait(&model->dev, a, rs);
            norm_backward(model, a->dresidual, g.ln1w, g.ln1b, dln1, residual, p.ln1w, la.ln1_mean, la.ln1_rstd, Nl, acc);
        }
        fsdp_backward_post(f, u);
    }
    // The embedding's backward adds to wte: a tied one holds the LM head's gradient already; an
    // untied one (Llama's) is zeroed first in a fresh buffer. Learned positions (GPT-2's wpe):
    // the backward writes their first T rows; in a fresh buffer the rows from T on (none when T
    // is the model's maximum) are zeroed here (tensor parallel, all of them on the ranks but
    // the first, which alone adds the positions).
    if (!acc && droot.head != droot.wte) k->zero(k, droot.wte, a->Vp * C * pe);
    const size_t wpe_from = zero_once ? 0 : (size_t)T;
    if (!acc && droot.wpe && wpe_from < (size_t)c->max_seq_len)
        k->zero(k, elem_at(droot.wpe, wpe_from * C, pe), ((size_t)c->max_seq_len - wpe_from) * C * pe);
    kernel_encoder_backward(k, droot.wte, tp_once_grad(model, droot.wpe), tp_gather_rows(model, a->dresidual, N), model->tok_inputs,
                            B, T, (int)C, (int)a->vocab_begin, (int)(a->vocab_begin + a->Vp), acc);
    fsdp_backward_post(f, 0);
}

// ----------------------------------------------------------------------------------------
// What evaluation and generation (train/eval.c, train/sampler.c) call: forwards without a
// backward (dloss 0), every rank the same ones.

static void forward_losses(void* m, const int* inputs, const int* targets, int B, int T, float* losses) {
    Model* model = (Model*)m;
    model_forward(model, inputs, targets, B, T, 0.0f);
    model_losses_to_host(model, losses, B, T);
    model->dev.kernels.synchronize(&model->dev.kernels);
}

// (The row's tokens are its targets too: any valid ids, the loss is not read.) Tensor
// parallel: the forward's rows padded to a multiple of the group (causal: the padding after
// row n - 1 changes nothing before it), each rank's vocabulary range of the row gathered.
static void forward_next_logits(void* m, const int* tokens, int n, float* row) {
    Model* model = (Model*)m;
    Kernels* k = &model->dev.kernels;
    const Activations* a = &model->acts;
    const int rows = (n + a->tp - 1) / a->tp * a->tp;  // TP 1: the tokens as they are, no copy
    if (a->tp > 1) memcpy(model->tok_pad, tokens, (size_t)n * sizeof(int));
    for (int i = n; i < rows; i++) model->tok_pad[i] = tokens[n - 1];
    model_forward(model, a->tp > 1 ? model->tok_pad : tokens, a->tp > 1 ? model->tok_pad : tokens, 1, rows, 0.0f);
    float* mine = a->tp == 1 ? row : model->row_part;
    k->act_to_host_f32(k, mine, elem_at(a->logits, (size_t)(n - 1) * a->Vp, k->act_bytes), a->Vp);
    Comm* g = model->fsdp.pg->tp_comm;  // (host memory, whichever the device)
    if (a->tp > 1) comm_wait(g, comm_all_gather_start(g, mine, row, a->Vp * sizeof(float)));
}

static void forward_release(void* m) { fsdp_release_all(&((Model*)m)->fsdp); }

static ModelForward model_forward_ops(Model* model) {
    ModelForward f = {model, model->B, model->T, model->acts.tp, model->config.vocab_size, model->config.padded_vocab_size,
                      forward_losses, forward_next_logits, forward_release};
    return f;
}

#ifndef TESTING
// ----------------------------------------------------------------------------------------
// A run: what the loop carries from step to step

typedef struct {
    const Options* opt;
    ProcessGroup* pg;
    Model model;
    RunData data;                     // training and validation tokens, the evaluation set
    int B, T, grad_accum, max_steps;
    long total_tokens, global_seqs;   // per optimizer step: tokens, windows of T
    float dloss;                      // 1 / tokens per step: the loss is the global mean
    // This rank's rows of every micro-batch of a step, in host memory the device copies from
    // without staging (pinned on cuda): micro-step k's at k * B * T. The uploads run behind
    // the host, which does not wait for the device inside a step: steps alternate between the
    // two sets (by the time step n + 2 writes set n's, the host has read step n's figures, in
    // step n + 1 or before, and the device computed them after step n's uploads).
    int *inputs[2], *targets[2];
    float* step_losses;               // a validation micro-batch's losses
    int bad_in_a_row;                 // steps skipped for a non-finite loss or gradient norm
    // checkpoints
    char ckpt_root[1100];
    char resume_path[1100];           // the checkpoint --resume loads (every rank's the same), or ""
    RunCkpt ckpt;                     // the writer, whenever there is a checkpoint directory
    StepProfile profile;
    Metrics metrics;
    double device_used_mib;           // cuda: GPU memory in use above the baseline, max over the run
    TestHooks test;                   // failures made on purpose (train/test_hooks.h)
} Run;

// ----------------------------------------------------------------------------------------
// The validation loss: the mean over val_rounds micro-batches of every rank (val_steps x
// grad_accum, or as many as the validation data holds: see main).

static void evaluate(Run* r, int step) {
    Model* model = &r->model;
    char err[1024];
    double local = 0.0;
    const long rounds = r->data.val_rounds;
    for (long k = 0; k < rounds; k++) {
        if (loader_read_micro_batch(&r->data.val, (uint64_t)k, r->pg->dp_size, r->pg->dp_rank, r->B, r->inputs[0], r->targets[0],
                                    err, sizeof(err)))
            fatal(r->pg, "%s", err);
        forward_losses(model, r->inputs[0], r->targets[0], r->B, r->T, r->step_losses);
        for (long i = 0; i < (long)r->B * r->T; i++) local += r->step_losses[i];
    }
    fsdp_release_all(&model->fsdp);
    comm_all_reduce_f64(r->pg->world_comm, &local, 1, COMM_SUM);
    metrics_val(&r->metrics, step, local / ((double)rounds * r->pg->world * r->B * r->T));
}

// --eval-data's accuracy (train/eval.c), into the metrics.
static void evaluate_choices(Run* r, int step) {
    ModelForward fw = model_forward_ops(&r->model);
    EvalResult res;
    char err[1200];
    int failed = eval_multiple_choice(&r->data.eval_set, r->pg, &fw, r->inputs[0], r->targets[0], r->step_losses, r->opt->eval_log,
                                      &res, err, sizeof(err));
    fatal_agreed_any(r->pg, failed, "%s", err);
    metrics_eval(&r->metrics, step, &res, r->opt->eval_data);
}

// ----------------------------------------------------------------------------------------
// One optimizer step: grad_accum micro-steps of forward + backward (each unit's gradient
// reduce-scattered as soon as its backward is done), the loss, the global gradient norm,
// AdamW on the owned shards. Every rank takes the same decisions (skip, stop).
//
// Its device work is two functions, the micro-steps and the update, which a run's step
// (train_step) and --plan (train/plan.c, on the sim device) both call, so that the plan times
// the run's own sequence. A run reads the previous step's figures between the two.

// Where a run's micro-batches come from (--plan has none: the sim reads no token).
typedef struct {
    DataLoader* loader;
    const ProcessGroup* pg;
    int *inputs, *targets;   // this step's token buffers: micro-step k's rows at k * B * T
    StepProfile* profile;    // --profile-step: the host's own work (the data) is marked
    double seconds;          // out: the time spent reading
} StepData;

static void model_step_grads(Model* model, int grad_accum, float dloss, StepData* d) {
    Fsdp* f = &model->fsdp;
    const int B = model->B, T = model->T;
    char err[1024];
    fsdp_zero_grad(f, grad_accum);
    for (int k = 0; k < grad_accum; k++) {
        int *inputs = NULL, *targets = NULL;
        if (d) {  // this rank's rows of the global batch: the batch does not depend on W and B
            double t0 = now_seconds();
            inputs = d->inputs + (size_t)k * B * T;
            targets = d->targets + (size_t)k * B * T;
            if (loader_read_micro_batch(d->loader, k, d->pg->dp_size, d->pg->dp_rank, B, inputs, targets, err, sizeof(err)))
                fatal(d->pg, "%s", err);
            d->seconds += now_seconds() - t0;
        }
        model_forward(model, inputs, targets, B, T, dloss);
        // Without data (--plan) the losses are the sim's, no memory: their sum is planned where
        // it is the fused path's kernel; the fp32 profile's host sum and the offloaded path's
        // small kernel are left out.
        if (d || f->fused) fsdp_add_loss(f, model->acts.losses, (size_t)B * T);
        model_backward(model, B, T);
        fsdp_end_micro_step(f);
        if (d) profile_host(d->profile);
    }
}

typedef struct {
    double tokens;       // the step's tokens over every rank: the loss is their mean
    float grad_clip, lr, beta1, beta2, eps, weight_decay;
    int t;               // the step, from 1 (AdamW's bias correction)
} StepUpdate;

// The step's decision and AdamW, then the decision's figures on their way to the host.
// end_mark (or NULL) gets a mark of the device's work before that copy, so that waiting for
// the figures means the mark has been reached too.
static void model_step_update(Model* model, const StepUpdate* u, void** end_mark) {
    Fsdp* f = &model->fsdp;
    fsdp_step_decide(f, u->tokens, u->grad_clip);
    fsdp_optimizer_step(f, u->lr, u->beta1, u->beta2, u->eps, u->weight_decay, u->t);
    if (end_mark) *end_mark = model->dev.kernels.mark(&model->dev.kernels);
    fsdp_step_stats_fetch(f);
}

// A run's step. The host never waits for the device inside a step: the loss and the gradient
// norm are summed, all-reduced and judged on the device (fsdp_step_decide: AdamW reads the
// clip scale and the skip flag there), and the host reads them one step late. train_step
// issues step n+1's forward and backward, then waits for step n's figures (done by then,
// while the device works on step n+1), prints step n's line and checks --max-bad-steps, and
// only then issues step n+1's update: a run that stops for bad steps never applies the next
// update.

typedef struct {
    int pending;         // a step whose figures have not been read yet
    StepRecord record;   // its step, lr, data time (the loss, norm and time come when read)
    FsdpTraffic traffic;
    void *mark_begin, *mark_end;  // the step's first and last point in the device's work
} PendingStep;

// Step p's figures (waiting for them if the device is not there yet): its line, and the
// count of bad steps in a row, which ends the run at --max-bad-steps.
static void finish_step(Run* r, PendingStep* p) {
    if (!p->pending) return;
    Model* model = &r->model;
    Kernels* k = &model->dev.kernels;
    const FsdpStepStats* s = fsdp_step_stats_wait(&model->fsdp);
    p->pending = 0;
    // The device's time between the step's marks: the copy that just landed was queued after
    // the end mark on the same stream, so both have been reached.
    p->record.ms = k->mark_ms(k, p->mark_begin, p->mark_end);
    k->mark_free(k, p->mark_begin);
    k->mark_free(k, p->mark_end);
    step_record_decision(&p->record, s, r->opt->param_fp16);
    p->record.mem_mib = step_memory_mib(&model->dev, &r->device_used_mib);
    metrics_step(&r->metrics, &p->record, &p->traffic);
    const int completed = p->record.step;
    // A gradient overflow the loss scaler handled (it halved the scale) is part of fp16
    // training, not a bad step; one at the smallest scale, or a non-finite loss, is.
    r->bad_in_a_row = s->skip && !s->overflow ? r->bad_in_a_row + 1 : 0;
    if (r->bad_in_a_row >= r->opt->max_bad_steps)
        fatal_agreed(r->pg, "step %d: %d step(s) in a row with a non-finite loss or gradient norm (--max-bad-steps %d); "
                     "no update was applied for them, so the weights are those after step %d",
                     completed, r->bad_in_a_row, r->opt->max_bad_steps, completed - r->bad_in_a_row);
}

// Issues step `step` (its figures are read by the next train_step or finish_step). Returns
// whether some rank got a stop signal (every rank returns the same).
static int train_step(Run* r, int step, PendingStep* prev) {
    const Options* opt = r->opt;
    Model* model = &r->model;
    Fsdp* f = &model->fsdp;
    Kernels* kern = &model->dev.kernels;
    StepProfile* prof = &r->profile;
    int completed = step + 1;
    test_hooks_stall(&r->test, r->pg->rank, completed);

    PendingStep cur;
    memset(&cur, 0, sizeof(cur));
    double t0 = now_seconds();
    const int profiled = opt->profile_step == completed;
    if (profiled) {
        finish_step(r, prev);  // the profile is of this step alone
        profile_begin(prof, &model->dev, f, model->config.num_layers);
    }
    cur.mark_begin = kern->mark(kern);
    profile_host(prof);
    FsdpTraffic before = f->traffic;
    const TpBytes tp_before = model->dev.tp_bytes;
    // The token buffers alternate by step (Run): the device may still upload the previous step's.
    StepData data = {&r->data.train, r->pg, r->inputs[completed & 1], r->targets[completed & 1], prof, 0.0};
    model_step_grads(model, r->grad_accum, r->dloss, &data);
    loader_advance(&r->data.train, (uint64_t)r->global_seqs);
    test_hooks_poison(&r->test, f, &model->layout, r->pg->rank, completed);
    // The previous step's figures: on the device they were ready long ago.
    finish_step(r, prev);
    float lr = learning_rate(step, r->max_steps, opt->lr, opt->warmup_steps, opt->final_lr_frac, opt->lr_decay);
    const StepUpdate u = {(double)r->total_tokens, opt->grad_clip, lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay,
                          completed};
    model_step_update(model, &u, &cur.mark_end);
    cur.traffic.gathered = f->traffic.gathered - before.gathered;
    cur.traffic.reduce_scattered = f->traffic.reduce_scattered - before.reduce_scattered;
    cur.traffic.replica_reduced = f->traffic.replica_reduced - before.replica_reduced;
    cur.traffic.tp_replicated_reduced = f->traffic.tp_replicated_reduced - before.tp_replicated_reduced;
    cur.record.tp = tp_bytes_since(&model->dev.tp_bytes, &tp_before);
    cur.record.step = completed;
    cur.record.lr = lr;
    cur.record.data_ms = data.seconds * 1000.0;
    cur.record.profiled = profile_active(prof);
    cur.pending = 1;
    // Whether any rank was asked to stop: every rank takes the same decision at the same step.
    double stop = signals_stop_requested() != 0 ? 1.0 : 0.0;
    comm_all_reduce_f64(r->pg->world_comm, &stop, 1, COMM_SUM);
    *prev = cur;
    if (cur.record.profiled) {
        // The profiled step is read at once (its table after its line), host time included.
        profile_host(prof);  // the end of the step's timeline
        finish_step(r, prev);
        profile_report(prof, completed, (now_seconds() - t0) * 1000.0, r->pg->rank);
    }
    if (model->dev.step_done) model->dev.step_done(&model->dev);
    return stop > 0.0;
}

static int checkpoint_due(const Run* r, int completed) {
    const Options* opt = r->opt;
    return r->ckpt.writer && opt->ckpt_every > 0 &&
           (completed % opt->ckpt_every == 0 || completed == r->max_steps || completed == opt->stop_at_step);
}

static void maybe_checkpoint(Run* r, int completed, int stop_now) {
    const Options* opt = r->opt;
    char err[1024];
    int polled = r->ckpt.writer ? ckpt_writer_poll(r->ckpt.writer, err, sizeof(err)) : 0;
    if (polled == CKPT_SAVED_NO_LATEST) { if (r->pg->rank == 0) fprintf(stderr, "warning: checkpoint: %s\n", err); }
    else if (polled) fatal_agreed(r->pg, "checkpoint: %s", err);
    if (stop_now && r->pg->rank == 0)
        printf("stop signal received: %s after step %d\n", r->ckpt.writer ? "saving a checkpoint and exiting" : "exiting (no checkpoint directory: -o or --ckpt-dir)", completed);
    if (!r->ckpt.writer) return;
    if (stop_now || checkpoint_due(r, completed)) {
        r->ckpt.saves++;
        double t0 = now_seconds();
        fsdp_download_state(&r->model.fsdp);  // the checkpoint's pieces point into the host mirror
        const LoaderState* ls = &r->data.train.state;
        cJSON* state = model_checkpoint_state(&r->model.config, completed, r->total_tokens * (long)completed, r->pg->world, r->pg->tp_size, r->T,
                                             r->total_tokens, ls->windows_consumed, ls->seed, ls->shuffle);
        if (opt->param_fp16) {  // the figures of step `completed` were read (finish_step) before this
            const FsdpStepStats* s = fsdp_step_stats_wait(&r->model.fsdp);
            model_checkpoint_state_add_loss_scaler(state, s->loss_scale, s->good_steps, s->growth_interval);
        }
        const ModelCkptTables* ct = &r->ckpt.tables;
        int saved = ckpt_save(r->ckpt.writer, r->ckpt_root, completed, ct->tensors, ct->n_tensors, ct->pieces, ct->n_pieces,
                              state, err, sizeof(err));
        if (saved == CKPT_SAVED_NO_LATEST) { if (r->pg->rank == 0) fprintf(stderr, "warning: checkpoint: %s\n", err); }
        else if (saved) fatal_agreed(r->pg, "checkpoint step %d not saved (the previous ones are intact): %s", completed, err);
        double secs = now_seconds() - t0, total_bytes = (double)ct->local_bytes;
        comm_all_reduce_f64(r->pg->world_comm, &total_bytes, 1, COMM_SUM);
        if (r->pg->rank == 0) {
            if (opt->ckpt.async) printf("checkpoint step %d: %.3f GiB snapshotted in %.2f s, writing in the background\n", completed, total_bytes / (1 << 30), secs);
            else printf("checkpoint step %d: saved %.3f GiB in %.2f s (%.2f GB/s) to %s\n", completed, total_bytes / (1 << 30), secs, total_bytes / 1e9 / secs, r->ckpt_root);
            fflush(stdout);
        }
    }
    if (opt->ckpt.async && r->pg->rank == 0 && ckpt_writer_last_committed(r->ckpt.writer) > r->ckpt.reported) {
        r->ckpt.reported = ckpt_writer_last_committed(r->ckpt.writer);
        printf("checkpoint step %ld committed\n", r->ckpt.reported);
    }
}

// --resume: loads this rank's pieces of the checkpoint run_resume_model found and the data
// position, and sets the step to continue from. 0 when there is nothing to resume (a fresh
// start).
static int maybe_resume(Run* r, int* start_step) {
    const Options* opt = r->opt;
    const char* path = r->resume_path;
    char err[1024];
    *start_step = 0;
    if (!path[0]) return 0;
    Fsdp* f = &r->model.fsdp;
    float* const arenas[CKPT_KINDS] = {f->host_master, f->host_m, f->host_v};
    RunState rs;
    uint64_t bytes = 0;
    double t0 = now_seconds();
    const int data_T = r->data.train.n_shards ? r->T : 0;  // (--eval-only, --generate: any -t)
    if (model_checkpoint_load(path, &r->model.layout, f->pieces, f->n_pieces, arenas, data_T, &rs, &bytes, err, sizeof(err)))
        fatal(r->pg, "--resume: %s", err);
    // A NaN or an infinity in the weights or moments would train with every update skipped:
    // each rank checks what it read, and every rank stops with the first failing one's line.
    double secs[2] = {now_seconds() - t0, now_seconds()};
    int bad = model_checkpoint_check_finite(path, &r->model.layout, f->pieces, f->n_pieces, arenas, err, sizeof(err));
    fatal_agreed_any(r->pg, bad, "--resume: %s", err);
    secs[1] = now_seconds() - secs[1];
    // The compute-dtype shard is rounded as the optimizer's step `step` rounded it: a resume
    // continues bitwise.
    fsdp_upload_state(f, (int)rs.step);
    if (opt->param_fp16 && rs.loss_scale > 0.0f) {
        // A count at or over this run's smaller window is clamped to window - 1 there.
        fsdp_set_loss_scaler(f, rs.loss_scale, rs.loss_scale_good_steps);
        if (opt->loss_scale_window > 0 && rs.loss_scale_good_steps >= opt->loss_scale_window && r->pg->rank == 0)
            printf("--resume: %d finite steps at loss scale %g, not below --loss-scale-window %d: it doubles after the next one\n",
                   rs.loss_scale_good_steps, rs.loss_scale, opt->loss_scale_window);
    } else if (opt->param_fp16 && r->pg->rank == 0) {
        printf("--resume: %s has no loss scaler state (saved by a bf16 run): starting at --loss-scale %g\n", path,
               opt->loss_scale);
    }
    LoaderState ls = {rs.windows_consumed, rs.seed, rs.shuffle};
    if (r->data.train.n_shards) loader_set_state(&r->data.train, &ls);  // (none: --eval-only, --generate)
    double total_bytes = (double)bytes;
    comm_all_reduce_f64(r->pg->world_comm, &total_bytes, 1, COMM_SUM);
    comm_all_reduce_f64(r->pg->world_comm, secs, 2, COMM_MAX);
    if (r->pg->rank == 0)
        printf("resumed from %s (step %ld): loaded %.3f GiB in %.2f s (%.2f GB/s), every value finite (checked in %.3f s)\n", path,
               rs.step, total_bytes / (1 << 30), secs[0], total_bytes / 1e9 / secs[0], secs[1]);
    *start_step = (int)rs.step;
    return 1;
}

// ----------------------------------------------------------------------------------------
// What train/ reads of the model (it cannot include this file): the parts the setup lines and
// the memory budget read, and for --plan (train/plan.c, rank 0 of a virtual world on the sim
// device) the model's build and a run's step, as a table.

static ModelParts model_parts(Model* model) {
    ModelParts p = {&model->config, &model->layout, &model->fsdp, &model->dev, model->acts.total_bytes, model->B, model->T};
    return p;
}

static void* plan_build(const ModelConfig* c, int layers_per_unit, const ProcessGroup* pg, const FsdpConfig* fcfg,
                        const DeviceOptions* dopt, int B, int T, ModelParts* parts) {
    Model* model = (Model*)calloc(1, sizeof(Model));
    if (!model) fatal(pg, "--plan: out of host memory");
    model_build(model, c, layers_per_unit, pg, fcfg, dopt, B, T);
    *parts = model_parts(model);
    return model;
}

// A run's step without its data (the figures mean nothing to the sim, which computes none).
static void plan_step(void* model, int grad_accum) {
    Model* m = (Model*)model;
    const StepUpdate u = {(double)m->B * m->T * grad_accum, 1.0f, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
    model_step_grads(m, grad_accum, 1.0f, NULL);
    model_step_update(m, &u, NULL);
}

static void plan_free(void* model) { model_free((Model*)model); free(model); }
static const PlanModelOps plan_model_ops = {plan_build, plan_step, plan_free};

// ----------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    // Until the first step a stop signal ends the process at once (setup may block for good:
    // a hung filesystem, a rank that never joins); from then on it is only recorded.
    signals_install();
    // Flag errors are found identically on every rank, before the ranks meet: the rank the
    // launcher calls 0 says it, all exit.
    Options opt;
    ParseError pe;
    ModelConfig config;
    int file_version = 0;
    char notes[1024] = "", resume_path[1100];  // notes: what the flags changed of a loaded model
    int rc = parse_options(argc, argv, &opt, &pe);
    if (rc == 2) { if (launcher_rank() == 0) print_usage(); return 0; }
    // The model: the flags' or an --init-from file's; a resumed run's is its checkpoint's, read
    // once the run holds the checkpoint directory (run_resume_model), or here by --plan, which
    // writes nothing.
    if (rc == 0 && (!opt.resume || opt.plan))
        rc = opt.resume ? resume_config(&opt, resume_path, sizeof(resume_path), &config, &file_version, notes, sizeof(notes), &pe)
                        : resolve_config(&opt, &config, &file_version, notes, sizeof(notes), &pe);
    if (rc) {
        if (launcher_rank() == 0) fprintf(stderr, "error: %s (see --help)\n", pe.msg);
        return 1;
    }
    if (opt.plan) {  // no ranks, data or device: the sim
        printf("%s", notes);
        if (opt.resume) printf("--plan: the model of %s\n", resume_path[0] ? resume_path : "a fresh start (no checkpoint yet)");
        return plan_main(&opt, &config, &plan_model_ops);
    }

    ProcessGroup pg;
    char err[1024];
    ProcessGroupOptions pg_opt = {opt.rendezvous, opt.run_id, opt.comm_timeout};
    if (process_group_init(&pg, &argc, &argv, &pg_opt, err, sizeof(err))) {
        fprintf(stderr, "error: [rank %d] %s\n", launcher_rank(), err);
        return 1;
    }
    char why[256] = "";
    const char* device = choose_device(opt.device, why, sizeof(why));
    if (!opt.resume && check_run_flags(&opt, &config, pg.world, device, why, &pe)) {  // (a resumed run's: below)
        if (pg.rank == 0) fprintf(stderr, "error: %s (see --help)\n", pe.msg);
        process_group_finalize(&pg);
        return 1;
    }
    if (process_group_split(&pg, opt.tp, opt.shard_group_size, err, sizeof(err))) fatal_agreed(&pg, "%s", err);
    // A rank whose launcher dies exits at once (and run_ckpt_open's commits need the launcher).
    if (signals_watch_launcher(pg.launcher_pid, pg.rank)) fatal(&pg, "cannot start the launcher watch thread");
    int threads = set_threads(&opt, pg.local_world);

    Run* r = (Run*)calloc(1, sizeof(Run));
    if (!r) fatal(&pg, "out of host memory");
    r->opt = &opt;
    r->pg = &pg;
    r->B = opt.batch_size;
    r->T = opt.seq_len;
    test_hooks_read(&r->test);
    const int inference = opt.eval_only || opt.generate;  // no training: no training data, no lock, nothing written

    // Checkpoints: where. One job per run directory: rank 0 locks -o's and the checkpoint
    // directory (train_gpt.lock) until it exits, so a relaunch cannot race the ranks of an
    // earlier attempt that live on; nothing is read or written there before. Those directories
    // and --save-model's file are checked writable now, not when the first write comes.
    run_ckpt_root(&opt, r->ckpt_root, sizeof(r->ckpt_root));
    if ((opt.ckpt_every > 0 || (opt.resume && !strcmp(opt.resume, "auto"))) && !r->ckpt_root[0])
        fatal(&pg, "--ckpt-every and --resume auto need -o DIR or --ckpt-dir DIR");
    RunLock run_lock = {};  // run_lock_acquire initialises it on every rank
    char tb_dir[1024];  // TensorBoard's event directory (train/metrics.c writes there), checked writable now
    if (!inference && run_lock_acquire(&run_lock, &pg, opt.output_dir, r->ckpt_root[0] ? r->ckpt_root : NULL, opt.save_model,
                         run_tensorboard_dir(&opt, tb_dir, sizeof(tb_dir)), err, sizeof(err)))
        fatal_agreed(&pg, "%s", err);
    fatal_agreed_any(&pg, opt.eval_log && pg.rank == 0 && run_file_writable("--eval-log", opt.eval_log, opt.eval_log, err, sizeof(err)),
                     "%s", err);
    if (opt.resume) {  // the checkpoint's model, and the flags checked against it
        run_resume_model(&pg, &opt, r->ckpt_root, r->resume_path, sizeof(r->resume_path), &config, &file_version, notes,
                         sizeof(notes));
        if (check_run_flags(&opt, &config, pg.world, device, why, &pe)) fatal_agreed(&pg, "%s (see --help)", pe.msg);
    }
    if (pg.rank == 0) printf("%s", notes);
    batch_split(&opt, pg.dp_size, &r->total_tokens, &r->grad_accum);
    r->global_seqs = r->total_tokens / r->T;

    // Data
    run_data_open(&r->data, &opt, &pg, config.vocab_size, r->B, r->T, r->grad_accum, !inference);
    r->max_steps = opt.max_steps;
    if (r->max_steps < 0) {
        r->max_steps = (int)(r->data.train.windows_per_epoch / (size_t)r->global_seqs);
        if (r->max_steps < 1) r->max_steps = 1;
    }

    // Model, engine and device
    DeviceOptions dopt = run_device_options(&opt, !strcmp(device, "cuda"));
    FsdpConfig fcfg = run_fsdp_config(&opt);
    Model* model = &r->model;
    model_build(model, &config, opt.unit_layers, &pg, &fcfg, &dopt, r->B, r->T);
    // fp16: the backward's loss scale is read where the engine's scaler keeps it.
    model->dev.kernels.loss_scale = fsdp_loss_scale_device(&model->fsdp);
    if (opt.init_from && !r->resume_path[0]) {  // (resumed: the checkpoint's weights replace the file's)
        if (model_load_weights(model, opt.init_from, file_version, err, sizeof(err))) fatal(&pg, "%s", err);
    } else {
        model_init_weights(model, opt.seed);
    }
    // The peak table knows GPUs by name; the cpu device has no entry (no MFU).
    double peak_tflops = opt.peak_tflops > 0 ? opt.peak_tflops : device_peak_tflops(model->dev.gpu_name);

    // Checkpoints: whether this run continues one.
    int start_step;
    int resumed = maybe_resume(r, &start_step);
    // A writer whenever there is a checkpoint directory: a stop signal saves even without --ckpt-every.
    if (r->ckpt_root[0] && !inference) run_ckpt_open(&r->ckpt, &opt.ckpt, &pg, &model->layout, &model->fsdp, resumed ? start_step : -1);
    Tokenizer* tokenizer = opt.sample_every > 0 || opt.generate ? load_sample_tokenizer(opt.tokenizer_dir, pg.rank) : NULL;

    Metrics* mt = &r->metrics;
    mt->rank = pg.rank, mt->pg = &pg;  // (--eval-only, --generate: the lines only)
    if (!inference && metrics_open(mt, &pg, &opt, resumed ? start_step : -1, err, sizeof(err))) fatal(&pg, "%s", err);
    mt->max_steps = r->max_steps;
    mt->end_step = opt.stop_at_step && opt.stop_at_step < r->max_steps ? opt.stop_at_step : r->max_steps;
    mt->tokens_per_step = r->total_tokens;
    // MFU: the model's flops per token against the device's peak over every rank.
    mt->flops_per_token = model_flops_per_token(&config, model->layout.num_parameters, r->T);
    mt->peak_flops = peak_tflops * 1e12 * pg.world;

    const ModelParts parts = model_parts(model);
    const MemoryBudget budget = memory_budget(&parts, r->grad_accum);
    if (pg.rank == 0 && !inference)
        print_setup(&opt, &pg, device, why, threads, peak_tflops, &parts, r->grad_accum, r->total_tokens, r->max_steps,
                    &r->data.train, &budget);
    else if (pg.rank == 0) print_model_line(&config, model->layout.num_parameters);
    const size_t step_tokens = (size_t)r->grad_accum * r->B * r->T;  // the host buffers the budget's host_extra counts
    for (int i = 0; i < 2; i++) {
        r->inputs[i] = (int*)model->dev.backend.alloc_host(model->dev.backend.ctx, step_tokens * sizeof(int));
        r->targets[i] = (int*)model->dev.backend.alloc_host(model->dev.backend.ctx, step_tokens * sizeof(int));
    }
    r->step_losses = (float*)model->dev.backend.alloc_host(model->dev.backend.ctx, (size_t)r->B * r->T * sizeof(float));
    // Everything the budget counts is allocated and touched by now: what it measures.
    r->device_used_mib = print_setup_memory(&pg, &model->dev, budget.device);
    r->dloss = 1.0f / (float)((double)r->B * r->T * r->grad_accum * pg.dp_size);

    // The loop: validation and samples at their steps, then one optimizer step and maybe a
    // checkpoint. The schedule spans max_steps whatever step this job starts from.
    // A step's figures are read one step late (train_step), and before anything that prints
    // or saves after it: validation, a sample, a checkpoint, the end.
    int exit_code = 0;
    PendingStep pending;
    memset(&pending, 0, sizeof(pending));
    double run_t0 = now_seconds();
    signals_enter_training();  // a stop signal now ends the run after a step, with a checkpoint
    signals_watch_collectives(pg.comm, 1);  // ... or, when a peer is gone, within seconds without one
    ModelForward forward = model_forward_ops(model);  // samples and --generate
    if (opt.generate) sample_run(&forward, &pg, &opt, tokenizer, opt.generate, start_step);
    if (opt.eval_only && r->data.have_val) evaluate(r, start_step);
    if (opt.eval_only && opt.eval_data) evaluate_choices(r, start_step);
    for (int step = start_step; !inference && step <= r->max_steps; step++) {
        int last = step == r->max_steps;
        int val_now = r->data.have_val && (step % opt.val_every == 0 || last);
        int eval_now = opt.eval_data && ((opt.eval_every > 0 && step % opt.eval_every == 0) || last);
        int sample_now = opt.sample_every > 0 && step > 0 && (step % opt.sample_every == 0 || last);
        if (val_now || eval_now || sample_now || last || (opt.stop_at_step && step >= opt.stop_at_step)) finish_step(r, &pending);
        if (val_now) evaluate(r, step);
        if (eval_now) evaluate_choices(r, step);
        if (sample_now) sample_run(&forward, &pg, &opt, tokenizer, NULL, step);
        if (last) break;
        if (opt.stop_at_step && step >= opt.stop_at_step) break;

        int stop_now = train_step(r, step, &pending);
        int completed = step + 1;
        if (stop_now || checkpoint_due(r, completed)) finish_step(r, &pending);
        signals_watch_collectives(pg.comm, 0);  // a save's waits are for the slowest rank's writes
        maybe_checkpoint(r, completed, stop_now);
        signals_watch_collectives(pg.comm, 1);
        if (stop_now) {
            // Without a checkpoint a requeued job would start over: that is a failure, not a pause.
            exit_code = r->ckpt.writer ? EXIT_PREEMPTED : 1;
            break;
        }
    }
    signals_watch_collectives(pg.comm, 0);
    finish_step(r, &pending);
    profile_free(&r->profile);
    if (r->ckpt.writer) run_ckpt_close(&r->ckpt, &pg, opt.ckpt.async, run_t0);
    if (opt.save_model && exit_code == 0) {
        fsdp_download_state(&model->fsdp);
        if (llmc_write_model_file(&model->layout, model->fsdp.host_master, &pg, opt.save_model, err, sizeof(err)))
            fatal_agreed(&pg, "--save-model: %s", err);
        if (pg.rank == 0) printf("saved %s\n", opt.save_model);
    }
    size_t rank_params = 0;  // (tensor parallel: this rank's part of the model, what its engine shards)
    for (int u = 0; u < model->layout.n_units; u++) rank_params += model->layout.units[u].numel;
    if (!inference) metrics_summary(mt, &pg, model->dev.memory_in_use_mib ? r->device_used_mib : -1.0, budget.device,
                    rank_params, r->grad_accum);
    metrics_close(mt);
    for (int i = 0; i < 2; i++) {
        model->dev.backend.release_host(model->dev.backend.ctx, r->inputs[i]);
        model->dev.backend.release_host(model->dev.backend.ctx, r->targets[i]);
    }
    model->dev.backend.release_host(model->dev.backend.ctx, r->step_losses);
    if (tokenizer) tokenizer_free(tokenizer);
    run_data_close(&r->data);
    model_free(model);
    free(r);
    run_lock_release(&run_lock);
    process_group_finalize(&pg);
    if (exit_code == EXIT_PREEMPTED && pg.rank == 0) printf("exiting with status %d: resume with --resume auto\n", EXIT_PREEMPTED);
    return exit_code;
}
#endif  // TESTING
