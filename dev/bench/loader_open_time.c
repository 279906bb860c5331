/* loader_open's cost, for dev/bench/bench_loader.sh only: the shards' header checks and the
 * pass over every token against the vocabulary (dataloader/loader.c, check_tokens), timed
 * over ROUNDS opens of the same shards (the page cache warm after the first: the best and the
 * median are printed, and the first, which may have read from disk).
 *   usage: loader_open_time PATTERN T VOCAB ROUNDS
 * Prints one line: "open: N shards, M tokens: first F ms, best B ms, median D ms (X ns/token,
 * Y GB/s)". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dataloader/loader.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
    if (argc != 5) { fprintf(stderr, "usage: loader_open_time PATTERN T VOCAB ROUNDS\n"); return 2; }
    const size_t T = (size_t)atol(argv[2]);
    const int vocab = atoi(argv[3]), rounds = atoi(argv[4]);
    if (T < 1 || vocab < 1 || rounds < 1 || rounds > 1000) { fprintf(stderr, "loader_open_time: bad arguments\n"); return 2; }
    double ms[1000];
    size_t tokens = 0, bytes = 0;
    int shards = 0;
    char err[1024];
    for (int r = 0; r < rounds; r++) {
        DataLoader dl;
        double t0 = now_ms();
        if (loader_open(&dl, argv[1], T, vocab, 0, 0, err, sizeof(err))) { fprintf(stderr, "loader_open_time: %s\n", err); return 1; }
        ms[r] = now_ms() - t0;
        shards = dl.n_shards;
        tokens = bytes = 0;
        for (int i = 0; i < dl.n_shards; i++) {
            tokens += dl.shards[i].n_tokens;
            bytes += dl.shards[i].n_tokens * (size_t)dl.shards[i].token_bytes;
        }
        loader_close(&dl);
    }
    const double first = ms[0];
    qsort(ms, (size_t)rounds, sizeof(double), cmp_double);
    const double best = ms[0], median = ms[rounds / 2];
    printf("open: %d shard(s), %zu tokens: first %.1f ms, best %.1f ms, median %.1f ms (%.3f ns/token, %.2f GB/s)\n", shards,
           tokens, first, best, median, median * 1e6 / (double)tokens, (double)bytes / (median * 1e6));
    return 0;
}
