// Hugging Face's form of a model as loops over the family's table: the mapping, export, import
// (model/hf.h).
#include "model/hf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "util/atomic_file.h"

// ---- the mapping

// How many Hugging Face tensors a table row is: one, or one per segment when it has no name of
// its own.
static int hf_pieces(const TensorSpec* s) { return s->hf_name ? 1 : s->n_segments; }

// Of the root's rows before (after = 0) or after the blocks, or (after = -1) of a block.
static int count_pieces(const ModelFamily* f, int after) {
    const TensorSpec* table = after < 0 ? f->block : f->root;
    const int n = after < 0 ? f->n_block : f->n_root;
    int pieces = 0;
    for (int i = 0; i < n; i++)
        if (after < 0 || table[i].hf_after_blocks == after) pieces += hf_pieces(&table[i]);
    return pieces;
}

int hf_tensor_count(const ModelConfig* c) {
    const ModelFamily* f = model_family(c);
    return count_pieces(f, 0) + c->num_layers * count_pieces(f, -1) + count_pieces(f, 1);
}

static void fill_tensor(const ModelConfig* c, const ModelFamily* f, const TensorSpec* s, int tensor, int is_block,
                        int layer, int segment, HfTensor* t) {
    memset(t, 0, sizeof(*t));
    t->spec = s;
    t->tensor = tensor;
    t->is_block = is_block;
    t->layer = layer;
    t->segment = segment;
    spec_hf_name(f, s, segment, is_block, layer, t->name, sizeof(t->name));
    size_t rows, cols;
    spec_shape(c, s, &rows, &cols);
    if (segment >= 0) t->row0 = spec_segment_row(c, s, segment, &rows);
    if ((segment >= 0 ? s->segments[segment].rows : s->rows) == DIM_VOCAB) rows = (size_t)c->vocab_size;  // the real rows
    t->rows = rows;
    t->cols = cols;
    if (s->rows == DIM_ONE) {
        t->ndim = 1;
        t->shape[0] = cols;
    } else {
        t->ndim = 2;
        t->transposed = s->hf_layout == HF_TRANSPOSED;
        t->shape[0] = t->transposed ? cols : rows;
        t->shape[1] = t->transposed ? rows : cols;
    }
    const HfRope rope = segment >= 0 ? s->segments[segment].hf_rope : HF_ROPE_NONE;
    t->rope_heads = rope == HF_ROPE_Q_HEADS ? c->num_heads : rope == HF_ROPE_KV_HEADS ? c->num_kv_heads : 0;
}

void hf_tensor_at(const ModelConfig* c, int k, HfTensor* t) {
    const ModelFamily* f = model_family(c);
    const int before = count_pieces(f, 0), block = count_pieces(f, -1);
    int is_block = 0, layer = 0, after = 0;
    if (k >= before && k < before + c->num_layers * block) {
        is_block = 1;
        layer = (k - before) / block;
        k = (k - before) % block;
    } else if (k >= before) {
        after = 1;
        k -= before + c->num_layers * block;
    }
    const TensorSpec* table = is_block ? f->block : f->root;
    const int n = is_block ? f->n_block : f->n_root;
    for (int i = 0; i < n; i++) {
        const TensorSpec* s = &table[i];
        if (!is_block && s->hf_after_blocks != after) continue;
        if (k >= hf_pieces(s)) { k -= hf_pieces(s); continue; }
        fill_tensor(c, f, s, is_block ? f->n_root + layer * f->n_block + i : i, is_block, layer, s->hf_name ? -1 : k, t);
        return;
    }
}

// Our [rows, cols] and Hugging Face's [cols, rows].
static void transpose(const float* src, float* dst, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t k = 0; k < cols; k++) dst[k * rows + r] = src[r * cols + k];
}

// Rotary permutation of `heads` heads of hs rows of `cols` each, between our interleaved pairs
// and Hugging Face's halves. to_hf: HF row h*hs + a*hs/2 + j = our row h*hs + 2j + a; else the
// inverse.
static void rope_permute(const float* src, float* dst, int heads, size_t hs, size_t cols, int to_hf) {
    const size_t half = hs / 2;
    for (size_t h = 0; h < (size_t)heads; h++)
        for (size_t j = 0; j < half; j++)
            for (size_t a = 0; a < 2; a++) {
                const size_t ours = h * hs + 2 * j + a, hf = h * hs + a * half + j;
                memcpy(dst + (to_hf ? hf : ours) * cols, src + (to_hf ? ours : hf) * cols, cols * sizeof(float));
            }
}

// ---- export

