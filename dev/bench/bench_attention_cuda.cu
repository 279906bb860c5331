// Attention at training shapes, every implementation: forward and backward of the causal
// attention kernels (kernels/cuda_attention.cuh) timed with CUDA events at the shapes the
// benchmarks train, in bf16, with GPT-2's heads (KVH = NH):
//   d12  B=32 T=1024 NH=12 hs=64   (dev/bench/bench_gpu.sh's d12: 124M, B=32)
//   d48  B=16 T=1024 NH=25 hs=64   (its d48: 1.5B, B=16)
// FLOPs counted as the FlashAttention papers count them: the forward is two GEMMs of
// 2*T*T*hs per head, half of it under the causal mask: 4*B*NH*T*T*hs / 2; the backward 2.5x
// that (five GEMMs instead of two); fwd+bwd 3.5x. TFLOP/s = FLOPs / time.
//
//   build/bench_attention_cuda [--impl NAME]... [--shape d12|d48]... [--reps N] [--warmup N]
//
// --impl: flash, flash-pipelined, cublas, cudnn (default all four, in that order); --shape: default both;
// --reps [20] timed calls of each direction after --warmup [3] untimed forward+backward pairs.
// An implementation is looked up by name (attention_impl_from_name): a name this build does
// not have is reported "not available", as is one whose context cannot be initialised on this
// machine (a library missing, a GPU too old), or whose graphs for a shape cuDNN refuses
// (attention_context_prepare; timing it would time flash's fallback); none is a failure. Each implementation runs in
// a child process of its own (the parent makes no CUDA call, so fork is safe), so that a
// context whose initialisation exits the process takes only its own line with it.
// Output, one line per implementation and shape:
//   attention impl=flash shape=d12 B=32 T=1024 NH=12 hs=64 fwd_ms=.. fwd_tflops=.. bwd_ms=.. bwd_tflops=.. fwdbwd_ms=.. fwdbwd_tflops=..
//   attention impl=cudnn not available: REASON
//   attention impl=cudnn shape=d48 not available: REASON
// Exit status: 0; 1 when an implementation that initialised failed; 2 on bad arguments or
// no usable GPU (sm_80 or newer). GPU only: built by `make build/bench_attention_cuda` where
// nvcc is (scripts/device_prebuild.sh, scripts/device_check.sh), not part of `make all`.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cuda_attention.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_matmul.cuh"

struct Shape {
    const char* name;
    int B, T, NH, hs;
};
static const Shape kShapes[] = {{"d12", 32, 1024, 12, 64}, {"d48", 16, 1024, 25, 64}};
static const int kNShapes = (int)(sizeof kShapes / sizeof kShapes[0]);
static const char* const kImplNames[] = {"flash", "flash-pipelined", "cublas", "cudnn"};
static const int kNImplNames = (int)(sizeof kImplNames / sizeof kImplNames[0]);

struct Options {
    const char* impls[8];
    int nimpls;
    int shapes[8];
    int nshapes;
    int reps, warmup;
};

