// CPU reference kernels: fp32, row-major, OpenMP where it pays, OpenBLAS for matmuls.
// These are the numerical definition of the model; the CUDA kernels are checked against them.
//
// Conventions
//   B batch, T sequence length, C channels, NH heads (C % NH == 0), N = B*T rows,
//   OC output channels, V real vocabulary, Vp padded vocabulary (Vp >= V).
//   Every *_backward ACCUMULATES (+=) into its gradient outputs; the caller zeroes them.
//   Results are deterministic for a fixed thread count: no reductions whose order depends
//   on thread scheduling (parameter-gradient reductions are done per output element, or
//   per thread into private partials summed in a fixed order).
#ifndef FSDP_KERNELS_CPU_KERNELS_H
#define FSDP_KERNELS_CPU_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// out[b,t,:] = wte[inp[b,t] - vocab_begin,:] + wpe[t,:]; wpe NULL: no positions (dwpe NULL in
// the backward). wte holds the vocabulary rows [vocab_begin, vocab_end) (all of them: 0 and the
// padded vocabulary; a tensor-parallel rank: its slice); a token outside embeds as zero.
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                     int B, int T, int C, int vocab_begin, int vocab_end);
// dwte[inp[b,t] - vocab_begin,:] += dout[b,t,:] for tokens in [vocab_begin, vocab_end);
// dwpe[t,:] += sum_b dout[b,t,:]
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                      int B, int T, int C, int vocab_begin, int vocab_end);

// out = (inp - mean) * rstd * weight + bias per row of C, rstd = 1 / sqrt(var + eps); mean, rstd
// are [N] (saved for backward). eps: the model's norm_eps (GPT-2's, PyTorch's default: 1e-5).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C);

// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]; bias may be NULL.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC);
// dinp[N,C] += dout @ weight; dweight[OC,C] += dout^T @ inp; dbias[OC] += column sums of dout.
// dinp, dweight and dbias may each be NULL (skipped).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC);

// Causal multi-head self-attention, flash-style: nothing of size T x T is kept, with
// grouped-query attention (GQA): NH query heads share KVH key/value heads.
// hs = C/NH is the head size of every head; KVH >= 1 and NH % KVH == 0 (else abort with a
// message); group = NH/KVH. qkv is [B,T,QW], QW = C + 2*KVH*hs, laid out as (q | k | v):
// the NH q heads (head h at qkv[b,t, h*hs : (h+1)*hs]), then the KVH k heads (head j at
// C + j*hs), then the KVH v heads (head j at C + KVH*hs + j*hs). Query head h attends with
// kv head h / group: consecutive query heads share a kv head (Llama's, HF's repeat_kv).
// KVH == NH is plain multi-head attention (GPT-2: QW = 3C).
// out is [B,T,C] (heads concatenated); lse is [B,NH,T], the log-sum-exp of each row of
// scaled scores (scale 1/sqrt(hs)), saved for the backward, which recomputes probabilities.
// The head size hs must be <= 128 (fixed-size stack tiles); larger aborts with a message.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH);
// dqkv[B,T,QW] += gradient w.r.t. qkv (qkv's layout); the dk, dv of kv head j are summed
// over the query heads of its group. out and lse are the forward's outputs.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, int KVH);

// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// out may alias inp.
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// out = a + b; out may alias a or b.
void residual_forward(float* out, const float* a, const float* b, size_t n);

// Fused softmax + cross-entropy over rows of logits [N, Vp]; only the first V columns are
// real (the padded ones are ignored and get zero gradient). losses[i] = -log softmax(row)[targets[i]].
// When dloss != 0, the row is overwritten IN PLACE with its gradient:
//   logits[i,j] = (softmax(row)[j] - (j == targets[i])) * dloss  for j < V, and 0 for j >= V.
// When dloss == 0 the logits are left untouched (evaluation). No [N,V] probability buffer.
void crossentropy_softmax_fused(float* logits, float* losses, const int* targets,
                                int N, int V, int Vp, float dloss);

// The same loss with the logits split by vocabulary columns over a tensor-parallel group
// (kernels.h: crossentropy_tp_*). This rank's logits are [N, Vp_local], columns
// [vocab_begin, vocab_begin + Vp_local) of the full row, the first V_local real (0 <= V_local
// <= Vp_local), the rest padding; targets are global ids. The caller combines the phases
// over the group: max of row_max, then sum of sums.
//   row_max[i] = max of the real columns (-inf when V_local is 0)
void crossentropy_tp_max(float* row_max, const float* logits, int N, int V_local, int Vp_local);
//   sums[2i] = sum over the real columns of exp(logits[i,j] - row_max[i]) (the group's max);
//   sums[2i+1] = logits[i, targets[i] - vocab_begin] when this rank holds the target, else 0
void crossentropy_tp_sums(float* sums, const float* logits, const float* row_max, const int* targets,
                          int N, int V_local, int Vp_local, int vocab_begin);
//   losses[i] = log(sums[2i]) + row_max[i] - sums[2i+1] (the group's sums); dloss != 0: the
//   logits are overwritten with (exp(x - row_max) / sums[2i] - onehot) * dloss on the real
//   columns, 0 on the padding, as crossentropy_softmax_fused's columns of this range.
void crossentropy_tp_finish(float* logits, float* losses, const float* row_max, const float* sums,
                            const int* targets, int N, int V_local, int Vp_local, int vocab_begin,
                            float dloss);

// AdamW on a contiguous range (PyTorch semantics, decoupled weight decay):
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   mhat = m / (1 - b1^t); vhat = v / (1 - b2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
// t is the 1-based step count used for bias correction. The corrections 1 - b^t are computed
// in double and rounded to float once; the per-element arithmetic is float.
void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  int t, float grad_scale);

// Sum of squares of x in double (for the global gradient norm), deterministic.
double sum_squares(const float* x, size_t n);

// The kernels' exp (softmax, attention, GELU): within 1 ulp of expf on [-87, 88]; 0 below
// -87 and for -inf; exp(88) for anything above 88 and +inf; NaN for NaN (as CUDA's expf).
// Inlined where the kernels call it; this copy is for the tests.
float cpu_fast_expf(float x);

#ifdef __cplusplus
}
#endif
#endif
