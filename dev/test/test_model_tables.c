// The families' tensor tables (model/gpt2.c, model/llama3.c) hold what the rest of the
// program trusts them to: every loop over them (layout, init, checkpoints, llm.c and Hugging
// Face files, tensor parallelism) assumes the invariants checked here, for every family in
// the registry and several shapes of each. A new family's table is checked by this test
// without editing it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llmc.h"
#include "model/model.h"

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                             \
    do {                                                             \
        checks++;                                                    \
        if (!(cond)) {                                               \
            failures++;                                              \
            printf("not ok - model tables: ");                       \
            printf(__VA_ARGS__);                                     \
            printf("\n");                                            \
        }                                                            \
    } while (0)

static int is_norm_role(int is_block, int role) {
    return is_block ? role == BLOCK_LN1W || role == BLOCK_LN2W : role == ROOT_LNFW;
}

// The table alone, whatever the shape.
static void check_table(const ModelFamily* f) {
    const char* n = f->name;
    CHECK(f->n_block <= MODEL_MAX_BLOCK_TENSORS, "%s: %d block tensors, more than MODEL_MAX_BLOCK_TENSORS", n, f->n_block);
    int root_seen[NUM_ROOT_ROLES] = {0}, block_seen[NUM_BLOCK_ROLES] = {0};
    for (int i = 0; i < f->n_root; i++) {
        CHECK(f->root[i].role >= 0 && f->root[i].role < NUM_ROOT_ROLES, "%s: root tensor %s: bad role", n, f->root[i].name);
        if (f->root[i].role >= 0 && f->root[i].role < NUM_ROOT_ROLES) root_seen[f->root[i].role]++;
    }
    for (int i = 0; i < f->n_block; i++) {
        CHECK(f->block[i].role >= 0 && f->block[i].role < NUM_BLOCK_ROLES, "%s: block tensor %s: bad role", n, f->block[i].name);
        if (f->block[i].role >= 0 && f->block[i].role < NUM_BLOCK_ROLES) block_seen[f->block[i].role]++;
    }
    for (int r = 0; r < NUM_ROOT_ROLES; r++) CHECK(root_seen[r] <= 1, "%s: root role %d given to %d tensors", n, r, root_seen[r]);
    for (int r = 0; r < NUM_BLOCK_ROLES; r++) CHECK(block_seen[r] <= 1, "%s: block role %d given to %d tensors", n, r, block_seen[r]);
    // What the schedule cannot run without.
    const int root_needed[] = {ROOT_WTE, ROOT_LNFW};
    const int block_needed[] = {BLOCK_LN1W, BLOCK_QKVW, BLOCK_PROJW, BLOCK_LN2W, BLOCK_FCW, BLOCK_FCPROJW};
    for (size_t i = 0; i < sizeof(root_needed) / sizeof(int); i++)
        CHECK(root_seen[root_needed[i]] == 1, "%s: no root tensor of role %d", n, root_needed[i]);
    for (size_t i = 0; i < sizeof(block_needed) / sizeof(int); i++)
        CHECK(block_seen[block_needed[i]] == 1, "%s: no block tensor of role %d", n, block_needed[i]);
    // LayerNorm has a bias, RMSNorm none.
    const int ln = f->norm == NORM_LAYERNORM;
    CHECK((block_seen[BLOCK_LN1B] == ln) && (block_seen[BLOCK_LN2B] == ln) && (root_seen[ROOT_LNFB] == ln),
          "%s: the norms' biases do not match its norm kind", n);

    int llmc_kinds = 0, no_llmc = 0;
    for (int t = 0; t < f->n_root + f->n_block; t++) {
        const int is_block = t >= f->n_root;
        const TensorSpec* s = is_block ? &f->block[t - f->n_root] : &f->root[t];
        const int vector = s->rows == DIM_ONE;
        CHECK(s->name && s->name[0], "%s: a tensor without a name", n);
        CHECK(s->decay == !vector, "%s: %s: weight decay %d, but it is a %s", n, s->name, s->decay, vector ? "vector" : "matrix");
        CHECK(s->init != INIT_ONES || (vector && is_norm_role(is_block, s->role)), "%s: %s: ones for a non-norm", n, s->name);
        CHECK(s->init != INIT_ZEROS || vector, "%s: %s: a zero-initialised matrix", n, s->name);
        CHECK(!vector || s->init == INIT_ONES || s->init == INIT_ZEROS, "%s: %s: a random vector", n, s->name);
        CHECK(s->tp != TP_VOCAB || s->rows == DIM_VOCAB, "%s: %s: split by vocabulary rows without vocabulary rows", n, s->name);
        CHECK(s->tp != TP_ROW || !vector, "%s: %s: a row-parallel vector", n, s->name);
        CHECK(!is_norm_role(is_block, s->role) || s->tp == TP_REPLICATED, "%s: %s: a split norm", n, s->name);
        CHECK(s->hf_layout == HF_AS_IS || !vector, "%s: %s: a transposed vector", n, s->name);
        CHECK(!is_block || !s->hf_after_blocks, "%s: %s: a block tensor after the blocks", n, s->name);
        CHECK(s->n_segments >= 0 && s->n_segments <= MAX_SEGMENTS && s->n_segments != 1, "%s: %s: %d segments", n, s->name,
              s->n_segments);
        // Hugging Face names: the tensor's, or every segment's.
        int named_segments = 0;
        for (int g = 0; g < s->n_segments; g++) named_segments += s->segments[g].hf_name != NULL;
        CHECK(s->hf_name ? named_segments == 0 : s->n_segments > 0 && named_segments == s->n_segments,
              "%s: %s: Hugging Face names neither the tensor's nor every segment's", n, s->name);
        for (int g = 0; g < s->n_segments; g++)
            CHECK(s->segments[g].hf_rope == HF_ROPE_NONE || f->rope, "%s: %s: a RoPE permutation without RoPE", n, s->name);
        // Streams: unique across every family (a shared stream would correlate two tensors).
        for (int a = 0; a < NUM_ARCHS; a++) {
            const ModelFamily* g = model_family_at(a);
            for (int u = 0; u < g->n_root + g->n_block; u++) {
                const TensorSpec* o = u < g->n_root ? &g->root[u] : &g->block[u - g->n_root];
                CHECK(o == s || o->init_stream != s->init_stream, "%s: %s and %s: %s share init stream %d", n, s->name, g->name,
                      o->name, s->init_stream);
            }
        }
        if (s->llmc_kind >= 0) llmc_kinds |= 1 << s->llmc_kind;
        else no_llmc++;
    }
    // llm.c kinds: none, or each of 0 .. n-1 once (llmc_offset walks them in order).
    const int total = f->n_root + f->n_block;
    CHECK(no_llmc == total || (no_llmc == 0 && llmc_kinds == (1 << total) - 1), "%s: llm.c kinds are not 0 .. %d, each once", n,
          total - 1);
    // Config keys: distinct fields inside ModelConfig.
    for (int i = 0; i < f->n_config_keys; i++) {
        CHECK(f->config_keys[i].offset + sizeof(int) <= sizeof(ModelConfig), "%s: config key %s outside ModelConfig", n,
              f->config_keys[i].key);
        for (int j = 0; j < i; j++)
            CHECK(f->config_keys[i].offset != f->config_keys[j].offset && strcmp(f->config_keys[i].key, f->config_keys[j].key),
                  "%s: config keys %s and %s repeat", n, f->config_keys[i].key, f->config_keys[j].key);
    }
}

