// llm.c model files: the header, and where each tensor lies in the file (model/llmc.h).
#include "model/llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
