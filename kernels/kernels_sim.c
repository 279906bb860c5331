// The sim device's kernel table: costs from shapes (kernels_sim.h). The FLOP and byte counts
// follow what the kernels read and write (e bytes per activation or parameter element, fp32
// statistics). With 2-byte elements the table models the cuda device's kernels as they are
// written (kernels/cuda_*.cuh: the flash attention's tiles, the partial sums of the
// LayerNorm and bias backward, the embedding backward's sort); dev/test/test_traffic_emu.sh
// holds every operation's bytes within 10% of what the emulator counts those kernels
// moving (distinct 32-byte sectors per launch: what a launch whose re-reads hit the cache
// moves to and from DRAM), and the matrix work's FLOPs within 10% of their tensor-core
// FLOPs. With 4-byte elements (the cpu profile) the byte and FLOP counts are the operations'
// own, as the cpu kernels do them.
#include "kernels/kernels_sim.h"

#include <stdlib.h>
#include <string.h>

void sim_clock_reset(SimClock* c) {
    SimCosts keep = c->costs;
    double compute = c->compute, comm = c->comm;
    SimPhase phase = c->phase;
    SimGroup group = c->group;
    const int kind = c->kind, backward = c->backward, gelu_fwd = c->gelu_epilogue[0], gelu_bwd = c->gelu_epilogue[1];
    memset(c, 0, sizeof(*c));
    c->gelu_epilogue[0] = gelu_fwd;
    c->gelu_epilogue[1] = gelu_bwd;
    c->kind = kind;
    c->backward = backward;
    c->costs = keep;
    c->compute = compute;
    c->comm = comm;
    c->phase = phase;
    c->group = group;
}

SimGroup sim_group_of_kind(KernelKind kind) {
    return kind == KERNEL_MATMUL || kind == KERNEL_LM_HEAD ? SIM_GROUP_MATMUL
         : kind == KERNEL_ATTENTION                        ? SIM_GROUP_ATTENTION
                                                           : SIM_GROUP_VECTOR;
}

const char* const sim_attention_names[SIM_ATTENTION_IMPLS + 1] = {"flash", "cublas", "cudnn", "flash-pipelined", "auto"};
const int sim_head_sizes[SIM_HEAD_SIZES] = {64, 128};

SimAttention sim_attention_from_name(const char* name) {
    for (int a = 0; a <= SIM_ATTENTION_IMPLS; a++)
        if (!strcmp(name, sim_attention_names[a])) return (SimAttention)a;
    return (SimAttention)-1;
}
SimAttention sim_attention_resolve(SimAttention a, int head_size) {
    if (a != SIM_ATTENTION_AUTO) return a;
    return head_size == 64 || head_size == 128 ? SIM_ATTENTION_FLASH : SIM_ATTENTION_CUBLAS;
}
int sim_head_size_column(int head_size) { return head_size > 96; }

// An operation of `launches` kernels (0: a memset, see sim_kernels) whose FLOPs run at `eff`
// of the peak.
static double sim_cost(SimClock* c, int launches, SimWork work, double eff, double flops, double bytes) {
    const SimCosts* s = &c->costs;
    const SimGroup g = c->phase == SIM_OPTIMIZER ? SIM_GROUP_OPTIMIZER : c->group;
    // The model's vector kernels stream at their own measured rate; the rest (matmuls,
    // attention, the engine's and the optimizer's kernels) at mem_eff.
    const double mem_eff = g == SIM_GROUP_VECTOR && s->vector_mem_eff > 0 ? s->vector_mem_eff : s->mem_eff;
    double t_flops = flops > 0 ? flops / (s->peak_flops * eff) : 0.0;
    double t_bytes = bytes > 0 ? bytes / (s->mem_bw * mem_eff) : 0.0;
    // A calibration's factor applies to the whole kernel (its launch included), as a real
    // run's profile times it.
    const double scale = g < SIM_GROUPS && s->time_scale[g] > 0 ? s->time_scale[g] : 1.0;
    t_flops *= scale;
    t_bytes *= scale;
    const double launch = s->launch_s * scale * (launches > 0 ? launches : 1);
    double t = (t_flops > t_bytes ? t_flops : t_bytes) + launch;
    if (t_flops > t_bytes) c->bound_time[work == SIM_WORK_ATTENTION ? SIM_BOUND_ATTENTION : SIM_BOUND_MATMUL] += t_flops;
    else c->bound_time[SIM_BOUND_MEMORY] += t_bytes;
    c->bound_time[SIM_BOUND_LAUNCH] += launch;
    c->group_time[g] += t;
    c->compute += t;
    c->busy[c->phase] += t;
    c->flops[c->phase] += flops;
    c->mem_bytes[c->phase] += bytes;
    if (c->kind >= 0 && c->kind < KERNEL_KINDS && c->phase != SIM_OPTIMIZER) {
        c->kind_bytes[c->kind][c->backward != 0] += bytes;
        c->kind_time[c->kind][c->backward != 0] += t;
        c->kind_launches[c->kind][c->backward != 0] += launches;
    }
    c->kernels += launches;
    return t;
}

