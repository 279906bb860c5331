#include "model/state.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

// ----------------------------------------------------------------------------------------
// Initialisation

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h1 = splitmix64(seed ^ splitmix64(stream * 0x100000001b3ULL + 2 * index));
    uint64_t h2 = splitmix64(h1 ^ 0xda942042e4dd58b5ULL);
    double u1 = ((double)(h1 >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
    double u2 = (double)(h2 >> 11) / 9007199254740992.0;          // [0, 1)
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void model_init_parameters(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* arena, uint64_t seed) {
    const ModelConfig* c = &m->config;
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    for (int i = 0; i < n_pieces; i++) {
        const FlatPiece* p = &pieces[i];
        int layer;
        const TensorSpec* spec = unit_tensor_spec(m, p->unit, p->tensor, &layer);
        const InitRule rule = spec->init;
        uint64_t stream = (uint64_t)spec->init_stream * 4096 + (uint64_t)layer;
        // A tensor-parallel rank's local element e is global element g of the whole tensor, and
        // draws g's value: the initial model is the same at any --tp (at tp 1, g is e).
        TpView view;
        layout_tp_view(m, p->unit, p->tensor, &view);
        // Global rows from here on are padding of the vocabulary: zero.
        const size_t real_rows = spec->rows == DIM_VOCAB ? (size_t)c->vocab_size : view.global_rows;
        const float std = rule == INIT_NORMAL_SCALED ? proj_std : 0.02f;
        float* dst = arena + p->at;
        const size_t lo = p->lo, hi = p->hi;
        // Each element is a pure function of its index: threads do not change the result.
        #pragma omp parallel for schedule(static)
        for (size_t e = lo; e < hi; e++) {
            const size_t g = tp_view_global_element(&view, e, NULL);
            float v;
            if (rule == INIT_ONES) v = 1.0f;
            else if (rule == INIT_ZEROS || g / view.global_cols >= real_rows) v = 0.0f;
            else v = normal_at(seed, stream, g) * std;
            dst[e - lo] = v;
        }
    }
}

// ----------------------------------------------------------------------------------------
// Checkpoints
//
// The manifest names every tensor by its global name and shape. At --tp 1 a rank's piece is
// an element range of it, as it always was (the files and the manifest are what they were).
// At --tp N a piece of a rank's local tensor is, in the global tensor, a few boxes (DCP's
// offsets and sizes): a COLUMN or VOCAB piece whole rows of each segment it crosses, a ROW
// piece rows x cols/N at the rank's columns; each box's values are consecutive in the piece.
// A replicated tensor (whole on every TP rank) is written by TP rank 0 alone, and read by all.

// A box of the manifest's tensor and where its values start in the piece (elements from lo).
typedef struct { CkptBox box; size_t at; } PieceBox;
#define MAX_PIECE_BOXES (MAX_SEGMENTS + 2)

// Local elements [lo, hi) of piece p as global boxes: its partial first row, its whole rows
// (cut where the TP view's boxes, the segments, begin), its partial last row. A vector, viewed
// as [n, 1], is boxed in the manifest's [1, n]. Returns the count.
static int piece_boxes(const ModelLayout* m, const FlatPiece* p, PieceBox out[MAX_PIECE_BOXES]) {
    TpView v;
    layout_tp_view(m, p->unit, p->tensor, &v);
    int layer;
    const int vector = unit_tensor_spec(m, p->unit, p->tensor, &layer)->rows == DIM_ONE;
    const size_t cols = v.boxes[0].cols;   // the local tensor's
    int n = 0;
    for (size_t e = p->lo; e < p->hi;) {
        const size_t row = e / cols, col = e % cols;
        const TpBox* b = &v.boxes[0];
        for (int i = 1; i < v.n_boxes && row >= v.boxes[i].local_row; i++) b = &v.boxes[i];
        size_t rows = 1, width = cols - col < p->hi - e ? cols - col : p->hi - e;
        if (col == 0 && p->hi - e >= cols) {   // whole rows, up to the end of the view's box
            rows = (p->hi - e) / cols;
            if (rows > b->local_row + b->rows - row) rows = b->local_row + b->rows - row;
        }
        CkptBox g = {b->global_row + row - b->local_row, b->global_col + col, rows, width};
        if (vector) g = (CkptBox){0, g.row0, 1, g.rows};
        out[n++] = (PieceBox){g, e - p->lo};
        e += rows * width;
    }
    return n;
}

// The manifest's shape of tensor i of unit u: the global one (the spec's; at --tp 1 the
// FlatTensor's, which is the same).
static void global_shape(const ModelLayout* m, int u, int i, uint64_t* rows, uint64_t* cols) {
    const FlatTensor* t = &m->units[u].tensors[i];
    *rows = t->rows;
    *cols = t->cols;
    if (m->tp_size <= 1) return;
    int layer;
    size_t r, c;
    spec_shape(&m->config, unit_tensor_spec(m, u, i, &layer), &r, &c);
    *rows = r;
    *cols = c;
}

int model_checkpoint_tables(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* const arenas[CKPT_KINDS],
                           int writes, ModelCkptTables* ct) {
    int total = flat_tensor_count(m->units, m->n_units);
    const int boxes = m->tp_size > 1 ? MAX_PIECE_BOXES : 1;
    memset(ct, 0, sizeof(*ct));
    ct->tensors = (CkptTensor*)calloc((size_t)total + 1, sizeof(CkptTensor));
    ct->pieces = (CkptPiece*)calloc((size_t)n_pieces * CKPT_KINDS * boxes + 1, sizeof(CkptPiece));
    if (!ct->tensors || !ct->pieces) { model_checkpoint_tables_free(ct); return 1; }
    for (int u = 0; u < m->n_units; u++)
        for (int i = 0; i < m->units[u].n_tensors; i++) {
            CkptTensor* ck = &ct->tensors[ct->n_tensors++];
            snprintf(ck->name, sizeof(ck->name), "%s", m->units[u].tensors[i].name);
            global_shape(m, u, i, &ck->rows, &ck->cols);
        }
    for (int i = 0; writes && i < n_pieces; i++) {
        const FlatPiece* fp = &pieces[i];
        PieceBox pb[MAX_PIECE_BOXES];
        int n = 1;
        if (m->tp_size > 1) {
            TpView v;
            layout_tp_view(m, fp->unit, fp->tensor, &v);
            if (v.replicated && m->tp_rank != 0) continue;   // TP rank 0 writes it
            n = piece_boxes(m, fp, pb);
        }
        for (int b = 0; b < n; b++)
            for (int k = 0; k < CKPT_KINDS; k++) {
                CkptPiece* p = &ct->pieces[ct->n_pieces++];
                p->tensor = m->units[fp->unit].tensors[fp->tensor].name;
                p->kind = k;
                p->lo = fp->lo;
                p->hi = fp->hi;
                p->data = arenas[k] + fp->at;
                if (m->tp_size > 1) {
                    p->box = pb[b].box;
                    p->data += pb[b].at;
                }
                ct->local_bytes += (m->tp_size > 1 ? pb[b].box.rows * pb[b].box.cols : fp->hi - fp->lo) * sizeof(float);
            }
    }
    return 0;
}

void model_checkpoint_tables_free(ModelCkptTables* ct) {
    free(ct->tensors);
    free(ct->pieces);
    memset(ct, 0, sizeof(*ct));
}

// The manifest's state.config keys, in ModelConfig's order: the one list the writer and the
// reader share.
#define CONFIG_KEYS 6
static const char* const config_keys[CONFIG_KEYS] = {"max_seq_len", "vocab_size", "padded_vocab_size",
                                                     "num_layers", "num_heads", "channels"};
static void config_fields(ModelConfig* c, int* f[CONFIG_KEYS]) {
    f[0] = &c->max_seq_len; f[1] = &c->vocab_size; f[2] = &c->padded_vocab_size;
    f[3] = &c->num_layers; f[4] = &c->num_heads; f[5] = &c->channels;
}

// A family's further keys (ModelFamily.config_keys): whole numbers and floats of the config.
static int* config_int(ModelConfig* c, const ConfigKey* k) { return (int*)((char*)c + k->offset); }
static float* config_float(ModelConfig* c, const ConfigKey* k) { return (float*)((char*)c + k->offset); }

cJSON* model_checkpoint_state(const ModelConfig* c, long step, long tokens, int world, int tp, int seq_len,
                             long total_batch_tokens, uint64_t windows_consumed, uint64_t seed, int shuffle) {
    cJSON* s = cJSON_CreateObject();
    cJSON* cfg = cJSON_AddObjectToObject(s, "config");
    ModelConfig copy = *c;
    int* f[CONFIG_KEYS];
    config_fields(&copy, f);
    for (int i = 0; i < CONFIG_KEYS; i++) cJSON_AddNumberToObject(cfg, config_keys[i], *f[i]);
    const ModelFamily* fam = model_family(c);
    cJSON_AddStringToObject(cfg, "arch", fam->name);
    for (int i = 0; i < fam->n_config_keys; i++) {
        const ConfigKey* k = &fam->config_keys[i];
        cJSON_AddNumberToObject(cfg, k->key, k->is_float ? (double)*config_float(&copy, k) : (double)*config_int(&copy, k));
    }
    cJSON_AddNumberToObject(s, "step", (double)step);
    cJSON_AddNumberToObject(s, "tokens", (double)tokens);
    cJSON_AddNumberToObject(s, "world", world);
    if (tp > 1) cJSON_AddNumberToObject(s, "tp", tp);   // none at --tp 1: what a save wrote before TP
    cJSON_AddNumberToObject(s, "seq_len", seq_len);
    cJSON_AddNumberToObject(s, "total_batch_tokens", (double)total_batch_tokens);
    cJSON* l = cJSON_AddObjectToObject(s, "loader");
    cJSON_AddNumberToObject(l, "windows_consumed", (double)windows_consumed);
    char seed_text[32];
    snprintf(seed_text, sizeof(seed_text), "%llu", (unsigned long long)seed);
    cJSON_AddStringToObject(l, "seed", seed_text);
    cJSON_AddNumberToObject(l, "shuffle", shuffle);
    return s;
}

void model_checkpoint_state_add_loss_scaler(cJSON* state, float scale, int good_steps, int window) {
    cJSON* l = cJSON_AddObjectToObject(state, "loss_scaler");
    cJSON_AddNumberToObject(l, "scale", scale);
    cJSON_AddNumberToObject(l, "good_steps", good_steps);
    cJSON_AddNumberToObject(l, "window", window);
}

// obj[key] as a whole number in [0, max], or a message naming the manifest and the field
// (`what`: "state.step", ...). A negative, fractional, non-finite or huge value is refused
// before it is converted (a cast of such a double is undefined or silently wrong).
static int state_uint(const Ckpt* c, const cJSON* obj, const char* key, const char* what, double max, uint64_t* out,
                      char* err, size_t errlen) {
    const cJSON* v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (ckpt_json_uint(v, max, out)) return 0;
    char shown[40] = "";
    for (int prec = 1; v && cJSON_IsNumber(v) && prec <= 17; prec++) {   // the shortest form that reads back
        snprintf(shown, sizeof(shown), "%.*g", prec, v->valuedouble);
        if (strtod(shown, NULL) == v->valuedouble) break;
    }
    if (v && cJSON_IsNumber(v) && fabs(v->valuedouble) < 1e16 && v->valuedouble == floor(v->valuedouble))
        snprintf(shown, sizeof(shown), "%.0f", v->valuedouble);   // a whole number in full (1000, not 1e+03)
    if (!v) snprintf(err, errlen, "%s/manifest.json: %s is missing", c->dir, what);
    else if (cJSON_IsNumber(v))
        snprintf(err, errlen, "%s/manifest.json: %s = %s is not a whole number in [0, %.0f]", c->dir, what, shown, max);
    else snprintf(err, errlen, "%s/manifest.json: %s is not a number", c->dir, what);
    return 1;
}

int model_checkpoint_config(const Ckpt* c, ModelConfig* cfg, char* err, size_t errlen) {
    const cJSON* conf = c->state ? cJSON_GetObjectItemCaseSensitive(c->state, "config") : NULL;
    if (!cJSON_IsObject(conf)) {
        snprintf(err, errlen, "%s/manifest.json: no model config (state.config)", c->dir);
        return 1;
    }
    memset(cfg, 0, sizeof(*cfg));
    int* f[CONFIG_KEYS];
    config_fields(cfg, f);
    for (int i = 0; i < CONFIG_KEYS; i++) {
        uint64_t v;
        char what[64];
        snprintf(what, sizeof(what), "state.config.%s", config_keys[i]);
        if (state_uint(c, conf, config_keys[i], what, INT32_MAX, &v, err, errlen)) return 1;
        *f[i] = (int)v;
    }
    // No "arch": a checkpoint from before Llama, GPT-2.
    const cJSON* arch = cJSON_GetObjectItemCaseSensitive(conf, "arch");
    const ModelFamily* fam = !arch ? model_family_at(ARCH_GPT2) : cJSON_IsString(arch) ? model_family_named(arch->valuestring) : NULL;
    if (!fam) {
        char names[128];
        model_family_names(1, names, sizeof(names));
        snprintf(err, errlen, "%s/manifest.json: state.config.arch is not %s", c->dir, names);
        return 1;
    }
    for (int a = 0; a < NUM_ARCHS; a++) if (model_family_at(a) == fam) cfg->arch = a;
    for (int i = 0; i < fam->n_config_keys; i++) {
        const ConfigKey* k = &fam->config_keys[i];
        char what[64];
        snprintf(what, sizeof(what), "state.config.%s", k->key);
        if (!k->is_float) {
            uint64_t v;
            if (state_uint(c, conf, k->key, what, INT32_MAX, &v, err, errlen)) return 1;
            *config_int(cfg, k) = (int)v;
            continue;
        }
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(conf, k->key);
        if (!v && k->absent != 0.0f) {   // written before the key existed
            *config_float(cfg, k) = k->absent;
            continue;
        }
        if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) < 1e30)) {
            snprintf(err, errlen, "%s/manifest.json: %s is missing or not a finite number", c->dir, what);
            return 1;
        }
        *config_float(cfg, k) = (float)v->valuedouble;
    }
    const char* bad = model_config_check(cfg);
    if (bad) {
        snprintf(err, errlen, "%s/manifest.json: inconsistent model config (%s)", c->dir, bad);
        return 1;
    }
    return 0;
}

