/*
 * GPT-2 byte-level BPE tokenizer (encode and decode), plain C11.
 *
 * Inputs are OpenAI's GPT-2 release files: encoder.json (token string -> id, strings
 * written in GPT-2's printable byte alphabet) and vocab.bpe (the merges, one "a b" per
 * line, highest priority first, after a "#version" line).
 *
 * Encoding gives the same ids as tiktoken's "gpt2" encoding (r50k_base):
 *   1. Optionally split the text at "<|endoftext|>" (TOKENIZER_ALLOW_SPECIAL, tiktoken's
 *      allowed_special); each occurrence becomes the id 50256 and the text between is
 *      encoded separately. Without the flag the string is ordinary text (encode_ordinary).
 *   2. Pre-tokenise with GPT-2's pattern, run by PCRE2 (UTF + UCP, JIT compiled; runs of
 *      ASCII are matched by an equivalent hand-written scanner first):
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      where \s is spelled out as Unicode's White_Space property (the set tiktoken's
 *      Rust regex uses; PCRE2's own \s would also take U+180E).
 *   3. A piece that is itself a token becomes that token (tiktoken does the same);
 *      otherwise byte-level BPE: repeatedly merge the adjacent pair whose concatenation
 *      has the lowest merge rank, leftmost first, until no adjacent pair is a token.
 *      Long pieces use a heap (O(n log n)), so a megabyte of spaces or digits is fine.
 *
 * Invalid UTF-8 never crashes and is never lost: the pattern is compiled with
 * PCRE2_MATCH_INVALID_UTF, so a pattern match never covers an invalid sequence; every
 * maximal run of bytes that no match covers (the invalid sequences, e.g. a stray 0xff or a
 * truncated multi-byte character) is BPE-encoded as a piece of its own. Hence
 * decode(encode(x)) == x for every byte string x. (tiktoken takes Python str and cannot
 * see such bytes; on valid UTF-8 the two agree.)
 *
 * One possible difference from tiktoken: \p{L} / \p{N} come from the Unicode tables of
 * the installed PCRE2 (10.42 has Unicode 14), tiktoken's from Rust's regex crate, so a
 * character assigned in a newer Unicode version could be classified differently (the
 * Unicode 15 letters tried in development, CJK extension H and Kawi, agree).
 *
 * Limits: at most 65536 ids (GPT-2 has 50257; llm.c's uint16 shards hold no more either).
 *
 * Usage:
 *     char err[256];
 *     Tokenizer* tok = tokenizer_load("data/gpt2/encoder.json", "data/gpt2/vocab.bpe", err, sizeof err);
 *     if (!tok) { fprintf(stderr, "%s\n", err); exit(1); }
 *     TokenVec ids = {0};
 *     if (tokenizer_encode(tok, text, strlen(text), 0, &ids) != 0) ... tokenizer_error(tok) ...
 *     TokenizerUtf8 out = {0};                   // printing generated tokens:
 *     for (...) tokenizer_print_token(tok, &out, next_id, stdout);
 *     tokenizer_print_flush(&out, stdout);
 *     token_vec_free(&ids);
 *     tokenizer_free(tok);
 *
 * Thread safety: tokenizer_encode* use scratch space inside the Tokenizer (match data,
 * work arrays, a small cache of recent pieces), so one Tokenizer must not encode in two
 * threads at once (load one per thread). Decoding and the other const functions are safe
 * to call concurrently. There is no global state.
 */
#ifndef FSDP_DATALOADER_TOKENIZER_H
#define FSDP_DATALOADER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Tokenizer Tokenizer;

/* GPT-2's <|endoftext|>; tokenizer_eot() gives the id the loaded files actually use. */
#define TOKENIZER_GPT2_EOT 50256

/* Flags for tokenizer_encode*. */
enum {
    TOKENIZER_ALLOW_SPECIAL = 1, /* "<|endoftext|>" in the text -> the EOT id */
};

/* Loads encoder.json and vocab.bpe. On failure returns NULL and writes one line (no
 * trailing newline) into err naming the file and the problem, e.g.
 *   "encoder.json: cannot open: No such file or directory"
 *   "vocab.bpe: line 7: expected two symbols separated by one space"
 * (the path is written as given). err may be NULL when errlen is 0. */
Tokenizer* tokenizer_load(const char* encoder_json, const char* vocab_bpe, char* err, size_t errlen);
void tokenizer_free(Tokenizer* t);

