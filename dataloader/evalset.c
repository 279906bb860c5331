// dataloader/: what a run reads: token shards (loader.h), the GPT-2 tokenizer (tokenizer.h),
// and here llm.c's multiple-choice eval files (evalset.h). The whole file is read into memory
// (HellaSwag's validation set is 3.6 MB) and every example is checked once, at load: scoring
// then never meets a malformed one, and a bad file stops a run before its first step rather
// than at its first evaluation.
#include "dataloader/evalset.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataloader/loader.h"  // the token shard magics: the file most likely given by mistake
#include "util/atomic_file.h"
#include "util/regular_file.h"

#define START_MARKER 0xFFFFu
#define HEADER_BYTES (EVALSET_HEADER_INTS * (int)sizeof(int32_t))
// An example's fixed fields: start, bytes, index, label, completions, context length.
#define FIXED_FIELDS 6
// The smallest well-formed example (one context token, one completion of one token), in
// uint16: no file holds more examples than its stream has room for at this size.
#define MIN_EXAMPLE_U16 (FIXED_FIELDS + 1 + 2)
// The byte count is a uint16 and counts whole uint16s: at most 65534 (llm.c asserts < 2^16).
#define MAX_EXAMPLE_BYTES 65534
#define MAX_EXAMPLES 65535  // the index is a uint16 (llm.c asserts fewer than 2^16 examples)
// Far above any real set (HellaSwag's is 3.6 MB); a larger file is refused before it is read.
#define MAX_FILE_BYTES ((size_t)1 << 30)

// "PATH: example K (index I): " + the rest. Examples are numbered from 0 in file order, as
// llm.c numbers their indices, so a file written by llm.c names each example twice alike.
static int example_error(char* err, size_t errlen, const char* path, int k, int index, const char* fmt, ...) {
    int n = snprintf(err, errlen, "%s: example %d (index %d): ", path, k, index);
    if (n < 0 || (size_t)n >= errlen) return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return 1;
}

// What the format requires of an example's counts, whoever holds them (a file being read, or
// the examples given to the writer): its message after the example's prefix, or NULL.
static const char* shape_error(int label, int n_completions, int context_len, char* what, size_t n) {
    if (n_completions < 1 || n_completions > EVALSET_MAX_COMPLETIONS)
        snprintf(what, n, "%d completions (1 to %d expected)", n_completions, EVALSET_MAX_COMPLETIONS);
    else if (label < 0 || label >= n_completions)
        snprintf(what, n, "label %d of %d completions", label, n_completions);
    else if (context_len < 1)
        snprintf(what, n, "empty context");
    else
        return NULL;
    return what;
}

// The tokens of a context or completion ("context" / "completion 2") against the vocabulary.
// 65535 is the start marker, never a token: a vocabulary larger than the format's ids would
// let it through otherwise.
static int check_tokens(const uint16_t* tok, int n, const char* part, int vocab_size, const char* path, int k, int index,
                        char* err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        if (tok[i] >= (unsigned)vocab_size)
            return example_error(err, errlen, path, k, index, "%s's token %d is %u, outside the vocabulary (size %d)", part, i,
                                 tok[i], vocab_size);
        if (tok[i] == START_MARKER)
            return example_error(err, errlen, path, k, index, "%s's token %d is 65535, the start marker (a misframed example)",
                                 part, i);
    }
    return 0;
}

