/*
train_gpt: GPT-2 pretraining with full FSDP / ZeRO-3 sharding.

    mpirun -np 4 ./train_gpt --device cpu -m d6 -i "data/tinyshakespeare/tiny_shakespeare_train.bin"

This file holds main(): the command line, setup, the training loop, and the GPT-2 model
schedule (which unit to gather, which kernel to run). The sharding engine is in fsdp/, the
data in dataloader/, the kernels in kernels/. Compiled by nvcc when it exists (the CUDA
device slots in beside the cpu one) and by the host C++ compiler otherwise; either way the
cpu device works on a machine without a GPU.
*/
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <cblas.h>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.cuh"
#include "kernels/cuda_matmul.cuh"
#include "kernels/cuda_attention.cuh"
#include "fsdp/backend_cuda.cuh"
#endif

#include "dataloader/loader.h"
#include "dataloader/tokenizer.h"
#include "fsdp/backend_cpu.h"
#include "fsdp/flat_unit.h"
#include "fsdp/fsdp.h"
#include "comm/process_group.h"
#include "checkpoint/checkpoint.h"
#include "kernels/cpu_kernels.h"
#include "model/gpt2.h"

extern "C" void openblas_set_num_threads(int num_threads);

// Element i of a buffer of elem-byte elements (the compute dtype differs by device: fp32 on
// the cpu, bf16 on cuda, so the schedule addresses activations and parameters in bytes).
static inline void* elem_at(const void* base, size_t i, size_t elem) { return (char*)base + i * elem; }

// Pointers into a gathered unit (parameters or gradients: same layout), in the compute dtype.
typedef struct { void *wte, *wpe, *lnfw, *lnfb; } RootTensors;
typedef struct { void* t[BLOCK_TENSORS]; } BlockTensors;

static RootTensors root_tensors(const ModelLayout* m, void* base, size_t elem) {
    const FlatUnit* u = &m->units[0];
    RootTensors r = {elem_at(base, u->tensors[ROOT_WTE].offset, elem), elem_at(base, u->tensors[ROOT_WPE].offset, elem),
                     elem_at(base, u->tensors[ROOT_LNF_W].offset, elem), elem_at(base, u->tensors[ROOT_LNF_B].offset, elem)};
    return r;
}

static BlockTensors block_tensors(const ModelLayout* m, int u, int layer_in_unit, void* base, size_t elem) {
    BlockTensors b;
    for (int j = 0; j < BLOCK_TENSORS; j++)
        b.t[j] = elem_at(base, m->units[u].tensors[layer_in_unit * BLOCK_TENSORS + j].offset, elem);
    return b;
}

// ----------------------------------------------------------------------------------------
// Initialisation: GPT-2's (normal 0.02, residual projections scaled by 1/sqrt(2L), biases
// zero, LayerNorm weight one). Each element's value is a pure function of the seed, the
// tensor and the element index, so every rank can initialise just its shard and the result
// does not depend on the world size.

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h1 = splitmix64(seed ^ splitmix64(stream * 0x100000001b3ULL + 2 * index));
    uint64_t h2 = splitmix64(h1 ^ 0xda942042e4dd58b5ULL);
    double u1 = ((double)(h1 >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
    double u2 = (double)(h2 >> 11) / 9007199254740992.0;          // [0, 1)
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Writes the host mirror of the master shards; the caller uploads it (fsdp_upload_state).
static void init_parameters(const ModelLayout* m, Fsdp* f, uint64_t seed) {
    const GPT2Config* c = &m->config;
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    for (int u = 0; u < m->n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        float* shard = fsdp_host_master_shard(f, u);
        const FlatUnit* unit = &m->units[u];
        for (int i = 0; i < unit->n_tensors; i++) {
            const FlatTensor* t = &unit->tensors[i];
            size_t lo, hi;
            if (!flat_tensor_slice(t, begin, end, &lo, &hi)) continue;
            int kind, layer;
            tensor_kind(m, u, i, &kind, &layer);
            uint64_t stream = (uint64_t)kind * 4096 + (uint64_t)layer;
            float* dst = shard + (t->offset + lo - begin);
            // Each element is a pure function of its index: threads do not change the result.
            #pragma omp parallel for schedule(static)
            for (size_t e = lo; e < hi; e++) {
                float v;
                if (kind == K_LN1W || kind == K_LN2W || kind == K_LNFW) v = 1.0f;
                else if (t->rows == 1) v = 0.0f;  // biases
                else if (kind == K_WTE && e / t->cols >= (size_t)c->vocab_size) v = 0.0f;  // padded rows
                else v = normal_at(seed, stream, e) * ((kind == K_ATTPROJW || kind == K_FCPROJW) ? proj_std : 0.02f);
                dst[e - lo] = v;
            }
        }
    }
}

// Every rank reads only the parts of the file that fall into its shards, into the host mirror
// of the master shards; the caller uploads it (fsdp_upload_state).
static int load_model_file(const ModelLayout* m, Fsdp* f, const char* path, int version, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    size_t elem = version == 3 ? 4 : 2;
    uint16_t* staging = NULL;
    size_t staging_len = 0;
    for (int u = 0; u < m->n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        float* shard = fsdp_host_master_shard(f, u);
        for (int i = 0; i < m->units[u].n_tensors; i++) {
            const FlatTensor* t = &m->units[u].tensors[i];
            size_t lo, hi;
            if (!flat_tensor_slice(t, begin, end, &lo, &hi)) continue;
            int kind, layer;
            tensor_kind(m, u, i, &kind, &layer);
            off_t at = (off_t)(256 * sizeof(int32_t) + (llmc_offset(&m->config, kind, layer) + lo) * elem);
            float* dst = shard + (t->offset + lo - begin);
            size_t n = hi - lo, bytes = n * elem;
            void* buf = dst;
            if (elem == 2) {
                if (staging_len < n) { free(staging); staging = (uint16_t*)malloc(n * 2); staging_len = n; }
                buf = staging;
            }
            size_t done = 0;
            while (done < bytes) {
                ssize_t r = pread(fd, (char*)buf + done, bytes - done, at + (off_t)done);
                if (r <= 0) {
                    snprintf(err, errlen, "%s: read of %s failed: %s", path, t->name, r == 0 ? "unexpected end of file" : strerror(errno));
                    free(staging); close(fd); return 1;
                }
                done += (size_t)r;
            }
            if (elem == 2) for (size_t e = 0; e < n; e++) dst[e] = bf16_to_float(staging[e]);
        }
    }
    free(staging);
    close(fd);
    return 0;
}

// Rank 0 collects each unit's shards from its shard group and writes them; the file appears
// atomically (written as PATH.tmp, synced, renamed). Reads the host mirror: the caller
// downloads the state first (fsdp_download_state).
static int save_model_file(const ModelLayout* m, Fsdp* f, const ProcessGroup* pg, const char* path, char* err, size_t errlen) {
    int writer = pg->rank == 0;
    int fd = -1, failed = 0;
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (writer) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno)); failed = 1; }
        else {
            const GPT2Config* c = &m->config;
            int32_t h[256] = {0};
            h[0] = MODEL_FILE_MAGIC; h[1] = 3; h[2] = c->max_seq_len; h[3] = c->vocab_size;
            h[4] = c->num_layers; h[5] = c->num_heads; h[6] = c->channels; h[7] = c->padded_vocab_size;
            if (pwrite(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h)) { snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(errno)); failed = 1; }
        }
    }
    comm_broadcast(pg->world_comm, &failed, sizeof(failed), 0);
    if (failed) return 1;
    size_t max_padded = 0;
    for (int u = 0; u < m->n_units; u++) if (m->units[u].padded > max_padded) max_padded = m->units[u].padded;
    float* full = writer ? (float*)malloc(max_padded * sizeof(float)) : NULL;
    for (int u = 0; u < m->n_units && !failed; u++) {
        const FlatUnit* unit = &m->units[u];
        // Only the first replica group's ranks take part; the others hold the same shards.
        if (pg->replicate_rank == 0)
            comm_gather(pg->shard_comm, fsdp_host_master_shard(f, u), unit->shard * sizeof(float), full, 0);
        if (writer) {
            for (int i = 0; i < unit->n_tensors && !failed; i++) {
                const FlatTensor* t = &unit->tensors[i];
                int kind, layer;
                tensor_kind(m, u, i, &kind, &layer);
                off_t at = (off_t)(256 * sizeof(int32_t) + llmc_offset(&m->config, kind, layer) * 4);
                size_t bytes = t->numel * 4, done = 0;
                while (done < bytes) {
                    ssize_t w = pwrite(fd, (char*)(full + t->offset) + done, bytes - done, at + (off_t)done);
                    if (w <= 0) { snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(errno)); failed = 1; break; }
                    done += (size_t)w;
                }
            }
        }
    }
    if (writer) {
        if (!failed && fsync(fd) != 0) { snprintf(err, errlen, "%s: fsync failed: %s", tmp, strerror(errno)); failed = 1; }
        if (close(fd) != 0 && !failed) { snprintf(err, errlen, "%s: close failed: %s", tmp, strerror(errno)); failed = 1; }
        if (!failed && rename(tmp, path) != 0) { snprintf(err, errlen, "%s: rename failed: %s", path, strerror(errno)); failed = 1; }
        if (failed) unlink(tmp);
        free(full);
    }
    comm_broadcast(pg->world_comm, &failed, sizeof(failed), 0);
    return failed;
}

// ----------------------------------------------------------------------------------------
// Devices: the operations the model schedule calls. One schedule (gpt2_forward,
// gpt2_backward) drives either table; pointers are void* in the device's compute dtype
// (act_bytes per element), LayerNorm statistics, attention log-sum-exps and losses are fp32
// on every device.
//
// Semantics, the same on both devices (where a kernel differs, its wrapper makes up for it):
//   forward ops overwrite their outputs;
//   matmul_forward with pre_gelu != NULL: pre_gelu = inp W^T + b, out = gelu(pre_gelu);
//   matmul_backward: dinp is OVERWRITTEN (dout W; times gelu'(pre_gelu) when pre_gelu is
//     given), dweight and dbias ACCUMULATE (the engine zeroes gradient buffers);
//   attention_backward: dqkv is OVERWRITTEN;
//   layernorm_backward, encoder_backward: everything ACCUMULATES (dinp too: the residual
//     stream's gradient is summed over the branches);
//   crossentropy: losses[N] fp32; with dloss != 0 the logits become dlogits in place.
// The cpu table wraps kernels/cpu_kernels.h, zeroing where a CPU kernel accumulates, in the
// order the cpu device always ran them: its results are bitwise those of the reference.

typedef struct Device Device;
struct Device {
    const char* name;          // "cpu" or "cuda"
    size_t act_bytes;          // bytes per activation element (4: fp32, 2: bf16)
    int gelu_needs_scratch;    // matmul_backward with pre_gelu needs gelu_scratch [N, 4C]
    void* gelu_scratch;        // set by gpt2_build (cpu: the gradient w.r.t. the GELU output)
    void* impl;                // the device's own state (cuda: stream, cuBLASLt, scratch)

    void (*encoder_forward)(Device* d, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C);
    void (*encoder_backward)(Device* d, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C);
    void (*layernorm_forward)(Device* d, void* out, float* mean, float* rstd, const void* inp,
                              const void* weight, const void* bias, int N, int C);
    // residual = a + b, then out = layernorm(residual)
    void (*residual_layernorm_forward)(Device* d, void* residual, void* out, float* mean, float* rstd,
                                       const void* a, const void* b, const void* weight, const void* bias, int N, int C);
    void (*layernorm_backward)(Device* d, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                               const void* weight, const float* mean, const float* rstd, int N, int C);
    void (*matmul_forward)(Device* d, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                           int N, int C, int OC);
    void (*matmul_backward)(Device* d, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                            const void* weight, const void* pre_gelu, int N, int C, int OC);
    void (*attention_forward)(Device* d, void* out, float* lse, const void* qkv, int B, int T, int C, int NH);
    void (*attention_backward)(Device* d, void* dqkv, const void* dout, const void* qkv, const void* out,
                               const float* lse, int B, int T, int C, int NH);
    void (*crossentropy)(Device* d, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss);
    void (*zero)(Device* d, void* p, size_t bytes);
    // Token ids where the kernels can read them (slot 0: inputs, 1: targets); may return host.
    const int* (*tokens)(Device* d, int slot, const int* host, size_t n);
    // Device -> host: fp32 bytes, queued behind the work so far (done after synchronize).
    void (*to_host_async)(Device* d, void* dst_host, const void* src, size_t bytes);
    // n activation elements -> host fp32 (blocking).
    void (*act_to_host_f32)(Device* d, float* dst, const void* src, size_t n);
    void (*synchronize)(Device* d);
    // --profile-step: a mark is a point in the device's work (cuda: an event recorded on the
    // model's stream; cpu: the host clock, its kernels being synchronous); mark_ms is the
    // time between two marks, valid once synchronize has returned.
    void* (*mark)(Device* d);
    double (*mark_ms)(Device* d, void* from, void* to);
    void (*mark_free)(Device* d, void* m);
};

// ---- cpu: fp32, kernels/cpu_kernels.h --------------------------------------------------

static void dev_cpu_encoder_forward(Device* d, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C) {
    encoder_forward((float*)out, inp, (const float*)wte, (const float*)wpe, B, T, C);
}
static void dev_cpu_encoder_backward(Device* d, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C) {
    encoder_backward((float*)dwte, (float*)dwpe, (const float*)dout, inp, B, T, C);
}
static void dev_cpu_layernorm_forward(Device* d, void* out, float* mean, float* rstd, const void* inp,
                                  const void* weight, const void* bias, int N, int C) {
    layernorm_forward((float*)out, mean, rstd, (const float*)inp, (const float*)weight, (const float*)bias, N, C);
}
static void dev_cpu_residual_layernorm_forward(Device* d, void* residual, void* out, float* mean, float* rstd, const void* a,
                                           const void* b, const void* weight, const void* bias, int N, int C) {
    residual_forward((float*)residual, (const float*)a, (const float*)b, (size_t)N * C);
    layernorm_forward((float*)out, mean, rstd, (const float*)residual, (const float*)weight, (const float*)bias, N, C);
}
static void dev_cpu_layernorm_backward(Device* d, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                   const void* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward((float*)dinp, (float*)dweight, (float*)dbias, (const float*)dout, (const float*)inp,
                       (const float*)weight, mean, rstd, N, C);
}
static void dev_cpu_matmul_forward(Device* d, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                               int N, int C, int OC) {
    if (pre_gelu) {
        matmul_forward((float*)pre_gelu, (const float*)inp, (const float*)weight, (const float*)bias, N, C, OC);
        gelu_forward((float*)out, (const float*)pre_gelu, (size_t)N * OC);
    } else {
        matmul_forward((float*)out, (const float*)inp, (const float*)weight, (const float*)bias, N, C, OC);
    }
}
static void dev_cpu_matmul_backward(Device* d, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                const void* weight, const void* pre_gelu, int N, int C, int OC) {
    size_t n = (size_t)N * C;
    // matmul_backward accumulates into dinp: start from zero. Through a GELU, the product is
    // the gradient w.r.t. the GELU's output (gelu_scratch), and gelu_backward (which
    // accumulates too) takes it to the input.
    float* dact = pre_gelu ? (float*)d->gelu_scratch : (float*)dinp;
    memset(dact, 0, n * sizeof(float));
    matmul_backward(dact, (float*)dweight, (float*)dbias, (const float*)dout, (const float*)inp, (const float*)weight, N, C, OC);
    if (pre_gelu) {
        memset(dinp, 0, n * sizeof(float));
        gelu_backward((float*)dinp, (const float*)pre_gelu, dact, n);
    }
}
static void dev_cpu_attention_forward(Device* d, void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
    attention_forward((float*)out, lse, (const float*)qkv, B, T, C, NH);
}
static void dev_cpu_attention_backward(Device* d, void* dqkv, const void* dout, const void* qkv, const void* out,
                                   const float* lse, int B, int T, int C, int NH) {
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(float));  // the CPU kernel accumulates
    attention_backward((float*)dqkv, (const float*)dout, (const float*)qkv, (const float*)out, lse, B, T, C, NH);
}
static void dev_cpu_crossentropy(Device* d, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    crossentropy_softmax_fused((float*)logits, losses, targets, N, V, Vp, dloss);
}
static void dev_cpu_zero(Device* d, void* p, size_t bytes) { memset(p, 0, bytes); }
static const int* dev_cpu_tokens(Device* d, int slot, const int* host, size_t n) { return host; }
static void dev_cpu_to_host_async(Device* d, void* dst, const void* src, size_t bytes) { if (dst != src) memcpy(dst, src, bytes); }
static void dev_cpu_act_to_host_f32(Device* d, float* dst, const void* src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
static void dev_cpu_synchronize(Device* d) {}
static void* dev_cpu_mark(Device* d) {
    struct timespec* t = (struct timespec*)malloc(sizeof(*t));
    clock_gettime(CLOCK_MONOTONIC, t);
    return t;
}
static double dev_cpu_mark_ms(Device* d, void* from, void* to) {
    const struct timespec *a = (const struct timespec*)from, *b = (const struct timespec*)to;
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) * 1e-6;
}
static void dev_cpu_mark_free(Device* d, void* m) { free(m); }

