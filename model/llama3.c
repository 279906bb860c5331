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
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint/checkpoint.h"
#include "model/hf.h"
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
        c->norm_eps = MODEL_DEFAULT_NORM_EPS;   // Meta's norm_eps
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

// The manifest's keys beyond the common six: whole numbers, then the floats (written exactly: a
// float is a double exactly). norm_eps came later: a manifest without it is 1e-5.
static const ConfigKey llama3_config_keys[] = {
    {"num_kv_heads", offsetof(ModelConfig, num_kv_heads), 0, 0.0f},
    {"ffn_dim", offsetof(ModelConfig, ffn_dim), 0, 0.0f},
    {"rope_original_max_pos", offsetof(ModelConfig, rope_original_max_pos), 0, 0.0f},
    {"rope_theta", offsetof(ModelConfig, rope_theta), 1, 0.0f},
    {"rope_factor", offsetof(ModelConfig, rope_factor), 1, 0.0f},
    {"rope_low_freq_factor", offsetof(ModelConfig, rope_low_freq_factor), 1, 0.0f},
    {"rope_high_freq_factor", offsetof(ModelConfig, rope_high_freq_factor), 1, 0.0f},
    {"norm_eps", offsetof(ModelConfig, norm_eps), 1, MODEL_DEFAULT_NORM_EPS},
};

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

// ---- Hugging Face (model/hf.h): LlamaForCausalLM's names, q/k/v and gate/up segments and the
// rotate_half permutation are the table's hf_* columns; what no tensor says (the head counts,
// RoPE, the norm's epsilon, a tied head) is in the config.json beside the file, required.

static const char* const llama3_hf_markers[] = {"model.embed_tokens.", "model.layers.", "model.norm.", NULL};

// Older transformers saved each layer's RoPE frequencies as a buffer.
static int llama3_hf_ignorable(const char* key) {
    const size_t n = strlen(key), m = strlen(".rotary_emb.inv_freq");
    return n > m && !strcmp(key + n - m, ".rotary_emb.inv_freq");
}

// obj[key] of config.json (`what` names it in messages, "rope_scaling.factor"). Each returns 1
// when it is there and good, 0 when it is missing (or null) and not required, -1 with a message
// otherwise. A whole number in [lo, hi]:
static int cfg_uint(const HfImport* im, const cJSON* obj, const char* key, const char* what, int required, uint64_t lo,
                    uint64_t hi, uint64_t* out, char* err, size_t errlen) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (!required) return 0;
        snprintf(err, errlen, "%s: %s is missing (a Llama import needs it: it is not in the tensors)", im->config_path, what);
        return -1;
    }
    if (!ckpt_json_uint(v, (double)hi, out) || *out < lo) {
        snprintf(err, errlen, "%s: %s is not a whole number in [%" PRIu64 ", %" PRIu64 "]", im->config_path, what, lo, hi);
        return -1;
    }
    return 1;
}

// A finite number:
static int cfg_number(const HfImport* im, const cJSON* obj, const char* key, const char* what, int required, double* out,
                      char* err, size_t errlen) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (!required) return 0;
        snprintf(err, errlen, "%s: %s is missing (a Llama import needs it: it is not in the tensors)", im->config_path, what);
        return -1;
    }
    if (!cJSON_IsNumber(v)) { snprintf(err, errlen, "%s: %s is not a number", im->config_path, what); return -1; }
    // (cJSON reads 1e999 as infinity; a comparison that NaN fails too)
    if (!(v->valuedouble > -1e300 && v->valuedouble < 1e300)) {
        snprintf(err, errlen, "%s: %s = %g is not a finite number", im->config_path, what, v->valuedouble);
        return -1;
    }
    *out = v->valuedouble;
    return 1;
}

// An optional boolean (absent or null: `dflt`): its value, or -1 with a message.
static int cfg_bool(const HfImport* im, const char* key, int dflt, char* err, size_t errlen) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(im->config_json, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) { snprintf(err, errlen, "%s: %s is not true or false", im->config_path, key); return -1; }
    return cJSON_IsTrue(v);
}

