// Sampling a token from a row of logits: top-k with temperature (as llm.c's llmc/sampler.h).
// The coin is a pure function of (seed, step, position), so every rank draws the same token.
// And the samples' printing, with the GPT-2 tokenizer (sampler.c).
#ifndef FSDP_TRAIN_SAMPLER_H
#define FSDP_TRAIN_SAMPLER_H

#include <math.h>
#include <stdint.h>
#include "dataloader/tokenizer.h"
#include "model/state.h"
#include "train/eval.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif
// The GPT-2 tokenizer from tokenizer_dir (--tokenizer-dir), or when NULL from where the data
// scripts put its files: data/gpt2, then $FSDP_DATA/gpt2, ../shared/data/gpt2. NULL when
// there is none (samples then print token ids: rank 0 says so and why).
Tokenizer* load_sample_tokenizer(const char* tokenizer_dir, int rank);

// A sample as rank 0 prints it: a header, the tokens as text as they come (a character split
// across tokens waits for its end), or as ids without a tokenizer, then a closing line.
typedef struct {
    const Tokenizer* tok;   // NULL: ids
    TokenizerUtf8 utf8;
    int on;                 // rank 0: the others print nothing
} SamplePrinter;
void sample_print_begin(SamplePrinter* p, const Tokenizer* tok, int rank, int step);
void sample_print_token(SamplePrinter* p, int token);
void sample_print_end(SamplePrinter* p);

// A run's generation, on every rank together (each forward needs the gathers): a sample from
// <|endoftext|> (prompt NULL: -s's, printed as the sample of `step`), or --generate's: the
// prompt, encoded after <|endoftext|> (the model's vocabulary must be the tokenizer's),
// continued. --sample-tokens tokens (as many as fit -t's positions for a sample; a prompt that
// leaves no room for them ends the run), drawn with --top-k and --temperature, the coins from
// --seed and step (sampler_coin): every rank draws the same tokens, and a rerun the same text.
// No KV cache: a forward of the whole row per token. Rank 0 prints the prompt, then each token
// as it comes.
void sample_run(const ModelForward* fw, const ProcessGroup* pg, const Options* o, Tokenizer* tok, const char* prompt, int step);
#ifdef __cplusplus
}
#endif

// A uniform number in [0, 1) for position t of the sample printed at `step`.
static inline float sampler_coin(uint64_t seed, int step, int t) {
    uint64_t h = splitmix64(seed ^ splitmix64(((uint64_t)step << 32) | (uint64_t)t));
    return (float)((double)(h >> 11) / 9007199254740992.0);
}

// The order the top k are kept and drawn in: larger logit first, and among equal logits the
// smaller token id first. It is the order the original insertion sort produced (a later
// token never displaced an equal earlier one), so the same coin picks the same token.
static inline int sampler_before(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

// The heap below keeps the top k with the LAST of them (in sampler_before's order) at the
// root: a new logit only has to beat the root. Moves entry i down to its place.
static inline void sampler_sift_down(int* idx, float* val, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, last = i;
        if (l < n && sampler_before(val[last], idx[last], val[l], idx[l])) last = l;
        if (r < n && sampler_before(val[last], idx[last], val[r], idx[r])) last = r;
        if (last == i) return;
        float tv = val[i]; val[i] = val[last]; val[last] = tv;
        int ti = idx[i]; idx[i] = idx[last]; idx[last] = ti;
        i = last;
    }
}

// The original selection, kept for rows with a NaN: NaN compares false with everything, so
// the kept set then depends on this exact sequence of comparisons, which the heap does not
// repeat. O(V k); only a broken model makes NaN logits (the run skips non-finite steps, so
// its weights stay finite).
static inline int sample_top_k_insertion(const float* logits, int V, int top_k, int* idx, float* val) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        float x = logits[v];
        if (n < top_k) { idx[n] = v; val[n] = x; n++; }
        else if (x <= val[n - 1]) continue;
        else { idx[n - 1] = v; val[n - 1] = x; }
        for (int i = n - 1; i > 0 && val[i] > val[i - 1]; i--) {  // keep sorted, descending
            float tv = val[i]; val[i] = val[i - 1]; val[i - 1] = tv;
            int ti = idx[i]; idx[i] = idx[i - 1]; idx[i - 1] = ti;
        }
    }
    return n;
}

// The top_k entries in sampler_before's order in idx/val[0 .. n), n returned. O(V log k): a
// heap of k with the last kept entry at its root, then a heap sort of the k.
static inline int sample_top_k_select(const float* logits, int V, int top_k, int* idx, float* val) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        float x = logits[v];
        if (x != x) return sample_top_k_insertion(logits, V, top_k, idx, val);  // NaN: see above
        if (n < top_k) {
            int i = n++;  // sift up: a later entry moves above the parents it comes after
            while (i > 0 && sampler_before(val[(i - 1) / 2], idx[(i - 1) / 2], x, v)) {
                val[i] = val[(i - 1) / 2]; idx[i] = idx[(i - 1) / 2];
                i = (i - 1) / 2;
            }
            val[i] = x; idx[i] = v;
        } else if (x > val[0]) {  // v is after every kept id, so only a larger logit beats the root
            val[0] = x; idx[0] = v;
            sampler_sift_down(idx, val, n, 0);
        }
    }
    // Heap sort: the root (the last) goes to the end, and so on: first to last in 0 .. n.
    for (int end = n - 1; end > 0; end--) {
        float tv = val[0]; val[0] = val[end]; val[end] = tv;
        int ti = idx[0]; idx[0] = idx[end]; idx[end] = ti;
        sampler_sift_down(idx, val, end, 0);
    }
    return n;
}

// The token the coin picks among the top_k largest logits, softmax(logits / temperature).
// idx and val: scratch of top_k entries (left holding the top k, first to last).
static inline int sample_top_k(const float* logits, int V, int top_k, float temperature, float coin, int* idx, float* val) {
    if (top_k > V) top_k = V;
    int n = sample_top_k_select(logits, V, top_k, idx, val);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(val[i] - val[0]) / temperature);
    double target = (double)coin * sum, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)(val[i] - val[0]) / temperature);
        if (acc >= target) return idx[i];
    }
    return idx[n - 1];
}

#endif
