// dataloader/: the training data: llm.c token shards and the loader that serves each rank its
// rows of the global batch (loader.h), and the GPT-2 byte-level BPE tokenizer (tokenizer.h).
#include "dataloader/loader.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/regular_file.h"

// pread of exactly len bytes at off (EINTR retried). Returns the bytes read: fewer than len
// only at the end of the file, -1 on an error (errno set).
static ssize_t pread_full(int fd, void* buf, size_t len, off_t off) {
    size_t done = 0;
    while (done < len) {
        ssize_t k = pread(fd, (char*)buf + done, len - done, off + (off_t)done);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        done += (size_t)k;
    }
    return (ssize_t)done;
}

// Opens a shard for reading, refusing anything but a regular file (util/regular_file.h: a
// FIFO would block the open or the reads forever). Returns the fd, or -1 with err set.
static int open_regular(const char* path, struct stat* st, char* err, size_t errlen) {
    int fd = open_regular_file(path, st, err, errlen);
    if (fd == -2) {
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0, ": token shards must be regular files");
    }
    return fd < 0 ? -1 : fd;
}

static size_t shard_bytes(const ShardInfo* info) {
    return SHARD_HEADER_INTS * sizeof(int32_t) + info->n_tokens * (size_t)info->token_bytes;
}

int shard_probe(const char* path, ShardInfo* info, char* err, size_t errlen) {
    memset(info, 0, sizeof(*info));
    snprintf(info->path, sizeof(info->path), "%s", path);
    struct stat st;
    int fd = open_regular(path, &st, err, errlen);
    if (fd < 0) return 1;
    int32_t header[SHARD_HEADER_INTS];
    ssize_t got = pread_full(fd, header, sizeof(header), 0);
    int read_errno = errno;
    close(fd);
    if (got < 0) { snprintf(err, errlen, "%s: cannot read: %s", path, strerror(read_errno)); return 1; }
    if ((size_t)got != sizeof(header)) {
        snprintf(err, errlen, "%s: truncated header (%lld bytes, a shard header is %d)",
                 path, (long long)st.st_size, (int)(SHARD_HEADER_INTS * sizeof(int32_t)));
        return 1;
    }
    if (header[0] == SHARD_MAGIC_U16) {
        if (header[1] != 1) { snprintf(err, errlen, "%s: unsupported version %d for magic %d (expected 1)", path, header[1], header[0]); return 1; }
        info->token_bytes = 2;
    } else if (header[0] == SHARD_MAGIC_U32) {
        if (header[1] != 7) { snprintf(err, errlen, "%s: unsupported version %d for magic %d (expected 7)", path, header[1], header[0]); return 1; }
        info->token_bytes = 4;
    } else {
        snprintf(err, errlen, "%s: bad magic %d (not an llm.c token shard: expected %d or %d)",
                 path, header[0], SHARD_MAGIC_U16, SHARD_MAGIC_U32);
        return 1;
    }
    if (header[2] < 0) { snprintf(err, errlen, "%s: negative token count %d", path, header[2]); return 1; }
    info->n_tokens = (size_t)(uint32_t)header[2];
    size_t expected = shard_bytes(info);
    if ((size_t)st.st_size < expected) {
        snprintf(err, errlen, "%s: header says %zu tokens (%zu bytes) but the file has %lld bytes",
                 path, info->n_tokens, expected, (long long)st.st_size);
        return 1;
    }
    if ((size_t)st.st_size > expected) {
        snprintf(err, errlen, "%s: %lld bytes, more than the %zu its header's %zu tokens account for",
                 path, (long long)st.st_size, expected, info->n_tokens);
        return 1;
    }
    return 0;
}

// The message for a token id outside the vocabulary: the shard, the token's position in it
// (and its byte offset in the file) and the id.
static void bad_token(const ShardInfo* info, uint32_t tok, size_t pos, int vocab_size, char* err, size_t errlen) {
    snprintf(err, errlen, "%s: token %u at position %zu (byte offset %zu) is outside the vocabulary (size %d)", info->path,
             tok, pos, SHARD_HEADER_INTS * sizeof(int32_t) + pos * (size_t)info->token_bytes, vocab_size);
}