// Example k, at uint16 position p of the stream t (stream_bytes long, more than 2p; the
// file's byte offsets are the header's 1024 bytes further). Fills *ex (pointing into t) and
// *bytes (its byte count).
static int parse_example(const uint16_t* t, size_t stream_bytes, size_t p, int k, int vocab_size, int max_row_tokens,
                         const char* path, EvalExample* ex, int* longest_row, unsigned* bytes, char* err, size_t errlen) {
    const size_t at = HEADER_BYTES + 2 * p;  // the example's byte offset in the file
    const size_t left_bytes = stream_bytes - 2 * p, left = left_bytes / 2;
    if (left < 2) {
        snprintf(err, errlen, "%s: truncated: the file ends at byte %zu, inside example %d's start marker and byte count", path,
                 at + left_bytes, k);
        return 1;
    }
    if (t[p] != START_MARKER) {
        snprintf(err, errlen, "%s: example %d at byte offset %zu: start marker %u, expected 65535 (a corrupt file, or the "
                 "byte count of the example before is wrong)", path, k, at, t[p]);
        return 1;
    }
    const unsigned nbytes = t[p + 1];
    if (nbytes % 2 || nbytes < 2 * MIN_EXAMPLE_U16) {
        snprintf(err, errlen, "%s: example %d at byte offset %zu: byte count %u (an example is an even number of bytes, at "
                 "least %d)", path, k, at, nbytes, 2 * MIN_EXAMPLE_U16);
        return 1;
    }
    const size_t len = nbytes / 2;
    if (len > left) {
        snprintf(err, errlen, "%s: truncated: example %d at byte offset %zu has %u bytes, the file ends %zu bytes into it", path, k,
                 at, nbytes, left_bytes);
        return 1;
    }
    const uint16_t* e = t + p;  // the example: e[0 .. len)
    memset(ex, 0, sizeof(*ex));
    ex->index = e[2];
    ex->label = e[3];
    ex->n_completions = e[4];
    ex->context_len = e[5];
    char what[96];
    if (shape_error(ex->label, ex->n_completions, ex->context_len, what, sizeof(what)))
        return example_error(err, errlen, path, k, ex->index, "%s", what);
    size_t q = FIXED_FIELDS;
    if (q + (size_t)ex->context_len > len)
        return example_error(err, errlen, path, k, ex->index, "its context of %d tokens runs past its byte count %u",
                             ex->context_len, nbytes);
    ex->context = e + q;
    if (check_tokens(ex->context, ex->context_len, "context", vocab_size, path, k, ex->index, err, errlen)) return 1;
    q += (size_t)ex->context_len;
    for (int c = 0; c < ex->n_completions; c++) {
        if (q >= len)
            return example_error(err, errlen, path, k, ex->index, "completion %d of %d starts past its byte count %u", c,
                                 ex->n_completions, nbytes);
        const int n = e[q++];
        if (n < 1) return example_error(err, errlen, path, k, ex->index, "completion %d is empty", c);
        if (q + (size_t)n > len)
            return example_error(err, errlen, path, k, ex->index, "completion %d of %d tokens runs past its byte count %u", c, n,
                                 nbytes);
        char part[32];
        snprintf(part, sizeof(part), "completion %d", c);
        if (check_tokens(e + q, n, part, vocab_size, path, k, ex->index, err, errlen)) return 1;
        const int row = ex->context_len + n;
        if (row > max_row_tokens)
            return example_error(err, errlen, path, k, ex->index, "context %d + completion %d (%d tokens) = %d tokens, more "
                                 "than %d (-t %d, plus the last token, only a target)", ex->context_len, c, n, row,
                                 max_row_tokens, max_row_tokens - 1);
        if (row > *longest_row) *longest_row = row;
        ex->completion_len[c] = n;
        ex->completion[c] = e + q;
        q += (size_t)n;
    }
    if (q != len)
        return example_error(err, errlen, path, k, ex->index, "byte count %u, but its fields end after %zu bytes", nbytes, 2 * q);
    *bytes = nbytes;
    return 0;
}

int evalset_load(EvalSet* s, const char* path, int vocab_size, int max_row_tokens, char* err, size_t errlen) {
    memset(s, 0, sizeof(*s));
    size_t size = 0;
    char* buf = read_regular_file(path, MAX_FILE_BYTES, &size, err, errlen);
    if (!buf) return 1;
    int32_t header[EVALSET_HEADER_INTS];
    EvalExample* ex = NULL;
    if (size < HEADER_BYTES) {
        snprintf(err, errlen, "%s: truncated header (%zu bytes, an eval file's header is %d)", path, size, HEADER_BYTES);
        goto done;
    }
    memcpy(header, buf, sizeof(header));
    if (header[0] != EVALSET_MAGIC) {
        snprintf(err, errlen, "%s: not an eval file (magic %d, expected %d for llm.c's eval format)%s", path, header[0],
                 EVALSET_MAGIC, header[0] == SHARD_MAGIC_U16 || header[0] == SHARD_MAGIC_U32
                     ? ": that is an llm.c token shard's magic (a training or validation shard given as the eval set?)" : "");
        goto done;
    }
    if (header[1] != EVALSET_VERSION) {
        snprintf(err, errlen, "%s: eval file version %d, expected %d", path, header[1], EVALSET_VERSION);
        goto done;
    }
    const int count = header[2];
    if (count < 1) {
        snprintf(err, errlen, "%s: the header's example count is %d (at least 1 expected)", path, count);
        goto done;
    }
    // The examples to the front of the buffer: the stream is then one allocation of its own,
    // which evalset_free frees, and the examples point into it.
    const size_t stream_bytes = size - HEADER_BYTES, n16 = stream_bytes / 2;
    memmove(buf, buf + HEADER_BYTES, stream_bytes);
    const uint16_t* t = (const uint16_t*)buf;
    // No more examples than the stream has room for: a count of 2^31 allocates nothing huge,
    // it is refused where the file ends.
    const size_t room = n16 / MIN_EXAMPLE_U16;
    ex = (EvalExample*)calloc((size_t)count < room ? (size_t)count : room + 1, sizeof(EvalExample));
    if (!ex) { snprintf(err, errlen, "%s: out of memory for %d examples", path, count); goto done; }
    size_t p = 0;
    int longest_bytes = 0, longest_row = 0;
    for (int k = 0; k < count; k++) {
        if (2 * p == stream_bytes) {
            snprintf(err, errlen, "%s: truncated: the header says %d examples, the file ends after %d (%zu bytes)", path, count, k,
                     size);
            goto done;
        }
        unsigned nbytes = 0;
        if (parse_example(t, stream_bytes, p, k, vocab_size, max_row_tokens, path, &ex[k], &longest_row, &nbytes, err, errlen)) goto done;
        if ((int)nbytes > longest_bytes) longest_bytes = (int)nbytes;
        p += nbytes / 2;
    }
    if (HEADER_BYTES + 2 * p != size) {
        const int more = p < n16 && t[p] == START_MARKER;
        snprintf(err, errlen, "%s: %zu bytes after the last of the header's %d examples%s", path, size - HEADER_BYTES - 2 * p,
                 count, more ? ", starting with a start marker (more examples than the header's count?)" : "");
        goto done;
    }
    if (header[3] != longest_bytes) {
        snprintf(err, errlen, "%s: the header's longest example is %d bytes, its examples' longest is %d", path, header[3],
                 longest_bytes);
        goto done;
    }
    s->n_examples = count;
    s->longest_example_bytes = longest_bytes;
    s->longest_row = longest_row;
    s->examples = ex;
    s->stream = (uint16_t*)buf;
    return 0;
done:
    free(ex);
    free(buf);
    return 1;
}

