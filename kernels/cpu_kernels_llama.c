// The Llama family's CPU reference kernels (cpu_kernels_llama.h).
#include "kernels/cpu_kernels_llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define COL_TILE 64  // columns per task of a parameter-gradient reduction (fixed order)

void rmsnorm_forward(float* restrict out, float* restrict rstd, const float* restrict inp,
                     const float* restrict weight, int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* y = out + (size_t)n * C;
        float ss = 0.0f;
        #pragma omp simd reduction(+:ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        const float s = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) y[c] = x[c] * s * weight[c];
        rstd[n] = s;
    }
}

void rmsnorm_backward(float* restrict dinp, float* restrict dweight, const float* restrict dout,
                      const float* restrict inp, const float* restrict weight, const float* restrict rstd,
                      int N, int C) {
    const int ntiles = (C + COL_TILE - 1) / COL_TILE;
    #pragma omp parallel
    {
        // y = x s w with s = (mean(x^2) + eps)^(-1/2): with g = w dout,
        // dx = s g - x s^3 mean(g x).
        #pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            const float s = rstd[n];
            float gx = 0.0f;
            #pragma omp simd reduction(+:gx)
            for (int c = 0; c < C; c++) gx += weight[c] * d[c] * x[c];
            const float k = s * s * s * gx / C;
            for (int c = 0; c < C; c++) dx[c] += s * weight[c] * d[c] - k * x[c];
        }
        // dweight: a sum over rows, so parallel over column tiles (fixed reduction order).
        #pragma omp for schedule(static)
        for (int tile = 0; tile < ntiles; tile++) {
            const int c0 = tile * COL_TILE, nc = C - c0 < COL_TILE ? C - c0 : COL_TILE;
            float acc[COL_TILE];
            for (int c = 0; c < nc; c++) acc[c] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float* x = inp + (size_t)n * C + c0;
                const float* d = dout + (size_t)n * C + c0;
                const float s = rstd[n];
                for (int c = 0; c < nc; c++) acc[c] += x[c] * s * d[c];
            }
            for (int c = 0; c < nc; c++) dweight[c0 + c] += acc[c];
        }
    }
}

void rope_forward(float* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse) {
    if (hs % 2 != 0 || hs > 1024) {
        fprintf(stderr, "rope: head size %d must be even and at most 1024\n", hs);
        abort();
    }
    float inv_freq[512];
    for (int i = 0; i < hs / 2; i++) inv_freq[i] = rope_inv_freq(i, hs, p);
    const size_t QW = (size_t)(NH + 2 * KVH) * hs;
    const int heads = NH + KVH;  // the q heads, then the k heads: contiguous in a row
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* row = qkv + ((size_t)b * T + t) * QW;
            for (int i = 0; i < hs / 2; i++) {
                // The angle in double, as the reference computes it; one cos/sin per pair per position.
                const double angle = (double)t * inv_freq[i];
                const float c = (float)cos(angle), s = inverse ? -(float)sin(angle) : (float)sin(angle);
                for (int h = 0; h < heads; h++) {
                    float* x = row + (size_t)h * hs + 2 * i;
                    const float x0 = x[0], x1 = x[1];
                    x[0] = x0 * c - x1 * s;
                    x[1] = x0 * s + x1 * c;
                }
            }
        }
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void swiglu_forward(float* restrict out, const float* restrict inp, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* gate = inp + (size_t)n * 2 * F;
        const float* up = gate + F;
        float* y = out + (size_t)n * F;
        for (int j = 0; j < F; j++) y[j] = gate[j] * sigmoidf_(gate[j]) * up[j];
    }
}

void swiglu_backward(float* restrict dinp, const float* restrict dout, const float* restrict inp, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* gate = inp + (size_t)n * 2 * F;
        const float* up = gate + F;
        const float* d = dout + (size_t)n * F;
        float* dgate = dinp + (size_t)n * 2 * F;
        float* dup = dgate + F;
        for (int j = 0; j < F; j++) {
            const float x = gate[j], s = sigmoidf_(x), silu = x * s;
            dgate[j] = d[j] * up[j] * s * (1.0f + x * (1.0f - s));
            dup[j] = d[j] * silu;
        }
    }
}
