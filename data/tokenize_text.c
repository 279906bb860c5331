/*
 * tokenize_text: text files -> GPT-2 token shards in llm.c's format.
 *
 *   ./tokenize_text -o data/mytext/mytext --val-tokens 1000000 a.txt b.txt
 *   ./tokenize_text --split-on '\n\n' --val-tokens 32768 --shard-tokens 0 -o out/tiny input.txt
 *   ./tokenize_text --dump --no-eot input.txt          # the ids, one per line
 *   ./tokenize_text --bench --repeat 5 input.txt       # encoder throughput, one thread
 *
 * A shard is a 256 x int32 header (magic 20240520, version 1, token count, rest 0) and then
 * the tokens as uint16, as written by llm.c's dev/data scripts. Each shard is written to
 * NAME.tmp.PID, fsynced and renamed, so a shard that exists is complete.
 * Run with --help for the options.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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

#include "dataloader/tokenizer.h"

#define PROG "tokenize_text"
#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define HEADER_INTS 256
#define WBUF_TOKENS (1 << 20)

static const char USAGE[] =
    "Usage: " PROG " [options] FILE...\n"
    "Turns text files into GPT-2 token shards in llm.c's format: a header of 256 int32\n"
    "(magic 20240520, version 1, token count) followed by the tokens as uint16.\n"
    "Every input file (or, with --split-on, every part of one) is a document and is\n"
    "preceded by <|endoftext|> (50256). FILE may be - for standard input.\n"
    "\n"
    "Modes (the default writes shards):\n"
    "  --dump                 write the token stream to stdout instead of shards\n"
    "  --decode               FILEs hold token ids (as --dump writes them); write their bytes\n"
    "  --bench                encode the inputs in memory and report MB/s (one thread)\n"
    "\n"
    "Shards:\n"
    "  -o, --out-prefix P     write P_val_NNNNNN.bin, P_train_NNNNNN.bin (NNNNNN counts all\n"
    "                         shards, val first, as llm.c's fineweb.py); with --shard-tokens 0\n"
    "                         just P_val.bin and P_train.bin\n"
    "  --shard-tokens N       tokens per shard (default 100000000; 0 = no limit)\n"
    "  --val-tokens N         the first N tokens of the stream go to val shards (default 0)\n"
    "\n"
    "Text and tokenizer:\n"
    "  --encoder PATH         GPT-2 encoder.json (default: the first of $FSDP_DATA/gpt2/,\n"
    "                         ../shared/data/gpt2/, data/gpt2/ that has one)\n"
    "  --vocab PATH           GPT-2 vocab.bpe (default: next to encoder.json)\n"
    "  --split-on STR         start a new document after every occurrence of STR, e.g. '\\n\\n'\n"
    "                         (escapes \\n \\t \\r \\\\ \\xHH are understood); the separator stays\n"
    "                         at the end of its document, as in llm.c's tinyshakespeare.py\n"
    "  --drop-separator       remove the --split-on separator from the documents instead\n"
    "  --no-eot               do not put <|endoftext|> before each document\n"
    "  --allow-special        encode \"<|endoftext|>\" written in the text as the token 50256\n"
    "                         (default: as plain text, like tiktoken's encode_ordinary)\n"
    "\n"
    "Other:\n"
    "  --format text|int32    --dump output / --decode input: decimal ids one per line\n"
    "                         (default) or little-endian int32\n"
    "  --safe                 --decode: print through the UTF-8 sanitiser (ill-formed bytes\n"
    "                         and control characters other than tab/newline/CR become U+FFFD)\n"
    "  --repeat N             --bench: encode N times and report the best (default 5)\n"
    "  -q, --quiet            no summary lines\n"
    "  -h, --help             this text\n";

/* ---- errors: one line on stderr, remove a half-written shard, exit 1 ---- */

static char g_tmp_path[4096 + 64]; /* shard being written, removed on error */

static void die(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (g_tmp_path[0]) unlink(g_tmp_path);
    exit(1);
}

/* Ctrl-C / SIGTERM while a shard is being written: remove its temporary file, then die of
 * the signal as usual. */
