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

// ---- tensor parallelism

// A tensor's boxes are its stochastic-rounding key runs (build_layout_tp).
_Static_assert(MAX_SEGMENTS <= FLAT_TENSOR_MAX_KEY_RUNS, "a FlatTensor holds a key run per TP box");

// The view of a tensor of spec s on TP rank t of tp (model.h: a vector as [n, 1]). Its local
// shape is the boxes' rows stacked, by their cols.
static void spec_tp_view(const ModelConfig* c, const TensorSpec* s, int tp, int t, TpView* v) {
    size_t rows, cols;
    spec_shape(c, s, &rows, &cols);
    const int vector = s->rows == DIM_ONE;
    memset(v, 0, sizeof(*v));
    v->global_rows = vector ? cols : rows;
    v->global_cols = vector ? 1 : cols;
    v->replicated = tp <= 1 || s->tp == TP_REPLICATED;
    v->n_boxes = 1;
    TpBox* b = &v->boxes[0];
    b->rows = v->global_rows;
    b->cols = v->global_cols;
    if (v->replicated) return;
    const size_t n = (size_t)tp, r = (size_t)t;
    if (s->tp == TP_ROW && !vector) {   // the input features (the tables have no row-parallel vector)
        b->cols = v->global_cols / n;
        b->global_col = r * b->cols;
        return;
    }
    // COLUMN and VOCAB: rows by range, each segment on its own (VOCAB and an unsegmented
    // COLUMN are one segment of every row).
    v->n_boxes = s->n_segments > 0 ? s->n_segments : 1;
    size_t local_row = 0;
    for (int i = 0; i < v->n_boxes; i++) {
        size_t seg_rows = v->global_rows, first = 0;
        if (s->n_segments > 0) first = spec_segment_row(c, s, i, &seg_rows);
        b = &v->boxes[i];
        b->rows = seg_rows / n;
        b->global_row = first + r * b->rows;
        b->local_row = local_row;
        b->cols = v->global_cols;
        local_row += b->rows;
    }
}

size_t tp_view_global_element(const TpView* v, size_t e, size_t* run) {
    const size_t cols = v->boxes[0].cols, row = e / cols, col = e % cols;
    const TpBox* b = &v->boxes[0];
    for (int i = 1; i < v->n_boxes && row >= v->boxes[i].local_row; i++) b = &v->boxes[i];
    // A box as wide as the tensor is one run to its end; a narrower one (ROW) to the row's end.
    if (run) *run = cols == v->global_cols ? (b->local_row + b->rows) * cols - e : cols - col;
    return (b->global_row + row - b->local_row) * v->global_cols + b->global_col + col;
}

void layout_tp_view(const ModelLayout* m, int u, int i, TpView* v) {
    int layer;
    spec_tp_view(&m->config, unit_tensor_spec(m, u, i, &layer), m->tp_size, m->tp_rank, v);
}

size_t layout_global_element(const ModelLayout* m, int u, int i, size_t e) {
    TpView v;
    layout_tp_view(m, u, i, &v);
    return tp_view_global_element(&v, e, NULL);
}

int model_tp_check(const ModelConfig* c, int tp, char* msg, size_t n) {
    const char* bad = model_config_check(c);
    if (bad) { snprintf(msg, n, "%s", bad); return 1; }
    if (tp < 1) { snprintf(msg, n, "--tp %d is not a positive number", tp); return 1; }
    const ModelFamily* f = model_family(c);
    // What a rank must hold whole (heads), then the split widths, each by the name a user knows.
    const size_t mlp = model_dim(c, family_block_role(f, BLOCK_FCPROJW)->cols);
    if (c->num_heads % tp) snprintf(msg, n, "--tp %d does not divide the %d heads", tp, c->num_heads);
    else if (family_has_config(f, offsetof(ModelConfig, num_kv_heads)) && c->num_kv_heads % tp)
        snprintf(msg, n, "--tp %d does not divide the %d kv heads", tp, c->num_kv_heads);
    else if (mlp % (size_t)tp) snprintf(msg, n, "--tp %d does not divide the MLP width %zu", tp, mlp);
    else if (c->padded_vocab_size % tp)
        snprintf(msg, n, "--tp %d does not divide the padded vocabulary %d", tp, c->padded_vocab_size);
    else return 0;
    return 1;
}

