// Learning-rate schedule: linear warmup, then cosine / linear decay to final_frac x lr, or
// constant (as llm.c's llmc/schedulers.h).
#ifndef FSDP_TRAIN_SCHEDULERS_H
#define FSDP_TRAIN_SCHEDULERS_H

#include <math.h>

typedef enum { DECAY_COSINE, DECAY_LINEAR, DECAY_CONSTANT } LrDecay;

// step counts from 0 (the first update).
static inline float learning_rate(int step, int total_steps, float max_lr, int warmup, float final_frac, LrDecay decay) {
    if (step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
    if (decay == DECAY_CONSTANT) return max_lr;
    float min_lr = max_lr * final_frac;
    int span = total_steps - warmup;
    float frac = span > 0 ? (float)(step - warmup) / (float)span : 1.0f;
    if (frac > 1.0f) frac = 1.0f;
    if (decay == DECAY_LINEAR) return max_lr - frac * (max_lr - min_lr);
    return min_lr + 0.5f * (1.0f + cosf((float)M_PI * frac)) * (max_lr - min_lr);
}

#endif