double sim_kernels(SimClock* c, int launches, SimWork work, double flops, double bytes) {
    const SimCosts* s = &c->costs;
    return sim_cost(c, launches, work,
                    work == SIM_WORK_MATMUL ? s->matmul_eff : work == SIM_WORK_ATTENTION ? s->attention_eff : s->vector_eff,
                    flops, bytes);
}
double sim_kernel(SimClock* c, SimWork work, double flops, double bytes) { return sim_kernels(c, 1, work, flops, bytes); }

double sim_attention_eff(const SimCosts* s, int head_size) {
    const double e = s->attention_impl_eff[sim_attention_resolve(s->attention, head_size)][sim_head_size_column(head_size)];
    return e > 0 ? e : s->attention_eff;
}

static SimClock* clk(Kernels* k) { return (SimClock*)k->impl; }
static int models_cuda(const Kernels* k) { return k->act_bytes != sizeof(float); }
// The launches an operation is charged: the cuda device's count for the call, one per call
// on the cpu profile (its kernels are host calls).
static int launches(const Kernels* k, int cuda) { return models_cuda(k) ? cuda : 1; }

// An attention operation: at the efficiency of the implementation the run picks, at its head
// size, in that implementation's launches (kernels/cuda_attention*.cuh): flash and flash-pipelined one forward
// and three backward (D = rowsum(dout * out), the main kernel, the dQ slices' sum); cublas
// the heads' copies, the batched GEMMs and the softmax kernels (forward: q, k, v to heads, 2
// GEMMs, softmax, out from heads = 7; backward: q, k, v, dout to heads, 5 GEMMs, softmax
// recomputed, its backward, dq, dk, dv from heads = 14); cudnn one execution of its graph
// each, the backward's taken as two kernels (cuDNN 9's SDPA backward: dO . O, then the main
// kernel), not counted anywhere yet (the fake cuDNN launches none).
int sim_attention_launches(SimAttention a, int head_size, int backward) {
    static const int impl_launches[SIM_ATTENTION_IMPLS][2] = {{1, 3}, {7, 14}, {1, 2}, {1, 3}};
    return impl_launches[sim_attention_resolve(a, head_size)][backward != 0];
}
static double sim_attention_kernel(Kernels* k, int head_size, int backward, double flops, double bytes) {
    SimClock* c = clk(k);
    c->attention_calls[backward != 0]++;
    return sim_cost(c, launches(k, sim_attention_launches(c->costs.attention, head_size, backward)), SIM_WORK_ATTENTION,
                    sim_attention_eff(&c->costs, head_size), flops, bytes);
}

// The cuda kernels' two-pass row reductions (kernels/cuda_common.cuh, row_partition): the
// blocks of rows whose fp32 partial sums a second kernel adds up.
static double partial_blocks(int N, int min_rows, int max_blocks) {
    long long rows = ((long long)N + max_blocks - 1) / max_blocks;  // 64-bit: N may be near INT_MAX
    if (rows < min_rows) rows = min_rows;
    return (double)(((long long)N + rows - 1) / rows);
}
// Bytes of the partial sums of `cols` columns over N rows: written, then read.
static double partials_bytes(int N, int cols, int min_rows, int max_blocks) {
    return 2.0 * partial_blocks(N, min_rows, max_blocks) * cols * sizeof(float);
}