// The table under one config: shapes, segments, the layout, names.
static void check_shape(const ModelConfig* c, const char* what) {
    const ModelFamily* f = model_family(c);
    const char* bad = model_config_check(c);
    CHECK(bad == NULL, "%s: the config fails its check: %s", what, bad ? bad : "");
    if (bad) return;
    const size_t C = (size_t)c->channels, hs = C / (size_t)c->num_heads;
    size_t qkv, fc, fcproj_rows, fcproj_cols, cols, rows;
    spec_shape(c, family_block_role(f, BLOCK_QKVW), &qkv, &cols);
    CHECK(cols == C && qkv > C && (qkv - C) % (2 * hs) == 0, "%s: qkv is [%zu, %zu]: not q (C) plus k and v of whole heads", what,
          qkv, cols);
    spec_shape(c, family_block_role(f, BLOCK_PROJW), &rows, &cols);
    CHECK(rows == C && cols == C, "%s: the attention's projection is [%zu, %zu]", what, rows, cols);
    spec_shape(c, family_block_role(f, BLOCK_FCW), &fc, &cols);
    spec_shape(c, family_block_role(f, BLOCK_FCPROJW), &fcproj_rows, &fcproj_cols);
    CHECK(cols == C && fcproj_rows == C && fc == (f->mlp == MLP_SWIGLU ? 2 : 1) * fcproj_cols,
          "%s: the MLP's widths (%zu, %zu) do not fit its activation", what, fc, fcproj_cols);
    // A bias has its weight's rows and split.
    const int pairs[][2] = {{BLOCK_QKVB, BLOCK_QKVW}, {BLOCK_PROJB, BLOCK_PROJW}, {BLOCK_FCB, BLOCK_FCW}, {BLOCK_FCPROJB, BLOCK_FCPROJW}};
    for (int i = 0; i < 4; i++) {
        const TensorSpec* b = family_block_role(f, pairs[i][0]);
        const TensorSpec* w = family_block_role(f, pairs[i][1]);
        if (!b) continue;
        size_t br, bc, wr, wc;
        spec_shape(c, b, &br, &bc);
        spec_shape(c, w, &wr, &wc);
        CHECK(br == 1 && bc == wr, "%s: %s is [%zu, %zu] for a weight of %zu rows", what, b->name, br, bc, wr);
        CHECK(b->tp == (w->tp == TP_COLUMN ? TP_COLUMN : TP_REPLICATED), "%s: %s: its split does not follow %s's", what, b->name,
              w->name);
        CHECK(b->n_segments == w->n_segments, "%s: %s and %s: different segments", what, b->name, w->name);
    }
    // Segments cover the rows (a bias's segments cover its columns: its rows are one).
    int n_tensors = model_tensor_count(c);
    for (int i = 0; i < f->n_root + f->n_block; i++) {
        const TensorSpec* s = i < f->n_root ? &f->root[i] : &f->block[i - f->n_root];
        if (!s->n_segments) continue;
        spec_shape(c, s, &rows, &cols);
        size_t sum = 0, seg_rows;
        for (int g = 0; g < s->n_segments; g++) {
            CHECK(spec_segment_row(c, s, g, &seg_rows) == sum, "%s: %s: segment %d does not start after the one before", what,
                  s->name, g);
            sum += seg_rows;
        }
        CHECK(sum == (rows == 1 ? cols : rows), "%s: %s: segments of %zu rows in all, the tensor has %zu", what, s->name, sum,
              rows == 1 ? cols : rows);
    }
    // Hugging Face names: distinct over the whole model.
    char** names = (char**)calloc((size_t)n_tensors * MAX_SEGMENTS, sizeof(char*));
    int n_names = 0;
    for (int i = 0; i < n_tensors; i++) {
        const ModelTensor t = model_tensor_at(c, i);
        const int parts = t.spec->hf_name ? 1 : t.spec->n_segments;
        for (int g = 0; g < parts; g++) {
            char name[160];
            spec_hf_name(f, t.spec, t.spec->hf_name ? -1 : g, t.is_block, t.layer, name, sizeof(name));
            for (int j = 0; j < n_names; j++) CHECK(strcmp(names[j], name) != 0, "%s: Hugging Face name %s twice", what, name);
            names[n_names++] = strdup(name);
        }
    }
    for (int j = 0; j < n_names; j++) free(names[j]);
    free(names);
    // The layout: every tensor once, in model order, the parameters all counted.
    for (int W = 1; W <= 3; W += 2)
        for (int lpu = 1; lpu <= 2; lpu++) {
            ModelLayout m;
            CHECK(build_layout(&m, c, lpu, W) == 0, "%s: no layout for W %d, %d layers a unit", what, W, lpu);
            size_t numel = 0;
            int index = 0;
            for (int u = 0; u < m.n_units; u++)
                for (int i = 0; i < m.units[u].n_tensors; i++, index++) {
                    int layer;
                    const TensorSpec* s = unit_tensor_spec(&m, u, i, &layer);
                    const ModelTensor t = model_tensor_at(c, index);
                    char name[FLAT_UNIT_NAME_LEN];
                    spec_name(f, s, u > 0, layer, name, sizeof(name));
                    CHECK(unit_tensor_index(&m, u, i) == index && t.spec == s && t.layer == layer,
                          "%s: unit %d tensor %d is not model tensor %d", what, u, i, index);
                    CHECK(!strcmp(name, m.units[u].tensors[i].name), "%s: unit %d tensor %d is %s, its row names %s", what, u, i,
                          m.units[u].tensors[i].name, name);
                    CHECK(model_tensor_offset(c, index) == numel, "%s: model tensor %d's offset", what, index);
                    numel += m.units[u].tensors[i].numel;
                }
            CHECK(index == n_tensors, "%s: the layout holds %d tensors, the model %d", what, index, n_tensors);
            CHECK(numel == model_num_parameters(c) && m.num_parameters == numel, "%s: %zu parameters laid out, %zu counted", what,
                  numel, model_num_parameters(c));
            free(m.units);
        }
    if (llmc_has_layout(c)) {
        // llm.c's offsets tile the file: each kind right after the one before.
        size_t at = 0;
        int is_block;
        for (int k = 0; llmc_kind_spec(c, k, &is_block); k++) {
            spec_shape(c, llmc_kind_spec(c, k, &is_block), &rows, &cols);
            CHECK(llmc_offset(c, k, 0) == at, "%s: llm.c kind %d at %zu, expected %zu", what, k, llmc_offset(c, k, 0), at);
            at += rows * cols * (is_block ? (size_t)c->num_layers : 1);
        }
        CHECK(at == model_num_parameters(c), "%s: llm.c's kinds hold %zu parameters of %zu", what, at, model_num_parameters(c));
    }
    char line[256];
    model_describe(c, 0, line, sizeof(line));
    CHECK(strstr(line, f->title) == line, "%s: the model line \"%s\" does not start with %s", what, line, f->title);
}

