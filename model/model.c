// model/: GPT-2's files, for train_gpt and the ckpt tool alike: shapes, presets, config
// checks, tensor names and the flat-unit layout (this file, gpt2.h); initialisation, llm.c
// model files and the checkpoint tables and state (gpt2_state.c).
#include "model/model.h"

#include <ctype.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int pad_vocab(int v) { return (v + VOCAB_PAD_MULTIPLE - 1) / VOCAB_PAD_MULTIPLE * VOCAB_PAD_MULTIPLE; }

const char* model_config_check(const ModelConfig* c) {
    if (c->max_seq_len < 1 || c->vocab_size < 1 || c->num_layers < 1 || c->num_heads < 1 || c->channels < 1)
        return "a dimension is < 1";
    // Each bound alone keeps every product below (size_t and int arithmetic in the layout,
    // the llm.c offsets, n_units) far from overflowing; the total bounds what is allocated.
    if (c->num_layers > MODEL_MAX_LAYERS) return "num_layers is implausibly large (> 100000)";
    if (c->channels > MODEL_MAX_CHANNELS) return "channels is implausibly large (> 65536)";
    if (c->max_seq_len > MODEL_MAX_SEQ) return "max_seq_len is implausibly large (> 2^24)";
    if (c->padded_vocab_size > MODEL_MAX_VOCAB || c->vocab_size > MODEL_MAX_VOCAB)
        return "vocab_size is implausibly large (> 2^26)";
    if (c->channels % c->num_heads != 0) return "channels is not a multiple of num_heads";
    if (c->padded_vocab_size < c->vocab_size) return "padded_vocab_size < vocab_size";
    if (c->arch != ARCH_GPT2 && c->arch != ARCH_LLAMA3) return "unknown architecture";
    if (c->arch == ARCH_LLAMA3) {
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
    }
    if (model_num_parameters(c) > MODEL_MAX_PARAMETERS) return "more than 2^40 parameters";
    return NULL;
}

// Llama 3's shapes (Meta's params.json): layers, channels, heads, kv heads, F, and the RoPE
// scaling factor of the released checkpoints (3.2: 32, 3.1: 8).
static const struct { const char* name; int layers, channels, heads, kv_heads, ffn; float factor; } llama_presets[] = {
    {"llama3:tiny", 4, 256, 4, 2, 768, 0.0f},
    {"llama3:1b", 16, 2048, 32, 8, 8192, 32.0f},
    {"llama3:3b", 28, 3072, 24, 8, 8192, 32.0f},
    {"llama3:8b", 32, 4096, 32, 8, 14336, 8.0f},
};

int preset_config(const char* name, ModelConfig* c) {
    for (size_t i = 0; i < sizeof(llama_presets) / sizeof(llama_presets[0]); i++) {
        if (strcmp(name, llama_presets[i].name) != 0) continue;
        c->arch = ARCH_LLAMA3;
        c->num_layers = llama_presets[i].layers;
        c->channels = llama_presets[i].channels;
        c->num_heads = llama_presets[i].heads;
        c->num_kv_heads = llama_presets[i].kv_heads;
        c->ffn_dim = llama_presets[i].ffn;
        c->rope_theta = 500000.0f;
        c->rope_factor = llama_presets[i].factor;
        c->rope_low_freq_factor = 1.0f;
        c->rope_high_freq_factor = 4.0f;
        c->rope_original_max_pos = 8192;
        const int tiny = i == 0;
        c->vocab_size = tiny ? GPT2_VOCAB : LLAMA3_VOCAB;
        c->padded_vocab_size = pad_vocab(c->vocab_size);
        c->max_seq_len = tiny ? 1024 : 8192;
        return 0;
    }
    if (name[0] != 'd' || !isdigit((unsigned char)name[1])) return 1;
    char* end;
    long depth = strtol(name + 1, &end, 10);
    if (*end != '\0' || depth < 1 || depth > 48) return 1;
    c->num_layers = (int)depth;
    c->num_heads = (int)depth;
    c->channels = (int)depth * 64;
    // GPT-2's released sizes keep 64-wide heads with fewer heads than layers.
    if (depth == 24) { c->channels = 1024; c->num_heads = 16; }
    if (depth == 36) { c->channels = 1280; c->num_heads = 20; }
    if (depth == 48) { c->channels = 1600; c->num_heads = 25; }
    return 0;
}

