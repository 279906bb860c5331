// The model's vector kernels against the GPU's copy bandwidth (issue #32: each within 1.25x of
// the time its bytes take at it): each kernel family of --profile-step's roofline table timed
// alone at the benchmarks' training shapes, in bf16:
//   d12  B=32 T=1024 C=768  V=50257 (Vp 50304)   (dev/bench/bench_gpu.sh's d12: 124M, B=32)
//   d48  B=16 T=1024 C=1600 V=50257 (Vp 50304)   (its d48: 1.5B, B=16)
// A row's bytes are the planner's model of the same call (kernels/kernels_sim.c, through the
// sim device's table: the bytes test_traffic_emu holds to what the kernels move), its time the
// median of --reps calls timed with events after --warmup calls, the copy bandwidth
// cuda_common.cuh's copy_bandwidth_gbs (cudaMemcpy device to device, read + write counted)
// measured once at the start, and ratio = time / (bytes / copy bandwidth).
// Rows: encoder forward and backward (the backward's CUB sort included), layernorm forward,
// residual + layernorm forward, layernorm backward (accumulating into dinp, fresh dweight and
// dbias), cross-entropy (fused softmax forward and backward, in place), the GELU forward (the
// kernel that runs where the epilogue does not: --gelu-fusion 0, selective recompute), the
// bias gradient's reduction (where the BGRADB epilogue is not used: accumulating). The
// optimizer's kernels (grad norm, AdamW) are the FSDP backend's and not timed here.
//
//   build/bench_vector_cuda [--shape d12|d48]... [--reps N] [--warmup N] [--smoke]
//
// --smoke: one tiny shape (B=2 T=64 C=64 V=500), 1 rep, 1 warm-up: that every row runs (the
// CPU emulator's check, dev/test/test_kernels_emu.sh); its times mean nothing.
// Output: a line for the copy bandwidth, then one line per kernel and shape:
//   vector copy_gbs=3712.4 how="cudaMemcpy device to device, 256 MiB x 5, best; read + write counted"
//   vector kernel=layernorm_forward shape=d12 mb=.. ms=.. copy_ms=.. ratio=.. target=met|NOT_met
// Exit status: 0; 2 on bad arguments, no GPU or no copy bandwidth. GPU only: built by `make
// build/bench_vector_cuda` where nvcc is (scripts/device_prebuild.sh, device_check.sh).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda_activation.cuh"
#include "kernels/cuda_bias.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_crossentropy.cuh"
#include "kernels/cuda_encoder.cuh"
#include "kernels/cuda_norm.cuh"
#include "kernels/kernels_sim.h"

struct Shape {
    const char* name;
    int B, T, C, V, Vp;
};
static const Shape kShapes[] = {{"d12", 32, 1024, 768, 50257, 50304}, {"d48", 16, 1024, 1600, 50257, 50304}};
static const Shape kSmoke = {"smoke", 2, 64, 64, 500, 512};
static const double kTarget = 1.25;

// Uniform values in [-scale, scale) from a hash of the index.
__global__ void bench_fill_kernel(bf16* x, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2bfloat16(((float)(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * scale);
    }
}
__global__ void bench_tokens_kernel(int* t, int n, int V) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) t[i] = (int)((i * 7919u) % (unsigned)V);
}

// The device buffers of one shape (bf16 activations and weights, fp32 statistics).
struct Buffers {
    bf16 *a, *b, *out, *residual, *weight, *bias, *dweight, *dbias, *wte, *wpe, *logits;
    float *mean, *rstd, *losses;
    int* tokens;
    void* scratch;
    size_t scratch_bytes;
};

static bf16* bench_alloc(size_t n, uint32_t seed, float scale) {
    bf16* p = NULL;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(bf16)));
    bench_fill_kernel<<<(unsigned)std::min(ceil_div(n, (size_t)256), (size_t)1024), 256>>>(p, n, seed, scale);
    CUDA_LAUNCH_CHECK();
    return p;
}

// One timed row: fn() run warmup times, then reps times between events; the median.
template <class F>
static double time_ms(F fn, int reps, int warmup, cudaStream_t s) {
    for (int i = 0; i < warmup; i++) fn();
    std::vector<cudaEvent_t> ev(reps + 1);
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventRecord(ev[0], s));
    for (int i = 0; i < reps; i++) {
        fn();
        CUDA_CHECK(cudaEventRecord(ev[i + 1], s));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; i++) CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    for (auto& e : ev) CUDA_CHECK(cudaEventDestroy(e));
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