int model_checkpoint_check_tensors(const Ckpt* c, const ModelConfig* cfg, char* err, size_t errlen) {
    const ModelFamily* fam = model_family(cfg);
    for (int i = 0; i < model_tensor_count(cfg); i++) {
        const ModelTensor mt = model_tensor_at(cfg, i);
        char name[CKPT_NAME_LEN];
        spec_name(fam, mt.spec, mt.is_block, mt.layer, name, sizeof(name));
        size_t rows, cols;
        spec_shape(cfg, mt.spec, &rows, &cols);
        const CkptTensor* t = ckpt_tensor(c, name);
        if (!t) {
            snprintf(err, errlen, "%s/manifest.json: tensor %s is missing", c->dir, name);
            return 1;
        }
        if (t->rows != rows || t->cols != cols) {
            snprintf(err, errlen, "%s/manifest.json: tensor %s is [%llu, %llu], the config needs [%zu, %zu]", c->dir,
                     name, (unsigned long long)t->rows, (unsigned long long)t->cols, rows, cols);
            return 1;
        }
    }
    return 0;
}

// The scaler doubles its scale when good_steps reaches the window and restarts the count, so a
// count is below the window of the run that saved it (state.loss_scaler.window; 0: a fixed
// scale, which counts nothing). Checkpoints from before the window was stored: below the
// largest --loss-scale-window, 2^31-1, so that the next finite step's ++ cannot overflow.
#define MAX_LOSS_SCALE_WINDOW 2147483647.0

