// llm.c model file headers (model/llmc.c read_model_header): the fuzzer's bytes are a model
// file (its size is part of what the header is checked against); a header that passes is
// given to build_layout, as train_gpt --init-from and ckpt import do next.
#include "dev/fuzz/fuzz_util.h"
#include "model/llmc.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[600], err[512];
    snprintf(path, sizeof(path), "%s/model.bin", fuzz_dir());
    fuzz_write(path, data, size);
    ModelConfig c;
    int version = 0;
    if (read_model_header(path, &c, &version, err, sizeof(err)) != 0) return 0;
    if (version != 3 && version != 5) abort();  // the header check let another version through
    ModelLayout m;
    if (build_layout(&m, &c, 1, 3) == 0) free(m.units);
    return 0;
}
