/*
 * tokenize_text: text, JSONL or framed documents -> GPT-2 token shards in llm.c's format,
 * on all cores.
 *
 *   ./tokenize_text -o data/mytext/mytext --val-tokens 1000000 a.txt b.txt
 *   ./tokenize_text --jsonl-field text -o data/corpus/corpus --val-tokens 100000000 part-*.jsonl.zst
 *   ./tokenize_text --split-on '\n\n' --val-tokens 32768 --shard-tokens 0 -o out/tiny input.txt
 *   ./tokenize_text --dump --no-eot input.txt          # the ids, one per line
 *   ./tokenize_text --bench --threads 4 input.txt      # encoder throughput
 *
 * A shard is a 256 x int32 header (magic 20240520, version 1, token count, rest 0) and then
 * the tokens as uint16, as written by llm.c's dev/data scripts. Each shard is written
 * atomically (util/atomic_file.h: NAME.tmp.PID, fsynced, renamed, the directory fsynced), so
 * a shard that exists is complete.
 *
 * How the work is split. The main thread reads the inputs (decompressing gzip / zstd), cuts
 * them into documents and packs the documents into batches of about --batch-bytes of text;
 * N worker threads, each with its own Tokenizer (a Tokenizer encodes on one thread at a
 * time), encode batches; the main thread writes the batches' tokens in the order the batches
 * were made. A document longer than a batch is cut into pieces, but only at a point where the
 * cut cannot change the tokens (see safe_cut), so every piece encodes on its own to exactly
 * the ids the whole document gives. Batches and cuts depend on the input bytes and
 * --batch-bytes only, and documents are encoded independently, so the shards are
 * byte-identical for every --threads.
 *
 * Resuming (used by data/prepare.py): with --state FILE every committed shard is followed by
 * FILE (JSON: shards and tokens written, and where in the document stream the next shard
 * starts: the number of complete documents and the tokens already written of the next one).
 * --resume continues from it: documents already in shards are skipped, the head of the
 * document that straddles the last shard boundary is re-encoded and dropped, and shard
 * numbering and the val/train split continue, so an interrupted run resumed writes the same
 * shards as an uninterrupted one.
 *
 * Run with --help for the options.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zstd.h>

/* gzip goes through zlib, where it is installed (the Makefile links -lz when it finds
 * zlib.h): a bare CUDA image may lack it, and then gzip input says what is missing while
 * everything else works. */
#if __has_include(<zlib.h>)
#include <zlib.h>
#define HAVE_ZLIB 1
#else
#define HAVE_ZLIB 0
#endif

#include "dataloader/tokenizer.h"
#include "util/atomic_file.h"

#define PROG "tokenize_text"
#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define HEADER_INTS 256
#define WBUF_TOKENS (1 << 20)
#define READ_CHUNK (1 << 20)
#define STATE_VERSION 1
#define FRAME_END UINT64_MAX        /* --framed: the record that ends the stream */
#define MAX_DOC_BYTES (1ULL << 40)  /* --framed: a longer record means a corrupt stream */
#define MAX_LINE_BYTES ((size_t)1 << 31)
#define JSON_MAX_DEPTH 512

static const char USAGE[] =
    "Usage: " PROG " [options] FILE...\n"
    "Turns documents into GPT-2 token shards in llm.c's format: a header of 256 int32\n"
    "(magic 20240520, version 1, token count) followed by the tokens as uint16.\n"
    "Every document is preceded by <|endoftext|> (50256). A document is a whole input file\n"
    "(or, with --split-on, every part of one), a JSONL line (--jsonl-field), or a record\n"
    "(--framed). FILE may be - for standard input. gzip and zstd compressed input (any\n"
    "format) is recognised by its first bytes and decompressed as it is read.\n"
    "\n"
    "Modes (the default writes shards):\n"
    "  --dump                 write the token stream to stdout instead of shards\n"
    "  --decode               FILEs hold token ids (as --dump writes them); write their bytes\n"
    "  --bench                read the inputs into memory, encode them --repeat times on\n"
    "                         --threads threads and report MB/s of document text (without\n"
    "                         the <|endoftext|> ids), and the reading's MB/s (one thread)\n"
    "\n"
    "Shards:\n"
    "  -o, --out-prefix P     write P_val_NNNNNN.bin, P_train_NNNNNN.bin (NNNNNN counts all\n"
    "                         shards, val first, as llm.c's fineweb.py); with --shard-tokens 0\n"
    "                         just P_val.bin and P_train.bin\n"
    "  --shard-tokens N       tokens per shard (default 100000000; 0 = no limit)\n"
    "  --val-tokens N         the first N tokens of the stream go to val shards (default 0)\n"
    "\n"
    "Input:\n"
    "  --jsonl-field NAME     FILEs are JSON Lines: every line is a JSON object and its string\n"
    "                         field NAME is a document (e.g. --jsonl-field text). Blank lines\n"
    "                         are skipped; a malformed line, a missing field or one that is not\n"
    "                         a string stops the run naming the file and line. Escapes are\n"
    "                         decoded as Python's json does (a lone surrogate \\uD8xx becomes\n"
    "                         U+FFFD, as tiktoken encodes it); NaN and Infinity are accepted\n"
    "                         in other fields, as Python writes them\n"
    "  --framed               FILEs are records: a uint64 little-endian byte count, then that\n"
    "                         many bytes of document; a count of 2^64-1 ends the stream (input\n"
    "                         that ends without it is an error: its producer died). What\n"
    "                         data/prepare.py streams to this tool\n"
    "  --split-on STR         text FILEs: start a new document after every occurrence of STR,\n"
    "                         e.g. '\\n\\n' (escapes \\n \\t \\r \\\\ \\xHH are understood); the\n"
    "                         separator stays at the end of its document, as in llm.c's\n"
    "                         tinyshakespeare.py\n"
    "  --drop-separator       remove the --split-on separator from the documents instead\n"
    "  --max-docs N           stop after N documents of the stream (counting --first-doc)\n"
    "\n"
    "Threads:\n"
    "  --threads N            encoder threads (default: the cores this process may use). The\n"
    "                         output is byte-identical for every N\n"
    "  --batch-bytes N        text per unit of work (default 1048576); documents longer than\n"
    "                         this are cut where the cut cannot change the tokens, so the\n"
    "                         output does not depend on it either\n"
    "\n"
    "Resuming and progress:\n"
    "  --state FILE           after every shard, write FILE (JSON): shards and tokens written,\n"
    "                         and the position in the document stream where the next begins\n"
    "  --resume               continue the run recorded in --state FILE (when FILE exists):\n"
    "                         the same input is read, the documents already in shards are\n"
    "                         skipped, numbering and the val/train split continue; the output\n"
    "                         is the one an uninterrupted run writes. A run with other\n"
    "                         --shard-tokens, --val-tokens, -o or EOT settings is refused\n"
    "  --first-doc N          the input starts at document N of the stream (its producer\n"
    "                         skipped the first N); --resume then skips only the rest\n"
    "  --progress             a progress line on stderr (documents, tokens, MB/s, ETA), every\n"
    "                         second on a terminal, every 30 s otherwise\n"
    "  --expect-docs N        the stream's document count, for the progress ETA (default: the\n"
    "                         share of the input files' bytes read)\n"
    "  --expect-tokens N      the stream's token count, for the ETA when documents are unknown\n"
    "\n"
    "Text and tokenizer:\n"
    "  --encoder PATH         GPT-2 encoder.json (default: the first of $FSDP_DATA/gpt2/,\n"
    "                         ../shared/data/gpt2/, data/gpt2/ that has one)\n"
    "  --vocab PATH           GPT-2 vocab.bpe (default: next to encoder.json)\n"
    "  --no-eot               do not put <|endoftext|> before each document\n"
    "  --allow-special        encode \"<|endoftext|>\" written in the text as the token 50256\n"
    "                         (default: as plain text, like tiktoken's encode_ordinary)\n"
    "  Bytes that are not valid UTF-8 are encoded as bytes (decoding gives them back).\n"
    "\n"
    "Other:\n"
    "  --format text|int32    --dump output / --decode input: decimal ids one per line\n"
    "                         (default) or little-endian int32\n"
    "  --safe                 --decode: print through the UTF-8 sanitiser (ill-formed bytes\n"
    "                         and control characters other than tab/newline/CR become U+FFFD)\n"
    "  --repeat N             --bench: encode N times and report the best (default 5)\n"
    "  -q, --quiet            no summary lines\n"
    "  -h, --help             this text\n"
    "\n"
    "Exit status: 0 done; 2 an input's content is bad (corrupt or truncated gzip/zstd data,\n"
    "a malformed JSONL line): a rerun fails the same way until that file is fixed; 1 any\n"
    "other error (the shards written so far are complete, and --resume continues after them).\n";

/* ---- errors: one line on stderr, remove a half-written shard, exit 1 (2: die_input) ---- */

/* The shard and the state file being written (their temporary files, PATH.tmp.PID, are
 * removed on error or a signal). PID: a resumed run removes the leftovers of a dead one
 * (remove_stale_tmp) and never a live one's. */
static AtomicFile g_shard = {.fd = -1}, g_state = {.fd = -1};
static bool g_clear_line;            /* a progress line is on the terminal: lines to stdout clear it first */

static void vdie(int status, const char* fmt, va_list ap) __attribute__((noreturn));
static void vdie(int status, const char* fmt, va_list ap) {
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    atomic_file_abort(&g_shard);
    atomic_file_abort(&g_state);
    /* _exit: worker threads may still be encoding; nothing of theirs needs flushing */
    fflush(stdout);
    _exit(status);
}
static void die(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(1, fmt, ap);
}
/* An input whose content is bad: status 2, so that data/prepare.py says no "run the same
 * command again" (a rerun would stop at the same byte). */