// The largest of n token ids (a loop the compiler vectorises).
static uint32_t max_token(const void* block, size_t n, int token_bytes) {
    uint32_t m = 0;
    if (token_bytes == 2) {
        const uint16_t* t = (const uint16_t*)block;
        for (size_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    } else {
        const uint32_t* t = (const uint32_t*)block;
        for (size_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    }
    return m;
}

// Every token of a probed shard against the vocabulary, in one pass when the loader opens it:
// an id outside the vocabulary would index past the embedding table, so a bad shard stops the
// run at startup, named with the token's position and id, rather than when (or if) a batch
// reaches it. Read in blocks of SCAN_BLOCK_BYTES into `block`; only a block whose largest id is
// too large is searched for its first bad one. What the pass costs against a step:
// dev/bench/bench_loader.sh (README: Results).
#define SCAN_BLOCK_BYTES ((size_t)1 << 20)
static int check_tokens(const ShardInfo* info, int vocab_size, void* block, char* err, size_t errlen) {
    struct stat st;
    int fd = open_regular(info->path, &st, err, errlen);
    if (fd < 0) return 1;
    const size_t header = SHARD_HEADER_INTS * sizeof(int32_t), tb = (size_t)info->token_bytes, total = info->n_tokens * tb;
    int rc = 0;
    for (size_t at = 0; at < total && !rc; at += SCAN_BLOCK_BYTES) {
        const size_t len = total - at < SCAN_BLOCK_BYTES ? total - at : SCAN_BLOCK_BYTES, n = len / tb;
        ssize_t got = pread_full(fd, block, len, (off_t)(header + at));
        if (got != (ssize_t)len) {
            if (got < 0) snprintf(err, errlen, "%s: cannot read %zu bytes at offset %zu: %s", info->path, len, header + at, strerror(errno));
            else snprintf(err, errlen, "%s: truncated while opened: %zd of %zu bytes at offset %zu (its header's %zu tokens need %zu)",
                          info->path, got, len, header + at, info->n_tokens, shard_bytes(info));
            rc = 1;
        } else if (max_token(block, n, info->token_bytes) >= (uint32_t)vocab_size) {
            for (size_t i = 0; i < n; i++) {
                uint32_t tok = tb == 2 ? ((const uint16_t*)block)[i] : ((const uint32_t*)block)[i];
                if (tok >= (uint32_t)vocab_size) { bad_token(info, tok, at / tb + i, vocab_size, err, errlen); break; }
            }
            rc = 1;
        }
    }
    close(fd);
    return rc;
}

// ---------------------------------------------------------------------------------------
// A seeded bijection on [0, n): a 4-round Feistel network on the smallest even number of
// bits covering n, with cycle walking back into range. O(1) memory and random access, so
// the order never has to be materialised.

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t permute(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 2;
    while ((1ULL << bits) < n) bits += 2;
    int half = bits / 2;
    uint64_t mask = (1ULL << half) - 1;
    do {
        uint64_t left = i >> half, right = i & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t f = mix64(right ^ mix64(key + (uint64_t)round)) & mask;
            uint64_t next = left ^ f;
            left = right;
            right = next;
        }
        i = (left << half) | right;
    } while (i >= n);
    return i;
}

static uint64_t epoch_key(const DataLoader* dl, uint64_t epoch, uint64_t salt) {
    return mix64(dl->state.seed * 0x9e3779b97f4a7c15ULL + mix64(epoch * 1000003ULL + salt));
}

static void build_order(DataLoader* dl, uint64_t epoch) {
    for (int i = 0; i < dl->n_shards; i++) {
        dl->shard_order[i] = dl->state.shuffle
            ? (int)permute((uint64_t)i, (uint64_t)dl->n_shards, epoch_key(dl, epoch, 0x5eed))
            : i;
    }
    dl->order_prefix[0] = 0;
    for (int i = 0; i < dl->n_shards; i++)
        dl->order_prefix[i + 1] = dl->order_prefix[i] + dl->shards[dl->shard_order[i]].n_windows;
    dl->order_epoch = epoch;
}

int loader_open(DataLoader* dl, const char* pattern, size_t T, int vocab_size, uint64_t seed,
                int shuffle, char* err, size_t errlen) {
    memset(dl, 0, sizeof(*dl));
    dl->open_shard = -1;
    dl->fd = -1;
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        snprintf(err, errlen, "no files match '%s'", pattern);
        if (rc == 0) globfree(&g);
        return 1;
    }
    if (rc != 0) { snprintf(err, errlen, "cannot expand '%s' (glob error %d)", pattern, rc); return 1; }
    if (g.gl_pathc > (size_t)INT32_MAX) {
        snprintf(err, errlen, "'%s': %zu files, more than %d shards", pattern, g.gl_pathc, INT32_MAX);
        globfree(&g);
        return 1;
    }
    dl->n_shards = (int)g.gl_pathc;
    dl->shards = (ShardInfo*)calloc((size_t)dl->n_shards, sizeof(ShardInfo));
    dl->shard_order = (int*)calloc((size_t)dl->n_shards, sizeof(int));
    dl->order_prefix = (size_t*)calloc((size_t)dl->n_shards + 1, sizeof(size_t));
    // One window of T+1 tokens of the widest kind (4 bytes).
    dl->buf = (unsigned char*)malloc((T + 1) * sizeof(uint32_t));
    if (!dl->shards || !dl->shard_order || !dl->order_prefix || !dl->buf) {
        snprintf(err, errlen, "'%s': out of memory for %d shards", pattern, dl->n_shards);
        globfree(&g);
        loader_close(dl);
        return 1;
    }
    dl->T = T;
    dl->vocab_size = vocab_size;
    dl->state.seed = seed;
    dl->state.shuffle = shuffle;
    void* block = malloc(SCAN_BLOCK_BYTES);
    int bad = !block;
    if (bad) snprintf(err, errlen, "'%s': out of memory for the token check", pattern);
    for (int i = 0; i < dl->n_shards && !bad; i++) {
        bad = shard_probe(g.gl_pathv[i], &dl->shards[i], err, errlen) ||
              check_tokens(&dl->shards[i], vocab_size, block, err, errlen);
        dl->shards[i].n_windows = dl->shards[i].n_tokens > T ? (dl->shards[i].n_tokens - 1) / T : 0;
        dl->windows_per_epoch += dl->shards[i].n_windows;
    }
    free(block);
    globfree(&g);
    if (bad) { loader_close(dl); return 1; }
    if (dl->windows_per_epoch == 0) {
        snprintf(err, errlen, "'%s': no shard holds %zu tokens (one sequence of T=%zu plus its target)",
                 pattern, T + 1, T);
        loader_close(dl);
        return 1;
    }
    build_order(dl, 0);
    return 0;
}