// A float as the shortest decimal that reads back as the same float, in the form Python's json
// writes a float: positional with a '.' for decimal exponents in [-4, 16) (500000.0, 0.02),
// else an exponent (1e-05), so that config.json's floats stay floats for Hugging Face.
static void float_text(float v, char* out, size_t n) {
    char e[48];
    int prec = 1;
    for (; prec < 9; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, (double)v);
        if (strtof(e, NULL) == v) break;
    }
    snprintf(e, sizeof(e), "%.*e", prec - 1, (double)v);
    const char* ex = strchr(e, 'e');
    const int x = ex ? (int)strtol(ex + 1, NULL, 10) : 0;   // the decimal exponent
    if (v != 0.0f && (x < -4 || x >= 16)) snprintf(out, n, "%s", e);
    else snprintf(out, n, "%.*f", prec - 1 - x > 0 ? prec - 1 - x : 0, (double)v);
    if (!strpbrk(out, ".e")) strncat(out, ".0", n - strlen(out) - 1);
}

void hf_meta_int(cJSON* meta, const char* key, long v) {
    char s[32];
    snprintf(s, sizeof(s), "%ld", v);
    cJSON_AddStringToObject(meta, key, s);
}

void hf_meta_float(cJSON* meta, const char* key, float v) {
    char s[48];
    float_text(v, s, sizeof(s));
    cJSON_AddStringToObject(meta, key, s);
}

void hf_json_float(cJSON* obj, const char* key, float v) {
    char s[48];
    float_text(v, s, sizeof(s));
    cJSON_AddRawToObject(obj, key, s);
}

// The family's config.json beside path (save_pretrained's file).
static int write_config_json(const ModelConfig* c, const char* path, char* json_path, size_t json_len, char* err,
                             size_t errlen) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    snprintf(json_path, json_len, "%s/config.json", dirname(dir));
    cJSON* j = model_family(c)->hf_config_json(c);
    char* text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    const size_t len = text ? strlen(text) : 0;
    char* line = text ? (char*)realloc(text, len + 2) : NULL;
    if (!line) {
        free(text);
        snprintf(err, errlen, "out of memory building %s", json_path);
        return 1;
    }
    line[len] = '\n';
    int rc = atomic_write_file(json_path, line, len + 1, ATOMIC_TMP, err, errlen);
    free(line);
    return rc;
}

int hf_export(const ModelConfig* c, HfReadTensor read, void* ctx, const char* path, int* n_tensors, char* json_path,
              size_t json_len, char* err, size_t errlen) {
    const ModelFamily* f = model_family(c);
    json_path[0] = '\0';
    const int n = hf_tensor_count(c);
    HfTensor t;
    StWriter w;
    int bad = st_writer_init(&w);
    size_t max_n = 0;
    if (!bad) f->hf_metadata(c, w.metadata);
    for (int k = 0; k < n && !bad; k++) {
        hf_tensor_at(c, k, &t);
        bad = st_writer_add(&w, t.name, t.ndim, t.shape);
        if (t.rows * t.cols > max_n) max_n = t.rows * t.cols;
    }
    if (bad) {
        st_writer_abort(&w);
        snprintf(err, errlen, "out of memory building the safetensors header");
        return 1;
    }
    if (st_writer_open(&w, path, err, errlen)) { st_writer_abort(&w); return 1; }
    float* buf = (float*)malloc(max_n * sizeof(float) + 1);
    float* tr = (float*)malloc(max_n * sizeof(float) + 1);
    int rc = 0;
    if (!buf || !tr) { snprintf(err, errlen, "out of memory (%zu bytes)", 2 * max_n * sizeof(float)); rc = 1; }
    const size_t hs = (size_t)(c->channels / c->num_heads);
    for (int k = 0; k < n && !rc; k++) {
        hf_tensor_at(c, k, &t);
        char name[128];
        spec_name(f, t.spec, t.is_block, t.layer, name, sizeof(name));
        const size_t lo = t.row0 * t.cols, numel = t.rows * t.cols;
        if ((rc = read(ctx, name, lo, lo + numel, buf, err, errlen))) break;
        const float* src = buf;
        if (t.transposed) { transpose(buf, tr, t.rows, t.cols); src = tr; }
        if (t.rope_heads) { rope_permute(buf, tr, t.rope_heads, hs, t.cols, 1); src = tr; }
        rc = st_writer_write(&w, src, numel, err, errlen);
    }
    free(buf);
    free(tr);
    if (rc) { st_writer_abort(&w); return 1; }
    if (st_writer_commit(&w, err, errlen)) return 1;
    *n_tensors = n;
    return f->hf_config_json ? write_config_json(c, path, json_path, json_len, err, errlen) : 0;
}

