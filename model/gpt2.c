// model/: the model families, one file and one tensor table each, and what train_gpt and the
// tools need of them as loops over the tables (model/model.h). This file: GPT-2.
//
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
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint/checkpoint.h"
#include "model/hf.h"
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
    c->norm_eps = MODEL_DEFAULT_NORM_EPS;   // GPT-2's layer_norm_epsilon
    c->num_layers = (int)depth;
    c->num_heads = (int)depth;
    c->channels = (int)depth * 64;
    // GPT-2's released sizes keep 64-wide heads with fewer heads than layers.
    if (depth == 24) { c->channels = 1024; c->num_heads = 16; }
    if (depth == 36) { c->channels = 1280; c->num_heads = 20; }
    if (depth == 48) { c->channels = 1600; c->num_heads = 25; }
    return 1;
}

// The manifest's key beyond the common six: the LayerNorms' epsilon (written exactly: a float
// is a double exactly), which came later: a manifest without it is 1e-5.
static const ConfigKey gpt2_config_keys[] = {
    {"norm_eps", offsetof(ModelConfig, norm_eps), 1, MODEL_DEFAULT_NORM_EPS},
};

static void gpt2_describe(const ModelConfig* c, int terse, char* out, size_t n) {
    if (terse)
        snprintf(out, n, "L=%d NH=%d C=%d maxT=%d V=%d Vp=%d", c->num_layers, c->num_heads, c->channels, c->max_seq_len,
                 c->vocab_size, c->padded_vocab_size);
    else
        snprintf(out, n, "GPT-2, %d layers, %d heads, %d channels", c->num_layers, c->num_heads, c->channels);
}

// ---- Hugging Face (model/hf.h): GPT2Model's names, Conv1D layout and order are the table's
// hf_* columns; what no tensor says is the head count, the LayerNorms' epsilon and the fields of
// transformers' config that change the math (the config.json beside the file: read, checked
// against what this GPT-2 computes, and written by the export).

// GPT2LMHeadModel's files also hold each block's attention-mask buffers and may hold the head,
// lm_head.weight (at the top level: never under "transformer."). The head is no tensor of the
// table (it is wte): gpt2_hf_head compares it with wte before it is skipped here.
static int gpt2_hf_ignorable(const char* key) {
    if (!strcmp(key, "lm_head.weight")) return 1;
    const char* k = strncmp(key, "transformer.", 12) == 0 ? key + 12 : key;
    const size_t n = strlen(k);
    const char* suffix[2] = {".attn.bias", ".attn.masked_bias"};
    for (int i = 0; i < 2; i++) {
        const size_t m = strlen(suffix[i]);
        if (n > m && !strcmp(k + n - m, suffix[i]) && !strncmp(k, "h.", 2)) return 1;
    }
    return 0;
}

// A head count written as a decimal string (safetensors metadata values are strings).
static int parse_heads_text(const char* s, int* out) {
    size_t n = strlen(s);
    if (n < 1 || n > 6 || strspn(s, "0123456789") != n) return 0;
    long v = strtol(s, NULL, 10);
    if (v < 1 || v > (1 << 16)) return 0;
    *out = (int)v;
    return 1;
}

