// Eval files in llm.c's format (dataloader/evalset.h): the writer and the reader round-trip
// random examples field for field; the file's bytes are llm.c's layout; every malformed file
// the reader must refuse is refused with its message, leaving the set zeroed (a truncated
// header or example, a foreign magic, version, counts, framing, labels, completion counts,
// empty parts, tokens outside the vocabulary, rows longer than the limit and one exactly at
// it, the header's longest-example field, trailing bytes, a directory, a FIFO, a missing
// file); the writer refuses what the format cannot hold and leaves no file.
//   usage: test_evalset TMPDIR                      the tests
//          test_evalset dump FILE VOCAB MAX_ROW     FILE's examples as JSON on stdout (for
//                                                   dev/test/data_prep_check.py), or its error
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataloader/evalset.h"

static int failures = 0;

static void check(int cond, const char* name, const char* detail) {
    if (cond) printf("ok - evalset: %s\n", name);
    else { printf("not ok - evalset: %s: %s\n", name, detail); failures++; }
}

static int dump(const char* path, int vocab, int max_row) {
    EvalSet s;
    char err[512];
    if (evalset_load(&s, path, vocab, max_row, err, sizeof(err))) { fprintf(stderr, "%s\n", err); return 1; }
    printf("{\"n_examples\": %d, \"longest_example_bytes\": %d, \"longest_row\": %d, \"examples\": [", s.n_examples,
           s.longest_example_bytes, s.longest_row);
    for (int k = 0; k < s.n_examples; k++) {
        const EvalExample* e = &s.examples[k];
        printf("%s\n{\"index\": %d, \"label\": %d, \"context\": [", k ? "," : "", e->index, e->label);
        for (int i = 0; i < e->context_len; i++) printf("%s%u", i ? ", " : "", e->context[i]);
        printf("], \"completions\": [");
        for (int c = 0; c < e->n_completions; c++) {
            printf("%s[", c ? ", " : "");
            for (int i = 0; i < e->completion_len[c]; i++) printf("%s%u", i ? ", " : "", e->completion[c][i]);
            printf("]");
        }
        printf("]}");
    }
    printf("]}\n");
    evalset_free(&s);
    return 0;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {  // xorshift64*, uniform enough for test data
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32) % n;
}

static void put_file(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f)) { perror(path); exit(2); }
}

static uint8_t* get_file(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t* b = malloc(*n + 64);
    if (!b || fread(b, 1, *n, f) != *n) { perror(path); exit(2); }
    fclose(f);
    return b;
}

static int zeroed(const EvalSet* s) {
    EvalSet z;
    memset(&z, 0, sizeof(z));
    return !memcmp(s, &z, sizeof(z));
}

// evalset_load(path) must fail with a message containing want, and leave the set zeroed.
static void refused(const char* name, const char* path, int vocab, int max_row, const char* want) {
    EvalSet s;
    memset(&s, 0xAB, sizeof(s));  // what the caller had there before must not survive
    char err[512] = "", detail[1200];
    int rc = evalset_load(&s, path, vocab, max_row, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d, zeroed %d, message \"%s\", want \"%s\"", rc, zeroed(&s), err, want);
    if (rc == 1 && zeroed(&s) && strstr(err, want) && strstr(err, path)) printf("ok - evalset: %s (%s)\n", name, err);
    else check(0, name, detail);
    if (rc == 0) evalset_free(&s);
}

// The good file's bytes with one change, as TMPDIR/bad.bin.
static char bad_path[1024];
static const char* variant(const uint8_t* good, size_t n, size_t at, const void* value, size_t value_bytes, size_t keep) {
    uint8_t* b = malloc(n + 64);
    memcpy(b, good, n);
    if (value) memcpy(b + at, value, value_bytes);
    put_file(bad_path, b, keep);
    free(b);
    return bad_path;
}
static const char* set_u16(const uint8_t* good, size_t n, size_t at, uint16_t v) { return variant(good, n, at, &v, 2, n); }
static const char* set_i32(const uint8_t* good, size_t n, size_t at, int32_t v) { return variant(good, n, at, &v, 4, n); }