// An optional whole number that the tensors also give (`from` says which): refused when it differs.
static int cfg_matches(const HfImport* im, const char* key, int have, const char* from, char* err, size_t errlen) {
    uint64_t x;
    const int got = cfg_uint(im, im->config_json, key, key, 0, 0, (uint64_t)1 << 31, &x, err, errlen);
    if (got < 0) return 1;
    if (got && x != (uint64_t)have) {
        snprintf(err, errlen, "%s: %s = %" PRIu64 ", but the safetensors file has %d (%s)", im->config_path, key, x, have, from);
        return 1;
    }
    return 0;
}

// The model's RoPE: rope_theta, and rope_scaling (required: null for plain RoPE, or Llama 3.1's
// {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}, which kernels/rope.h implements).
static int llama3_hf_rope(const HfImport* im, ModelConfig* c, char* err, size_t errlen) {
    const cJSON* j = im->config_json;
    const char* path = im->config_path;
    double theta;
    if (cfg_number(im, j, "rope_theta", "rope_theta", 1, &theta, err, errlen) < 0) return 1;
    if (!(theta > 1.0 && theta < 1e30)) {
        snprintf(err, errlen, "%s: rope_theta = %g is not a number > 1 (RoPE's base)", path, theta);
        return 1;
    }
    c->rope_theta = (float)theta;
    // Plain RoPE keeps the scaling fields of Llama 3's presets (train_gpt's): a resume compares
    // every RoPE field of the checkpoint with its own, used or not.
    c->rope_factor = 0.0f;
    c->rope_low_freq_factor = 1.0f;
    c->rope_high_freq_factor = 4.0f;
    c->rope_original_max_pos = 8192;
    const cJSON* rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!rs) {
        snprintf(err, errlen, "%s: rope_scaling is missing (null for plain RoPE, or {\"rope_type\": \"llama3\", ...}): a Llama "
                 "import needs it", path);
        return 1;
    }
    if (cJSON_IsNull(rs)) return 0;
    if (!cJSON_IsObject(rs)) { snprintf(err, errlen, "%s: rope_scaling is neither null nor an object", path); return 1; }
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");   // (older transformers' key)
    if (!cJSON_IsString(type)) { snprintf(err, errlen, "%s: rope_scaling has no rope_type string", path); return 1; }
    if (!strcmp(type->valuestring, "default")) return 0;
    if (strcmp(type->valuestring, "llama3") != 0) {
        snprintf(err, errlen, "%s: rope_scaling.rope_type \"%s\" is not supported (fsdp.c's RoPE has Llama 3.1's \"llama3\" "
                 "scaling only)", path, type->valuestring);
        return 1;
    }
    double factor, low, high;
    uint64_t orig;
    if (cfg_number(im, rs, "factor", "rope_scaling.factor", 1, &factor, err, errlen) < 0 ||
        cfg_number(im, rs, "low_freq_factor", "rope_scaling.low_freq_factor", 1, &low, err, errlen) < 0 ||
        cfg_number(im, rs, "high_freq_factor", "rope_scaling.high_freq_factor", 1, &high, err, errlen) < 0 ||
        cfg_uint(im, rs, "original_max_position_embeddings", "rope_scaling.original_max_position_embeddings", 1, 1, INT32_MAX,
                 &orig, err, errlen) < 0)
        return 1;
    // (factor 1 is plain RoPE in both conventions; below 1 Hugging Face would divide by it)
    if (!(factor >= 1.0 && factor < 1e6)) {
        snprintf(err, errlen, "%s: rope_scaling.factor = %g is not in [1, 1e6)", path, factor);
        return 1;
    }
    if (!(low > 0.0 && high > low && high < 1e6)) {
        snprintf(err, errlen, "%s: rope_scaling needs 0 < low_freq_factor < high_freq_factor (< 1e6): low %g, high %g", path,
                 low, high);
        return 1;
    }
    c->rope_factor = (float)factor;
    c->rope_low_freq_factor = (float)low;
    c->rope_high_freq_factor = (float)high;
    c->rope_original_max_pos = (int)orig;
    return 0;
}