const char* const LLAMA_BLOCK_TENSOR_NAMES[LLAMA_BLOCK_TENSORS] = {
    "attention_norm.weight", "attention.wqkv.weight", "attention.wo.weight", "ffn_norm.weight",
    "feed_forward.w13.weight", "feed_forward.w2.weight"};

const char* const BLOCK_TENSOR_NAMES[BLOCK_TENSORS] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

int model_first_kind(const ModelConfig* c) { return c->arch == ARCH_LLAMA3 ? LK_EMB : K_WTE; }
int model_end_kind(const ModelConfig* c) { return c->arch == ARCH_LLAMA3 ? NUM_ALL_KINDS : NUM_KINDS; }
int block_tensor_count(const ModelConfig* c) { return c->arch == ARCH_LLAMA3 ? LLAMA_BLOCK_TENSORS : BLOCK_TENSORS; }
int root_tensor_count(const ModelConfig* c) { return c->arch == ARCH_LLAMA3 ? LLAMA_ROOT_TENSORS : ROOT_TENSORS; }
int is_block_kind(int kind) { return (kind >= K_LN1W && kind <= K_FCPROJB) || (kind >= LK_ATTN_NORM && kind <= LK_W2); }
int qkv_width(const ModelConfig* c) {
    return c->arch == ARCH_LLAMA3 ? (c->num_heads + 2 * c->num_kv_heads) * (c->channels / c->num_heads) : 3 * c->channels;
}
// The kind of root tensor i and of block tensor j of c's family.
static int root_kind(const ModelConfig* c, int i) {
    static const int gpt2_root[ROOT_TENSORS] = {K_WTE, K_WPE, K_LNFW, K_LNFB};
    return c->arch == ARCH_LLAMA3 ? LK_EMB + i : gpt2_root[i];
}
static int block_kind(const ModelConfig* c, int j) { return (c->arch == ARCH_LLAMA3 ? LK_ATTN_NORM : K_LN1W) + j; }

void block_tensor_shape(const ModelConfig* c, int j, size_t* rows, size_t* cols) {
    size_t C = (size_t)c->channels;
    static const int out_mult[BLOCK_TENSORS] = {1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1};
    *rows = 1;
    *cols = (size_t)out_mult[j] * C;
    if (j == QKV_W) { *rows = 3 * C; *cols = C; }
    if (j == ATTPROJ_W) { *rows = C; *cols = C; }
    if (j == FC_W) { *rows = 4 * C; *cols = C; }
    if (j == FCPROJ_W) { *rows = C; *cols = 4 * C; }
}

// Elements of one instance (one layer) of each llm.c kind.
void kind_sizes(const ModelConfig* c, size_t sizes[NUM_KINDS]) {
    size_t C = (size_t)c->channels;
    sizes[K_WTE] = (size_t)c->padded_vocab_size * C;
    sizes[K_WPE] = (size_t)c->max_seq_len * C;
    for (int j = 0; j < BLOCK_TENSORS; j++) {
        size_t r, k;
        block_tensor_shape(c, j, &r, &k);
        sizes[K_LN1W + j] = r * k;
    }
    sizes[K_LNFW] = C;
    sizes[K_LNFB] = C;
}

int kind_layers(const ModelConfig* c, int kind) { return is_block_kind(kind) ? c->num_layers : 1; }

