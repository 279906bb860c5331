// The checkpoint manifest reader (checkpoint/checkpoint.c): the fuzzer's bytes, after a first
// byte that picks a raw, a zstd_shuffle or a boxed checkpoint (byte % 3), are that checkpoint's
// manifest.json. Three real checkpoints (world 2, two small tensors, every kind; the third of
// boxes, as a tensor-parallel save writes: format version 2) are written at start, so the rank
// files a manifest points into exist and hold what a real save wrote; ckpt_open parses the
// manifest, then every tensor is read (whole, a middle range, as a batch, and a box) and the
// whole checkpoint verified, as --resume, ckpt export and ckpt verify do.
// FUZZ_WRITE_SEEDS=DIR writes the three real manifests (with their first byte) into DIR.
#include "dev/fuzz/fuzz_util.h"
#include "checkpoint/checkpoint.h"

#define TEMPLATES 3
static const char* const template_names[TEMPLATES] = {"raw", "zstd", "box"};
static char step_dir[TEMPLATES][700];

static void write_template(int which) {
    char root[600], err[512];
    snprintf(root, sizeof(root), "%s/%s", fuzz_dir(), template_names[which]);
    // a [4, 8] split 16 + 16, b [1, 5] split 3 + 2, over two ranks, for every kind; boxed: a
    // by columns (rank r: columns [4r, 4r + 4), as a row-parallel split), b as a box [0, 3)
    // and the range [3, 5)
    static const CkptTensor tensors[2] = {{"a", 4, 8}, {"b", 1, 5}};
    static float values[3][2][32], cols[3][2][16];
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 32; i++) values[k][t][i] = (float)(k * 100 + t * 10) + 0.25f * (float)i;
    CkptPiece pieces[2][6];
    int n_pieces[2] = {6, 6};
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) {
            uint64_t a_lo = r ? 16 : 0, a_hi = r ? 32 : 16, b_lo = r ? 3 : 0, b_hi = r ? 5 : 3;
            pieces[r][2 * k] = (CkptPiece){"a", k, a_lo, a_hi, values[k][0] + a_lo, {0, 0, 0, 0}};
            pieces[r][2 * k + 1] = (CkptPiece){"b", k, b_lo, b_hi, values[k][1] + b_lo, {0, 0, 0, 0}};
            if (which != 2) continue;
            for (int i = 0; i < 16; i++) cols[k][r][i] = values[k][0][(i / 4) * 8 + 4 * r + i % 4];
            pieces[r][2 * k] = (CkptPiece){"a", k, 0, 0, cols[k][r], {0, 4 * (uint64_t)r, 4, 4}};
            if (r == 0) pieces[r][2 * k + 1].box = (CkptBox){0, 0, 1, 3};
        }
    const CkptPiece* const per_rank[2] = {pieces[0], pieces[1]};
    CkptOptions opt;
    memset(&opt, 0, sizeof(opt));
    opt.codec = which == 1 ? CKPT_CODEC_ZSTD : CKPT_CODEC_RAW;
    opt.zstd_level = 3;
    opt.keep = 1000;
    cJSON* state = cJSON_CreateObject();
    cJSON_AddStringToObject(state, "note", "fuzz template");
    if (ckpt_write_offline(root, 1, 2, tensors, 2, per_rank, n_pieces, state, &opt, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_manifest: cannot write the template checkpoint: %s\n", err);
        exit(2);
    }
    snprintf(step_dir[which], sizeof(step_dir[which]), "%s/step_00000001", root);
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    for (int w = 0; w < TEMPLATES; w++) write_template(w);
    const char* seeds = getenv("FUZZ_WRITE_SEEDS");
    for (int w = 0; seeds && w < TEMPLATES; w++) {
        char from[800], to[800], buf[1 << 16];
        snprintf(from, sizeof(from), "%s/manifest.json", step_dir[w]);
        snprintf(to, sizeof(to), "%s/%s_manifest", seeds, template_names[w]);
        FILE* f = fopen(from, "rb");
        size_t n = f ? fread(buf + 1, 1, sizeof(buf) - 1, f) : 0;
        if (f) fclose(f);
        buf[0] = (char)w;
        fuzz_write(to, (const uint8_t*)buf, n + 1);
    }
    return 0;
}

// Reads [lo, hi) of every kind of tensor t, whole and as a batch.
static void read_tensor(Ckpt* c, const CkptTensor* t, float* buf, size_t cap) {
    char err[512];
    uint64_t numel;
    if (__builtin_mul_overflow(t->rows, t->cols, &numel)) return;
    uint64_t hi = numel < cap ? numel : cap;
    for (int k = 0; k < CKPT_KINDS; k++) {
        ckpt_read(c, t->name, k, 0, hi, buf, err, sizeof(err));
        ckpt_read(c, t->name, k, numel / 3, numel / 3 + (numel / 2 - numel / 3 < cap ? numel / 2 - numel / 3 : cap), buf, err, sizeof(err));
    }
    CkptRequest req[2] = {{t->name, CKPT_PARAM, 0, hi / 2, buf, {0, 0, 0, 0}}, {t->name, CKPT_ADAM_V, hi / 2, hi, buf + hi / 2, {0, 0, 0, 0}}};
    ckpt_read_batch(c, req, 2, err, sizeof(err));
    // a box: the middle rows and columns (as a tensor-parallel resume asks)
    CkptRequest box = {t->name, CKPT_ADAM_M, 0, 0, buf, {t->rows / 4, t->cols / 4, t->rows / 2, t->cols / 2}};
    if (box.box.rows * box.box.cols <= cap) ckpt_read_batch(c, &box, 1, err, sizeof(err));
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    int which = data[0] % TEMPLATES;
    char path[800], err[512];
    snprintf(path, sizeof(path), "%s/manifest.json", step_dir[which]);
    fuzz_write(path, data + 1, size - 1);
    Ckpt c;
    if (ckpt_open(&c, step_dir[which], err, sizeof(err)) != 0) return 0;
    static float buf[4096];
    for (int i = 0; i < c.n_tensors && i < 8; i++) read_tensor(&c, &c.tensors[i], buf, 4096);
    ckpt_read(&c, "no such tensor", CKPT_PARAM, 0, 1, buf, err, sizeof(err));
    ckpt_verify(&c, err, sizeof(err));
    uint64_t stored, raw;
    ckpt_sizes(&c, &stored, &raw);
    ckpt_close(&c);
    return 0;
}