static int read_loss_scaler(const Ckpt* c, const cJSON* scaler, RunState* rs, char* err, size_t errlen) {
    const cJSON* sv = cJSON_IsObject(scaler) ? cJSON_GetObjectItemCaseSensitive(scaler, "scale") : NULL;
    if (!cJSON_IsNumber(sv) || !(sv->valuedouble >= 1.0 && sv->valuedouble <= 16777216.0)) {
        snprintf(err, errlen, "%s/manifest.json: state.loss_scaler.scale is not a number in [1, 2^24]", c->dir);
        return 1;
    }
    uint64_t window = 0, good;
    const int has_window = cJSON_GetObjectItemCaseSensitive(scaler, "window") != NULL;
    if (has_window && state_uint(c, scaler, "window", "state.loss_scaler.window", MAX_LOSS_SCALE_WINDOW, &window, err, errlen))
        return 1;
    const double below = has_window ? (double)window : MAX_LOSS_SCALE_WINDOW;
    if (state_uint(c, scaler, "good_steps", "state.loss_scaler.good_steps", below > 0 ? below - 1 : 0, &good, err, errlen)) {
        const size_t len = strlen(err);
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(scaler, "good_steps")) && has_window)
            snprintf(err + len, errlen - len, " (finite steps at the scale: below state.loss_scaler.window = %llu%s)",
                     (unsigned long long)window, window ? "" : ", a fixed scale");
        else if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(scaler, "good_steps")))
            snprintf(err + len, errlen - len, " (finite steps at the scale: below the largest --loss-scale-window)");
        return 1;
    }
    rs->loss_scale = (float)sv->valuedouble;
    rs->loss_scale_good_steps = (int)good;
    return 0;
}