void evalset_free(EvalSet* s) {
    free(s->examples);
    free(s->stream);
    memset(s, 0, sizeof(*s));
}

// The uint16s example ex takes in the file, or what the format refuses in it (the message,
// after the example's prefix, in what).
static size_t example_u16(const EvalExample* ex, char* what, size_t n) {
    if (ex->index < 0 || ex->index > 65535) {
        snprintf(what, n, "index %d (the format holds 0 to 65535)", ex->index);
        return 0;
    }
    if (shape_error(ex->label, ex->n_completions, ex->context_len, what, n)) return 0;
    size_t len = FIXED_FIELDS + (size_t)ex->context_len;
    for (int c = 0; c < ex->n_completions; c++) {
        if (ex->completion_len[c] < 1) {
            snprintf(what, n, "completion %d is empty", c);
            return 0;
        }
        len += 1 + (size_t)ex->completion_len[c];
    }
    if (2 * len > MAX_EXAMPLE_BYTES) {
        snprintf(what, n, "%zu bytes, more than the %d an example may take (its byte count is a uint16)", 2 * len,
                 MAX_EXAMPLE_BYTES);
        return 0;
    }
    // 65535 is the start marker: a token with that id would frame a new example.
    const uint16_t* parts[1 + EVALSET_MAX_COMPLETIONS] = {ex->context};
    int lens[1 + EVALSET_MAX_COMPLETIONS] = {ex->context_len};
    for (int c = 0; c < ex->n_completions; c++) parts[1 + c] = ex->completion[c], lens[1 + c] = ex->completion_len[c];
    for (int j = 0; j <= ex->n_completions; j++)
        for (int i = 0; i < lens[j]; i++)
            if (parts[j][i] == START_MARKER) {
                if (j == 0) snprintf(what, n, "context's token %d is 65535, which the format reserves for its start marker", i);
                else snprintf(what, n, "completion %d's token %d is 65535, which the format reserves for its start marker", j - 1, i);
                return 0;
            }
    return len;
}

int evalset_write(const char* path, const EvalExample* examples, int n_examples, char* err, size_t errlen) {
    if (n_examples < 1 || n_examples > MAX_EXAMPLES) {
        snprintf(err, errlen, "%s: %d examples (the format holds 1 to %d)", path, n_examples, MAX_EXAMPLES);
        return 1;
    }
    size_t total = 0;
    int longest = 0;
    char what[160];
    for (int k = 0; k < n_examples; k++) {
        const size_t len = example_u16(&examples[k], what, sizeof(what));
        if (!len) return example_error(err, errlen, path, k, examples[k].index, "%s", what);
        total += len;
        if ((int)(2 * len) > longest) longest = (int)(2 * len);
    }
    const size_t bytes = HEADER_BYTES + 2 * total;
    char* buf = (char*)calloc(1, bytes);
    if (!buf) { snprintf(err, errlen, "%s: out of memory for %zu bytes", path, bytes); return 1; }
    const int32_t header[4] = {EVALSET_MAGIC, EVALSET_VERSION, n_examples, longest};
    memcpy(buf, header, sizeof(header));
    uint16_t* o = (uint16_t*)(buf + HEADER_BYTES);
    for (int k = 0; k < n_examples; k++) {
        const EvalExample* ex = &examples[k];
        uint16_t* start = o;
        *o++ = START_MARKER;
        *o++ = 0;  // the byte count, once known
        *o++ = (uint16_t)ex->index;
        *o++ = (uint16_t)ex->label;
        *o++ = (uint16_t)ex->n_completions;
        *o++ = (uint16_t)ex->context_len;
        memcpy(o, ex->context, (size_t)ex->context_len * sizeof(uint16_t));
        o += ex->context_len;
        for (int c = 0; c < ex->n_completions; c++) {
            *o++ = (uint16_t)ex->completion_len[c];
            memcpy(o, ex->completion[c], (size_t)ex->completion_len[c] * sizeof(uint16_t));
            o += ex->completion_len[c];
        }
        start[1] = (uint16_t)(2 * (o - start));
    }
    const int rc = atomic_write_file(path, buf, bytes, ATOMIC_TMP, err, errlen);
    free(buf);
    return rc;
}
