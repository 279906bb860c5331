#include "train/run_data.h"

#include <stdio.h>
#include <string.h>

void run_data_open(RunData* d, const Options* o, const ProcessGroup* pg, int vocab_size, int B, int T, int grad_accum,
                   int train) {
    char err[1024];
    memset(d, 0, sizeof(*d));
    d->have_val = (o->val_every > 0 || o->eval_only) && o->val_data && o->val_data[0];
    if (train && loader_open(&d->train, o->train_data, (size_t)T, vocab_size, o->seed, o->shuffle, err, sizeof(err)))
        fatal(pg, "--train-data: %s", err);
    if (d->have_val && loader_open(&d->val, o->val_data, (size_t)T, vocab_size, o->seed, 0, err, sizeof(err)))
        fatal(pg, "--val-data: %s", err);
    // A validation reads from the validation data's first window on; past its last the stream
    // wraps around and would count the same windows again, so --val-steps is clamped to what the
    // data holds whole (not refused: the default is more than Tiny Shakespeare's holds at -t 1024).
    if (d->have_val) {
        const size_t held = d->val.windows_per_epoch / ((size_t)B * (size_t)pg->dp_size);
        d->val_rounds = (long)o->val_steps * grad_accum;
        if (held == 0)
            fatal_agreed(pg, "--val-data %s: %zu sequence(s) of %d+1 tokens, fewer than one micro-batch on every rank "
                         "(--batch-size %d x %d rank(s)): give more validation data, a smaller -b or -t, or -v 0", o->val_data,
                         d->val.windows_per_epoch, T, B, pg->dp_size);
        if ((size_t)d->val_rounds > held) {
            if (pg->rank == 0)
                printf("--val-steps %d: the validation data holds %zu sequences of %d+1 tokens, %zu micro-batch(es) of %d x "
                       "%d rank(s): validating on those, not on %ld\n", o->val_steps, d->val.windows_per_epoch, T, held, B,
                       pg->dp_size, d->val_rounds);
            d->val_rounds = (long)held;
        }
    }
    // A row of the evaluation (context + completion) is read as T inputs and T targets.
    if (o->eval_data && evalset_load(&d->eval_set, o->eval_data, vocab_size, T + 1, err, sizeof(err)))
        fatal_agreed(pg, "--eval-data: %s", err);
}

void run_data_close(RunData* d) {
    if (d->train.n_shards) loader_close(&d->train);
    if (d->have_val) loader_close(&d->val);
    evalset_free(&d->eval_set);
}