// The config.json beside the file, as save_pretrained writes it: its n_head into *heads, with
// n_embd / n_layer / n_positions / vocab_size checked against the tensors (their names in
// `from`).
static int gpt2_config_json_heads(const HfImport* im, const ModelConfig* c, const char* from[4], int* heads, char* err,
                                  size_t errlen) {
    const cJSON* j = im->config_json;
    const char* path = im->config_path;
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "gpt2") != 0)) {
        snprintf(err, errlen, "%s: model_type is %s, not gpt2", path, cJSON_IsString(mt) ? mt->valuestring : "not a string");
        return 1;
    }
    const char* keys[4] = {"n_embd", "n_layer", "n_positions", "vocab_size"};
    const int have[4] = {c->channels, c->num_layers, c->max_seq_len, c->vocab_size};
    for (int i = 0; i < 4; i++) {
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        uint64_t x;
        if (!v) continue;
        if (!ckpt_json_uint(v, 1 << 30, &x)) { snprintf(err, errlen, "%s: %s is not a whole number", path, keys[i]); return 1; }
        if (x != (uint64_t)have[i]) {
            snprintf(err, errlen, "%s: %s = %" PRIu64 ", but the safetensors file has %d (%s)", path, keys[i], x, have[i], from[i]);
            return 1;
        }
    }
    const cJSON* nh = cJSON_GetObjectItemCaseSensitive(j, "n_head");
    uint64_t n;
    if (!nh) { snprintf(err, errlen, "%s: no n_head", path); return 1; }
    if (!ckpt_json_uint(nh, 1 << 16, &n) || n < 1) {
        snprintf(err, errlen, "%s: n_head is not a head count (a whole number >= 1)", path);
        return 1;
    }
    *heads = (int)n;
    return 0;
}

// The LayerNorms' epsilon: layer_norm_epsilon of the config.json beside the file, else of the
// file's __metadata__ (our export's, a string), else transformers' default 1e-5; refused when
// the two disagree or it is outside model_config_check's range.
static int gpt2_hf_eps(const HfImport* im, ModelConfig* c, char* err, size_t errlen) {
    const cJSON* meta = cJSON_GetObjectItemCaseSensitive(im->set.files[0].header, "__metadata__");
    const cJSON* m = cJSON_IsObject(meta) ? cJSON_GetObjectItemCaseSensitive(meta, "layer_norm_epsilon") : NULL;
    const cJSON* j = im->config_json ? cJSON_GetObjectItemCaseSensitive(im->config_json, "layer_norm_epsilon") : NULL;
    if (cJSON_IsNull(j)) j = NULL;
    double meta_eps = 0.0, eps = MODEL_DEFAULT_NORM_EPS;
    char* end = NULL;
    if (m && cJSON_IsString(m)) meta_eps = strtod(m->valuestring, &end);
    if (m && (!end || end == m->valuestring || *end)) {
        snprintf(err, errlen, "%s: __metadata__ layer_norm_epsilon is not a number (written as a string)", im->set.path);
        return 1;
    }
    if (j && !cJSON_IsNumber(j)) {
        snprintf(err, errlen, "%s: layer_norm_epsilon is not a number", im->config_path);
        return 1;
    }
    if (m && j && (float)meta_eps != (float)j->valuedouble) {
        snprintf(err, errlen, "%s: __metadata__ layer_norm_epsilon %g disagrees with %s's %g", im->set.path, meta_eps,
                 im->config_path, j->valuedouble);
        return 1;
    }
    if (j) eps = j->valuedouble;
    else if (m) eps = meta_eps;
    if (!(eps >= MODEL_MIN_NORM_EPS && eps <= MODEL_MAX_NORM_EPS)) {
        snprintf(err, errlen, "%s: layer_norm_epsilon = %g is not in [1e-30, 1]", j ? im->config_path : im->set.path, eps);
        return 1;
    }
    c->norm_eps = (float)eps;
    return 0;
}