// What config.json says that the tensors cannot, refused where fsdp.c's Llama differs: the MLP's
// activation, biases; the head counts, positions, RoPE, the norm's epsilon and a tied head.
static int llama3_hf_settings(HfImport* im, ModelConfig* c, uint64_t* nh, uint64_t* kvh, char* err, size_t errlen) {
    const cJSON* j = im->config_json;
    const char* cfg_path = im->config_path;
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama") != 0)) {
        snprintf(err, errlen, "%s: model_type is %s, not llama", cfg_path, cJSON_IsString(mt) ? mt->valuestring : "not a string");
        return 1;
    }
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0)) {
        snprintf(err, errlen, "%s: hidden_act is %s: fsdp.c's Llama MLP is SwiGLU (silu)", cfg_path,
                 cJSON_IsString(act) ? act->valuestring : "not a string");
        return 1;
    }
    const int attention_bias = cfg_bool(im, "attention_bias", 0, err, errlen);
    const int mlp_bias = attention_bias ? attention_bias : cfg_bool(im, "mlp_bias", 0, err, errlen);
    if (attention_bias < 0 || mlp_bias < 0) return 1;
    if (attention_bias || mlp_bias) {
        snprintf(err, errlen, "%s: attention_bias or mlp_bias is true: fsdp.c's Llama has no biases", cfg_path);
        return 1;
    }
    // rms_norm_eps: missing, transformers' LlamaConfig default (1e-6; Meta's Llama 3 uses 1e-5).
    double eps = 1e-6;
    if (cfg_number(im, j, "rms_norm_eps", "rms_norm_eps", 0, &eps, err, errlen) < 0) return 1;
    if (!(eps >= MODEL_MIN_NORM_EPS && eps <= MODEL_MAX_NORM_EPS)) {
        snprintf(err, errlen, "%s: rms_norm_eps = %g is not in [1e-30, 1]", cfg_path, eps);
        return 1;
    }
    im->tie = cfg_bool(im, "tie_word_embeddings", 0, err, errlen);
    uint64_t max_pos;
    if (im->tie < 0 || cfg_uint(im, j, "num_attention_heads", "num_attention_heads", 1, 1, 1 << 16, nh, err, errlen) < 0 ||
        cfg_uint(im, j, "num_key_value_heads", "num_key_value_heads", 1, 1, 1 << 16, kvh, err, errlen) < 0 ||
        cfg_uint(im, j, "max_position_embeddings", "max_position_embeddings", 1, 1, MODEL_MAX_SEQ, &max_pos, err, errlen) < 0)
        return 1;
    memset(c, 0, sizeof(*c));
    c->arch = ARCH_LLAMA3;
    c->max_seq_len = (int)max_pos;
    c->norm_eps = (float)eps;
    return llama3_hf_rope(im, c, err, errlen);
}

