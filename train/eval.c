#include "train/eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "train/metrics.h"
#include "util/atomic_file.h"

// Token p of the row of example x's completion c: the context, then the completion.
static int row_token(const EvalExample* x, int c, int p) {
    return p < x->context_len ? x->context[p] : x->completion[c][p - x->context_len];
}

// One row of a rank's share: example e's completion c.
typedef struct { int example, completion; } EvalRow;

// The first of the smallest of n values (a tie goes to the earlier completion, as argmin does).
static int first_min(const double* v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] < v[best]) best = i;
    return best;
}

static int write_log(const char* path, const EvalSet* set, const size_t* first, const double* sums, const int* pred_norm,
                     const int* pred, char* err, size_t errlen) {
    char* buf = NULL;
    size_t len = 0;
    FILE* m = open_memstream(&buf, &len);
    if (!m) { snprintf(err, errlen, "--eval-log %s: out of memory", path); return 1; }
    for (int e = 0; e < set->n_examples; e++) {
        const EvalExample* x = &set->examples[e];
        fprintf(m, "{\"example\":%d,\"index\":%d,\"label\":%d,\"pred_norm\":%d,\"pred\":%d,\"mean_loss\":[", e, x->index,
                x->label, pred_norm[e], pred[e]);
        for (int c = 0; c < x->n_completions; c++)
            fprintf(m, "%s%.9g", c ? "," : "", sums[first[e] + c] / x->completion_len[c]);
        fprintf(m, "],\"sum_loss\":[");
        for (int c = 0; c < x->n_completions; c++) fprintf(m, "%s%.9g", c ? "," : "", sums[first[e] + c]);
        fprintf(m, "]}\n");
    }
    fclose(m);
    char why[1024];
    int failed = atomic_write_file(path, buf, len, ATOMIC_TMP, why, sizeof(why));
    if (failed) snprintf(err, errlen, "--eval-log: %s", why);
    free(buf);
    return failed;
}

int eval_multiple_choice(const EvalSet* set, const ProcessGroup* pg, const ModelForward* fw, int* inputs, int* targets,
                         float* losses, const char* log_path, EvalResult* res, char* err, size_t errlen) {
    const double t0 = now_seconds();
    // Examples are split over the data-parallel ranks: every rank of a tensor-parallel group
    // runs the same forwards.
    const int W = pg->dp_size, N = set->n_examples;
    // The forwards' shape: rows of the longest row's positions (its tokens but the last),
    // rounded up to 16 and to the tensor-parallel group, at most the micro-batch's T; as many
    // as the micro-batch's tokens hold.
    int T = (set->longest_row - 1 + 15) / 16 * 16;
    T = (T + fw->tp - 1) / fw->tp * fw->tp;
    if (T > fw->T) T = fw->T;
    const int B = (int)((long)fw->B * fw->T / T);
    // Each completion's slot in the table of loss sums: example e's from first[e] on.
    size_t* first = (size_t*)malloc(((size_t)N + 1) * sizeof(size_t));
    if (!first) fatal(pg, "out of host memory");
    first[0] = 0;
    for (int e = 0; e < N; e++) first[e + 1] = first[e] + (size_t)set->examples[e].n_completions;
    const size_t slots = first[N];
    double* sums = (double*)calloc(slots, sizeof(double));
    EvalRow* rows = (EvalRow*)malloc(slots * sizeof(EvalRow));
    int* pred_norm = (int*)malloc((size_t)N * sizeof(int));
    int* pred = (int*)malloc((size_t)N * sizeof(int));
    if (!sums || !rows || !pred_norm || !pred) fatal(pg, "out of host memory");

    // This rank's rows, and the forwards every rank runs: the most any rank needs.
    long n_rows = 0;
    for (int e = pg->dp_rank; e < N; e += W)
        for (int c = 0; c < set->examples[e].n_completions; c++) rows[n_rows++] = (EvalRow){e, c};
    double most = (double)((n_rows + B - 1) / B);
    comm_all_reduce_f64(pg->world_comm, &most, 1, COMM_MAX);
    const long forwards = (long)most;

    for (long f = 0; f < forwards; f++) {
        // A row of n tokens is the forward's first n-1 positions: inputs its tokens 0..n-2,
        // targets 1..n-1. The rest (and a batch's unused rows) is token 0, never summed.
        memset(inputs, 0, (size_t)B * T * sizeof(int));
        memset(targets, 0, (size_t)B * T * sizeof(int));
        for (int b = 0; b < B && f * B + b < n_rows; b++) {
            const EvalRow* r = &rows[f * B + b];
            const EvalExample* x = &set->examples[r->example];
            const int n = x->context_len + x->completion_len[r->completion];  // <= T + 1 (evalset_load)
            for (int p = 0; p < n - 1; p++) {
                inputs[(size_t)b * T + p] = row_token(x, r->completion, p);
                targets[(size_t)b * T + p] = row_token(x, r->completion, p + 1);
            }
        }
        fw->losses(fw->model, inputs, targets, B, T, losses);
        // The completion's tokens are the targets of positions context_len-1 .. n-2.
        for (int b = 0; b < B && f * B + b < n_rows; b++) {
            const EvalRow* r = &rows[f * B + b];
            const EvalExample* x = &set->examples[r->example];
            const int n = x->context_len + x->completion_len[r->completion];
            double sum = 0.0;
            for (int p = x->context_len - 1; p < n - 1; p++) sum += losses[(size_t)b * T + p];
            sums[first[r->example] + r->completion] = sum;
        }
    }
    fw->release(fw->model);
    // Every slot was written by one rank (of a tensor-parallel group: by each, the first one's
    // kept) and is zero on the others: the sum is that value.
    if (pg->tp_rank > 0) memset(sums, 0, slots * sizeof(double));
    comm_all_reduce_f64(pg->world_comm, sums, slots, COMM_SUM);

    memset(res, 0, sizeof(*res));
    res->examples = N;
    res->forwards = forwards;
    res->B = B, res->T = T;
    for (int e = 0; e < N; e++) {
        const EvalExample* x = &set->examples[e];
        double mean[EVALSET_MAX_COMPLETIONS];
        for (int c = 0; c < x->n_completions; c++) mean[c] = sums[first[e] + c] / x->completion_len[c];
        pred_norm[e] = first_min(mean, x->n_completions);
        pred[e] = first_min(sums + first[e], x->n_completions);
        res->correct_norm += pred_norm[e] == x->label;
        res->correct += pred[e] == x->label;
    }
    int failed = 0;
    if (log_path && pg->rank == 0) failed = write_log(log_path, set, first, sums, pred_norm, pred, err, errlen);
    res->seconds = now_seconds() - t0;
    free(first); free(sums); free(rows); free(pred_norm); free(pred);
    return failed;
}
