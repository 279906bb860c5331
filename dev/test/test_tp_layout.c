// The tensor-parallel layout (model/model.h: model_tp_check, build_layout_tp, layout_tp_view,
// layout_global_element) for GPT-2 and Llama 3 with grouped-query attention, on meshes of tp x
// shard ranks:
//   - every global element of every tensor is owned exactly once over all (tp, shard) ranks
//     when the tensor is split, and exactly once per TP rank when it is replicated (each rank's
//     flat_owned_pieces walked, each element mapped by layout_global_element, counted);
//   - every TP rank's units have the same local shapes, offsets and shard sizes; the names are
//     the global names; the local sizes are the global ones over tp (whole when replicated);
//   - the boxes tile the local tensor and say what layout_global_element says, and for q|k|v
//     and gate|up they are the rows the split must give (whole heads, both halves);
//   - tp 1 is build_layout's layout, byte for byte, and its views are the identity;
//   - model_tp_check's refusals (heads, kv heads, MLP width, padded vocabulary, tp < 1), tp 1
//     passing, and build_layout_tp refusing what it refuses and a tp_rank outside [0, tp);
//   - model_init_parameters at tp > 1 draws tp 1's values at the mapped elements (bitwise), and
//     at tp 1 the bytes it drew before tensor parallelism existed (a hash of the whole model);
//   - llmc_read_model_file at tp > 1 reads the global elements of a rank's local ones;
//   - the stochastic-rounding keys (flat_unit_key_runs, sr_key_index): every local element of
//     every unit is keyed by its index in the unit at tp 1, every global element exactly once
//     over the TP ranks (a replicated one: the same key on each), the padding past the global
//     unit; at tp 1 every table is the identity (none).
// Usage: test_tp_layout TMPDIR (for the llm.c model file).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/flat_unit.h"
#include "model/llmc.h"
#include "model/model.h"
#include "model/state.h"

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                             \
    do {                                                             \
        checks++;                                                    \
        if (!(cond)) {                                               \
            failures++;                                              \
            printf("not ok - tp layout: ");                          \
            printf(__VA_ARGS__);                                     \
            printf("\n");                                            \
        }                                                            \
    } while (0)

#define SEED 1337

static void* xcalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) { printf("not ok - tp layout: out of memory\n"); exit(1); }
    return p;
}

// A family's default preset reshaped (every other field, RoPE's among them, stays the preset's).
static ModelConfig shape(const char* preset, int L, int NH, int KVH, int C, int F, int V) {
    ModelConfig c;
    if (preset_config(preset, &c)) { printf("not ok - tp layout: no preset %s\n", preset); exit(1); }
    c.num_layers = L; c.num_heads = NH; c.channels = C;
    if (c.num_kv_heads) c.num_kv_heads = KVH;
    if (c.ffn_dim) c.ffn_dim = F;
    c.max_seq_len = 32; c.vocab_size = V; c.padded_vocab_size = pad_vocab(V);
    return c;
}

// A rank's shard arena: its pieces and their elements.
typedef struct {
    ModelLayout m;
    FlatPiece* pieces;
    int n_pieces;
    size_t arena_len;
    float* arena;
} Rank;

static int rank_open(Rank* r, const ModelConfig* c, int lpu, int shards, int tp, int tp_rank, int shard_rank) {
    memset(r, 0, sizeof(*r));
    if (build_layout_tp(&r->m, c, lpu, shards, tp, tp_rank)) return 1;
    r->pieces = (FlatPiece*)xcalloc((size_t)flat_tensor_count(r->m.units, r->m.n_units), sizeof(FlatPiece));
    r->n_pieces = flat_owned_pieces(r->m.units, r->m.n_units, shard_rank, r->pieces);
    for (int u = 0; u < r->m.n_units; u++) r->arena_len += r->m.units[u].shard;
    r->arena = (float*)xcalloc(r->arena_len, sizeof(float));
    return 0;
}

static void rank_close(Rank* r) {
    free(r->m.units);
    free(r->pieces);
    free(r->arena);
}

