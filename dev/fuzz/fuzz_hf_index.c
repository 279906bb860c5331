// A Hugging Face model directory as `ckpt import` reads it, through model/'s readers: the
// fuzzer's bytes are the directory's files one after another, each a line "--- NAME" and then
// its bytes up to the next "\n--- " (or the end). With a model.safetensors.index.json among them
// the import is hf_import_index's (the index, its weight_map against every shard's header, the
// config.json beside it, the family's config hooks, the tensors read from their shards), else
// hf_import_file's of model.safetensors (and its config.json: GPT-2's fields that change the
// math, an lm_head compared with wte; Llama's RoPE, head counts and tie). Seeds:
// dev/fuzz/make_hf_index_seeds.py. A rejection is the expected outcome; a sanitizer report, a
// crash, a leak (LeakSanitizer) or a descriptor left open is a bug.
#include "dev/fuzz/fuzz_util.h"

#include <ctype.h>

#include "model/hf.h"

#define MAX_FILES 8
#define MAX_NAME 64

// A name the harness writes: a plain file name of the directory ([A-Za-z0-9._-], not starting
// with '.'), so that no input writes outside it; others are skipped (the reader's own checks of
// the names a weight_map gives are what is fuzzed, with the files it names there or not).
static int name_ok(const uint8_t* s, size_t n) {
    if (n < 1 || n > MAX_NAME || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum(s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-')) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char names[MAX_FILES][MAX_NAME + 1], path[700], err[8192];
    int n_files = 0, sharded = 0;
    size_t at = 0;
    while (n_files < MAX_FILES && at + 4 <= size && !memcmp(data + at, "--- ", 4)) {
        const uint8_t* name = data + at + 4;
        const uint8_t* eol = (const uint8_t*)memchr(name, '\n', size - (at + 4));
        if (!eol) break;
        const uint8_t* body = eol + 1;
        const uint8_t* next = (const uint8_t*)memmem(body, (size_t)(data + size - body), "\n--- ", 5);
        const uint8_t* end = next ? next : data + size;
        const size_t name_len = (size_t)(eol - name);
        if (name_ok(name, name_len)) {
            memcpy(names[n_files], name, name_len);
            names[n_files][name_len] = '\0';
            snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), names[n_files]);
            fuzz_write(path, body, (size_t)(end - body));
            sharded |= !strcmp(names[n_files], "model.safetensors.index.json");
            n_files++;
        }
        if (!next) break;
        at = (size_t)(next - data) + 1;
    }
    // --heads 2 (the seeds' head count) for some inputs: its checks against the files' counts
    const int heads = size % 5 == 1 ? 2 : 0;
    const int fd_before = lowest_free_fd();
    HfModel m;
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), sharded ? "model.safetensors.index.json" : "model.safetensors");
    if ((sharded ? hf_import_index : hf_import_file)(path, heads, &m, err, sizeof(err)) == 0) free(m.params);
    if (lowest_free_fd() != fd_before) {
        fprintf(stderr, "fuzz_hf_index: a descriptor was left open (%s)\n", err);
        abort();
    }
    for (int i = 0; i < n_files; i++) {   // the next input starts from an empty directory
        snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), names[i]);
        unlink(path);
    }
    return 0;
}
