// Eval files in llm.c's format (dataloader/evalset.c): the fuzzer's bytes are an eval file
// (HellaSwag's); evalset_load checks it with a row limit taken from the input. A file it
// accepts has every token read (the examples must point inside the stream) and must
// round-trip: evalset_write of its examples, read back, gives the same examples. A refusal
// must leave the set zeroed.
#include "dev/fuzz/fuzz_util.h"
#include "dataloader/evalset.h"

static int same_example(const EvalExample* a, const EvalExample* b) {
    if (a->index != b->index || a->label != b->label || a->n_completions != b->n_completions || a->context_len != b->context_len ||
        memcmp(a->context, b->context, (size_t)a->context_len * sizeof(uint16_t)))
        return 0;
    for (int c = 0; c < a->n_completions; c++)
        if (a->completion_len[c] != b->completion_len[c] ||
            memcmp(a->completion[c], b->completion[c], (size_t)a->completion_len[c] * sizeof(uint16_t)))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[600], copy[600], err[512];
    snprintf(path, sizeof(path), "%s/eval.bin", fuzz_dir());
    snprintf(copy, sizeof(copy), "%s/copy.bin", fuzz_dir());
    fuzz_write(path, data, size);
    // A vocabulary the seeds' tokens fit, and a row limit from 2 to 65 (the 17th reserved
    // header byte, zero in real files: the seeds accept every row).
    const int max_row = size > 16 && data[16] ? 2 + data[16] % 64 : 1 << 20;
    EvalSet s;
    if (evalset_load(&s, path, 50257, max_row, err, sizeof(err)) != 0) {
        const EvalSet zero = {0};
        if (memcmp(&s, &zero, sizeof(s)) || !err[0]) abort();
        return 0;
    }
    uint32_t sum = 0;
    for (int k = 0; k < s.n_examples; k++) {
        const EvalExample* e = &s.examples[k];
        for (int i = 0; i < e->context_len; i++) sum += e->context[i];
        for (int c = 0; c < e->n_completions; c++)
            for (int i = 0; i < e->completion_len[c]; i++) sum += e->completion[c][i];
    }
    volatile uint32_t sink = sum;  // keeps the reads
    (void)sink;
    if (evalset_write(copy, s.examples, s.n_examples, err, sizeof(err)) != 0) abort();
    EvalSet t;
    if (evalset_load(&t, copy, 50257, max_row, err, sizeof(err)) != 0 || t.n_examples != s.n_examples ||
        t.longest_example_bytes != s.longest_example_bytes || t.longest_row != s.longest_row)
        abort();
    for (int k = 0; k < s.n_examples; k++)
        if (!same_example(&s.examples[k], &t.examples[k])) abort();
    evalset_free(&t);
    evalset_free(&s);
    return 0;
}