// Where piece p's local elements lie in the whole model's buffer (model_tensor_at's order,
// global tensors): local element e at base + tp_view_global_element(view, e).
typedef struct { size_t base; TpView view; } PieceMap;
static PieceMap piece_map(const Rank* r, const FlatPiece* p) {
    PieceMap pm;
    pm.base = model_tensor_offset(&r->m.config, unit_tensor_index(&r->m, p->unit, p->tensor));
    layout_tp_view(&r->m, p->unit, p->tensor, &pm.view);
    return pm;
}
static size_t model_element(const PieceMap* pm, size_t e) { return pm->base + tp_view_global_element(&pm->view, e, NULL); }

// The whole model at tp 1, initialised (one shard): the reference every mesh is held to.
static float* whole_model(const ModelConfig* c) {
    Rank r;
    if (rank_open(&r, c, 1, 1, 1, 0, 0)) { printf("not ok - tp layout: no tp 1 layout\n"); exit(1); }
    model_init_parameters(&r.m, r.pieces, r.n_pieces, r.arena, SEED);
    float* whole = (float*)xcalloc(model_num_parameters(c), sizeof(float));
    for (int i = 0; i < r.n_pieces; i++) {
        const PieceMap pm = piece_map(&r, &r.pieces[i]);
        for (size_t e = r.pieces[i].lo; e < r.pieces[i].hi; e++) whole[model_element(&pm, e)] = r.arena[r.pieces[i].at + e - r.pieces[i].lo];
    }
    rank_close(&r);
    return whole;
}

// The boxes of every tensor of a layout: they tile the local tensor in order, lie inside the
// global one, and map as layout_global_element does.
static void check_views(const ModelLayout* m, const char* what) {
    for (int u = 0; u < m->n_units; u++)
        for (int i = 0; i < m->units[u].n_tensors; i++) {
            const FlatTensor* t = &m->units[u].tensors[i];
            TpView v;
            layout_tp_view(m, u, i, &v);
            const int vector = t->rows == 1 && v.global_cols == 1;
            const size_t local_rows = vector ? t->cols : t->rows, local_cols = vector ? 1 : t->cols;
            size_t at = 0;
            int ok = v.n_boxes >= 1 && v.n_boxes <= MAX_SEGMENTS;
            for (int b = 0; ok && b < v.n_boxes; b++) {
                const TpBox* x = &v.boxes[b];
                ok = x->local_row == at && x->cols == local_cols && x->global_row + x->rows <= v.global_rows &&
                     x->global_col + x->cols <= v.global_cols;
                at += x->rows;
                for (size_t r = 0; ok && r < x->rows; r++)
                    for (size_t col = 0; ok && col < x->cols; col++)
                        ok = layout_global_element(m, u, i, (x->local_row + r) * local_cols + col) ==
                             (x->global_row + r) * v.global_cols + x->global_col + col;
            }
            CHECK(ok && at == local_rows, "%s: %s: its boxes do not tile it or disagree with layout_global_element", what, t->name);
            CHECK(v.replicated == (m->tp_size == 1 || v.global_rows * v.global_cols == t->numel),
                  "%s: %s: replicated %d, but %zu of %zu elements are local", what, t->name, v.replicated, t->numel,
                  v.global_rows * v.global_cols);
        }
}

// TP rank r's stochastic-rounding keys (its units' tables): every local element of unit u is
// keyed by its index in whole's unit u (tp 1: the tensor's offset there + its global element),
// counted in kcount (whole's units back to back, from ubase[u]); the padding keyed past the
// global unit. Returns how many elements were keyed otherwise.
static size_t check_keys(const ModelLayout* r, const ModelLayout* whole, const size_t* ubase, unsigned char* kcount) {
    size_t bad = 0;
    SrKeyRun runs[FLAT_UNIT_MAX_KEY_RUNS];
    for (int u = 0; u < r->n_units; u++) {
        const FlatUnit* lu = &r->units[u];
        const int n = flat_unit_key_runs(lu, runs);
        for (int i = 0; i < lu->n_tensors; i++) {
            TpView v;
            layout_tp_view(r, u, i, &v);
            for (size_t e = 0; e < lu->tensors[i].numel; e++) {
                const uint64_t key = sr_key_index(runs, n, lu->tensors[i].offset + e);
                const size_t want = whole->units[u].tensors[i].offset + tp_view_global_element(&v, e, NULL);
                bad += key != want;
                if (key == want) kcount[ubase[u] + key]++;
            }
        }
        for (size_t p = lu->numel; p < lu->padded; p++) bad += sr_key_index(runs, n, p) != whole->units[u].numel + p - lu->numel;
    }
    return bad;
}