int build_layout(ModelLayout* m, const ModelConfig* c, int layers_per_unit, int shard_count) {
    return build_layout_tp(m, c, layers_per_unit, shard_count, 1, 0);
}

int build_layout_tp(ModelLayout* m, const ModelConfig* c, int layers_per_unit, int shard_count, int tp_size, int tp_rank) {
    memset(m, 0, sizeof(*m));
    // Nothing is computed or allocated from an unchecked config: the bounds come first.
    if (model_config_check(c) != NULL || layers_per_unit < 1 || layers_per_unit > INT32_MAX / 2 || shard_count < 1)
        return 1;
    char why[160];
    if (model_tp_check(c, tp_size, why, sizeof(why)) || tp_rank < 0 || tp_rank >= tp_size) return 1;
    // A unit holds at most FLAT_UNIT_MAX_TENSORS tensors: more would be dropped.
    int per_unit = layers_per_unit < c->num_layers ? layers_per_unit : c->num_layers;
    if (per_unit > MODEL_MAX_LAYERS_PER_UNIT) return 1;
    const ModelFamily* f = model_family(c);
    m->config = *c;
    m->family = f;
    m->layers_per_unit = layers_per_unit;
    m->tp_size = tp_size;
    m->tp_rank = tp_rank;
    m->n_units = 1 + (c->num_layers + layers_per_unit - 1) / layers_per_unit;   // <= 100001
    m->units = (FlatUnit*)calloc((size_t)m->n_units, sizeof(FlatUnit));
    if (!m->units) { m->n_units = 0; return 2; }
    int full = 0;
    for (int l = -1; l < c->num_layers; l++) {   // -1: the root
        const int is_block = l >= 0;
        FlatUnit* u = &m->units[is_block ? 1 + l / layers_per_unit : 0];
        for (int j = 0; j < (is_block ? f->n_block : f->n_root); j++) {
            const TensorSpec* s = is_block ? &f->block[j] : &f->root[j];
            char name[FLAT_UNIT_NAME_LEN];
            spec_name(f, s, is_block, l, name, sizeof(name));
            // The local shape: the view's boxes stacked (a vector stays one row).
            TpView v;
            spec_tp_view(c, s, tp_size, tp_rank, &v);
            size_t rows = 0;
            for (int b = 0; b < v.n_boxes; b++) rows += v.boxes[b].rows;
            const int vector = s->rows == DIM_ONE;
            const int at = flat_unit_add(u, name, vector ? 1 : rows, vector ? rows : v.boxes[0].cols, s->decay);
            full |= at < 0;
            if (at < 0) continue;
            // Its stochastic-rounding keys: each box's elements at their places in the global
            // unit (where the global tensor starts: the global numel of the tensors before it).
            FlatTensor* t = &u->tensors[at];
            t->n_key_runs = v.n_boxes;
            for (int b = 0; b < v.n_boxes; b++) {
                const TpBox* x = &v.boxes[b];
                t->key_runs[b] = (SrKeyRun){x->local_row * x->cols, x->rows, x->cols,
                                            u->global_numel + x->global_row * v.global_cols + x->global_col, v.global_cols};
            }
            u->global_numel += v.global_rows * v.global_cols;
        }
    }
    if (full) { free(m->units); m->units = NULL; m->n_units = 0; return 1; }  // (bounded above: cannot happen)
    for (int u = 0; u < m->n_units; u++) flat_unit_finalize(&m->units[u], shard_count, SHARD_ALIGN);
    m->num_parameters = model_num_parameters(c);
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