void kind_shape(const ModelConfig* c, int kind, size_t* rows, size_t* cols) {
    size_t C = (size_t)c->channels, F = (size_t)c->ffn_dim;
    switch (kind) {
    case LK_EMB: case LK_OUTPUT: *rows = (size_t)c->padded_vocab_size; *cols = C; break;
    case LK_NORM: case LK_ATTN_NORM: case LK_FFN_NORM: *rows = 1; *cols = C; break;
    case LK_WQKV: *rows = (size_t)qkv_width(c); *cols = C; break;
    case LK_WO: *rows = C; *cols = C; break;
    case LK_W13: *rows = 2 * F; *cols = C; break;
    case LK_W2: *rows = C; *cols = F; break;
    case K_WTE: *rows = (size_t)c->padded_vocab_size; *cols = C; break;
    case K_WPE: *rows = (size_t)c->max_seq_len; *cols = C; break;
    case K_LNFW: case K_LNFB: *rows = 1; *cols = C; break;
    default: block_tensor_shape(c, kind - K_LN1W, rows, cols);
    }
}

void model_tensor_name(int kind, int layer, char* out, size_t outlen) {
    switch (kind) {
    case K_WTE: snprintf(out, outlen, "wte"); break;
    case K_WPE: snprintf(out, outlen, "wpe"); break;
    case K_LNFW: snprintf(out, outlen, "ln_f.weight"); break;
    case K_LNFB: snprintf(out, outlen, "ln_f.bias"); break;
    case LK_EMB: snprintf(out, outlen, "tok_embeddings.weight"); break;
    case LK_NORM: snprintf(out, outlen, "norm.weight"); break;
    case LK_OUTPUT: snprintf(out, outlen, "output.weight"); break;
    default:
        if (kind >= LK_ATTN_NORM) snprintf(out, outlen, "layers.%d.%s", layer, LLAMA_BLOCK_TENSOR_NAMES[kind - LK_ATTN_NORM]);
        else snprintf(out, outlen, "h.%d.%s", layer, BLOCK_TENSOR_NAMES[kind - K_LN1W]);
    }
}

size_t model_num_parameters(const ModelConfig* c) {
    size_t n = 0;
    for (int k = model_first_kind(c); k < model_end_kind(c); k++) {
        size_t rows, cols;
        kind_shape(c, k, &rows, &cols);
        n += rows * cols * (size_t)kind_layers(c, k);
    }
    return n;
}

int build_layout(ModelLayout* m, const ModelConfig* c, int layers_per_unit, int shard_count) {
    memset(m, 0, sizeof(*m));
    // Nothing is computed or allocated from an unchecked config: the bounds come first.
    if (model_config_check(c) != NULL || layers_per_unit < 1 || layers_per_unit > INT32_MAX / 2 || shard_count < 1)
        return 1;
    // A unit holds at most FLAT_UNIT_MAX_TENSORS tensors (12 a block): more would be dropped.
    int per_unit = layers_per_unit < c->num_layers ? layers_per_unit : c->num_layers;
    if (per_unit > MODEL_MAX_LAYERS_PER_UNIT) return 1;
    m->config = *c;
    m->layers_per_unit = layers_per_unit;
    m->n_units = 1 + (c->num_layers + layers_per_unit - 1) / layers_per_unit;   // <= 100001
    m->units = (FlatUnit*)calloc((size_t)m->n_units, sizeof(FlatUnit));
    if (!m->units) { m->n_units = 0; return 2; }
    char name[FLAT_UNIT_NAME_LEN];
    size_t rows, cols;
    int full = 0;
    // Weight decay on matrices only (embeddings and heads included), not on norms and biases.
    for (int i = 0; i < root_tensor_count(c); i++) {
        const int kind = root_kind(c, i);
        model_tensor_name(kind, 0, name, sizeof(name));
        kind_shape(c, kind, &rows, &cols);
        const int decays = kind == K_WTE || kind == K_WPE || kind == LK_EMB || kind == LK_OUTPUT;
        full |= flat_unit_add(&m->units[0], name, rows, cols, decays) < 0;
    }
    for (int l = 0; l < c->num_layers; l++) {
        FlatUnit* u = &m->units[1 + l / layers_per_unit];
        for (int j = 0; j < block_tensor_count(c); j++) {
            model_tensor_name(block_kind(c, j), l, name, sizeof(name));
            kind_shape(c, block_kind(c, j), &rows, &cols);
            full |= flat_unit_add(u, name, rows, cols, rows > 1) < 0;
        }
    }
    if (full) { free(m->units); m->units = NULL; m->n_units = 0; return 1; }  // (bounded above: cannot happen)
    m->num_parameters = 0;
    for (int u = 0; u < m->n_units; u++) {
        flat_unit_finalize(&m->units[u], shard_count, SHARD_ALIGN);
        m->num_parameters += m->units[u].numel;
    }
    return 0;
}