// The config: config.json first (required), then the shape the tensors give (V and C from the
// embedding, F from layer 0's gate, L from the layers' names), cross-checked with config.json's
// copies of them.
static int llama3_hf_config(HfImport* im, ModelConfig* c, char* err, size_t errlen) {
    const ModelFamily* f = im->family;
    const char* path = im->set.path;
    if (hf_read_config_json(im, err, errlen)) return 1;
    const char* cfg_path = im->config_path;
    if (!im->config_json) {
        snprintf(err, errlen, "%s: a Hugging Face Llama file needs the config.json beside it (%s: not found): its head counts "
                 "and RoPE are not in the tensors", path, cfg_path);
        return 1;
    }
    uint64_t nh, kvh;
    if (llama3_hf_settings(im, c, &nh, &kvh, err, errlen)) return 1;

    const char* emb_name = family_root_role(f, ROOT_WTE)->hf_name;
    StTensor emb, gate;
    int found;
    if (hf_get(im, emb_name, &emb, &found, err, errlen)) return 1;
    if (!found) {
        snprintf(err, errlen, "%s: tensor %s is missing%s", path, emb_name,
                 im->tie ? " (with tie_word_embeddings true it is the output head too)" : "");
        return 1;
    }
    if (emb.ndim != 2) {
        snprintf(err, errlen, "%s: tensor %s has %d dimension(s), expected 2 ([vocab, hidden])", path, emb_name, emb.ndim);
        return 1;
    }
    if (emb.shape[0] < 1 || emb.shape[0] > MODEL_MAX_VOCAB || emb.shape[1] < 1 || emb.shape[1] > MODEL_MAX_CHANNELS) {
        snprintf(err, errlen, "%s: tensor %s is [%" PRIu64 ", %" PRIu64 "]: not a plausible [vocab, hidden] (at most [2^26, "
                 "65536])", path, emb_name, emb.shape[0], emb.shape[1]);
        return 1;
    }
    const int layers = hf_layers(im);
    if (!layers) { snprintf(err, errlen, "%s: no decoder layers (%s.N.*) found", path, f->hf_block_prefix); return 1; }
    char gate_name[128];
    spec_hf_name(f, family_block_role(f, BLOCK_FCW), 0, 1, 0, gate_name, sizeof(gate_name));
    if (hf_get(im, gate_name, &gate, &found, err, errlen)) return 1;
    if (!found) { snprintf(err, errlen, "%s: tensor %s is missing", path, gate_name); return 1; }
    if (gate.ndim != 2 || gate.shape[0] < 1 || gate.shape[0] > LLAMA_MAX_FFN || gate.shape[1] != emb.shape[1]) {
        snprintf(err, errlen, "%s: tensor %s is not [F, %" PRIu64 "] with F in [1, 2^20]", path, gate_name, emb.shape[1]);
        return 1;
    }
    c->vocab_size = (int)emb.shape[0];
    c->padded_vocab_size = pad_vocab(c->vocab_size);
    c->channels = (int)emb.shape[1];
    c->ffn_dim = (int)gate.shape[0];
    c->num_layers = layers;
    char emb_cols[160], emb_rows[160], gate_rows[160], all_layers[160];
    snprintf(emb_cols, sizeof(emb_cols), "%s's columns", emb_name);
    snprintf(emb_rows, sizeof(emb_rows), "%s's rows", emb_name);
    snprintf(gate_rows, sizeof(gate_rows), "%s's rows", gate_name);
    snprintf(all_layers, sizeof(all_layers), "the %s.N tensors", f->hf_block_prefix);
    if (cfg_matches(im, "hidden_size", c->channels, emb_cols, err, errlen) ||
        cfg_matches(im, "vocab_size", c->vocab_size, emb_rows, err, errlen) ||
        cfg_matches(im, "intermediate_size", c->ffn_dim, gate_rows, err, errlen) ||
        cfg_matches(im, "num_hidden_layers", c->num_layers, all_layers, err, errlen))
        return 1;
    // The head counts, which only config.json gives.
    if ((uint64_t)c->channels % nh != 0) {
        snprintf(err, errlen, "%s: num_attention_heads %" PRIu64 " does not divide hidden_size %d", cfg_path, nh, c->channels);
        return 1;
    }
    if (kvh > nh || nh % kvh != 0) {
        snprintf(err, errlen, "%s: num_key_value_heads %" PRIu64 " does not divide num_attention_heads %" PRIu64, cfg_path, kvh, nh);
        return 1;
    }
    c->num_heads = (int)nh;
    c->num_kv_heads = (int)kvh;
    if (cfg_matches(im, "head_dim", c->channels / c->num_heads, "hidden_size / num_attention_heads", err, errlen)) return 1;
    if (im->heads && im->heads != c->num_heads) {
        snprintf(err, errlen, "%s: --heads %d disagrees with %s's num_attention_heads %d", path, im->heads, cfg_path, c->num_heads);
        return 1;
    }
    const char* bad = model_config_check(c);
    if (bad) { snprintf(err, errlen, "%s: inconsistent model (%s; from the tensors and %s)", path, bad, cfg_path); return 1; }

    // Llama 3.2 1B/3B ship tied, without lm_head.weight: the head starts as the embedding.
    const char* head_name = family_root_role(f, ROOT_HEAD)->hf_name;
    im->head_from_embedding = im->tie && !hf_has(im, head_name);
    if (im->set.map) snprintf(im->what, sizeof(im->what), "safetensors in %d shards (Hugging Face Llama)", im->set.n_files);
    else snprintf(im->what, sizeof(im->what), "safetensors (Hugging Face Llama)");
    char rope[256];
    model_rope_text(c, rope, sizeof(rope));
    snprintf(im->from, sizeof(im->from), ", RoPE %s (heads, positions and RoPE from %s)", rope, cfg_path);
    if (im->head_from_embedding)
        snprintf(im->note, sizeof(im->note), "note: no %s and tie_word_embeddings: true: the output head starts as a copy of %s "
                 "(fsdp.c's Llama trains it untied)", head_name, emb_name);
    return 0;
}