static void on_signal(int sig) {
    if (g_tmp_path[0]) unlink(g_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
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

/* ---- input files: mmap'd when regular, read otherwise ---- */

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
        unsigned char* buf = malloc(cap);
        if (!buf) die("%s: out of memory", path);
        for (;;) {
            if (n == cap) {
                buf = realloc(buf, cap *= 2);
                if (!buf) die("%s: out of memory", path);
            }
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

/* ---- shard writer ---- */

typedef struct {
    const char* prefix;
    long long shard_tokens; /* 0 = no limit */
    long long val_tokens;
    long long total;        /* tokens routed so far */
    int next_index;         /* global shard index */
    bool quiet;
    /* the open shard */
    int fd;
    int split; /* 0 val, 1 train */
    long long count;
    char path[4096];
    uint16_t* buf;
    size_t nbuf;
    long long written[2], shards[2];
} Shards;

static void write_all(int fd, const void* p, size_t n, off_t off, bool positioned, const char* path) {
    const char* c = p;
    while (n) {
        ssize_t w = positioned ? pwrite(fd, c, n, off) : write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) die("%s: write failed: %s", path, strerror(errno));
        if (w == 0) die("%s: write failed: no progress", path);
        c += w;
        n -= (size_t)w;
        off += w;
    }
}

static void shard_flush_buf(Shards* s) {
    if (s->nbuf) write_all(s->fd, s->buf, s->nbuf * sizeof(uint16_t), 0, false, g_tmp_path);
    s->nbuf = 0;
}

static void shard_close(Shards* s) {
    if (s->fd < 0) return;
    shard_flush_buf(s);
    int32_t header[HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)s->count};
    write_all(s->fd, header, sizeof header, 0, true, g_tmp_path);
    if (fsync(s->fd) != 0) die("%s: fsync failed: %s", g_tmp_path, strerror(errno));
    if (close(s->fd) != 0) die("%s: close failed: %s", g_tmp_path, strerror(errno));
    s->fd = -1;
    if (rename(g_tmp_path, s->path) != 0) die("%s: cannot rename to %s: %s", g_tmp_path, s->path, strerror(errno));
    g_tmp_path[0] = 0;
    s->written[s->split] += s->count;
    s->shards[s->split]++;
    if (!s->quiet) printf("%s: %lld tokens\n", s->path, s->count);
}

static void shard_open(Shards* s, int split) {
    const char* name = split ? "train" : "val";
    int n = s->shard_tokens ? snprintf(s->path, sizeof s->path, "%s_%s_%06d.bin", s->prefix, name, s->next_index)
                            : snprintf(s->path, sizeof s->path, "%s_%s.bin", s->prefix, name);
    if (n < 0 || (size_t)n + 32 >= sizeof s->path) die("--out-prefix: path too long");
    s->next_index++;
    snprintf(g_tmp_path, sizeof g_tmp_path, "%s.tmp.%d", s->path, (int)getpid());
    s->fd = open(g_tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->fd < 0) {
        char p[sizeof g_tmp_path];
        memcpy(p, g_tmp_path, sizeof p);
        g_tmp_path[0] = 0;
        die("%s: cannot create: %s", p, strerror(errno));
    }
    int32_t header[HEADER_INTS] = {0}; /* rewritten with the count when the shard is closed */
    write_all(s->fd, header, sizeof header, 0, false, g_tmp_path);
    s->split = split;
    s->count = 0;
}

static int shard_sink(void* ctx, const int32_t* ids, size_t n) {
    Shards* s = ctx;
    for (size_t i = 0; i < n; i++) {
        int split = s->total < s->val_tokens ? 0 : 1;
        if (s->fd >= 0 && (s->split != split || (s->shard_tokens && s->count == s->shard_tokens))) shard_close(s);
        if (s->fd < 0) shard_open(s, split);
        if (s->count == INT32_MAX) die("%s: more than %d tokens in one shard; use --shard-tokens", s->path, INT32_MAX);
        if (ids[i] < 0 || ids[i] > UINT16_MAX) die("token id %d does not fit in a uint16 shard", ids[i]);
        s->buf[s->nbuf++] = (uint16_t)ids[i];
        if (s->nbuf == WBUF_TOKENS) shard_flush_buf(s);
        s->count++;
        s->total++;
    }
    return 0;
}

/* ---- dump sink ---- */

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

static int dump_sink(void* ctx, const int32_t* ids, size_t n) {
    Dump* d = ctx;
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
    return 0;
}

static int count_sink(void* ctx, const int32_t* ids, size_t n) {
    *(long long*)ctx += (long long)n;
    return 0;
}

/* ---- documents ---- */

typedef struct {
    Tokenizer* tok;
    int flags;
    bool eot;
    const char* sep;
    size_t seplen;
    bool drop_sep;
    TokenizerSink sink;
    void* ctx;
    long long docs;
    const char* path;
} Stream;

static void emit_doc(Stream* st, const unsigned char* p, size_t n) {
    if (st->eot) {
        int32_t e = tokenizer_eot(st->tok);
        if (st->sink(st->ctx, &e, 1)) die("output failed");
    }
    int rc = tokenizer_encode_stream(st->tok, p, n, st->flags, st->sink, st->ctx);
    if (rc) die("%s: %s", st->path, tokenizer_error(st->tok)[0] ? tokenizer_error(st->tok) : "encoding failed");
    st->docs++;
}

static void emit_file(Stream* st, const Input* in) {
    const unsigned char* t = in->data;
    size_t len = in->len, pos = 0;
    if (!st->sep) {
        emit_doc(st, t, len);
        return;
    }
    for (;;) { /* Python's str.split: left to right, non-overlapping; a trailing separator gives an empty last part */
        const unsigned char* hit = len > pos ? memmem(t + pos, len - pos, st->sep, st->seplen) : NULL;
        if (!hit) {
            emit_doc(st, t + pos, len - pos);
            return;
        }
        size_t end = (size_t)(hit - t);
        emit_doc(st, t + pos, (st->drop_sep ? end : end + st->seplen) - pos);
        pos = end + st->seplen;
    }
}

/* ---- decode mode ---- */

static void decode_file(const Tokenizer* tok, const char* path, bool binary, bool safe, TokenizerUtf8* u) {
    Input in = open_input(path);
    size_t n = 0;
    int32_t* ids;
    if (binary) {
        if (in.len % 4) die("%s: size %zu is not a multiple of 4 (int32 ids)", path, in.len);
        n = in.len / 4;
        ids = malloc(n ? n * 4 : 4);
        if (!ids) die("%s: out of memory", path);
        if (n) memcpy(ids, in.data, n * 4);
    } else {
        ids = malloc((in.len / 2 + 1) * sizeof *ids);
        if (!ids) die("%s: out of memory", path);
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

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) { /* this thread's CPU time: steadier than wall time on a busy machine */
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool readable(const char* path) { return access(path, R_OK) == 0; }

enum {
    OPT_DUMP = 1000, OPT_DECODE, OPT_BENCH, OPT_SHARD_TOKENS, OPT_VAL_TOKENS, OPT_ENCODER, OPT_VOCAB,
    OPT_SPLIT_ON, OPT_DROP_SEP, OPT_NO_EOT, OPT_ALLOW_SPECIAL, OPT_FORMAT, OPT_SAFE, OPT_REPEAT,
};

int main(int argc, char** argv) {
    static const struct option opts[] = {
        {"dump", no_argument, 0, OPT_DUMP},
        {"decode", no_argument, 0, OPT_DECODE},
        {"bench", no_argument, 0, OPT_BENCH},
        {"out-prefix", required_argument, 0, 'o'},
        {"shard-tokens", required_argument, 0, OPT_SHARD_TOKENS},
        {"val-tokens", required_argument, 0, OPT_VAL_TOKENS},
        {"encoder", required_argument, 0, OPT_ENCODER},
        {"vocab", required_argument, 0, OPT_VOCAB},
        {"split-on", required_argument, 0, OPT_SPLIT_ON},
        {"drop-separator", no_argument, 0, OPT_DROP_SEP},
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
    const char *prefix = NULL, *encoder = NULL, *vocab = NULL, *split_arg = NULL;
    long long shard_tokens = 100000000, val_tokens = 0, repeat = 5;
    bool drop_sep = false, no_eot = false, allow_special = false, binary = false, safe = false, quiet = false;
    bool drop_sep_set = false, format_set = false, repeat_set = false;

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
        case OPT_ENCODER: encoder = optarg; break;
        case OPT_VOCAB: vocab = optarg; break;
        case OPT_SPLIT_ON: split_arg = optarg; break;
        case OPT_DROP_SEP: drop_sep = drop_sep_set = true; break;
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
    for (int i = 0; i < ninputs; i++) {
        if (strcmp(inputs[i], "-") == 0) continue;
        struct stat sb;
        if (stat(inputs[i], &sb) != 0) die("%s: cannot open: %s", inputs[i], strerror(errno));
        if (S_ISDIR(sb.st_mode)) die("%s: cannot read: %s", inputs[i], strerror(EISDIR));
        if (!readable(inputs[i])) die("%s: cannot open: %s", inputs[i], strerror(errno));
    }

    int flags = allow_special ? TOKENIZER_ALLOW_SPECIAL : 0;
    if (mode == OPT_BENCH) {
        size_t bytes = 0;
        long long tokens = 0;
        double best = 1e30, best_cpu = 1e30;
        Input* ins = calloc((size_t)ninputs, sizeof *ins);
        if (!ins) die("out of memory");
        for (int i = 0; i < ninputs; i++) {
            ins[i] = open_input(inputs[i]);
            bytes += ins[i].len;
        }
        for (long long r = 0; r < repeat; r++) {
            tokens = 0;
            double t1 = now(), c1 = cpu_now();
            for (int i = 0; i < ninputs; i++)
                if (tokenizer_encode_stream(tok, ins[i].data, ins[i].len, flags, count_sink, &tokens))
                    die("%s: %s", inputs[i], tokenizer_error(tok));
            double dt = now() - t1, dc = cpu_now() - c1;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
        }
        printf("bytes %zu tokens %lld repeat %lld best_wall_s %.6f best_cpu_s %.6f wall_MB/s %.2f cpu_MB/s %.2f load_ms %.1f\n",
               bytes, tokens, repeat, best, best_cpu, (double)bytes / best / 1e6, (double)bytes / best_cpu / 1e6, 1e3 * t_load);
        for (int i = 0; i < ninputs; i++) close_input(&ins[i]);
        free(ins);
        tokenizer_free(tok);
        return 0;
    }

    Stream st = {tok, flags, !no_eot, split_arg ? sep : NULL, seplen, drop_sep, NULL, NULL, 0, NULL};
    Dump* dump = NULL;
    Shards sh = {0};
    if (mode == OPT_DUMP) {
        dump = calloc(1, sizeof *dump);
        if (!dump) die("out of memory");
        dump->binary = binary;
        st.sink = dump_sink;
        st.ctx = dump;
    } else {
        sh.prefix = prefix;
        sh.shard_tokens = shard_tokens;
        sh.val_tokens = val_tokens;
        sh.quiet = quiet;
        sh.fd = -1;
        sh.buf = malloc(WBUF_TOKENS * sizeof *sh.buf);
        if (!sh.buf) die("out of memory");
        st.sink = shard_sink;
        st.ctx = &sh;
    }
    size_t bytes = 0;
    for (int i = 0; i < ninputs; i++) {
        Input in = open_input(inputs[i]);
        st.path = inputs[i];
        emit_file(&st, &in);
        bytes += in.len;
        close_input(&in);
    }
    if (dump) {
        dump_flush(dump);
        if (fflush(stdout) != 0) die("stdout: write failed: %s", strerror(errno));
        free(dump);
    } else {
        shard_close(&sh);
        if (sh.total == 0) die("no tokens to write");
        if (!quiet)
            printf("%lld documents, %zu bytes -> %lld tokens (%lld val in %lld shards, %lld train in %lld shards) in %.2f s\n",
                   st.docs, bytes, sh.total, sh.written[0], sh.shards[0], sh.written[1], sh.shards[1], now() - t0);
        free(sh.buf);
    }
    tokenizer_free(tok);
    return 0;
}