static void device_cpu_init(Device* d) {
    memset(d, 0, sizeof(*d));
    d->name = "cpu";
    d->act_bytes = sizeof(float);
    d->gelu_needs_scratch = 1;
    d->encoder_forward = dev_cpu_encoder_forward;
    d->encoder_backward = dev_cpu_encoder_backward;
    d->layernorm_forward = dev_cpu_layernorm_forward;
    d->residual_layernorm_forward = dev_cpu_residual_layernorm_forward;
    d->layernorm_backward = dev_cpu_layernorm_backward;
    d->matmul_forward = dev_cpu_matmul_forward;
    d->matmul_backward = dev_cpu_matmul_backward;
    d->attention_forward = dev_cpu_attention_forward;
    d->attention_backward = dev_cpu_attention_backward;
    d->crossentropy = dev_cpu_crossentropy;
    d->zero = dev_cpu_zero;
    d->tokens = dev_cpu_tokens;
    d->to_host_async = dev_cpu_to_host_async;
    d->act_to_host_f32 = dev_cpu_act_to_host_f32;
    d->synchronize = dev_cpu_synchronize;
    d->mark = dev_cpu_mark;
    d->mark_ms = dev_cpu_mark_ms;
    d->mark_free = dev_cpu_mark_free;
}

// ---- cuda: bf16 storage, fp32 math; kernels/cuda_*.cuh on the compute stream --------------
#ifdef __CUDACC__

typedef struct {
    cudaStream_t stream;       // the compute stream (the FSDP backend orders its comm against it)
    FsdpBackend* backend;      // host waits go through its deadline (fsdp_backend_cuda_host_wait)
    MatmulContext mm;          // cuBLASLt handle + its one workspace
    AttentionImpl attention;
    void* scratch;             // one buffer for every kernel's scratch (they run in stream order)
    size_t scratch_bytes;
    int* tokens[2];            // inputs, targets [B*T] on the device
    size_t tokens_cap;
    uint16_t* host_row;        // pinned staging for act_to_host_f32
    size_t host_row_cap;
    int vocab;                 // real vocabulary (the embedding backward sorts ids in [0, vocab))
    size_t device_bytes;       // everything this device state cudaMalloc'ed (budget)
} CudaDevice;

static CudaDevice* dev_cuda_of(Device* d) { return (CudaDevice*)d->impl; }
#define BF(p) ((bf16*)(p))
#define CBF(p) ((const bf16*)(p))

static void dev_cuda_encoder_forward(Device* d, void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C) {
    encoder_forward_cuda(BF(out), inp, CBF(wte), CBF(wpe), B, T, C, dev_cuda_of(d)->stream);
}
static void dev_cuda_encoder_backward(Device* d, void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C) {
    CudaDevice* cd = dev_cuda_of(d);
    encoder_backward_cuda(BF(dwte), BF(dwpe), cd->scratch, cd->scratch_bytes, CBF(dout), inp, B, T, C, cd->vocab, cd->stream);
}
static void dev_cuda_layernorm_forward(Device* d, void* out, float* mean, float* rstd, const void* inp,
                                   const void* weight, const void* bias, int N, int C) {
    layernorm_forward_cuda(BF(out), mean, rstd, CBF(inp), CBF(weight), CBF(bias), N, C, dev_cuda_of(d)->stream);
}
static void dev_cuda_residual_layernorm_forward(Device* d, void* residual, void* out, float* mean, float* rstd, const void* a,
                                            const void* b, const void* weight, const void* bias, int N, int C) {
    fused_residual_layernorm_forward_cuda(BF(residual), BF(out), mean, rstd, CBF(a), CBF(b), CBF(weight), CBF(bias), N, C,
                                          dev_cuda_of(d)->stream);
}
static void dev_cuda_layernorm_backward(Device* d, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                    const void* weight, const float* mean, const float* rstd, int N, int C) {
    CudaDevice* cd = dev_cuda_of(d);
    layernorm_backward_cuda(BF(dinp), BF(dweight), BF(dbias), cd->scratch, cd->scratch_bytes, CBF(dout), CBF(inp),
                            CBF(weight), mean, rstd, N, C, cd->stream);
}
static void dev_cuda_matmul_forward(Device* d, void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias,
                                int N, int C, int OC) {
    CudaDevice* cd = dev_cuda_of(d);
    matmul_forward_cuda(&cd->mm, BF(out), BF(pre_gelu), CBF(inp), CBF(weight), CBF(bias), N, C, OC, cd->stream);
}
static void dev_cuda_matmul_backward(Device* d, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                 const void* weight, const void* pre_gelu, int N, int C, int OC) {
    CudaDevice* cd = dev_cuda_of(d);
    // dinp overwritten (with the GELU backward in the epilogue when pre_gelu is given); the
    // weight gradient accumulates in the bf16 gradient slot (beta = 1); the bias gradient is
    // a deterministic reduction of its own.
    matmul_backward_dinp_cuda(&cd->mm, BF(dinp), CBF(dout), CBF(weight), CBF(pre_gelu), N, C, OC, 0, cd->stream);
    matmul_backward_dweight_cuda(&cd->mm, dweight, CUDA_R_16BF, CBF(dout), CBF(inp), N, C, OC, 1, cd->stream);
    if (dbias) bias_backward_cuda(BF(dbias), cd->scratch, cd->scratch_bytes, CBF(dout), N, OC, cd->stream);
}
static void dev_cuda_attention_forward(Device* d, void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
    CudaDevice* cd = dev_cuda_of(d);
    attention_forward_cuda(cd->attention, &cd->mm, BF(out), lse, CBF(qkv), cd->scratch, cd->scratch_bytes, B, T, C, NH, cd->stream);
}
static void dev_cuda_attention_backward(Device* d, void* dqkv, const void* dout, const void* qkv, const void* out,
                                    const float* lse, int B, int T, int C, int NH) {
    CudaDevice* cd = dev_cuda_of(d);
    attention_backward_cuda(cd->attention, &cd->mm, BF(dqkv), CBF(dout), CBF(qkv), CBF(out), lse, cd->scratch,
                            cd->scratch_bytes, B, T, C, NH, cd->stream);
}
static void dev_cuda_crossentropy(Device* d, void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    crossentropy_softmax_fused_cuda(BF(logits), losses, targets, N, V, Vp, dloss, dev_cuda_of(d)->stream);
}
static void dev_cuda_zero(Device* d, void* p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, dev_cuda_of(d)->stream)); }
static const int* dev_cuda_tokens(Device* d, int slot, const int* host, size_t n) {
    CudaDevice* cd = dev_cuda_of(d);
    CUDA_REQUIRE(n <= cd->tokens_cap, "%zu tokens exceed the %zu the device buffers were sized for", n, cd->tokens_cap);
    // From pageable memory the copy is staged before the call returns: host may be reused.
    CUDA_CHECK(cudaMemcpyAsync(cd->tokens[slot], host, n * sizeof(int), cudaMemcpyHostToDevice, cd->stream));
    return cd->tokens[slot];
}
static void dev_cuda_to_host_async(Device* d, void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev_cuda_of(d)->stream));
}
static void dev_cuda_act_to_host_f32(Device* d, float* dst, const void* src, size_t n) {
    CudaDevice* cd = dev_cuda_of(d);
    CUDA_REQUIRE(n <= cd->host_row_cap, "%zu elements exceed the %zu-element staging buffer", n, cd->host_row_cap);
    CUDA_CHECK(cudaMemcpyAsync(cd->host_row, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, cd->stream));
    fsdp_backend_cuda_host_wait(cd->backend, cd->stream, "a device-to-host copy of activations");
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(cd->host_row[i]);
}
static void dev_cuda_synchronize(Device* d) {
    CudaDevice* cd = dev_cuda_of(d);
    fsdp_backend_cuda_host_wait(cd->backend, cd->stream, "the model's stream");
}
static void* dev_cuda_mark(Device* d) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventRecord(e, dev_cuda_of(d)->stream));
    return (void*)e;
}
static double dev_cuda_mark_ms(Device* d, void* from, void* to) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to));
    return ms;
}
static void dev_cuda_mark_free(Device* d, void* m) { CUDA_CHECK(cudaEventDestroy((cudaEvent_t)m)); }

// The largest scratch any kernel takes for a B x T micro-batch (smaller forwards, e.g. the
// sampler's B = 1, need less). Everything runs in order on one stream: one buffer serves all.
static size_t dev_cuda_scratch_bytes(const GPT2Config* c, int B, int T, AttentionImpl attention) {
    int N = B * T, C = c->channels, NH = c->num_heads;
    size_t need = encoder_backward_scratch_bytes(B, T, c->vocab_size);
    size_t k[] = {layernorm_backward_scratch_bytes(N, C), bias_backward_scratch_bytes(N, 4 * C),
                  bias_backward_scratch_bytes(N, 3 * C), attention_forward_scratch_bytes(attention, B, T, C, NH),
                  attention_backward_scratch_bytes(attention, B, T, C, NH)};
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) if (k[i] > need) need = k[i];
    return align_up_256(need);
}

static void device_cuda_init(Device* d, cudaStream_t stream, FsdpBackend* backend, AttentionImpl attention,
                             int gelu_fusion, const GPT2Config* c, int B, int T) {
    memset(d, 0, sizeof(*d));
    CudaDevice* cd = (CudaDevice*)calloc(1, sizeof(CudaDevice));
    cd->stream = stream;
    cd->backend = backend;
    cd->attention = attention;
    cd->vocab = c->vocab_size;
    matmul_context_init(&cd->mm);
    matmul_set_gelu_fusion(&cd->mm, gelu_fusion);
    cd->device_bytes += cd->mm.workspace_bytes;
    cd->scratch_bytes = dev_cuda_scratch_bytes(c, B, T, attention);
    CUDA_CHECK(cudaMalloc(&cd->scratch, cd->scratch_bytes));
    cd->device_bytes += cd->scratch_bytes;
    cd->tokens_cap = (size_t)B * T;
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMalloc(&cd->tokens[i], cd->tokens_cap * sizeof(int)));
        // On the model's stream: a legacy-stream memset is not ordered with a non-blocking stream.
        CUDA_CHECK(cudaMemsetAsync(cd->tokens[i], 0, cd->tokens_cap * sizeof(int), stream));
        cd->device_bytes += align_up_256(cd->tokens_cap * sizeof(int));
    }
    cd->host_row_cap = (size_t)c->padded_vocab_size;
    CUDA_CHECK(cudaMallocHost((void**)&cd->host_row, cd->host_row_cap * sizeof(uint16_t)));
    d->name = "cuda";
    d->impl = cd;
    d->act_bytes = sizeof(bf16);
    d->gelu_needs_scratch = 0;  // cuBLASLt's DGELU epilogue
    d->encoder_forward = dev_cuda_encoder_forward;
    d->encoder_backward = dev_cuda_encoder_backward;
    d->layernorm_forward = dev_cuda_layernorm_forward;
    d->residual_layernorm_forward = dev_cuda_residual_layernorm_forward;
    d->layernorm_backward = dev_cuda_layernorm_backward;
    d->matmul_forward = dev_cuda_matmul_forward;
    d->matmul_backward = dev_cuda_matmul_backward;
    d->attention_forward = dev_cuda_attention_forward;
    d->attention_backward = dev_cuda_attention_backward;
    d->crossentropy = dev_cuda_crossentropy;
    d->zero = dev_cuda_zero;
    d->tokens = dev_cuda_tokens;
    d->to_host_async = dev_cuda_to_host_async;
    d->act_to_host_f32 = dev_cuda_act_to_host_f32;
    d->synchronize = dev_cuda_synchronize;
    d->mark = dev_cuda_mark;
    d->mark_ms = dev_cuda_mark_ms;
    d->mark_free = dev_cuda_mark_free;
}

static void device_cuda_free(Device* d) {
    CudaDevice* cd = dev_cuda_of(d);
    fsdp_backend_cuda_host_wait(cd->backend, cd->stream, "the model's stream at teardown");
    matmul_context_destroy(&cd->mm);
    CUDA_CHECK(cudaFree(cd->scratch));
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaFree(cd->tokens[i]));
    CUDA_CHECK(cudaFreeHost(cd->host_row));
    free(cd);
    d->impl = NULL;
}
#endif  // __CUDACC__

// ----------------------------------------------------------------------------------------
// Activations for one micro-batch of B x T, one allocation carved into named buffers, in the
// device's activation dtype except the fp32 statistics and losses. Per-layer buffers are
// strided by the allocated B*T, so a smaller forward (sampling with B = 1) uses the same memory.

typedef struct {
    void* encoded;                        // [B,T,C]
    void* ln1; float *ln1_mean, *ln1_rstd;// [L,B,T,C], [L,B,T] x2
    void* qkv;                            // [L,B,T,3C]
    void* atty;                           // [L,B,T,C]
    float* att_lse;                       // [L,B,NH,T]
    void* residual2;                      // [L,B,T,C]
    void* ln2; float *ln2_mean, *ln2_rstd;
    void *fch, *fch_gelu;                 // [L,B,T,4C] (fch: the GELU's input)
    void* residual3;                      // [L,B,T,C]
    void* lnf; float *lnf_mean, *lnf_rstd;// [B,T,C], [B,T] x2
    void* logits;                         // [B,T,Vp]; the loss overwrites it with dlogits
    float* losses;                        // [B,T]
    void* proj_out;                       // [B,T,C] a projection's output before its residual add
    // backward scratch, one layer's worth
    void *dresidual, *dbtc, *dqkv, *dfch; // [B,T,C] x2, [B,T,3C], [B,T,4C]
    void* gelu_scratch;                   // [B,T,4C] where the device needs it (else NULL)
    size_t BT;                            // allocated B*T
    size_t total_bytes;
} Activations;

// Reserves n elements of elem bytes at *off (256-byte aligned: cuBLASLt's fast paths and the
// 128-bit kernels want it); a pointer into base, or NULL when only measuring (base NULL).
static void* carve(char* base, size_t* off, size_t n, size_t elem) {
    void* p = base && n ? base + *off : NULL;
    *off += (n * elem + 255) / 256 * 256;
    return p;
}

