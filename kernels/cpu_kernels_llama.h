// CPU reference kernels of the Llama family (fp32), beside cpu_kernels.h's (whose attention
// takes grouped-query heads and whose matmul, embedding and loss Llama shares): RMSNorm,
// rotary position embeddings and the SwiGLU activation. Same conventions as cpu_kernels.h:
// N rows, deterministic for a fixed thread count; the _backward kernels' accumulation is
// stated per kernel.
#ifndef FSDP_KERNELS_CPU_KERNELS_LLAMA_H
#define FSDP_KERNELS_CPU_KERNELS_LLAMA_H

#include <stddef.h>
#include "kernels/rope.h"

#ifdef __cplusplus
extern "C" {
#endif

// out = inp * rstd * weight per row of C, rstd = 1 / sqrt(mean(inp^2) + eps), saved [N]. eps: the
// model's norm_eps (Llama 3's: 1e-5).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
// dinp += d/dinp, dweight += sum over rows of dout * inp * rstd.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C);

// In place on qkv [B,T,(NH + 2 KVH) hs] (attention's layout: q heads, k heads, v heads): each
// q and k head's pair (2i, 2i+1) at position t rotated by t * rope_inv_freq(i); v untouched.
// inverse != 0 rotates by the opposite angle: the backward (a rotation's transpose), applied
// to the gradient in place.
void rope_forward(float* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse);

// SwiGLU on rows of inp [N, 2F] = (gate | up): out[N, F] = silu(gate) * up (silu(x) = x sigmoid(x)).
void swiglu_forward(float* out, const float* inp, int N, int F);
// dinp [N, 2F] (OVERWRITTEN): d(gate) = dout * up * silu'(gate), d(up) = dout * silu(gate).
void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F);

#ifdef __cplusplus
}
#endif
#endif