static void die_input(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die_input(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(2, fmt, ap);
}

/* Ctrl-C / SIGTERM while a shard is being written: remove its temporary file, then die of
 * the signal as usual. */
static void on_signal(int sig) {
    atomic_file_abort(&g_shard);
    atomic_file_abort(&g_state);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void* xrealloc(void* p, size_t n) {
    void* q = realloc(p, n ? n : 1);
    if (!q) die("out of memory (%zu bytes)", n);
    return q;
}

static long long parse_int(const char* opt, const char* s, long long lo, long long hi) {
    char* end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) die("%s: invalid value '%s' (expected an integer in %lld..%lld)", opt, s, lo, hi);
    return v;
}

static size_t parse_escapes(const char* s, char* out) {
    size_t o = 0;
    for (const char* p = s; *p; p++) {
        if (*p != '\\') {
            out[o++] = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case '\\': out[o++] = '\\'; break;
        case 'x': {
            int v = 0, k = 0;
            for (; k < 2; k++) {
                char c = p[1 + k];
                int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
                if (d < 0) break;
                v = v * 16 + d;
            }
            if (k == 0) die("--split-on: \\x needs hex digits in '%s'", s);
            out[o++] = (char)v;
            p += k;
            break;
        }
        default: die("--split-on: unknown escape '\\%c' in '%s' (known: \\n \\t \\r \\\\ \\xHH)", *p ? *p : ' ', s);
        }
    }
    return o;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(clockid_t which) {
    struct timespec ts;
    clock_gettime(which, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool readable(const char* path) { return access(path, R_OK) == 0; }

static bool ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- whole files (--decode): mmap'd when regular, read otherwise ---- */

typedef struct {
    const unsigned char* data;
    size_t len;
    bool mapped;
} Input;

static Input open_input(const char* path) {
    Input in = {0};
    int fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("%s: cannot stat: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) die("%s: cannot read: %s", path, strerror(EISDIR));
    if (S_ISREG(st.st_mode)) {
        in.len = (size_t)st.st_size;
        if (in.len) {
            void* p = mmap(NULL, in.len, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) die("%s: cannot map: %s", path, strerror(errno));
            madvise(p, in.len, MADV_SEQUENTIAL);
            in.data = p;
            in.mapped = true;
        }
    } else {
        size_t cap = 1 << 20, n = 0;
        unsigned char* buf = xrealloc(NULL, cap);
        for (;;) {
            if (n == cap) buf = xrealloc(buf, cap *= 2);
            ssize_t r = read(fd, buf + n, cap - n);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) die("%s: cannot read: %s", path, strerror(errno));
            if (r == 0) break;
            n += (size_t)r;
        }
        in.data = buf;
        in.len = n;
    }
    close(fd);
    return in;
}

static void close_input(Input* in) {
    if (in->mapped) munmap((void*)in->data, in->len);
    else free((void*)in->data);
    memset(in, 0, sizeof *in);
}

/* ---- input streams: plain, gzip (zlib) or zstd, told apart by their first bytes ---- */

enum { SRC_PLAIN, SRC_GZIP, SRC_ZSTD };

typedef struct {
    const char* path;
    int fd;
    int kind;
    unsigned char* in; /* compressed bytes read from fd and not yet consumed */
    size_t in_pos, in_len;
    bool eof;          /* fd has no more bytes */
    long long raw;     /* bytes read from fd so far (progress, error offsets) */
#if HAVE_ZLIB
    z_stream z;
#endif
    bool z_live;       /* inside a gzip member */
    ZSTD_DCtx* zd;
    size_t z_need;     /* zstd: 0 when the last frame is complete */
} Source;

static void src_fill(Source* s) {
    if (s->in_pos < s->in_len || s->eof) return;
    s->in_pos = s->in_len = 0;
    for (;;) {
        ssize_t r = read(s->fd, s->in, READ_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("%s: cannot read: %s", s->path, strerror(errno));
        if (r == 0) s->eof = true;
        s->in_len = (size_t)r;
        s->raw += r;
        return;
    }
}

/* How far into the file (compressed bytes) the reading is: for the progress ETA. */
static long long src_pos(const Source* s) { return s->raw - (long long)(s->in_len - s->in_pos); }

static void src_open(Source* s, const char* path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) die("%s: cannot open: %s", path, strerror(errno));
    s->in = xrealloc(NULL, READ_CHUNK);
    /* the first 4 bytes say the format (a short read from a pipe is topped up) */
    while (s->in_len < 4 && !s->eof) {
        ssize_t r = read(s->fd, s->in + s->in_len, READ_CHUNK - s->in_len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("%s: cannot read: %s", path, strerror(errno));
        if (r == 0) s->eof = true;
        s->in_len += (size_t)r;
        s->raw += r;
    }
    const unsigned char* m = s->in;
    if (s->in_len >= 2 && m[0] == 0x1f && m[1] == 0x8b) s->kind = SRC_GZIP;
    else if (s->in_len >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) s->kind = SRC_ZSTD;
    if ((ends_with(path, ".gz") || ends_with(path, ".gzip")) && s->kind != SRC_GZIP) die_input("%s: not gzip data (no gzip header)", path);
    if ((ends_with(path, ".zst") || ends_with(path, ".zstd")) && s->kind != SRC_ZSTD) die_input("%s: not zstd data (no zstd frame header)", path);
    if (s->kind == SRC_GZIP) {
#if HAVE_ZLIB
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) die("%s: cannot start gzip decoding", path);
        s->z_live = true;
#else
        die("%s: gzip input needs zlib, and this tokenize_text was built without it (install zlib1g-dev and rebuild)", path);
#endif
    } else if (s->kind == SRC_ZSTD) {
        s->zd = ZSTD_createDCtx();
        if (!s->zd) die("%s: cannot start zstd decoding: out of memory", path);
    }
}

/* Reads up to cap decompressed bytes into out; 0 at the end of the input. Dies on a read
 * error, corrupt compressed data or compressed data cut short. */
static size_t src_read(Source* s, unsigned char* out, size_t cap) {
    if (s->kind == SRC_PLAIN) {
        src_fill(s);
        size_t n = s->in_len - s->in_pos;
        if (n > cap) n = cap;
        memcpy(out, s->in + s->in_pos, n);
        s->in_pos += n;
        return n;
    }
#if HAVE_ZLIB
    if (s->kind == SRC_GZIP) {
        for (;;) {
            src_fill(s);
            size_t avail = s->in_len - s->in_pos;
            if (avail == 0 && s->eof) {
                if (s->z_live) die_input("%s: gzip data ends early (truncated file?)", s->path);
                return 0;
            }
            if (!s->z_live) { /* another member follows (gzip -d reads concatenated members) */
                if (s->in[s->in_pos] != 0x1f || (avail > 1 && s->in[s->in_pos + 1] != 0x8b))
                    die_input("%s: data after the end of the gzip stream at byte %lld is not another gzip member", s->path, src_pos(s));
                if (inflateReset(&s->z) != Z_OK) die("%s: cannot restart gzip decoding", s->path);
                s->z_live = true;
            }
            s->z.next_in = s->in + s->in_pos;
            s->z.avail_in = (uInt)avail;
            s->z.next_out = out;
            s->z.avail_out = (uInt)cap;
            int rc = inflate(&s->z, Z_NO_FLUSH);
            size_t used = avail - s->z.avail_in, got = cap - s->z.avail_out;
            long long at = s->raw - (long long)(s->in_len - s->in_pos);
            s->in_pos += used;
            if (rc == Z_STREAM_END) s->z_live = false;
            else if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR)
                die_input("%s: bad gzip data near byte %lld: %s", s->path, at + (long long)used, s->z.msg ? s->z.msg : "corrupt stream");
            if (got) return got;
            if (rc == Z_BUF_ERROR && used == 0 && s->in_pos < s->in_len) die_input("%s: gzip decoding made no progress", s->path);
        }
    }
#endif
    for (;;) { /* zstd: consecutive frames are one stream, as zstd -d reads them */
        src_fill(s);
        size_t avail = s->in_len - s->in_pos;
        if (avail == 0 && s->eof) {
            if (s->z_need) die_input("%s: zstd data ends early (truncated file?)", s->path);
            return 0;
        }
        ZSTD_inBuffer ib = {s->in + s->in_pos, avail, 0};
        ZSTD_outBuffer ob = {out, cap, 0};
        long long at = s->raw - (long long)(s->in_len - s->in_pos);
        size_t rc = ZSTD_decompressStream(s->zd, &ob, &ib);
        if (ZSTD_isError(rc)) die_input("%s: bad zstd data near byte %lld: %s", s->path, at + (long long)ib.pos, ZSTD_getErrorName(rc));
        s->in_pos += ib.pos;
        s->z_need = rc;
        if (ob.pos) return ob.pos;
    }
}


static void src_close(Source* s) {
#if HAVE_ZLIB
    if (s->kind == SRC_GZIP) inflateEnd(&s->z);
#endif
    if (s->zd) ZSTD_freeDCtx(s->zd);
    close(s->fd);
    free(s->in);
    s->in = NULL;
}

/* ---- batches: documents, or pieces of long ones, with their tokens once encoded ---- */

enum { PIECE_DOC_START = 1 }; /* first piece of a document: <|endoftext|> goes before it */

typedef struct {
    size_t off, len;  /* text */
    size_t ntok;      /* ids, once encoded */
    int src;          /* input index, for messages */
    int flags;
} Piece;

typedef struct {
    unsigned char* text;
    size_t len, cap;
    Piece* pieces;
    size_t np, pcap;
    int32_t* ids;
    size_t nids, icap;
    bool done;        /* encoded (guarded by the pool's mutex) */
    char err[320];    /* encoding failure, reported by the writer */
} Batch;

static void batch_reserve(Batch* b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + extra) cap *= 2;
    b->text = xrealloc(b->text, cap);
    b->cap = cap;
}

static void batch_add_piece(Batch* b, size_t off, size_t len, int src, int flags) {
    if (b->np == b->pcap) {
        b->pcap = b->pcap ? 2 * b->pcap : 256;
        b->pieces = xrealloc(b->pieces, b->pcap * sizeof *b->pieces);
    }
    b->pieces[b->np++] = (Piece){off, len, 0, src, flags};
}

static void batch_free(Batch* b) {
    if (!b) return;
    free(b->text);
    free(b->pieces);
    free(b->ids);
    free(b);
}

/* Runs on a worker thread: never dies, the writer reports b->err. */
static int batch_sink(void* ctx, const int32_t* ids, size_t n) {
    Batch* b = ctx;
    if (b->nids + n > b->icap) {
        size_t cap = b->icap ? b->icap : 1 << 16;
        while (cap < b->nids + n) cap *= 2;
        int32_t* p = realloc(b->ids, cap * sizeof *p);
        if (!p) return -2;
        b->ids = p;
        b->icap = cap;
    }
    memcpy(b->ids + b->nids, ids, n * sizeof *ids);
    b->nids += n;
    return 0;
}

static void encode_batch(Tokenizer* tok, Batch* b, int flags, int32_t eot, const char* const* inputs) {
    b->nids = 0;
    b->err[0] = 0;
    for (size_t i = 0; i < b->np; i++) {
        Piece* pc = &b->pieces[i];
        size_t start = b->nids;
        int rc = 0;
        if ((pc->flags & PIECE_DOC_START) && eot >= 0) rc = batch_sink(b, &eot, 1);
        if (!rc) rc = tokenizer_encode_stream(tok, b->text + pc->off, pc->len, flags, batch_sink, b);
        if (rc) {
            snprintf(b->err, sizeof b->err, "%s: %s", inputs[pc->src],
                     rc == -2 ? "out of memory for the ids" : tokenizer_error(tok)[0] ? tokenizer_error(tok) : "encoding failed");
            return;
        }
        pc->ntok = b->nids - start;
    }
}

/* ---- the encoder pool: batches encoded on N threads, handed back in order ---- */

typedef void (*BatchDone)(void* ctx, Batch* b);

typedef struct {
    int nthreads;        /* 1: encode on the calling thread */
    Tokenizer* main_tok; /* the calling thread's (nthreads == 1) */
    Tokenizer** toks;    /* one per worker */
    pthread_t* th;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done, cv_ready;
    Batch** ring;
    long long cap, head, next, tail; /* [head, tail) submitted and not yet handed back; next: first not taken by a worker */
    bool quit;
    int started, loaded; /* workers that have taken an index / loaded their Tokenizer */
    const char *encoder, *vocab;
    int flags;
    int32_t eot;
    const char* const* inputs;
    BatchDone on_done;   /* called on the calling thread, in submission order */
    void* done_ctx;
    bool keep;           /* --bench: batches stay with the caller */
    bool running;        /* workers started: on the second batch, so a small input costs no threads */
    Batch* first;        /* the first batch, held until then */
    Batch** spare;       /* recycled batches */
    int nspare;
} Pool;

static void* worker_main(void* arg) {
    Pool* p = arg;
    char err[512];
    pthread_mutex_lock(&p->mu);
    int me = p->started++;
    pthread_mutex_unlock(&p->mu);
    /* each worker loads its own Tokenizer (its scratch space is per-encoder), in parallel and
     * while the main thread goes on reading */
    Tokenizer* tok = tokenizer_load(p->encoder, p->vocab, err, sizeof err);
    pthread_mutex_lock(&p->mu);
    p->toks[me] = tok;
    p->loaded++;
    pthread_cond_broadcast(&p->cv_ready);
    for (;;) {
        while (p->next == p->tail && !p->quit) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->next == p->tail) break;
        Batch* b = p->ring[p->next % p->cap];
        p->next++;
        pthread_mutex_unlock(&p->mu);
        if (tok) encode_batch(tok, b, p->flags, p->eot, p->inputs);
        else snprintf(b->err, sizeof b->err, "encoder thread: %s", err); /* the main thread loaded the same files: out of memory */
        pthread_mutex_lock(&p->mu);
        b->done = true;
        pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_init(Pool* p, int nthreads) {
    p->nthreads = nthreads;
    p->cap = 2LL * nthreads + 2; /* every worker busy with one more waiting, and the writer's */
    p->ring = xrealloc(NULL, (size_t)p->cap * sizeof *p->ring);
    p->spare = xrealloc(NULL, (size_t)(p->cap + 2) * sizeof *p->spare);
}

static void pool_run(Pool* p) {
    int nthreads = p->nthreads;
    p->running = true;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    pthread_cond_init(&p->cv_ready, NULL);
    p->toks = calloc((size_t)nthreads, sizeof *p->toks);
    p->th = calloc((size_t)nthreads, sizeof *p->th);
    if (!p->toks || !p->th) die("out of memory");
    for (int i = 0; i < nthreads; i++) {
        int rc = pthread_create(&p->th[i], NULL, worker_main, p);
        if (rc) die("cannot start encoder thread %d of %d: %s", i + 1, nthreads, strerror(rc));
    }
}

/* --bench: the workers' Tokenizers are loaded before the timing starts. */
static void pool_wait_loaded(Pool* p) {
    pthread_mutex_lock(&p->mu);
    while (p->loaded < p->nthreads) pthread_cond_wait(&p->cv_ready, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static Batch* pool_batch(Pool* p) {
    Batch* b = p->nspare ? p->spare[--p->nspare] : calloc(1, sizeof *b);
    if (!b) die("out of memory");
    b->len = b->np = b->nids = 0;
    b->done = false;
    b->err[0] = 0;
    return b;
}

static void pool_recycle(Pool* p, Batch* b) {
    if (p->keep) return;
    if (p->nspare < p->cap + 2) p->spare[p->nspare++] = b;
    else batch_free(b);
}

/* Hands back the oldest batch (waiting for it when wait is set); false when there is none
 * or, without wait, it is not encoded yet. Called with the mutex held; releases it around
 * on_done so that the workers go on meanwhile. */
static bool pool_pop(Pool* p, bool wait) {
    if (p->head == p->tail) return false;
    Batch* b = p->ring[p->head % p->cap];
    if (!b->done && !wait) return false;
    while (!b->done) pthread_cond_wait(&p->cv_done, &p->mu);
    p->head++;
    pthread_mutex_unlock(&p->mu);
    p->on_done(p->done_ctx, b);
    pool_recycle(p, b);
    pthread_mutex_lock(&p->mu);
    return true;
}

/* Queues b for encoding (with one thread: encodes and hands it back at once). b belongs to
 * the pool from here on. */
static void pool_enqueue(Pool* p, Batch* b);

static void pool_submit(Pool* p, Batch* b) {
    if (p->nthreads > 1 && !p->running) {
        if (!p->first) {
            p->first = b;
            return;
        }
        pool_run(p);
        pool_enqueue(p, p->first);
        p->first = NULL;
    }
    if (!p->running) {
        encode_batch(p->main_tok, b, p->flags, p->eot, p->inputs);
        b->done = true;
        p->on_done(p->done_ctx, b);
        pool_recycle(p, b);
        return;
    }
    pool_enqueue(p, b);
}

static void pool_enqueue(Pool* p, Batch* b) {
    pthread_mutex_lock(&p->mu);
    while (p->tail - p->head == p->cap) pool_pop(p, true);
    b->done = false;
    p->ring[p->tail % p->cap] = b;
    p->tail++;
    pthread_cond_signal(&p->cv_work);
    while (pool_pop(p, false)) {}
    pthread_mutex_unlock(&p->mu);
}

/* Waits for everything submitted and hands it back. */
static void pool_drain(Pool* p) {
    if (p->first) { /* the whole input was one batch: no threads needed */
        Batch* b = p->first;
        p->first = NULL;
        int n = p->nthreads;
        p->nthreads = 1;
        pool_submit(p, b);
        p->nthreads = n;
    }
    if (!p->running) return;
    pthread_mutex_lock(&p->mu);
    while (pool_pop(p, true)) {}
    pthread_mutex_unlock(&p->mu);
}

static void pool_stop(Pool* p) {
    pool_drain(p);
    if (p->running) {
        pool_drain(p);
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->nthreads; i++) pthread_join(p->th[i], NULL);
        for (int i = 0; i < p->nthreads; i++) tokenizer_free(p->toks[i]);
        free(p->toks);
        free(p->th);
    }
    for (int i = 0; i < p->nspare; i++) batch_free(p->spare[i]);
    free(p->spare);
    free(p->ring);
}

/* ---- output: shards (with the resume state), a dump, or a count ---- */

typedef struct {
    const char* prefix;
    long long shard_tokens; /* 0 = no limit */
    long long val_tokens;
    long long total;        /* tokens routed so far, including those of a resumed run */
    int next_index;         /* global shard index */
    bool quiet;
    /* the open shard (g_shard) */
    int split; /* 0 val, 1 train */
    long long count;
    char path[4096];
    uint16_t* buf;
    size_t nbuf;
    long long written[2], shards[2]; /* this run */
    /* where the stream is: document `doc` (global index) has `doc_written` tokens routed */
    long long doc, doc_written;
    long long skip;         /* --resume: tokens of the first document already in shards */
    bool skip_started;      /* the document they belong to has begun */
    const char* state;      /* --state FILE, or NULL */
    bool eot, allow_special;
} Shards;

/* The prefix as the state file records it: the real directory and the base name, so that
 * "data/x" and "./data/x" are the same run. */
static void canonical_prefix(const char* prefix, char* out, size_t cap) {
    char d[4096], b[4096], real[PATH_MAX];
    snprintf(d, sizeof d, "%s", prefix);
    snprintf(b, sizeof b, "%s", prefix);
    const char* dir = dirname(d);
    const char* base = basename(b);
    if (realpath(dir, real)) snprintf(out, cap, "%s/%s", real, base);
    else snprintf(out, cap, "%s", prefix);
}

static void json_put_string(FILE* f, const char* s) {
    fputc('"', f);
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* Writes the state atomically (FILE.tmp.PID, fsync, rename, fsync the directory). */
static void state_write(Shards* s, bool complete) {
    if (!s->state) return;
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    if (!f) die("out of memory");
    char prefix[4096 + PATH_MAX];
    canonical_prefix(s->prefix, prefix, sizeof prefix);
    fprintf(f, "{\"format\": \"tokenize_text state\", \"version\": %d, \"complete\": %s,\n", STATE_VERSION, complete ? "true" : "false");
    fprintf(f, " \"shards\": %d, \"tokens\": %lld, \"documents\": %lld, \"document_tokens\": %lld,\n", s->next_index, s->total,
            complete ? s->doc + 1 : s->doc, complete ? 0 : s->doc_written);
    fprintf(f, " \"out_prefix\": ");
    json_put_string(f, prefix);
    fprintf(f, ", \"shard_tokens\": %lld, \"val_tokens\": %lld, \"eot\": %s, \"allow_special\": %s}\n", s->shard_tokens, s->val_tokens,
            s->eot ? "true" : "false", s->allow_special ? "true" : "false");
    if (fclose(f) != 0) die("out of memory");
    char err[PATH_MAX + 256];
    if (atomic_file_open(&g_state, s->state, ATOMIC_TMP_PID, err, sizeof err) || atomic_file_write(&g_state, text, len, err, sizeof err) ||
        atomic_file_commit(&g_state, err, sizeof err))
        die("%s", err);
    free(text);
}

static void shard_flush_buf(Shards* s) {
    char err[PATH_MAX + 256];
    if (s->nbuf && atomic_file_write(&g_shard, s->buf, s->nbuf * sizeof(uint16_t), err, sizeof err)) die("%s", err);
    s->nbuf = 0;
}

static void shard_close(Shards* s) {
    if (g_shard.fd < 0) return;
    shard_flush_buf(s);
    int32_t header[HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)s->count};
    char err[PATH_MAX + 256];
    if (atomic_file_pwrite(&g_shard, header, sizeof header, 0, err, sizeof err) || atomic_file_commit(&g_shard, err, sizeof err)) die("%s", err);
    s->written[s->split] += s->count;
    s->shards[s->split]++;
    state_write(s, false);
    if (!s->quiet) {
        printf("%s%s: %lld tokens\n", g_clear_line ? "\r\033[K" : "", s->path, s->count);
        fflush(stdout); /* data/prepare.py follows these lines */
    }
}

static void shard_open(Shards* s, int split) {
    const char* name = split ? "train" : "val";
    int n = s->shard_tokens ? snprintf(s->path, sizeof s->path, "%s_%s_%06d.bin", s->prefix, name, s->next_index)
                            : snprintf(s->path, sizeof s->path, "%s_%s.bin", s->prefix, name);
    if (n < 0 || (size_t)n + 32 >= sizeof s->path) die("--out-prefix: path too long");
    s->next_index++;
    int32_t header[HEADER_INTS] = {0}; /* rewritten with the count when the shard is closed */
    char err[PATH_MAX + 256];
    if (atomic_file_open(&g_shard, s->path, ATOMIC_TMP_PID, err, sizeof err) || atomic_file_write(&g_shard, header, sizeof header, err, sizeof err))
        die("%s", err);
    s->split = split;
    s->count = 0;
}

/* Routes the ids of the current document: a shard is closed when the next token does not
 * belong in it, so at every close the state names the document that token is in. */
static void shards_put(Shards* s, const int32_t* ids, size_t n) {
    if (s->skip) {
        size_t k = (size_t)s->skip < n ? (size_t)s->skip : n;
        s->skip -= (long long)k;
        s->doc_written += (long long)k;
        ids += k;
        n -= k;
    }
    while (n) {
        int split = s->total < s->val_tokens ? 0 : 1;
        if (g_shard.fd >= 0 && (s->split != split || (s->shard_tokens && s->count == s->shard_tokens))) shard_close(s);
        if (g_shard.fd < 0) shard_open(s, split);
        long long room = s->shard_tokens ? s->shard_tokens - s->count : INT32_MAX - s->count;
        if (room == 0) die("%s: more than %d tokens in one shard; use --shard-tokens", s->path, INT32_MAX);
        if (split == 0 && s->val_tokens - s->total < room) room = s->val_tokens - s->total;
        size_t k = (size_t)room < n ? (size_t)room : n;
        for (size_t i = 0; i < k; i++) {
            if (ids[i] < 0 || ids[i] > UINT16_MAX) die("token id %d does not fit in a uint16 shard", ids[i]);
            s->buf[s->nbuf++] = (uint16_t)ids[i];
            if (s->nbuf == WBUF_TOKENS) shard_flush_buf(s);
        }
        s->count += (long long)k;
        s->total += (long long)k;
        s->doc_written += (long long)k;
        ids += k;
        n -= k;
    }
}

typedef struct {
    bool binary;
    char buf[1 << 16];
    size_t n;
    long long count;
} Dump;

static void dump_flush(Dump* d) {
    if (d->n && fwrite(d->buf, 1, d->n, stdout) != d->n) die("stdout: write failed: %s", strerror(errno));
    d->n = 0;
}

static void dump_put(Dump* d, const int32_t* ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (d->n + 16 > sizeof d->buf) dump_flush(d);
        if (d->binary) {
            memcpy(d->buf + d->n, &ids[i], 4); /* little-endian hosts only, as llm.c */
            d->n += 4;
        } else {
            char tmp[12];
            int k = 0;
            uint32_t v = (uint32_t)ids[i];
            do tmp[k++] = (char)('0' + v % 10), v /= 10;
            while (v);
            while (k) d->buf[d->n++] = tmp[--k];
            d->buf[d->n++] = '\n';
        }
    }
    d->count += (long long)n;
}

/* The writer: what the pool hands back, in order. */
typedef struct {
    Shards* sh;    /* shards mode */
    Dump* dump;    /* --dump */
    long long tokens, docs; /* this run, for the summary and the progress line */
    size_t bytes;  /* document bytes encoded */
} Out;

static void out_batch(void* ctx, Batch* b) {
    Out* o = ctx;
    if (b->err[0]) die("%s", b->err);
    const int32_t* ids = b->ids;
    for (size_t i = 0; i < b->np; i++) {
        const Piece* pc = &b->pieces[i];
        if (pc->flags & PIECE_DOC_START) {
            o->docs++;
            if (o->sh) {
                Shards* s = o->sh;
                if (s->skip && s->skip_started) /* the part-written document ended before the resume point */
                    die("--resume: document %lld has fewer tokens than the state says were written (%lld); the input is not the one "
                        "the shards were made from", s->doc, s->doc_written + s->skip);
                s->skip_started = s->skip > 0;
                s->doc++;
                s->doc_written = 0;
            }
        }
        if (o->sh) shards_put(o->sh, ids, pc->ntok);
        else if (o->dump) dump_put(o->dump, ids, pc->ntok);
        o->tokens += (long long)pc->ntok;
        o->bytes += pc->len;
        ids += pc->ntok;
    }
}

/* ---- documents: cut into pieces and batches as they are read ---- */

/* A document may be cut before byte p of its text when text[p-2] and text[p] are printable
 * ASCII other than space and text[p-1] is '\n'. Then GPT-2's pattern ends a piece at p-1
 * (no alternative takes a '\n' together with a non-space) and at p (the '\n' after a
 * non-space is a whitespace run of one, matched alone whether or not text follows: the
 * lookahead of \s+(?!\S) can only shorten a run of two or more), the pattern has no
 * lookbehind, and "<|endoftext|>" holds no newline; so encoding text[..p) and text[p..)
 * apart gives the ids of the whole. dev/test/test_data_prep.sh checks it against tiktoken
 * with tiny batches. */
static inline bool safe_cut(const unsigned char* t, size_t p) {
    return t[p - 1] == '\n' && t[p - 2] > 0x20 && t[p - 2] < 0x7f && t[p] > 0x20 && t[p] < 0x7f;
}

typedef struct {
    Pool* pool;
    Batch* b;            /* being filled */
    size_t batch_bytes;
    bool first;          /* the open piece is its document's first */
    bool skipping;       /* the open document is read but dropped (already in shards) */
    size_t piece_off;    /* where the open piece starts in b->text */
    size_t cut_from;     /* the next safe cut is searched from here */
    int src;             /* input index */
    long long doc;       /* global index of the open (or next) document */
    long long skip_below;/* documents below this index are dropped (--resume) */
    long long max_docs;  /* stop before this index (-1: no limit) */
    bool collect;        /* --bench: keep every batch instead of encoding it */
    long long docs_read; /* this run, not counting skipped ones: for the progress line */
    long long bytes_read;/* their text, counted as pieces close */
    Batch** kept;
    size_t nkept, kcap;
} Docs;

static void docs_push_batch(Docs* d, size_t carry_from) {
    Batch* old = d->b;
    Batch* nb = d->collect ? calloc(1, sizeof *nb) : pool_batch(d->pool);
    if (!nb) die("out of memory");
    /* the open document's text so far moves to the new batch (before old is submitted:
     * with one thread it is encoded and recycled at once) */
    size_t carry = old->len - carry_from;
    batch_reserve(nb, carry + d->batch_bytes + 1);
    memcpy(nb->text, old->text + carry_from, carry);
    nb->len = carry;
    old->len = carry_from;
    if (d->collect) {
        if (d->nkept == d->kcap) d->kept = xrealloc(d->kept, (d->kcap = d->kcap ? 2 * d->kcap : 64) * sizeof *d->kept);
        d->kept[d->nkept++] = old;
    } else {
        pool_submit(d->pool, old);
    }
    d->b = nb;
}

static void docs_begin(Docs* d, int src) {
    d->first = true;
    d->src = src;
    d->skipping = d->doc < d->skip_below;
    d->piece_off = d->b->len;
    d->cut_from = d->piece_off + d->batch_bytes;
}

/* Cuts the open piece at the first safe point at or after batch_bytes from its start, as
 * often as the text allows: the cut points depend on the text alone. */
static void docs_cut(Docs* d) {
    Batch* b = d->b;
    while (!d->skipping && b->len > d->cut_from) {
        const unsigned char* t = b->text;
        size_t p = d->cut_from < d->piece_off + 2 ? d->piece_off + 2 : d->cut_from;
        size_t last = b->len - 1; /* text[p] must be known */
        bool found = false;
        while (p <= last) {
            const unsigned char* nl = memchr(t + p - 1, '\n', last - (p - 1));
            if (!nl) break;
            p = (size_t)(nl - t) + 1;
            if (p <= last && p >= d->piece_off + 2 && safe_cut(t, p)) {
                found = true;
                break;
            }
            p++;
        }
        if (!found) {
            d->cut_from = last + 1 > d->cut_from ? last + 1 : d->cut_from;
            return;
        }
        batch_add_piece(b, d->piece_off, p - d->piece_off, d->src, d->first ? PIECE_DOC_START : 0);
        d->bytes_read += (long long)(p - d->piece_off);
        d->first = false;
        docs_push_batch(d, p);
        b = d->b;
        d->piece_off = 0;
        d->cut_from = d->batch_bytes;
    }
}

/* Appends text to the open document. */
static void docs_text(Docs* d, const void* p, size_t n) {
    if (d->skipping || !n) return;
    batch_reserve(d->b, n);
    memcpy(d->b->text + d->b->len, p, n);
    d->b->len += n;
    docs_cut(d);
}

static void docs_end(Docs* d) {
    Batch* b = d->b;
    if (d->skipping) {
        b->len = d->piece_off;
    } else {
        docs_cut(d);
        b = d->b;
        batch_add_piece(b, d->piece_off, b->len - d->piece_off, d->src, d->first ? PIECE_DOC_START : 0);
        d->bytes_read += (long long)(b->len - d->piece_off);
        d->docs_read++;
        /* many tiny documents: bound the pieces per batch too */
        if (b->len >= d->batch_bytes || b->np >= 65536) docs_push_batch(d, b->len);
    }
    d->doc++;
}

static bool docs_full(const Docs* d) { return d->max_docs >= 0 && d->doc >= d->max_docs; }

/* ---- progress ---- */

typedef struct {
    bool on, tty;
    double t0, last, interval;
    long long expect_docs, expect_tokens;
    long long docs_before;   /* documents of the stream before this run */
    long long tokens_before;
    long long total_bytes;   /* input files' sizes when all are regular files, else 0 */
    long long done_bytes;    /* of files already read */
    const Source* cur;       /* file being read */
    double frac0;            /* share done when this run began */
    const Out* out;   /* tokens written */
    const Docs* docs; /* documents and bytes read */
} Progress;

static void human(double v, char* out, size_t cap) {
    if (v >= 1e12) snprintf(out, cap, "%.2fT", v / 1e12);
    else if (v >= 1e9) snprintf(out, cap, "%.2fB", v / 1e9);
    else if (v >= 1e6) snprintf(out, cap, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(out, cap, "%.1fk", v / 1e3);
    else snprintf(out, cap, "%.0f", v);
}

static void duration(double s, char* out, size_t cap) {
    long long t = (long long)(s + 0.5);
    if (t >= 86400) snprintf(out, cap, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
    else if (t >= 3600) snprintf(out, cap, "%lldh%02lldm", t / 3600, t % 3600 / 60);
    else if (t >= 60) snprintf(out, cap, "%lldm%02llds", t / 60, t % 60);
    else snprintf(out, cap, "%llds", t);
}

static void progress_show(Progress* pr, bool final) {
    if (!pr->on) return;
    double t = now();
    if (!final && t - pr->last < pr->interval) return;
    pr->last = t;
    const Out* o = pr->out;
    long long docs = pr->docs_before + pr->docs->docs_read, tokens = pr->tokens_before + o->tokens;
    double mb = (double)pr->docs->bytes_read / 1e6;
    double frac = -1;
    if (pr->expect_docs > 0) frac = (double)docs / (double)pr->expect_docs;
    else if (pr->expect_tokens > 0) frac = (double)tokens / (double)pr->expect_tokens;
    else if (pr->total_bytes > 0) frac = (double)(pr->done_bytes + (pr->cur ? src_pos(pr->cur) : 0)) / (double)pr->total_bytes;
    if (frac > 1) frac = 1;
    double el = t - pr->t0;
    char d[32], k[32], eta[48] = "", pct[16] = "";
    human((double)docs, d, sizeof d);
    human((double)tokens, k, sizeof k);
    if (frac >= 0) {
        snprintf(pct, sizeof pct, "%5.1f%% | ", 100 * frac);
        if (final) snprintf(eta, sizeof eta, " | took ");
        if (final) duration(el, eta + strlen(eta), sizeof eta - strlen(eta));
        else if (frac > pr->frac0 && el > 0) {
            snprintf(eta, sizeof eta, " | ETA ");
            duration(el * (1 - frac) / (frac - pr->frac0), eta + strlen(eta), sizeof eta - strlen(eta));
        }
    } else if (final) {
        snprintf(eta, sizeof eta, " | took ");
        duration(el, eta + strlen(eta), sizeof eta - strlen(eta));
    }
    fprintf(stderr, "%s%s%s docs | %s tokens | %.1f MB at %.1f MB/s%s%s", pr->tty ? "\r\033[K" : "", pct, d, k, mb,
            el > 0 ? mb / el : 0.0, eta, pr->tty && !final ? "" : "\n");
    fflush(stderr);
}

/* ---- readers: text files, JSON Lines, framed records ---- */

typedef struct {
    const char* sep;
    size_t seplen;
    bool drop_sep;
    const char* field;
    size_t field_len;
} Format;

/* Text: one document per file, or split on a separator that may straddle two reads. */
static void read_text(Docs* d, Source* s, const Format* f, Progress* pr) {
    size_t cap = READ_CHUNK + f->seplen;
    unsigned char* buf = xrealloc(NULL, cap);
    size_t keep = 0; /* bytes at the front of buf that may begin a separator */
    docs_begin(d, d->src);
    for (;;) {
        size_t n = src_read(s, buf + keep, cap - keep);
        bool end = n == 0;
        n += keep;
        size_t pos = 0;
        if (f->sep) {
            for (;;) { /* Python's str.split: left to right, non-overlapping */
                const unsigned char* hit = n > pos ? memmem(buf + pos, n - pos, f->sep, f->seplen) : NULL;
                if (!hit) break;
                size_t h = (size_t)(hit - buf);
                docs_text(d, buf + pos, (f->drop_sep ? h : h + f->seplen) - pos);
                docs_end(d);
                pos = h + f->seplen;
                if (docs_full(d)) goto out;
                docs_begin(d, d->src);
            }
        }
        size_t hold = end || !f->sep ? 0 : f->seplen - 1; /* a separator may start in the last seplen-1 bytes */
        size_t upto = n - pos > hold ? n - hold : pos;
        docs_text(d, buf + pos, upto - pos);
        memmove(buf, buf + upto, n - upto);
        keep = n - upto;
        progress_show(pr, false);
        if (end) break;
    }
    docs_end(d);
out:
    free(buf);
}

/* JSON Lines: tokenize_text's own reader, not cJSON (which reads every other JSON file of
 * ours, encoder.json included): cJSON costs more than 5% of the throughput
 * wherever the reading thread bounds it. `bash dev/bench/bench_jsonl_reader.sh` (256.6 MB of
 * FineWeb-shaped JSONL, 2 cores shared with other jobs, load average 4.6, best of 5,
 * 2026-12-06): the reading thread alone parses 373 MB/s of text with this reader and 290 MB/s
 * with cJSON (-22.3%), and that thread is tokenize_text's throughput once more than about
 * four cores encode (README, Data); on these 2 cores, where encoding bounds the run, cJSON
 * cost 4.2% end to end (81.7 vs 78.3 MB/s of JSONL) and 3.1% more CPU time. This reader also
 * does what cJSON cannot: it names the line, column and reason of a malformed line
 * (test_data_prep.sh), decodes the document straight into its batch, and follows Python's
 * json (NaN and Infinity, a lone surrogate read as U+FFFD, the last of two equal keys wins, a
 * \u0000 kept in the text). */
typedef struct {
    const char* path;
    long long line;
    const unsigned char *s, *p, *end;
    Docs* d;
    const Format* f;
    bool found;
} Json;

static void json_fail(Json* j, const char* what) __attribute__((noreturn));
static void json_fail(Json* j, const char* what) {
    if (j->p >= j->end) die_input("%s: line %lld: malformed JSON: %s at the end of the line", j->path, j->line, what);
    die_input("%s: line %lld, column %zu: malformed JSON: %s", j->path, j->line, (size_t)(j->p - j->s) + 1, what);
}

static inline void json_ws(Json* j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')) j->p++;
}

static int json_hex4(const unsigned char* p, const unsigned char* end) {
    if (end - p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0) return -1;
        v = v * 16 + x;
    }
    return v;
}

static size_t utf8_put(uint32_t cp, unsigned char* o) {
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) return o[0] = (unsigned char)(0xc0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | cp >> 12), o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f)), o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | cp >> 18), o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f)), o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at j->p (the opening quote). Decoded into out (a Batch's text, or the key
 * buffer) unless out is NULL. Escaped text never grows when decoded, so out needs room for
 * the raw length only. */
