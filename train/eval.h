// Multiple-choice evaluation (HellaSwag, or any set in llm.c's eval format: dataloader/evalset.h)
// of the model a run trains or loads, scored as llm.c and the HellaSwag paper's acc_norm do:
// each completion by the mean loss of its tokens given the context, the lowest wins (acc: by
// the sum of the losses instead).
//
// Data parallel: example e is rank e % W's; a rank packs its examples' rows (context +
// completion, one per completion) into forwards of the micro-batch's B x T tokens, as rows of
// the set's longest row (rounded up to 16 positions, at most T: a multiple-choice row is
// usually far shorter than a training sequence), so B x T / that many rows each; the rest of a row and of a
// batch is padding, left out of the sums. Every rank runs the same number of forwards (each gathers
// the sharded weights), the most any rank needs. Each completion's loss sum lands in one slot
// of a table summed over the ranks (every other rank adds zero): the predictions, and the
// figure, are the same at any world size (a row's losses may differ in their last bits with
// its place in a batch, which the world size changes).
#ifndef FSDP_TRAIN_EVAL_H
#define FSDP_TRAIN_EVAL_H

#include <stddef.h>
#include "comm/process_group.h"
#include "dataloader/evalset.h"

#ifdef __cplusplus
extern "C" {
#endif

// What the evaluation and generation call of the model (train_gpt.cu's, which train/ cannot
// include): forwards, on every rank together.
typedef struct {
    void* model;
    int B, T;              // the micro-batch the model's activations hold
    int tp;                // a forward's B x T: a multiple of this (the tensor-parallel group)
    int vocab_size, padded_vocab_size;
    // B rows of T tokens (B x T at most the micro-batch's tokens; inputs, targets: B*T each,
    // host) -> the loss at every position (losses: B*T, host), finished when it returns.
    void (*losses)(void* model, const int* inputs, const int* targets, int B, int T, float* losses);
    // One row of n tokens (n <= T) -> the logits after its last token (row: padded_vocab_size
    // floats, host), finished when it returns.
    void (*next_logits)(void* model, const int* tokens, int n, float* row);
    // After the last forward: the gathered weights released (the next use gathers afresh).
    void (*release)(void* model);
} ModelForward;

typedef struct {
    int examples;
    int correct_norm, correct;  // by the mean loss (acc_norm), by the sum (acc)
    long forwards;              // per rank, of B rows of T positions
    int B, T;
    double seconds;             // the whole evaluation (max over ranks)
} EvalResult;

// Scores every example of set on every rank together (inputs, targets, losses: host buffers
// of B*T). log_path (rank 0, or NULL): rewritten with one JSON line per example, in file
// order: {"example", "index", "label", "pred_norm", "pred", "mean_loss": [...], "sum_loss":
// [...]}. 0, or 1 on rank 0 with the error (a log that cannot be written) in err: the caller
// ends the run with fatal_agreed_any, which every rank reaches.
int eval_multiple_choice(const EvalSet* set, const ProcessGroup* pg, const ModelForward* fw, int* inputs, int* targets,
                         float* losses, const char* log_path, EvalResult* res, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