static size_t carve_activations(Activations* a, const GPT2Config* c, size_t B, size_t T, const Device* d, void* mem) {
    size_t BT = B * T, C = (size_t)c->channels, L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
    size_t Vp = (size_t)c->padded_vocab_size, e = d->act_bytes, f = sizeof(float), off = 0;
    char* base = (char*)mem;
    a->encoded = carve(base, &off, BT * C, e);
    a->ln1 = carve(base, &off, L * BT * C, e);
    a->ln1_mean = (float*)carve(base, &off, L * BT, f);
    a->ln1_rstd = (float*)carve(base, &off, L * BT, f);
    a->qkv = carve(base, &off, L * BT * 3 * C, e);
    a->atty = carve(base, &off, L * BT * C, e);
    a->att_lse = (float*)carve(base, &off, L * B * NH * T, f);
    a->residual2 = carve(base, &off, L * BT * C, e);
    a->ln2 = carve(base, &off, L * BT * C, e);
    a->ln2_mean = (float*)carve(base, &off, L * BT, f);
    a->ln2_rstd = (float*)carve(base, &off, L * BT, f);
    a->fch = carve(base, &off, L * BT * 4 * C, e);
    a->fch_gelu = carve(base, &off, L * BT * 4 * C, e);
    a->residual3 = carve(base, &off, L * BT * C, e);
    a->lnf = carve(base, &off, BT * C, e);
    a->lnf_mean = (float*)carve(base, &off, BT, f);
    a->lnf_rstd = (float*)carve(base, &off, BT, f);
    a->logits = carve(base, &off, BT * Vp, e);
    a->losses = (float*)carve(base, &off, BT, f);
    a->proj_out = carve(base, &off, BT * C, e);
    a->dresidual = carve(base, &off, BT * C, e);
    a->dbtc = carve(base, &off, BT * C, e);
    a->dqkv = carve(base, &off, BT * 3 * C, e);
    a->dfch = carve(base, &off, BT * 4 * C, e);
    a->gelu_scratch = carve(base, &off, d->gelu_needs_scratch ? BT * 4 * C : 0, e);
    a->BT = BT;
    a->total_bytes = off;
    return off;
}

// Layer l's slices of the per-layer activations: what its forward saves for its backward.
typedef struct {
    void *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu;
    float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;
} LayerActs;

static LayerActs layer_acts(const Activations* a, int l, size_t C, int NH, size_t e) {
    const size_t at = (size_t)l * a->BT;  // layer l's first row
    LayerActs x;
    x.ln1 = elem_at(a->ln1, at * C, e);
    x.ln1_mean = a->ln1_mean + at;
    x.ln1_rstd = a->ln1_rstd + at;
    x.qkv = elem_at(a->qkv, at * 3 * C, e);
    x.atty = elem_at(a->atty, at * C, e);
    x.lse = a->att_lse + at * NH;
    x.residual2 = elem_at(a->residual2, at * C, e);
    x.ln2 = elem_at(a->ln2, at * C, e);
    x.ln2_mean = a->ln2_mean + at;
    x.ln2_rstd = a->ln2_rstd + at;
    x.fch = elem_at(a->fch, at * 4 * C, e);
    x.fch_gelu = elem_at(a->fch_gelu, at * 4 * C, e);
    return x;
}

// ----------------------------------------------------------------------------------------
// The model: layout + engine + device + activations

// How to build the model on a device (NULL or cuda = 0: the cpu device).
typedef struct {
    int cuda;
    int use_nccl;              // cuda: NCCL collectives; else MPI staged through host memory
    int reduce_fp32;           // cuda: reduce-scatter gradients in fp32 instead of bf16
    int attention;             // cuda: AttentionImpl
    int gelu_fusion;           // cuda: 0 none, 1 forward, 2 forward + backward (cuda_matmul.cuh)
    uint64_t seed;             // cuda: stochastic-rounding seed of the bf16 parameter copies
} DeviceOptions;

typedef struct {
    ModelLayout layout;
    GPT2Config config;
    Fsdp fsdp;
    FsdpBackend backend;
    Device dev;
    Activations acts;
    void* acts_memory;
    int B, T;            // micro-batch the activations were sized for
    const int* tok_inputs;   // the last forward's token ids, where the device reads them
    struct StepProfile* prof;  // --profile-step (NULL: off)
#ifdef __CUDACC__
    cudaStream_t stream;
#endif
} GPT2;

// ---- --profile-step: where one optimizer step's time goes --------------------------------
// The schedule drops a mark before each phase of work; the time from one mark to the next is
// charged to the first one's phase. On cuda the marks are events on the model's stream, so a
// phase's time is the GPU's, waits included: "fsdp waits" is the compute stream waiting for
// all-gathers and reduce-scatters (communication that compute did not hide), "host" the GPU
// idle while the host reads the loss and reduces it over the ranks. With NCCL the backend also
// times each collective on its comm stream: how much communication there was, hidden or not.
typedef enum {
    PH_HOST, PH_FSDP, PH_EMBED, PH_LAYERNORM, PH_MATMUL, PH_LM_HEAD, PH_ATTENTION, PH_LOSS, PH_OPTIMIZER, PH_COUNT
} Phase;
static const char* const phase_names[PH_COUNT] = {
    "host (loss read, reductions)", "fsdp waits (gather / reduce)", "embedding", "layernorm (+ residual add)",
    "matmul (transformer blocks)", "matmul (lm head)", "attention", "cross-entropy", "grad norm + AdamW",
};
typedef struct StepProfile {
    int n, cap;
    void** marks;        // Device marks, in order
    unsigned char* what; // phase * 2 + backward, per mark
} StepProfile;

static void prof(GPT2* model, Phase phase, int backward) {
    StepProfile* p = model->prof;
    if (!p) return;
    if (p->n == p->cap) {  // grows only during the one profiled step
        p->cap = p->cap ? 2 * p->cap : 512;
        p->marks = (void**)realloc(p->marks, (size_t)p->cap * sizeof(void*));
        p->what = (unsigned char*)realloc(p->what, (size_t)p->cap);
        if (!p->marks || !p->what) { fprintf(stderr, "error: out of memory (--profile-step)\n"); exit(1); }
    }
    p->marks[p->n] = model->dev.mark(&model->dev);
    p->what[p->n] = (unsigned char)(phase * 2 + backward);
    p->n++;
}

// Profiles the coming step: the model's marks, and on cuda with NCCL the comm stream's
// collectives (their own time, beside the compute; what compute waited for is "fsdp waits").
static void prof_begin(GPT2* model, StepProfile* p) {
    model->prof = p;
#ifdef __CUDACC__
    if (model->dev.impl) fsdp_backend_cuda_profile_start(&model->backend);
#endif
}

// Ends the profiled step: waits for the device, prints rank 0's breakdown, frees the marks,
// and stops marking.
static void prof_report(GPT2* model, int step, double host_ms, int rank) {
    StepProfile* p = model->prof;
    Device* d = &model->dev;
    model->prof = NULL;
    d->synchronize(d);
#ifdef __CUDACC__
    double comm_ms[CB_PROF_KINDS] = {0};
    int comm_n[CB_PROF_KINDS] = {0};
    if (d->impl) fsdp_backend_cuda_profile_finish(&model->backend, comm_ms, comm_n);
#endif
    double ms[2 * PH_COUNT] = {0}, total = 0.0;
    int calls[2 * PH_COUNT] = {0};
    for (int i = 0; i + 1 < p->n; i++) {
        const double t = d->mark_ms(d, p->marks[i], p->marks[i + 1]);
        ms[p->what[i]] += t;
        calls[p->what[i]]++;
        total += t;
    }
    if (rank == 0) {
        printf("profile of step %d (rank 0, %s device; the stream's time between marks): %.2f ms, %.2f ms on the host clock\n",
               step, d->name, total, host_ms);
        for (int shown = 0; shown < 2 * PH_COUNT; shown++) {  // largest first
            int k = -1;
            for (int j = 0; j < 2 * PH_COUNT; j++)
                if (calls[j] && (k < 0 || ms[j] > ms[k])) k = j;
            if (k < 0) break;
            const int backward = k % 2 && k / 2 != PH_HOST && k / 2 != PH_OPTIMIZER;
            printf("  %-30s %-8s %10.3f ms %5.1f%%  %5d interval(s)\n", phase_names[k / 2],
                   k / 2 == PH_HOST || k / 2 == PH_OPTIMIZER ? "" : backward ? "backward" : "forward", ms[k],
                   total > 0 ? 100.0 * ms[k] / total : 0.0, calls[k]);
            calls[k] = 0;
        }
#ifdef __CUDACC__
        if (comm_n[CB_PROF_GATHER] + comm_n[CB_PROF_REDUCE] + comm_n[CB_PROF_REPLICA] > 0)
            printf("  comm stream (NCCL, beside the compute above): all-gather %.3f ms (%d), reduce-scatter %.3f ms (%d), "
                   "replica all-reduce %.3f ms (%d)\n", comm_ms[CB_PROF_GATHER], comm_n[CB_PROF_GATHER],
                   comm_ms[CB_PROF_REDUCE], comm_n[CB_PROF_REDUCE], comm_ms[CB_PROF_REPLICA], comm_n[CB_PROF_REPLICA]);
#endif
        fflush(stdout);
    }
    for (int i = 0; i < p->n; i++) d->mark_free(d, p->marks[i]);
    p->n = 0;
}

static void gpt2_build(GPT2* model, const GPT2Config* c, int layers_per_unit, const ProcessGroup* pg,
                       const FsdpConfig* fcfg, const DeviceOptions* dopt, int B, int T) {
    char err[512];
    memset(model, 0, sizeof(*model));
    model->config = *c;
    build_layout(&model->layout, c, layers_per_unit, pg->shard_size);
    int max_ops = fsdp_max_ops(fcfg, model->layout.n_units);
    if (dopt && dopt->cuda) {
#ifdef __CUDACC__
        CUDA_CHECK(cudaStreamCreateWithFlags(&model->stream, cudaStreamNonBlocking));
        CudaBackendConfig bc;
        memset(&bc, 0, sizeof(bc));
        bc.use_nccl = dopt->use_nccl;
        bc.reduce_fp32 = dopt->reduce_fp32;
        for (int u = 0; u < model->layout.n_units; u++)
            if (model->layout.units[u].padded > bc.max_unit_padded) bc.max_unit_padded = model->layout.units[u].padded;
        bc.seed = dopt->seed;
        bc.compute = model->stream;
        // The staged path pins host buffers per op slot: the root's size only where it goes.
        size_t* op_padded = (size_t*)malloc((size_t)max_ops * sizeof(size_t));
        if (!op_padded) fatal(pg, "out of host memory");
        fsdp_op_padded(fcfg, model->layout.units, model->layout.n_units, op_padded);
        bc.op_padded = op_padded;
        fsdp_backend_cuda_init(&model->backend, pg, max_ops, &bc);
        free(op_padded);
        device_cuda_init(&model->dev, model->stream, &model->backend, (AttentionImpl)dopt->attention, dopt->gelu_fusion,
                         c, B, T);
#else
        fatal(pg, "--device cuda: this build has no CUDA support (built without nvcc)");
#endif
    } else {
        fsdp_backend_cpu_init(&model->backend, pg, max_ops);
        device_cpu_init(&model->dev);
    }
    if (fsdp_init(&model->fsdp, pg, &model->backend, fcfg, model->layout.units, model->layout.n_units, err, sizeof(err)))
        fatal(pg, "%s", err);
    model->B = B;
    model->T = T;
    size_t n = carve_activations(&model->acts, c, (size_t)B, (size_t)T, &model->dev, NULL);
    model->acts_memory = model->backend.alloc(model->backend.ctx, n);
    carve_activations(&model->acts, c, (size_t)B, (size_t)T, &model->dev, model->acts_memory);
    model->dev.gelu_scratch = model->acts.gelu_scratch;
}

static void gpt2_free(GPT2* model) {
    model->dev.synchronize(&model->dev);
    model->backend.release(model->backend.ctx, model->acts_memory);
    fsdp_free(&model->fsdp);
#ifdef __CUDACC__
    if (model->dev.impl) {
        device_cuda_free(&model->dev);
        fsdp_backend_cuda_free(&model->backend);
        CUDA_CHECK(cudaStreamDestroy(model->stream));
    } else
#endif
        fsdp_backend_cpu_free(&model->backend);
    free(model->layout.units);
}

// Device memory the model itself allocated beyond the engine's state and the activations
// (cuda: the collectives' buffers, the cuBLASLt workspace, kernel scratch, token buffers).
static size_t gpt2_device_extra_bytes(const GPT2* model) {
#ifdef __CUDACC__
    if (model->dev.impl) return fsdp_backend_cuda_device_bytes(&model->backend) + ((CudaDevice*)model->dev.impl)->device_bytes;
#endif
    (void)model;
    return 0;
}

// Forward over B x T tokens. Writes per-position losses to acts.losses (targets required;
// device memory: see gpt2_losses_to_host). With dloss != 0 the logits buffer is left holding
// dlogits for the backward.
static void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T, float dloss) {
    const GPT2Config* c = &model->config;
    const ModelLayout* m = &model->layout;
    Activations* a = &model->acts;
    Fsdp* f = &model->fsdp;
    Device* d = &model->dev;
    size_t C = (size_t)c->channels, BT = (size_t)B * T, stride = a->BT, e = d->act_bytes, pe = model->backend.param_bytes;
    int N = (int)BT, NH = c->num_heads;
    prof(model, PH_EMBED, 0);
    const int* tok = d->tokens(d, 0, inputs, BT);
    const int* tgt = d->tokens(d, 1, targets, BT);
    model->tok_inputs = tok;

    prof(model, PH_FSDP, 0);
    RootTensors root = root_tensors(m, fsdp_forward_pre(f, 0), pe);
    prof(model, PH_EMBED, 0);
    d->encoder_forward(d, a->encoded, tok, root.wte, root.wpe, B, T, (int)C);
    // The residual stream: block l's output is residual3[l] = residual2[l] + (MLP projection).
    // That add is fused into the LayerNorm that reads its result (the next block's ln_1, or
    // ln_f), so until then the stream is the pair (res_a, res_b); res_b NULL: just res_a.
    void* res_a = a->encoded;
    void* res_b = NULL;
    void* res_out = NULL;  // where the pending sum goes
    for (int u = 1; u < m->n_units; u++) {
        prof(model, PH_FSDP, 0);
        void* unit_params = fsdp_forward_pre(f, u);
        for (int j = 0; j < m->layers_per_unit; j++) {
            int l = (u - 1) * m->layers_per_unit + j;
            if (l >= c->num_layers) break;
            BlockTensors p = block_tensors(m, u, j, unit_params, pe);
            LayerActs la = layer_acts(a, l, C, NH, e);

            prof(model, PH_LAYERNORM, 0);
            if (res_b) d->residual_layernorm_forward(d, res_out, la.ln1, la.ln1_mean, la.ln1_rstd, res_a, res_b, p.t[LN1_W], p.t[LN1_B], N, (int)C);
            else d->layernorm_forward(d, la.ln1, la.ln1_mean, la.ln1_rstd, res_a, p.t[LN1_W], p.t[LN1_B], N, (int)C);
            void* residual = res_b ? res_out : res_a;
            prof(model, PH_MATMUL, 0);
            d->matmul_forward(d, la.qkv, NULL, la.ln1, p.t[QKV_W], p.t[QKV_B], N, (int)C, 3 * (int)C);
            prof(model, PH_ATTENTION, 0);
            d->attention_forward(d, la.atty, la.lse, la.qkv, B, T, (int)C, NH);
            prof(model, PH_MATMUL, 0);
            d->matmul_forward(d, a->proj_out, NULL, la.atty, p.t[ATTPROJ_W], p.t[ATTPROJ_B], N, (int)C, (int)C);
            prof(model, PH_LAYERNORM, 0);
            d->residual_layernorm_forward(d, la.residual2, la.ln2, la.ln2_mean, la.ln2_rstd, residual, a->proj_out, p.t[LN2_W], p.t[LN2_B], N, (int)C);
            prof(model, PH_MATMUL, 0);
            d->matmul_forward(d, la.fch_gelu, la.fch, la.ln2, p.t[FC_W], p.t[FC_B], N, (int)C, 4 * (int)C);
            d->matmul_forward(d, a->proj_out, NULL, la.fch_gelu, p.t[FCPROJ_W], p.t[FCPROJ_B], N, 4 * (int)C, (int)C);
            res_a = la.residual2;
            res_b = a->proj_out;
            res_out = elem_at(a->residual3, l * stride * C, e);
        }
        prof(model, PH_FSDP, 0);
        fsdp_forward_post(f, u);
    }
    prof(model, PH_LAYERNORM, 0);
    if (res_b) d->residual_layernorm_forward(d, res_out, a->lnf, a->lnf_mean, a->lnf_rstd, res_a, res_b, root.lnfw, root.lnfb, N, (int)C);
    else d->layernorm_forward(d, a->lnf, a->lnf_mean, a->lnf_rstd, res_a, root.lnfw, root.lnfb, N, (int)C);
    prof(model, PH_LM_HEAD, 0);
    d->matmul_forward(d, a->logits, NULL, a->lnf, root.wte, NULL, N, (int)C, c->padded_vocab_size);
    prof(model, PH_LOSS, 0);
    d->crossentropy(d, a->logits, a->losses, tgt, N, c->vocab_size, c->padded_vocab_size, dloss);
    prof(model, PH_FSDP, 0);
    fsdp_forward_post(f, 0);
}