int model_checkpoint_read_state(const Ckpt* c, ModelConfig* cfg, RunState* rs, char* err, size_t errlen) {
    if (model_checkpoint_config(c, cfg, err, errlen) || model_checkpoint_check_tensors(c, cfg, err, errlen)) return 1;
    // Where the run stood: every field checked (a negative, fractional or huge step would
    // train from the wrong step, a bad data position on other data). The bounds are where
    // each is used: the step is an int, the data position a uint64 counter of windows that
    // grows by a step's windows (up to 2^53, what a JSON number holds exactly).
    memset(rs, 0, sizeof(*rs));
    const cJSON* loader = cJSON_GetObjectItemCaseSensitive(c->state, "loader");
    const cJSON* seed = cJSON_IsObject(loader) ? cJSON_GetObjectItemCaseSensitive(loader, "seed") : NULL;
    uint64_t step, seq_len, windows, shuffle, count;
    if (state_uint(c, c->state, "step", "state.step", INT32_MAX, &step, err, errlen) ||
        state_uint(c, c->state, "seq_len", "state.seq_len", MODEL_MAX_SEQ, &seq_len, err, errlen) ||
        state_uint(c, loader, "windows_consumed", "state.loader.windows_consumed", CKPT_MAX_INT, &windows, err, errlen) ||
        state_uint(c, loader, "shuffle", "state.loader.shuffle", 1, &shuffle, err, errlen))
        return 1;
    if ((long)step != c->step) {
        snprintf(err, errlen, "%s/manifest.json: state.step = %llu disagrees with the manifest's step %ld", c->dir,
                 (unsigned long long)step, c->step);
        return 1;
    }
    // The seed is a decimal string (a JSON number cannot hold every uint64).
    const char* seed_text = cJSON_IsString(seed) ? seed->valuestring : "";
    char* seed_end;
    errno = 0;
    unsigned long long seed_value = strtoull(seed_text, &seed_end, 10);
    if (!seed_text[0] || strspn(seed_text, "0123456789") != strlen(seed_text) || errno == ERANGE || *seed_end) {
        snprintf(err, errlen, "%s/manifest.json: state.loader.seed is not a decimal string of a 64-bit number", c->dir);
        return 1;
    }
    // Recorded, never read back (ckpt info shows them; the world that matters is the
    // manifest's): whole numbers in range all the same.
    // (state.tp too: a checkpoint resumes at any --tp, the loader reads boxes of any layout.)
    static const char* const counters[4] = {"tokens", "total_batch_tokens", "world", "tp"};
    static const double counter_max[4] = {CKPT_MAX_INT, CKPT_MAX_INT, CKPT_MAX_WORLD, CKPT_MAX_WORLD};
    for (int i = 0; i < 4; i++) {
        char what[64];
        snprintf(what, sizeof(what), "state.%s", counters[i]);
        if (cJSON_GetObjectItemCaseSensitive(c->state, counters[i]) &&
            state_uint(c, c->state, counters[i], what, counter_max[i], &count, err, errlen))
            return 1;
    }
    rs->step = (long)step;
    rs->seq_len = (long)seq_len;
    rs->windows_consumed = windows;
    rs->seed = (uint64_t)seed_value;
    rs->shuffle = (int)shuffle;
    // The fp16 loss scaler's state, when the run that saved it had one.
    const cJSON* scaler = cJSON_GetObjectItemCaseSensitive(c->state, "loss_scaler");
    return scaler ? read_loss_scaler(c, scaler, rs, err, errlen) : 0;
}