static void json_string(Json* j, unsigned char* out, size_t* outlen) {
    j->p++;
    size_t o = 0;
    for (;;) {
        const unsigned char* q = j->p;
        while (q < j->end && *q != '"' && *q != '\\' && *q >= 0x20) q++;
        if (out) memcpy(out + o, j->p, (size_t)(q - j->p));
        o += (size_t)(q - j->p);
        j->p = q;
        if (q >= j->end) json_fail(j, "unterminated string");
        if (*q == '"') {
            j->p++;
            break;
        }
        if (*q < 0x20) {
            char m[64];
            snprintf(m, sizeof m, "control character 0x%02x in a string (it must be escaped)", *q);
            json_fail(j, m);
        }
        /* an escape */
        if (q + 1 >= j->end) json_fail(j, "unterminated string");
        unsigned char e = q[1], c;
        switch (e) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case '/': c = '/'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            int v = json_hex4(q + 2, j->end);
            if (v < 0) json_fail(j, "\\u needs four hex digits");
            j->p = q + 6;
            uint32_t cp = (uint32_t)v;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                int lo = j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' ? json_hex4(j->p + 2, j->end) : -1;
                if (lo >= 0xdc00 && lo <= 0xdfff) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
                    j->p += 6;
                } else {
                    cp = 0xfffd; /* a lone surrogate: Python keeps it, tiktoken encodes it as U+FFFD */
                }
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                cp = 0xfffd;
            }
            unsigned char u[4];
            size_t k = utf8_put(cp, u);
            if (out) memcpy(out + o, u, k);
            o += k;
            continue;
        }
        default: {
            char m[64];
            snprintf(m, sizeof m, "unknown escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
            json_fail(j, m);
        }
        }
        if (out) out[o] = c;
        o++;
        j->p = q + 2;
    }
    if (outlen) *outlen = o;
}