// The sim device's bytes for one call (kernels_sim.c's model): the clock's bytes before and after.
static double sim_bytes(SimClock* c) { return c->mem_bytes[0] + c->mem_bytes[1] + c->mem_bytes[2]; }

static void row(const char* kernel, const Shape& s, double bytes, double ms, double copy_gbs) {
    const double copy_ms = bytes / (copy_gbs * 1e9) * 1e3, ratio = ms / copy_ms;
    printf("vector kernel=%s shape=%s mb=%.3f ms=%.4f copy_ms=%.4f ratio=%.2f target=%s\n", kernel, s.name, bytes / 1e6, ms,
           copy_ms, ratio, ratio <= kTarget ? "met" : "NOT_met");
    fflush(stdout);
}

static void bench_shape(const Shape& s, int reps, int warmup, double copy_gbs, cudaStream_t st) {
    const int B = s.B, T = s.T, C = s.C, N = B * T;
    const size_t NC = (size_t)N * C;
    Buffers d;
    d.a = bench_alloc(NC, 1, 1.0f);
    d.b = bench_alloc(NC, 2, 1.0f);
    d.out = bench_alloc(NC, 3, 1.0f);
    d.residual = bench_alloc(NC, 4, 1.0f);
    d.weight = bench_alloc(C, 5, 1.0f);
    d.bias = bench_alloc(C, 6, 0.1f);
    d.dweight = bench_alloc(C, 7, 0.0f);
    d.dbias = bench_alloc((size_t)4 * C, 8, 0.0f);
    d.wte = bench_alloc((size_t)s.Vp * C, 9, 0.02f);
    d.wpe = bench_alloc((size_t)T * C, 10, 0.02f);
    d.logits = bench_alloc((size_t)N * s.Vp, 11, 2.0f);
    CUDA_CHECK(cudaMalloc(&d.mean, (size_t)N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d.rstd, (size_t)N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d.losses, (size_t)N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d.tokens, (size_t)N * sizeof(int)));
    bench_tokens_kernel<<<std::min(ceil_div(N, 256), 256), 256>>>(d.tokens, N, s.V);
    CUDA_LAUNCH_CHECK();
    d.scratch_bytes = std::max({encoder_backward_scratch_bytes(B, T, s.V), layernorm_backward_scratch_bytes(N, C),
                                bias_backward_scratch_bytes(N, 4 * C)});
    CUDA_CHECK(cudaMalloc(&d.scratch, d.scratch_bytes));
    // The LayerNorm statistics the backward reads.
    layernorm_forward_cuda(d.out, d.mean, d.rstd, d.a, d.weight, d.bias, N, C, 1e-5f, st);
    CUDA_CHECK(cudaDeviceSynchronize());

    // The sim twin: its calls cost, never touch memory (the pointers are only passed along).
    SimClock clock;
    memset(&clock, 0, sizeof(clock));
    clock.costs.peak_flops = clock.costs.mem_bw = 1;
    clock.costs.matmul_eff = clock.costs.attention_eff = clock.costs.vector_eff = clock.costs.mem_eff = 1;
    clock.kind = -1;
    Kernels twin;
    kernels_sim_init(&twin, &clock, s.Vp, sizeof(bf16));
    double before;
#define BYTES(call) (before = sim_bytes(&clock), twin.call, sim_bytes(&clock) - before)

    double bytes = BYTES(encoder_forward(&twin, d.out, d.tokens, d.wte, d.wpe, B, T, C, 0, s.V));
    row("encoder_forward", s, bytes, time_ms([&] { encoder_forward_cuda(d.out, d.tokens, d.wte, d.wpe, B, T, C, 0, s.V, st); },
                                             reps, warmup, st), copy_gbs);
    bytes = BYTES(encoder_backward(&twin, d.wte, d.wpe, d.a, d.tokens, B, T, C, 0, s.V, 1));
    row("encoder_backward", s, bytes, time_ms([&] { encoder_backward_cuda(d.wte, d.wpe, d.scratch, d.scratch_bytes, d.a, d.tokens, B, T, C,
                                                                          s.V, 0, s.V, 1, st); }, reps, warmup, st), copy_gbs);
    bytes = BYTES(layernorm_forward(&twin, d.out, d.mean, d.rstd, d.a, d.weight, d.bias, N, C, 1e-5f));
    row("layernorm_forward", s, bytes, time_ms([&] { layernorm_forward_cuda(d.out, d.mean, d.rstd, d.a, d.weight, d.bias, N, C, 1e-5f, st); },
                                               reps, warmup, st), copy_gbs);
    bytes = BYTES(residual_layernorm_forward(&twin, d.residual, d.out, d.mean, d.rstd, d.a, d.b, d.weight, d.bias, N, C, 1e-5f));
    row("residual_layernorm_forward", s, bytes,
        time_ms([&] { fused_residual_layernorm_forward_cuda(d.residual, d.out, d.mean, d.rstd, d.a, d.b, d.weight, d.bias, N, C, 1e-5f, st); },
                reps, warmup, st), copy_gbs);
    bytes = BYTES(layernorm_backward(&twin, d.b, d.dweight, d.dbias, d.out, d.a, d.weight, d.mean, d.rstd, N, C, 0));
    row("layernorm_backward", s, bytes,
        time_ms([&] { layernorm_backward_cuda(d.b, d.dweight, d.dbias, d.scratch, d.scratch_bytes, d.out, d.a, d.weight, d.mean, d.rstd,
                                              N, C, 0, st); }, reps, warmup, st), copy_gbs);
    // In place: each call overwrites the logits with their gradient (the next call's input:
    // values in the same range, the same work).
    bytes = BYTES(crossentropy(&twin, d.logits, d.losses, d.tokens, N, s.V, s.Vp, 1.0f / N));
    row("crossentropy_fwd_bwd", s, bytes,
        time_ms([&] { crossentropy_softmax_fused_cuda(d.logits, d.losses, d.tokens, N, s.V, s.Vp, 1.0f / N, (const float*)NULL, st); }, reps, warmup, st),
        copy_gbs);
    bytes = BYTES(gelu_forward(&twin, d.out, d.a, NC));
    row("gelu_forward", s, bytes, time_ms([&] { gelu_forward_cuda(d.out, d.a, NC, st); }, reps, warmup, st), copy_gbs);
    // The bias gradient's reduction over an MLP's 4C columns (accumulating: no epilogue then).
    const int OC = 4 * C, Nb = (int)(NC / OC);
    bytes = BYTES(matmul_backward(&twin, NULL, NULL, d.dbias, d.a, NULL, NULL, NULL, Nb, C, OC, 1));
    row("bias_backward", s, bytes,
        time_ms([&] { bias_backward_cuda(d.dbias, d.scratch, d.scratch_bytes, d.a, Nb, OC, 1, st); }, reps, warmup, st), copy_gbs);
#undef BYTES

    void* bufs[] = {d.a, d.b, d.out, d.residual, d.weight, d.bias, d.dweight, d.dbias, d.wte, d.wpe, d.logits,
                    d.mean, d.rstd, d.losses, d.tokens, d.scratch};
    for (void* p : bufs) CUDA_CHECK(cudaFree(p));
}