// Every (tp rank, shard rank) of a tp x shards mesh: each global element owned once (tp times
// when replicated), every TP rank's units the same shapes as TP rank 0's, each keyed once
// (check_keys; tp times when replicated).
static void check_mesh(const ModelConfig* c, int tp, int shards, int lpu, const char* name) {
    char what[160];
    snprintf(what, sizeof(what), "%s tp %d x shard %d, %d layers a unit", name, tp, shards, lpu);
    const size_t P = model_num_parameters(c);
    unsigned char* count = (unsigned char*)xcalloc(P, 1);
    unsigned char* expected = (unsigned char*)xcalloc(P, 1);
    ModelLayout first;
    if (build_layout_tp(&first, c, lpu, shards, tp, 0)) { CHECK(0, "%s: no layout", what); free(count); free(expected); return; }
    ModelLayout whole;
    build_layout(&whole, c, lpu, shards);
    size_t* ubase = (size_t*)xcalloc((size_t)whole.n_units + 1, sizeof(size_t));
    for (int u = 0; u < whole.n_units; u++) ubase[u + 1] = ubase[u] + whole.units[u].numel;
    unsigned char* kcount = (unsigned char*)xcalloc(ubase[whole.n_units], 1);
    unsigned char* kexpected = (unsigned char*)xcalloc(ubase[whole.n_units], 1);
    size_t bad_keys = 0;
    int same = 1, beyond = 0;
    for (int t = 0; t < tp; t++)
        for (int s = 0; s < shards; s++) {
            Rank r;
            if (rank_open(&r, c, lpu, shards, tp, t, s)) { CHECK(0, "%s: no layout for TP rank %d", what, t); continue; }
            CHECK(r.m.tp_size == tp && r.m.tp_rank == t && r.m.num_parameters == P, "%s: TP rank %d: tp %d/%d, %zu parameters", what,
                  t, r.m.tp_rank, r.m.tp_size, r.m.num_parameters);
            for (int u = 0; u < r.m.n_units; u++) {
                same &= r.m.units[u].n_tensors == first.units[u].n_tensors && r.m.units[u].padded == first.units[u].padded &&
                        r.m.units[u].shard == first.units[u].shard;
                for (int i = 0; i < r.m.units[u].n_tensors; i++) {
                    const FlatTensor *a = &r.m.units[u].tensors[i], *b = &first.units[u].tensors[i], *g = &whole.units[u].tensors[i];
                    same &= a->rows == b->rows && a->cols == b->cols && a->numel == b->numel && a->offset == b->offset &&
                            !strcmp(a->name, g->name) && a->decay == g->decay;
                    TpView v;
                    layout_tp_view(&r.m, u, i, &v);
                    CHECK(a->numel * (v.replicated ? 1 : (size_t)tp) == g->numel && v.global_rows * v.global_cols == g->numel,
                          "%s: %s on TP rank %d: %zu local elements of %zu", what, a->name, t, a->numel, g->numel);
                    const size_t base = model_tensor_offset(c, unit_tensor_index(&r.m, u, i));
                    if (t == 0 && s == 0) memset(expected + base, v.replicated ? tp : 1, g->numel);
                    if (t == 0 && s == 0) memset(kexpected + ubase[u] + g->offset, v.replicated ? tp : 1, g->numel);
                }
            }
            if (s == 0) check_views(&r.m, what);
            if (s == 0) bad_keys += check_keys(&r.m, &whole, ubase, kcount);
            for (int p = 0; p < r.n_pieces; p++) {
                const PieceMap pm = piece_map(&r, &r.pieces[p]);
                for (size_t e = r.pieces[p].lo; e < r.pieces[p].hi; e++) {
                    const size_t at = model_element(&pm, e);
                    if (at < P) count[at]++;
                    else beyond++;
                }
            }
            rank_close(&r);
        }
    CHECK(same, "%s: the TP ranks' units differ in shapes, offsets, names or shard sizes", what);
    size_t bad = 0, first_bad = 0;
    for (size_t k = 0; k < P; k++)
        if (count[k] != expected[k] && bad++ == 0) first_bad = k;
    CHECK(bad == 0 && beyond == 0, "%s: %zu elements owned the wrong number of times (first: model element %zu, %d times, "
          "expected %d), %d mapped beyond the model", what, bad, first_bad, count[first_bad], expected[first_bad], beyond);
    CHECK(bad_keys == 0, "%s: %zu local elements not keyed by their index in the unit at tp 1", what, bad_keys);
    bad = 0;
    for (size_t k = 0; k < ubase[whole.n_units]; k++)
        if (kcount[k] != kexpected[k] && bad++ == 0) first_bad = k;
    CHECK(bad == 0, "%s: %zu keys of the global units used the wrong number of times (first: %zu, %d times, expected %d)",
          what, bad, first_bad, bad ? kcount[first_bad] : 0, bad ? kexpected[first_bad] : 0);
    free(first.units);
    free(whole.units);
    free(count);
    free(expected);
    free(ubase);
    free(kcount);
    free(kexpected);
}