// transformers' GPT-2 config fields that change the math, each against what this GPT-2 computes; an
// absent key is transformers' default, which is this GPT-2. *tie: tie_word_embeddings.
// - activation_function: the MLP's GELU is the tanh approximation (kernels' gelu_forward,
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))): "gelu_new", and "gelu_pytorch_tanh" and
//   "gelu_fast", the same function written another way; "gelu" (erf), "relu", ... refused.
// - n_inner: the MLP's width, null (4 n_embd) or 4 n_embd.
// - scale_attn_weights true (scores / sqrt(head size)), scale_attn_by_inverse_layer_idx false
//   (no further / (layer + 1)), add_cross_attention false (no encoder to attend to).
// - reorder_and_upcast_attn: either, once it is true or false: true makes transformers fold the
//   scale into q k^T and compute the scores and softmax in fp32 under fp16/bf16 autocast, the
//   same attention with other rounding (fsdp.c's attention kernels take scores and softmax in
//   fp32 whatever the parameter dtype).
// - tie_word_embeddings (true): the head is wte; gpt2_hf_head holds a file's lm_head.weight to it.
static int gpt2_hf_math(const HfImport* im, const ModelConfig* c, int* tie, char* err, size_t errlen) {
    const cJSON* j = im->config_json;
    const char* path = im->config_path;
    char text[80];
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if (act) {
        const char* tanh_gelu[3] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};
        int ok = 0;
        for (int i = 0; i < 3 && cJSON_IsString(act); i++) ok |= !strcmp(act->valuestring, tanh_gelu[i]);
        if (!ok) {
            hf_json_text(act, text, sizeof(text));
            snprintf(err, errlen, "%s: activation_function = %s: fsdp.c's GPT-2 MLP is GELU's tanh approximation, "
                     "\"gelu_new\" (or \"gelu_pytorch_tanh\" or \"gelu_fast\", the same)", path, text);
            return 1;
        }
    }
    const cJSON* inner = cJSON_GetObjectItemCaseSensitive(j, "n_inner");
    uint64_t width;
    if (inner && !cJSON_IsNull(inner) && !(ckpt_json_uint(inner, 1 << 30, &width) && width == 4 * (uint64_t)c->channels)) {
        hf_json_text(inner, text, sizeof(text));
        snprintf(err, errlen, "%s: n_inner = %s: fsdp.c's GPT-2 MLP is 4 x n_embd = %d wide (n_inner null or %d)", path, text,
                 4 * c->channels, 4 * c->channels);
        return 1;
    }
    // Each key, the value this GPT-2 computes with (transformers' default), and what it means.
    const struct { const char* key; int want; const char* why; } flags[] = {
        {"scale_attn_weights", 1, "fsdp.c's GPT-2 divides the attention scores by sqrt(head size)"},
        {"scale_attn_by_inverse_layer_idx", 0, "fsdp.c's GPT-2 does not divide layer i's attention scores by i + 1"},
        {"add_cross_attention", 0, "fsdp.c's GPT-2 is a decoder alone (no cross-attention)"},
    };
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        const int v = hf_config_bool(im, flags[i].key, flags[i].want, err, errlen);
        if (v < 0) return 1;
        if (v != flags[i].want) {
            snprintf(err, errlen, "%s: %s = %s: %s", path, flags[i].key, v ? "true" : "false", flags[i].why);
            return 1;
        }
    }
    return hf_config_bool(im, "reorder_and_upcast_attn", 0, err, errlen) < 0 ||
           (*tie = hf_config_bool(im, "tie_word_embeddings", 1, err, errlen)) < 0;
}

