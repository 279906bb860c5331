// The family-neutral half of model/ (model.h): the family registry, shapes and names read
// from the tables, config checks, presets and the flat-unit layout.
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const ModelFamily gpt2_family, llama3_family;

// ModelConfig.arch indexes this list; a new family is one more entry (and its file).
static const ModelFamily* const model_families[NUM_ARCHS] = {&gpt2_family, &llama3_family};

const ModelFamily* model_family_at(int arch) {
    return arch >= 0 && arch < NUM_ARCHS ? model_families[arch] : NULL;
}
const ModelFamily* model_family(const ModelConfig* c) { return model_family_at(c->arch); }
const ModelFamily* model_family_named(const char* name) {
    for (int a = 0; a < NUM_ARCHS; a++)
        if (!strcmp(model_families[a]->name, name)) return model_families[a];
    return NULL;
}

void model_family_names(int quote, char* out, size_t n) {
    out[0] = '\0';
    for (int a = 0; a < NUM_ARCHS; a++) {
        const size_t at = strlen(out);
        snprintf(out + at, n - at, "%s%s%s%s", a == 0 ? "" : a + 1 < NUM_ARCHS ? ", " : " or ", quote ? "\"" : "",
                 model_families[a]->name, quote ? "\"" : "");
    }
}

int family_has_config(const ModelFamily* f, size_t offset) {
    for (int i = 0; i < f->n_config_keys; i++)
        if (f->config_keys[i].offset == offset) return 1;
    return 0;
}

// Whether a row of the table has a dimension of size d.
static int table_uses(const TensorSpec* table, int n, Dim d) {
    for (int i = 0; i < n; i++)
        if (table[i].rows == d || table[i].cols == d) return 1;
    return 0;
}

int model_config_fixed(const ModelFamily* f, size_t offset) {
    static const size_t settings[] = {offsetof(ModelConfig, norm_eps), offsetof(ModelConfig, rope_theta),
                                      offsetof(ModelConfig, rope_factor), offsetof(ModelConfig, rope_low_freq_factor),
                                      offsetof(ModelConfig, rope_high_freq_factor),
                                      offsetof(ModelConfig, rope_original_max_pos)};
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        if (offset == settings[i]) return 0;
    if (offset == offsetof(ModelConfig, max_seq_len))
        return table_uses(f->root, f->n_root, DIM_POSITIONS) || table_uses(f->block, f->n_block, DIM_POSITIONS);
    return 1;
}

static const TensorSpec* find_role(const TensorSpec* table, int n, int role) {
    for (int i = 0; i < n; i++)
        if (table[i].role == role) return &table[i];
    return NULL;
}
const TensorSpec* family_root_role(const ModelFamily* f, int role) { return find_role(f->root, f->n_root, role); }
const TensorSpec* family_block_role(const ModelFamily* f, int role) { return find_role(f->block, f->n_block, role); }

size_t model_dim(const ModelConfig* c, Dim d) {
    const size_t C = (size_t)c->channels, hs = c->num_heads > 0 ? C / (size_t)c->num_heads : 0;
    switch (d) {
    case DIM_ONE: return 1;
    case DIM_C: return C;
    case DIM_3C: return 3 * C;
    case DIM_4C: return 4 * C;
    case DIM_VOCAB: return (size_t)c->padded_vocab_size;
    case DIM_POSITIONS: return (size_t)c->max_seq_len;
    case DIM_KV: return (size_t)c->num_kv_heads * hs;
    case DIM_QKV: return C + 2 * (size_t)c->num_kv_heads * hs;
    case DIM_FFN: return (size_t)c->ffn_dim;
    case DIM_2FFN: return 2 * (size_t)c->ffn_dim;
    }
    return 0;
}

void spec_shape(const ModelConfig* c, const TensorSpec* s, size_t* rows, size_t* cols) {
    *rows = model_dim(c, s->rows);
    *cols = model_dim(c, s->cols);
}

size_t spec_segment_row(const ModelConfig* c, const TensorSpec* s, int i, size_t* rows) {
    size_t first = 0;
    for (int j = 0; j < i; j++) first += model_dim(c, s->segments[j].rows);
    *rows = model_dim(c, s->segments[i].rows);
    return first;
}

void spec_name(const ModelFamily* f, const TensorSpec* s, int is_block, int layer, char* out, size_t n) {
    if (is_block) snprintf(out, n, "%s.%d.%s", f->block_prefix, layer, s->name);
    else snprintf(out, n, "%s", s->name);
}

void spec_hf_name(const ModelFamily* f, const TensorSpec* s, int seg, int is_block, int layer, char* out, size_t n) {
    const char* name = seg >= 0 && s->segments[seg].hf_name ? s->segments[seg].hf_name : s->hf_name;
    if (is_block) snprintf(out, n, "%s.%d.%s", f->hf_block_prefix, layer, name);
    else snprintf(out, n, "%s", name);
}

int model_tensor_count(const ModelConfig* c) {
    const ModelFamily* f = model_family(c);
    return f->n_root + f->n_block * c->num_layers;
}

ModelTensor model_tensor_at(const ModelConfig* c, int i) {
    const ModelFamily* f = model_family(c);
    ModelTensor t;
    if (i < f->n_root) {
        t.spec = &f->root[i];
        t.is_block = 0;
        t.layer = 0;
    } else {
        t.spec = &f->block[(i - f->n_root) % f->n_block];
        t.is_block = 1;
        t.layer = (i - f->n_root) / f->n_block;
    }
    return t;
}