// The boxes the split must give q|k|v and gate|up: each segment's own slice of rows.
static void check_fused_boxes(void) {
    // Llama 3, 8 heads, 4 kv heads of 16: q 128 rows, k and v 64 each; F 96.
    ModelConfig c = shape("llama3:tiny", 1, 8, 4, 128, 96, 1000);
    ModelLayout m;
    CHECK(build_layout_tp(&m, &c, 1, 1, 2, 1) == 0, "llama3 tp 2: no layout");
    const ModelFamily* f = model_family(&c);
    int qkv = -1, w13 = -1, w2 = -1, wte = -1;
    for (int i = 0; i < f->n_block; i++) {
        if (f->block[i].role == BLOCK_QKVW) qkv = i;
        if (f->block[i].role == BLOCK_FCW) w13 = i;
        if (f->block[i].role == BLOCK_FCPROJW) w2 = i;
    }
    for (int i = 0; i < f->n_root; i++) if (f->root[i].role == ROOT_WTE) wte = i;
    TpView v;
    layout_tp_view(&m, 1, qkv, &v);
    const TpBox want_qkv[3] = {{0, 64, 64, 0, 128}, {64, 128 + 32, 32, 0, 128}, {96, 192 + 32, 32, 0, 128}};
    CHECK(v.n_boxes == 3 && !memcmp(v.boxes, want_qkv, sizeof(want_qkv)) && v.global_rows == 256 && v.global_cols == 128,
          "llama3 tp rank 1 of 2: wqkv's boxes are not q's, k's and v's second halves");
    layout_tp_view(&m, 1, w13, &v);
    const TpBox want_w13[2] = {{0, 48, 48, 0, 128}, {48, 96 + 48, 48, 0, 128}};
    CHECK(v.n_boxes == 2 && !memcmp(v.boxes, want_w13, sizeof(want_w13)), "llama3 tp rank 1 of 2: w13's boxes are not gate's and up's second halves");
    layout_tp_view(&m, 1, w2, &v);
    const TpBox want_w2 = {0, 0, 128, 48, 48};
    CHECK(v.n_boxes == 1 && !memcmp(v.boxes, &want_w2, sizeof(want_w2)) && m.units[1].tensors[w2].cols == 48,
          "llama3 tp rank 1 of 2: w2 does not keep the second half of its columns");
    layout_tp_view(&m, 0, wte, &v);
    const TpBox want_wte = {0, 512, 512, 0, 128};
    CHECK(v.n_boxes == 1 && !memcmp(v.boxes, &want_wte, sizeof(want_wte)), "llama3 tp rank 1 of 2: the embedding is not rows 512..1024");
    free(m.units);
    // GPT-2's c_attn bias: a vector, its elements split per third (viewed as [3C, 1]).
    c = shape("d12", 1, 4, 0, 64, 0, 1000);
    CHECK(build_layout_tp(&m, &c, 1, 1, 4, 3) == 0, "gpt2 tp 4: no layout");
    f = model_family(&c);
    int qkvb = -1;
    for (int i = 0; i < f->n_block; i++) if (f->block[i].role == BLOCK_QKVB) qkvb = i;
    layout_tp_view(&m, 1, qkvb, &v);
    const TpBox want_b[3] = {{0, 48, 16, 0, 1}, {16, 64 + 48, 16, 0, 1}, {32, 128 + 48, 16, 0, 1}};
    CHECK(v.n_boxes == 3 && !memcmp(v.boxes, want_b, sizeof(want_b)) && m.units[1].tensors[qkvb].rows == 1 &&
          m.units[1].tensors[qkvb].cols == 48, "gpt2 tp rank 3 of 4: c_attn.bias is not the last quarter of each third");
    CHECK(layout_global_element(&m, 1, qkvb, 17) == 64 + 48 + 1, "gpt2 tp rank 3 of 4: c_attn.bias element 17 is not global 113");
    free(m.units);
}