// Uniform values in [-scale, scale) from a hash of the index: no host copy of the tensors.
__global__ void fill_uniform_kernel(bf16* x, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        x[i] = __float2bfloat16(scale * ((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
}
static bf16* device_uniform(size_t n, uint32_t seed, float scale) {
    bf16* p = NULL;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(bf16)));
    fill_uniform_kernel<<<1024, 256>>>(p, n, seed, scale);
    CUDA_CHECK(cudaGetLastError());
    return p;
}

// Times one implementation at one shape and prints its line.
static void bench_shape(AttentionContext* ac, MatmulContext* mm, const char* impl, const Shape& s,
                        const Options& o) {
    const int B = s.B, T = s.T, NH = s.NH, C = NH * s.hs;
    // cuDNN builds its graphs for the shape first: a shape it refuses would otherwise run its
    // forward on flash (attention_forward_cuda's fallback) and be timed under cudnn's name.
    char why[512];
    if (attention_context_prepare(ac, B, T, C, NH, NH, 0, why, sizeof(why)) != 0) {
        printf("attention impl=%s shape=%s not available: %s\n", impl, s.name, why);
        fflush(stdout);
        return;
    }
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    bf16* qkv = device_uniform(nqkv, 1u, 2.0f);
    bf16* dout = device_uniform(nout, 2u, 1.0f);
    bf16 *out = NULL, *dqkv = NULL;
    float* lse = NULL;
    CUDA_CHECK(cudaMalloc(&out, nout * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&dqkv, nqkv * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&lse, (size_t)B * NH * T * sizeof(float)));
    const size_t fs = attention_forward_scratch_bytes(ac->impl, B, T, C, NH);
    const size_t bs = attention_backward_scratch_bytes(ac->impl, B, T, C, NH);
    const size_t ss = fs > bs ? fs : bs;
    void* scratch = NULL;
    if (ss) CUDA_CHECK(cudaMalloc(&scratch, ss));
    for (int i = 0; i < o.warmup; i++) {
        attention_forward_cuda(ac, mm, out, lse, qkv, scratch, ss, B, T, C, NH, NH, 0);
        attention_backward_cuda(ac, mm, dqkv, dout, qkv, out, lse, scratch, ss, B, T, C, NH, NH, 0);
    }
    cudaEvent_t e[3];
    for (int i = 0; i < 3; i++) CUDA_CHECK(cudaEventCreate(&e[i]));
    CUDA_CHECK(cudaEventRecord(e[0], 0));
    for (int i = 0; i < o.reps; i++) attention_forward_cuda(ac, mm, out, lse, qkv, scratch, ss, B, T, C, NH, NH, 0);
    CUDA_CHECK(cudaEventRecord(e[1], 0));
    for (int i = 0; i < o.reps; i++)
        attention_backward_cuda(ac, mm, dqkv, dout, qkv, out, lse, scratch, ss, B, T, C, NH, NH, 0);
    CUDA_CHECK(cudaEventRecord(e[2], 0));
    CUDA_CHECK(cudaEventSynchronize(e[2]));
    float fwd_ms = 0.0f, bwd_ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&fwd_ms, e[0], e[1]));
    CUDA_CHECK(cudaEventElapsedTime(&bwd_ms, e[1], e[2]));
    fwd_ms /= o.reps;
    bwd_ms /= o.reps;
    const double fwd_flops = 4.0 * B * NH * (double)T * T * s.hs / 2.0;  // causal: half of QK^T and PV
    const double bwd_flops = 2.5 * fwd_flops;
    printf("attention impl=%s shape=%s B=%d T=%d NH=%d hs=%d fwd_ms=%.4f fwd_tflops=%.1f bwd_ms=%.4f bwd_tflops=%.1f "
           "fwdbwd_ms=%.4f fwdbwd_tflops=%.1f\n",
           impl, s.name, B, T, NH, s.hs, fwd_ms, fwd_flops / (fwd_ms * 1e9), bwd_ms, bwd_flops / (bwd_ms * 1e9),
           fwd_ms + bwd_ms, (fwd_flops + bwd_flops) / ((fwd_ms + bwd_ms) * 1e9));
    fflush(stdout);
    for (int i = 0; i < 3; i++) CUDA_CHECK(cudaEventDestroy(e[i]));
    if (scratch) CUDA_CHECK(cudaFree(scratch));
    CUDA_CHECK(cudaFree(qkv)); CUDA_CHECK(cudaFree(dout)); CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaFree(dqkv)); CUDA_CHECK(cudaFree(lse));
}

// The child's work for one implementation. It writes one byte to `ready` once the contexts
// exist: the parent tells an implementation unavailable here (exited before) from one that
// failed (after). Exit status 2: no usable GPU.
static int run_impl(const char* impl, int id, const Options& o, int ready) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_attention_cuda: no GPU\n");
        return 2;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        fprintf(stderr, "bench_attention_cuda: %s is sm_%d%d, the kernels need sm_80 or newer\n", prop.name,
                prop.major, prop.minor);
        return 2;
    }
    MatmulContext mm;
    matmul_context_init(&mm);
    AttentionContext ac;
    attention_context_init(&ac, (AttentionImpl)id);
    if (write(ready, "R", 1) != 1) return 1;
    for (int i = 0; i < o.nshapes; i++) bench_shape(&ac, &mm, impl, kShapes[o.shapes[i]], o);
    matmul_context_destroy(&mm);
    return 0;
}

