/*
 * Unit tests of the tokenizer's C API (dataloader/tokenizer.h): load errors, encode flags,
 * the streaming sink, decode, and the UTF-8 sanitiser used for printing samples.
 *
 *   build/test_tokenizer GPT2_DIR TMP_DIR
 *
 * Prints `ok - name` / `not ok - name: why` lines; exits 0 (failures are in the lines).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataloader/tokenizer.h"

static int failures;

static void check(bool good, const char* name, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(bool good, const char* name, const char* fmt, ...) {
    if (good) {
        printf("ok - %s\n", name);
        return;
    }
    failures++;
    printf("not ok - %s: ", name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

static bool ids_equal(const TokenVec* v, const int32_t* want, size_t n) {
    return v->len == n && memcmp(v->ids, want, n * sizeof *want) == 0;
}

static void encode_case(Tokenizer* t, const char* name, const char* text, int flags, const int32_t* want, size_t n) {
    TokenVec v = {0};
    int rc = tokenizer_encode(t, text, strlen(text), flags, &v);
    char got[512] = "";
    size_t o = 0;
    for (size_t i = 0; i < v.len && o < sizeof got - 16; i++) o += (size_t)snprintf(got + o, sizeof got - o, "%d ", v.ids[i]);
    check(rc == 0 && ids_equal(&v, want, n), name, "rc %d, got [%s]", rc, got);
    token_vec_free(&v);
}

static char* write_file(const char* dir, const char* name, const char* data) {
    static char path[8][1024];
    static int k;
    char* p = path[k++ % 8];
    snprintf(p, 1024, "%s/%s", dir, name);
    FILE* f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(data, f);
    fclose(f);
    return p;
}

static void load_error_case(const char* name, const char* enc, const char* voc, const char* want) {
    char err[512];
    Tokenizer* t = tokenizer_load(enc, voc, err, sizeof err);
    check(!t && strstr(err, want) && !strchr(err, '\n'), name, "got \"%s\", want it to contain \"%s\"", t ? "(loaded)" : err, want);
    tokenizer_free(t);
}

static int stop_sink(void* ctx, const int32_t* ids, size_t n) {
    size_t* seen = ctx;
    *seen += n;
    return 7;
}

/* sanitise in pieces (split at every byte boundary in turn), then finish */
static size_t sanitize_split(const char* in, size_t n, size_t cut, char* out) {
    TokenizerUtf8 s;
    tokenizer_utf8_init(&s);
    size_t o = tokenizer_utf8_sanitize(&s, in, cut, out);
    o += tokenizer_utf8_sanitize(&s, in + cut, n - cut, out + o);
    o += tokenizer_utf8_finish(&s, out + o);
    return o;
}

static void utf8_case(const char* name, const char* in, size_t n, const char* want) {
    char out[TOKENIZER_UTF8_BOUND(64)];
    size_t wn = strlen(want);
    for (size_t cut = 0; cut <= n; cut++) {
        size_t o = sanitize_split(in, n, cut, out);
        if (o != wn || memcmp(out, want, wn) != 0) {
            check(false, name, "split at %zu gives %zu bytes, want %zu", cut, o, wn);
            return;
        }
    }
    check(true, name, "%s", "");
}