// tp 1: build_layout's units exactly, every view the whole tensor, every element itself.
static void check_tp1(const ModelConfig* c, const char* name) {
    ModelLayout a, b;
    build_layout(&a, c, 1, 3);
    CHECK(build_layout_tp(&b, c, 1, 3, 1, 0) == 0 && a.n_units == b.n_units && b.tp_size == 1 && b.tp_rank == 0 &&
          !memcmp(a.units, b.units, sizeof(FlatUnit) * (size_t)a.n_units), "%s: tp 1 is not build_layout's layout", name);
    int identity = 1;
    for (int u = 0; u < a.n_units; u++)
        for (int i = 0; i < a.units[u].n_tensors; i++) {
            TpView v;
            layout_tp_view(&a, u, i, &v);
            identity &= v.replicated && v.n_boxes == 1;
            for (size_t e = 0; e < a.units[u].tensors[i].numel; e += 7) identity &= layout_global_element(&a, u, i, e) == e;
        }
    CHECK(identity, "%s: at tp 1 a view is not the whole tensor or an element not itself", name);
    SrKeyRun runs[FLAT_UNIT_MAX_KEY_RUNS];
    int keyed = 0;
    for (int u = 0; u < a.n_units; u++) keyed += flat_unit_key_runs(&a.units[u], runs);
    CHECK(keyed == 0, "%s: at tp 1 the rounding key tables hold %d runs, not none (each element keyed by itself)", name, keyed);
    free(a.units);
    free(b.units);
}

// Every (tp, shard) rank's initial values are tp 1's at the mapped elements, bitwise; and the
// llm.c file of that model, read at tp, the same.
static void check_init(const ModelConfig* c, int tp, int shards, const char* name, const char* llmc_path) {
    float* whole = whole_model(c);
    size_t bad_init = 0, bad_read = 0, values = 0;
    for (int t = 0; t < tp; t++)
        for (int s = 0; s < shards; s++) {
            Rank r;
            if (rank_open(&r, c, 1, shards, tp, t, s)) { CHECK(0, "%s: no layout at tp %d", name, tp); continue; }
            model_init_parameters(&r.m, r.pieces, r.n_pieces, r.arena, SEED);
            for (int p = 0; p < r.n_pieces; p++) {
                const PieceMap pm = piece_map(&r, &r.pieces[p]);
                for (size_t e = r.pieces[p].lo; e < r.pieces[p].hi; e++, values++)
                    bad_init += memcmp(&r.arena[r.pieces[p].at + e - r.pieces[p].lo], &whole[model_element(&pm, e)], sizeof(float)) != 0;
            }
            if (llmc_path) {
                char err[1024] = "";
                memset(r.arena, 0, r.arena_len * sizeof(float));
                CHECK(llmc_read_model_file(&r.m, r.pieces, r.n_pieces, r.arena, llmc_path, 3, err, sizeof(err)) == 0,
                      "%s: llmc_read_model_file at tp %d: %s", name, tp, err);
                for (int p = 0; p < r.n_pieces; p++) {
                    const PieceMap pm = piece_map(&r, &r.pieces[p]);
                    for (size_t e = r.pieces[p].lo; e < r.pieces[p].hi; e++)
                        bad_read += memcmp(&r.arena[r.pieces[p].at + e - r.pieces[p].lo], &whole[model_element(&pm, e)], sizeof(float)) != 0;
                }
            }
            rank_close(&r);
        }
    CHECK(bad_init == 0, "%s at tp %d x shard %d: %zu of %zu initial values are not tp 1's at their global element", name, tp, shards,
          bad_init, values);
    CHECK(bad_read == 0, "%s at tp %d x shard %d: %zu values read from the llm.c file are not its global elements", name, tp, shards,
          bad_read);
    free(whole);
}

