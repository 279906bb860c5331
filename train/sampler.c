#include "train/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

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

// prompt (n_prompt >= 1 tokens) continued by as many of n_tokens as fit T positions in all.
static void generate_text(const ModelForward* fw, const ProcessGroup* pg, const Tokenizer* tok, const int* prompt, int n_prompt,
                   int n_tokens, int top_k, float temperature, uint64_t seed, int step) {
    const int T = fw->T;
    int* tokens = (int*)calloc((size_t)T, sizeof(int));
    int* idx = (int*)malloc((size_t)top_k * sizeof(int));
    float* val = (float*)malloc((size_t)top_k * sizeof(float));
    float* row = (float*)malloc((size_t)fw->padded_vocab_size * sizeof(float));
    if (!tokens || !idx || !val || !row) fatal(pg, "out of host memory");
    const int length = n_prompt + n_tokens < T ? n_prompt + n_tokens : T;
    SamplePrinter p;
    sample_print_begin(&p, tok, pg->rank, step);
    for (int t = 0; t < n_prompt && t < T; t++) {
        tokens[t] = prompt[t];
        if (t > 0 || prompt[0] != GPT2_EOT) sample_print_token(&p, prompt[t]);  // the leading <|endoftext|> is not text
    }
    for (int t = n_prompt; t < length; t++) {
        fw->next_logits(fw->model, tokens, t, row);
        tokens[t] = sample_top_k(row, fw->vocab_size, top_k, temperature, sampler_coin(seed, step, t), idx, val);
        sample_print_token(&p, tokens[t]);
    }
    fw->release(fw->model);
    sample_print_end(&p);
    free(tokens); free(idx); free(val); free(row);
}

// --generate's prompt: <|endoftext|> then text's tokens (malloc'd, *n of them), with room for
// n_tokens more in T positions. NULL with the error in err.
static int* encode_prompt(Tokenizer* tok, const char* text, int vocab_size, int T, int n_tokens, int* n, char* err, size_t errlen) {
    if (!tok) {
        snprintf(err, errlen, "needs the GPT-2 tokenizer's encoder.json and vocab.bpe (--tokenizer-dir DIR)");
        return NULL;
    }
    if (vocab_size != tokenizer_vocab_size(tok)) {
        snprintf(err, errlen, "the model's vocabulary has %d tokens and the GPT-2 tokenizer %d: the prompt cannot be encoded "
                 "for it", vocab_size, tokenizer_vocab_size(tok));
        return NULL;
    }
    TokenVec v = {NULL, 0, 0};
    if (tokenizer_encode(tok, text, strlen(text), 0, &v)) {
        snprintf(err, errlen, "cannot encode the prompt: %s", tokenizer_error(tok));
        token_vec_free(&v);
        return NULL;
    }
    if (v.len + 1 + (size_t)n_tokens > (size_t)T) {
        snprintf(err, errlen, "the prompt's %zu tokens (with <|endoftext|>) and --sample-tokens %d do not fit the %d positions "
                 "of the sequence (-t)", v.len + 1, n_tokens, T);
        token_vec_free(&v);
        return NULL;
    }
    int* prompt = (int*)malloc((v.len + 1) * sizeof(int));
    if (!prompt) { snprintf(err, errlen, "out of host memory"); token_vec_free(&v); return NULL; }
    prompt[0] = GPT2_EOT;
    for (size_t i = 0; i < v.len; i++) prompt[i + 1] = v.ids[i];
    *n = (int)v.len + 1;
    token_vec_free(&v);
    return prompt;
}

void sample_run(const ModelForward* fw, const ProcessGroup* pg, const Options* o, Tokenizer* tok, const char* prompt, int step) {
    if (!prompt) {
        const int eot = GPT2_EOT;
        generate_text(fw, pg, tok, &eot, 1, o->sample_tokens, o->top_k, o->temperature, o->seed, step);
        return;
    }
    char err[1024];
    int n = 0;
    int* tokens = encode_prompt(tok, prompt, fw->vocab_size, fw->T, o->sample_tokens, &n, err, sizeof(err));
    if (!tokens) fatal_agreed(pg, "--generate: %s", err);
    generate_text(fw, pg, tok, tokens, n, o->sample_tokens, o->top_k, o->temperature, o->seed, step);
    free(tokens);
}