// The head a GPT2LMHeadModel file may hold (lm_head.weight) against wte: this GPT-2's head is wte,
// so a file's head is imported only when it is wte, whatever tie_word_embeddings says (a note when
// that says false); a head that differs is refused (no untied GPT-2 here), and so is an untied
// head the file lacks (transformers would start it at random).
static int gpt2_hf_head(HfImport* im, const StTensor* wte, const char* wte_name, int tie, char* err, size_t errlen) {
    const char* head_name = "lm_head.weight";
    const int said = im->config_json && cJSON_GetObjectItemCaseSensitive(im->config_json, "tie_word_embeddings");
    StTensor head;
    int found;
    if (st_tensor(&im->set, head_name, head_name, &head, &found, err, errlen)) return 1;
    if (!found && !tie) {
        snprintf(err, errlen, "%s: tie_word_embeddings = false, but %s holds no %s: the untied head is not in the file",
                 im->config_path, im->set.path, head_name);
        return 1;
    }
    if (!found) return 0;
    if (hf_expect_shape(im, head_name, &head, 2, wte->shape[0], wte->shape[1], err, errlen)) return 1;
    const size_t n = (size_t)(wte->shape[0] * wte->shape[1]);
    float* a = (float*)malloc(n * sizeof(float) + 1);
    float* b = (float*)malloc(n * sizeof(float) + 1);
    int rc = !a || !b;
    if (rc) snprintf(err, errlen, "%s: out of memory (%zu bytes) comparing %s with %s", im->set.path, 2 * n * sizeof(float),
                     head_name, wte_name);
    else rc = st_read(&im->set, wte, a, err, errlen) || st_read(&im->set, &head, b, err, errlen);
    const int same = !rc && memcmp(a, b, n * sizeof(float)) == 0;
    free(a);
    free(b);
    if (rc) return 1;
    if (same && !tie)
        snprintf(im->note, sizeof(im->note), "note: %s says tie_word_embeddings = false, but %s equals %s: imported as GPT-2's "
                 "head, which is %s", im->config_path, head_name, wte_name, wte_name);
    if (same) return 0;
    if (said)
        snprintf(err, errlen, "%s: tie_word_embeddings = %s, and %s differs from %s: fsdp.c's GPT-2 has no head of its own "
                 "(it is %s)", im->config_path, tie ? "true" : "false", head_name, wte_name, wte_name);
    else
        snprintf(err, errlen, "%s: %s differs from %s: fsdp.c's GPT-2 has no head of its own (it is %s; tie_word_embeddings "
                 "is true when no config.json says otherwise)", im->set.path, head_name, wte_name, wte_name);
    return 1;
}