static void json_number(Json* j) {
    const unsigned char* p = j->p;
    if (p < j->end && *p == '-') p++;
    if (j->end - p >= 8 && memcmp(p, "Infinity", 8) == 0) { /* Python's json writes -Infinity */
        j->p = p + 8;
        return;
    }
    if (p >= j->end || *p < '0' || *p > '9') json_fail(j, "expected a value");
    if (*p == '0') p++;
    else while (p < j->end && *p >= '0' && *p <= '9') p++;
    if (p < j->end && *p == '.') {
        p++;
        if (p >= j->end || *p < '0' || *p > '9') j->p = p, json_fail(j, "expected a digit after '.'");
        while (p < j->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < j->end && (*p == '+' || *p == '-')) p++;
        if (p >= j->end || *p < '0' || *p > '9') j->p = p, json_fail(j, "expected a digit in the exponent");
        while (p < j->end && *p >= '0' && *p <= '9') p++;
    }
    j->p = p;
}

static const char* json_kind(unsigned char c) {
    switch (c) {
    case '{': return "an object";
    case '[': return "an array";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    default: return "a number";
    }
}

static void json_value(Json* j, int depth);

static bool json_word(Json* j, const char* w) {
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) >= n && memcmp(j->p, w, n) == 0) {
        j->p += n;
        return true;
    }
    return false;
}