// A row of wte per token (rows of repeated tokens count as many times: a bound, reached
// when a micro-batch's tokens are distinct), the T rows of wpe once, out written.
// (A vocabulary range: the same bound, its tokens all in this rank's rows.)
static void sim_encoder_forward(Kernels* k, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                                int vocab_begin, int vocab_end) {
    double e = (double)k->act_bytes, BTC = (double)B * T * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, BTC, 2 * BTC * e + (wpe ? (double)T * C * e : 0) + (double)B * T * 4);
}
// Rows of dwte read and written (one per token, as the forward's bound), dwpe's T rows
// summed over B and written (read too when accumulating). cuda: dout is read by both the
// dwte and the dwpe kernel, and the token ids are sorted first (iota, one pass of the sort
// over ids and positions: the emulator's count; CUB makes one per 8 key bits) and read
// back sorted.
static void sim_encoder_backward(Kernels* k, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                 int vocab_begin, int vocab_end, int accumulate) {
    double e = (double)k->act_bytes, BTC = (double)B * T * C, TC = (double)T * C, BT = (double)B * T;
    double bytes = dwpe ? (models_cuda(k) ? 2 : 1) * BTC * e + 2 * BTC * e + TC * e * (accumulate ? 2 : 1) : 3 * BTC * e;
    if (models_cuda(k)) bytes += BT * 4 * (1 + 4 + 2);
    // cuda: iota, CUB's sort (counted as one launch, as the emulator's CUB counts it: on a GPU
    // CUB's onesweep sort is a histogram, a scan and a kernel per 8 key bits), the dwte
    // kernel, the dwpe kernel. No tokens: dwpe's memset alone.
    const int n = B * T == 0 ? 0 : 3 + (dwpe != NULL);
    sim_kernels(clk(k), launches(k, n), SIM_WORK_VECTOR, 2 * BTC, bytes);
}
static void sim_layernorm_forward(Kernels* k, void* out, float* mean, float* rstd, const void* inp, const void* weight,
                                  const void* bias, int N, int C, float eps) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 8 * NC, 2 * NC * e + 8.0 * N + 2.0 * C * e);
}
static void sim_residual_layernorm_forward(Kernels* k, void* residual, void* out, float* mean, float* rstd, const void* a,
                                           const void* b, const void* weight, const void* bias, int N, int C, float eps) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 9 * NC, 4 * NC * e + 8.0 * N + 2.0 * C * e);
}
// dout and inp read, dinp read and written (it accumulates), the statistics and weight
// read, dweight and dbias written (and read when accumulating). cuda: through fp32 partial
// sums per block of rows (cuda_norm.cuh: at least 16 rows, at most 512 blocks).
static void sim_layernorm_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                   const void* weight, const float* mean, const float* rstd, int N, int C, int accumulate) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    double bytes = 4 * NC * e + 8.0 * N + (accumulate ? 5.0 : 3.0) * C * e;
    if (models_cuda(k)) bytes += 2 * partials_bytes(N, C, 16, 512);
    // cuda: the kernel, then one launch summing both partial sums (no rows: memsets).
    sim_kernels(clk(k), launches(k, N > 0 ? 2 : 0), SIM_WORK_VECTOR, 14 * NC, bytes);
}
static void sim_matmul_forward(Kernels* k, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                               int N, int C, int OC) {
    double e = (double)k->act_bytes, n = N, c = C, oc = OC;
    double bytes = (n * c + oc * c + n * oc * (pre_gelu ? 2 : 1) + oc) * e;
    // cuda: the GEMM, and the GELU kernel when it is not in the epilogue.
    sim_kernels(clk(k), launches(k, 1 + (pre_gelu && !clk(k)->gelu_epilogue[0])), SIM_WORK_MATMUL, 2 * n * c * oc, bytes);
}
static void sim_matmul_backward(Kernels* k, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                const void* weight, const void* pre_gelu, int N, int C, int OC, int accumulate) {
    // Two GEMMs (dinp = dout W, dweight = dout^T inp): dout read by both, the GELU input
    // read through the epilogue, dweight read when it accumulates. cuda: the bias gradient
    // is written by the dweight GEMM's epilogue (cuda_matmul.cuh: BGRADB, from the dout it
    // reads anyway) when the gradient is fresh; when it accumulates, a reduction of its own
    // reads dout a third time into fp32 partial sums per block of rows (at least 32 rows, at
    // most 256 blocks), then reads and writes dbias. Either half alone (kernels.h): its own
    // GEMM's part (di, dw: 1 for the halves that run; with both the sums are the whole's).
    double e = (double)k->act_bytes, n = N, c = C, oc = OC, di = dinp != NULL, dw = dweight != NULL;
    double bytes =
        ((di + dw) * n * oc + di * oc * c + di * n * c * (pre_gelu ? 2 : 1) + dw * n * c + dw * oc * c * (accumulate ? 2 : 1)) * e;
    if (dbias && models_cuda(k))
        bytes += accumulate ? n * oc * e + partials_bytes(N, OC, 32, 256) + 2 * oc * e : oc * e;
    // cuda launches: each GEMM, the GELU backward's kernel when it is not in the dinp GEMM's
    // epilogue, the bias reduction's two (its partial sums, their sum) when it accumulates.
    // (A shape whose BGRADB cuBLASLt refuses at run time also takes the reduction: the plan
    // cannot know that.)
    const int n_launch = (int)(di + dw) + (dinp && pre_gelu && !clk(k)->gelu_epilogue[1]) + (dbias && dw && accumulate ? 2 : 0);
    sim_kernels(clk(k), launches(k, n_launch), SIM_WORK_MATMUL, 2 * (di + dw) * n * c * oc + (dbias ? n * oc : 0), bytes);
}
// Causal attention. cpu: QK^T and PV over the lower triangle, 2 x 2 x B x T^2/2 x C FLOPs
// forward (FlashAttention's count); the backward recomputes the scores and does four more
// products. cuda (kernels/cuda_attention_flash.cuh, ATTENTION_FLASH): the query x key pairs the
// tiles compute, masked ones included, per (batch, head):
//   forward: blocks of 128 queries, a warp per 32 of them; the block's key tiles (64 keys,
//     32 for head size 128) up to its last visible key, each skipped by a warp none of whose
//     rows sees it; flash-pipelined's (kernels/cuda_attention_flash_pipelined.cuh): a warp
//     per 16 queries, key tiles of 128 (64 for head size 128), the same skips;
//   backward: key blocks of 128 (a warp per 16 keys), query blocks of 64 (32) from the key
//     block's first key on; the warps with a key some query of the block sees (flash-pipelined's
//     backward has flash's tiles). Other implementations are counted as flash.
static double flash_forward_pairs(int T, int hs, SimAttention impl) {
    const int pl = impl == SIM_ATTENTION_FLASH_PIPELINED;
    const int BR = 128, W = pl ? 16 : 32, BC = (hs <= 64 ? 64 : 32) * (pl ? 2 : 1);
    double pairs = 0;
    for (int q0 = 0; q0 < T; q0 += BR) {
        const int kend = q0 + BR < T ? q0 + BR : T, ntiles = (kend + BC - 1) / BC;
        for (int w = 0; w < BR; w += W) {
            const int seen = (q0 + w + W - 1) / BC + 1;  // tiles starting at or before the warp's last row
            pairs += (double)W * BC * (seen < ntiles ? seen : ntiles);
        }
    }
    return pairs;
}
static double flash_backward_pairs(int T, int hs) {
    const int BC = 128, BR = hs <= 64 ? 64 : 32;
    double pairs = 0;
    for (int j0 = 0; j0 < T; j0 += BC)
        for (int i0 = j0; i0 < T; i0 += BR) {
            int chunks = (i0 + BR - 1 - j0) / 16 + 1;
            if (chunks > (T - j0 + 15) / 16) chunks = (T - j0 + 15) / 16;
            if (chunks > BC / 16) chunks = BC / 16;
            pairs += 16.0 * BR * chunks;
        }
    return pairs;
}
// q, k, v read, out and lse written (the tiles re-read K and V per query block: cached).
// With grouped-query attention (KVH < NH) k and v are KVH heads wide.
static void sim_attention_forward(Kernels* k, void* out, float* lse, const void* qkv, int B, int T, int C, int NH, int KVH) {
    double e = (double)k->act_bytes, BT = (double)B * T, hs = (double)C / NH, kvC = hs * KVH;
    const SimAttention impl = sim_attention_resolve(clk(k)->costs.attention, C / NH);
    double flops = models_cuda(k) ? 4.0 * B * NH * flash_forward_pairs(T, C / NH, impl) * hs : 2.0 * BT * T * C;
    sim_attention_kernel(k, C / NH, 0, flops, (2 * BT * C + 2 * BT * kvC) * e + 4.0 * B * NH * T);
}
// cpu: q, k, v, out, dout read, dqkv written. cuda, three launches: D = rowsum(dout * out)
// (dout, out read, D written); the main kernel (q, k, v, dout, lse, D read, dk and dv
// written, fp32 dQ slices written: R rows per (batch, head) of each key block's reach,
// R = nkb T - 128 nkb (nkb - 1) / 2, nkb = ceil(T / 128)); the slices read and dq written.
static void sim_attention_backward(Kernels* k, void* dqkv, const void* dout, const void* qkv, const void* out,
                                   const float* lse, int B, int T, int C, int NH, int KVH) {
    double e = (double)k->act_bytes, BT = (double)B * T, BTC = BT * C, hs = (double)C / NH, BTkv = BT * hs * KVH;
    if (!models_cuda(k)) {
        sim_attention_kernel(k, C / NH, 1, 5.0 * BT * T * C, (4 * BTC + 4 * BTkv) * e + 4.0 * B * NH * T);
        return;
    }
    // D: dout, out read; main: q, dout, k, v read, dk, dv written; dq written from the slices.
    const double nkb = (T + 127) / 128, R = nkb * T - 128 * nkb * (nkb - 1) / 2;
    const double bytes = (5 * BTC + 4 * BTkv) * e + 12.0 * B * NH * T + 8.0 * B * C * R;
    sim_attention_kernel(k, C / NH, 1, 10.0 * B * NH * flash_backward_pairs(T, C / NH) * hs, bytes);
}
static void sim_crossentropy(Kernels* k, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    double e = (double)k->act_bytes, NV = (double)N * Vp;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 5 * NV, (dloss != 0.0f ? 2 : 1) * NV * e + 8.0 * N);
}
// The vocab-parallel phases, one pass over this rank's logits each (finish: a second, the
// dlogits written, when it has a gradient to write) and their fp32 row vectors.
static void sim_crossentropy_tp_max(Kernels* k, float* row_max, const void* logits, int N, int V_local, int Vp_local) {
    double e = (double)k->act_bytes, NV = (double)N * Vp_local;
    sim_kernel(clk(k), SIM_WORK_VECTOR, NV, NV * e + 4.0 * N);
}
static void sim_crossentropy_tp_sums(Kernels* k, float* sums, const void* logits, const float* row_max, const int* targets,
                                     int N, int V_local, int Vp_local, int vocab_begin) {
    double e = (double)k->act_bytes, NV = (double)N * Vp_local;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 3 * NV, NV * e + 16.0 * N);
}
static void sim_crossentropy_tp_finish(Kernels* k, void* logits, float* losses, const float* row_max, const float* sums,
                                       const int* targets, int N, int V_local, int Vp_local, int vocab_begin, float dloss) {
    double e = (double)k->act_bytes, NV = dloss != 0.0f ? (double)N * Vp_local : 0.0;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 3 * NV, 2 * NV * e + 20.0 * N);
}
static void sim_gelu_forward(Kernels* k, void* out, const void* inp, size_t n) {
    sim_kernel(clk(k), SIM_WORK_VECTOR, 10.0 * (double)n, 2.0 * (double)n * k->act_bytes);
}
// The Llama family's vector kernels, one pass each: RMSNorm reads its input and writes its
// output and rstd; the backward is LayerNorm's without the bias (the same fp32 partial sums
// per block of rows on cuda); rope reads and writes the q and k heads; SwiGLU reads gate|up
// and writes the product, its backward reads dout and gate|up and writes both gradients.
static void sim_rmsnorm_forward(Kernels* k, void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                                float eps) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 4 * NC, 2 * NC * e + 4.0 * N + C * e);
}
static void sim_residual_rmsnorm_forward(Kernels* k, void* residual, void* out, float* rstd, const void* a, const void* b,
                                         const void* weight, int N, int C, float eps) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 5 * NC, 4 * NC * e + 4.0 * N + C * e);
}
static void sim_rmsnorm_backward(Kernels* k, void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                                 const float* rstd, int N, int C, int accumulate) {
    double e = (double)k->act_bytes, NC = (double)N * C;
    double bytes = 4 * NC * e + 4.0 * N + (accumulate ? 3.0 : 2.0) * C * e;
    if (models_cuda(k)) bytes += partials_bytes(N, C, 16, 512);
    // cuda: the kernel and the sum of its partial sums (no rows: a memset).
    sim_kernels(clk(k), launches(k, N > 0 ? 2 : 0), SIM_WORK_VECTOR, 9 * NC, bytes);
}
static void sim_rope(Kernels* k, void* qkv, int B, int T, int NH, int KVH, int hs, RopeParams p, int inverse) {
    double n = (double)B * T * (NH + KVH) * hs;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 3 * n, 2 * n * k->act_bytes);
}
static void sim_swiglu_forward(Kernels* k, void* out, const void* inp, int N, int F) {
    double nf = (double)N * F;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 8 * nf, 3 * nf * k->act_bytes);
}
static void sim_swiglu_backward(Kernels* k, void* dinp, const void* dout, const void* inp, int N, int F) {
    double nf = (double)N * F;
    sim_kernel(clk(k), SIM_WORK_VECTOR, 14 * nf, 5 * nf * k->act_bytes);
}
// cuda: cudaMemsetAsync, no kernel launch.
static void sim_zero(Kernels* k, void* p, size_t bytes) { sim_kernels(clk(k), launches(k, 0), SIM_WORK_VECTOR, 0, (double)bytes); }
// The token ids stay on the host: no kernel reads them.
static const int* sim_tokens(Kernels* k, int slot, const int* host, size_t n) { return host; }
static void sim_to_host_async(Kernels* k, void* dst, const void* src, size_t bytes) {}
// The destination is real host memory (a row of logits): zeros stand for the values.
static void sim_act_to_host_f32(Kernels* k, float* dst, const void* src, size_t n) { memset(dst, 0, n * sizeof(float)); }
static void sim_synchronize(Kernels* k) {}
// A mark is the compute clock at that point.
static void* sim_mark(Kernels* k) {
    double* t = (double*)malloc(sizeof(double));
    if (t) *t = clk(k)->compute;
    return t;
}
static double sim_mark_ms(Kernels* k, void* from, void* to) {
    return from && to ? (*(const double*)to - *(const double*)from) * 1e3 : 0.0;
}
static void sim_mark_free(Kernels* k, void* m) { free(m); }