size_t model_tensor_offset(const ModelConfig* c, int i) {
    const ModelFamily* f = model_family(c);
    size_t off = 0, rows, cols;
    for (int j = 0; j < f->n_root && j < i; j++) {
        spec_shape(c, &f->root[j], &rows, &cols);
        off += rows * cols;
    }
    if (i <= f->n_root) return off;
    size_t block = 0;
    for (int j = 0; j < f->n_block; j++) {
        spec_shape(c, &f->block[j], &rows, &cols);
        block += rows * cols;
    }
    const int b = i - f->n_root;
    off += (size_t)(b / f->n_block) * block;
    for (int j = 0; j < b % f->n_block; j++) {
        spec_shape(c, &f->block[j], &rows, &cols);
        off += rows * cols;
    }
    return off;
}

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
    // (written so that a NaN fails it)
    if (!(c->norm_eps >= MODEL_MIN_NORM_EPS && c->norm_eps <= MODEL_MAX_NORM_EPS)) return "norm_eps is not in [1e-30, 1]";
    const ModelFamily* f = model_family(c);
    if (!f) return "unknown architecture";
    const char* bad = f->check ? f->check(c) : NULL;
    if (bad) return bad;
    if (model_num_parameters(c) > MODEL_MAX_PARAMETERS) return "more than 2^40 parameters";
    return NULL;
}

int preset_config(const char* name, ModelConfig* c) {
    for (int a = 0; a < NUM_ARCHS; a++)
        if (model_families[a]->preset(name, c)) return 0;
    return 1;
}

size_t model_num_parameters(const ModelConfig* c) {
    const ModelFamily* f = model_family(c);
    size_t n = 0, rows, cols;
    for (int i = 0; i < f->n_root; i++) {
        spec_shape(c, &f->root[i], &rows, &cols);
        n += rows * cols;
    }
    for (int i = 0; i < f->n_block; i++) {
        spec_shape(c, &f->block[i], &rows, &cols);
        n += rows * cols * (size_t)c->num_layers;
    }
    return n;
}

void model_describe(const ModelConfig* c, int terse, char* out, size_t n) {
    const ModelFamily* f = model_family(c);
    if (!f) { snprintf(out, n, "unknown model family %d", c->arch); return; }
    f->describe(c, terse, out, n);
    const size_t at = strlen(out);
    if (c->norm_eps != MODEL_DEFAULT_NORM_EPS && at < n)
        snprintf(out + at, n - at, terse ? " eps=%g" : ", norm eps %g", (double)c->norm_eps);
}

void model_rope_text(const ModelConfig* c, char* out, size_t n) {
    if (c->rope_factor > 1.0f)
        snprintf(out, n, "theta %g, llama3 scaling: factor %g, low_freq_factor %g, high_freq_factor %g, original_max_pos %d",
                 (double)c->rope_theta, (double)c->rope_factor, (double)c->rope_low_freq_factor,
                 (double)c->rope_high_freq_factor, c->rope_original_max_pos);
    else
        snprintf(out, n, "theta %g, no scaling", (double)c->rope_theta);
}

int build_layout(ModelLayout* m, const ModelConfig* c, int layers_per_unit, int shard_count) {
    memset(m, 0, sizeof(*m));
    // Nothing is computed or allocated from an unchecked config: the bounds come first.
    if (model_config_check(c) != NULL || layers_per_unit < 1 || layers_per_unit > INT32_MAX / 2 || shard_count < 1)
        return 1;
    // A unit holds at most FLAT_UNIT_MAX_TENSORS tensors: more would be dropped.
    int per_unit = layers_per_unit < c->num_layers ? layers_per_unit : c->num_layers;
    if (per_unit > MODEL_MAX_LAYERS_PER_UNIT) return 1;
    const ModelFamily* f = model_family(c);
    m->config = *c;
    m->family = f;
    m->layers_per_unit = layers_per_unit;
    m->n_units = 1 + (c->num_layers + layers_per_unit - 1) / layers_per_unit;   // <= 100001
    m->units = (FlatUnit*)calloc((size_t)m->n_units, sizeof(FlatUnit));
    if (!m->units) { m->n_units = 0; return 2; }
    char name[FLAT_UNIT_NAME_LEN];
    size_t rows, cols;
    int full = 0;
    for (int i = 0; i < f->n_root; i++) {
        spec_name(f, &f->root[i], 0, 0, name, sizeof(name));
        spec_shape(c, &f->root[i], &rows, &cols);
        full |= flat_unit_add(&m->units[0], name, rows, cols, f->root[i].decay) < 0;
    }
    for (int l = 0; l < c->num_layers; l++) {
        FlatUnit* u = &m->units[1 + l / layers_per_unit];
        for (int j = 0; j < f->n_block; j++) {
            spec_name(f, &f->block[j], 1, l, name, sizeof(name));
            spec_shape(c, &f->block[j], &rows, &cols);
            full |= flat_unit_add(u, name, rows, cols, f->block[j].decay) < 0;
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

const TensorSpec* unit_tensor_spec(const ModelLayout* m, int u, int i, int* layer) {
    const ModelFamily* f = m->family;
    if (u == 0) { *layer = 0; return &f->root[i]; }
    *layer = (u - 1) * m->layers_per_unit + i / f->n_block;
    return &f->block[i % f->n_block];
}

int unit_tensor_index(const ModelLayout* m, int u, int i) {
    const ModelFamily* f = m->family;
    if (u == 0) return i;
    return f->n_root + (u - 1) * m->layers_per_unit * f->n_block + i;
}
