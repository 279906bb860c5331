/*
 * GPT-2 byte-level BPE tokenizer. See tokenizer.h for the contract.
 *
 * Tables (all built once by tokenizer_load, read-only afterwards):
 *   tok_bytes/tok_off  the bytes of every id, concatenated in id order
 *   vslot              open-addressing hash: token bytes -> id (the special token excluded);
 *                      a slot keeps a token's first 8 bytes, so most probes touch one line
 *   pslot              open-addressing hash: (left id, right id) -> (rank, merged id) for
 *                      every way of writing a mergeable token as the concatenation of two
 *                      tokens. Looking pairs up this way is exactly tiktoken's rule (the
 *                      rank of the concatenated bytes), with integer keys.
 * Pre-tokenisation: ascii_match() decides the pattern's match itself when only ASCII bytes
 * are involved (most of English text and code) and hands over to PCRE2 whenever a byte
 * >= 0x80 could matter; both give the same pieces (tested against tiktoken).
 *
 * Scratch (mutable during encode): the PCRE2 match data, BPE work arrays, a small
 * direct-mapped cache of the ids of recent pieces (it stays in the CPU caches, where the
 * 2 MB vocabulary table would not), the output batch.
 */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include "dataloader/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NO_RANK INT32_MAX
#define OBUF_CAP 65536
#define SMALL_BPE_MAX 96 /* pieces up to this many bytes use the O(n^2) array merge */

typedef struct {
    uint64_t lo;  /* the first 8 bytes of the token, zero padded */
    int32_t id;   /* -1 when free */
    uint32_t tag; /* hash bits << 8 | min(length, 255) */
} VocabSlot;

/* Token ids of recent pieces of up to 22 bytes (direct mapped). */
#define CACHE_SLOTS 4096
#define CACHE_MAX_BYTES 22
#define CACHE_MAX_TOKENS 8
typedef struct {
    uint64_t hash;
    uint8_t len, ntok; /* len 0 = free */
    unsigned char bytes[CACHE_MAX_BYTES];
    int32_t toks[CACHE_MAX_TOKENS];
} CacheSlot;

/* A pair slot is one uint64: (left << 48) | (right << 32) | (rank << 16) | merged id, with
 * ids and ranks below 65536 (tokenizer_load refuses larger vocabularies; llm.c's uint16
 * shards cannot hold them either). Ranks are renumbered densely in merge order. */
#define MAX_VOCAB 65536
#define EMPTY_KEY UINT64_MAX

struct Tokenizer {
    int n_vocab;
    int eot;
    int max_tok_len;
    uint32_t* tok_off; /* n_vocab + 1 */
    unsigned char* tok_bytes;
    int32_t byte_tok[256];

    uint32_t vmask;
    VocabSlot* vslot;

    uint32_t pmask;
    uint64_t* pslot;

    pcre2_code* re;
    pcre2_match_data* md;
    bool jit;
    uint8_t cls[256]; /* byte classes for ascii_match */

    /* BPE scratch: one allocation, carved into arrays; see ensure_scratch */
    void* scratch;
    size_t scratch_n; /* capacity in piece bytes */
    int32_t *s_ids, *s_rank, *s_mid, *s_prev, *s_next;
    uint64_t* s_heap;

    CacheSlot* cache;

    /* output batch */
    int32_t* obuf;
    size_t olen;
    TokenizerSink sink;
    void* sink_ctx;
    int stop; /* non-zero once the sink asked to stop or a failure happened */

    char errmsg[256];
};

/* ------------------------------------------------------------------------------------ */
/* helpers                                                                              */

static void set_err(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char* err, size_t errlen, const char* fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

/* The first min(n, 8) bytes of p as a little-endian word (zero padded), without reading
 * outside p[0..n). */
static inline uint64_t load_lo(const unsigned char* p, size_t n) {
    uint64_t w;
    if (n >= 8) {
        memcpy(&w, p, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        w = (uint64_t)a | ((uint64_t)b << (8 * (n - 4)));
    } else if (n > 0) {
        w = (uint64_t)p[0] | ((uint64_t)p[n / 2] << (8 * (n / 2))) | ((uint64_t)p[n - 1] << (8 * (n - 1)));
    } else {
        w = 0;
    }
    return w;
}

/* Hash of a byte string whose first 8 bytes (load_lo) are lo. */
static inline uint64_t hash_piece(const unsigned char* p, size_t n, uint64_t lo) {
    uint64_t h = mix64((lo ^ 0x9E3779B97F4A7C15ull) * 0xff51afd7ed558ccdull + n);
    for (size_t i = 8; i < n; i += 8) {
        uint64_t w;
        if (n - i >= 8) memcpy(&w, p + i, 8);
        else w = load_lo(p + i, n - i);
        h = mix64((h ^ w) * 0xc4ceb9fe1a85ec53ull);
    }
    return h;
}

static inline uint32_t slot_tag(uint64_t h, size_t n) { return (uint32_t)(h >> 40) << 8 | (uint32_t)(n < 255 ? n : 255); }


/* GPT-2's printable byte alphabet (bytes_to_unicode in encoder.py): printable Latin-1
 * bytes map to themselves, the other 68 bytes to U+0100.. in increasing byte order. */
static void byte_alphabet(int cp_to_byte[324]) {
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (printable) cp_to_byte[b] = b;
        else cp_to_byte[256 + n++] = b;
    }
}

/* Writes a short, printable rendering of bytes into out (for error messages). */
static const char* show(const unsigned char* p, size_t n, char* out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\') out[o++] = (char)p[i];
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", p[i]);
        if (i == 40 && n > 44) {
            o += (size_t)snprintf(out + o, cap - o, "...");
            break;
        }
    }
    out[o] = 0;
    return out;
}