// Queues a copy of the last forward's B*T losses into host memory dst (valid after
// model->dev.synchronize; on the cpu at once).
static void gpt2_losses_to_host(GPT2* model, float* dst, int B, int T) {
    model->dev.to_host_async(&model->dev, dst, model->acts.losses, (size_t)B * T * sizeof(float));
}

// Backward of the last forward (which must have had dloss != 0), on the same tokens. Each
// unit's gradient is reduce-scattered as soon as its backward is done.
static void gpt2_backward(GPT2* model, int B, int T) {
    const GPT2Config* c = &model->config;
    const ModelLayout* m = &model->layout;
    Activations* a = &model->acts;
    Fsdp* f = &model->fsdp;
    Device* d = &model->dev;
    size_t C = (size_t)c->channels, BT = (size_t)B * T, stride = a->BT, e = d->act_bytes, pe = model->backend.param_bytes;
    int N = (int)BT, NH = c->num_heads;

    prof(model, PH_FSDP, 1);
    RootTensors root = root_tensors(m, fsdp_backward_pre(f, 0), pe);
    RootTensors droot = root_tensors(m, fsdp_grad(f, 0), pe);
    fsdp_backward_prefetch(f, m->n_units - 1);  // the last block, while the head runs

    void* residual_last = c->num_layers > 0 ? elem_at(a->residual3, (size_t)(c->num_layers - 1) * stride * C, e) : a->encoded;
    prof(model, PH_LM_HEAD, 1);
    d->matmul_backward(d, a->dbtc, droot.wte, NULL, a->logits, a->lnf, root.wte, NULL, N, (int)C, c->padded_vocab_size);
    prof(model, PH_LAYERNORM, 1);
    d->zero(d, a->dresidual, BT * C * e);
    d->layernorm_backward(d, a->dresidual, droot.lnfw, droot.lnfb, a->dbtc, residual_last, root.lnfw,
                          a->lnf_mean, a->lnf_rstd, N, (int)C);

    for (int u = m->n_units - 1; u >= 1; u--) {
        prof(model, PH_FSDP, 1);
        void* unit_params = fsdp_backward_pre(f, u);
        void* unit_grads = fsdp_grad(f, u);
        int first = (u - 1) * m->layers_per_unit;
        int last = first + m->layers_per_unit - 1;
        if (last >= c->num_layers) last = c->num_layers - 1;
        for (int l = last; l >= first; l--) {
            BlockTensors p = block_tensors(m, u, l - first, unit_params, pe);
            BlockTensors g = block_tensors(m, u, l - first, unit_grads, pe);
            void* residual = l == 0 ? a->encoded : elem_at(a->residual3, (size_t)(l - 1) * stride * C, e);
            LayerActs la = layer_acts(a, l, C, NH, e);

            // dresidual holds d(residual3); the MLP branch adds into it to give d(residual2).
            prof(model, PH_MATMUL, 1);
            d->matmul_backward(d, a->dfch, g.t[FCPROJ_W], g.t[FCPROJ_B], a->dresidual, la.fch_gelu, p.t[FCPROJ_W], la.fch, N, 4 * (int)C, (int)C);
            d->matmul_backward(d, a->dbtc, g.t[FC_W], g.t[FC_B], a->dfch, la.ln2, p.t[FC_W], NULL, N, (int)C, 4 * (int)C);
            prof(model, PH_LAYERNORM, 1);
            d->layernorm_backward(d, a->dresidual, g.t[LN2_W], g.t[LN2_B], a->dbtc, la.residual2, p.t[LN2_W], la.ln2_mean, la.ln2_rstd, N, (int)C);
            // Attention branch: d(residual2) -> d(residual).
            prof(model, PH_MATMUL, 1);
            d->matmul_backward(d, a->dbtc, g.t[ATTPROJ_W], g.t[ATTPROJ_B], a->dresidual, la.atty, p.t[ATTPROJ_W], NULL, N, (int)C, (int)C);
            prof(model, PH_ATTENTION, 1);
            d->attention_backward(d, a->dqkv, a->dbtc, la.qkv, la.atty, la.lse, B, T, (int)C, NH);
            prof(model, PH_MATMUL, 1);
            d->matmul_backward(d, a->dbtc, g.t[QKV_W], g.t[QKV_B], a->dqkv, la.ln1, p.t[QKV_W], NULL, N, (int)C, 3 * (int)C);
            prof(model, PH_LAYERNORM, 1);
            d->layernorm_backward(d, a->dresidual, g.t[LN1_W], g.t[LN1_B], a->dbtc, residual, p.t[LN1_W], la.ln1_mean, la.ln1_rstd, N, (int)C);
        }
        prof(model, PH_FSDP, 1);
        fsdp_backward_post(f, u);
    }
    prof(model, PH_EMBED, 1);
    d->encoder_backward(d, droot.wte, droot.wpe, a->dresidual, model->tok_inputs, B, T, (int)C);
    prof(model, PH_FSDP, 1);
    fsdp_backward_post(f, 0);
}


// ----------------------------------------------------------------------------------------
// Learning-rate schedule: linear warmup, then cosine / linear decay to final_frac * lr, or
// constant.

typedef enum { DECAY_COSINE, DECAY_LINEAR, DECAY_CONSTANT } LrDecay;