// ---- import

// The family whose names the file holds: the first whose hf_markers begin one of them, else the
// family without markers (GPT-2's: its names have no common prefix); NULL when there is none.
static const ModelFamily* family_of(const cJSON* names) {
    const ModelFamily* unmarked = NULL;
    for (int a = 0; a < NUM_ARCHS; a++) {
        const ModelFamily* f = model_family_at(a);
        if (!f->hf_config) continue;   // no Hugging Face form
        if (!f->hf_markers) {
            if (!unmarked) unmarked = f;
            continue;
        }
        for (const cJSON* e = names->child; e; e = e->next)
            for (const char* const* m = f->hf_markers; *m; m++)
                if (!strncmp(e->string, *m, strlen(*m))) return f;
    }
    return unmarked;
}

// name without the family's alias prefix, when it has it.
static const char* unaliased(const ModelFamily* f, const char* name) {
    const size_t n = f->hf_alias_prefix ? strlen(f->hf_alias_prefix) : 0;
    return n && !strncmp(name, f->hf_alias_prefix, n) ? name + n : name;
}

int hf_get(const HfImport* im, const char* name, StTensor* t, int* found, char* err, size_t errlen) {
    if (st_tensor(&im->set, name, name, t, found, err, errlen)) return 1;
    if (*found || !im->family->hf_alias_prefix) return 0;
    char full[160];
    snprintf(full, sizeof(full), "%s%s", im->family->hf_alias_prefix, name);
    return st_tensor(&im->set, full, name, t, found, err, errlen);
}

int hf_has(const HfImport* im, const char* name) {
    if (cJSON_GetObjectItemCaseSensitive(im->names, name)) return 1;
    if (!im->family->hf_alias_prefix) return 0;
    char full[160];
    snprintf(full, sizeof(full), "%s%s", im->family->hf_alias_prefix, name);
    return cJSON_GetObjectItemCaseSensitive(im->names, full) != NULL;
}

int hf_layers(const HfImport* im) {
    const char* prefix = im->family->hf_block_prefix;
    const size_t n = strlen(prefix);
    int max_layer = -1;
    for (const cJSON* e = im->names->child; e; e = e->next) {
        const char* k = unaliased(im->family, e->string);
        if (strncmp(k, prefix, n) != 0 || k[n] != '.' || !isdigit((unsigned char)k[n + 1])) continue;
        char* end;
        long l = strtol(k + n + 1, &end, 10);
        if (*end == '.' && l >= 0 && l < MODEL_MAX_LAYERS && l > max_layer) max_layer = (int)l;
    }
    return max_layer + 1;
}

int hf_read_config_json(HfImport* im, char* err, size_t errlen) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", im->set.path);
    snprintf(im->config_path, sizeof(im->config_path), "%s/config.json", dirname(dir));
    const char* path = im->config_path;
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISREG(st.st_mode)) { snprintf(err, errlen, "%s: not a regular file", path); return 1; }
    if (st.st_size > (1 << 20)) {
        snprintf(err, errlen, "%s: %lld bytes: too large for a model config", path, (long long)st.st_size);
        return 1;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    char* text = (char*)malloc((size_t)st.st_size + 1);
    size_t done = 0;
    while (text && done < (size_t)st.st_size) {
        ssize_t r = pread(fd, text + done, (size_t)st.st_size - done, (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        done += (size_t)r;
    }
    close(fd);
    if (!text || done < (size_t)st.st_size) {
        if (text) snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno));
        else snprintf(err, errlen, "%s: out of memory", path);
        free(text);
        return 1;
    }
    text[st.st_size] = '\0';
    im->config_json = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(im->config_json)) {
        snprintf(err, errlen, "%s: not a JSON object (invalid JSON, or another JSON value)", path);
        return 1;
    }
    return 0;
}

int hf_config_bool(const HfImport* im, const char* key, int dflt, char* err, size_t errlen) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(im->config_json, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    char text[80];
    hf_json_text(v, text, sizeof(text));
    snprintf(err, errlen, "%s: %s = %s is not true or false", im->config_path, key, text);
    return -1;
}

void hf_json_text(const cJSON* v, char* out, size_t n) {
    char* text = cJSON_PrintUnformatted(v);   // (escapes a string's control characters)
    if (!text) { snprintf(out, n, "(a JSON value)"); return; }
    size_t len = strlen(text);
    if (len > 60) {   // cut at a character's start (not inside a UTF-8 sequence)
        len = 56;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80) len--;
        snprintf(out, n, "%.*s ...", (int)len, text);
    } else {
        snprintf(out, n, "%s", text);
    }
    free(text);
}