// FNV-1a over bytes: a fingerprint of a whole model.
static uint64_t fnv1a(const void* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ull;
    return h;
}

static void write_llmc(const ModelConfig* c, const char* path) {
    float* whole = whole_model(c);
    LlmcFileWriter w;
    char err[1024] = "";
    int rc = llmc_file_create(&w, path, c, 3, err, sizeof(err));
    for (int i = 0; !rc && i < model_tensor_count(c); i++) {
        const ModelTensor t = model_tensor_at(c, i);
        size_t rows, cols;
        spec_shape(c, t.spec, &rows, &cols);
        rc = llmc_file_put(&w, t.spec->llmc_kind, t.layer, 0, whole + model_tensor_offset(c, i), rows * cols, err, sizeof(err));
    }
    if (!rc) rc = llmc_file_commit(&w, err, sizeof(err));
    else llmc_file_abort(&w);
    CHECK(rc == 0, "writing %s: %s", path, err);
    free(whole);
}

// model_tp_check's verdict: NULL, or its message (in a buffer of this test's).
static const char* tp_check(const ModelConfig* c, int tp) {
    static char msg[200];
    return model_tp_check(c, tp, msg, sizeof(msg)) ? msg : NULL;
}

static void expect_refusal(const ModelConfig* c, int tp, const char* want, const char* name) {
    const char* got = tp_check(c, tp);
    CHECK(got && !strcmp(got, want), "%s: model_tp_check(%d) says \"%s\", expected \"%s\"", name, tp, got ? got : "(nothing)", want);
    ModelLayout m;
    int rc = build_layout_tp(&m, c, 1, 2, tp, 0);
    CHECK(rc == 1 && m.units == NULL && m.n_units == 0, "%s: build_layout_tp at tp %d returns %d, not 1 with nothing held", name, tp, rc);
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s TMPDIR\n", argv[0]); return 2; }
    // GPT-2: 4 heads (tp 1, 2, 4); 6 heads with Vp 384 (tp 3). Llama 3: 8 heads over 4 kv heads
    // (tp 1, 2, 4), over 2 (tp 1, 2), 6 over 3 (tp 3).
    const struct { const char* name; ModelConfig c; int tps[3]; } models[] = {
        {"gpt2 L2 NH4 C64 V1000", shape("d12", 2, 4, 0, 64, 0, 1000), {1, 2, 4}},
        {"gpt2 L2 NH6 C96 V300", shape("d12", 2, 6, 0, 96, 0, 300), {3, 0, 0}},
        {"llama3 L2 NH8 KVH4 C128 F96 V1000", shape("llama3:tiny", 2, 8, 4, 128, 96, 1000), {1, 2, 4}},
        {"llama3 L2 NH8 KVH2 C128 F64 V1000", shape("llama3:tiny", 2, 8, 2, 128, 64, 1000), {1, 2, 0}},
        {"llama3 L2 NH6 KVH3 C96 F120 V300", shape("llama3:tiny", 2, 6, 3, 96, 120, 300), {3, 0, 0}},
    };
    const int n_models = (int)(sizeof(models) / sizeof(models[0]));
    for (int i = 0; i < n_models; i++) {
        CHECK(model_config_check(&models[i].c) == NULL, "%s: not a valid config", models[i].name);
        CHECK(tp_check(&models[i].c, 1) == NULL, "%s: tp 1 refused", models[i].name);
        check_tp1(&models[i].c, models[i].name);
        for (int k = 0; k < 3 && models[i].tps[k]; k++) {
            CHECK(tp_check(&models[i].c, models[i].tps[k]) == NULL, "%s: tp %d refused: %s", models[i].name, models[i].tps[k],
                  tp_check(&models[i].c, models[i].tps[k]));
            for (int shards = 1; shards <= 3; shards++) check_mesh(&models[i].c, models[i].tps[k], shards, 1, models[i].name);
        }
    }
    check_mesh(&models[2].c, 2, 2, 2, models[2].name);   // two blocks a unit
    check_fused_boxes();
    // A key run's strided index on both sides of 2^32 (the 32-bit division and the 64-bit one).
    const SrKeyRun big = {0, (uint64_t)1 << 40, 3, 1000, 7};
    const uint64_t far = ((uint64_t)1 << 33) + 5;
    CHECK(sr_run_index(&big, 5) == 1000 + 7 + 2 && sr_run_index(&big, far) == 1000 + far / 3 * 7 + far % 3,
          "sr_run_index: %llu and %llu", (unsigned long long)sr_run_index(&big, 5), (unsigned long long)sr_run_index(&big, far));

    // The refusals, each naming --tp and the number it does not divide.
    ModelConfig d12;
    preset_config("d12", &d12);
    CHECK(tp_check(&d12, 1) == NULL && tp_check(&d12, 3) == NULL && tp_check(&d12, 12) == NULL,
          "d12: tp 1, 3 or 12 refused");
    expect_refusal(&d12, 5, "--tp 5 does not divide the 12 heads", "d12");
    expect_refusal(&d12, 0, "--tp 0 is not a positive number", "d12");
    expect_refusal(&d12, -2, "--tp -2 is not a positive number", "d12");
    expect_refusal(&models[3].c, 4, "--tp 4 does not divide the 2 kv heads", "llama3 KVH2");
    ModelConfig odd_mlp = shape("llama3:tiny", 1, 8, 4, 128, 90, 1000);
    expect_refusal(&odd_mlp, 4, "--tp 4 does not divide the MLP width 90", "llama3 F90");
    CHECK(tp_check(&odd_mlp, 2) == NULL, "llama3 F90: tp 2 refused");
    ModelConfig odd_vocab = shape("d12", 1, 6, 0, 96, 0, 1000);   // Vp 1024
    expect_refusal(&odd_vocab, 3, "--tp 3 does not divide the padded vocabulary 1024", "gpt2 NH6 V1000");
    ModelConfig bad_config = d12;
    bad_config.num_heads = 0;
    CHECK(tp_check(&bad_config, 2) && strstr(tp_check(&bad_config, 2), "dimension"),
          "a config failing model_config_check passes model_tp_check");
    ModelLayout m;
    CHECK(build_layout_tp(&m, &models[0].c, 1, 2, 2, 2) == 1 && m.units == NULL, "tp_rank 2 of 2 accepted");
    CHECK(build_layout_tp(&m, &models[0].c, 1, 2, 2, -1) == 1 && m.units == NULL, "tp_rank -1 accepted");

    // Initialisation and llm.c files.
    char path[1024];
    snprintf(path, sizeof(path), "%s/tp_layout_gpt2.bin", argv[1]);
    write_llmc(&models[0].c, path);
    for (int shards = 1; shards <= 3; shards += 2) {
        check_init(&models[0].c, 2, shards, models[0].name, path);
        check_init(&models[0].c, 4, shards, models[0].name, path);
        check_init(&models[2].c, 2, shards, models[2].name, NULL);
        check_init(&models[2].c, 4, shards, models[2].name, NULL);
    }
    snprintf(path, sizeof(path), "%s/tp_layout_gpt2_nh6.bin", argv[1]);
    write_llmc(&models[1].c, path);
    check_init(&models[1].c, 3, 2, models[1].name, path);
    check_init(&models[4].c, 3, 2, models[4].name, NULL);
    // tp 1 draws what the program drew before tensor parallelism (main 745408b), byte for byte.
    const uint64_t before[2] = {0x47d87b03a1734076ull, 0x590fb387cb5ce23full};
    for (int i = 0; i < 2; i++) {
        const ModelConfig* c = &models[i == 0 ? 0 : 2].c;
        float* whole = whole_model(c);
        const uint64_t h = fnv1a(whole, model_num_parameters(c) * sizeof(float));
        CHECK(h == before[i], "%s: the tp 1 initial model's FNV-1a is %016llx, before tensor parallelism %016llx",
              models[i == 0 ? 0 : 2].name, (unsigned long long)h, (unsigned long long)before[i]);
        free(whole);
    }

    if (failures == 0)
        printf("ok - tp layout: %d checks: GPT-2 and Llama 3 (GQA) at tp 1, 2, 3, 4 x shards 1-3 own every element once (tp "
               "times when replicated), equal local shapes on every TP rank, boxes (q|k|v, gate|up, vocabulary, row-parallel), "
               "the refusals, init at tp = tp 1's values (and tp 1 unchanged), llm.c files read at tp, rounding keys those "
               "of tp 1\n",
               checks);
    return failures != 0;
}
