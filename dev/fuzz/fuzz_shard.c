// Token shard headers and reads (dataloader/loader.c): the fuzzer's bytes are a shard file;
// shard_probe checks it, loader_open opens it and, when it holds a window, a few windows are
// read (the first, the last, and two across the epoch boundary, shuffled or not).
#include "dev/fuzz/fuzz_util.h"
#include "dataloader/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[600], err[512];
    snprintf(path, sizeof(path), "%s/shard.bin", fuzz_dir());
    fuzz_write(path, data, size);
    ShardInfo info;
    if (shard_probe(path, &info, err, sizeof(err)) != 0) return 0;
    // A small T so that short shards hold windows; a vocabulary the uint32 format can exceed.
    const size_t T = 1 + (size_t)(data[size > 8 ? 8 : 0] % 16);
    int vocab = info.token_bytes == 4 ? 1 << 20 : 50257;
    DataLoader dl;
    if (loader_open(&dl, path, T, vocab, 7, (int)(size & 1), err, sizeof(err)) != 0) return 0;
    int x[2 * 16], y[2 * 16];
    uint64_t n = dl.windows_per_epoch;
    loader_read_windows(&dl, 0, 1, x, y, err, sizeof(err));
    loader_read_windows(&dl, n - 1, 1, x, y, err, sizeof(err));
    loader_read_windows(&dl, 3 * n - 1, 2, x, y, err, sizeof(err));
    loader_close(&dl);
    return 0;
}