int hf_expect_shape(const HfImport* im, const char* name, const StTensor* t, int ndim, uint64_t d0, uint64_t d1,
                    char* err, size_t errlen) {
    if (t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1)) return 0;
    char want[64], got[64];
    if (ndim == 1) snprintf(want, sizeof(want), "[%" PRIu64 "]", d0);
    else snprintf(want, sizeof(want), "[%" PRIu64 ", %" PRIu64 "]", d0, d1);
    if (t->ndim == 1) snprintf(got, sizeof(got), "[%" PRIu64 "]", t->shape[0]);
    else snprintf(got, sizeof(got), "[%" PRIu64 ", %" PRIu64 "]", t->shape[0], t->shape[1]);
    snprintf(err, errlen, "%s: tensor %s has shape %s, expected %s", im->set.files[t->file].path, name, got, want);
    return 1;
}

// Whether `key` (or it without the alias prefix) is the name of one of the config's tensors.
static int known(const HfImport* im, const char* key) {
    const ModelFamily* f = im->family;
    const char* k = unaliased(f, key);
    char name[128];
    for (int i = 0; i < f->n_root; i++)
        for (int p = 0; p < hf_pieces(&f->root[i]); p++) {
            spec_hf_name(f, &f->root[i], f->root[i].hf_name ? -1 : p, 0, 0, name, sizeof(name));
            if (!strcmp(k, name)) return 1;
        }
    const size_t n = strlen(f->hf_block_prefix);
    if (strncmp(k, f->hf_block_prefix, n) != 0 || k[n] != '.' || !isdigit((unsigned char)k[n + 1])) return 0;
    const long layer = strtol(k + n + 1, NULL, 10);
    if (layer >= im->config.num_layers) return 0;
    for (int i = 0; i < f->n_block; i++)
        for (int p = 0; p < hf_pieces(&f->block[i]); p++) {
            spec_hf_name(f, &f->block[i], f->block[i].hf_name ? -1 : p, 1, (int)layer, name, sizeof(name));
            if (!strcmp(k, name)) return 1;
        }
    return 0;
}

// Every tensor of the config there with its shape, nothing else there (but names the family
// skips), each name once: found[k] is Hugging Face tensor k's entry (ndim 0: the head, taken from
// the embedding). *scratch: the most elements one tensor needs transformed on the way in.
static int match_tensors(const HfImport* im, StTensor* found, size_t* scratch, char* err, size_t errlen) {
    const ModelFamily* f = im->family;
    const int n = hf_tensor_count(&im->config);
    HfTensor t;
    *scratch = 0;
    for (int k = 0; k < n; k++) {
        hf_tensor_at(&im->config, k, &t);
        int there;
        if (hf_get(im, t.name, &found[k], &there, err, errlen)) return 1;
        const int head = !t.is_block && t.spec->role == ROOT_HEAD;
        if (!there && head && im->head_from_embedding) continue;
        if (!there && head) {
            snprintf(err, errlen, "%s: tensor %s is missing (and %s does not say tie_word_embeddings: true)", im->set.path,
                     t.name, im->config_path);
            return 1;
        }
        if (!there) {
            snprintf(err, errlen, "%s: tensor %s is missing (a %s with %d layers)", im->set.path, t.name, f->title,
                     im->config.num_layers);
            return 1;
        }
        if (hf_expect_shape(im, t.name, &found[k], t.ndim, t.shape[0], t.shape[1], err, errlen)) return 1;
        if ((t.transposed || t.rope_heads) && t.rows * t.cols > *scratch) *scratch = t.rows * t.cols;
    }
    int n_used = 0;
    for (const cJSON* e = im->names->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__") || (f->hf_ignorable && f->hf_ignorable(e->string))) continue;
        if (!known(im, e->string)) {
            snprintf(err, errlen, "%s: unexpected tensor %s (not one of a %s with %d layers)", im->set.path, e->string,
                     f->title, im->config.num_layers);
            return 1;
        }
        n_used++;
    }
    // Every name is known and every tensor there: more names than tensors is a tensor twice.
    if (n_used != n - im->head_from_embedding) {
        snprintf(err, errlen, "%s: %d tensor names for %d %s tensors: a tensor appears twice in the %s%s", im->set.path, n_used,
                 n - im->head_from_embedding, f->title, im->set.map ? "weight_map" : "header",
                 f->hf_alias_prefix ? " (under two prefixes?)" : "");
        return 1;
    }
    return 0;
}