static void usage(const char* why) {
    fprintf(stderr, "bench_attention_cuda: %s\nusage: build/bench_attention_cuda [--impl flash|flash-pipelined|cublas|cudnn]... "
            "[--shape d12|d48]... [--reps N] [--warmup N]\n", why);
    exit(2);
}

static int positive(const char* flag, const char* v, int min) {
    char* end = NULL;
    const long x = strtol(v, &end, 10);
    if (!*v || *end || x < min || x > 100000) {
        char why[160];
        snprintf(why, sizeof why, "%s wants a whole number from %d to 100000, got '%s'", flag, min, v);
        usage(why);
    }
    return (int)x;
}

int main(int argc, char** argv) {
    Options o;
    memset(&o, 0, sizeof o);
    o.reps = 20;
    o.warmup = 3;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: build/bench_attention_cuda [--impl flash|flash-pipelined|cublas|cudnn]... [--shape d12|d48]... "
                   "[--reps N] [--warmup N]\n(see dev/bench/bench_attention_cuda.cu's top for what it prints)\n");
            return 0;
        }
        if (i + 1 >= argc) usage("a flag without its value, or an unknown argument");
        const char* v = argv[++i];
        if (!strcmp(a, "--impl")) {
            if (o.nimpls == 8) usage("--impl given more than 8 times");
            o.impls[o.nimpls++] = v;
        } else if (!strcmp(a, "--shape")) {
            int k = 0;
            while (k < kNShapes && strcmp(kShapes[k].name, v)) k++;
            if (k == kNShapes) usage("--shape wants d12 or d48");
            if (o.nshapes == 8) usage("--shape given more than 8 times");
            o.shapes[o.nshapes++] = k;
        } else if (!strcmp(a, "--reps")) {
            o.reps = positive(a, v, 1);
        } else if (!strcmp(a, "--warmup")) {
            o.warmup = positive(a, v, 0);
        } else {
            usage("unknown argument");
        }
    }
    if (o.nimpls == 0)
        for (int i = 0; i < kNImplNames; i++) o.impls[o.nimpls++] = kImplNames[i];
    if (o.nshapes == 0)
        for (int i = 0; i < kNShapes; i++) o.shapes[o.nshapes++] = i;
    printf("# attention, causal, bf16, KVH = NH; FLOPs: forward 4*B*NH*T*T*hs/2, backward 2.5x, fwd+bwd 3.5x; "
           "%d warm-up pairs, then the mean of %d calls of each direction\n", o.warmup, o.reps);
    fflush(stdout);

    int failed = 0;
    for (int i = 0; i < o.nimpls; i++) {
        const char* impl = o.impls[i];
        const int id = attention_impl_from_name(impl);
        if (id < 0) {
            printf("attention impl=%s not available: this build has no attention implementation of that name\n", impl);
            fflush(stdout);
            continue;
        }
        int fds[2];
        if (pipe(fds) != 0) { perror("bench_attention_cuda: pipe"); return 1; }
        const pid_t pid = fork();
        if (pid < 0) { perror("bench_attention_cuda: fork"); return 1; }
        if (pid == 0) {
            close(fds[0]);
            const int rc = run_impl(impl, id, o, fds[1]);
            fflush(stdout);
            _exit(rc);
        }
        close(fds[1]);
        char byte = 0;
        const bool ready = read(fds[0], &byte, 1) == 1;
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code == 2 && !ready) return 2;  // no usable GPU: said by the child
        if (!ready) {
            printf("attention impl=%s not available: its context could not be initialised here (status %d; its "
                   "message above)\n", impl, code);
        } else if (code != 0) {
            printf("attention impl=%s FAILED: status %d after its context was made (its message above)\n", impl, code);
            failed = 1;
        }
        fflush(stdout);
    }
    return failed;
}
