// llm.c model files: the header, where each tensor lies, reading and writing them (model/llmc.h).
#include "model/llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int llmc_has_layout(const ModelConfig* c) {
    const ModelFamily* f = model_family(c);
    for (int i = 0; f && i < f->n_root; i++) if (f->root[i].llmc_kind < 0) return 0;
    for (int i = 0; f && i < f->n_block; i++) if (f->block[i].llmc_kind < 0) return 0;
    return f != NULL;
}

const TensorSpec* llmc_kind_spec(const ModelConfig* c, int kind, int* is_block) {
    const ModelFamily* f = model_family(c);
    *is_block = 0;
    for (int i = 0; i < f->n_root; i++)
        if (f->root[i].llmc_kind == kind) { *is_block = 0; return &f->root[i]; }
    for (int i = 0; i < f->n_block; i++)
        if (f->block[i].llmc_kind == kind) { *is_block = 1; return &f->block[i]; }
    return NULL;
}

size_t llmc_offset(const ModelConfig* c, int kind, int layer) {
    size_t off = 0, rows, cols;
    int is_block = 0;
    for (int k = 0; k < kind; k++) {
        const TensorSpec* s = llmc_kind_spec(c, k, &is_block);
        spec_shape(c, s, &rows, &cols);
        off += rows * cols * (is_block ? (size_t)c->num_layers : 1);
    }
    spec_shape(c, llmc_kind_spec(c, kind, &is_block), &rows, &cols);
    return off + (size_t)layer * rows * cols;
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
    c->arch = ARCH_GPT2;
    c->max_seq_len = h[2]; c->vocab_size = h[3]; c->num_layers = h[4];
    c->num_heads = h[5]; c->channels = h[6]; c->padded_vocab_size = h[7];
    c->norm_eps = MODEL_DEFAULT_NORM_EPS;  // llm.c's GPT-2 (its header has no field for it)
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


static int read_at(int fd, const char* path, void* buf, size_t bytes, off_t at, char* err, size_t errlen) {
    size_t done = 0;
    while (done < bytes) {
        ssize_t r = pread(fd, (char*)buf + done, bytes - done, at + (off_t)done);
        if (r <= 0) {
            snprintf(err, errlen, "%s: read failed: %s", path, r == 0 ? "unexpected end of file" : strerror(errno));
            return 1;
        }
        done += (size_t)r;
    }
    return 0;
}

int llmc_read_params(int fd, const char* path, int version, size_t first, size_t n, float* dst, char* err, size_t errlen) {
    if (version == 3) return read_at(fd, path, dst, n * sizeof(float), (off_t)(MODEL_HEADER_BYTES + first * sizeof(float)), err, errlen);
    // bf16: through a bounded staging buffer
    const size_t block = (size_t)1 << 20;
    uint16_t* staging = (uint16_t*)malloc((n < block ? n : block) * sizeof(uint16_t) + 1);
    if (!staging) { snprintf(err, errlen, "%s: out of host memory", path); return 1; }
    for (size_t i = 0; i < n; i += block) {
        size_t k = n - i < block ? n - i : block;
        if (read_at(fd, path, staging, k * sizeof(uint16_t), (off_t)(MODEL_HEADER_BYTES + (first + i) * sizeof(uint16_t)), err, errlen)) {
            free(staging);
            return 1;
        }
        for (size_t j = 0; j < k; j++) dst[i + j] = bf16_to_float(staging[j]);
    }
    free(staging);
    return 0;
}

int llmc_read_model(const char* path, const ModelConfig* c, int version, float* dst, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    int rc = 0;
    for (int i = 0; i < model_tensor_count(c) && !rc; i++) {
        const ModelTensor t = model_tensor_at(c, i);
        size_t rows, cols;
        spec_shape(c, t.spec, &rows, &cols);
        rc = llmc_read_params(fd, path, version, llmc_offset(c, t.spec->llmc_kind, t.layer), rows * cols,
                              dst + model_tensor_offset(c, i), err, errlen);
    }
    close(fd);
    return rc;
}

int llmc_read_model_file(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* arena,
                         const char* path, int version, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    for (int i = 0; i < n_pieces; i++) {
        const FlatPiece* p = &pieces[i];
        int layer;
        const TensorSpec* spec = unit_tensor_spec(m, p->unit, p->tensor, &layer);
        char what[1200];
        snprintf(what, sizeof(what), "%s (%s)", path, m->units[p->unit].tensors[p->tensor].name);
        const size_t first = llmc_offset(&m->config, spec->llmc_kind, layer);
        // The file holds the whole tensor: a tensor-parallel rank reads the global runs its local
        // elements are (one run, the piece, when the tensor is whole).
        TpView view;
        layout_tp_view(m, p->unit, p->tensor, &view);
        for (size_t e = p->lo, run; e < p->hi; e += run) {
            const size_t g = tp_view_global_element(&view, e, &run);
            if (run > p->hi - e) run = p->hi - e;
            if (llmc_read_params(fd, what, version, first + g, run, arena + p->at + (e - p->lo), err, errlen)) {
                close(fd);
                return 1;
            }
        }
    }
    close(fd);
    return 0;
}

static uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays a quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                             // round to nearest even
    return (uint16_t)(u >> 16);
}