void loader_close(DataLoader* dl) {
    if (dl->fd >= 0) close(dl->fd);
    free(dl->shards);
    free(dl->shard_order);
    free(dl->order_prefix);
    free(dl->buf);
    memset(dl, 0, sizeof(*dl));
    dl->open_shard = -1;
    dl->fd = -1;
}

void loader_locate(DataLoader* dl, uint64_t g, int* shard, size_t* window) {
    uint64_t epoch = g / dl->windows_per_epoch;
    uint64_t in_epoch = g % dl->windows_per_epoch;
    if (epoch != dl->order_epoch) build_order(dl, epoch);
    // Binary search for the shard position holding window in_epoch.
    int lo = 0, hi = dl->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->order_prefix[mid] <= in_epoch) lo = mid; else hi = mid - 1;
    }
    int s = dl->shard_order[lo];
    size_t k = (size_t)(in_epoch - dl->order_prefix[lo]);
    if (dl->state.shuffle)
        k = (size_t)permute(k, dl->shards[s].n_windows, epoch_key(dl, epoch, 0x1000 + (uint64_t)s));
    *shard = s;
    *window = k;
}

// Makes shard s the open one. The file must still be the size its header was checked
// against at loader_open: a shard truncated or rewritten since is named here, before any
// token of it is used.
static int open_shard(DataLoader* dl, int s, char* err, size_t errlen) {
    if (dl->open_shard == s) return 0;
    if (dl->fd >= 0) { close(dl->fd); dl->fd = -1; dl->open_shard = -1; }
    const ShardInfo* info = &dl->shards[s];
    struct stat st;
    int fd = open_regular(info->path, &st, err, errlen);
    if (fd < 0) return 1;
    if ((size_t)st.st_size != shard_bytes(info)) {
        snprintf(err, errlen, "%s: changed while training: %lld bytes, its header's %zu tokens need %zu (truncated or rewritten?)",
                 info->path, (long long)st.st_size, info->n_tokens, shard_bytes(info));
        close(fd);
        return 1;
    }
    dl->fd = fd;
    dl->open_shard = s;
    return 0;
}