// config.json's essentials as metadata strings.
static void llama3_hf_metadata(const ModelConfig* c, cJSON* meta) {
    cJSON_AddStringToObject(meta, "model_type", "llama");
    hf_meta_int(meta, "num_hidden_layers", c->num_layers);
    hf_meta_int(meta, "num_attention_heads", c->num_heads);
    hf_meta_int(meta, "num_key_value_heads", c->num_kv_heads);
    hf_meta_int(meta, "hidden_size", c->channels);
    hf_meta_int(meta, "intermediate_size", c->ffn_dim);
    hf_meta_int(meta, "max_position_embeddings", c->max_seq_len);
    hf_meta_int(meta, "vocab_size", c->vocab_size);
    hf_meta_int(meta, "padded_vocab_size", c->padded_vocab_size);
    hf_meta_float(meta, "rope_theta", c->rope_theta);
    if (c->rope_factor > 1.0f) {
        cJSON_AddStringToObject(meta, "rope_type", "llama3");
        hf_meta_float(meta, "rope_factor", c->rope_factor);
        hf_meta_float(meta, "rope_low_freq_factor", c->rope_low_freq_factor);
        hf_meta_float(meta, "rope_high_freq_factor", c->rope_high_freq_factor);
        hf_meta_int(meta, "rope_original_max_position_embeddings", c->rope_original_max_pos);
    }
    hf_meta_float(meta, "rms_norm_eps", c->norm_eps);
}

// The bos and eos tokens of the two vocabularies fsdp.c knows (Llama 3's, GPT-2's), for the
// config.json; 0 for another vocabulary (then config.json names none).
static int known_vocab_tokens(int V, int* bos, int* eos) {
    if (V == LLAMA3_VOCAB) { *bos = 128000; *eos = 128001; return 1; }   // <|begin_of_text|>, <|end_of_text|>
    if (V == GPT2_VOCAB) { *bos = GPT2_EOT; *eos = GPT2_EOT; return 1; }  // <|endoftext|>
    return 0;
}

// The keys transformers' save_pretrained writes for a LlamaForCausalLM of this shape (what the
// import reads back).
static cJSON* llama3_hf_config_json(const ModelConfig* c) {
    cJSON* j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddFalseToObject(j, "attention_bias");
    hf_json_float(j, "attention_dropout", 0.0f);
    int bos, eos;
    if (known_vocab_tokens(c->vocab_size, &bos, &eos)) {
        cJSON_AddNumberToObject(j, "bos_token_id", bos);
        cJSON_AddNumberToObject(j, "eos_token_id", eos);
    }
    cJSON_AddNumberToObject(j, "head_dim", c->channels / c->num_heads);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", c->channels);
    hf_json_float(j, "initializer_range", 0.02f);
    cJSON_AddNumberToObject(j, "intermediate_size", c->ffn_dim);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_seq_len);
    cJSON_AddFalseToObject(j, "mlp_bias");
    cJSON_AddStringToObject(j, "model_type", "llama");
    cJSON_AddNumberToObject(j, "num_attention_heads", c->num_heads);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->num_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->num_kv_heads);
    cJSON_AddNumberToObject(j, "pretraining_tp", 1);
    hf_json_float(j, "rms_norm_eps", c->norm_eps);
    if (c->rope_factor > 1.0f) {
        cJSON* rs = cJSON_AddObjectToObject(j, "rope_scaling");
        hf_json_float(rs, "factor", c->rope_factor);
        hf_json_float(rs, "high_freq_factor", c->rope_high_freq_factor);
        hf_json_float(rs, "low_freq_factor", c->rope_low_freq_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope_original_max_pos);
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
    } else {
        cJSON_AddNullToObject(j, "rope_scaling");
    }
    hf_json_float(j, "rope_theta", c->rope_theta);
    cJSON_AddFalseToObject(j, "tie_word_embeddings");
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddTrueToObject(j, "use_cache");
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    return j;
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
    .describe = llama3_describe,
    .hf_export_what = "Hugging Face LlamaForCausalLM names, q/k permuted for rotate_half, F32",
    .hf_alias_prefix = NULL,
    .hf_markers = llama3_hf_markers,
    .hf_ignorable = llama3_hf_ignorable,
    .hf_config = llama3_hf_config,
    .hf_metadata = llama3_hf_metadata,
    .hf_config_json = llama3_hf_config_json,
};