int main(int argc, char** argv) {
    int reps = 20, warmup = 3, smoke = 0, shapes[4], nshapes = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--smoke")) {
            smoke = 1;
        } else if (!strcmp(a, "--shape") && v && nshapes < 4 && (!strcmp(v, "d12") || !strcmp(v, "d48"))) {
            shapes[nshapes++] = strcmp(v, "d12") ? 1 : 0;
            i++;
        } else if ((!strcmp(a, "--reps") || !strcmp(a, "--warmup")) && v && atoi(v) >= (strcmp(a, "--reps") ? 0 : 1) &&
                   atoi(v) <= 1000) {
            *(strcmp(a, "--reps") ? &warmup : &reps) = atoi(v);
            i++;
        } else {
            fprintf(stderr, "bench_vector_cuda: bad argument '%s' (usage: [--shape d12|d48]... [--reps 1..1000] "
                            "[--warmup 0..1000] [--smoke])\n", a);
            return 2;
        }
    }
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
        printf("bench_vector_cuda: no GPU\n");
        return 2;
    }
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    char how[160];
    const double gbs = copy_bandwidth_gbs(st, NULL, NULL, how, sizeof(how));
    if (gbs <= 0) {
        printf("bench_vector_cuda: no copy bandwidth: %s\n", how);
        return 2;
    }
    printf("vector copy_gbs=%.1f how=\"%s\"\n", gbs, how);
    if (smoke) {
        bench_shape(kSmoke, 1, 1, gbs, st);
    } else {
        if (nshapes == 0) shapes[nshapes++] = 0, shapes[nshapes++] = 1;
        for (int i = 0; i < nshapes; i++) bench_shape(kShapes[shapes[i]], reps, warmup, gbs, st);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    return 0;
}