int model_checkpoint_load(const char* dir, const ModelLayout* m, const FlatPiece* pieces, int n_pieces,
                         float* const arenas[CKPT_KINDS], int T, RunState* rs, uint64_t* bytes_read,
                         char* err, size_t errlen) {
    Ckpt c;
    if (ckpt_open(&c, dir, err, errlen)) return 1;
    ModelConfig saved;
    if (model_checkpoint_read_state(&c, &saved, rs, err, errlen)) {
        ckpt_close(&c);
        return 1;
    }
    // The run built the checkpoint's model (train_gpt reads its config first): what the weights
    // fix must still agree (a checkpoint replaced since would not); the settings (RoPE's, the
    // norm's epsilon, a RoPE family's positions) may be the run's own (model_config_fixed).
    ModelConfig mine = m->config;
    int *a[CONFIG_KEYS], *b[CONFIG_KEYS];
    config_fields(&saved, a);
    config_fields(&mine, b);
    if (saved.arch != mine.arch) {
        snprintf(err, errlen, "%s/manifest.json: the checkpoint is a %s model, this run's is %s", dir,
                 model_family(&saved)->name, model_family(&mine)->name);
        ckpt_close(&c);
        return 1;
    }
    const ModelFamily* fam = model_family(&mine);
    for (int i = 0; i < CONFIG_KEYS; i++)
        if (*a[i] != *b[i] && model_config_fixed(fam, (size_t)((char*)a[i] - (char*)&saved))) {
            snprintf(err, errlen, "%s/manifest.json: the checkpoint's model has %s = %d, this run's has %d "
                     "(saved: %d layers, %d heads, %d channels, %d positions)",
                     dir, config_keys[i], *a[i], *b[i], saved.num_layers, saved.num_heads, saved.channels, saved.max_seq_len);
            ckpt_close(&c);
            return 1;
        }
    for (int i = 0; i < fam->n_config_keys; i++) {
        const ConfigKey* k = &fam->config_keys[i];
        if (!model_config_fixed(fam, k->offset)) continue;
        if (!k->is_float && *config_int(&saved, k) != *config_int(&mine, k))
            snprintf(err, errlen, "%s/manifest.json: the checkpoint's model has %s = %d, this run's has %d", dir, k->key,
                     *config_int(&saved, k), *config_int(&mine, k));
        else if (k->is_float && *config_float(&saved, k) != *config_float(&mine, k))
            snprintf(err, errlen, "%s/manifest.json: the checkpoint's model has %s = %g, this run's has %g", dir, k->key,
                     (double)*config_float(&saved, k), (double)*config_float(&mine, k));
        else
            continue;
        ckpt_close(&c);
        return 1;
    }
    if (T > 0 && rs->seq_len != T && rs->windows_consumed != 0) {  // an imported checkpoint has consumed no data yet
        snprintf(err, errlen, "%s/manifest.json: saved with --seq-len %ld, this run has %d (the data position counts windows of T)",
                 dir, rs->seq_len, T);
        ckpt_close(&c);
        return 1;
    }
    // Every piece of every kind in one batch: the reader pipelines the whole load. At --tp N a
    // piece is read as its global boxes (every TP rank reads a replicated tensor), from
    // whatever layout saved them: the reader intersects boxes with the chunks.
    *bytes_read = 0;
    const int boxes = m->tp_size > 1 ? MAX_PIECE_BOXES : 1;
    CkptRequest* req = (CkptRequest*)calloc((size_t)n_pieces * CKPT_KINDS * boxes + 1, sizeof(CkptRequest));
    if (!req) { snprintf(err, errlen, "%s: out of memory", dir); ckpt_close(&c); return 1; }
    int n_req = 0;
    for (int i = 0; i < n_pieces; i++) {
        const FlatPiece* p = &pieces[i];
        PieceBox pb[MAX_PIECE_BOXES] = {{{0, 0, 0, 0}, 0}};
        const int n = m->tp_size > 1 ? piece_boxes(m, p, pb) : 1;
        for (int b = 0; b < n; b++)
            for (int k = 0; k < CKPT_KINDS; k++) {
                req[n_req++] = (CkptRequest){m->units[p->unit].tensors[p->tensor].name, k, p->lo, p->hi,
                                             arenas[k] + p->at + pb[b].at, pb[b].box};
                *bytes_read += (m->tp_size > 1 ? pb[b].box.rows * pb[b].box.cols : p->hi - p->lo) * sizeof(float);
            }
    }
    int rc = ckpt_read_batch(&c, req, n_req, err, errlen);
    free(req);
    ckpt_close(&c);
    return rc;
}

int model_checkpoint_check_finite(const char* dir, const ModelLayout* m, const FlatPiece* pieces, int n_pieces,
                                  float* const arenas[CKPT_KINDS], char* err, size_t errlen) {
    for (int i = 0; i < n_pieces; i++) {
        const FlatPiece* p = &pieces[i];
        for (int k = 0; k < CKPT_KINDS; k++) {
            const float* x = arenas[k] + p->at;
            const size_t bad = ckpt_first_nonfinite(x, p->hi - p->lo);
            if (bad == p->hi - p->lo) continue;
            // The element as the manifest counts it: the global one (at --tp N not the local one).
            ckpt_nonfinite_error(err, errlen, dir, m->units[p->unit].tensors[p->tensor].name, k,
                                 layout_global_element(m, p->unit, p->tensor, p->lo + bad), x + bad);
            return 1;
        }
    }
    return 0;
}