static float learning_rate(int step, int total_steps, float max_lr, int warmup, float final_frac, LrDecay decay) {
    // step counts from 0 (the first update)
    if (step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
    if (decay == DECAY_CONSTANT) return max_lr;
    float min_lr = max_lr * final_frac;
    int span = total_steps - warmup;
    float frac = span > 0 ? (float)(step - warmup) / (float)span : 1.0f;
    if (frac > 1.0f) frac = 1.0f;
    if (decay == DECAY_LINEAR) return max_lr - frac * (max_lr - min_lr);
    return min_lr + 0.5f * (1.0f + cosf((float)M_PI * frac)) * (max_lr - min_lr);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Peak resident memory of this process in bytes.
static size_t peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

// Current resident memory in bytes (0 where /proc is unavailable).
static size_t current_rss_bytes(void) {
    FILE* fp = fopen("/proc/self/statm", "r");
    if (!fp) return 0;
    unsigned long pages_total = 0, pages_resident = 0;
    int n = fscanf(fp, "%lu %lu", &pages_total, &pages_resident);
    fclose(fp);
    return n == 2 ? (size_t)pages_resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

// Max over ranks of a per-rank byte count, in MiB.
static double max_over_ranks_mib(const ProcessGroup* pg, size_t bytes) {
    double mib = (double)bytes / (1024.0 * 1024.0);
    comm_all_reduce_f64(pg->world_comm, &mib, 1, COMM_MAX);
    return mib;
}

// ----------------------------------------------------------------------------------------
// Sampling: autoregressive generation from <|endoftext|>, top-k with temperature. Every
// rank runs the same forwards (each needs the gathers) and draws the same tokens, because
// the random stream depends only on the seed, the step and the position.

static int sample_top_k(const float* logits, int V, int top_k, float temperature, float coin,
                        int* idx, float* val) {
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

static void generate_sample(GPT2* model, const ProcessGroup* pg, const Tokenizer* tok, int n_tokens,
                            int top_k, float temperature, uint64_t seed, int step) {
    int T = model->T;
    int* tokens = (int*)calloc((size_t)T, sizeof(int));
    int* zeros = (int*)calloc((size_t)T, sizeof(int));
    int* idx = (int*)malloc((size_t)top_k * sizeof(int));
    float* val = (float*)malloc((size_t)top_k * sizeof(float));
    const GPT2Config* c = &model->config;
    float* row = (float*)malloc((size_t)c->padded_vocab_size * sizeof(float));  // host copy of one row of logits
    tokens[0] = GPT2_EOT;
    int length = n_tokens + 1 < T ? n_tokens + 1 : T;
    TokenizerUtf8 utf8;
    tokenizer_utf8_init(&utf8);
    if (pg->rank == 0) { printf("sample (step %d):\n---\n", step); fflush(stdout); }
    for (int t = 1; t < length; t++) {
        gpt2_forward(model, tokens, zeros, 1, t, 0.0f);
        model->dev.act_to_host_f32(&model->dev, row, elem_at(model->acts.logits, (size_t)(t - 1) * c->padded_vocab_size,
                                   model->dev.act_bytes), (size_t)c->padded_vocab_size);
        uint64_t h = splitmix64(seed ^ splitmix64(((uint64_t)step << 32) | (uint64_t)t));
        float coin = (float)((double)(h >> 11) / 9007199254740992.0);
        tokens[t] = sample_top_k(row, c->vocab_size, top_k, temperature, coin, idx, val);
        if (pg->rank == 0) {
            if (tok) tokenizer_print_token(tok, &utf8, tokens[t], stdout);
            else printf("%d ", tokens[t]);
            fflush(stdout);
        }
    }
    fsdp_release_all(&model->fsdp);
    if (pg->rank == 0) {
        if (tok) tokenizer_print_flush(&utf8, stdout);
        printf("\n---\n");
        fflush(stdout);
    }
    free(tokens); free(zeros); free(idx); free(val); free(row);
}

#ifndef TESTING
// ----------------------------------------------------------------------------------------
// Command line

typedef struct {
    const char* train_data;
    const char* val_data;
    const char* output_dir;
    const char* model;
    int layers, channels, heads, max_seq;
    const char* init_from;
    const char* save_model;
    int batch_size, seq_len;
    long total_batch_tokens;
    int max_steps;
    float lr, final_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    int warmup_steps;
    LrDecay lr_decay;
    int val_every, val_steps;
    int sample_every, sample_tokens, top_k;
    float temperature;
    const char* tokenizer_dir;
    uint64_t seed;
    int shuffle;
    const char* device;
    const char* comm;            // cuda: "auto", "nccl" or "mpi"
    int reduce_fp32;             // cuda: --reduce-dtype fp32
    const char* cuda_only_flag;  // the first cuda-only flag given (--comm, --attention, ...)
    const char* attention;       // cuda: "auto", "flash" or "cublas"
    int gelu_fusion;             // cuda: --gelu-fusion
    int threads;
    int unit_layers, prefetch, reshard_after_forward, no_grad_sync_until_last, shard_group_size;
    int ckpt_every, ckpt_keep, ckpt_async, stop_at_step;
    const char* ckpt_dir;
    const char* resume;
    CkptOptions ckpt;
    const char* rendezvous;
    const char* run_id;
    float comm_timeout;
    int max_bad_steps;
    float peak_tflops;
    int profile_step;            // 0: off
} Options;

static void print_usage(void) {
    printf(
"usage: train_gpt [options]     (launch several ranks with mpirun -np N or srun)\n"
"\n"
"data\n"
"  -i, --train-data GLOB        training token shards (llm.c format) [data/tinyshakespeare/tiny_shakespeare_train.bin]\n"
"  -j, --val-data GLOB          validation shards; \"\" disables validation [data/tinyshakespeare/tiny_shakespeare_val.bin]\n"
"      --shuffle 0|1            permute shards and sequence windows every epoch (seeded) [0]\n"
"  -o, --output DIR             write DIR/metrics.jsonl (one JSON object per step)\n"
"model\n"
"  -m, --model dN               GPT-2 preset: N layers (d12 = 124M, d24 = 350M, d36 = 774M, d48 = 1558M) [d12]\n"
"      --layers N --channels N --heads N   any other shape (override the preset)\n"
"      --max-seq N              learned positions [1024]\n"
"  -e, --init-from FILE         start from an llm.c model file (version 3 fp32 or 5 bf16)\n"
"      --save-model FILE        write an llm.c model file (fp32) at the end\n"
"      --seed N                 initialisation, sampling and shuffling seed [1337]\n"
"training\n"
"  -b, --batch-size N           micro-batch per rank, in sequences [4]\n"
"  -t, --seq-len N              sequence length [1024]\n"
"  -d, --total-batch-tokens N   tokens per optimizer step, all ranks; gradient accumulation\n"
"                               makes up the difference [batch x seq-len x world]\n"
"  -x, --max-steps N            optimizer steps; -1 = one epoch of the training data [-1]\n"
"  -l, --lr F                   peak learning rate [3e-4]\n"
"  -u, --warmup-steps N         linear warmup [0]\n"
"      --lr-decay cosine|linear|constant   decay after warmup [cosine]\n"
"  -q, --final-lr-frac F        the decay ends at F x lr [0.1]\n"
"  -c, --weight-decay F         AdamW weight decay, matrices only [0.1]\n"
"      --beta1 F --beta2 F --eps F   AdamW [0.9, 0.95, 1e-8]\n"
"      --grad-clip F            clip the global gradient norm; 0 disables [1.0]\n"
"evaluation\n"
"  -v, --val-every N            validation loss every N steps and at the end; 0 disables [20]\n"
"      --val-steps N            validation batches (of the training batch size) [20]\n"
"  -s, --sample-every N         print a generated sample every N steps; 0 disables [0]\n"
"  -g, --sample-tokens N        tokens per sample [64]\n"
"      --top-k N --temperature F   sampling [40, 1.0]\n"
"      --tokenizer-dir DIR      encoder.json and vocab.bpe for printing samples\n"
"                               [data/gpt2, else $FSDP_DATA/gpt2, else ../shared/data/gpt2]\n"
"sharding\n"
"      --fsdp-unit-layers K     transformer blocks per FSDP unit [1]\n"
"      --prefetch N             units all-gathered ahead of the one computing [1]\n"
"      --reshard-after-forward 0|1   1: free gathered blocks after forward (ZeRO-3); 0: keep them until\n"
"                               their backward (ZeRO-2 style, more memory, fewer gathers) [1]\n"
"      --no-grad-sync-until-last   keep unsharded gradients over the micro-steps and reduce-scatter\n"
"                               only on the last (less communication, more memory)\n"
"      --shard-group-size S     HSDP: shard within groups of S ranks, replicate across groups [world]\n"
"checkpoints\n"
"      --ckpt-every N           save a sharded checkpoint every N steps and at the end; 0 = never [0]\n"
"      --ckpt-dir DIR           where [OUTPUT/ckpt with -o OUTPUT]\n"
"      --ckpt-keep K            complete checkpoints to keep [3]\n"
"      --ckpt-compress none|zstd[:LEVEL]   compress every chunk [none; zstd level 3]\n"
"      --ckpt-async 0|1         copy the shards to host buffers and write them in a thread [0]\n"
"      --resume auto|PATH       auto: the newest complete checkpoint in the checkpoint directory, or a\n"
"                               fresh start when there is none; PATH: that step directory. Any rank count.\n"
"      --stop-at-step N         stop after step N (the schedule still spans --max-steps), saving a\n"
"                               checkpoint first when --ckpt-every is set: splits a run into jobs\n"
"system\n"
"      --device auto|cpu|cuda   [auto: cuda when usable, else cpu]\n"
"      --comm nccl|mpi          cuda collectives: NCCL, or MPI staged through host memory (several ranks\n"
"                               may share a GPU, which NCCL refuses) [nccl when every local rank has\n"
"                               its own GPU, else mpi]\n"
"      --reduce-dtype bf16|fp32 cuda: dtype of the gradient reduce-scatter [bf16]\n"
"      --attention flash|cublas cuda: fused flash attention, or the cuBLAS reference path [flash where\n"
"                               the head size is 64 or 128, else cublas]\n"
"      --gelu-fusion 0|1|2      cuda: the GELU in cuBLASLt's matmul epilogue: 0 never (a kernel of its\n"
"                               own), 1 forward, 2 forward and backward; where cuBLASLt has no such\n"
"                               algorithm, the run says so and uses the kernel [2]\n"
"      --threads N              OpenMP/BLAS threads per rank [OMP_NUM_THREADS, else cores / local ranks]\n"
"      --peak-tflops F          the device's peak dense BF16 TFLOP/s for MFU [from the GPU's name; none on cpu]\n"
"      --profile-step N         after step N, print where its time went: matmuls, attention, layernorm,\n"
"                               waits for FSDP communication, optimizer... (cuda: events on the model's\n"
"                               stream, so waits count, and with NCCL the comm stream's own time; rank\n"
"                               0's figures; that step is left out of the average step time) [0: off]\n"
"operations\n"
"      --rendezvous file:DIR|tcp://HOST:PORT   how ranks meet without an MPI world (srun without\n"
"                               PMI, torchrun-style RANK/WORLD_SIZE): a directory every node sees,\n"
"                               or rank 0's address [MPI when launched by mpirun or srun --mpi=pmix;\n"
"                               tcp://MASTER_ADDR:MASTER_PORT when those are set]\n"
"      --run-id ID              names this launch in the rendezvous directory\n"
"                               [Slurm job.step.restart, or TORCHELASTIC_RUN_ID]\n"
"      --comm-timeout SECONDS   a collective that has not completed (mpi) or made progress (tcp) for\n"
"                               that long ends the job: a stalled or dead rank [600]\n"
"      --max-bad-steps N        a step with a non-finite loss or gradient norm is skipped (no update);\n"
"                               N such steps in a row end the run [10]\n"
"signals\n"
"      SIGUSR1 or SIGTERM: every rank finishes the current step, a checkpoint is saved (needs -o or\n"
"      --ckpt-dir), and the job exits with status 75; rerun with --resume auto to continue.\n"
"  -h, --help                   this text\n");
}

typedef struct { char msg[512]; } ParseError;

static int parse_long(const char* flag, const char* s, long lo, long hi, long* out, ParseError* e) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0') { snprintf(e->msg, sizeof(e->msg), "%s: expected an integer, got '%s'", flag, s); return 1; }
    if (v < lo || v > hi) { snprintf(e->msg, sizeof(e->msg), "%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi); return 1; }
    *out = v;
    return 0;
}

static int parse_int(const char* flag, const char* s, long lo, long hi, int* out, ParseError* e) {
    long v;
    if (parse_long(flag, s, lo, hi, &v, e)) return 1;
    *out = (int)v;
    return 0;
}

static int parse_float(const char* flag, const char* s, double lo, double hi, float* out, ParseError* e) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v)) { snprintf(e->msg, sizeof(e->msg), "%s: expected a number, got '%s'", flag, s); return 1; }
    if (v < lo || v > hi) { snprintf(e->msg, sizeof(e->msg), "%s: %g is out of range [%g, %g]", flag, v, lo, hi); return 1; }
    *out = (float)v;
    return 0;
}

enum {
    OPT_LAYERS = 1000, OPT_CHANNELS, OPT_HEADS, OPT_MAX_SEQ, OPT_SAVE_MODEL, OPT_SEED, OPT_LR_DECAY,
    OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_GRAD_CLIP, OPT_VAL_STEPS, OPT_TOP_K, OPT_TEMPERATURE,
    OPT_TOKENIZER_DIR, OPT_SHUFFLE, OPT_DEVICE, OPT_THREADS, OPT_UNIT_LAYERS, OPT_PREFETCH,
    OPT_RESHARD, OPT_NO_SYNC, OPT_SHARD_GROUP, OPT_CKPT_EVERY, OPT_CKPT_DIR, OPT_CKPT_KEEP,
    OPT_CKPT_COMPRESS, OPT_CKPT_ASYNC, OPT_RESUME, OPT_STOP_AT, OPT_RENDEZVOUS, OPT_RUN_ID,
    OPT_COMM_TIMEOUT, OPT_MAX_BAD_STEPS, OPT_PEAK_TFLOPS, OPT_COMM, OPT_REDUCE_DTYPE, OPT_ATTENTION,
    OPT_PROFILE_STEP, OPT_GELU_FUSION,
};

// Returns 0 to run, 1 on an error (message in e), 2 for --help.
static int parse_options(int argc, char** argv, Options* o, ParseError* e) {
    memset(o, 0, sizeof(*o));
    o->train_data = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    o->val_data = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    o->model = NULL;
    o->batch_size = 4; o->seq_len = 1024; o->total_batch_tokens = -1; o->max_steps = -1;
    o->lr = 3e-4f; o->final_lr_frac = 0.1f; o->weight_decay = 0.1f;
    o->beta1 = 0.9f; o->beta2 = 0.95f; o->eps = 1e-8f; o->grad_clip = 1.0f;
    o->lr_decay = DECAY_COSINE;
    o->val_every = 20; o->val_steps = 20;
    o->sample_tokens = 64; o->top_k = 40; o->temperature = 1.0f;
    o->tokenizer_dir = NULL;
    o->seed = 1337;
    o->device = "auto";
    o->comm = "auto";
    o->attention = "auto";
    o->gelu_fusion = 2;
    o->unit_layers = 1; o->prefetch = 1; o->reshard_after_forward = 1;
    o->ckpt.codec = CKPT_CODEC_RAW; o->ckpt.zstd_level = 3; o->ckpt.keep = 3;
    o->comm_timeout = 600.0f; o->max_bad_steps = 10;

    static const struct option longopts[] = {
        {"train-data", required_argument, 0, 'i'}, {"val-data", required_argument, 0, 'j'},
        {"output", required_argument, 0, 'o'}, {"model", required_argument, 0, 'm'},
        {"layers", required_argument, 0, OPT_LAYERS}, {"channels", required_argument, 0, OPT_CHANNELS},
        {"heads", required_argument, 0, OPT_HEADS}, {"max-seq", required_argument, 0, OPT_MAX_SEQ},
        {"init-from", required_argument, 0, 'e'}, {"save-model", required_argument, 0, OPT_SAVE_MODEL},
        {"seed", required_argument, 0, OPT_SEED},
        {"batch-size", required_argument, 0, 'b'}, {"seq-len", required_argument, 0, 't'},
        {"total-batch-tokens", required_argument, 0, 'd'}, {"max-steps", required_argument, 0, 'x'},
        {"lr", required_argument, 0, 'l'}, {"warmup-steps", required_argument, 0, 'u'},
        {"lr-decay", required_argument, 0, OPT_LR_DECAY}, {"final-lr-frac", required_argument, 0, 'q'},
        {"weight-decay", required_argument, 0, 'c'}, {"beta1", required_argument, 0, OPT_BETA1},
        {"beta2", required_argument, 0, OPT_BETA2}, {"eps", required_argument, 0, OPT_EPS},
        {"grad-clip", required_argument, 0, OPT_GRAD_CLIP},
        {"val-every", required_argument, 0, 'v'}, {"val-steps", required_argument, 0, OPT_VAL_STEPS},
        {"sample-every", required_argument, 0, 's'}, {"sample-tokens", required_argument, 0, 'g'},
        {"top-k", required_argument, 0, OPT_TOP_K}, {"temperature", required_argument, 0, OPT_TEMPERATURE},
        {"tokenizer-dir", required_argument, 0, OPT_TOKENIZER_DIR},
        {"shuffle", required_argument, 0, OPT_SHUFFLE}, {"device", required_argument, 0, OPT_DEVICE},
        {"threads", required_argument, 0, OPT_THREADS},
        {"fsdp-unit-layers", required_argument, 0, OPT_UNIT_LAYERS},
        {"prefetch", required_argument, 0, OPT_PREFETCH},
        {"reshard-after-forward", required_argument, 0, OPT_RESHARD},
        {"no-grad-sync-until-last", no_argument, 0, OPT_NO_SYNC},
        {"shard-group-size", required_argument, 0, OPT_SHARD_GROUP},
        {"ckpt-every", required_argument, 0, OPT_CKPT_EVERY}, {"ckpt-dir", required_argument, 0, OPT_CKPT_DIR},
        {"ckpt-keep", required_argument, 0, OPT_CKPT_KEEP}, {"ckpt-compress", required_argument, 0, OPT_CKPT_COMPRESS},
        {"ckpt-async", required_argument, 0, OPT_CKPT_ASYNC}, {"resume", required_argument, 0, OPT_RESUME},
        {"stop-at-step", required_argument, 0, OPT_STOP_AT},
        {"rendezvous", required_argument, 0, OPT_RENDEZVOUS}, {"run-id", required_argument, 0, OPT_RUN_ID},
        {"comm-timeout", required_argument, 0, OPT_COMM_TIMEOUT},
        {"max-bad-steps", required_argument, 0, OPT_MAX_BAD_STEPS},
        {"profile-step", required_argument, 0, OPT_PROFILE_STEP},
        {"peak-tflops", required_argument, 0, OPT_PEAK_TFLOPS},
        {"comm", required_argument, 0, OPT_COMM}, {"reduce-dtype", required_argument, 0, OPT_REDUCE_DTYPE},
        {"attention", required_argument, 0, OPT_ATTENTION},
        {"gelu-fusion", required_argument, 0, OPT_GELU_FUSION},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    opterr = 0;
    optind = 1;
    int ch, r = 0;
    long seed;
    while ((ch = getopt_long(argc, argv, ":i:j:o:m:e:b:t:d:x:l:u:q:c:v:s:g:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'i': o->train_data = optarg; break;
        case 'j': o->val_data = optarg; break;
        case 'o': o->output_dir = optarg; break;
        case 'm': o->model = optarg; break;
        case OPT_LAYERS: r = parse_int("--layers", optarg, 1, 1000, &o->layers, e); break;
        case OPT_CHANNELS: r = parse_int("--channels", optarg, 1, 1 << 16, &o->channels, e); break;
        case OPT_HEADS: r = parse_int("--heads", optarg, 1, 1024, &o->heads, e); break;
        case OPT_MAX_SEQ: r = parse_int("--max-seq", optarg, 1, 1 << 20, &o->max_seq, e); break;
        case 'e': o->init_from = optarg; break;
        case OPT_SAVE_MODEL: o->save_model = optarg; break;
        case OPT_SEED: r = parse_long("--seed", optarg, 0, LONG_MAX, &seed, e); o->seed = (uint64_t)seed; break;
        case 'b': r = parse_int("--batch-size", optarg, 1, 1 << 20, &o->batch_size, e); break;
        case 't': r = parse_int("--seq-len", optarg, 1, 1 << 20, &o->seq_len, e); break;
        case 'd': r = parse_long("--total-batch-tokens", optarg, 1, LONG_MAX, &o->total_batch_tokens, e); break;
        case 'x': r = parse_int("--max-steps", optarg, -1, INT32_MAX, &o->max_steps, e); break;
        case 'l': r = parse_float("--lr", optarg, 0.0, 10.0, &o->lr, e); break;
        case 'u': r = parse_int("--warmup-steps", optarg, 0, INT32_MAX, &o->warmup_steps, e); break;
        case OPT_LR_DECAY:
            if (!strcmp(optarg, "cosine")) o->lr_decay = DECAY_COSINE;
            else if (!strcmp(optarg, "linear")) o->lr_decay = DECAY_LINEAR;
            else if (!strcmp(optarg, "constant")) o->lr_decay = DECAY_CONSTANT;
            else { snprintf(e->msg, sizeof(e->msg), "--lr-decay: expected cosine, linear or constant, got '%s'", optarg); r = 1; }
            break;
        case 'q': r = parse_float("--final-lr-frac", optarg, 0.0, 1.0, &o->final_lr_frac, e); break;
        case 'c': r = parse_float("--weight-decay", optarg, 0.0, 10.0, &o->weight_decay, e); break;
        case OPT_BETA1: r = parse_float("--beta1", optarg, 0.0, 0.999999, &o->beta1, e); break;
        case OPT_BETA2: r = parse_float("--beta2", optarg, 0.0, 0.999999, &o->beta2, e); break;
        case OPT_EPS: r = parse_float("--eps", optarg, 1e-30, 1.0, &o->eps, e); break;
        case OPT_GRAD_CLIP: r = parse_float("--grad-clip", optarg, 0.0, 1e9, &o->grad_clip, e); break;
        case 'v': r = parse_int("--val-every", optarg, 0, INT32_MAX, &o->val_every, e); break;
        case OPT_VAL_STEPS: r = parse_int("--val-steps", optarg, 1, 1 << 20, &o->val_steps, e); break;
        case 's': r = parse_int("--sample-every", optarg, 0, INT32_MAX, &o->sample_every, e); break;
        case 'g': r = parse_int("--sample-tokens", optarg, 1, 1 << 20, &o->sample_tokens, e); break;
        case OPT_TOP_K: r = parse_int("--top-k", optarg, 1, 1 << 20, &o->top_k, e); break;
        case OPT_TEMPERATURE: r = parse_float("--temperature", optarg, 1e-3, 100.0, &o->temperature, e); break;
        case OPT_TOKENIZER_DIR: o->tokenizer_dir = optarg; break;
        case OPT_SHUFFLE: r = parse_int("--shuffle", optarg, 0, 1, &o->shuffle, e); break;
        case OPT_DEVICE:
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                snprintf(e->msg, sizeof(e->msg), "--device: expected auto, cpu or cuda, got '%s'", optarg); r = 1;
            }
            o->device = optarg;
            break;
        case OPT_THREADS: r = parse_int("--threads", optarg, 1, 4096, &o->threads, e); break;
        case OPT_UNIT_LAYERS: r = parse_int("--fsdp-unit-layers", optarg, 1, 1000, &o->unit_layers, e); break;
        case OPT_PREFETCH: r = parse_int("--prefetch", optarg, 0, 1000, &o->prefetch, e); break;
        case OPT_RESHARD: r = parse_int("--reshard-after-forward", optarg, 0, 1, &o->reshard_after_forward, e); break;
        case OPT_NO_SYNC: o->no_grad_sync_until_last = 1; break;
        case OPT_SHARD_GROUP: r = parse_int("--shard-group-size", optarg, 1, 1 << 20, &o->shard_group_size, e); break;
        case OPT_CKPT_EVERY: r = parse_int("--ckpt-every", optarg, 0, INT32_MAX, &o->ckpt_every, e); break;
        case OPT_CKPT_DIR: o->ckpt_dir = optarg; break;
        case OPT_CKPT_KEEP: r = parse_int("--ckpt-keep", optarg, 1, 1 << 20, &o->ckpt.keep, e); break;
        case OPT_CKPT_COMPRESS:
            if (!strcmp(optarg, "none")) o->ckpt.codec = CKPT_CODEC_RAW;
            else if (!strcmp(optarg, "zstd")) o->ckpt.codec = CKPT_CODEC_ZSTD;
            else if (!strncmp(optarg, "zstd:", 5)) {
                o->ckpt.codec = CKPT_CODEC_ZSTD;
                r = parse_int("--ckpt-compress zstd:LEVEL", optarg + 5, 1, 19, &o->ckpt.zstd_level, e);
            } else { snprintf(e->msg, sizeof(e->msg), "--ckpt-compress: expected none, zstd or zstd:LEVEL, got '%s'", optarg); r = 1; }
            break;
        case OPT_CKPT_ASYNC: r = parse_int("--ckpt-async", optarg, 0, 1, &o->ckpt.async, e); break;
        case OPT_RESUME: o->resume = optarg; break;
        case OPT_STOP_AT: r = parse_int("--stop-at-step", optarg, 1, INT32_MAX, &o->stop_at_step, e); break;
        case OPT_RENDEZVOUS:
            if (strncmp(optarg, "file:", 5) && strncmp(optarg, "tcp://", 6)) {
                snprintf(e->msg, sizeof(e->msg), "--rendezvous: expected file:DIR or tcp://HOST:PORT, got '%s'", optarg); r = 1;
            } else if (!optarg[optarg[0] == 'f' ? 5 : 6]) {
                snprintf(e->msg, sizeof(e->msg), "--rendezvous %s: the %s is missing", optarg, optarg[0] == 'f' ? "directory" : "address"); r = 1;
            }
            o->rendezvous = optarg;
            break;
        case OPT_RUN_ID:
            if (!*optarg || strchr(optarg, '/')) { snprintf(e->msg, sizeof(e->msg), "--run-id: '%s' must be non-empty and without '/'", optarg); r = 1; }
            o->run_id = optarg;
            break;
        case OPT_COMM_TIMEOUT: r = parse_float("--comm-timeout", optarg, 1.0, 1e7, &o->comm_timeout, e); break;
        case OPT_MAX_BAD_STEPS: r = parse_int("--max-bad-steps", optarg, 1, INT32_MAX, &o->max_bad_steps, e); break;
        case OPT_PROFILE_STEP: r = parse_int("--profile-step", optarg, 0, INT32_MAX, &o->profile_step, e); break;
        case OPT_PEAK_TFLOPS: r = parse_float("--peak-tflops", optarg, 1e-6, 1e7, &o->peak_tflops, e); break;
        case OPT_COMM:
            if (strcmp(optarg, "nccl") && strcmp(optarg, "mpi")) {
                snprintf(e->msg, sizeof(e->msg), "--comm: expected nccl or mpi, got '%s'", optarg); r = 1;
            }
            o->comm = optarg;
            if (!o->cuda_only_flag) o->cuda_only_flag = "--comm";
            break;
        case OPT_REDUCE_DTYPE:
            if (!o->cuda_only_flag) o->cuda_only_flag = "--reduce-dtype";
            if (!strcmp(optarg, "fp32")) o->reduce_fp32 = 1;
            else if (!strcmp(optarg, "bf16")) o->reduce_fp32 = 0;
            else { snprintf(e->msg, sizeof(e->msg), "--reduce-dtype: expected bf16 or fp32, got '%s'", optarg); r = 1; }
            break;
        case OPT_ATTENTION:
            if (strcmp(optarg, "flash") && strcmp(optarg, "cublas")) {
                snprintf(e->msg, sizeof(e->msg), "--attention: expected flash or cublas, got '%s'", optarg); r = 1;
            }
            o->attention = optarg;
            if (!o->cuda_only_flag) o->cuda_only_flag = "--attention";
            break;
        case OPT_GELU_FUSION:
            r = parse_int("--gelu-fusion", optarg, 0, 2, &o->gelu_fusion, e);
            if (!o->cuda_only_flag) o->cuda_only_flag = "--gelu-fusion";
            break;
        case 'h': return 2;
        case ':': snprintf(e->msg, sizeof(e->msg), "%s needs a value", argv[optind - 1]); return 1;
        default: snprintf(e->msg, sizeof(e->msg), "unknown option '%s'", argv[optind - 1]); return 1;
        }
        if (r) return 1;
    }
    if (optind < argc) { snprintf(e->msg, sizeof(e->msg), "unexpected argument '%s'", argv[optind]); return 1; }
    return 0;
}

// Resolves the model shape from the flags or the --init-from file. 0 or an error in e.
static int resolve_config(const Options* o, GPT2Config* c, int* file_version, ParseError* e) {
    memset(c, 0, sizeof(*c));
    if (o->init_from) {
        if (o->model || o->layers || o->channels || o->heads || o->max_seq) {
            snprintf(e->msg, sizeof(e->msg), "--init-from %s defines the model shape: drop -m/--layers/--channels/--heads/--max-seq", o->init_from);
            return 1;
        }
        return read_model_header(o->init_from, c, file_version, e->msg, sizeof(e->msg));
    }
    const char* preset = o->model ? o->model : "d12";
    if (preset_config(preset, c)) {
        snprintf(e->msg, sizeof(e->msg), "--model: unknown preset '%s' (expected d1 ... d48, e.g. d12)", preset);
        return 1;
    }
    if (o->layers) c->num_layers = o->layers;
    if (o->channels) c->channels = o->channels;
    if (o->heads) c->num_heads = o->heads;
    c->max_seq_len = o->max_seq ? o->max_seq : 1024;
    c->vocab_size = GPT2_VOCAB;
    c->padded_vocab_size = pad_vocab(GPT2_VOCAB);
    if (c->channels % c->num_heads != 0) {
        snprintf(e->msg, sizeof(e->msg), "--channels %d is not a multiple of --heads %d", c->channels, c->num_heads);
        return 1;
    }
    return 0;
}

// GPUs this process can use, 0 on a host-only build; why says what is missing when 0.
static int usable_gpus(char* why, size_t whylen) {
#ifdef __CUDACC__
    int gpus = 0;
    cudaError_t st = cudaGetDeviceCount(&gpus);
    if (st != cudaSuccess) {
        snprintf(why, whylen, "no usable GPU (%s)", cudaGetErrorString(st));
        cudaGetLastError();  // clear the sticky error
        return 0;
    }
    if (gpus == 0) snprintf(why, whylen, "no usable GPU");
    return gpus;
#else
    snprintf(why, whylen, "this build has no CUDA support (built without nvcc)");
    return 0;
#endif
}

// Device choice: "cpu" or "cuda", or NULL when cuda was requested and cannot be had (the
// reason in why). The cpu device is the reference.
static const char* choose_device(const char* requested, char* why, size_t whylen) {
    if (!strcmp(requested, "cpu")) { snprintf(why, whylen, "requested"); return "cpu"; }
    char none[200];
    int gpus = usable_gpus(none, sizeof(none));
    if (!strcmp(requested, "cuda")) {
        if (gpus > 0) { snprintf(why, whylen, "requested"); return "cuda"; }
        snprintf(why, whylen, "%s", none);
        return NULL;
    }
    if (gpus > 0) { snprintf(why, whylen, "auto: %d GPU(s) visible", gpus); return "cuda"; }
    snprintf(why, whylen, "auto: %s", none);
    return "cpu";
}


// ----------------------------------------------------------------------------------------
// Checkpoints: what this rank saves (its slices of parameters, Adam m and v) and restores.

typedef struct {
    CkptTensor* tensors;   // every tensor of the model, the same on every rank
    int n_tensors;
    CkptPiece* pieces;     // this rank's slices, 3 kinds each
    int n_pieces;
    uint64_t local_bytes;
} CheckpointTables;

static void checkpoint_tables(GPT2* model, const ProcessGroup* pg, CheckpointTables* ct) {
    const ModelLayout* m = &model->layout;
    Fsdp* f = &model->fsdp;
    int total = 0;
    for (int u = 0; u < m->n_units; u++) total += m->units[u].n_tensors;
    ct->tensors = (CkptTensor*)calloc((size_t)total, sizeof(CkptTensor));
    ct->pieces = (CkptPiece*)calloc((size_t)total * CKPT_KINDS, sizeof(CkptPiece));
    ct->n_tensors = ct->n_pieces = 0;
    ct->local_bytes = 0;
    // The pieces point into the host mirror: a save is preceded by fsdp_download_state.
    float* arenas[CKPT_KINDS] = {f->host_master, f->host_m, f->host_v};
    for (int u = 0; u < m->n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        for (int i = 0; i < m->units[u].n_tensors; i++) {
            const FlatTensor* t = &m->units[u].tensors[i];
            CkptTensor* ck = &ct->tensors[ct->n_tensors++];
            snprintf(ck->name, sizeof(ck->name), "%s", t->name);
            ck->rows = t->rows;
            ck->cols = t->cols;
            size_t lo, hi;
            // HSDP replicas hold the same shards: the first replica group writes them.
            if (pg->replicate_rank != 0 || !flat_tensor_slice(t, begin, end, &lo, &hi)) continue;
            size_t at = f->shard_offset[u] + t->offset + lo - begin;
            for (int k = 0; k < CKPT_KINDS; k++) {
                CkptPiece* p = &ct->pieces[ct->n_pieces++];
                p->tensor = t->name;
                p->kind = k;
                p->lo = lo;
                p->hi = hi;
                p->data = arenas[k] + at;
                ct->local_bytes += (hi - lo) * sizeof(float);
            }
        }
    }
}

static int state_int(const cJSON* obj, const char* key, long* out) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) return 0;
    *out = (long)v->valuedouble;
    return 1;
}

// Loads this rank's slices from a checkpoint saved at any world size, after checking that it
// is this model. Fills the step and the loader state to continue from.
static int checkpoint_load(const char* dir, GPT2* model, int T, long* step, LoaderState* ls, uint64_t* bytes_read,
                           char* err, size_t errlen) {
    Ckpt c;
    if (ckpt_open(&c, dir, err, errlen)) return 1;
    const GPT2Config* mc = &model->config;
    const cJSON* cfg = cJSON_GetObjectItemCaseSensitive(c.state, "config");
    long v[6] = {0}, seq = 0, windows = 0, shuffle = 0;
    const char* keys[6] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads", "channels"};
    const int mine[6] = {mc->max_seq_len, mc->vocab_size, mc->padded_vocab_size, mc->num_layers, mc->num_heads, mc->channels};
    const cJSON* loader = cJSON_GetObjectItemCaseSensitive(c.state, "loader");
    const cJSON* seed = cJSON_GetObjectItemCaseSensitive(loader, "seed");
    int ok = cJSON_IsObject(cfg) && state_int(c.state, "step", step) && state_int(c.state, "seq_len", &seq) &&
             cJSON_IsObject(loader) && state_int(loader, "windows_consumed", &windows) &&
             state_int(loader, "shuffle", &shuffle) && cJSON_IsString(seed);
    for (int i = 0; ok && i < 6; i++) ok = state_int(cfg, keys[i], &v[i]);
    if (!ok) { snprintf(err, errlen, "%s/manifest.json: state lacks the model config, step or data position", dir); ckpt_close(&c); return 1; }
    for (int i = 0; i < 6; i++)
        if (v[i] != mine[i]) {
            snprintf(err, errlen, "%s/manifest.json: the checkpoint's model has %s = %ld, this run's has %d "
                     "(saved: %ld layers, %ld heads, %ld channels, %ld positions)",
                     dir, keys[i], v[i], mine[i], v[3], v[4], v[5], v[0]);
            ckpt_close(&c);
            return 1;
        }
    if (seq != T && windows != 0) {  // an imported checkpoint has consumed no data yet
        snprintf(err, errlen, "%s/manifest.json: saved with --seq-len %ld, this run has %d (the data position counts windows of T)", dir, seq, T);
        ckpt_close(&c);
        return 1;
    }
    const ModelLayout* m = &model->layout;
    Fsdp* f = &model->fsdp;
    // Into the host mirror; the caller uploads it (fsdp_upload_state).
    float* arenas[CKPT_KINDS] = {f->host_master, f->host_m, f->host_v};
    *bytes_read = 0;
    for (int u = 0; u < m->n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        for (int i = 0; i < m->units[u].n_tensors; i++) {
            const FlatTensor* t = &m->units[u].tensors[i];
            const CkptTensor* saved = ckpt_tensor(&c, t->name);
            if (!saved || saved->rows != t->rows || saved->cols != t->cols) {
                snprintf(err, errlen, "%s/manifest.json: tensor %s %s (this model has [%zu, %zu])", dir, t->name,
                         saved ? "has another shape" : "is missing", t->rows, t->cols);
                ckpt_close(&c);
                return 1;
            }
            size_t lo, hi;
            if (!flat_tensor_slice(t, begin, end, &lo, &hi)) continue;
            size_t at = f->shard_offset[u] + t->offset + lo - begin;
            for (int k = 0; k < CKPT_KINDS; k++) {
                if (ckpt_read(&c, t->name, k, lo, hi, arenas[k] + at, err, errlen)) { ckpt_close(&c); return 1; }
                *bytes_read += (hi - lo) * sizeof(float);
            }
        }
    }
    ls->windows_consumed = (uint64_t)windows;
    ls->seed = strtoull(seed->valuestring, NULL, 10);
    ls->shuffle = (int)shuffle;
    ckpt_close(&c);
    return 0;
}

// ----------------------------------------------------------------------------------------
// Operations: stop signals, MFU, what the step line prints

// The exit status after a stop signal (SIGUSR1/SIGTERM) once the checkpoint is committed:
// EX_TEMPFAIL, "try again later". scripts/slurm/*.sbatch requeue the job on it.
#define EXIT_PREEMPTED 75

// Set by the signal handler, read once per step. The only state a signal handler may touch.
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig) { stop_signal = sig; }

