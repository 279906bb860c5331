// The model schedule's activations (train_gpt.cu): for one micro-batch of B x T, one
// allocation carved into named buffers, in the device's activation dtype except the fp32
// statistics and losses. Per-layer buffers are strided by the allocated rows, so a smaller
// forward (sampling with B = 1) uses the same memory.
//
// With tensor parallelism over tp ranks (sequence parallel, Megatron-style) a rank's buffers
// come in two widths. What lies between the blocks - the residual stream, the norms' inputs and
// outputs, their statistics - is split over the group by rows: this rank holds rows
// [tp_rank * N / tp, (tp_rank + 1) * N / tp) of the N = B x T tokens ("local rows"). What lies
// inside a block's column-parallel part - qkv, the attention output, the MLP's hidden layer, the
// logits - holds every token's row but only this rank's features (its heads, its slice of the
// MLP width, its vocabulary range). At tp 1 the two are the same and every buffer is what it
// always was.
#ifndef FSDP_TRAIN_ACTIVATIONS_H
#define FSDP_TRAIN_ACTIVATIONS_H

#include <stddef.h>
#include "kernels/kernels.h"
#include "model/model.h"
#include "train/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// Widths (this rank's, divided by tp): Q = the qkv projection's rows (GPT-2 3C; Llama (NH + 2
// KVH) hs), H = the MLP's first matmul's (GPT-2 4C, the GELU's input; Llama 2F, gate|up), A =
// the MLP's activation, its projection's input (GPT-2 4C; Llama F), CA = the attention output's
// (C). RMSNorm keeps no mean: the mean buffers are LayerNorm's only; with RoPE q and k in qkv
// are kept rotated, what attention reads. Nl below is the local rows (N / tp).
typedef struct {
    void* encoded;                        // [Nl,C]
    void* ln1; float *ln1_mean, *ln1_rstd;// [L,Nl,C], [L,Nl] x2
    void* qkv;                            // [L,N,Q]
    void* atty;                           // [L,N,CA]
    float* att_lse;                       // [L,B,NH/tp,T]
    void* residual2;                      // [L,Nl,C]
    void* ln2; float *ln2_mean, *ln2_rstd;
    void *fch, *fch_gelu;                 // [L,N,H], [L,N,A]
    void* residual3;                      // [L,Nl,C]
    void* lnf; float *lnf_mean, *lnf_rstd;// [Nl,C], [Nl] x2
    void* logits;                         // [N,Vp/tp]; the loss overwrites it with dlogits
    float* losses;                        // [N] (every rank of the group: all of them)
    void* proj_out;                       // [Nl,C] a projection's output before its residual add
    // backward scratch, one layer's worth
    void *dresidual, *dbtc, *dqkv, *dfch; // [Nl,C], [N,C], [N,Q], [N,H]
    void* dact;                           // [N,A] SwiGLU: the gradient w.r.t. its output
    void* gelu_scratch;                   // [N,H] GELU, where the device needs it (else NULL)
    // tensor parallel only (NULL at tp 1): a gathered or partial [N,C] (a norm's output
    // gathered for a column-parallel matmul, a row-parallel matmul's partial sum before its
    // reduce-scatter, the residual stream's gradient gathered), a reduce-scattered input
    // gradient [Nl,C], and the vocabulary-parallel loss's row maxima [N] and sums [N,2].
    void* tp_full;
    void* tp_dln;
    float *ce_max, *ce_sums;
    size_t Q, H, A, CA;                   // the widths, this rank's
    int NH, KVH;                          // this rank's query and kv heads
    size_t V, Vp;                         // this rank's real and padded vocabulary columns
    size_t vocab_begin;                   // its first (the token id of row 0 of its wte part)
    size_t BT, BTl;                       // allocated rows N = B*T, local rows N / tp
    int tp, tp_rank;
    // Layers kept of what a block's backward reads (--recompute; the rest is rebuilt in the
    // backward, into slot 0): matmul and attention outputs, residual2 and the statistics
    // ("kept"), the norm and GELU outputs ("cheap"). residual3, each block's output and the
    // next one's input, is always kept for every layer.
    size_t kept_layers, cheap_layers;
    size_t total_bytes;
} Activations;

// Carves the activations of micro-batches of B x T for model layout m (its tp_size and tp_rank)
// out of mem, or with mem NULL only measures them. Returns the bytes.
size_t carve_activations(Activations* a, const ModelLayout* m, size_t B, size_t T, const Kernels* k,
                         Recompute recompute, void* mem);

// Layer l's slices of the per-layer activations: what its forward saves for its backward.
typedef struct {
    void *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu;
    float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;
} LayerActs;
LayerActs layer_acts(const Activations* a, int l, size_t C, size_t elem);

#ifdef __cplusplus
}
#endif
#endif