int llmc_file_create(LlmcFileWriter* w, const char* path, const ModelConfig* c, int version, char* err, size_t errlen) {
    memset(w, 0, sizeof(*w));  // a zeroed AtomicFile is closed: llmc_file_abort is a no-op
    if (!llmc_has_layout(c)) {  // llm.c's kinds and offsets are GPT-2's
        snprintf(err, errlen, "%s: llm.c model files hold GPT-2 only, not a %s model", path, model_family(c)->title);
        return 1;
    }
    if (c->norm_eps != MODEL_DEFAULT_NORM_EPS) {  // a reader would take 1e-5: refused, not silently changed
        snprintf(err, errlen, "%s: llm.c model files have no field for the norm epsilon, and this model's is %g (not "
                 "1e-5): use --safetensors", path, (double)c->norm_eps);
        return 1;
    }
    w->config = *c;
    w->version = version;
    if (atomic_file_open(&w->file, path, ATOMIC_TMP, err, errlen)) return 1;
    int32_t h[256];
    llmc_model_header(c, version, h);
    return atomic_file_pwrite(&w->file, h, sizeof(h), 0, err, errlen);
}

int llmc_file_put(LlmcFileWriter* w, int kind, int layer, size_t lo, const float* src, size_t n, char* err, size_t errlen) {
    size_t first = llmc_offset(&w->config, kind, layer) + lo;
    if (w->version == 3) return atomic_file_pwrite(&w->file, src, n * sizeof(float), (off_t)(MODEL_HEADER_BYTES + first * sizeof(float)), err, errlen);
    const size_t block = (size_t)1 << 20;
    uint16_t* half = (uint16_t*)malloc((n < block ? n : block) * sizeof(uint16_t) + 1);
    if (!half) { snprintf(err, errlen, "%s: out of host memory", w->file.tmp); return 1; }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i += block) {
        size_t k = n - i < block ? n - i : block;
        for (size_t j = 0; j < k; j++) half[j] = float_to_bf16(src[i + j]);
        rc = atomic_file_pwrite(&w->file, half, k * sizeof(uint16_t), (off_t)(MODEL_HEADER_BYTES + (first + i) * sizeof(uint16_t)), err, errlen);
    }
    free(half);
    return rc;
}

int llmc_file_commit(LlmcFileWriter* w, char* err, size_t errlen) {
    return atomic_file_commit(&w->file, err, errlen);
}

void llmc_file_abort(LlmcFileWriter* w) {
    atomic_file_abort(&w->file);
}

int llmc_write_model_file(const ModelLayout* m, const float* arena, const ProcessGroup* pg, const char* path,
                          char* err, size_t errlen) {
    // Who takes part: the first replica group's ranks gather each unit from their shard group
    // (the other replicas hold the same shards); at TP their shard-rank-0 ranks, world ranks
    // 0 .. tp-1 (TP innermost), hand the local units on to rank 0 over tp_comm. Rank 0 holds at
    // most one unit per TP rank at a time, never the whole model.
    const int writer = pg->rank == 0, tp = m->tp_size;
    const int gathers = pg->replicate_rank == 0, tp_gathers = tp > 1 && gathers && pg->shard_rank == 0;
    size_t max_padded = 0;
    for (int u = 0; u < m->n_units; u++) if (m->units[u].padded > max_padded) max_padded = m->units[u].padded;
    float* full = gathers && pg->shard_rank == 0 ? (float*)malloc(max_padded * sizeof(float)) : NULL;
    float* all = writer && tp > 1 ? (float*)malloc((size_t)tp * max_padded * sizeof(float)) : NULL;
    int32_t failed[2] = {0, (gathers && pg->shard_rank == 0 && !full) || (writer && tp > 1 && !all)};
    LlmcFileWriter w;
    if (writer) failed[0] = llmc_file_create(&w, path, &m->config, 3, err, errlen);
    comm_all_reduce_i32(pg->world_comm, failed, 2, COMM_MAX);
    if (failed[0] || failed[1]) {
        if (writer && !failed[0]) {
            llmc_file_abort(&w);
            snprintf(err, errlen, "%s: out of host memory for the gathered units (%zu bytes a unit, %d on rank 0)",
                     path, max_padded * sizeof(float), tp);
        }
        free(full);
        free(all);
        return 1;
    }
    int bad = 0;  // a failed write stops the writing, not the gathers the other ranks are in
    size_t shard_at = 0;  // unit u's shard in the arena
    for (int u = 0; u < m->n_units; u++) {
        const FlatUnit* unit = &m->units[u];
        if (gathers) comm_gather(pg->shard_comm, arena + shard_at, unit->shard * sizeof(float), full, 0);
        shard_at += unit->shard;
        // Every TP rank's unit has the same size (model.h): TP rank t's lands at all + t x padded.
        if (tp_gathers) comm_gather(pg->tp_comm, full, unit->padded * sizeof(float), all, 0);
        for (int t = 0; writer && t < tp && !bad; t++) {
            // TP rank t's local tensors are its boxes of the global ones; their views need only
            // the rank (the units are the same on every TP rank).
            ModelLayout mt = *m;
            mt.tp_rank = t;
            const float* local = tp > 1 ? all + (size_t)t * unit->padded : full;
            for (int i = 0; i < unit->n_tensors && !bad; i++) {
                TpView view;
                layout_tp_view(&mt, u, i, &view);
                if (view.replicated && t > 0) continue;  // whole on every TP rank: written from TP rank 0's
                int layer;
                const TensorSpec* spec = unit_tensor_spec(m, u, i, &layer);
                const float* src = local + unit->tensors[i].offset;
                for (size_t e = 0, run; e < unit->tensors[i].numel && !bad; e += run) {
                    const size_t g = tp_view_global_element(&view, e, &run);  // (TP 1: one run, the tensor)
                    bad = llmc_file_put(&w, spec->llmc_kind, layer, g, src + e, run, err, errlen);
                }
            }
        }
    }
    if (writer) {
        if (bad) llmc_file_abort(&w);
        else bad = llmc_file_commit(&w, err, errlen);
    }
    free(full);
    free(all);
    comm_broadcast(pg->world_comm, &bad, sizeof(bad), 0);
    return bad;
}
