// The files `ckpt import` reads, through model/'s readers: the fuzzer's bytes are a file named
// model.safetensors, taken as the tool takes it: an llm.c model file by its magic
// (read_model_header, then llmc_read_model of the whole model), else Hugging Face safetensors
// (hf_import_file: the container's checks, the family its names mark, the family's config, every
// tensor's shape, the reads with their dtype conversions, transposes and RoPE permutations).
// Those readers return their errors; a rejection is the expected outcome. A sanitizer report, a
// crash, a leak (LeakSanitizer, on in libFuzzer) or a descriptor left open is a bug.
#include "dev/fuzz/fuzz_util.h"
#include "model/hf.h"
#include "model/llmc.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[600], err[8192];
    snprintf(path, sizeof(path), "%s/model.safetensors", fuzz_dir());
    fuzz_write(path, data, size);
    const int fd_before = lowest_free_fd();
    int32_t magic = 0;
    if (size >= 4) memcpy(&magic, data, 4);
    if (magic == MODEL_FILE_MAGIC) {
        ModelConfig c;
        int version;
        if (read_model_header(path, &c, &version, err, sizeof(err)) == 0) {
            float* params = (float*)malloc(model_num_parameters(&c) * sizeof(float) + 1);
            if (params) llmc_read_model(path, &c, version, params, err, sizeof(err));
            free(params);
        }
    } else {
        HfModel m;
        if (hf_import_file(path, 0, &m, err, sizeof(err)) == 0) free(m.params);
    }
    if (lowest_free_fd() != fd_before) {
        fprintf(stderr, "fuzz_safetensors: a descriptor was left open (%s)\n", err);
        abort();
    }
    return 0;
}
