// Multiple-choice evaluation sets in llm.c's eval format (dev/data/data_common.py's
// write_evalfile; HellaSwag's validation set is 10,042 examples, 3.6 MB):
//
//   int32 header[256] = {20240522 (magic), 1 (version), examples, longest example in bytes, 0...}
//   then per example a stream of uint16:
//     65535 (start), the example's bytes (this stream's, start included), its index in the
//     dataset, the label (the correct completion), the number of completions,
//     the context's token count and tokens, then per completion its token count and tokens.
//
// A completion is scored by the mean loss of its tokens given the context (row = context +
// completion: the forward reads the row's first n-1 tokens and predicts its last n-1, of
// which the completion's are counted), so a row must fit the run's sequence: context +
// completion <= T + 1 tokens.
#ifndef FSDP_DATALOADER_EVALSET_H
#define FSDP_DATALOADER_EVALSET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EVALSET_MAGIC 20240522
#define EVALSET_VERSION 1
#define EVALSET_HEADER_INTS 256
#define EVALSET_MAX_COMPLETIONS 16  // HellaSwag has 4; llm.c's writer asserts 4

typedef struct {
    int index;                                     // <EXAMPLE_INDEX>, as written
    int label;                                     // 0 .. n_completions-1
    int n_completions;                             // 1 .. EVALSET_MAX_COMPLETIONS
    int context_len;                               // >= 1
    const uint16_t* context;                       // into EvalSet.stream
    int completion_len[EVALSET_MAX_COMPLETIONS];   // each >= 1
    const uint16_t* completion[EVALSET_MAX_COMPLETIONS];
} EvalExample;

typedef struct {
    int n_examples;
    int longest_example_bytes;  // header[3]
    int longest_row;            // the longest context + completion, in tokens
    EvalExample* examples;      // n_examples, in file order
    uint16_t* stream;           // the file's examples, one allocation (the examples point into it)
} EvalSet;

// Reads and checks the whole file (path named in every error): header (magic: "not an eval
// file", version, a count of at least 1, longest-example field equal to what the examples
// hold), every example's framing (start marker, byte count, label < completions, 1..16
// completions, non-empty context and completions), every token < vocab_size, every row
// (context + completion) at most max_row_tokens, no bytes after the last example. Only
// regular files (util/regular_file). 0, or 1 with a one-line message in err and s zeroed.
// Messages name the example by its position (from 0) and its index, e.g. "PATH: example 17
// (index 17): label 4 of 4 completions"; a row too long is worded for max_row_tokens = T + 1
// ("... = 44 tokens, more than 33 (-t 32, plus the last token, only a target)").
int evalset_load(EvalSet* s, const char* path, int vocab_size, int max_row_tokens, char* err, size_t errlen);
void evalset_free(EvalSet* s);

// Writes examples in the format above (what evalset_load reads back equal; header[3] the
// longest example's bytes), atomically (a temporary file renamed into place). Refuses what
// the format cannot hold: token ids >= 65535, an example over 65535 bytes, more than 65535
// examples. 0, or 1 with the error in err.
int evalset_write(const char* path, const EvalExample* examples, int n_examples, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