#define FFFD "\xEF\xBF\xBD"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s GPT2_DIR TMP_DIR\n", argv[0]);
        return 2;
    }
    char enc[1024], voc[1024], err[512];
    snprintf(enc, sizeof enc, "%s/encoder.json", argv[1]);
    snprintf(voc, sizeof voc, "%s/vocab.bpe", argv[1]);
    const char* tmp = argv[2];

    Tokenizer* t = tokenizer_load(enc, voc, err, sizeof err);
    check(t != NULL, "C API: tokenizer_load of GPT-2's files", "%s", err);
    if (!t) {
        printf("not ok - C API: remaining tests: no tokenizer\n");
        return 0;
    }
    check(tokenizer_vocab_size(t) == 50257 && tokenizer_eot(t) == 50256, "C API: vocab size 50257, EOT 50256",
          "%d, %d", tokenizer_vocab_size(t), tokenizer_eot(t));

    encode_case(t, "C API: encode \"Hello world\"", "Hello world", 0, (const int32_t[]){15496, 995}, 2);
    encode_case(t, "C API: encode empty text", "", 0, NULL, 0);
    encode_case(t, "C API: <|endoftext|> is plain text by default", "<|endoftext|>", 0,
                (const int32_t[]){27, 91, 437, 1659, 5239, 91, 29}, 7);
    encode_case(t, "C API: TOKENIZER_ALLOW_SPECIAL gives 50256", "a<|endoftext|><|endoftext|>b", TOKENIZER_ALLOW_SPECIAL,
                (const int32_t[]){64, 50256, 50256, 65}, 4);

    /* streaming: batches in order, a non-zero sink return stops and is returned */
    size_t big = 300000;
    char* text = malloc(big + 1);
    for (size_t i = 0; i < big; i++) text[i] = "ab cd\n"[i % 6];
    text[big] = 0;
    TokenVec all = {0};
    tokenizer_encode(t, text, big, 0, &all);
    size_t seen = 0;
    int rc = tokenizer_encode_stream(t, text, big, 0, stop_sink, &seen);
    check(rc == 7 && seen == 65536 && all.len > 65536, "C API: encode_stream stops when the sink says so",
          "rc %d after %zu of %zu ids", rc, seen, all.len);

    /* the tokenizer is reusable after a stop */
    TokenVec again = {0};
    tokenizer_encode(t, text, big, 0, &again);
    check(again.len == all.len && memcmp(again.ids, all.ids, all.len * 4) == 0, "C API: encode after a stopped stream", "%zu vs %zu ids",
          again.len, all.len);
    token_vec_free(&again);

    /* decode */
    size_t n;
    const unsigned char* p = tokenizer_decode(t, 15496, &n);
    check(p && n == 5 && memcmp(p, "Hello", 5) == 0, "C API: decode one token", "%zu bytes", n);
    check(!tokenizer_decode(t, -1, &n) && !tokenizer_decode(t, 50257, &n), "C API: decode refuses ids outside the vocabulary", "%s", "");
    unsigned char* buf = NULL;
    size_t len = 0, cap = 0;
    rc = tokenizer_decode_append(t, all.ids, all.len, &buf, &len, &cap);
    check(rc == 0 && len == big && memcmp(buf, text, big) == 0, "C API: decode_append(encode(x)) == x", "rc %d, %zu bytes", rc, len);
    free(buf);
    token_vec_free(&all);
    free(text);

    /* two tokenizers in two threads give the same ids as one */
    {
        const char* s = "Multi-threaded use: one Tokenizer per thread, \xe4\xb8\xad\xe6\x96\x87 and emoji \xf0\x9f\x98\x80!";
        TokenVec ref = {0};
        tokenizer_encode(t, s, strlen(s), 0, &ref);
        int bad = 0;
#pragma omp parallel num_threads(2) reduction(+ : bad)
        {
            char e2[256];
            Tokenizer* mine = tokenizer_load(enc, voc, e2, sizeof e2);
            if (!mine) bad++;
            else {
                for (int r = 0; r < 200; r++) {
                    TokenVec v = {0};
                    if (tokenizer_encode(mine, s, strlen(s), 0, &v) || !ids_equal(&v, ref.ids, ref.len)) bad++;
                    token_vec_free(&v);
                }
                tokenizer_free(mine);
            }
        }
        check(bad == 0, "C API: one tokenizer per thread, concurrently", "%d mismatches", bad);
        token_vec_free(&ref);
    }

    /* UTF-8 sanitiser: the same output wherever the stream is cut */
    utf8_case("sanitiser: ASCII and valid UTF-8 pass", "a\t\n\r\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xc2\xa0", 15,
              "a\t\n\r\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xc2\xa0");
    utf8_case("sanitiser: stray continuation bytes", "a\x80\xbf" "b", 4, "a" FFFD FFFD "b");
    utf8_case("sanitiser: overlong and invalid lead bytes", "\xc0\xaf\xc1\xbf\xf5\xff", 6, FFFD FFFD FFFD FFFD FFFD FFFD);
    utf8_case("sanitiser: surrogate", "\xed\xa0\x80x", 4, FFFD FFFD FFFD "x");
    utf8_case("sanitiser: above U+10FFFF", "\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
    utf8_case("sanitiser: sequence cut short by ASCII", "\xe4\xb8" "a\xf0\x9f\x98" "b", 7, FFFD "a" FFFD "b");
    utf8_case("sanitiser: sequence cut short by a new lead byte", "\xe4\xb8\xc3\xa9", 4, FFFD "\xc3\xa9");
    utf8_case("sanitiser: truncated at the end", "ok\xf0\x9f\x98", 5, "ok" FFFD);
    utf8_case("sanitiser: control characters", "\x1b[31m\x07\x7f\x00x", 9, FFFD "[31m" FFFD FFFD FFFD "x");
    utf8_case("sanitiser: C1 controls (U+0085, U+009B)", "\xc2\x85\xc2\x9b\xc2\xa1", 6, FFFD FFFD "\xc2\xa1");

    /* printing tokens: an emoji in single-byte tokens, then a bad id */
    {
        char* out = NULL;
        size_t outn = 0;
        FILE* f = open_memstream(&out, &outn);
        TokenizerUtf8 s;
        tokenizer_utf8_init(&s);
        const unsigned char emoji[4] = {0xf0, 0x9f, 0x98, 0x80};
        int bad = 0;
        for (int i = 0; i < 4; i++) {
            TokenVec v = {0};
            tokenizer_encode(t, &emoji[i], 1, 0, &v); /* one byte -> its byte token */
            bad += v.len != 1 || tokenizer_print_token(t, &s, v.ids[0], f) != 0;
            token_vec_free(&v);
        }
        int r1 = tokenizer_print_token(t, &s, 99999, f);
        int r2 = tokenizer_print_token(t, &s, 31, f); /* "@" */
        TokenVec v = {0};
        const unsigned char lone = 0xe4;
        tokenizer_encode(t, &lone, 1, 0, &v);
        tokenizer_print_token(t, &s, v.ids[0], f);
        token_vec_free(&v);
        tokenizer_print_flush(&s, f);
        fclose(f);
        const char want[] = "\xf0\x9f\x98\x80" FFFD "@" FFFD;
        check(!bad && r1 == -1 && r2 == 0 && outn == sizeof want - 1 && memcmp(out, want, outn) == 0,
              "print_token: split emoji joined, bad id and dangling lead byte shown as U+FFFD", "%zu bytes out", outn);
        free(out);
    }
    tokenizer_free(t);

    /* load errors: one line, naming the file and the problem */
    load_error_case("load error: missing encoder.json", "/nonexistent/encoder.json", voc, "/nonexistent/encoder.json: cannot open: No such file");
    load_error_case("load error: missing vocab.bpe", enc, "/nonexistent/vocab.bpe", "/nonexistent/vocab.bpe: cannot open");
    load_error_case("load error: directory instead of a file", tmp, voc, "cannot read: Is a directory");
    load_error_case("load error: NULL path", NULL, voc, "no encoder.json path");
    const char* e_trunc = write_file(tmp, "trunc.json", "{\"a\": 0, \"b\": 1, \"c\"");
    load_error_case("load error: truncated JSON", e_trunc, voc, "trunc.json: malformed JSON at line 1, column 21: unexpected end of file");
    const char* e_colon = write_file(tmp, "colon.json", "{\"a\": 0,\n \"b\" 1}");
    load_error_case("load error: JSON without ':'", e_colon, voc, "colon.json: malformed JSON at line 2, column 6");
    const char* e_arr = write_file(tmp, "arr.json", "[1, 2]");
    load_error_case("load error: JSON that is not an object", e_arr, voc, "expected '{'");
    const char* e_neg = write_file(tmp, "neg.json", "{\"a\": -1}");
    load_error_case("load error: negative id", e_neg, voc, "neg.json: token \"a\": id is not a non-negative integer");
    const char* e_esc = write_file(tmp, "esc.json", "{\"a\\q\": 0}");
    load_error_case("load error: bad escape", e_esc, voc, "esc.json: malformed JSON at line 1, column 4");
    const char* e_cjk = write_file(tmp, "cjk.json", "{\"\\u4e2d\": 0}");
    load_error_case("load error: character outside the byte alphabet", e_cjk, voc, "U+4E2D is not in GPT-2's byte alphabet");
    const char* e_dup = write_file(tmp, "dup.json", "{\"a\": 0, \"b\": 0}");
    load_error_case("load error: id used twice", e_dup, voc, "id 0 is used twice (\"a\" and \"b\")");
    const char* e_gap = write_file(tmp, "gap.json", "{\"a\": 0, \"b\": 5}");
    load_error_case("load error: ids not 0..n-1", e_gap, voc, "token \"b\": id 5 is too large (ids are 0..1, one per token)");
    const char* e_bytes = write_file(tmp, "bytes.json", "{\"a\": 0, \"b\": 1}");
    load_error_case("load error: a byte without a token", e_bytes, voc, "no token for the byte 0x00");
    const char* e_trail = write_file(tmp, "trail.json", "{\"a\": 0} x");
    load_error_case("load error: data after the object", e_trail, voc, "unexpected data after the object");
    const char* e_cut = write_file(tmp, "cut.json", "{\"a\": 0, \"bc");
    load_error_case("load error: JSON cut short in a string", e_cut, voc, "cut.json: malformed JSON at line 1, column 13: unexpected end of file");
    const char* e_comma = write_file(tmp, "comma.json", "{\"a\": 0,}");
    load_error_case("load error: JSON with a trailing comma", e_comma, voc, "comma.json: malformed JSON at line 1, column 9");
    const char* e_ctl = write_file(tmp, "ctl.json", "{\"a\": 0,\n\"b\x01\": 1}");
    load_error_case("load error: control character", e_ctl, voc, "ctl.json: malformed JSON at line 2, column 3: control character 0x01");
    const char* e_nul = write_file(tmp, "nul.json", "{\"a\\u0000b\": 0}");
    load_error_case("load error: \\u0000 in a key", e_nul, voc, "nul.json: line 1, column 4: character U+0000 is not in GPT-2's byte alphabet");
    const char* e_hex = write_file(tmp, "hex.json", "{\"a\\u00zz\": 0}");
    load_error_case("load error: bad \\u escape", e_hex, voc, "hex.json: malformed JSON at line 1, column 4: bad \\u escape");
    const char* e_frac = write_file(tmp, "frac.json", "{\"a\": 0.5}");
    load_error_case("load error: fractional id", e_frac, voc, "frac.json: token \"a\": id is not a non-negative integer");
    const char* e_empty = write_file(tmp, "empty.json", "");
    load_error_case("load error: empty encoder.json", e_empty, voc, "empty.json: malformed JSON at line 1, column 1: empty file");
    const char* v_bad = write_file(tmp, "bad.bpe", "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0 a b\n");
    load_error_case("load error: merges line with three symbols", enc, v_bad, "bad.bpe: line 3: expected two symbols separated by one space");
    const char* v_unk = write_file(tmp, "unk.bpe", "#version: 0.2\nzqzqzq xjxjxj\n");
    load_error_case("load error: merge of unknown symbols", enc, v_unk, "unk.bpe: line 2: symbol \"zqzqzq\" is not in the encoder");
    const char* v_blank = write_file(tmp, "blank.bpe", "#version: 0.2\n\xc4\xa0 t\n\n\xc4\xa0 a\n");
    load_error_case("load error: blank line in the merges", enc, v_blank, "blank.bpe: line 3: empty line");
    const char* v_none = write_file(tmp, "none.bpe", "#version: 0.2\n");
    load_error_case("load error: no merges", enc, v_none, "none.bpe: no merges");
    return 0;
}