int tokenizer_vocab_size(const Tokenizer* t); /* number of ids (50257 for GPT-2) */
int tokenizer_eot(const Tokenizer* t);        /* id of "<|endoftext|>", or -1 if absent */
int tokenizer_max_token_bytes(const Tokenizer* t); /* longest token, in bytes */

/* ---- encode ---- */

/* Growable id array owned by the caller; zero-initialise it, free with token_vec_free. */
typedef struct {
    int32_t* ids;
    size_t len, cap;
} TokenVec;
void token_vec_free(TokenVec* v);

/* Appends the ids of text[0..len) to out. Returns 0, or -1 on failure (out of memory or a
 * PCRE2 error; tokenizer_error() says which); out then holds a prefix of the ids. */
int tokenizer_encode(Tokenizer* t, const void* text, size_t len, int flags, TokenVec* out);

/* Streaming form for large texts: the ids are passed to sink in order, in batches of at
 * most 65536. A non-zero return from sink stops the encoding, and is returned. Returns 0,
 * -1 on a tokenizer failure (see tokenizer_error), or the sink's value. */
typedef int (*TokenizerSink)(void* ctx, const int32_t* ids, size_t n);
int tokenizer_encode_stream(Tokenizer* t, const void* text, size_t len, int flags,
                            TokenizerSink sink, void* ctx);

/* The message of the last failure of tokenizer_encode*, "" if none. */
const char* tokenizer_error(const Tokenizer* t);

/* ---- decode ---- */

/* The bytes of one token (not NUL-terminated); NULL for an id outside the vocabulary.
 * The bytes of a token need not be valid UTF-8 on their own (an emoji is often several
 * tokens); to show text use the stream functions below. */
const unsigned char* tokenizer_decode(const Tokenizer* t, int id, size_t* len);

/* Appends the bytes of ids[0..n) to *buf (a malloc'd buffer of *cap bytes, *len used,
 * grown as needed; all may start 0/NULL). Raw bytes, no sanitising. Returns 0, or -1 for
 * an id outside the vocabulary (nothing appended for it) or out of memory. */
int tokenizer_decode_append(const Tokenizer* t, const int32_t* ids, size_t n,
                            unsigned char** buf, size_t* len, size_t* cap);

/* ---- safe printing of a token stream ----
 * A UTF-8 stream sanitiser that carries an incomplete multi-byte sequence from one token
 * to the next, so an emoji split over three tokens still prints as one emoji. What is
 * written is always valid UTF-8 that is safe on a terminal:
 *   - every ill-formed sequence (stray continuation byte, overlong form, surrogate, value
 *     above U+10FFFF, sequence cut short by another byte or by the end) becomes one U+FFFD
 *     per maximal ill-formed subpart (the Unicode "best practice" count);
 *   - control characters other than \t, \n and \r (C0, DEL, and C1 U+0080..U+009F, which
 *     include ESC and CSI) become U+FFFD as well.
 * Zero-initialise the state (or call tokenizer_utf8_init) before the first use. */
typedef struct {
    unsigned char pending[4];
    int npending;
    int need; /* total length of the pending sequence */
} TokenizerUtf8;

void tokenizer_utf8_init(TokenizerUtf8* s);

/* Output bound for tokenizer_utf8_sanitize on n input bytes. */
#define TOKENIZER_UTF8_BOUND(n) (3 * (size_t)(n) + 12)

/* Sanitises in[0..n) given the carried state; writes at most TOKENIZER_UTF8_BOUND(n)
 * bytes to out and returns how many. An incomplete sequence at the end is held back. */
size_t tokenizer_utf8_sanitize(TokenizerUtf8* s, const void* in, size_t n, char* out);

/* Ends the stream: a held-back incomplete sequence becomes U+FFFD. Writes at most 3 bytes
 * to out, returns how many, and resets the state. */
size_t tokenizer_utf8_finish(TokenizerUtf8* s, char* out);

/* Prints one token to f through the sanitiser. An id outside the vocabulary prints U+FFFD
 * and returns -1; a write error returns -1 too; else 0. */
int tokenizer_print_token(const Tokenizer* t, TokenizerUtf8* s, int id, FILE* f);
/* Writes out what tokenizer_utf8_finish gives and fflushes f. 0, or -1 on write error. */
int tokenizer_print_flush(TokenizerUtf8* s, FILE* f);

#ifdef __cplusplus
}
#endif

#endif /* FSDP_DATALOADER_TOKENIZER_H */