static void json_value(Json* j, int depth) {
    if (depth > JSON_MAX_DEPTH) json_fail(j, "nested deeper than 512 levels");
    json_ws(j);
    if (j->p >= j->end) json_fail(j, "expected a value");
    switch (*j->p) {
    case '"': json_string(j, NULL, NULL); return;
    case '{':
    case '[': {
        unsigned char close = *j->p == '{' ? '}' : ']';
        j->p++;
        json_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return;
        }
        for (;;) {
            if (close == '}') {
                json_ws(j);
                if (j->p >= j->end || *j->p != '"') json_fail(j, "expected a string key");
                json_string(j, NULL, NULL);
                json_ws(j);
                if (j->p >= j->end || *j->p != ':') json_fail(j, "expected ':' after a key");
                j->p++;
            }
            json_value(j, depth + 1);
            json_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                return;
            }
            json_fail(j, close == '}' ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
        }
    }
    case 't': if (json_word(j, "true")) return; break;
    case 'f': if (json_word(j, "false")) return; break;
    case 'n': if (json_word(j, "null")) return; break;
    case 'N': if (json_word(j, "NaN")) return; break; /* Python's json writes NaN */
    case 'I': if (json_word(j, "Infinity")) return; break;
    default: json_number(j); return;
    }
    json_fail(j, "expected a value");
}

