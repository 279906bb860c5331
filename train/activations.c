// train/: what the training program is made of besides its story (train/device.cuh opens with the
// list). This file: the model schedule's activations, carved for a micro-batch (activations.h).
#include "train/activations.h"

// Reserves n elements of elem bytes at *off (256-byte aligned: cuBLASLt's fast paths and the
// 128-bit kernels want it); a pointer into base, or NULL when only measuring (base NULL).
static void* carve(char* base, size_t* off, size_t n, size_t elem) {
    void* p = base && n ? base + *off : NULL;
    *off += (n * elem + 255) / 256 * 256;
    return p;
}

size_t carve_activations(Activations* a, const ModelLayout* m, size_t B, size_t T, const Kernels* k,
                         Recompute recompute, void* mem) {
    const ModelConfig* c = &m->config;
    const ModelFamily* fam = m->family;
    const size_t tp = m->tp_size > 1 ? (size_t)m->tp_size : 1;
    size_t BT = B * T, BTl = BT / tp, C = (size_t)c->channels, L = (size_t)c->num_layers, NH = (size_t)c->num_heads / tp;
    size_t Vp = (size_t)c->padded_vocab_size / tp, e = k->act_bytes, f = sizeof(float), off = 0;
    size_t Lk = recompute == RECOMPUTE_FULL ? 1 : L, Lc = recompute == RECOMPUTE_NONE ? L : 1;
    size_t Q, H, A, cols;
    spec_shape(c, family_block_role(fam, BLOCK_QKVW), &Q, &cols);
    spec_shape(c, family_block_role(fam, BLOCK_FCW), &H, &cols);
    spec_shape(c, family_block_role(fam, BLOCK_FCPROJW), &cols, &A);
    Q /= tp; H /= tp; A /= tp;
    const size_t CA = C / tp;
    const int swiglu = fam->mlp == MLP_SWIGLU;
    const size_t M = fam->norm == NORM_LAYERNORM;  // LayerNorm's means kept (RMSNorm has none)
    const size_t TPB = tp > 1;                     // the tensor-parallel buffers
    char* base = (char*)mem;
    a->Q = Q; a->H = H; a->A = A; a->CA = CA;
    a->NH = (int)NH;
    a->KVH = (int)((Q - CA) / 2 / (C / (size_t)c->num_heads));  // k and v hold the rest of qkv's rows, half each
    a->tp = (int)tp;
    a->tp_rank = m->tp_size > 1 ? m->tp_rank : 0;
    a->Vp = Vp;
    a->vocab_begin = (size_t)a->tp_rank * Vp;
    a->V = (size_t)c->vocab_size > a->vocab_begin ? (size_t)c->vocab_size - a->vocab_begin : 0;
    if (a->V > Vp) a->V = Vp;
    a->encoded = carve(base, &off, BTl * C, e);
    a->ln1 = carve(base, &off, Lc * BTl * C, e);
    a->ln1_mean = (float*)carve(base, &off, M * Lk * BTl, f);
    a->ln1_rstd = (float*)carve(base, &off, Lk * BTl, f);
    a->qkv = carve(base, &off, Lk * BT * Q, e);
    a->atty = carve(base, &off, Lk * BT * CA, e);
    a->att_lse = (float*)carve(base, &off, Lk * B * NH * T, f);
    a->residual2 = carve(base, &off, Lk * BTl * C, e);
    a->ln2 = carve(base, &off, Lc * BTl * C, e);
    a->ln2_mean = (float*)carve(base, &off, M * Lk * BTl, f);
    a->ln2_rstd = (float*)carve(base, &off, Lk * BTl, f);
    a->fch = carve(base, &off, Lk * BT * H, e);
    a->fch_gelu = carve(base, &off, Lc * BT * A, e);
    a->residual3 = carve(base, &off, L * BTl * C, e);
    a->kept_layers = Lk;
    a->cheap_layers = Lc;
    a->lnf = carve(base, &off, BTl * C, e);
    a->lnf_mean = (float*)carve(base, &off, M * BTl, f);
    a->lnf_rstd = (float*)carve(base, &off, BTl, f);
    a->logits = carve(base, &off, BT * Vp, e);
    a->losses = (float*)carve(base, &off, BT, f);
    a->proj_out = carve(base, &off, BTl * C, e);
    a->dresidual = carve(base, &off, BTl * C, e);
    a->dbtc = carve(base, &off, BT * C, e);
    a->dqkv = carve(base, &off, BT * Q, e);
    a->dfch = carve(base, &off, BT * H, e);
    a->dact = carve(base, &off, swiglu ? BT * A : 0, e);
    a->gelu_scratch = carve(base, &off, k->gelu_needs_scratch && !swiglu ? BT * H : 0, e);
    a->tp_full = carve(base, &off, TPB * BT * C, e);
    a->tp_dln = carve(base, &off, TPB * BTl * C, e);
    a->ce_max = (float*)carve(base, &off, TPB * BT, f);
    a->ce_sums = (float*)carve(base, &off, TPB * 2 * BT, f);
    a->BT = BT;
    a->BTl = BTl;
    a->total_bytes = off;
    return off;
}

LayerActs layer_acts(const Activations* a, int l, size_t C, size_t e) {
    // Layer l's first row in each group (slot 0 where the group is recomputed): local rows for
    // what lies between the blocks, every row for what lies inside one.
    const size_t kl = a->kept_layers > 1 ? (size_t)l : 0, cl = a->cheap_layers > 1 ? (size_t)l : 0;
    const size_t at = kl * a->BT, atl = kl * a->BTl, catl = cl * a->BTl, cat = cl * a->BT;
    LayerActs x;
    x.ln1 = (char*)a->ln1 + catl * C * e;
    x.ln1_mean = a->ln1_mean ? a->ln1_mean + atl : NULL;
    x.ln1_rstd = a->ln1_rstd + atl;
    x.qkv = (char*)a->qkv + at * a->Q * e;
    x.atty = (char*)a->atty + at * a->CA * e;
    x.lse = a->att_lse + at * (size_t)a->NH;
    x.residual2 = (char*)a->residual2 + atl * C * e;
    x.ln2 = (char*)a->ln2 + catl * C * e;
    x.ln2_mean = a->ln2_mean ? a->ln2_mean + atl : NULL;
    x.ln2_rstd = a->ln2_rstd + atl;
    x.fch = (char*)a->fch + at * a->H * e;
    x.fch_gelu = (char*)a->fch_gelu + cat * a->A * e;
    return x;
}