/* Reads a whole file, with a NUL after its len bytes (load_encoder parses it with cJSON). On
 * failure writes "PATH: why" into err and returns NULL. */
static unsigned char* read_whole_file(const char* path, size_t* len, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: cannot read: %s", path, strerror(EISDIR));
        close(fd);
        return NULL;
    }
    size_t cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 1 << 16;
    size_t n = 0;
    unsigned char* buf = malloc(cap);
    if (!buf) {
        set_err(err, errlen, "%s: out of memory", path);
        close(fd);
        return NULL;
    }
    for (;;) {
        if (n == cap) {
            unsigned char* nb = realloc(buf, cap * 2);
            if (!nb) {
                set_err(err, errlen, "%s: out of memory", path);
                free(buf);
                close(fd);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            set_err(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return NULL;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0; /* n < cap: the loop grows buf before it can be full */
    *len = n;
    return buf;
}

/* Decodes one UTF-8 character at p (< end). Returns its length, or 0 if ill-formed. */
static int utf8_decode(const unsigned char* p, const unsigned char* end, uint32_t* cp) {
    unsigned char b = p[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int need;
    uint32_t c;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 2, c = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 3, c = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4, c = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else return 0;
    if (end - p < need) return 0;
    for (int i = 1; i < need; i++) {
        unsigned char x = p[i];
        if (x < lo || x > hi) return 0;
        lo = 0x80, hi = 0xBF;
        c = (c << 6) | (x & 0x3F);
    }
    *cp = c;
    return need;
}

/* Decodes p[0..n), a string written in GPT-2's byte alphabet (UTF-8), into the bytes it stands
 * for (n at most). Returns how many, -1 if it is not valid UTF-8, or -2 if a character (*bad)
 * is not in the alphabet. */
static long alphabet_decode(const unsigned char* p, size_t n, const int cp_to_byte[324], unsigned char* out,
                            uint32_t* bad) {
    long o = 0;
    for (const unsigned char* end = p + n; p < end; o++) {
        uint32_t cp;
        int k = utf8_decode(p, end, &cp);
        if (k == 0) return -1;
        if (cp >= 324 || cp_to_byte[cp] < 0) {
            *bad = cp;
            return -2;
        }
        out[o] = (unsigned char)cp_to_byte[cp];
        p += k;
    }
    return o;
}

static void line_col(const unsigned char* start, const unsigned char* at, int* line, int* col) {
    int l = 1, c = 1;
    for (const unsigned char* p = start; p < at; p++) {
        if (*p == '\n') l++, c = 1;
        else c++;
    }
    *line = l;
    *col = c;
}

/* ---- encoder.json: one JSON object, token -> id ----
 * Read with cJSON, like every other JSON file here but tokenize_text's JSON Lines: it reads
 * those on the path of every document, where cJSON made its reading thread 22% slower
 * (dev/bench/bench_jsonl_reader.sh), while encoder.json is read once per encoder. cJSON is
 * lenient where a vocabulary must not be: json_check_bytes first refuses what it would let
 * through unseen, and every key is then checked to be UTF-8 (cJSON does not check) in GPT-2's
 * byte alphabet (which also refuses a \t, \n or \r in a key), every id to be a whole number
 * in range. cJSON says where it stopped, not why: a parse error is reported as that line and
 * column. */

static inline bool json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool json_fail(const char* path, const unsigned char* text, const unsigned char* at, const char* why, char* err,
                      size_t errlen) {
    int line, col;
    line_col(text, at, &line, &col);
    set_err(err, errlen, "%s: malformed JSON at line %d, column %d%s%s", path, line, col, why[0] ? ": " : "", why);
    return false;
}

static int hex4(const unsigned char* p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

/* What cJSON accepts without a trace: control characters (JSON allows none in a string and
 * only \t \n \r between values; cJSON copies them into strings and skips them elsewhere as
 * white space), and a \u escape that is \u0000 or not four hex digits (cJSON reads both as
 * U+0000, which cuts the key it returns short at a NUL). */
static bool json_check_bytes(const char* path, const unsigned char* text, size_t len, char* err, size_t errlen) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = text[i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            char why[32];
            snprintf(why, sizeof why, "control character 0x%02x", c);
            return json_fail(path, text, text + i, why, err, errlen);
        }
        if (c != '\\') continue;
        if (len - i >= 6 && text[i + 1] == 'u') { /* one cut short is cJSON's to refuse */
            int v = hex4(text + i + 2);
            if (v < 0) return json_fail(path, text, text + i, "bad \\u escape", err, errlen);
            if (v == 0) {
                int line, col;
                line_col(text, text + i, &line, &col);
                set_err(err, errlen, "%s: line %d, column %d: character U+0000 is not in GPT-2's byte alphabet", path,
                        line, col);
                return false;
            }
        }
        i++; /* the escaped character: in \\u0000 the second backslash starts no escape */
    }
    return true;
}

typedef struct {
    uint32_t off, len;
    int32_t id;
} RawEntry;

/* ---- table building ---- */

static inline int32_t vocab_find_h(const Tokenizer* t, const unsigned char* p, size_t n, uint64_t lo, uint64_t h) {
    uint32_t tag = slot_tag(h, n);
    for (uint32_t i = (uint32_t)h & t->vmask;; i = (i + 1) & t->vmask) {
        const VocabSlot* v = &t->vslot[i];
        if (v->id < 0) return -1;
        if (v->tag == tag && v->lo == lo) {
            if (n <= 8) return v->id;
            uint32_t o = t->tok_off[v->id];
            if (t->tok_off[v->id + 1] - o == n && memcmp(t->tok_bytes + o + 8, p + 8, n - 8) == 0) return v->id;
        }
    }
}

static int32_t vocab_find(const Tokenizer* t, const unsigned char* p, size_t n) {
    uint64_t lo = load_lo(p, n);
    return vocab_find_h(t, p, n, lo, hash_piece(p, n, lo));
}

static inline uint32_t hash_pair(uint32_t key) { return (key * 0x9E3779B1u) ^ (key >> 15); }

static inline bool pair_find(const Tokenizer* t, int32_t a, int32_t b, int32_t* rank, int32_t* id) {
    uint32_t key = (uint32_t)a << 16 | (uint32_t)b;
    for (uint32_t h = hash_pair(key) & t->pmask;; h = (h + 1) & t->pmask) {
        uint64_t v = t->pslot[h];
        if ((uint32_t)(v >> 32) == key && v != EMPTY_KEY) {
            *rank = (int32_t)(v >> 16 & 0xFFFF);
            *id = (int32_t)(v & 0xFFFF);
            return true;
        }
        if (v == EMPTY_KEY) {
            *rank = NO_RANK;
            return false;
        }
    }
}

static void pair_insert(Tokenizer* t, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint32_t key = (uint32_t)a << 16 | (uint32_t)b;
    uint32_t h = hash_pair(key) & t->pmask;
    while (t->pslot[h] != EMPTY_KEY) h = (h + 1) & t->pmask;
    t->pslot[h] = (uint64_t)key << 32 | (uint64_t)rank << 16 | (uint64_t)id;
}

static bool load_encoder(Tokenizer* t, const char* path, const int cp_to_byte[324], char* err, size_t errlen) {
    size_t len;
    unsigned char* text = read_whole_file(path, &len, err, errlen);
    if (!text) return false;
    bool ok = false;
    cJSON* root = NULL;
    unsigned char* blob = NULL;
    RawEntry* ent = NULL;
    const unsigned char* end = text + len;
    const unsigned char* last = end; /* just after the last byte that is not white space */
    while (last > text && json_space(last[-1])) last--;
    if (last == text) {
        json_fail(path, text, end, len ? "no JSON value" : "empty file", err, errlen);
        goto done;
    }
    if (!json_check_bytes(path, text, len, err, errlen)) goto done;
    /* The length given includes the NUL after the text, the only one (json_check_bytes), so
     * that cJSON stops on it, at end, when it runs out of text. Where it stopped comes from
     * return_parse_end, not cJSON_GetErrorPtr: that is one global, and encoder threads load at
     * the same time. */
    const char* stop = NULL;
    root = cJSON_ParseWithLengthOpts((const char*)text, len + 1, &stop, false);
    const unsigned char* at = (const unsigned char*)stop;
    if (!root) {
        /* cJSON stops one byte past a string it cannot read: past its opening quote (so a
         * string that runs to the end of the text stops there), or past the byte that stands
         * where a key should ({"a": 0,} stops at end, past the '}'). A text that does not end
         * its object and stopped at its end, or in a string that runs to it, was cut short. */
        bool open_string = at > text && at[-1] == '"' && !memchr(at, '"', (size_t)(end - at));
        if (last[-1] != '}' && (at >= last || open_string))
            json_fail(path, text, end, "unexpected end of file (truncated?)", err, errlen);
        else
            json_fail(path, text, at < last ? at : last - 1, "", err, errlen);
        goto done;
    }
    if (at < last) {
        while (json_space(*at)) at++;
        json_fail(path, text, at, "unexpected data after the object", err, errlen);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "%s: expected '{' (encoder.json is one object: token -> id)", path);
        goto done;
    }
    size_t en = (size_t)cJSON_GetArraySize(root);
    if (en == 0) {
        set_err(err, errlen, "%s: no tokens", path);
        goto done;
    }
    if (en > MAX_VOCAB) {
        set_err(err, errlen, "%s: %zu tokens; at most %d are supported (uint16 token shards)", path, en, MAX_VOCAB);
        goto done;
    }
    blob = malloc(len); /* no key decodes to more bytes than its JSON */
    ent = malloc(en * sizeof *ent);
    if (!blob || !ent) {
        set_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    size_t bn = 0;
    RawEntry* e = ent;
    for (const cJSON* it = root->child; it; it = it->next, e++) {
        const unsigned char* key = (const unsigned char*)it->string;
        size_t n = strlen(it->string); /* no NUL inside: json_check_bytes */
        char s1[200];
        uint32_t bad;
        long kn = alphabet_decode(key, n, cp_to_byte, blob + bn, &bad);
        if (kn == -1) {
            set_err(err, errlen, "%s: token \"%s\" is not valid UTF-8", path, show(key, n, s1, sizeof s1));
            goto done;
        }
        if (kn == -2) {
            set_err(err, errlen, "%s: token \"%s\": character U+%04X is not in GPT-2's byte alphabet", path,
                    show(key, n, s1, sizeof s1), (unsigned)bad);
            goto done;
        }
        double v = it->valuedouble;
        if (!cJSON_IsNumber(it) || !(v >= 0) || v != floor(v)) {
            set_err(err, errlen, "%s: token \"%s\": id is not a non-negative integer", path, show(key, n, s1, sizeof s1));
            goto done;
        }
        if (v >= (double)en) { /* ids are exactly 0..en-1: this, and no id twice (below) */
            set_err(err, errlen, "%s: token \"%s\": id %.15g is too large (ids are 0..%zu, one per token)", path,
                    show(key, n, s1, sizeof s1), v, en - 1);
            goto done;
        }
        *e = (RawEntry){(uint32_t)bn, (uint32_t)kn, (int32_t)v};
        bn += (size_t)kn;
    }
    cJSON_Delete(root);
    root = NULL;
    if (bn > UINT32_MAX / 2) {
        set_err(err, errlen, "%s: %zu bytes of tokens; at most %u are supported", path, bn, UINT32_MAX / 2);
        goto done;
    }

    t->n_vocab = (int)en;
    t->tok_off = malloc((en + 1) * sizeof *t->tok_off);
    t->tok_bytes = malloc(bn ? bn : 1);
    int32_t* by_id = malloc(en * sizeof *by_id);
    if (!t->tok_off || !t->tok_bytes || !by_id) {
        free(by_id);
        set_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (size_t i = 0; i < en; i++) by_id[i] = -1;
    for (size_t i = 0; i < en; i++) {
        char s1[200], s2[200];
        if (by_id[ent[i].id] >= 0) {
            RawEntry* o = &ent[by_id[ent[i].id]];
            set_err(err, errlen, "%s: id %d is used twice (\"%s\" and \"%s\")", path, ent[i].id,
                    show(blob + o->off, o->len, s1, sizeof s1), show(blob + ent[i].off, ent[i].len, s2, sizeof s2));
            free(by_id);
            goto done;
        }
        by_id[ent[i].id] = (int32_t)i;
    }
    uint32_t o = 0;
    t->max_tok_len = 0;
    for (size_t id = 0; id < en; id++) {
        RawEntry* e = &ent[by_id[id]];
        t->tok_off[id] = o;
        memcpy(t->tok_bytes + o, blob + e->off, e->len);
        o += e->len;
        if ((int)e->len > t->max_tok_len) t->max_tok_len = (int)e->len;
    }
    t->tok_off[en] = o;
    free(by_id);

    /* bytes -> id, without the special token */
    static const char EOT_STR[] = "<|endoftext|>";
    t->eot = -1;
    uint32_t vcap = 1024;
    while (vcap < 2 * en) vcap *= 2;
    t->vmask = vcap - 1;
    t->vslot = malloc(vcap * sizeof *t->vslot);
    if (!t->vslot) {
        set_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (uint32_t i = 0; i < vcap; i++) t->vslot[i].id = -1;
    for (size_t id = 0; id < en; id++) {
        const unsigned char* p = t->tok_bytes + t->tok_off[id];
        size_t n = t->tok_off[id + 1] - t->tok_off[id];
        char s1[200];
        if (n == 0) {
            set_err(err, errlen, "%s: token id %zu is the empty string", path, id);
            goto done;
        }
        if (n == sizeof EOT_STR - 1 && memcmp(p, EOT_STR, n) == 0) {
            t->eot = (int)id;
            continue;
        }
        if (vocab_find(t, p, n) >= 0) {
            set_err(err, errlen, "%s: token \"%s\" appears twice", path, show(p, n, s1, sizeof s1));
            goto done;
        }
        uint64_t lo = load_lo(p, n), hh = hash_piece(p, n, lo);
        uint32_t h = (uint32_t)hh & t->vmask;
        while (t->vslot[h].id >= 0) h = (h + 1) & t->vmask;
        t->vslot[h].lo = lo;
        t->vslot[h].id = (int32_t)id;
        t->vslot[h].tag = slot_tag(hh, n);
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_tok[b] = vocab_find(t, &c, 1);
        if (t->byte_tok[b] < 0) {
            set_err(err, errlen, "%s: no token for the byte 0x%02x (all 256 bytes are needed)", path, b);
            goto done;
        }
    }
    ok = true;
done:
    cJSON_Delete(root);
    free(text);
    free(blob);
    free(ent);
    return ok;
}

static bool load_merges(Tokenizer* t, const char* path, const int cp_to_byte[324], char* err, size_t errlen) {
    size_t len;
    unsigned char* text = read_whole_file(path, &len, err, errlen);
    if (!text) return false;
    bool ok = false;
    int32_t* rank_of = malloc((size_t)t->n_vocab * sizeof *rank_of);
    unsigned char* sym = malloc(len + 1);
    if (!rank_of || !sym) {
        set_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < t->n_vocab; i++) rank_of[i] = NO_RANK;

    const unsigned char* p = text;
    const unsigned char* end = text + len;
    int lineno = 0;
    int32_t rank = 0;
    size_t nmerges = 0;
    while (p < end) {
        const unsigned char* nl = memchr(p, '\n', (size_t)(end - p));
        const unsigned char* le = nl ? nl : end;
        const unsigned char* line = p;
        p = nl ? nl + 1 : end;
        lineno++;
        if (le > line && le[-1] == '\r') le--;
        if (lineno == 1 && le - line >= 1 && line[0] == '#') continue; /* "#version: 0.2" */
        if (le == line) {
            if (p == end) break; /* final newline */
            set_err(err, errlen, "%s: line %d: empty line", path, lineno);
            goto done;
        }
        const unsigned char* sp = memchr(line, ' ', (size_t)(le - line));
        if (!sp || sp == line || sp + 1 == le || memchr(sp + 1, ' ', (size_t)(le - sp - 1))) {
            set_err(err, errlen, "%s: line %d: expected two symbols separated by one space", path, lineno);
            goto done;
        }
        uint32_t bad;
        long na = alphabet_decode(line, (size_t)(sp - line), cp_to_byte, sym, &bad);
        long nb = na < 0 ? -1 : alphabet_decode(sp + 1, (size_t)(le - sp - 1), cp_to_byte, sym + na, &bad);
        if (na < 0 || nb < 0) {
            set_err(err, errlen, "%s: line %d: symbol is not valid UTF-8 in GPT-2's byte alphabet", path, lineno);
            goto done;
        }
        char s1[200];
        int32_t a = vocab_find(t, sym, na), b = vocab_find(t, sym + na, nb), ab = vocab_find(t, sym, na + nb);
        if (a < 0 || b < 0 || ab < 0) {
            const unsigned char* q = a < 0 ? sym : b < 0 ? sym + na : sym;
            size_t qn = a < 0 ? na : b < 0 ? nb : na + nb;
            set_err(err, errlen, "%s: line %d: %s \"%s\" is not in the encoder", path, lineno,
                    ab >= 0 || a < 0 || b < 0 ? "symbol" : "merged symbol", show(q, qn, s1, sizeof s1));
            goto done;
        }
        if (rank_of[ab] == NO_RANK) rank_of[ab] = rank;
        rank++;
        nmerges++;
        if (rank == NO_RANK) {
            set_err(err, errlen, "%s: too many merges", path);
            goto done;
        }
    }
    if (nmerges == 0) {
        set_err(err, errlen, "%s: no merges", path);
        goto done;
    }

    /* Dense ranks in merge order, then every split of every mergeable token into two
     * tokens -> (rank, token). */
    int32_t* by_rank = malloc((size_t)rank * sizeof *by_rank);
    if (!by_rank) {
        set_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (int32_t r = 0; r < rank; r++) by_rank[r] = -1;
    for (int id = 0; id < t->n_vocab; id++)
        if (rank_of[id] != NO_RANK) by_rank[rank_of[id]] = id;
    int32_t dense = 0;
    size_t bound = 0;
    for (int32_t r = 0; r < rank; r++) {
        if (by_rank[r] < 0) continue;
        rank_of[by_rank[r]] = dense++;
        bound += t->tok_off[by_rank[r] + 1] - t->tok_off[by_rank[r]] - 1;
    }
    free(by_rank);
    uint64_t pcap = 1024;
    while (pcap < 2 * bound) pcap *= 2;
    t->pmask = (uint32_t)(pcap - 1);
    t->pslot = malloc(pcap * sizeof *t->pslot);
    if (!t->pslot) {
        set_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (uint64_t i = 0; i < pcap; i++) t->pslot[i] = EMPTY_KEY;
    for (int id = 0; id < t->n_vocab; id++) {
        if (rank_of[id] == NO_RANK) continue;
        const unsigned char* q = t->tok_bytes + t->tok_off[id];
        size_t n = t->tok_off[id + 1] - t->tok_off[id];
        for (size_t k = 1; k < n; k++) {
            int32_t a = vocab_find(t, q, k), b;
            if (a >= 0 && (b = vocab_find(t, q + k, n - k)) >= 0) pair_insert(t, a, b, rank_of[id], id);
        }
    }
    ok = true;
done:
    free(text);
    free(rank_of);
    free(sym);
    return ok;
}

/* ASCII fast path of the pattern. Byte classes: */
enum { C_OTHER, C_LETTER, C_DIGIT, C_SPACE, C_HIGH };

static void init_classes(uint8_t cls[256]) {
    for (int c = 0; c < 256; c++) {
        if (c >= 0x80) cls[c] = C_HIGH;
        else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cls[c] = C_LETTER;
        else if (c >= '0' && c <= '9') cls[c] = C_DIGIT;
        else if (c == ' ' || (c >= '\t' && c <= '\r')) cls[c] = C_SPACE; /* \t \n \v \f \r */
        else cls[c] = C_OTHER;
    }
}

/* GPT-2's pattern with \s spelled out as Unicode White_Space (what tiktoken's regex uses). */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char GPT2_PATTERN[] =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

static bool compile_pattern(Tokenizer* t, char* err, size_t errlen) {
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        set_err(err, errlen, "tokenizer: PCRE2 cannot compile GPT-2's pattern at offset %zu: %s", (size_t)eo, (char*)msg);
        return false;
    }
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    init_classes(t->cls);
    t->md = pcre2_match_data_create(1, NULL);
    if (!t->md) {
        set_err(err, errlen, "tokenizer: out of memory");
        return false;
    }
    return true;
}

Tokenizer* tokenizer_load(const char* encoder_json, const char* vocab_bpe, char* err, size_t errlen) {
    set_err(err, errlen, "%s", "");
    if (!encoder_json || !vocab_bpe) {
        set_err(err, errlen, "tokenizer: no %s path given", !encoder_json ? "encoder.json" : "vocab.bpe");
        return NULL;
    }
    Tokenizer* t = calloc(1, sizeof *t);
    if (!t) {
        set_err(err, errlen, "tokenizer: out of memory");
        return NULL;
    }
    int cp_to_byte[324];
    byte_alphabet(cp_to_byte);
    if (!load_encoder(t, encoder_json, cp_to_byte, err, errlen) || !load_merges(t, vocab_bpe, cp_to_byte, err, errlen) ||
        !compile_pattern(t, err, errlen)) {
        tokenizer_free(t);
        return NULL;
    }
    t->obuf = malloc(OBUF_CAP * sizeof *t->obuf);
    t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
    if (!t->obuf || !t->cache) {
        set_err(err, errlen, "tokenizer: out of memory");
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

void tokenizer_free(Tokenizer* t) {
    if (!t) return;
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->vslot);
    free(t->pslot);
    if (t->md) pcre2_match_data_free(t->md);
    if (t->re) pcre2_code_free(t->re);
    free(t->scratch);
    free(t->obuf);
    free(t->cache);
    free(t);
}

int tokenizer_vocab_size(const Tokenizer* t) { return t->n_vocab; }
int tokenizer_eot(const Tokenizer* t) { return t->eot; }
int tokenizer_max_token_bytes(const Tokenizer* t) { return t->max_tok_len; }
const char* tokenizer_error(const Tokenizer* t) { return t->errmsg; }

void token_vec_free(TokenVec* v) {
    free(v->ids);
    v->ids = NULL;
    v->len = v->cap = 0;
}

/* ------------------------------------------------------------------------------------ */
/* encode                                                                               */

static void flush_out(Tokenizer* t) {
    if (t->olen && !t->stop) {
        int rc = t->sink(t->sink_ctx, t->obuf, t->olen);
        if (rc) t->stop = rc;
    }
    t->olen = 0;
}

static inline void emit(Tokenizer* t, int32_t id) {
    t->obuf[t->olen++] = id;
    if (t->olen == OBUF_CAP) flush_out(t);
}

static bool ensure_scratch(Tokenizer* t, size_t n) {
    if (n <= t->scratch_n) return true;
    size_t cap = n < 256 ? 256 : n;
    /* ids, rank, mid, prev, next: 5 x int32; heap: 3 x uint64 (n initial pairs + 2 per merge) */
    size_t bytes = cap * (5 * sizeof(int32_t) + 3 * sizeof(uint64_t));
    void* s = malloc(bytes);
    if (!s) {
        snprintf(t->errmsg, sizeof t->errmsg, "tokenizer: out of memory (piece of %zu bytes)", n);
        t->stop = -1;
        return false;
    }
    free(t->scratch);
    t->scratch = s;
    t->scratch_n = cap;
    t->s_heap = (uint64_t*)s;
    t->s_ids = (int32_t*)(t->s_heap + 3 * cap);
    t->s_rank = t->s_ids + cap;
    t->s_mid = t->s_rank + cap;
    t->s_prev = t->s_mid + cap;
    t->s_next = t->s_prev + cap;
    return true;
}

/* tiktoken's merge loop: lowest rank first, leftmost among equals. Leaves the result in
 * s_ids and returns its length. */
static int bpe_small(Tokenizer* t, const unsigned char* p, int n) {
    int32_t *ids = t->s_ids, *rank = t->s_rank, *mid = t->s_mid;
    for (int i = 0; i < n; i++) ids[i] = t->byte_tok[p[i]];
    for (int i = 0; i + 1 < n; i++) pair_find(t, ids[i], ids[i + 1], &rank[i], &mid[i]);
    int m = n;
    for (;;) {
        int best = -1;
        int32_t br = NO_RANK;
        for (int i = 0; i + 1 < m; i++)
            if (rank[i] < br) br = rank[i], best = i;
        if (best < 0) break;
        ids[best] = mid[best];
        int tail = m - best - 2;
        memmove(&ids[best + 1], &ids[best + 2], (size_t)tail * sizeof *ids);
        if (tail > 0) {
            memmove(&rank[best + 1], &rank[best + 2], (size_t)(tail - 1) * sizeof *rank);
            memmove(&mid[best + 1], &mid[best + 2], (size_t)(tail - 1) * sizeof *mid);
        }
        m--;
        if (best + 1 < m) pair_find(t, ids[best], ids[best + 1], &rank[best], &mid[best]);
        if (best > 0) pair_find(t, ids[best - 1], ids[best], &rank[best - 1], &mid[best - 1]);
    }
    return m;
}

/* Same result for long pieces in O(n log n): a linked list of parts and a binary heap of
 * (rank, position) entries, stale entries skipped when popped. */
static inline void heap_push(uint64_t* h, size_t* n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (h[par] <= v) break;
        h[i] = h[par];
        i = par;
    }
    h[i] = v;
}

static inline uint64_t heap_pop(uint64_t* h, size_t* n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

static void bpe_large(Tokenizer* t, const unsigned char* p, size_t n) {
    int32_t *ids = t->s_ids, *prv = t->s_prev, *nxt = t->s_next;
    uint64_t* heap = t->s_heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        ids[i] = t->byte_tok[p[i]];
        prv[i] = (int32_t)i - 1;
        nxt[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    }
    int32_t r, m;
    for (size_t i = 0; i + 1 < n; i++)
        if (pair_find(t, ids[i], ids[i + 1], &r, &m)) heap_push(heap, &hn, ((uint64_t)r << 32) | i);
    while (hn) {
        uint64_t e = heap_pop(heap, &hn);
        int32_t pos = (int32_t)(uint32_t)e, er = (int32_t)(e >> 32);
        int32_t q = nxt[pos];
        if (ids[pos] < 0 || q < 0) continue;
        if (!pair_find(t, ids[pos], ids[q], &r, &m) || r != er) continue;
        ids[pos] = m;
        ids[q] = -1;
        nxt[pos] = nxt[q];
        if (nxt[q] >= 0) prv[nxt[q]] = pos;
        if (nxt[pos] >= 0 && pair_find(t, ids[pos], ids[nxt[pos]], &r, &m)) heap_push(heap, &hn, ((uint64_t)r << 32) | (uint32_t)pos);
        if (prv[pos] >= 0 && pair_find(t, ids[prv[pos]], ids[pos], &r, &m))
            heap_push(heap, &hn, ((uint64_t)r << 32) | (uint32_t)prv[pos]);
    }
    for (int32_t i = 0; i >= 0; i = nxt[i]) emit(t, ids[i]);
}

static void encode_piece(Tokenizer* t, const unsigned char* p, size_t n) {
    if (n == 1) {
        emit(t, t->byte_tok[p[0]]);
        return;
    }
    uint64_t lo = load_lo(p, n), h = hash_piece(p, n, lo);
    CacheSlot* c = NULL;
    if (n <= CACHE_MAX_BYTES) { /* recent pieces: a small table that stays in cache */
        c = &t->cache[(h >> 20) & (CACHE_SLOTS - 1)];
        if (c->hash == h && c->len == n && memcmp(c->bytes, p, n) == 0) {
            for (int i = 0; i < c->ntok; i++) emit(t, c->toks[i]);
            return;
        }
    }
    int32_t id = vocab_find_h(t, p, n, lo, h);
    if (id >= 0) {
        emit(t, id);
        if (c) {
            c->hash = h;
            c->len = (uint8_t)n;
            c->ntok = 1;
            memcpy(c->bytes, p, n);
            c->toks[0] = id;
        }
        return;
    }
    if (n > (size_t)INT32_MAX - 1) {
        snprintf(t->errmsg, sizeof t->errmsg, "tokenizer: piece of %zu bytes is too long", n);
        t->stop = -1;
        return;
    }
    if (!ensure_scratch(t, n)) return;
    if (n <= SMALL_BPE_MAX) {
        int m = bpe_small(t, p, (int)n);
        const int32_t* ids = t->s_ids;
        for (int i = 0; i < m; i++) emit(t, ids[i]);
        if (c && m <= CACHE_MAX_TOKENS) {
            c->hash = h;
            c->len = (uint8_t)n;
            c->ntok = (uint8_t)m;
            memcpy(c->bytes, p, n);
            memcpy(c->toks, ids, (size_t)m * sizeof *ids);
        }
    } else {
        bpe_large(t, p, n);
    }
    if (t->scratch_n > (1u << 20)) { /* do not keep a huge piece's scratch around */
        free(t->scratch);
        t->scratch = NULL;
        t->scratch_n = 0;
    }
}

/* The end of the pattern's match at s[i] when ASCII bytes alone decide it, else 0 (a byte
 * >= 0x80 could extend or change the match; PCRE2 decides those). The same alternatives
 * in the same order:  'x contractions,  ?letters,  ?digits,  ?others,  spaces (all but
 * the last when a non-space follows, as \s+(?!\S) does). */
static inline size_t ascii_match(const uint8_t* cls, const unsigned char* s, size_t n, size_t i) {
    const size_t start = i;
    unsigned char c = s[i];
    int k = cls[c];
    if (c == '\'' && i + 1 < n) {
        unsigned char d = s[i + 1];
        if (d == 's' || d == 't' || d == 'd' || d == 'm') return i + 2;
        if (i + 2 < n) {
            unsigned char e = s[i + 2];
            if ((d == 'l' && e == 'l') || (d == 'v' && e == 'e') || (d == 'r' && e == 'e')) return i + 3;
        }
    }
    if (c == ' ' && i + 1 < n && cls[s[i + 1]] != C_SPACE) { /* " ?X+" takes the space */
        k = cls[s[i + 1]];
        i++;
    }
    if (k == C_HIGH) return 0;
    size_t j = i + 1;
    if (k != C_SPACE) {
        while (j < n && cls[s[j]] == k) j++;
        return j < n && cls[s[j]] == C_HIGH ? 0 : j;
    }
    while (j < n && cls[s[j]] == C_SPACE) j++;
    if (j == n) return n;
    if (cls[s[j]] == C_HIGH) return 0; /* could be more whitespace */
    return j - start >= 2 ? j - 1 : j;
}

static void encode_ordinary(Tokenizer* t, const unsigned char* s, size_t n) {
    size_t pos = 0;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(t->md);
    while (pos < n && !t->stop) {
        size_t e = ascii_match(t->cls, s, n, pos);
        if (e) {
            encode_piece(t, s + pos, e - pos);
            pos = e;
            continue;
        }
        int rc = t->jit ? pcre2_jit_match(t->re, s, n, pos, 0, t->md, NULL) : pcre2_match(t->re, s, n, pos, 0, t->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) {
            encode_piece(t, s + pos, n - pos); /* trailing invalid UTF-8 */
            return;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            snprintf(t->errmsg, sizeof t->errmsg, "tokenizer: PCRE2 match failed at byte %zu: %s", pos, (char*)msg);
            t->stop = -1;
            return;
        }
        size_t ms = ov[0], me = ov[1];
        if (ms > pos) encode_piece(t, s + pos, ms - pos); /* invalid UTF-8 the pattern skipped */
        encode_piece(t, s + ms, me - ms);
        pos = me;
    }
}

int tokenizer_encode_stream(Tokenizer* t, const void* text, size_t len, int flags, TokenizerSink sink, void* ctx) {
    const unsigned char* s = text;
    t->errmsg[0] = 0;
    t->sink = sink;
    t->sink_ctx = ctx;
    t->stop = 0;
    t->olen = 0;
    static const char EOT_STR[] = "<|endoftext|>";
    const size_t eot_len = sizeof EOT_STR - 1;
    if ((flags & TOKENIZER_ALLOW_SPECIAL) && t->eot >= 0) {
        size_t pos = 0;
        while (pos < len && !t->stop) {
            const unsigned char* hit = memmem(s + pos, len - pos, EOT_STR, eot_len);
            size_t end = hit ? (size_t)(hit - s) : len;
            encode_ordinary(t, s + pos, end - pos);
            if (!hit) break;
            emit(t, t->eot);
            pos = end + eot_len;
        }
    } else {
        encode_ordinary(t, s, len);
    }
    flush_out(t);
    return t->stop;
}

static int vec_sink(void* ctx, const int32_t* ids, size_t n) {
    TokenVec* v = ctx;
    if (v->len + n > v->cap) {
        size_t cap = v->cap ? v->cap : 1024;
        while (cap < v->len + n) cap *= 2;
        int32_t* ni = realloc(v->ids, cap * sizeof *ni);
        if (!ni) return -2;
        v->ids = ni;
        v->cap = cap;
    }
    memcpy(v->ids + v->len, ids, n * sizeof *ids);
    v->len += n;
    return 0;
}

int tokenizer_encode(Tokenizer* t, const void* text, size_t len, int flags, TokenVec* out) {
    int rc = tokenizer_encode_stream(t, text, len, flags, vec_sink, out);
    if (rc == -2) snprintf(t->errmsg, sizeof t->errmsg, "tokenizer: out of memory (%zu ids)", out->len);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* decode                                                                               */

const unsigned char* tokenizer_decode(const Tokenizer* t, int id, size_t* len) {
    if (id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

int tokenizer_decode_append(const Tokenizer* t, const int32_t* ids, size_t n, unsigned char** buf, size_t* len,
                            size_t* cap) {
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const unsigned char* p = tokenizer_decode(t, ids[i], &k);
        if (!p) {
            rc = -1;
            continue;
        }
        if (*len + k > *cap) {
            size_t nc = *cap ? *cap : 256;
            while (nc < *len + k) nc *= 2;
            unsigned char* nb = realloc(*buf, nc);
            if (!nb) return -1;
            *buf = nb;
            *cap = nc;
        }
        memcpy(*buf + *len, p, k);
        *len += k;
    }
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* safe UTF-8 output                                                                    */

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

void tokenizer_utf8_init(TokenizerUtf8* s) { memset(s, 0, sizeof *s); }

size_t tokenizer_utf8_sanitize(TokenizerUtf8* s, const void* in_, size_t n, char* out) {
    const unsigned char* in = in_;
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned char b = in[i];
        if (s->npending) {
            unsigned char lo = 0x80, hi = 0xBF;
            if (s->npending == 1) {
                unsigned char lead = s->pending[0];
                if (lead == 0xE0) lo = 0xA0;
                else if (lead == 0xED) hi = 0x9F;
                else if (lead == 0xF0) lo = 0x90;
                else if (lead == 0xF4) hi = 0x8F;
            }
            if (b < lo || b > hi) { /* cut short: one U+FFFD, then look at b afresh */
                memcpy(out + o, REPLACEMENT, 3);
                o += 3;
                s->npending = 0;
                continue;
            }
            s->pending[s->npending++] = b;
            i++;
            if (s->npending == s->need) {
                if (s->need == 2 && s->pending[0] == 0xC2 && s->pending[1] < 0xA0) { /* C1 control */
                    memcpy(out + o, REPLACEMENT, 3);
                    o += 3;
                } else {
                    memcpy(out + o, s->pending, (size_t)s->need);
                    o += (size_t)s->need;
                }
                s->npending = 0;
            }
            continue;
        }
        if (b < 0x80) {
            if ((b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7F) {
                memcpy(out + o, REPLACEMENT, 3);
                o += 3;
            } else {
                out[o++] = (char)b;
            }
            i++;
            continue;
        }
        int need = (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
        i++;
        if (!need) {
            memcpy(out + o, REPLACEMENT, 3);
            o += 3;
            continue;
        }
        s->pending[0] = b;
        s->npending = 1;
        s->need = need;
    }
    return o;
}

size_t tokenizer_utf8_finish(TokenizerUtf8* s, char* out) {
    size_t o = 0;
    if (s->npending) {
        memcpy(out, REPLACEMENT, 3);
        o = 3;
    }
    tokenizer_utf8_init(s);
    return o;
}

int tokenizer_print_token(const Tokenizer* t, TokenizerUtf8* s, int id, FILE* f) {
    char out[TOKENIZER_UTF8_BOUND(256)];
    size_t len;
    const unsigned char* p = tokenizer_decode(t, id, &len);
    if (!p) {
        /* a held-back sequence is cut short by this, too */
        size_t o = tokenizer_utf8_finish(s, out);
        memcpy(out + o, REPLACEMENT, 3);
        fwrite(out, 1, o + 3, f);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < len; i += 256) {
        size_t k = len - i < 256 ? len - i : 256;
        size_t o = tokenizer_utf8_sanitize(s, p + i, k, out);
        if (o && fwrite(out, 1, o, f) != o) rc = -1;
    }
    return rc;
}

int tokenizer_print_flush(TokenizerUtf8* s, FILE* f) {
    char out[4];
    size_t o = tokenizer_utf8_finish(s, out);
    int rc = 0;
    if (o && fwrite(out, 1, o, f) != o) rc = -1;
    if (fflush(f) != 0) rc = -1;
    return rc;
}
