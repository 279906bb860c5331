// What a run reads besides the model: the training tokens, the validation tokens (-j) and the
// multiple-choice evaluation set (--eval-data), opened and checked before the model is built.
#ifndef FSDP_TRAIN_RUN_DATA_H
#define FSDP_TRAIN_RUN_DATA_H

#include "comm/process_group.h"
#include "dataloader/evalset.h"
#include "dataloader/loader.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    DataLoader train;     // not opened by a run that does not train (--eval-only, --generate)
    DataLoader val;       // with have_val
    int have_val;
    long val_rounds;      // micro-batches per rank in a validation (--val-steps x grad_accum, clamped)
    EvalSet eval_set;     // --eval-data's examples (none: n_examples 0)
} RunData;

// Opens what the run reads at B x T per rank (train: whether it trains), on every rank; a bad
// file ends the run (fatal) naming its flag.
void run_data_open(RunData* d, const Options* o, const ProcessGroup* pg, int vocab_size, int B, int T, int grad_accum,
                   int train);
void run_data_close(RunData* d);

#ifdef __cplusplus
}
#endif
#endif
