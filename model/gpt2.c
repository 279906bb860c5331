// GPT-2 (OpenAI's, as llm.c trains it): learned positions, pre-LayerNorm blocks with biases,
// a GELU MLP 4C wide, the LM head tied to the token embedding. One table says everything a
// tool needs of its tensors; model/model.h says how the columns are read and how to add a
// family beside this one.
//
// The root unit holds wte [Vp, C] (also the head), wpe [maxT, C] and ln_f; a block holds 12
// tensors. Linear weights are [out, in] (y = x W^T + b); Hugging Face's GPT2Model keeps the
// four Linear weights of a block as Conv1D, [in, out]. llm.c's model file stores the tensors
// grouped by kind across layers, in the order of llmc_kind below.
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

// The columns: role, name, rows, cols, init, decay, init stream, llm.c kind, Hugging Face name,
// its layout, after the blocks in HF's order, tensor-parallel split, segments.
static const TensorSpec gpt2_root[] = {
    {ROOT_WTE, "wte", DIM_VOCAB, DIM_C, INIT_NORMAL, 1, 0, 0, "wte.weight", HF_AS_IS, 0, TP_VOCAB, 0, {}},
    {ROOT_WPE, "wpe", DIM_POSITIONS, DIM_C, INIT_NORMAL, 1, 1, 1, "wpe.weight", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    {ROOT_LNFW, "ln_f.weight", DIM_ONE, DIM_C, INIT_ONES, 0, 14, 14, "ln_f.weight", HF_AS_IS, 1, TP_REPLICATED, 0, {}},
    {ROOT_LNFB, "ln_f.bias", DIM_ONE, DIM_C, INIT_ZEROS, 0, 15, 15, "ln_f.bias", HF_AS_IS, 1, TP_REPLICATED, 0, {}},
};

// c_attn is q|k|v: tensor parallelism splits each third by heads (Hugging Face keeps it whole).
#define QKV_THIRDS 3, {{DIM_C, NULL, HF_ROPE_NONE}, {DIM_C, NULL, HF_ROPE_NONE}, {DIM_C, NULL, HF_ROPE_NONE}}
static const TensorSpec gpt2_block[] = {
    {BLOCK_LN1W, "ln_1.weight", DIM_ONE, DIM_C, INIT_ONES, 0, 2, 2, "ln_1.weight", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    {BLOCK_LN1B, "ln_1.bias", DIM_ONE, DIM_C, INIT_ZEROS, 0, 3, 3, "ln_1.bias", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    {BLOCK_QKVW, "attn.c_attn.weight", DIM_3C, DIM_C, INIT_NORMAL, 1, 4, 4, "attn.c_attn.weight", HF_TRANSPOSED, 0, TP_COLUMN, QKV_THIRDS},
    {BLOCK_QKVB, "attn.c_attn.bias", DIM_ONE, DIM_3C, INIT_ZEROS, 0, 5, 5, "attn.c_attn.bias", HF_AS_IS, 0, TP_COLUMN, QKV_THIRDS},
    {BLOCK_PROJW, "attn.c_proj.weight", DIM_C, DIM_C, INIT_NORMAL_SCALED, 1, 6, 6, "attn.c_proj.weight", HF_TRANSPOSED, 0, TP_ROW, 0, {}},
    {BLOCK_PROJB, "attn.c_proj.bias", DIM_ONE, DIM_C, INIT_ZEROS, 0, 7, 7, "attn.c_proj.bias", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    {BLOCK_LN2W, "ln_2.weight", DIM_ONE, DIM_C, INIT_ONES, 0, 8, 8, "ln_2.weight", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    {BLOCK_LN2B, "ln_2.bias", DIM_ONE, DIM_C, INIT_ZEROS, 0, 9, 9, "ln_2.bias", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    {BLOCK_FCW, "mlp.c_fc.weight", DIM_4C, DIM_C, INIT_NORMAL, 1, 10, 10, "mlp.c_fc.weight", HF_TRANSPOSED, 0, TP_COLUMN, 0, {}},
    {BLOCK_FCB, "mlp.c_fc.bias", DIM_ONE, DIM_4C, INIT_ZEROS, 0, 11, 11, "mlp.c_fc.bias", HF_AS_IS, 0, TP_COLUMN, 0, {}},
    {BLOCK_FCPROJW, "mlp.c_proj.weight", DIM_C, DIM_4C, INIT_NORMAL_SCALED, 1, 12, 12, "mlp.c_proj.weight", HF_TRANSPOSED, 0, TP_ROW, 0, {}},
    {BLOCK_FCPROJB, "mlp.c_proj.bias", DIM_ONE, DIM_C, INIT_ZEROS, 0, 13, 13, "mlp.c_proj.bias", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
};
#undef QKV_THIRDS

// llm.c's naming: dN has N layers, 64*N channels and N heads, except GPT-2's released
// d24/d36/d48 (350M/774M/1558M) widths; GPT-2's vocabulary and 1024 positions.
static int gpt2_preset(const char* name, ModelConfig* c) {
    if (name[0] != 'd' || !isdigit((unsigned char)name[1])) return 0;
    char* end;
    long depth = strtol(name + 1, &end, 10);
    if (*end != '\0' || depth < 1 || depth > 48) return 0;
    memset(c, 0, sizeof(*c));
    c->arch = ARCH_GPT2;
    c->vocab_size = GPT2_VOCAB;
    c->padded_vocab_size = pad_vocab(GPT2_VOCAB);
    c->max_seq_len = 1024;
    c->num_layers = (int)depth;
    c->num_heads = (int)depth;
    c->channels = (int)depth * 64;
    // GPT-2's released sizes keep 64-wide heads with fewer heads than layers.
    if (depth == 24) { c->channels = 1024; c->num_heads = 16; }
    if (depth == 36) { c->channels = 1280; c->num_heads = 20; }
    if (depth == 48) { c->channels = 1600; c->num_heads = 25; }
    return 1;
}

static void gpt2_describe(const ModelConfig* c, int terse, char* out, size_t n) {
    if (terse)
        snprintf(out, n, "L=%d NH=%d C=%d maxT=%d V=%d Vp=%d", c->num_layers, c->num_heads, c->channels, c->max_seq_len,
                 c->vocab_size, c->padded_vocab_size);
    else
        snprintf(out, n, "GPT-2, %d layers, %d heads, %d channels", c->num_layers, c->num_heads, c->channels);
}

const ModelFamily gpt2_family = {
    .name = "gpt2",
    .title = "GPT-2",
    .root = gpt2_root,
    .n_root = sizeof(gpt2_root) / sizeof(gpt2_root[0]),
    .block = gpt2_block,
    .n_block = sizeof(gpt2_block) / sizeof(gpt2_block[0]),
    .block_prefix = "h",
    .hf_block_prefix = "h",
    .norm = NORM_LAYERNORM,
    .mlp = MLP_GELU,
    .rope = 0,
    .preset = gpt2_preset,
    .default_preset = "d12",
    .check = NULL,
    .config_keys = NULL,
    .n_config_keys = 0,
    .config_key_applies = NULL,
    .describe = gpt2_describe,
};