int main(void) {
    for (int a = 0; a < NUM_ARCHS; a++) {
        const ModelFamily* f = model_family_at(a);
        check_table(f);
        CHECK(model_family_named(f->name) == f, "%s: not found by its name", f->name);
        ModelConfig c;
        CHECK(preset_config(f->default_preset, &c) == 0 && c.arch == a, "%s: its default preset %s is not its own", f->name,
              f->default_preset);
        check_shape(&c, f->default_preset);
        // Smaller and odder shapes: 3 layers, 6 heads (3 kv heads where the family has them).
        c.num_layers = 3; c.num_heads = 6; c.channels = 6 * 16;
        if (c.num_kv_heads) c.num_kv_heads = 3;
        c.max_seq_len = 48; c.vocab_size = 1000; c.padded_vocab_size = pad_vocab(1000);
        if (c.ffn_dim) c.ffn_dim = 200;
        char what[64];
        snprintf(what, sizeof(what), "%s L3 NH6 C96", f->name);
        check_shape(&c, what);
    }
    const char* presets[] = {"d12", "d48", "llama3:1b", "llama3:8b"};
    for (int i = 0; i < 4; i++) {
        ModelConfig c;
        CHECK(preset_config(presets[i], &c) == 0, "preset %s unknown", presets[i]);
        check_shape(&c, presets[i]);
    }
    ModelConfig c;
    preset_config("d12", &c);
    c.arch = NUM_ARCHS;
    CHECK(model_config_check(&c) && !strcmp(model_config_check(&c), "unknown architecture"), "an unknown family passes the check");
    if (failures == 0) printf("ok - model tables: %d checks of %d families' tables, each at its default preset, a 3-layer shape and "
                              "d12/d48/llama3:1b/8b (roles, init, decay, splits, segments, Hugging Face names, layout, llm.c offsets)\n",
                              checks, NUM_ARCHS);
    return failures != 0;
}
