// Llama 3 (Meta's, in torchtitan's layout): pre-norm blocks with RMSNorm, rotary positions,
// grouped-query attention, a SwiGLU MLP, no biases, an untied output head. One table says
// everything a tool needs of its tensors; model/model.h says how the columns are read and how
// to add a family beside this one.
//
// The root unit holds tok_embeddings [Vp, C], norm [C] and output [Vp, C]; a block holds 6
// tensors (Meta's / torchtitan's names): attention_norm, attention.wqkv [(NH + 2 KVH) hs, C]
// (q, k and v stacked: one matmul), attention.wo, ffn_norm, feed_forward.w13 [2F, C] (w1, the
// gate, stacked over w3, the up projection) and feed_forward.w2 [C, F]. q and k rotate pairs
// (2i, 2i+1) of each head (Meta's convention); Hugging Face's LlamaForCausalLM stores q/k/v and
// gate/up as separate tensors and permutes q's and k's rows within each head for its
// rotate_half (model/hf.c applies the permutation both ways).
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

// The columns: role, name, rows, cols, init, decay, init stream, llm.c kind, Hugging Face name,
// its layout, after the blocks in HF's order, tensor-parallel split, segments.
static const TensorSpec llama3_root[] = {
    {ROOT_WTE, "tok_embeddings.weight", DIM_VOCAB, DIM_C, INIT_NORMAL, 1, 16, -1, "model.embed_tokens.weight", HF_AS_IS, 0, TP_VOCAB, 0, {}},
    {ROOT_LNFW, "norm.weight", DIM_ONE, DIM_C, INIT_ONES, 0, 17, -1, "model.norm.weight", HF_AS_IS, 1, TP_REPLICATED, 0, {}},
    {ROOT_HEAD, "output.weight", DIM_VOCAB, DIM_C, INIT_NORMAL, 1, 18, -1, "lm_head.weight", HF_AS_IS, 1, TP_VOCAB, 0, {}},
};