// The shape from the tensors (V and C from wte, maxT from wpe, L from the blocks' names), the head
// count from --heads, the metadata's n_head or config.json's n_head: never guessed (channels / 64
// is wrong for any other head size), and sources that disagree are refused; config.json's fields
// that change the math checked (gpt2_hf_math), and a head the file holds (gpt2_hf_head).
static int gpt2_hf_config(HfImport* im, ModelConfig* c, char* err, size_t errlen) {
    const ModelFamily* f = im->family;
    const char* path = im->set.path;
    // Hugging Face's GPT-2s are single files; an index whose names no family's markers claim is
    // refused, naming the family that is read from shards.
    if (im->set.map) {
        snprintf(err, errlen, "%s: no Hugging Face Llama tensor names (model.embed_tokens, model.layers.N) in the weight_map: "
                 "sharded safetensors are read for Llama only (a GPT-2 as one file)", path);
        return 1;
    }
    const char *wte_name = family_root_role(f, ROOT_WTE)->hf_name, *wpe_name = family_root_role(f, ROOT_WPE)->hf_name;
    StTensor wte, wpe;
    int found;
    if (hf_get(im, wte_name, &wte, &found, err, errlen)) return 1;
    if (!found) { snprintf(err, errlen, "%s: no tensor %s (not a GPT-2 safetensors file?)", path, wte_name); return 1; }
    if (hf_get(im, wpe_name, &wpe, &found, err, errlen)) return 1;
    if (!found) { snprintf(err, errlen, "%s: no tensor %s", path, wpe_name); return 1; }
    if (wte.ndim != 2 || wpe.ndim != 2) { snprintf(err, errlen, "%s: %s and %s must be 2-D", path, wte_name, wpe_name); return 1; }
    if (wpe.shape[1] != wte.shape[1]) {
        snprintf(err, errlen, "%s: tensor %s has %" PRIu64 " columns, %s %" PRIu64, path, wpe_name, wpe.shape[1], wte_name,
                 wte.shape[1]);
        return 1;
    }
    if (wte.shape[0] > MODEL_MAX_VOCAB || wte.shape[1] > MODEL_MAX_CHANNELS || wpe.shape[0] > MODEL_MAX_SEQ) {
        snprintf(err, errlen, "%s: %s [%" PRIu64 ", %" PRIu64 "] / %s [%" PRIu64 ", %" PRIu64 "]: implausibly large model", path,
                 wte_name, wte.shape[0], wte.shape[1], wpe_name, wpe.shape[0], wpe.shape[1]);
        return 1;
    }
    const int layers = hf_layers(im);
    if (!layers) { snprintf(err, errlen, "%s: no transformer blocks (%s.N.*) found", path, f->hf_block_prefix); return 1; }
    memset(c, 0, sizeof(*c));
    c->arch = ARCH_GPT2;
    c->channels = (int)wte.shape[1];
    c->vocab_size = (int)wte.shape[0];
    c->padded_vocab_size = pad_vocab(c->vocab_size);
    c->max_seq_len = (int)wpe.shape[0];
    c->num_layers = layers;

    const cJSON* meta = cJSON_GetObjectItemCaseSensitive(im->set.files[0].header, "__metadata__");
    const cJSON* nh = cJSON_IsObject(meta) ? cJSON_GetObjectItemCaseSensitive(meta, "n_head") : NULL;
    int meta_heads = 0, cfg_heads = 0;
    if (nh && !(cJSON_IsString(nh) && parse_heads_text(nh->valuestring, &meta_heads))) {
        snprintf(err, errlen, "%s: __metadata__ n_head = %s is not a head count (a whole number >= 1, as a string)", path,
                 cJSON_IsString(nh) ? nh->valuestring : "not a string");
        return 1;
    }
    char wte_cols[128], blocks[128], wpe_rows[128], wte_rows[128];
    snprintf(wte_cols, sizeof(wte_cols), "%s's columns", wte_name);
    snprintf(blocks, sizeof(blocks), "the %s.N blocks", f->hf_block_prefix);
    snprintf(wpe_rows, sizeof(wpe_rows), "%s's rows", wpe_name);
    snprintf(wte_rows, sizeof(wte_rows), "%s's rows", wte_name);
    const char* from[4] = {wte_cols, blocks, wpe_rows, wte_rows};
    int tie = 1;
    if (hf_read_config_json(im, err, errlen) ||
        (im->config_json && (gpt2_config_json_heads(im, c, from, &cfg_heads, err, errlen) ||
                             gpt2_hf_math(im, c, &tie, err, errlen))))
        return 1;
    const char* cfg_path = im->config_path;
    if (meta_heads && cfg_heads && meta_heads != cfg_heads) {
        snprintf(err, errlen, "%s: __metadata__ n_head %d disagrees with %s's n_head %d", path, meta_heads, cfg_path, cfg_heads);
        return 1;
    }
    char heads_from[PATH_MAX + 32];
    if (im->heads) { c->num_heads = im->heads; snprintf(heads_from, sizeof(heads_from), "--heads"); }
    else if (meta_heads) { c->num_heads = meta_heads; snprintf(heads_from, sizeof(heads_from), "metadata n_head"); }
    else if (cfg_heads) { c->num_heads = cfg_heads; snprintf(heads_from, sizeof(heads_from), "%s n_head", cfg_path); }
    else {
        snprintf(err, errlen, "%s: no head count: no __metadata__ n_head and no config.json beside it (%s); give --heads N", path,
                 cfg_path);
        return 1;
    }
    if (c->channels % c->num_heads != 0) {
        snprintf(err, errlen, "%s: channels %d is not a multiple of %d heads (from %s); give --heads N", path, c->channels,
                 c->num_heads, heads_from);
        return 1;
    }
    const int file_heads = meta_heads ? meta_heads : cfg_heads;
    if (im->heads && file_heads && im->heads != file_heads) {
        snprintf(err, errlen, "%s: --heads %d disagrees with the file's %d heads (%s)", path, im->heads, file_heads,
                 meta_heads ? "metadata n_head" : cfg_path);
        return 1;
    }
    if (gpt2_hf_eps(im, c, err, errlen)) return 1;
    const char* bad = model_config_check(c);
    if (bad) { snprintf(err, errlen, "%s: inconsistent model (%s)", path, bad); return 1; }
    if (gpt2_hf_head(im, &wte, wte_name, tie, err, errlen)) return 1;
    snprintf(im->what, sizeof(im->what), "safetensors");
    snprintf(im->from, sizeof(im->from), " (heads from %s)", heads_from);
    return 0;
}

