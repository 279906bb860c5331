// Rotary position embeddings: the frequencies, shared by the cpu and cuda kernels (host and
// device code) and the planner. Pair i of a head (elements 2i and 2i+1: Meta's interleaved
// convention, as in Llama's reference code, llm.c and torchtitan; Hugging Face's checkpoints
// permute q and k to rotate halves instead, which the safetensors import and export undo and
// redo) at position t is rotated by t * inv_freq(i).
#ifndef FSDP_KERNELS_ROPE_H
#define FSDP_KERNELS_ROPE_H

#include <math.h>

// Where __host__ is a macro (nvcc, the emulator), the frequencies are callable from device
// code too; a plain C compiler sees a plain function.
#ifdef __host__
#define ROPE_HD __host__ __device__
#else
#define ROPE_HD
#endif

// theta: the base (Llama 3: 500000). factor > 1 turns on Llama 3.1's frequency scaling:
// wavelengths above original_max_pos / low_freq_factor are stretched by factor, those below
// original_max_pos / high_freq_factor kept, the band between blended smoothly. factor <= 1:
// plain RoPE.
typedef struct {
    float theta;
    float factor;
    float low_freq_factor, high_freq_factor;
    int original_max_pos;
} RopeParams;

// The inverse frequency of pair i of a head of size hs, computed in double (the twins and the
// PyTorch reference agree on it to the last bit of the float it is rounded to).
static inline ROPE_HD float rope_inv_freq(int i, int hs, RopeParams p) {
    double f = pow((double)p.theta, -2.0 * i / hs);
    if (p.factor > 1.0f) {
        const double pi = 3.14159265358979323846;
        const double wavelen = 2.0 * pi / f;
        const double low_wavelen = p.original_max_pos / (double)p.low_freq_factor;
        const double high_wavelen = p.original_max_pos / (double)p.high_freq_factor;
        if (wavelen > low_wavelen) {
            f = f / p.factor;
        } else if (wavelen >= high_wavelen) {
            const double smooth = (p.original_max_pos / wavelen - p.low_freq_factor) /
                                  ((double)p.high_freq_factor - p.low_freq_factor);
            f = (1.0 - smooth) * f / p.factor + smooth * f;
        }
    }
    return (float)f;
}

#endif