static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// Peak dense BF16 tensor-core throughput (no sparsity), from the vendors' data sheets, by a
// part of the device name. More specific names first ("GH200" before "H200").
typedef struct { const char* name; double tflops; } PeakFlops;
static const PeakFlops peak_flops_table[] = {
    {"GB200", 2500.0}, {"B200", 2250.0}, {"GH200", 989.0}, {"H200", 989.0},
    {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.0},  // plain "H100" is the SXM part
    {"H800", 989.0}, {"A100", 312.0}, {"A800", 312.0},
};

// 0 when the device is not in the table (and always for the cpu device).
static double device_peak_tflops(const char* device_name) {
    if (!device_name) return 0.0;
    for (size_t i = 0; i < sizeof(peak_flops_table) / sizeof(peak_flops_table[0]); i++)
        if (strstr(device_name, peak_flops_table[i].name)) return peak_flops_table[i].tflops;
    return 0.0;
}

static void format_duration(double seconds, char* out, size_t n) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600) snprintf(out, n, "%ldh%02ldm", s / 3600, s % 3600 / 60);
    else if (s >= 60) snprintf(out, n, "%ldm%02lds", s / 60, s % 60);
    else snprintf(out, n, "%lds", s);
}

static void json_number(char* out, size_t n, const char* fmt, double x) {
    if (isfinite(x)) snprintf(out, n, fmt, x);
    else snprintf(out, n, "null");
}

