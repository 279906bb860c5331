#include "train/sampler.h"

#include <stdio.h>
#include <stdlib.h>

// The tokenizer is only needed to print samples: without one they print token ids.
Tokenizer* load_sample_tokenizer(const char* tokenizer_dir, int rank) {
    Tokenizer* tokenizer = NULL;
    char err[1024] = "";
    const char* env = getenv("FSDP_DATA");
    char env_dir[1024] = "";
    if (env && *env) snprintf(env_dir, sizeof(env_dir), "%s/gpt2", env);
    const char* dirs[] = {tokenizer_dir ? tokenizer_dir : "data/gpt2", tokenizer_dir ? NULL : env_dir,
                          tokenizer_dir ? NULL : "../shared/data/gpt2"};
    for (int i = 0; i < 3 && !tokenizer; i++) {
        if (!dirs[i] || !dirs[i][0]) continue;
        char enc[1100], bpe[1100], why_not[1024];
        snprintf(enc, sizeof(enc), "%s/encoder.json", dirs[i]);
        snprintf(bpe, sizeof(bpe), "%s/vocab.bpe", dirs[i]);
        tokenizer = tokenizer_load(enc, bpe, why_not, sizeof(why_not));
        if (!tokenizer && i == 0) snprintf(err, sizeof(err), "%s", why_not);
    }
    if (!tokenizer && rank == 0) printf("note: samples print token ids (no tokenizer: %s)\n", err);
    return tokenizer;
}

void sample_print_begin(SamplePrinter* p, const Tokenizer* tok, int rank, int step) {
    p->tok = tok;
    p->on = rank == 0;
    tokenizer_utf8_init(&p->utf8);
    if (p->on) { printf("sample (step %d):\n---\n", step); fflush(stdout); }
}

void sample_print_token(SamplePrinter* p, int token) {
    if (!p->on) return;
    if (p->tok) tokenizer_print_token(p->tok, &p->utf8, token, stdout);
    else printf("%d ", token);
    fflush(stdout);
}

void sample_print_end(SamplePrinter* p) {
    if (!p->on) return;
    if (p->tok) tokenizer_print_flush(&p->utf8, stdout);
    printf("\n---\n");
    fflush(stdout);
}