void kernels_sim_init(Kernels* k, SimClock* clock, int padded_vocab, size_t act_bytes) {
    memset(k, 0, sizeof(*k));
    k->impl = clock;
    k->lm_head_rows = padded_vocab;
    k->act_bytes = act_bytes;
    // The cpu device backpropagates through the GELU via a scratch buffer; cuda's epilogue needs none.
    k->gelu_needs_scratch = act_bytes == sizeof(float);
    k->encoder_forward = sim_encoder_forward;
    k->encoder_backward = sim_encoder_backward;
    k->layernorm_forward = sim_layernorm_forward;
    k->residual_layernorm_forward = sim_residual_layernorm_forward;
    k->layernorm_backward = sim_layernorm_backward;
    k->matmul_forward = sim_matmul_forward;
    k->matmul_backward = sim_matmul_backward;
    k->attention_forward = sim_attention_forward;
    k->attention_backward = sim_attention_backward;
    k->crossentropy = sim_crossentropy;
    k->crossentropy_tp_max = sim_crossentropy_tp_max;
    k->crossentropy_tp_sums = sim_crossentropy_tp_sums;
    k->crossentropy_tp_finish = sim_crossentropy_tp_finish;
    k->gelu_forward = sim_gelu_forward;
    k->rmsnorm_forward = sim_rmsnorm_forward;
    k->residual_rmsnorm_forward = sim_residual_rmsnorm_forward;
    k->rmsnorm_backward = sim_rmsnorm_backward;
    k->rope = sim_rope;
    k->swiglu_forward = sim_swiglu_forward;
    k->swiglu_backward = sim_swiglu_backward;
    k->zero = sim_zero;
    k->tokens = sim_tokens;
    k->to_host_async = sim_to_host_async;
    k->act_to_host_f32 = sim_act_to_host_f32;
    k->synchronize = sim_synchronize;
    k->mark = sim_mark;
    k->mark_ms = sim_mark_ms;
    k->mark_free = sim_mark_free;
}