// Where tensor i of unit u sits in llm.c's file order: its kind and layer.
void tensor_kind(const ModelLayout* m, int u, int i, int* kind, int* layer) {
    if (u == 0) { *kind = root_kind(&m->config, i); *layer = 0; return; }
    const int nb = block_tensor_count(&m->config);
    *kind = block_kind(&m->config, i % nb);
    *layer = (u - 1) * m->layers_per_unit + i / nb;
}

// Element offset of (kind, layer) in the parameter section of an llm.c model file.
size_t llmc_offset(const ModelConfig* c, int kind, int layer) {
    size_t sizes[NUM_KINDS];
    kind_sizes(c, sizes);
    size_t off = 0;
    for (int k = 0; k < kind; k++) off += sizes[k] * ((k >= K_LN1W && k <= K_FCPROJB) ? (size_t)c->num_layers : 1);
    return off + (size_t)layer * sizes[kind];
}

int read_model_header(const char* path, ModelConfig* c, int* version, char* err, size_t errlen) {
    // A regular file only: a FIFO would block the open or the read for ever.
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return 1;
    }
    int32_t h[256];
    ssize_t got = pread(fd, h, sizeof(h), 0);
    close(fd);
    long size = (long)st.st_size;
    if (got != (ssize_t)sizeof(h)) { snprintf(err, errlen, "%s: truncated header (%ld bytes)", path, size); return 1; }
    if (h[0] != MODEL_FILE_MAGIC) { snprintf(err, errlen, "%s: bad magic %d (not an llm.c model file: expected %d)", path, h[0], MODEL_FILE_MAGIC); return 1; }
    if (h[1] != 3 && h[1] != 5) { snprintf(err, errlen, "%s: unsupported version %d (expected 3 for fp32 or 5 for bf16)", path, h[1]); return 1; }
    memset(c, 0, sizeof(*c));  // a GPT-2 (llm.c files hold no other family)
    c->max_seq_len = h[2]; c->vocab_size = h[3]; c->num_layers = h[4];
    c->num_heads = h[5]; c->channels = h[6]; c->padded_vocab_size = h[7];
    const char* bad = model_config_check(c);
    if (bad) {
        snprintf(err, errlen, "%s: inconsistent config (%s: maxT %d, V %d, L %d, NH %d, C %d, Vp %d)", path, bad,
                 c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels, c->padded_vocab_size);
        return 1;
    }
    *version = h[1];
    size_t elem = h[1] == 3 ? 4 : 2;
    long expected = (long)(MODEL_HEADER_BYTES + model_num_parameters(c) * elem);
    if (size != expected) {
        snprintf(err, errlen, "%s: %ld bytes, but its header's model needs %ld (truncated or not this model)",
                 path, size, expected);
        return 1;
    }
    return 0;
}

void llmc_model_header(const ModelConfig* c, int version, int32_t h[256]) {
    memset(h, 0, 256 * sizeof(int32_t));
    h[0] = MODEL_FILE_MAGIC; h[1] = version; h[2] = c->max_seq_len; h[3] = c->vocab_size;
    h[4] = c->num_layers; h[5] = c->num_heads; h[6] = c->channels; h[7] = c->padded_vocab_size;
}

float bf16_to_float(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