// The writer must refuse (message containing want) and leave neither path nor its temporary.
static void write_refused(const char* name, const char* dir, const EvalExample* ex, int n, const char* want) {
    char path[1024], tmp[1100], err[512] = "", detail[1200];
    snprintf(path, sizeof(path), "%s/refused.bin", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    unlink(path);
    int rc = evalset_write(path, ex, n, err, sizeof(err));
    int left = access(path, F_OK) == 0 || access(tmp, F_OK) == 0;
    snprintf(detail, sizeof(detail), "rc %d, file left %d, message \"%s\", want \"%s\"", rc, left, err, want);
    if (rc == 1 && !left && strstr(err, want)) printf("ok - evalset: %s (%s)\n", name, err);
    else check(0, name, detail);
}

static int same_example(const EvalExample* a, const EvalExample* b) {
    if (a->index != b->index || a->label != b->label || a->n_completions != b->n_completions || a->context_len != b->context_len ||
        memcmp(a->context, b->context, (size_t)a->context_len * 2))
        return 0;
    for (int c = 0; c < a->n_completions; c++)
        if (a->completion_len[c] != b->completion_len[c] || memcmp(a->completion[c], b->completion[c], (size_t)a->completion_len[c] * 2))
            return 0;
    return 1;
}

int main(int argc, char** argv) {
    if (argc == 5 && !strcmp(argv[1], "dump")) return dump(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc != 2) { fprintf(stderr, "usage: test_evalset TMPDIR | test_evalset dump FILE VOCAB MAX_ROW\n"); return 2; }
    const char* dir = argv[1];
    alarm(60);  // a reader that blocks on the FIFO fails the test instead of hanging the suite
    setvbuf(stdout, NULL, _IOLBF, 0);
    char path[1024], err[512], detail[1024];
    snprintf(bad_path, sizeof(bad_path), "%s/bad.bin", dir);

    // ---- round trip: random examples, 1..16 completions, lengths 1..60 -------------------------
    enum { N = 200 };
    static EvalExample ex[N];
    static uint16_t pool[N * (60 + 16 * 30)];
    uint16_t* o = pool;
    int longest_row = 0, longest_bytes = 0;
    size_t total_u16 = 0;
    for (int k = 0; k < N; k++) {
        EvalExample* e = &ex[k];
        e->index = k % 3 ? k : (int)rnd(65536);  // as written, not the position
        e->n_completions = k < 16 ? k + 1 : 1 + (int)rnd(16);
        e->label = (int)rnd((uint32_t)e->n_completions);
        e->context_len = 1 + (int)rnd(60);
        e->context = o;
        for (int i = 0; i < e->context_len; i++) *o++ = (uint16_t)rnd(50257);
        size_t u16 = 6 + (size_t)e->context_len;
        for (int c = 0; c < e->n_completions; c++) {
            e->completion_len[c] = 1 + (int)rnd(30);
            e->completion[c] = o;
            for (int i = 0; i < e->completion_len[c]; i++) *o++ = (uint16_t)(k == 0 && i == 0 ? 50256 : rnd(50257));
            if (e->context_len + e->completion_len[c] > longest_row) longest_row = e->context_len + e->completion_len[c];
            u16 += 1 + (size_t)e->completion_len[c];
        }
        if ((int)(2 * u16) > longest_bytes) longest_bytes = (int)(2 * u16);
        total_u16 += u16;
    }
    snprintf(path, sizeof(path), "%s/round.bin", dir);
    int rc = evalset_write(path, ex, N, err, sizeof(err));
    check(rc == 0, "writer: 200 random examples", err);
    EvalSet s;
    rc = evalset_load(&s, path, 50257, longest_row, err, sizeof(err));
    check(rc == 0, "reader: reads the writer's file back (row limit = its longest row, exactly)", err);
    if (rc) return 1;
    int same = s.n_examples == N;
    int first_bad = -1;
    for (int k = 0; k < N && same; k++)
        if (!same_example(&s.examples[k], &ex[k])) same = 0, first_bad = k;
    snprintf(detail, sizeof(detail), "%d examples, first differing %d", s.n_examples, first_bad);
    check(same, "round trip: every index, label, count and token equal", detail);
    snprintf(detail, sizeof(detail), "longest_row %d (want %d), longest_example_bytes %d (want %d)", s.longest_row, longest_row,
             s.longest_example_bytes, longest_bytes);
    check(s.longest_row == longest_row && s.longest_example_bytes == longest_bytes, "round trip: longest row and example", detail);
    evalset_free(&s);
    check(zeroed(&s), "evalset_free leaves the set zeroed", "not zeroed");
    // The file's bytes: llm.c's header, then the examples' uint16 fields back to back.
    size_t n;
    uint8_t* round = get_file(path, &n);
    int32_t h[256];
    memcpy(h, round, sizeof(h));
    int header_ok = h[0] == 20240522 && h[1] == 1 && h[2] == N && h[3] == longest_bytes;
    for (int i = 4; i < 256; i++) header_ok &= h[i] == 0;
    const uint16_t* u = (const uint16_t*)(round + 1024);
    const int bytes0 = 2 * (6 + ex[0].context_len + 1 + ex[0].completion_len[0]);
    const int fields_ok = u[0] == 65535 && u[1] == bytes0 && u[2] == ex[0].index && u[3] == ex[0].label && u[4] == 1 &&
                          u[5] == ex[0].context_len && u[6] == ex[0].context[0] && u[6 + ex[0].context_len] == ex[0].completion_len[0] &&
                          u[bytes0 / 2] == 65535;
    snprintf(detail, sizeof(detail), "%zu bytes (want %zu), header ok %d, first example's fields ok %d", n, 1024 + 2 * total_u16,
             header_ok, fields_ok);
    check(n == 1024 + 2 * total_u16 && header_ok && fields_ok,
          "the file is llm.c's layout: {20240522, 1, count, longest bytes, 0...}, then 65535, bytes, index, label, completions, "
          "context, completions",
          detail);
    free(round);
    refused("a row one token over the limit is refused", path, 50257, longest_row - 1, "more than");

    // An example of exactly 65534 bytes, the most a uint16 byte count holds: written and read.
    static uint16_t big[32760];
    EvalExample e1 = {.index = 7, .label = 0, .n_completions = 1, .context_len = 32000, .context = big};
    e1.completion_len[0] = 760;
    e1.completion[0] = big + 32000;
    snprintf(path, sizeof(path), "%s/big.bin", dir);
    rc = evalset_write(path, &e1, 1, err, sizeof(err)) || evalset_load(&s, path, 50257, 32760, err, sizeof(err));
    check(rc == 0 && s.longest_example_bytes == 65534 && s.longest_row == 32760, "an example of 65534 bytes round-trips", err);
    if (!rc) evalset_free(&s);

    // ---- the reader's refusals, each a change to a good file ------------------------------------
    // Three examples: 0 (index 0, label 1, 4 completions, context 3 tokens: a row of 3 + 4 = 7
    // tokens at most), 1 (index 1, label 0, 1 completion), 2 (index 2, label 3, 4 completions).
    static const uint16_t ctx0[3] = {10, 11, 12}, c00[1] = {20}, c01[2] = {21, 22}, c02[3] = {23, 24, 25}, c03[4] = {26, 27, 28, 29};
    static const uint16_t ctx1[5] = {1, 2, 3, 4, 5}, c10[2] = {6, 7};
    static const uint16_t ctx2[2] = {100, 101}, c2[4][1] = {{200}, {201}, {202}, {203}};
    EvalExample g[3] = {
        {.index = 0, .label = 1, .n_completions = 4, .context_len = 3, .context = ctx0,
         .completion_len = {1, 2, 3, 4}, .completion = {c00, c01, c02, c03}},
        {.index = 1, .label = 0, .n_completions = 1, .context_len = 5, .context = ctx1, .completion_len = {2}, .completion = {c10}},
        {.index = 2, .label = 3, .n_completions = 4, .context_len = 2, .context = ctx2,
         .completion_len = {1, 1, 1, 1}, .completion = {c2[0], c2[1], c2[2], c2[3]}},
    };
    snprintf(path, sizeof(path), "%s/good.bin", dir);
    if (evalset_write(path, g, 3, err, sizeof(err))) { check(0, "writer: the three-example file", err); return 1; }
    uint8_t* good = get_file(path, &n);
    // byte offsets: example 0 at 1024 (6 + 3 + 4 + 10 = 23 uint16: 46 bytes), example 1 at 1070
    // (6 + 5 + 3 = 14: 28 bytes), example 2 at 1098 (6 + 2 + 8 = 16: 32 bytes); 1130 in all
    const size_t E0 = 1024, E1 = 1070, E2 = 1098;
    rc = evalset_load(&s, path, 50257, 7, err, sizeof(err));
    check(rc == 0 && n == 1130 && s.n_examples == 3 && s.longest_example_bytes == 46 && s.longest_row == 7 &&
              s.examples[2].completion[3][0] == 203,
          "the three-example file: 1130 bytes, read with a row limit of exactly its longest row (7)", err);
    if (!rc) evalset_free(&s);

    refused("a row over the limit names the example, the lengths and the limit", path, 50257, 6,
            "example 0 (index 0): context 3 + completion 3 (4 tokens) = 7 tokens, more than 6 (-t 5, plus the last token");
    refused("truncated header", variant(good, n, 0, NULL, 0, 1000), 50257, 7, "truncated header (1000 bytes");
    refused("an empty file", variant(good, n, 0, NULL, 0, 0), 50257, 7, "truncated header (0 bytes");
    refused("truncated inside an example", variant(good, n, 0, NULL, 0, E1 + 10), 50257, 7,
            "truncated: example 1 at byte offset 1070 has 28 bytes, the file ends 10 bytes into it");
    refused("truncated inside an example's first fields", variant(good, n, 0, NULL, 0, E1 + 1), 50257, 7,
            "truncated: the file ends at byte 1071, inside example 1's start marker");
    refused("truncated after whole examples (the header's count larger than the examples present)",
            variant(good, n, 0, NULL, 0, E2), 50257, 7, "truncated: the header says 3 examples, the file ends after 2");
    refused("a token shard given as the eval file", set_i32(good, n, 0, 20240520), 50257, 7,
            "not an eval file (magic 20240520, expected 20240522 for llm.c's eval format): that is an llm.c token shard's magic");
    refused("a 32-bit token shard given as the eval file", set_i32(good, n, 0, 20240801), 50257, 7, "token shard's magic");
    refused("another magic", set_i32(good, n, 0, 12345), 50257, 7, "not an eval file (magic 12345, expected 20240522");
    {
        EvalSet t;
        rc = evalset_load(&t, bad_path, 50257, 7, err, sizeof(err));
        check(rc == 1 && !strstr(err, "shard"), "another magic is not called a shard", err);
    }
    refused("version 2", set_i32(good, n, 4, 2), 50257, 7, "eval file version 2, expected 1");
    refused("a count of 0", set_i32(good, n, 8, 0), 50257, 7, "the header's example count is 0 (at least 1 expected)");
    refused("a negative count", set_i32(good, n, 8, -3), 50257, 7, "the header's example count is -3");
    refused("a count larger than the examples present", set_i32(good, n, 8, 4), 50257, 7,
            "the header says 4 examples, the file ends after 3");
    refused("a count of 2^31-1 (nothing huge allocated)", set_i32(good, n, 8, 2147483647), 50257, 7,
            "the header says 2147483647 examples, the file ends after 3");
    refused("a count smaller than the examples present", set_i32(good, n, 8, 2), 50257, 7,
            "32 bytes after the last of the header's 2 examples, starting with a start marker (more examples than the header's count?)");
    refused("a bad start marker", set_u16(good, n, E1, 0x1234), 50257, 7,
            "example 1 at byte offset 1070: start marker 4660, expected 65535");
    refused("an example's byte count too large", set_u16(good, n, E0 + 2, 48), 50257, 7,
            "example 0 (index 0): byte count 48, but its fields end after 46 bytes");
    refused("an example's byte count too small", set_u16(good, n, E0 + 2, 44), 50257, 7,
            "example 0 (index 0): completion 3 of 4 tokens runs past its byte count 44");
    refused("an odd byte count", set_u16(good, n, E1 + 2, 27), 50257, 7, "example 1 at byte offset 1070: byte count 27 (an example is an even number of bytes");
    refused("a byte count past the end of the file", set_u16(good, n, E2 + 2, 34), 50257, 7,
            "truncated: example 2 at byte offset 1098 has 34 bytes, the file ends 32 bytes into it");
    refused("a label out of range", set_u16(good, n, E2 + 6, 4), 50257, 7, "example 2 (index 2): label 4 of 4 completions");
    refused("0 completions", set_u16(good, n, E1 + 8, 0), 50257, 7, "example 1 (index 1): 0 completions (1 to 16 expected)");
    refused("17 completions", set_u16(good, n, E0 + 8, 17), 50257, 7, "example 0 (index 0): 17 completions (1 to 16 expected)");
    refused("an empty context", set_u16(good, n, E1 + 10, 0), 50257, 7, "example 1 (index 1): empty context");
    refused("an empty completion", set_u16(good, n, E0 + 2 * (6 + 3 + 1 + 1), 0), 50257, 7, "example 0 (index 0): completion 1 is empty");
    refused("a context longer than its example", set_u16(good, n, E1 + 10, 14), 50257, 7,
            "example 1 (index 1): its context of 14 tokens runs past its byte count 28");
    refused("a context token outside the vocabulary", set_u16(good, n, E0 + 2 * 7, 50257), 50257, 7,
            "example 0 (index 0): context's token 1 is 50257, outside the vocabulary (size 50257)");
    refused("a completion token outside the vocabulary", set_u16(good, n, E2 + 2 * 15, 1000), 1000, 7,
            "example 2 (index 2): completion 3's token 0 is 1000, outside the vocabulary (size 1000)");
    refused("65535 as a token with a larger vocabulary", set_u16(good, n, E1 + 2 * 12, 65535), 70000, 7,
            "example 1 (index 1): completion 0's token 0 is 65535, the start marker");
    refused("the header's longest example wrong", set_i32(good, n, 12, 44), 50257, 7,
            "the header's longest example is 44 bytes, its examples' longest is 46");
    refused("trailing bytes", variant(good, n, n, "\0\0\0", 3, n + 3), 50257, 7, "3 bytes after the last of the header's 3 examples");
    {
        EvalSet t;
        rc = evalset_load(&t, bad_path, 50257, 7, err, sizeof(err));
        check(rc == 1 && !strstr(err, "start marker"), "trailing zeros are not called another example", err);
    }
    refused("a directory", dir, 50257, 7, "not a regular file (a directory)");
    snprintf(path, sizeof(path), "%s/missing.bin", dir);
    refused("a missing file", path, 50257, 7, "missing.bin: cannot open: No such file or directory");
    snprintf(path, sizeof(path), "%s/fifo.bin", dir);
    unlink(path);
    if (mkfifo(path, 0600) == 0) refused("a FIFO (refused at once, not waited on)", path, 50257, 7, "not a regular file (a FIFO)");
    else check(0, "mkfifo", path);
    free(good);

    // ---- the writer's refusals: nothing written ---------------------------------------------------
    static const uint16_t marker[2] = {5, 65535};
    EvalExample w = g[0];
    w.completion[1] = marker;
    write_refused("writer: token 65535 in a completion", dir, &w, 1, "example 0 (index 0): completion 1's token 1 is 65535, which the format reserves");
    w = g[0];
    w.context = marker + 1, w.context_len = 1;
    write_refused("writer: token 65535 in the context", dir, &w, 1, "context's token 0 is 65535");
    w = e1;
    w.context_len = 32001;
    static uint16_t big2[32761];
    w.context = big2, w.completion[0] = big2 + 32001;
    write_refused("writer: an example of 65536 bytes", dir, &w, 1, "example 0 (index 7): 65536 bytes, more than the 65534 an example may take");
    w = g[2];
    w.label = 4;
    write_refused("writer: a label out of range", dir, &w, 1, "label 4 of 4 completions");
    w = g[1];
    w.n_completions = 17;
    write_refused("writer: 17 completions", dir, &w, 1, "17 completions (1 to 16 expected)");
    w = g[1];
    w.context_len = 0;
    write_refused("writer: an empty context", dir, &w, 1, "empty context");
    w = g[1];
    w.completion_len[0] = 0;
    write_refused("writer: an empty completion", dir, &w, 1, "completion 0 is empty");
    w = g[1];
    w.index = 65536;
    write_refused("writer: an index over 65535", dir, &w, 1, "index 65536 (the format holds 0 to 65535)");
    write_refused("writer: no examples", dir, g, 0, "0 examples (the format holds 1 to 65535)");
    write_refused("writer: 65536 examples", dir, g, 65536, "65536 examples (the format holds 1 to 65535)");

    printf("%s\n", failures ? "evalset unit: FAILED" : "evalset unit: all passed");
    return failures ? 1 : 0;
}