// The tensors found into m->params (allocated here), in our layout.
static int read_tensors(HfImport* im, const StTensor* found, size_t scratch, HfModel* m, char* err, size_t errlen) {
    const ModelConfig* c = &im->config;
    const ModelFamily* f = im->family;
    m->n = model_num_parameters(c);
    m->params = (float*)calloc(m->n, sizeof(float));   // the padded vocabulary rows stay zero
    float* tmp = (float*)malloc(scratch * sizeof(float) + 1);
    if (!m->params || !tmp) {
        snprintf(err, errlen, "out of memory (%zu bytes)", (m->n + scratch) * sizeof(float));
        free(tmp);
        return 1;
    }
    const size_t hs = (size_t)(c->channels / c->num_heads);
    const int n = hf_tensor_count(c);
    HfTensor t;
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        if (found[k].ndim == 0) continue;   // the head, from the embedding below
        hf_tensor_at(c, k, &t);
        float* dst = m->params + model_tensor_offset(c, t.tensor) + t.row0 * t.cols;
        rc = st_read(&im->set, &found[k], t.transposed || t.rope_heads ? tmp : dst, err, errlen);
        if (!rc && t.transposed) transpose(tmp, dst, t.cols, t.rows);   // [in, out] -> [out, in]
        if (!rc && t.rope_heads) rope_permute(tmp, dst, t.rope_heads, hs, t.cols, 0);
    }
    free(tmp);
    const TensorSpec *emb = family_root_role(f, ROOT_WTE), *head = family_root_role(f, ROOT_HEAD);
    if (rc || !head || !emb || !im->tie) return rc;
    // A tied head: the embedding's real rows, copied or compared.
    const float* emb_w = m->params + model_tensor_offset(c, (int)(emb - f->root));
    float* head_w = m->params + model_tensor_offset(c, (int)(head - f->root));
    const size_t bytes = (size_t)c->vocab_size * (size_t)c->channels * sizeof(float);
    if (im->head_from_embedding) memcpy(head_w, emb_w, bytes);
    else if (memcmp(head_w, emb_w, bytes) != 0) {
        snprintf(err, errlen, "%s: %s says tie_word_embeddings: true, but %s differs from %s", im->set.path, im->config_path,
                 head->hf_name, emb->hf_name);
        return 1;
    }
    return 0;
}

// The import of an open set: the family (by its names), its config (the family's hook), the
// tensors checked, then read.
static int import_set(HfImport* im, HfModel* m, char* err, size_t errlen) {
    im->names = st_names(&im->set);
    im->family = family_of(im->names);
    if (!im->family) { snprintf(err, errlen, "%s: no model family has Hugging Face safetensors", im->set.path); return 1; }
    if (im->family->hf_config(im, &im->config, err, errlen)) return 1;
    const int n = hf_tensor_count(&im->config);
    StTensor* found = (StTensor*)calloc((size_t)n, sizeof(StTensor));
    if (!found) { snprintf(err, errlen, "out of memory (%zu bytes)", (size_t)n * sizeof(StTensor)); return 1; }
    size_t scratch;
    int rc = match_tensors(im, found, &scratch, err, errlen) || read_tensors(im, found, scratch, m, err, errlen);
    free(found);
    if (rc) {
        free(m->params);
        m->params = NULL;
        return 1;
    }
    m->config = im->config;
    char desc[256];
    model_describe(&m->config, 1, desc, sizeof(desc));
    snprintf(m->line, sizeof(m->line), "%s, %s%s", im->what, desc, im->from);
    snprintf(m->note, sizeof(m->note), "%s", im->note);
    return 0;
}

static int import(const char* path, int sharded, int heads, HfModel* m, char* err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    HfImport* im = (HfImport*)calloc(1, sizeof(HfImport));
    if (!im) { snprintf(err, errlen, "out of memory"); return 1; }
    im->heads = heads;
    int rc = sharded ? st_open_index(&im->set, path, err, errlen) : st_open(&im->set, path, err, errlen);
    if (!rc) rc = import_set(im, m, err, errlen);
    cJSON_Delete(im->config_json);
    st_close(&im->set);
    free(im);
    return rc;
}

int hf_import_file(const char* path, int heads, HfModel* m, char* err, size_t errlen) {
    return import(path, 0, heads, m, err, errlen);
}

int hf_import_index(const char* index_path, int heads, HfModel* m, char* err, size_t errlen) {
    return import(index_path, 1, heads, m, err, errlen);
}