static const TensorSpec llama3_block[] = {
    {BLOCK_LN1W, "attention_norm.weight", DIM_ONE, DIM_C, INIT_ONES, 0, 19, -1, "input_layernorm.weight", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    // q|k|v: tensor parallelism keeps each kv head with its query group by splitting each part.
    {BLOCK_QKVW, "attention.wqkv.weight", DIM_QKV, DIM_C, INIT_NORMAL, 1, 20, -1, NULL, HF_AS_IS, 0, TP_COLUMN, 3,
     {{DIM_C, "self_attn.q_proj.weight", HF_ROPE_Q_HEADS},
      {DIM_KV, "self_attn.k_proj.weight", HF_ROPE_KV_HEADS},
      {DIM_KV, "self_attn.v_proj.weight", HF_ROPE_NONE}}},
    {BLOCK_PROJW, "attention.wo.weight", DIM_C, DIM_C, INIT_NORMAL_SCALED, 1, 21, -1, "self_attn.o_proj.weight", HF_AS_IS, 0, TP_ROW, 0, {}},
    {BLOCK_LN2W, "ffn_norm.weight", DIM_ONE, DIM_C, INIT_ONES, 0, 22, -1, "post_attention_layernorm.weight", HF_AS_IS, 0, TP_REPLICATED, 0, {}},
    // w1|w3 (gate|up): split each half, so a rank's gate rows meet their up rows.
    {BLOCK_FCW, "feed_forward.w13.weight", DIM_2FFN, DIM_C, INIT_NORMAL, 1, 23, -1, NULL, HF_AS_IS, 0, TP_COLUMN, 2,
     {{DIM_FFN, "mlp.gate_proj.weight", HF_ROPE_NONE},
      {DIM_FFN, "mlp.up_proj.weight", HF_ROPE_NONE}}},
    {BLOCK_FCPROJW, "feed_forward.w2.weight", DIM_C, DIM_FFN, INIT_NORMAL_SCALED, 1, 24, -1, "mlp.down_proj.weight", HF_AS_IS, 0, TP_ROW, 0, {}},
};

// Llama 3's shapes (Meta's params.json): layers, channels, heads, kv heads, F, and the RoPE
// scaling factor of the released checkpoints (3.2: 32, 3.1: 8).
static const struct { const char* name; int layers, channels, heads, kv_heads, ffn; float factor; } llama3_presets[] = {
    {"llama3:tiny", 4, 256, 4, 2, 768, 0.0f},
    {"llama3:1b", 16, 2048, 32, 8, 8192, 32.0f},
    {"llama3:3b", 28, 3072, 24, 8, 8192, 32.0f},
    {"llama3:8b", 32, 4096, 32, 8, 14336, 8.0f},
};

// A preset sets the vocabulary (128256; tiny: GPT-2's, so that our token shards train it) and
// the longest sequence too.
static int llama3_preset(const char* name, ModelConfig* c) {
    for (size_t i = 0; i < sizeof(llama3_presets) / sizeof(llama3_presets[0]); i++) {
        if (strcmp(name, llama3_presets[i].name) != 0) continue;
        memset(c, 0, sizeof(*c));
        c->arch = ARCH_LLAMA3;
        c->num_layers = llama3_presets[i].layers;
        c->channels = llama3_presets[i].channels;
        c->num_heads = llama3_presets[i].heads;
        c->num_kv_heads = llama3_presets[i].kv_heads;
        c->ffn_dim = llama3_presets[i].ffn;
        c->rope_theta = 500000.0f;
        c->rope_factor = llama3_presets[i].factor;
        c->rope_low_freq_factor = 1.0f;
        c->rope_high_freq_factor = 4.0f;
        c->rope_original_max_pos = 8192;
        const int tiny = i == 0;
        c->vocab_size = tiny ? GPT2_VOCAB : LLAMA3_VOCAB;
        c->padded_vocab_size = pad_vocab(c->vocab_size);
        c->max_seq_len = tiny ? 1024 : 8192;
        return 1;
    }
    return 0;
}

static const char* llama3_check(const ModelConfig* c) {
    if (c->num_kv_heads < 1 || c->num_kv_heads > c->num_heads || c->num_heads % c->num_kv_heads != 0)
        return "num_kv_heads does not divide num_heads";
    if ((c->channels / c->num_heads) % 2 != 0) return "the head size (channels / num_heads) is odd: RoPE rotates pairs";
    if (c->ffn_dim < 1 || c->ffn_dim > LLAMA_MAX_FFN) return "ffn_dim is not in [1, 2^20]";
    // (Comparisons written so that a NaN fails them.)
    if (!(c->rope_theta > 1.0f && c->rope_theta < 1e30f)) return "rope_theta is not a finite number > 1";
    if (!(c->rope_factor >= 0.0f && c->rope_factor < 1e6f)) return "rope_factor is not in [0, 1e6)";
    if (c->rope_factor > 1.0f &&
        !(c->rope_low_freq_factor > 0.0f && c->rope_high_freq_factor > c->rope_low_freq_factor &&
          c->rope_high_freq_factor < 1e6f && c->rope_original_max_pos >= 1))
        return "RoPE scaling needs 0 < low_freq_factor < high_freq_factor and original_max_pos >= 1";
    return NULL;
}

// The manifest's keys beyond the common six: whole numbers, then the RoPE floats (written
// exactly: a float is a double exactly).
static const ConfigKey llama3_config_keys[] = {
    {"num_kv_heads", offsetof(ModelConfig, num_kv_heads), 0},
    {"ffn_dim", offsetof(ModelConfig, ffn_dim), 0},
    {"rope_original_max_pos", offsetof(ModelConfig, rope_original_max_pos), 0},
    {"rope_theta", offsetof(ModelConfig, rope_theta), 1},
    {"rope_factor", offsetof(ModelConfig, rope_factor), 1},
    {"rope_low_freq_factor", offsetof(ModelConfig, rope_low_freq_factor), 1},
    {"rope_high_freq_factor", offsetof(ModelConfig, rope_high_freq_factor), 1},
};

// Without RoPE scaling (factor <= 1 in both) the scaling's other parameters mean nothing: a
// resume does not compare them.
static int llama3_config_key_applies(const ModelConfig* saved, const ModelConfig* run, const ConfigKey* k) {
    const int scaled = saved->rope_factor > 1.0f || run->rope_factor > 1.0f;
    const int scaling_key = k->offset == offsetof(ModelConfig, rope_original_max_pos) ||
                            k->offset == offsetof(ModelConfig, rope_factor) ||
                            k->offset == offsetof(ModelConfig, rope_low_freq_factor) ||
                            k->offset == offsetof(ModelConfig, rope_high_freq_factor);
    return scaled || !scaling_key;
}

static void llama3_describe(const ModelConfig* c, int terse, char* out, size_t n) {
    if (terse) {
        snprintf(out, n, "L=%d NH=%d KVH=%d C=%d F=%d maxT=%d V=%d Vp=%d", c->num_layers, c->num_heads, c->num_kv_heads,
                 c->channels, c->ffn_dim, c->max_seq_len, c->vocab_size, c->padded_vocab_size);
        return;
    }
    int at = snprintf(out, n, "Llama 3, %d layers, %d heads (%d kv heads), %d channels, SwiGLU %d, RoPE theta %g",
                      c->num_layers, c->num_heads, c->num_kv_heads, c->channels, c->ffn_dim, (double)c->rope_theta);
    if (c->rope_factor > 1.0f && at > 0 && (size_t)at < n) snprintf(out + at, n - (size_t)at, " scaled x%g", (double)c->rope_factor);
}

const ModelFamily llama3_family = {
    .name = "llama3",
    .title = "Llama 3",
    .root = llama3_root,
    .n_root = sizeof(llama3_root) / sizeof(llama3_root[0]),
    .block = llama3_block,
    .n_block = sizeof(llama3_block) / sizeof(llama3_block[0]),
    .block_prefix = "layers",
    .hf_block_prefix = "model.layers",
    .norm = NORM_RMSNORM,
    .mlp = MLP_SWIGLU,
    .rope = 1,
    .preset = llama3_preset,
    .default_preset = "llama3:tiny",
    .check = llama3_check,
    .config_keys = llama3_config_keys,
    .n_config_keys = sizeof(llama3_config_keys) / sizeof(llama3_config_keys[0]),
    .config_key_applies = llama3_config_key_applies,
    .describe = llama3_describe,
};
