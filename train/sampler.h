// Sampling a token from a row of logits: top-k with temperature (as llm.c's llmc/sampler.h).
// The coin is a pure function of (seed, step, position), so every rank draws the same token.
#ifndef FSDP_TRAIN_SAMPLER_H
#define FSDP_TRAIN_SAMPLER_H

#include <math.h>
#include <stdint.h>
#include "model/gpt2_state.h"

// A uniform number in [0, 1) for position t of the sample printed at `step`.
static inline float sampler_coin(uint64_t seed, int step, int t) {
    uint64_t h = splitmix64(seed ^ splitmix64(((uint64_t)step << 32) | (uint64_t)t));
    return (float)((double)(h >> 11) / 9007199254740992.0);
}

// The token the coin picks among the top_k largest logits, softmax(logits / temperature).
// idx and val: scratch of top_k entries.
static inline int sample_top_k(const float* logits, int V, int top_k, float temperature, float coin, int* idx, float* val) {
    if (top_k > V) top_k = V;
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