// Reads window w of the open shard (T+1 tokens) into dl->buf. A short read means the file
// shrank after it was opened.
static int read_window(DataLoader* dl, size_t w, char* err, size_t errlen) {
    const ShardInfo* info = &dl->shards[dl->open_shard];
    size_t len = (dl->T + 1) * (size_t)info->token_bytes;
    off_t off = (off_t)(SHARD_HEADER_INTS * sizeof(int32_t) + w * dl->T * (size_t)info->token_bytes);
    ssize_t got = pread_full(dl->fd, dl->buf, len, off);
    if (got == (ssize_t)len) return 0;
    if (got < 0) {
        snprintf(err, errlen, "%s: cannot read %zu bytes at offset %lld: %s", info->path, len, (long long)off, strerror(errno));
    } else {
        struct stat st;
        long long now = fstat(dl->fd, &st) == 0 ? (long long)st.st_size : -1;
        snprintf(err, errlen, "%s: truncated while training: %zd of %zu bytes at offset %lld (the file has %lld bytes, its header's %zu tokens need %zu)",
                 info->path, got, len, (long long)off, now, info->n_tokens, shard_bytes(info));
    }
    // Opened again (and checked) by the next read, should the caller go on.
    close(dl->fd);
    dl->fd = -1;
    dl->open_shard = -1;
    return 1;
}

int loader_read_windows(DataLoader* dl, uint64_t first, int B, int* inputs, int* targets,
                        char* err, size_t errlen) {
    size_t T = dl->T;
    for (int b = 0; b < B; b++) {
        int s; size_t w;
        loader_locate(dl, first + (uint64_t)b, &s, &w);
        if (open_shard(dl, s, err, errlen) || read_window(dl, w, err, errlen)) return 1;
        const ShardInfo* info = &dl->shards[s];
        const unsigned char* base = dl->buf;
        size_t start = w * T;
        for (size_t i = 0; i <= T; i++) {
            size_t pos = start + i;
            uint32_t tok;
            if (info->token_bytes == 2) { uint16_t v; memcpy(&v, base + 2 * i, 2); tok = v; }
            else { memcpy(&tok, base + 4 * i, 4); }
            // Checked again here although loader_open checked every token: a shard rewritten in
            // place with its size unchanged passes open_shard's size check, and an id past the
            // vocabulary would read (and its gradient write) outside the embedding table. T + 1
            // compares per window, nothing against the step.
            if (tok >= (uint32_t)dl->vocab_size) {
                bad_token(info, tok, pos, dl->vocab_size, err, errlen);
                return 1;
            }
            if (i < T) inputs[(size_t)b * T + i] = (int)tok;
            if (i > 0) targets[(size_t)b * T + i - 1] = (int)tok;
        }
    }
    return 0;
}

int loader_read_micro_batch(DataLoader* dl, uint64_t micro, int world, int rank, int B,
                            int* inputs, int* targets, char* err, size_t errlen) {
    uint64_t first = dl->state.windows_consumed + (micro * (uint64_t)world + (uint64_t)rank) * (uint64_t)B;
    return loader_read_windows(dl, first, B, inputs, targets, err, errlen);
}

void loader_advance(DataLoader* dl, uint64_t global_seqs) { dl->state.windows_consumed += global_seqs; }

uint64_t loader_epoch(const DataLoader* dl) { return dl->state.windows_consumed / dl->windows_per_epoch; }

void loader_set_state(DataLoader* dl, const LoaderState* state) {
    dl->state = *state;
    build_order(dl, loader_epoch(dl));
}