/* One line: an object whose member f->field is a string; that string is the document. */
static void json_line(Json* j) {
    Docs* d = j->d;
    json_ws(j);
    if (j->p >= j->end || *j->p != '{') json_fail(j, "expected '{' (each line must be a JSON object)");
    j->p++;
    json_ws(j);
    j->found = false;
    unsigned char keybuf[256];
    if (j->p < j->end && *j->p == '}') {
        j->p++;
    } else {
        for (;;) {
            json_ws(j);
            if (j->p >= j->end || *j->p != '"') json_fail(j, "expected a string key");
            /* compare the key with the field without allocating: decode it only when its raw
             * length could match (escapes only shorten) */
            const unsigned char* kq = j->p + 1;
            const unsigned char* ke = kq;
            while (ke < j->end && *ke != '"' && *ke != '\\') ke++;
            bool match;
            if (ke < j->end && *ke == '"') { /* no escapes */
                match = (size_t)(ke - kq) == j->f->field_len && memcmp(kq, j->f->field, j->f->field_len) == 0;
                json_string(j, NULL, NULL);
            } else {
                const unsigned char* save = j->p;
                json_string(j, NULL, NULL);
                size_t raw = (size_t)(j->p - save), klen = 0;
                match = false;
                if (raw <= sizeof keybuf + 2) {
                    j->p = save;
                    json_string(j, keybuf, &klen);
                    match = klen == j->f->field_len && memcmp(keybuf, j->f->field, klen) == 0;
                } else {
                    unsigned char* big = xrealloc(NULL, raw);
                    j->p = save;
                    json_string(j, big, &klen);
                    match = klen == j->f->field_len && memcmp(big, j->f->field, klen) == 0;
                    free(big);
                }
            }
            json_ws(j);
            if (j->p >= j->end || *j->p != ':') json_fail(j, "expected ':' after a key");
            j->p++;
            json_ws(j);
            if (match) {
                if (j->p >= j->end) json_fail(j, "expected a value");
                if (*j->p != '"') die_input("%s: line %lld: field \"%s\" is %s, not a string", j->path, j->line, j->f->field, json_kind(*j->p));
                /* the last occurrence wins, as in Python's json */
                Batch* b = d->b;
                b->len = d->piece_off;
                if (!d->skipping) {
                    batch_reserve(b, (size_t)(j->end - j->p));
                    size_t n = 0;
                    json_string(j, b->text + b->len, &n);
                    b->len += n;
                } else {
                    json_string(j, NULL, NULL);
                }
                j->found = true;
            } else {
                json_value(j, 1);
            }
            json_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == '}') {
                j->p++;
                break;
            }
            json_fail(j, "expected ',' or '}' after a member");
        }
    }
    json_ws(j);
    if (j->p < j->end) json_fail(j, "unexpected text after the object");
    if (!j->found) die_input("%s: line %lld: no \"%s\" field", j->path, j->line, j->f->field);
}

static void read_jsonl(Docs* d, Source* s, const Format* f, Progress* pr) {
    size_t cap = 4 * READ_CHUNK, len = 0, pos = 0;
    unsigned char* buf = xrealloc(NULL, cap);
    Json j = {.path = s->path, .d = d, .f = f};
    bool end = false;
    while (!end || pos < len) {
        unsigned char* nl = len > pos ? memchr(buf + pos, '\n', len - pos) : NULL;
        if (!nl && !end) { /* top up: move the partial line to the front, read more */
            if (pos) {
                memmove(buf, buf + pos, len - pos);
                len -= pos;
                pos = 0;
            }
            if (len == cap) {
                if (cap >= MAX_LINE_BYTES) die_input("%s: line %lld: longer than %zu bytes", s->path, j.line + 1, MAX_LINE_BYTES);
                buf = xrealloc(buf, cap *= 2);
            }
            size_t n = src_read(s, buf + len, cap - len);
            if (n == 0) end = true;
            len += n;
            progress_show(pr, false);
            continue;
        }
        size_t e = nl ? (size_t)(nl - buf) : len;
        j.line++;
        j.s = j.p = buf + pos;
        j.end = buf + e;
        pos = nl ? e + 1 : len;
        json_ws(&j);
        if (j.p == j.end) continue; /* a blank line */
        j.p = j.s;
        docs_begin(d, d->src);
        json_line(&j);
        if (!d->skipping) docs_cut(d);
        docs_end(d);
        if (docs_full(d)) break;
    }
    free(buf);
}

static size_t src_read_full(Source* s, unsigned char* out, size_t n) {
    size_t got = 0;
    while (got < n) {
        size_t k = src_read(s, out + got, n - got);
        if (k == 0) break;
        got += k;
    }
    return got;
}

static void read_framed(Docs* d, Source* s, Progress* pr) {
    unsigned char* buf = xrealloc(NULL, READ_CHUNK);
    long long rec = 0;
    for (;;) {
        unsigned char h[8];
        size_t k = src_read_full(s, h, 8);
        if (k == 0) die("%s: the stream ends without its end record after %lld documents (did its producer stop early?)", s->path, rec);
        if (k < 8) die("%s: record %lld: the length is cut short (%zu of 8 bytes)", s->path, rec + 1, k);
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | h[i];
        if (n == FRAME_END) {
            if (src_read_full(s, h, 1)) die("%s: data after the end record", s->path);
            break;
        }
        if (n > MAX_DOC_BYTES) die("%s: record %lld: length %llu is not plausible (a corrupt stream?)", s->path, rec + 1, (unsigned long long)n);
        rec++;
        docs_begin(d, d->src);
        uint64_t left = n;
        while (left) {
            size_t want = left < READ_CHUNK ? (size_t)left : READ_CHUNK;
            size_t got = src_read_full(s, buf, want);
            if (got < want)
                die("%s: record %lld ends early (%llu of %llu bytes)", s->path, rec, (unsigned long long)(n - left + got), (unsigned long long)n);
            docs_text(d, buf, got);
            left -= got;
        }
        docs_end(d);
        progress_show(pr, false);
        if (docs_full(d)) break;
    }
    free(buf);
}

/* ---- --resume: the state file of an earlier run ---- */

typedef struct {
    bool complete;
    long long shards, tokens, documents, document_tokens;
} State;

static long long state_num(const cJSON* o, const char* path, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9e15 || v->valuedouble != (double)(long long)v->valuedouble)
        die("%s: \"%s\" is missing or not a non-negative integer", path, key);
    return (long long)v->valuedouble;
}

static bool state_bool(const cJSON* o, const char* path, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsBool(v)) die("%s: \"%s\" is missing or not true/false", path, key);
    return cJSON_IsTrue(v);
}

static bool state_read(const char* path, const Shards* want, State* st) {
    if (access(path, F_OK) != 0) return false;
    Input in = open_input(path);
    cJSON* o = cJSON_ParseWithLength((const char*)in.data, in.len);
    close_input(&in);
    if (!o || !cJSON_IsObject(o)) die("%s: not a tokenize_text state file (malformed JSON)", path);
    const cJSON* fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "tokenize_text state") != 0) die("%s: not a tokenize_text state file", path);
    if (state_num(o, path, "version") != STATE_VERSION) die("%s: state version %lld is not %d", path, state_num(o, path, "version"), STATE_VERSION);
    st->complete = state_bool(o, path, "complete");
    st->shards = state_num(o, path, "shards");
    st->tokens = state_num(o, path, "tokens");
    st->documents = state_num(o, path, "documents");
    st->document_tokens = state_num(o, path, "document_tokens");
    if (st->shards > INT_MAX) die("%s: \"shards\" is out of range", path);
    /* the run must be the same one */
    long long v;
    if ((v = state_num(o, path, "shard_tokens")) != want->shard_tokens)
        die("%s: the shards were made with --shard-tokens %lld, not %lld (use the same settings, or another --state)", path, v, want->shard_tokens);
    if ((v = state_num(o, path, "val_tokens")) != want->val_tokens)
        die("%s: the shards were made with --val-tokens %lld, not %lld (use the same settings, or another --state)", path, v, want->val_tokens);
    if (state_bool(o, path, "eot") != want->eot) die("%s: the shards were made %s --no-eot", path, want->eot ? "with" : "without");
    if (state_bool(o, path, "allow_special") != want->allow_special)
        die("%s: the shards were made %s --allow-special", path, want->allow_special ? "without" : "with");
    const cJSON* pre = cJSON_GetObjectItemCaseSensitive(o, "out_prefix");
    char mine[4096 + PATH_MAX];
    canonical_prefix(want->prefix, mine, sizeof mine);
    if (!cJSON_IsString(pre) || strcmp(pre->valuestring, mine) != 0)
        die("%s: the shards were written to %s, not %s", path, cJSON_IsString(pre) ? pre->valuestring : "?", mine);
    cJSON_Delete(o);
    return true;
}

/* A run killed by a signal it cannot catch (kill -9, the OOM killer) leaves its temporary
 * shard: on --resume, remove those of this prefix whose process is gone. */
/* A zombie counts as gone: where nothing reaps orphans (a container's init), the killed
 * process stays one. */