// Test hooks (FSDP_TEST_NAN_LOSS_STEPS="3,5"): whether step is in the comma-separated list.
static int test_hook_at(const char* list, int step) {
    for (const char* p = list; p && *p; ) {
        char* end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v == step) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

// GPU memory in use now above baseline, in MiB (cudaMemGetInfo: every process on the GPU).
static double gpu_used_mib(size_t baseline) {
#ifdef __CUDACC__
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0.0;
    size_t used = total_b - free_b;
    return used > baseline ? (double)(used - baseline) / (1024.0 * 1024.0) : 0.0;
#else
    (void)baseline;
    return 0.0;
#endif
}

static void print_memory_line(const char* what, size_t bytes) {
    printf("  %-34s %10.1f MiB\n", what, (double)bytes / (1024.0 * 1024.0));
}

int main(int argc, char** argv) {
    // Flag errors are found identically on every rank, before the ranks meet: the rank the
    // launcher calls 0 says it, all exit.
    Options opt;
    ParseError pe;
    GPT2Config config;
    int file_version = 0;
    int rc = parse_options(argc, argv, &opt, &pe);
    if (rc == 2) { if (launcher_rank() == 0) print_usage(); return 0; }
    if (rc == 0) rc = resolve_config(&opt, &config, &file_version, &pe);
    if (rc) {
        if (launcher_rank() == 0) fprintf(stderr, "error: %s (see --help)\n", pe.msg);
        return 1;
    }

    ProcessGroup pg;
    char err[1024];
    ProcessGroupOptions pg_opt = {opt.rendezvous, opt.run_id, opt.comm_timeout};
    if (process_group_init(&pg, &argc, &argv, &pg_opt, err, sizeof(err))) {
        fprintf(stderr, "error: [rank %d] %s\n", launcher_rank(), err);
        return 1;
    }
    // SIGUSR1/SIGTERM (Slurm's --signal, preemption) only set a flag: the ranks agree on it at
    // the end of a step, checkpoint and exit with EXIT_PREEMPTED.
    install_stop_handlers();
    // Test-only: make the loss or rank 0's gradient non-finite at these steps; make one rank
    // hang before a step ("RANK:STEP") as a stalled GPU or a deadlocked host would.
    const char* test_nan_loss_steps = getenv("FSDP_TEST_NAN_LOSS_STEPS");
    const char* test_nan_grad_steps = getenv("FSDP_TEST_NAN_GRAD_STEPS");
    const char* test_stall = getenv("FSDP_TEST_STALL");
    int B = opt.batch_size, T = opt.seq_len;
    long local_tokens = (long)B * T * pg.world;
    long total_tokens = opt.total_batch_tokens > 0 ? opt.total_batch_tokens : local_tokens;
    if (rc == 0 && T > config.max_seq_len) {
        snprintf(pe.msg, sizeof(pe.msg), "--seq-len %d exceeds the model's %d positions (--max-seq)", T, config.max_seq_len); rc = 1;
    }
    if (rc == 0 && total_tokens % local_tokens != 0) {
        snprintf(pe.msg, sizeof(pe.msg), "--total-batch-tokens %ld is not a multiple of batch-size x seq-len x world size (%d x %d x %d = %ld)",
                 total_tokens, B, T, pg.world, local_tokens); rc = 1;
    }
    if (rc == 0 && opt.shard_group_size && pg.world % opt.shard_group_size != 0) {
        snprintf(pe.msg, sizeof(pe.msg), "--shard-group-size %d does not divide the world size %d", opt.shard_group_size, pg.world); rc = 1;
    }
    const char* device = NULL;
    char why[256] = "";
    if (rc == 0) {
        device = choose_device(opt.device, why, sizeof(why));
        if (!device) { snprintf(pe.msg, sizeof(pe.msg), "--device cuda: %s; use --device cpu", why); rc = 1; }
    }
    int on_cuda = device && !strcmp(device, "cuda");
    if (rc == 0 && !on_cuda && opt.cuda_only_flag) {
        snprintf(pe.msg, sizeof(pe.msg), "%s applies to the cuda device only, and this run is on the cpu device (%s)",
                 opt.cuda_only_flag, why); rc = 1;
    }
    if (rc == 0 && on_cuda && config.channels % 8 != 0) {  // 128-bit row kernels
        snprintf(pe.msg, sizeof(pe.msg), "--device cuda needs --channels to be a multiple of 8, got %d", config.channels); rc = 1;
    }
    if (rc) {
        if (pg.rank == 0) fprintf(stderr, "error: %s (see --help)\n", pe.msg);
        process_group_finalize(&pg);
        return 1;
    }
    if (process_group_split(&pg, opt.shard_group_size, err, sizeof(err))) fatal(&pg, "%s", err);

    // The GPU: local rank modulo the GPUs visible (several ranks share one with --comm mpi).
    DeviceOptions dopt;
    memset(&dopt, 0, sizeof(dopt));
    char gpu_name[256] = "", gpu_desc[400] = "";
    char comm_why[128] = "";
    size_t gpu_baseline_used = 0;  // device memory in use before this process allocated any
    (void)gpu_desc; (void)comm_why;  // printed by CUDA builds only
    if (on_cuda) {
#ifdef __CUDACC__
        int gpus = 0;
        CUDA_CHECK(cudaGetDeviceCount(&gpus));
        int gpu = pg.local_rank % gpus;
        CUDA_CHECK(cudaSetDevice(gpu));
        CUDA_CHECK(cudaFree(0));  // create the context now: the baseline below includes it
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
        snprintf(gpu_name, sizeof(gpu_name), "%s", prop.name);
        snprintf(gpu_desc, sizeof(gpu_desc), "GPU %d of %d: %s, %.1f GiB, sm_%d%d", gpu, gpus, prop.name,
                 prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor);
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        gpu_baseline_used = total_b - free_b;
        dopt.cuda = 1;
        if (!strcmp(opt.comm, "auto")) {
            dopt.use_nccl = pg.local_world <= gpus;
            snprintf(comm_why, sizeof(comm_why), "%s", dopt.use_nccl ? "one GPU per local rank" : "ranks share a GPU, which NCCL refuses");
        } else {
            dopt.use_nccl = !strcmp(opt.comm, "nccl");
            snprintf(comm_why, sizeof(comm_why), "requested");
            if (dopt.use_nccl && pg.local_world > gpus)
                fatal_agreed(&pg, "--comm nccl: %d local ranks share %d GPU(s), which NCCL refuses; use --comm mpi", pg.local_world, gpus);
        }
        dopt.reduce_fp32 = opt.reduce_fp32;
        int hs = config.channels / config.num_heads;
        if (!strcmp(opt.attention, "auto")) dopt.attention = attention_flash_supports(hs) ? ATTENTION_FLASH : ATTENTION_CUBLAS;
        else if (!strcmp(opt.attention, "flash") && !attention_flash_supports(hs))
            fatal_agreed(&pg, "--attention flash supports head sizes 64 and 128, this model's is %d; use --attention cublas", hs);
        else dopt.attention = attention_impl_from_name(opt.attention);
        dopt.gelu_fusion = opt.gelu_fusion;
        dopt.seed = opt.seed;
#endif
    }
    // The peak table knows GPUs by name; the cpu device has no entry (no MFU).
    double peak_tflops = opt.peak_tflops > 0 ? opt.peak_tflops : device_peak_tflops(on_cuda ? gpu_name : NULL);

    int threads = opt.threads;
    if (!threads) {
        const char* env = getenv("OMP_NUM_THREADS");
        threads = env && atoi(env) > 0 ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN) / pg.local_world;
        if (threads < 1) threads = 1;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);

    int grad_accum = (int)(total_tokens / local_tokens);
    long global_seqs = total_tokens / T;  // windows per optimizer step

    // Data
    DataLoader train_loader, val_loader;
    int have_val = opt.val_every > 0 && opt.val_data && opt.val_data[0];
    if (loader_open(&train_loader, opt.train_data, (size_t)T, config.vocab_size, opt.seed, opt.shuffle, err, sizeof(err)))
        fatal(&pg, "--train-data: %s", err);
    if (have_val && loader_open(&val_loader, opt.val_data, (size_t)T, config.vocab_size, opt.seed, 0, err, sizeof(err)))
        fatal(&pg, "--val-data: %s", err);
    int max_steps = opt.max_steps;
    if (max_steps < 0) {
        max_steps = (int)(train_loader.windows_per_epoch / (size_t)global_seqs);
        if (max_steps < 1) max_steps = 1;
    }

    // Model and engine
    FsdpConfig fcfg = {opt.prefetch, opt.reshard_after_forward, !opt.no_grad_sync_until_last};
    GPT2 model;
    gpt2_build(&model, &config, opt.unit_layers, &pg, &fcfg, &dopt, B, T);
    // Initial weights are written into the host mirror, then uploaded (a no-op on the cpu).
    if (opt.init_from) {
        if (load_model_file(&model.layout, &model.fsdp, opt.init_from, file_version, err, sizeof(err))) fatal(&pg, "%s", err);
    } else {
        init_parameters(&model.layout, &model.fsdp, opt.seed);
    }
    fsdp_upload_state(&model.fsdp, 0);

    // Checkpoints: where, and whether this run continues one.
    char ckpt_root[1100] = "";
    if (opt.ckpt_dir) snprintf(ckpt_root, sizeof(ckpt_root), "%s", opt.ckpt_dir);
    else if (opt.output_dir) snprintf(ckpt_root, sizeof(ckpt_root), "%s/ckpt", opt.output_dir);
    if ((opt.ckpt_every > 0 || (opt.resume && !strcmp(opt.resume, "auto"))) && !ckpt_root[0])
        fatal(&pg, "--ckpt-every and --resume auto need -o DIR or --ckpt-dir DIR");
    int start_step = 0;
    int resumed = 0;
    if (opt.resume) {
        char path[1100] = "";
        if (strcmp(opt.resume, "auto") != 0) snprintf(path, sizeof(path), "%s", opt.resume);
        else if (!ckpt_find_latest(ckpt_root, path, sizeof(path))) path[0] = '\0';
        if (path[0]) {
            long step = 0;
            uint64_t bytes = 0;
            LoaderState ls;
            double t0 = now_seconds();
            if (checkpoint_load(path, &model, T, &step, &ls, &bytes, err, sizeof(err))) fatal(&pg, "--resume: %s", err);
            // The compute-dtype shard is rounded as the optimizer's step `step` rounded it: a
            // resume continues bitwise.
            fsdp_upload_state(&model.fsdp, (int)step);
            loader_set_state(&train_loader, &ls);
            start_step = (int)step;
            resumed = 1;
            double secs = now_seconds() - t0, total_bytes = 0.0, mine = (double)bytes;
            total_bytes = mine;
            comm_all_reduce_f64(pg.world_comm, &total_bytes, 1, COMM_SUM);
            comm_all_reduce_f64(pg.world_comm, &secs, 1, COMM_MAX);
            if (pg.rank == 0)
                printf("resumed from %s (step %d): loaded %.3f GiB in %.2f s (%.2f GB/s)\n", path, start_step,
                       total_bytes / (1 << 30), secs, total_bytes / 1e9 / secs);
        } else if (pg.rank == 0) {
            printf("--resume auto: no checkpoint in %s, starting fresh\n", ckpt_root);
        }
    }
    // A writer whenever there is a checkpoint directory: a stop signal saves even without --ckpt-every.
    CkptWriter* ckpt_writer = ckpt_root[0] ? ckpt_writer_create(&opt.ckpt, pg.world_comm) : NULL;
    int ckpt_saves = 0;
    CheckpointTables ckpt_tables;
    memset(&ckpt_tables, 0, sizeof(ckpt_tables));
    if (ckpt_writer) {
        checkpoint_tables(&model, &pg, &ckpt_tables);
        if (ckpt_writer_reserve(ckpt_writer, ckpt_tables.local_bytes / sizeof(float)))
            fatal(&pg, "--ckpt-async: out of host memory for the %.1f MiB snapshot buffer", ckpt_tables.local_bytes / 1048576.0);
        if (pg.rank == 0 && opt.ckpt.async)
            printf("async checkpoints: %.1f MiB snapshot buffer per rank\n", ckpt_tables.local_bytes / 1048576.0);
    }

    // The tokenizer is only needed to print samples. Without --tokenizer-dir, look where
    // the data scripts put the GPT-2 files: data/gpt2, then $FSDP_DATA/gpt2, ../shared/data/gpt2.
    Tokenizer* tokenizer = NULL;
    if (opt.sample_every > 0) {
        const char* env = getenv("FSDP_DATA");
        char env_dir[1024] = "";
        if (env && *env) snprintf(env_dir, sizeof(env_dir), "%s/gpt2", env);
        const char* dirs[] = {opt.tokenizer_dir ? opt.tokenizer_dir : "data/gpt2",
                              opt.tokenizer_dir ? NULL : env_dir, opt.tokenizer_dir ? NULL : "../shared/data/gpt2"};
        for (int i = 0; i < 3 && !tokenizer; i++) {
            if (!dirs[i] || !dirs[i][0]) continue;
            char enc[1100], bpe[1100], why_not[1024];
            snprintf(enc, sizeof(enc), "%s/encoder.json", dirs[i]);
            snprintf(bpe, sizeof(bpe), "%s/vocab.bpe", dirs[i]);
            tokenizer = tokenizer_load(enc, bpe, why_not, sizeof(why_not));
            if (!tokenizer && i == 0) snprintf(err, sizeof(err), "%s", why_not);
        }
        if (!tokenizer && pg.rank == 0)
            printf("note: samples print token ids (no tokenizer: %s)\n", err);
    }

    FILE* metrics = NULL;
    if (pg.rank == 0 && opt.output_dir) {
        if (ckpt_mkdir_p(opt.output_dir) != 0) fatal(&pg, "-o %s: cannot create: %s", opt.output_dir, strerror(errno));
        char path[1100];
        snprintf(path, sizeof(path), "%s/metrics.jsonl", opt.output_dir);
        metrics = fopen(path, resumed ? "a" : "w");  // a resumed run continues the same log
        if (!metrics) fatal(&pg, "%s: cannot open for writing: %s", path, strerror(errno));
    }

    size_t act_bytes = model.acts.total_bytes;
    size_t io_bytes = 2 * (size_t)B * T * sizeof(int);
    size_t step_losses_bytes = (size_t)grad_accum * B * T * sizeof(float);  // host copies of a step's losses
    FsdpMemory* mm = &model.fsdp.memory;
    size_t extra_device = gpt2_device_extra_bytes(&model);
    size_t device_budget = mm->shard_state + mm->gathered + mm->full_grads + act_bytes + extra_device;
    if (pg.rank == 0) {
        printf("fsdp.c train_gpt | device %s (%s) | %d rank(s) via %s (%s), %d thread(s) each\n", device, why, pg.world,
               pg.launcher, pg.transport, threads);
        if (on_cuda) {
#ifdef __CUDACC__
            printf("cuda: %s | collectives %s (%s), reduce %s | attention %s, gelu fusion %d | peak %.0f TFLOP/s%s\n",
                   gpu_desc, dopt.use_nccl ? "nccl" : "mpi (staged through host memory)", comm_why,
                   dopt.reduce_fp32 ? "fp32" : "bf16", attention_impl_name((AttentionImpl)dopt.attention), dopt.gelu_fusion,
                   peak_tflops,
                   peak_tflops > 0 ? "" : " (unknown GPU: no MFU; --peak-tflops sets it)");
#endif
        }
        printf("model: %d layers, %d heads, %d channels, max_seq %d, vocab %d (padded %d): %zu parameters\n",
               config.num_layers, config.num_heads, config.channels, config.max_seq_len, config.vocab_size,
               config.padded_vocab_size, model.layout.num_parameters);
        printf("sharding: %d unit(s) of %d block(s) + root, shard group %d x %d replica(s), prefetch %d, reshard after forward %d, grad sync %s\n",
               model.layout.n_units - 1, opt.unit_layers, pg.shard_size, pg.replicate_size, opt.prefetch,
               opt.reshard_after_forward, opt.no_grad_sync_until_last ? "last micro-step" : "every micro-step");
        printf("batch: %d x %d per rank, %d rank(s), %d accumulation step(s) = %ld tokens per step; %d steps\n",
               B, T, pg.world, grad_accum, total_tokens, max_steps);
        printf("train data: %d shard(s), %zu sequences per epoch%s\n", train_loader.n_shards, train_loader.windows_per_epoch,
               opt.shuffle ? ", shuffled" : "");
        printf("memory budget per rank%s:\n", on_cuda ? " (GPU memory)" : "");
        // (on cuda the shards also hold the bf16 copy of the parameters)
        print_memory_line("sharded params + grads + Adam m, v", mm->shard_state);
        print_memory_line("gathered parameter slots", mm->gathered);
        print_memory_line("full-gradient slots", mm->full_grads);
        print_memory_line("activations", act_bytes);
        if (on_cuda) {
#ifdef __CUDACC__
            CudaDevice* cd = (CudaDevice*)model.dev.impl;
            print_memory_line("collective buffers (backend)", fsdp_backend_cuda_device_bytes(&model.backend));
            print_memory_line("cuBLASLt workspace", cd->mm.workspace_bytes);
            print_memory_line("kernel + attention scratch, tokens", cd->device_bytes - cd->mm.workspace_bytes);
            print_memory_line("total", device_budget);
            print_memory_line("host: fp32 mirror of master, m, v", mm->host_mirror);
            print_memory_line("host: pinned staging (backend)", fsdp_backend_cuda_host_bytes(&model.backend));
#endif
        } else {
            print_memory_line("total", device_budget + io_bytes + step_losses_bytes);
        }
        fflush(stdout);
    }

    int* inputs = (int*)malloc(io_bytes / 2);
    int* targets = (int*)malloc(io_bytes / 2);
    // This step's losses, filled micro-step by micro-step and read once the step is done
    // (one wait for the device per step).
    float* step_losses = (float*)model.backend.alloc_host(model.backend.ctx, step_losses_bytes);
    // Everything the budget counts is allocated and touched by now.
    double setup_rss = max_over_ranks_mib(&pg, current_rss_bytes());
    if (pg.rank == 0) printf("resident after setup: %.1f MiB per rank (max over ranks; the budget plus the program and its libraries)\n", setup_rss);
    double device_used_mib = 0.0;  // cuda: GPU memory in use above the baseline, max over the run
    if (on_cuda) {
        device_used_mib = gpu_used_mib(gpu_baseline_used);
        double setup_dev = max_over_ranks_mib(&pg, (size_t)(device_used_mib * 1048576.0));
        if (pg.rank == 0)
            printf("GPU memory after setup: %.1f MiB in use (max over ranks; cudaMemGetInfo above the context%s), budget %.1f MiB\n",
                   setup_dev, pg.local_world > 1 ? ", every process on the GPU" : "", device_budget / 1048576.0);
    }
    float dloss = 1.0f / (float)((double)B * T * grad_accum * pg.world);
    double train_ms_total = 0.0, data_ms_total = 0.0;
    FsdpTraffic train_traffic = {0, 0, 0};  // communication of the training steps only
    int timed_steps = 0, steps_run = 0;  // steps_run: this job's; the first is not timed
    int profiled_steps = 0;              // --profile-step's (not timed either)
    double run_t0 = now_seconds();
    long ckpt_reported = -1;  // the last async commit announced
    int bad_in_a_row = 0;     // steps skipped for a non-finite loss or gradient norm
    StepProfile step_profile; // --profile-step's marks
    memset(&step_profile, 0, sizeof(step_profile));
    int exit_code = 0;
    // MFU: the model's flops per token (6N + 6LCT: forward and backward of every weight, plus
    // attention's scores and weighted sums) against the device's peak over every rank.
    double flops_per_token = 6.0 * (double)model.layout.num_parameters + 6.0 * config.num_layers * config.channels * (double)T;
    double peak_flops = peak_tflops * 1e12 * pg.world;
    for (int step = start_step; step <= max_steps; step++) {
        int last = step == max_steps;
        if (have_val && (step % opt.val_every == 0 || last)) {
            double local = 0.0;
            int rounds = opt.val_steps * grad_accum;
            for (int k = 0; k < rounds; k++) {
                if (loader_read_micro_batch(&val_loader, k, pg.world, pg.rank, B, inputs, targets, err, sizeof(err))) fatal(&pg, "%s", err);
                gpt2_forward(&model, inputs, targets, B, T, 0.0f);
                gpt2_losses_to_host(&model, step_losses, B, T);
                model.dev.synchronize(&model.dev);
                for (long i = 0; i < (long)B * T; i++) local += step_losses[i];
            }
            fsdp_release_all(&model.fsdp);
            comm_all_reduce_f64(pg.world_comm, &local, 1, COMM_SUM);
            double val_loss = local / ((double)rounds * pg.world * B * T);
            if (pg.rank == 0) {
                printf("val loss %.6f (step %d)\n", val_loss, step);
                if (metrics) { fprintf(metrics, "{\"step\":%d,\"val_loss\":%.9f}\n", step, val_loss); fflush(metrics); }
            }
        }
        if (opt.sample_every > 0 && step > 0 && (step % opt.sample_every == 0 || last))
            generate_sample(&model, &pg, tokenizer, opt.sample_tokens, opt.top_k, opt.temperature, opt.seed, step);
        if (last) break;
        if (opt.stop_at_step && step >= opt.stop_at_step) break;

        if (test_stall && atoi(test_stall) == pg.rank && strchr(test_stall, ':') && test_hook_at(strchr(test_stall, ':') + 1, step + 1))
            for (;;) pause();
        double t0 = now_seconds(), data_seconds = 0.0;
        if (opt.profile_step == step + 1) prof_begin(&model, &step_profile);
        prof(&model, PH_HOST, 0);
        FsdpTraffic before = model.fsdp.traffic;
        fsdp_zero_grad(&model.fsdp, grad_accum);
        double local_loss = 0.0;
        for (int k = 0; k < grad_accum; k++) {
            // This rank's rows of the global batch: the batch does not depend on W and B.
            double d0 = now_seconds();
            if (loader_read_micro_batch(&train_loader, k, pg.world, pg.rank, B, inputs, targets, err, sizeof(err))) fatal(&pg, "%s", err);
            data_seconds += now_seconds() - d0;
            gpt2_forward(&model, inputs, targets, B, T, dloss);
            gpt2_losses_to_host(&model, step_losses + (size_t)k * B * T, B, T);
            gpt2_backward(&model, B, T);
            prof(&model, PH_FSDP, 1);
            fsdp_end_micro_step(&model.fsdp);
            prof(&model, PH_HOST, 0);
        }
        model.dev.synchronize(&model.dev);
        prof(&model, PH_HOST, 0);
        for (long i = 0; i < (long)grad_accum * B * T; i++) local_loss += step_losses[i];
        loader_advance(&train_loader, (uint64_t)global_seqs);
        int completed = step + 1;
        if (pg.rank == 0 && test_hook_at(test_nan_loss_steps, completed)) local_loss = NAN;
        if (pg.rank == 0 && test_hook_at(test_nan_grad_steps, completed)) {
            float nan = NAN;
            model.backend.copy_to_device(model.backend.ctx, model.fsdp.grad_shard, &nan, sizeof(nan));
        }
        // One reduction carries the loss and whether any rank was asked to stop, so that every
        // rank takes the same decision at the same step.
        double reduced[2] = {local_loss, stop_signal != 0 ? 1.0 : 0.0};
        comm_all_reduce_f64(pg.world_comm, reduced, 2, COMM_SUM);
        double loss = reduced[0] / (double)total_tokens;
        int stop_now = reduced[1] > 0.0;
        float lr = learning_rate(step, max_steps, opt.lr, opt.warmup_steps, opt.final_lr_frac, opt.lr_decay);
        prof(&model, PH_OPTIMIZER, 0);
        float norm = fsdp_grad_norm(&model.fsdp);
        // A non-finite loss or norm (identical on every rank) would poison the weights and
        // Adam's moments: skip the update, keep the schedule's step count.
        int bad = !isfinite(loss) || !isfinite(norm);
        if (!bad) {
            fsdp_optimizer_step(&model.fsdp, norm, lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.grad_clip, completed);
            bad_in_a_row = 0;
        } else {
            bad_in_a_row++;
        }
        train_traffic.gathered += model.fsdp.traffic.gathered - before.gathered;
        train_traffic.reduce_scattered += model.fsdp.traffic.reduce_scattered - before.reduce_scattered;
        train_traffic.replica_reduced += model.fsdp.traffic.replica_reduced - before.replica_reduced;
        double ms = (now_seconds() - t0) * 1000.0;
        int profiled = model.prof != NULL;
        if (profiled) {
            prof(&model, PH_HOST, 0);  // the end of the step's timeline
            prof_report(&model, step + 1, ms, pg.rank);
            profiled_steps++;
        }
        if (on_cuda) {
            double used = gpu_used_mib(gpu_baseline_used);
            if (used > device_used_mib) device_used_mib = used;
        }
        // The profiled step's marks cost time of their own: it stays out of the average.
        if (steps_run++ > 0 && !profiled) { train_ms_total += ms; data_ms_total += data_seconds * 1000.0; timed_steps++; }
        double tok_s = (double)total_tokens / (ms / 1000.0);
        if (pg.rank == 0) {
            int end_step = opt.stop_at_step && opt.stop_at_step < max_steps ? opt.stop_at_step : max_steps;
            double avg_ms = timed_steps > 0 ? train_ms_total / timed_steps : ms;
            char eta[32], mfu[32] = "", loss_s[32], norm_s[32];
            format_duration((end_step - completed) * avg_ms / 1000.0, eta, sizeof(eta));
            if (peak_flops > 0) snprintf(mfu, sizeof(mfu), " | mfu %.1f%%", 100.0 * tok_s * flops_per_token / peak_flops);
            // cpu: peak resident memory; cuda: GPU memory in use
            double mem_mib = on_cuda ? device_used_mib : (double)peak_rss_bytes() / (1024.0 * 1024.0);
            printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s%s | mem %.0f MiB | eta %s%s\n",
                   completed, max_steps, loss, norm, lr, ms, tok_s, mfu, mem_mib, eta,
                   bad ? " | update skipped: non-finite loss or gradient norm" : "");
            fflush(stdout);
            if (metrics) {
                // JSON has no NaN or Infinity: a non-finite value is written as null.
                json_number(loss_s, sizeof(loss_s), "%.9f", loss);
                json_number(norm_s, sizeof(norm_s), "%.6f", norm);
                fprintf(metrics, "{\"step\":%d,\"loss\":%s,\"lr\":%.6e,\"grad_norm\":%s,\"ms\":%.3f,\"data_ms\":%.3f,"
                                 "\"tokens_per_s\":%.1f,\"tokens\":%ld,\"mem_mib\":%.1f",
                        completed, loss_s, lr, norm_s, ms, data_seconds * 1000.0, tok_s, total_tokens * (long)completed, mem_mib);
                if (peak_flops > 0) fprintf(metrics, ",\"mfu\":%.5f", tok_s * flops_per_token / peak_flops);
                if (bad) fprintf(metrics, ",\"skipped\":true");
                fprintf(metrics, "}\n");
                fflush(metrics);
            }
        }
        if (bad_in_a_row >= opt.max_bad_steps)
            fatal_agreed(&pg, "step %d: %d step(s) in a row with a non-finite loss or gradient norm (--max-bad-steps %d); "
                         "no update was applied for them, so the weights are those after step %d",
                         completed, bad_in_a_row, opt.max_bad_steps, completed - bad_in_a_row);

        if (ckpt_writer && ckpt_writer_poll(ckpt_writer, err, sizeof(err))) fatal_agreed(&pg, "checkpoint: %s", err);
        if (stop_now && pg.rank == 0)
            printf("stop signal received: %s after step %d\n", ckpt_writer ? "saving a checkpoint and exiting" : "exiting (no checkpoint directory: -o or --ckpt-dir)", completed);
        if (ckpt_writer && (stop_now || (opt.ckpt_every > 0 && (completed % opt.ckpt_every == 0 || completed == max_steps || completed == opt.stop_at_step)))) {
            ckpt_saves++;
            double t0 = now_seconds();
            fsdp_download_state(&model.fsdp);  // the checkpoint's pieces point into the host mirror
            const LoaderState* ls = &train_loader.state;
            cJSON* state = gpt2_checkpoint_state(&config, completed, total_tokens * (long)completed, pg.world, T,
                                                 total_tokens, ls->windows_consumed, ls->seed, ls->shuffle);
            if (ckpt_save(ckpt_writer, ckpt_root, completed, ckpt_tables.tensors, ckpt_tables.n_tensors,
                          ckpt_tables.pieces, ckpt_tables.n_pieces, state, err, sizeof(err)))
                fatal_agreed(&pg, "checkpoint step %d not saved (the previous ones are intact): %s", completed, err);
            double secs = now_seconds() - t0, total_bytes = (double)ckpt_tables.local_bytes;
            comm_all_reduce_f64(pg.world_comm, &total_bytes, 1, COMM_SUM);
            if (pg.rank == 0) {
                if (opt.ckpt.async) printf("checkpoint step %d: %.3f GiB snapshotted in %.2f s, writing in the background\n", completed, total_bytes / (1 << 30), secs);
                else printf("checkpoint step %d: saved %.3f GiB in %.2f s (%.2f GB/s) to %s\n", completed, total_bytes / (1 << 30), secs, total_bytes / 1e9 / secs, ckpt_root);
                fflush(stdout);
            }
        }
        if (ckpt_writer && opt.ckpt.async && pg.rank == 0 && ckpt_writer_last_committed(ckpt_writer) > ckpt_reported) {
            ckpt_reported = ckpt_writer_last_committed(ckpt_writer);
            printf("checkpoint step %ld committed\n", ckpt_reported);
        }
        if (stop_now) {
            // Without a checkpoint a requeued job would start over: that is a failure, not a pause.
            exit_code = ckpt_writer ? EXIT_PREEMPTED : 1;
            break;
        }
    }
    free(step_profile.marks);
    free(step_profile.what);
    if (ckpt_writer) {
        if (ckpt_writer_finish(ckpt_writer, err, sizeof(err))) fatal_agreed(&pg, "checkpoint: %s", err);
        double run_secs = now_seconds() - run_t0;
        if (pg.rank == 0) {
            if (opt.ckpt.async && ckpt_writer_last_committed(ckpt_writer) > ckpt_reported)
                printf("checkpoint step %ld committed\n", ckpt_writer_last_committed(ckpt_writer));
            if (ckpt_saves > 0)
                printf("checkpointing blocked training for %.2f s of %.2f s (%.1f%%)\n", ckpt_writer_blocked_seconds(ckpt_writer),
                       run_secs, 100.0 * ckpt_writer_blocked_seconds(ckpt_writer) / run_secs);
        }
        ckpt_writer_free(ckpt_writer);
        free(ckpt_tables.tensors);
        free(ckpt_tables.pieces);
    }

    if (opt.save_model && exit_code == 0) {
        fsdp_download_state(&model.fsdp);
        if (save_model_file(&model.layout, &model.fsdp, &pg, opt.save_model, err, sizeof(err)))
            fatal_agreed(&pg, "--save-model: %s", err);
        if (pg.rank == 0) printf("saved %s\n", opt.save_model);
    }

    // Measured peak resident memory, every rank. Above the setup figure it holds what the
    // libraries allocate while training: OpenBLAS's per-thread buffers and MPI's reduction
    // temporaries (Open MPI's non-blocking reduce-scatter stages whole units on one rank).
    double peak = max_over_ranks_mib(&pg, peak_rss_bytes());
    double peak_device = on_cuda ? max_over_ranks_mib(&pg, (size_t)(device_used_mib * 1048576.0)) : 0.0;
    if (pg.rank == 0) {
        if (timed_steps > 0)
            printf("average step %.1f ms (%.0f tok/s) over %d steps after the first%s; data loading %.3f ms of it (%.2f%%, rank 0)\n",
                   train_ms_total / timed_steps, (double)total_tokens * timed_steps / (train_ms_total / 1000.0), timed_steps,
                   profiled_steps ? " (not the profiled one)" : "", data_ms_total / timed_steps,
                   100.0 * data_ms_total / train_ms_total);
        printf("peak resident memory per rank: %.1f MiB (max over ranks)\n", peak);
        if (on_cuda) printf("peak GPU memory per rank: %.1f MiB measured (max over ranks; cudaMemGetInfo above the context%s), budget %.1f MiB\n",
                            peak_device, pg.local_world > 1 ? ", every process on the GPU" : "", device_budget / 1048576.0);
        // Communication per optimizer step, against FSDP's 3 x params x (W-1)/W (gather for
        // forward, again for backward, reduce-scatter): the root stays gathered for the whole
        // step, so it is gathered once instead of twice.
        const FsdpTraffic* tr = &train_traffic;
        double steps = (double)steps_run, W = (double)pg.shard_size, mib = 1024.0 * 1024.0;
        double formula = 3.0 * (double)model.layout.num_parameters * sizeof(float) * (W - 1.0) / W * grad_accum;
        if (steps_run > 0) printf("communication per step per rank: all-gather %.1f MiB, reduce-scatter %.1f MiB, replica all-reduce %.1f MiB; "
               "3 x params x (W-1)/W x micro-steps = %.1f MiB\n",
               tr->gathered / steps / mib, tr->reduce_scattered / steps / mib, tr->replica_reduced / steps / mib, formula / mib);
    }

    if (metrics) fclose(metrics);
    free(inputs); free(targets);
    model.backend.release_host(model.backend.ctx, step_losses);
    if (tokenizer) tokenizer_free(tokenizer);
    loader_close(&train_loader);
    if (have_val) loader_close(&val_loader);
    gpt2_free(&model);
    process_group_finalize(&pg);
    if (exit_code == EXIT_PREEMPTED && pg.rank == 0) printf("exiting with status %d: resume with --resume auto\n", EXIT_PREEMPTED);
    return exit_code;
}
#endif  // TESTING
