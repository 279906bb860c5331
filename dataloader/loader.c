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

// What a non-regular file is, for messages.
static const char* file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

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

// Opens a shard for reading, refusing anything but a regular file. The kind is checked with
// stat() before the open (opening a FIFO blocks until a writer appears) and again on the
// descriptor (the path may have been swapped in between); O_NONBLOCK makes even that race
// harmless, and it changes nothing for a regular file. Returns the fd, or -1 with err set.
static int open_regular(const char* path, struct stat* st, char* err, size_t errlen) {
    if (stat(path, st) != 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return -1; }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s): token shards must be regular files", path, file_kind(st->st_mode));
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return -1; }
    if (fstat(fd, st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s): token shards must be regular files", path, file_kind(st->st_mode));
        close(fd);
        return -1;
    }
    return fd;
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
    for (int i = 0; i < dl->n_shards; i++) {
        if (shard_probe(g.gl_pathv[i], &dl->shards[i], err, errlen)) { globfree(&g); loader_close(dl); return 1; }
        dl->shards[i].n_windows = dl->shards[i].n_tokens > T ? (dl->shards[i].n_tokens - 1) / T : 0;
        dl->windows_per_epoch += dl->shards[i].n_windows;
    }
    globfree(&g);
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
            if (tok >= (uint32_t)dl->vocab_size) {
                snprintf(err, errlen, "%s: token %u at position %zu is outside the vocabulary (size %d)",
                         info->path, tok, pos, dl->vocab_size);
                return 1;
            }
            if (i < T) inputs[(size_t)b * T + i] = (int)tok;
            if (i > 0) targets[(size_t)b * T + i - 1] = (int)tok;
        }
    }
    return 0;
}

int loader_read_micro_batch(DataLoader* dl, int micro, int world, int rank, int B,
                            int* inputs, int* targets, char* err, size_t errlen) {
    uint64_t first = dl->state.windows_consumed + ((uint64_t)micro * (uint64_t)world + (uint64_t)rank) * (uint64_t)B;
    return loader_read_windows(dl, first, B, inputs, targets, err, errlen);
}

void loader_advance(DataLoader* dl, uint64_t global_seqs) { dl->state.windows_consumed += global_seqs; }

uint64_t loader_epoch(const DataLoader* dl) { return dl->state.windows_consumed / dl->windows_per_epoch; }

void loader_set_state(DataLoader* dl, const LoaderState* state) {
    dl->state = *state;
    build_order(dl, loader_epoch(dl));
}