// GPT2Model's config, as metadata strings (its head count above all, which no tensor holds).
static void gpt2_hf_metadata(const ModelConfig* c, cJSON* meta) {
    hf_meta_int(meta, "n_layer", c->num_layers);
    hf_meta_int(meta, "n_head", c->num_heads);
    hf_meta_int(meta, "n_embd", c->channels);
    hf_meta_int(meta, "n_positions", c->max_seq_len);
    hf_meta_int(meta, "vocab_size", c->vocab_size);
    hf_meta_int(meta, "padded_vocab_size", c->padded_vocab_size);
    hf_meta_float(meta, "layer_norm_epsilon", c->norm_eps);
}

// The keys transformers' save_pretrained writes for a GPT-2 (sorted, as it writes them), with the
// values this GPT-2 computes with, which are transformers' defaults: GPT2LMHeadModel.from_pretrained
// of the directory loads the export (it finds GPT2Model's names under its "transformer." prefix
// and ties lm_head to wte), and the import reads it back. Dropouts are transformers' defaults
// (fsdp.c trains without dropout; they act only in a transformers training).
static cJSON* gpt2_hf_config_json(const ModelConfig* c) {
    cJSON* j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    hf_json_float(j, "attn_pdrop", 0.1f);
    // <|endoftext|> in GPT-2's vocabulary; in another, null rather than transformers' default
    // 50256, which would be some other token there (or none).
    if (c->vocab_size == GPT2_VOCAB) cJSON_AddNumberToObject(j, "bos_token_id", GPT2_EOT);
    else cJSON_AddNullToObject(j, "bos_token_id");
    hf_json_float(j, "embd_pdrop", 0.1f);
    if (c->vocab_size == GPT2_VOCAB) cJSON_AddNumberToObject(j, "eos_token_id", GPT2_EOT);
    else cJSON_AddNullToObject(j, "eos_token_id");
    hf_json_float(j, "initializer_range", 0.02f);
    hf_json_float(j, "layer_norm_epsilon", c->norm_eps);
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "n_ctx", c->max_seq_len);   // (older transformers' name of n_positions, in OpenAI's files)
    cJSON_AddNumberToObject(j, "n_embd", c->channels);
    cJSON_AddNumberToObject(j, "n_head", c->num_heads);
    cJSON_AddNullToObject(j, "n_inner");
    cJSON_AddNumberToObject(j, "n_layer", c->num_layers);
    cJSON_AddNumberToObject(j, "n_positions", c->max_seq_len);
    cJSON_AddFalseToObject(j, "reorder_and_upcast_attn");
    hf_json_float(j, "resid_pdrop", 0.1f);
    cJSON_AddFalseToObject(j, "scale_attn_by_inverse_layer_idx");
    cJSON_AddTrueToObject(j, "scale_attn_weights");
    cJSON_AddNullToObject(j, "summary_activation");   // (the summary_* keys: GPT2DoubleHeadsModel's head, not ours)
    hf_json_float(j, "summary_first_dropout", 0.1f);
    cJSON_AddTrueToObject(j, "summary_proj_to_labels");
    cJSON_AddStringToObject(j, "summary_type", "cls_index");
    cJSON_AddTrueToObject(j, "summary_use_proj");
    cJSON_AddTrueToObject(j, "tie_word_embeddings");
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddTrueToObject(j, "use_cache");
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    return j;
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
    .config_keys = gpt2_config_keys,
    .n_config_keys = sizeof(gpt2_config_keys) / sizeof(gpt2_config_keys[0]),
    .describe = gpt2_describe,
    .hf_export_what = "Hugging Face GPT2Model names, F32",
    .hf_alias_prefix = "transformer.",
    .hf_markers = NULL,
    .hf_ignorable = gpt2_hf_ignorable,
    .hf_config = gpt2_hf_config,
    .hf_metadata = gpt2_hf_metadata,
    .hf_config_json = gpt2_hf_config_json,
};
