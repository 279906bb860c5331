// Data loader: exact batches from hand-made shards, independence from world size and
// micro-batch, epoch wrap-around, shuffling as a permutation, state save/restore, the
// 32-bit token format, token ids checked against the vocabulary at open (every token) and at
// read (a shard rewritten since), malformed shards, non-regular files (a FIFO, a directory), a
// symlink loop and shards truncated while training. usage: test_loader TMPDIR
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataloader/loader.h"

static int failures = 0;

static void check(int cond, const char* name, const char* fmt_detail) {
    if (cond) printf("ok - %s\n", name);
    else { printf("not ok - %s: %s\n", name, fmt_detail); failures++; }
}

// Shard whose token i is (base + i) % modulo; 2- or 4-byte tokens.
static void write_shard(const char* path, size_t n, uint32_t base, uint32_t modulo, int token_bytes) {
    FILE* fp = fopen(path, "wb");
    if (!fp) { perror(path); exit(2); }
    int32_t h[SHARD_HEADER_INTS] = {0};
    h[0] = token_bytes == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32;
    h[1] = token_bytes == 2 ? 1 : 7;
    h[2] = (int32_t)n;
    fwrite(h, sizeof(h), 1, fp);
    for (size_t i = 0; i < n; i++) {
        uint32_t t = (base + (uint32_t)i) % modulo;
        if (token_bytes == 2) { uint16_t v = (uint16_t)t; fwrite(&v, 2, 1, fp); }
        else fwrite(&t, 4, 1, fp);
    }
    fclose(fp);
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: test_loader TMPDIR\n"); return 2; }
    const char* dir = argv[1];
    // A loader that blocks (a FIFO opened for reading waits for a writer) must fail this
    // test, not hang the suite: SIGALRM's default action ends the process.
    alarm(60);
    setvbuf(stdout, NULL, _IOLBF, 0);  // the lines so far survive such an end
    char path[1024], pattern[1024], err[512], detail[512];
    const size_t T = 4;
    // Two shards: 0..40 (41 tokens -> 10 windows) and 1000..1016 (17 tokens -> 4 windows).
    snprintf(path, sizeof(path), "%s/data_000.bin", dir); write_shard(path, 41, 0, 60000, 2);
    snprintf(path, sizeof(path), "%s/data_001.bin", dir); write_shard(path, 17, 1000, 60000, 2);
    snprintf(pattern, sizeof(pattern), "%s/data_*.bin", dir);

    DataLoader dl;
    int rc = loader_open(&dl, pattern, T, 50257, 1, 0, err, sizeof(err));
    check(rc == 0 && dl.n_shards == 2 && dl.windows_per_epoch == 14, "opens two shards, 14 windows of T+1", err);
    if (rc) return 1;

    // Unshuffled: consecutive windows from the start, targets shifted by one, then the
    // second shard from its own start, then wrap to the next epoch.
    int x[64], y[64];
    loader_read_windows(&dl, 0, 16, x, y, err, sizeof(err));
    int exact = 1;
    for (int b = 0; b < 16 && exact; b++) {
        int w = b % 14;
        int base = w < 10 ? w * 4 : 1000 + (w - 10) * 4;
        for (int t = 0; t < 4; t++)
            if (x[b * 4 + t] != base + t || y[b * 4 + t] != base + t + 1) {
                exact = 0;
                snprintf(detail, sizeof(detail), "row %d col %d: x=%d y=%d, expected %d %d", b, t, x[b * 4 + t], y[b * 4 + t], base + t, base + t + 1);
            }
    }
    check(exact, "unshuffled windows are consecutive, per shard, and wrap around at the epoch", detail);

    // The global batch is the same whatever the world size W and micro-batch B: the rows of
    // (micro-step k, rank r) are windows [(k*W + r)*B, +B) of the batch.
    const int G = 12;
    int reference[12 * 4];
    loader_read_windows(&dl, 3 * G, G, reference, y, err, sizeof(err));
    const int configs[][2] = {{1, 12}, {2, 6}, {3, 4}, {4, 3}, {2, 2}, {4, 1}, {3, 2}, {6, 1}};
    int same = 1;
    for (size_t c = 0; c < sizeof(configs) / sizeof(configs[0]); c++) {
        int W = configs[c][0], B = configs[c][1], accum = G / (W * B);
        DataLoader d2;
        loader_open(&d2, pattern, T, 50257, 1, 0, err, sizeof(err));
        loader_advance(&d2, 3 * (uint64_t)G);
        int got[12 * 4];
        for (int k = 0; k < accum; k++)
            for (int r = 0; r < W; r++) {
                loader_read_micro_batch(&d2, k, W, r, B, x, y, err, sizeof(err));
                memcpy(got + ((k * W + r) * B) * 4, x, (size_t)B * 4 * sizeof(int));
            }
        if (memcmp(got, reference, sizeof(got)) != 0) {
            same = 0;
            snprintf(detail, sizeof(detail), "W=%d B=%d reads a different global batch", W, B);
        }
        loader_close(&d2);
    }
    check(same, "global batch independent of world size and micro-batch", detail);

    // Shuffled: each epoch visits every window exactly once, epochs differ, seeds differ.
    DataLoader sh;
    loader_open(&sh, pattern, T, 50257, 1234, 1, err, sizeof(err));
    int perm_ok = 1, epochs_differ = 0;
    int first_epoch[14];
    for (int e = 0; e < 3; e++) {
        int seen[2][10] = {{0}};
        for (int i = 0; i < 14; i++) {
            int s; size_t w;
            loader_locate(&sh, (uint64_t)e * 14 + (uint64_t)i, &s, &w);
            if (s < 0 || s > 1 || w >= (s == 0 ? 10u : 4u) || seen[s][w]++) {
                perm_ok = 0;
                snprintf(detail, sizeof(detail), "epoch %d position %d: shard %d window %zu repeated or out of range", e, i, s, w);
            }
            int code = s * 100 + (int)w;
            if (e == 0) first_epoch[i] = code;
            else if (first_epoch[i] != code) epochs_differ = 1;
        }
    }
    check(perm_ok, "shuffling is a permutation of the windows in every epoch", detail);
    check(epochs_differ, "shuffled order changes from epoch to epoch", "three epochs in the same order");
    DataLoader sh2;
    loader_open(&sh2, pattern, T, 50257, 999, 1, err, sizeof(err));
    int seeds_differ = 0;
    for (int i = 0; i < 14; i++) {
        int s1, s2; size_t w1, w2;
        loader_locate(&sh, (uint64_t)i, &s1, &w1);
        loader_locate(&sh2, (uint64_t)i, &s2, &w2);
        if (s1 != s2 || w1 != w2) seeds_differ = 1;
    }
    check(seeds_differ, "different seeds give different orders", "same order for seeds 1234 and 999");
    loader_read_windows(&sh, 0, 2, x, y, err, sizeof(err));
    int shuffled_targets = 1;
    for (int b = 0; b < 2; b++) for (int t = 0; t < 4; t++) if (y[b * 4 + t] != x[b * 4 + t] + 1) shuffled_targets = 0;
    check(shuffled_targets, "shuffled windows keep targets = inputs shifted by one", "targets misaligned");

    // State: save after some steps (crossing an epoch), restore into a fresh loader, and the
    // following batches are identical.
    for (int step = 0; step < 9; step++) loader_advance(&sh, 3);  // 27 windows: epoch 1, one before its end
    LoaderState saved = sh.state;
    int expect[3 * 4 * 4];
    for (int step = 0; step < 4; step++) {
        loader_read_micro_batch(&sh, 0, 1, 0, 3, x, y, err, sizeof(err));
        memcpy(expect + step * 12, x, 12 * sizeof(int));
        loader_advance(&sh, 3);
    }
    DataLoader restored;
    loader_open(&restored, pattern, T, 50257, 0, 0, err, sizeof(err));  // seed/shuffle come from the state
    loader_set_state(&restored, &saved);
    int resumed = 1;
    for (int step = 0; step < 4; step++) {
        loader_read_micro_batch(&restored, 0, 1, 0, 3, x, y, err, sizeof(err));
        if (memcmp(expect + step * 12, x, 12 * sizeof(int)) != 0) resumed = 0;
        loader_advance(&restored, 3);
    }
    check(resumed && loader_epoch(&restored) == 2, "restored state resumes the exact batch sequence (across epochs)", "batches differ after restore");
    loader_close(&restored);
    loader_close(&sh2);
    loader_close(&sh);

    // 32-bit tokens (magic 20240801, version 7) for vocabularies over 65535.
    snprintf(path, sizeof(path), "%s/big_vocab.bin", dir); write_shard(path, 9, 70000, 200000, 4);
    DataLoader big;
    rc = loader_open(&big, path, T, 100000, 0, 0, err, sizeof(err));
    if (rc == 0) loader_read_windows(&big, 1, 1, x, y, err, sizeof(err));
    check(rc == 0 && x[0] == 70004 && y[3] == 70008, "uint32 shards (magic 20240801, version 7)", err);
    if (rc == 0) loader_close(&big);
    rc = loader_open(&big, path, T, 50257, 0, 0, err, sizeof(err));
    check(rc != 0 && strstr(err, "big_vocab.bin: token 70000 at position 0 (byte offset 1024) is outside the vocabulary (size 50257)"),
          "tokens beyond the vocabulary are refused when the shard is opened", err);
    if (rc == 0) loader_close(&big);

    // Every token is checked at open, not only those a batch reads: here the one bad id is in
    // the second shard's tail, past its last window (41 tokens: windows end at token 40), which
    // no batch would ever read.
    snprintf(path, sizeof(path), "%s/vocab_a.bin", dir); write_shard(path, 41, 0, 1000, 2);
    snprintf(path, sizeof(path), "%s/vocab_b.bin", dir); write_shard(path, 42, 959, 1001, 2);
    snprintf(pattern, sizeof(pattern), "%s/vocab_*.bin", dir);
    rc = loader_open(&big, pattern, T, 1000, 0, 0, err, sizeof(err));
    check(rc != 0 && strstr(err, "vocab_b.bin: token 1000 at position 41 (byte offset 1106) is outside the vocabulary (size 1000)"),
          "a bad token anywhere in any shard stops loader_open, naming the shard, position, offset and id", err);
    if (rc == 0) loader_close(&big);
    // A shard rewritten in place after the open, its size unchanged: the open's checks cannot
    // see it, the read's does (an id past the vocabulary would index outside the embeddings).
    rc = loader_open(&big, pattern, T, 1001, 0, 0, err, sizeof(err));
    int opened = rc == 0;
    snprintf(path, sizeof(path), "%s/vocab_a.bin", dir); write_shard(path, 41, 998, 5000, 2);
    int bad = opened && loader_read_windows(&big, 0, 1, x, y, err, sizeof(err)) != 0;
    check(bad && strstr(err, "vocab_a.bin: token 1001 at position 3 (byte offset 1030) is outside the vocabulary (size 1001)"),
          "a token made bad after the open is refused when its batch is read", opened ? err : "the clean shards were refused");
    if (opened) loader_close(&big);

    // Probe errors, each naming the file.
    snprintf(path, sizeof(path), "%s/does_not_exist.bin", dir);
    rc = loader_open(&big, path, T, 50257, 0, 0, err, sizeof(err));
    check(rc != 0 && strstr(err, "no files match") != NULL, "empty glob is refused", err);
    snprintf(path, sizeof(path), "%s/truncated.bin", dir);
    write_shard(path, 100, 0, 50000, 2);
    if (truncate(path, 1024 + 50) != 0) perror("truncate");
    ShardInfo info;
    rc = shard_probe(path, &info, err, sizeof(err));
    check(rc != 0 && strstr(err, "truncated.bin: header says 100 tokens") != NULL, "truncated token data is refused", err);

    // Non-regular files are refused at once, naming the file and what it is: a FIFO would
    // block the open until a writer appears (the alarm above catches a hang).
    snprintf(path, sizeof(path), "%s/fifo.bin", dir);
    unlink(path);
    if (mkfifo(path, 0600) != 0) perror("mkfifo");
    rc = loader_open(&big, path, T, 50257, 0, 0, err, sizeof(err));
    check(rc != 0 && strstr(err, "fifo.bin: not a regular file (a FIFO)") != NULL, "a FIFO given as a shard is refused without blocking", err);
    snprintf(path, sizeof(path), "%s/dir.bin", dir);
    mkdir(path, 0700);
    rc = shard_probe(path, &info, err, sizeof(err));
    check(rc != 0 && strstr(err, "dir.bin: not a regular file (a directory)") != NULL, "a directory given as a shard is refused", err);
    // A symlink loop is named as one (ELOOP's own words read like a missing file).
    char other[1024];
    snprintf(path, sizeof(path), "%s/loop_a.bin", dir);
    snprintf(other, sizeof(other), "%s/loop_b.bin", dir);
    unlink(path); unlink(other);
    if (symlink(other, path) != 0 || symlink(path, other) != 0) perror("symlink");
    rc = loader_open(&big, path, T, 50257, 0, 0, err, sizeof(err));
    check(rc != 0 && strstr(err, "loop_a.bin: cannot open: a symlink loop (Too many levels of symbolic links)") != NULL,
          "a symlink loop given as a shard is named as one", err);

    // Shards truncated while training: reads are pread()s into the loader's buffer, so a
    // shrunken file is an error naming it, not a SIGBUS (which a mapping of it would raise).
    // (a) the open shard shrinks between two reads;
    snprintf(pattern, sizeof(pattern), "%s/shrink_*.bin", dir);
    snprintf(path, sizeof(path), "%s/shrink_000.bin", dir); write_shard(path, 4001, 0, 50000, 2);
    snprintf(path, sizeof(path), "%s/shrink_001.bin", dir); write_shard(path, 4001, 7, 50000, 2);
    DataLoader tr;
    rc = loader_open(&tr, pattern, T, 50257, 0, 0, err, sizeof(err));
    int first_ok = rc == 0 && loader_read_windows(&tr, 0, 2, x, y, err, sizeof(err)) == 0 && x[4] == 4;
    snprintf(path, sizeof(path), "%s/shrink_000.bin", dir);
    if (truncate(path, 1024 + 2 * 100) != 0) perror("truncate");
    int later = rc == 0 ? loader_read_windows(&tr, 500, 1, x, y, err, sizeof(err)) : 0;
    check(first_ok && later != 0 && strstr(err, "shrink_000.bin: truncated while training") != NULL,
          "a shard truncated while open is named on the next read (no SIGBUS)", err);
    // (b) a shard not yet open was truncated: found when it is opened, before any token is used;
    snprintf(path, sizeof(path), "%s/shrink_001.bin", dir);
    if (truncate(path, 1024 + 2 * 3000) != 0) perror("truncate");
    later = rc == 0 ? loader_read_windows(&tr, 1000, 1, x, y, err, sizeof(err)) : 0;
    check(later != 0 && strstr(err, "shrink_001.bin: changed while training: 7024 bytes, its header's 4001 tokens need 9026") != NULL,
          "a shard truncated before it is opened is named when opened", err);
    // (c) a caller that goes on after the error gets the same error again, not the windows
    // that happen to survive in the shortened file.
    later = rc == 0 ? loader_read_windows(&tr, 1, 1, x, y, err, sizeof(err)) : 1;
    check(later != 0 && strstr(err, "shrink_000.bin: changed while training") != NULL,
          "a truncated shard stays refused when read again", err);
    if (rc == 0) loader_close(&tr);

    loader_close(&dl);
    return failures ? 1 : 0;
}