static bool process_alive(pid_t pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE* f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* rp = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

static void remove_stale_tmp(const char* pattern_fmt, const char* name) {
    char pat[4096 + 64];
    snprintf(pat, sizeof pat, pattern_fmt, name);
    glob_t g;
    if (glob(pat, GLOB_NOSORT, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char* dot = strrchr(g.gl_pathv[i], '.');
        char* end;
        long pid = strtol(dot + 1, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        if (!process_alive((pid_t)pid)) unlink(g.gl_pathv[i]);
    }
    globfree(&g);
}

/* ---- decode mode ---- */

static void decode_file(const Tokenizer* tok, const char* path, bool binary, bool safe, TokenizerUtf8* u) {
    Input in = open_input(path);
    size_t n = 0;
    int32_t* ids;
    if (binary) {
        if (in.len % 4) die("%s: size %zu is not a multiple of 4 (int32 ids)", path, in.len);
        n = in.len / 4;
        ids = xrealloc(NULL, n ? n * 4 : 4);
        if (n) memcpy(ids, in.data, n * 4);
    } else {
        ids = xrealloc(NULL, (in.len / 2 + 1) * sizeof *ids);
        const unsigned char* p = in.data;
        const unsigned char* end = p + in.len;
        int line = 1;
        while (p < end) {
            if (*p == '\n' || *p == ' ' || *p == '\t' || *p == '\r') {
                if (*p == '\n') line++;
                p++;
                continue;
            }
            long long v = 0;
            const unsigned char* q = p;
            while (p < end && *p >= '0' && *p <= '9' && v < (1LL << 40)) v = v * 10 + (*p++ - '0');
            if (p == q || (p < end && !(*p == '\n' || *p == ' ' || *p == '\t' || *p == '\r')))
                die("%s: line %d: expected a token id", path, line);
            if (v > INT32_MAX) v = INT32_MAX;
            ids[n++] = (int32_t)v;
        }
    }
    close_input(&in);
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const unsigned char* p = tokenizer_decode(tok, ids[i], &k);
        if (!p) die("%s: id %d (entry %zu) is outside the vocabulary 0..%d", path, ids[i], i, tokenizer_vocab_size(tok) - 1);
        if (safe) {
            if (tokenizer_print_token(tok, u, ids[i], stdout)) die("stdout: write failed: %s", strerror(errno));
        } else if (k && fwrite(p, 1, k, stdout) != k) {
            die("stdout: write failed: %s", strerror(errno));
        }
    }
    free(ids);
}

/* ---- main ---- */

static int default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void read_inputs(Docs* d, char** inputs, int ninputs, const Format* f, bool jsonl, bool framed, Progress* pr) {
    for (int i = 0; i < ninputs && !docs_full(d); i++) {
        Source s;
        src_open(&s, inputs[i]);
        d->src = i;
        pr->cur = &s;
        if (jsonl) read_jsonl(d, &s, f, pr);
        else if (framed) read_framed(d, &s, pr);
        else read_text(d, &s, f, pr);
        struct stat st;
        if (fstat(s.fd, &st) == 0 && S_ISREG(st.st_mode)) pr->done_bytes += st.st_size;
        pr->cur = NULL;
        src_close(&s);
    }
}

enum {
    OPT_DUMP = 1000, OPT_DECODE, OPT_BENCH, OPT_SHARD_TOKENS, OPT_VAL_TOKENS, OPT_ENCODER, OPT_VOCAB,
    OPT_SPLIT_ON, OPT_DROP_SEP, OPT_NO_EOT, OPT_ALLOW_SPECIAL, OPT_FORMAT, OPT_SAFE, OPT_REPEAT,
    OPT_JSONL_FIELD, OPT_FRAMED, OPT_THREADS, OPT_BATCH_BYTES, OPT_STATE, OPT_RESUME, OPT_FIRST_DOC,
    OPT_MAX_DOCS, OPT_PROGRESS, OPT_EXPECT_DOCS, OPT_EXPECT_TOKENS,
};

int main(int argc, char** argv) {
    static const struct option opts[] = {
        {"dump", no_argument, 0, OPT_DUMP},
        {"decode", no_argument, 0, OPT_DECODE},
        {"bench", no_argument, 0, OPT_BENCH},
        {"out-prefix", required_argument, 0, 'o'},
        {"shard-tokens", required_argument, 0, OPT_SHARD_TOKENS},
        {"val-tokens", required_argument, 0, OPT_VAL_TOKENS},
        {"jsonl-field", required_argument, 0, OPT_JSONL_FIELD},
        {"framed", no_argument, 0, OPT_FRAMED},
        {"split-on", required_argument, 0, OPT_SPLIT_ON},
        {"drop-separator", no_argument, 0, OPT_DROP_SEP},
        {"max-docs", required_argument, 0, OPT_MAX_DOCS},
        {"threads", required_argument, 0, OPT_THREADS},
        {"batch-bytes", required_argument, 0, OPT_BATCH_BYTES},
        {"state", required_argument, 0, OPT_STATE},
        {"resume", no_argument, 0, OPT_RESUME},
        {"first-doc", required_argument, 0, OPT_FIRST_DOC},
        {"progress", no_argument, 0, OPT_PROGRESS},
        {"expect-docs", required_argument, 0, OPT_EXPECT_DOCS},
        {"expect-tokens", required_argument, 0, OPT_EXPECT_TOKENS},
        {"encoder", required_argument, 0, OPT_ENCODER},
        {"vocab", required_argument, 0, OPT_VOCAB},
        {"no-eot", no_argument, 0, OPT_NO_EOT},
        {"allow-special", no_argument, 0, OPT_ALLOW_SPECIAL},
        {"format", required_argument, 0, OPT_FORMAT},
        {"safe", no_argument, 0, OPT_SAFE},
        {"repeat", required_argument, 0, OPT_REPEAT},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int mode = 0; /* 0 shards, OPT_DUMP, OPT_DECODE, OPT_BENCH */
    const char *prefix = NULL, *encoder = NULL, *vocab = NULL, *split_arg = NULL, *field = NULL, *state_path = NULL;
    long long shard_tokens = 100000000, val_tokens = 0, repeat = 5, threads = 0, batch_bytes = 1 << 20;
    long long first_doc = 0, max_docs = -1, expect_docs = 0, expect_tokens = 0;
    bool drop_sep = false, no_eot = false, allow_special = false, binary = false, safe = false, quiet = false;
    bool drop_sep_set = false, format_set = false, repeat_set = false, framed = false, resume = false, progress = false;
    bool first_doc_set = false;

    opterr = 0;
    for (;;) {
        int prev_optind = optind;
        int c = getopt_long(argc, argv, ":o:qh", opts, NULL);
        if (c == -1) break;
        switch (c) {
        case OPT_DUMP:
        case OPT_DECODE:
        case OPT_BENCH:
            if (mode && mode != c) die("--dump, --decode and --bench cannot be combined");
            mode = c;
            break;
        case 'o': prefix = optarg; break;
        case OPT_SHARD_TOKENS: shard_tokens = parse_int("--shard-tokens", optarg, 0, INT32_MAX); break;
        case OPT_VAL_TOKENS: val_tokens = parse_int("--val-tokens", optarg, 0, INT64_MAX / 2); break;
        case OPT_JSONL_FIELD:
            field = optarg;
            if (!*field) die("--jsonl-field: empty field name");
            break;
        case OPT_FRAMED: framed = true; break;
        case OPT_ENCODER: encoder = optarg; break;
        case OPT_VOCAB: vocab = optarg; break;
        case OPT_SPLIT_ON: split_arg = optarg; break;
        case OPT_DROP_SEP: drop_sep = drop_sep_set = true; break;
        case OPT_MAX_DOCS: max_docs = parse_int("--max-docs", optarg, 0, INT64_MAX / 2); break;
        case OPT_THREADS: threads = parse_int("--threads", optarg, 1, 4096); break;
        case OPT_BATCH_BYTES: batch_bytes = parse_int("--batch-bytes", optarg, 64, 1LL << 30); break;
        case OPT_STATE: state_path = optarg; break;
        case OPT_RESUME: resume = true; break;
        case OPT_FIRST_DOC: first_doc = parse_int("--first-doc", optarg, 0, INT64_MAX / 2), first_doc_set = true; break;
        case OPT_PROGRESS: progress = true; break;
        case OPT_EXPECT_DOCS: expect_docs = parse_int("--expect-docs", optarg, 1, INT64_MAX / 2); break;
        case OPT_EXPECT_TOKENS: expect_tokens = parse_int("--expect-tokens", optarg, 1, INT64_MAX / 2); break;
        case OPT_NO_EOT: no_eot = true; break;
        case OPT_ALLOW_SPECIAL: allow_special = true; break;
        case OPT_FORMAT:
            format_set = true;
            if (strcmp(optarg, "text") == 0) binary = false;
            else if (strcmp(optarg, "int32") == 0) binary = true;
            else die("--format: invalid value '%s' (expected text or int32)", optarg);
            break;
        case OPT_SAFE: safe = true; break;
        case OPT_REPEAT: repeat_set = true, repeat = parse_int("--repeat", optarg, 1, 1000000); break;
        case 'q': quiet = true; break;
        case 'h': fputs(USAGE, stdout); return 0;
        case ':': die("option '%s' needs a value (see --help)", argv[optind - 1]);
        default: {
            const char* bad = argv[optind - 1 >= prev_optind ? optind - 1 : prev_optind];
            if (optopt && optopt < 256 && bad[0] == '-' && bad[1] != '-') die("unknown option '-%c' (see --help)", optopt);
            die("unknown option '%s' (see --help)", bad);
        }
        }
    }
    int ninputs = argc - optind;
    char** inputs = argv + optind;
    if (ninputs == 0) die("no input files (see --help)");
    if (mode == 0 && !prefix) die("--out-prefix is required to write shards (or use --dump / --bench)");
    if (mode != 0 && prefix) die("--out-prefix only applies when writing shards");
    if (drop_sep_set && !split_arg) die("--drop-separator needs --split-on");
    if (safe && mode != OPT_DECODE) die("--safe only applies to --decode");
    if (format_set && mode != OPT_DUMP && mode != OPT_DECODE) die("--format only applies to --dump and --decode");
    if (repeat_set && mode != OPT_BENCH) die("--repeat only applies to --bench");
    if (field && framed) die("--jsonl-field and --framed cannot be combined");
    if (split_arg && (field || framed)) die("--split-on only applies to text input (not with --jsonl-field or --framed)");
    if ((state_path || resume || first_doc_set) && mode != 0) die("--state, --resume and --first-doc only apply when writing shards");
    if (resume && !state_path) die("--resume needs --state FILE");
    if (mode == OPT_DECODE && (field || framed || max_docs >= 0 || progress))
        die("--jsonl-field, --framed, --max-docs and --progress do not apply to --decode");
    if (max_docs >= 0 && max_docs < first_doc) die("--max-docs %lld is below --first-doc %lld", max_docs, first_doc);
    if (!threads) threads = default_threads();
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe becomes a write error with a message */

    /* the vocabulary */
    char enc_buf[4096], voc_buf[4096];
    if (!encoder) {
        const char* env = getenv("FSDP_DATA");
        const char* dirs[3] = {env && *env ? env : NULL, "../shared/data", "data"};
        for (int i = 0; i < 3 && !encoder; i++) {
            if (!dirs[i]) continue;
            snprintf(enc_buf, sizeof enc_buf, "%s/gpt2/encoder.json", dirs[i]);
            if (readable(enc_buf)) encoder = enc_buf;
        }
        if (!encoder)
            die("cannot find encoder.json (looked in %s%s../shared/data/gpt2 and data/gpt2); use --encoder",
                env && *env ? env : "", env && *env ? "/gpt2, " : "");
    }
    if (!vocab) {
        const char* slash = strrchr(encoder, '/');
        int dn = slash ? (int)(slash - encoder) : 0;
        snprintf(voc_buf, sizeof voc_buf, "%.*s%svocab.bpe", dn, encoder, slash ? "/" : "");
        vocab = voc_buf;
    }
    char err[512];
    double t0 = now();
    Tokenizer* tok = tokenizer_load(encoder, vocab, err, sizeof err);
    if (!tok) die("%s", err);
    double t_load = now() - t0;

    if (mode == OPT_DECODE) {
        TokenizerUtf8 u;
        tokenizer_utf8_init(&u);
        for (int i = 0; i < ninputs; i++) decode_file(tok, inputs[i], binary, safe, &u);
        if (safe && tokenizer_print_flush(&u, stdout)) die("stdout: write failed: %s", strerror(errno));
        if (fflush(stdout) != 0) die("stdout: write failed: %s", strerror(errno));
        tokenizer_free(tok);
        return 0;
    }

    char sep[4096];
    size_t seplen = 0;
    if (split_arg) {
        if (strlen(split_arg) >= sizeof sep) die("--split-on: separator too long");
        seplen = parse_escapes(split_arg, sep);
        if (seplen == 0) die("--split-on: empty separator");
    }
    if (!no_eot && tokenizer_eot(tok) < 0) die("%s has no <|endoftext|> token; use --no-eot", encoder);
    /* check every input before writing anything */
    long long total_bytes = 0;
    bool sizes_known = true;
    for (int i = 0; i < ninputs; i++) {
        if (strcmp(inputs[i], "-") == 0) {
            sizes_known = false;
            continue;
        }
        struct stat sb;
        if (stat(inputs[i], &sb) != 0) die("%s: cannot open: %s", inputs[i], strerror(errno));
        if (S_ISDIR(sb.st_mode)) die("%s: cannot read: %s", inputs[i], strerror(EISDIR));
        if (!readable(inputs[i])) die("%s: cannot open: %s", inputs[i], strerror(errno));
        if (S_ISREG(sb.st_mode)) total_bytes += sb.st_size;
        else sizes_known = false;
    }

    Format fmt = {split_arg ? sep : NULL, seplen, drop_sep, field, field ? strlen(field) : 0};
    int flags = allow_special ? TOKENIZER_ALLOW_SPECIAL : 0;
    Pool pool = {.main_tok = tok, .encoder = encoder, .vocab = vocab, .flags = flags,
                 .eot = no_eot ? -1 : tokenizer_eot(tok), .inputs = (const char* const*)inputs};
    Docs docs = {.pool = &pool, .batch_bytes = (size_t)batch_bytes, .doc = first_doc, .max_docs = max_docs};
    Out out = {0};
    Progress pr = {.on = progress, .tty = isatty(2), .t0 = t0, .expect_docs = expect_docs, .expect_tokens = expect_tokens,
                   .docs_before = first_doc, .total_bytes = sizes_known ? total_bytes : 0, .out = &out, .docs = &docs};
    pr.interval = pr.tty ? 1.0 : 30.0;
    g_clear_line = progress && pr.tty && isatty(1);
    pr.last = t0;

    if (mode == OPT_BENCH) {
        pool.eot = -1; /* the encoder's throughput on the text, as tiktoken's encode_ordinary is timed */
        docs.collect = true;
        docs.b = calloc(1, sizeof *docs.b);
        if (!docs.b) die("out of memory");
        double r0 = now();
        read_inputs(&docs, inputs, ninputs, &fmt, field != NULL, framed, &pr);
        docs_push_batch(&docs, docs.b->len);
        double t_read = now() - r0; /* the reading thread alone: decompressing, parsing, batching */
        batch_free(docs.b);
        size_t bytes = 0;
        for (size_t i = 0; i < docs.nkept; i++)
            for (size_t k = 0; k < docs.kept[i]->np; k++) bytes += docs.kept[i]->pieces[k].len;
        pool.keep = true;
        pool.on_done = out_batch;
        pool.done_ctx = &out;
        double t1 = now();
        pool_init(&pool, (int)threads);
        if (threads > 1) {
            pool_run(&pool);
            pool_wait_loaded(&pool);
        }
        t_load += threads > 1 ? now() - t1 : 0;
        double best = 1e30, best_cpu = 1e30;
        long long tokens = 0;
        for (long long r = 0; r < repeat; r++) {
            out.tokens = 0;
            clockid_t clk = threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID;
            double w0 = now(), c0 = cpu_now(clk);
            for (size_t i = 0; i < docs.nkept; i++) pool_submit(&pool, docs.kept[i]);
            pool_drain(&pool);
            double dw = now() - w0, dc = cpu_now(clk) - c0;
            if (dw < best) best = dw;
            if (dc < best_cpu) best_cpu = dc;
            tokens = out.tokens;
        }
        pool_stop(&pool);
        printf("bytes %zu tokens %lld repeat %lld threads %lld best_wall_s %.6f best_cpu_s %.6f wall_MB/s %.2f cpu_MB/s %.2f load_ms %.1f "
               "read_s %.6f read_MB/s %.2f\n",
               bytes, tokens, repeat, threads, best, best_cpu, (double)bytes / best / 1e6, (double)bytes / best_cpu / 1e6, 1e3 * t_load,
               t_read, (double)bytes / t_read / 1e6);
        for (size_t i = 0; i < docs.nkept; i++) batch_free(docs.kept[i]);
        free(docs.kept);
        tokenizer_free(tok);
        return 0;
    }

    Dump* dump = NULL;
    Shards sh = {0};
    if (mode == OPT_DUMP) {
        dump = calloc(1, sizeof *dump);
        if (!dump) die("out of memory");
        dump->binary = binary;
        out.dump = dump;
    } else {
        sh.prefix = prefix;
        sh.shard_tokens = shard_tokens;
        sh.val_tokens = val_tokens;
        sh.quiet = quiet;
        sh.state = state_path;
        sh.eot = !no_eot;
        sh.allow_special = allow_special;
        sh.doc = first_doc - 1; /* the first document's start makes it first_doc */
        if (state_path) { /* found out now, not after the first shard */
            char d[4096];
            snprintf(d, sizeof d, "%s", state_path);
            struct stat sd;
            const char* dir = dirname(d);
            if (stat(dir, &sd) != 0 || !S_ISDIR(sd.st_mode)) die("--state %s: no directory %s", state_path, dir);
        }
        State st;
        if (resume && state_read(state_path, &sh, &st)) {
            if (st.complete) {
                if (!quiet) printf("%s: complete (%lld shards, %lld tokens); nothing to do\n", state_path, st.shards, st.tokens);
                tokenizer_free(tok);
                return 0;
            }
            if (first_doc > st.documents)
                die("--first-doc %lld is past the resume point of %s (document %lld)", first_doc, state_path, st.documents);
            remove_stale_tmp("%s_*.bin.tmp.*", prefix);
            remove_stale_tmp("%s.tmp.*", state_path);
            sh.next_index = (int)st.shards;
            sh.total = st.tokens;
            sh.skip = st.document_tokens;
            sh.doc = st.documents - 1; /* the skipped documents give no pieces */
            docs.skip_below = st.documents;
            pr.docs_before = st.documents;
            pr.tokens_before = st.tokens;
            /* the ETA counts from here; with the input files' bytes the skipped part is read again */
            pr.frac0 = expect_docs ? (double)st.documents / (double)expect_docs
                     : expect_tokens ? (double)st.tokens / (double)expect_tokens : 0;
            if (!quiet)
                printf("%s: resuming after %lld shards (%lld tokens), at document %lld%s\n", state_path, st.shards, st.tokens, st.documents,
                       st.document_tokens ? " (part-written)" : "");
        }
        sh.buf = xrealloc(NULL, WBUF_TOKENS * sizeof *sh.buf);
        out.sh = &sh;
    }
    pool.on_done = out_batch;
    pool.done_ctx = &out;
    pool_init(&pool, (int)threads);
    docs.b = pool_batch(&pool);
    read_inputs(&docs, inputs, ninputs, &fmt, field != NULL, framed, &pr);
    if (docs.b->np) pool_submit(&pool, docs.b);
    else batch_free(docs.b);
    pool_stop(&pool);
    if (docs.skip_below > docs.doc)
        die("--resume: the input has %lld documents, but %s says %lld are already in shards", docs.doc, state_path, docs.skip_below);
    if (sh.skip) die("--resume: the input ended inside the document the state says was part-written");
    if (dump) {
        dump_flush(dump);
        if (fflush(stdout) != 0) die("stdout: write failed: %s", strerror(errno));
        free(dump);
        progress_show(&pr, true);
    } else {
        shard_close(&sh);
        if (sh.total == 0) die("no tokens to write");
        state_write(&sh, true);
        progress_show(&pr, true);
        if (!quiet)
            printf("%lld documents, %zu bytes -> %lld tokens (%lld val in %lld shards, %lld train in %lld shards) in %.2f s\n",
                   out.docs, out.bytes, out.tokens, sh.written[0], sh.shards[0], sh.written[1], sh.shards[1], now() - t0);
        free(sh.buf);
    }
    tokenizer_free(tok);
    return 0;
}
