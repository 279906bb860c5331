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
#endif

#include "dataloader/loader.h"
#include "dataloader/tokenizer.h"
#include "fsdp/backend_cpu.h"
#include "fsdp/flat_unit.h"
#include "fsdp/fsdp.h"
#include "fsdp/process_group.h"
#include "checkpoint/checkpoint.h"
#include "kernels/cpu_kernels.h"
#include "model/gpt2.h"

extern "C" void openblas_set_num_threads(int num_threads);

// Pointers into a gathered unit (parameters or gradients: same layout).
typedef struct { float *wte, *wpe, *lnfw, *lnfb; } RootTensors;
typedef struct { float* t[BLOCK_TENSORS]; } BlockTensors;

static RootTensors root_tensors(const ModelLayout* m, float* base) {
    const FlatUnit* u = &m->units[0];
    RootTensors r = {base + u->tensors[ROOT_WTE].offset, base + u->tensors[ROOT_WPE].offset,
                     base + u->tensors[ROOT_LNF_W].offset, base + u->tensors[ROOT_LNF_B].offset};
    return r;
}

static BlockTensors block_tensors(const ModelLayout* m, int u, int layer_in_unit, float* base) {
    BlockTensors b;
    for (int j = 0; j < BLOCK_TENSORS; j++)
        b.t[j] = base + m->units[u].tensors[layer_in_unit * BLOCK_TENSORS + j].offset;
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

static void init_parameters(const ModelLayout* m, Fsdp* f, uint64_t seed) {
    const GPT2Config* c = &m->config;
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    for (int u = 0; u < m->n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        float* shard = fsdp_master_shard(f, u);
        const FlatUnit* unit = &m->units[u];
        for (int i = 0; i < unit->n_tensors; i++) {
            const FlatTensor* t = &unit->tensors[i];
            size_t lo, hi;
            if (!flat_tensor_slice(t, begin, end, &lo, &hi)) continue;
            int kind, layer;
            tensor_kind(m, u, i, &kind, &layer);
            uint64_t stream = (uint64_t)kind * 4096 + (uint64_t)layer;
            float* dst = shard + (t->offset + lo - begin);
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

// Every rank reads only the parts of the file that fall into its shards.
static int load_model_file(const ModelLayout* m, Fsdp* f, const char* path, int version, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    size_t elem = version == 3 ? 4 : 2;
    uint16_t* staging = NULL;
    size_t staging_len = 0;
    for (int u = 0; u < m->n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        float* shard = fsdp_master_shard(f, u);
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
// atomically (written as PATH.tmp, synced, renamed).
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
            comm_gather(pg->shard_comm, fsdp_master_shard(f, u), unit->shard * sizeof(float), full, 0);
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
// Activations for one micro-batch of B x T, one allocation carved into named buffers.
// Per-layer buffers are strided by the allocated B*T, so a smaller forward (sampling with
// B = 1) uses the same memory.

typedef struct {
    float* encoded;                       // [B,T,C]
    float *ln1, *ln1_mean, *ln1_rstd;     // [L,B,T,C], [L,B,T] x2
    float* qkv;                           // [L,B,T,3C]
    float* atty;                          // [L,B,T,C]
    float* att_lse;                       // [L,B,NH,T]
    float* residual2;                     // [L,B,T,C]
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu;                // [L,B,T,4C]
    float* residual3;                     // [L,B,T,C]
    float *lnf, *lnf_mean, *lnf_rstd;     // [B,T,C], [B,T] x2
    float* logits;                        // [B,T,Vp]; the loss overwrites it with dlogits
    float* losses;                        // [B,T]
    float* proj_out;                      // [B,T,C] projection output before the residual add
    // backward scratch, one layer's worth
    float *dresidual, *dbtc, *dqkv, *dfch, *dfch_gelu;
    size_t BT;                            // allocated B*T
    size_t total_floats;
} Activations;

static size_t carve_activations(Activations* a, const GPT2Config* c, size_t B, size_t T, float* base) {
    size_t BT = B * T, C = (size_t)c->channels, L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
    size_t Vp = (size_t)c->padded_vocab_size;
    struct { float** p; size_t n; } parts[] = {
        {&a->encoded, BT * C},
        {&a->ln1, L * BT * C}, {&a->ln1_mean, L * BT}, {&a->ln1_rstd, L * BT},
        {&a->qkv, L * BT * 3 * C}, {&a->atty, L * BT * C}, {&a->att_lse, L * B * NH * T},
        {&a->residual2, L * BT * C},
        {&a->ln2, L * BT * C}, {&a->ln2_mean, L * BT}, {&a->ln2_rstd, L * BT},
        {&a->fch, L * BT * 4 * C}, {&a->fch_gelu, L * BT * 4 * C}, {&a->residual3, L * BT * C},
        {&a->lnf, BT * C}, {&a->lnf_mean, BT}, {&a->lnf_rstd, BT},
        {&a->logits, BT * Vp}, {&a->losses, BT}, {&a->proj_out, BT * C},
        {&a->dresidual, BT * C}, {&a->dbtc, BT * C}, {&a->dqkv, BT * 3 * C},
        {&a->dfch, BT * 4 * C}, {&a->dfch_gelu, BT * 4 * C},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (base) *parts[i].p = base + total;
        total += (parts[i].n + 15) / 16 * 16;  // keep every buffer 64-byte aligned
    }
    a->BT = BT;
    a->total_floats = total;
    return total;
}

// ----------------------------------------------------------------------------------------
// The model: layout + engine + activations

typedef struct {
    ModelLayout layout;
    GPT2Config config;
    Fsdp fsdp;
    FsdpBackend backend;
    Activations acts;
    float* acts_memory;
    int B, T;            // micro-batch the activations were sized for
} GPT2;

static void gpt2_build(GPT2* model, const GPT2Config* c, int layers_per_unit, const ProcessGroup* pg,
                       const FsdpConfig* fcfg, int B, int T) {
    char err[512];
    model->config = *c;
    build_layout(&model->layout, c, layers_per_unit, pg->shard_size);
    fsdp_backend_cpu_init(&model->backend, pg, 2 * model->layout.n_units + 4);
    if (fsdp_init(&model->fsdp, pg, &model->backend, fcfg, model->layout.units, model->layout.n_units, err, sizeof(err)))
        fatal(pg, "%s", err);
    model->B = B;
    model->T = T;
    size_t n = carve_activations(&model->acts, c, (size_t)B, (size_t)T, NULL);
    model->acts_memory = (float*)model->backend.alloc(model->backend.ctx, n * sizeof(float));
    carve_activations(&model->acts, c, (size_t)B, (size_t)T, model->acts_memory);
}

static void gpt2_free(GPT2* model) {
    model->backend.release(model->backend.ctx, model->acts_memory);
    fsdp_free(&model->fsdp);
    fsdp_backend_cpu_free(&model->backend);
    free(model->layout.units);
}

// Forward over B x T tokens. Writes per-position losses to acts.losses (targets required).
// With dloss != 0 the logits buffer is left holding dlogits for the backward.
static void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T, float dloss) {
    const GPT2Config* c = &model->config;
    const ModelLayout* m = &model->layout;
    Activations* a = &model->acts;
    Fsdp* f = &model->fsdp;
    size_t C = (size_t)c->channels, BT = (size_t)B * T, stride = a->BT;
    int N = (int)BT, NH = c->num_heads;

    RootTensors root = root_tensors(m, (float*)fsdp_forward_pre(f, 0));
    encoder_forward(a->encoded, inputs, root.wte, root.wpe, B, T, (int)C);
    float* residual = a->encoded;
    for (int u = 1; u < m->n_units; u++) {
        float* unit_params = (float*)fsdp_forward_pre(f, u);
        for (int j = 0; j < m->layers_per_unit; j++) {
            int l = (u - 1) * m->layers_per_unit + j;
            if (l >= c->num_layers) break;
            BlockTensors p = block_tensors(m, u, j, unit_params);
            float* ln1 = a->ln1 + l * stride * C;
            float* ln1_mean = a->ln1_mean + l * stride;
            float* ln1_rstd = a->ln1_rstd + l * stride;
            float* qkv = a->qkv + l * stride * 3 * C;
            float* atty = a->atty + l * stride * C;
            float* lse = a->att_lse + l * stride * NH;
            float* residual2 = a->residual2 + l * stride * C;
            float* ln2 = a->ln2 + l * stride * C;
            float* ln2_mean = a->ln2_mean + l * stride;
            float* ln2_rstd = a->ln2_rstd + l * stride;
            float* fch = a->fch + l * stride * 4 * C;
            float* fch_gelu = a->fch_gelu + l * stride * 4 * C;
            float* residual3 = a->residual3 + l * stride * C;

            layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p.t[LN1_W], p.t[LN1_B], N, (int)C);
            matmul_forward(qkv, ln1, p.t[QKV_W], p.t[QKV_B], N, (int)C, 3 * (int)C);
            attention_forward(atty, lse, qkv, B, T, (int)C, NH);
            matmul_forward(a->proj_out, atty, p.t[ATTPROJ_W], p.t[ATTPROJ_B], N, (int)C, (int)C);
            residual_forward(residual2, residual, a->proj_out, BT * C);
            layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p.t[LN2_W], p.t[LN2_B], N, (int)C);
            matmul_forward(fch, ln2, p.t[FC_W], p.t[FC_B], N, (int)C, 4 * (int)C);
            gelu_forward(fch_gelu, fch, BT * 4 * C);
            matmul_forward(a->proj_out, fch_gelu, p.t[FCPROJ_W], p.t[FCPROJ_B], N, 4 * (int)C, (int)C);
            residual_forward(residual3, residual2, a->proj_out, BT * C);
            residual = residual3;
        }
        fsdp_forward_post(f, u);
    }
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, residual, root.lnfw, root.lnfb, N, (int)C);
    matmul_forward(a->logits, a->lnf, root.wte, NULL, N, (int)C, c->padded_vocab_size);
    crossentropy_softmax_fused(a->logits, a->losses, targets, N, c->vocab_size, c->padded_vocab_size, dloss);
    fsdp_forward_post(f, 0);
}

// Backward of the last forward (which must have had dloss != 0). Each unit's gradient is
// reduce-scattered as soon as its backward is done.
static void gpt2_backward(GPT2* model, const int* inputs, int B, int T) {
    const GPT2Config* c = &model->config;
    const ModelLayout* m = &model->layout;
    Activations* a = &model->acts;
    Fsdp* f = &model->fsdp;
    size_t C = (size_t)c->channels, BT = (size_t)B * T, stride = a->BT;
    int N = (int)BT, NH = c->num_heads;

    RootTensors root = root_tensors(m, (float*)fsdp_backward_pre(f, 0));
    RootTensors droot = root_tensors(m, (float*)fsdp_grad(f, 0));
    fsdp_backward_prefetch(f, m->n_units - 1);  // the last block, while the head runs

    float* residual_last = c->num_layers > 0 ? a->residual3 + (size_t)(c->num_layers - 1) * stride * C : a->encoded;
    memset(a->dbtc, 0, BT * C * sizeof(float));
    matmul_backward(a->dbtc, droot.wte, NULL, a->logits, a->lnf, root.wte, N, (int)C, c->padded_vocab_size);
    memset(a->dresidual, 0, BT * C * sizeof(float));
    layernorm_backward(a->dresidual, droot.lnfw, droot.lnfb, a->dbtc, residual_last, root.lnfw,
                       a->lnf_mean, a->lnf_rstd, N, (int)C);

    for (int u = m->n_units - 1; u >= 1; u--) {
        float* unit_params = (float*)fsdp_backward_pre(f, u);
        float* unit_grads = (float*)fsdp_grad(f, u);
        int first = (u - 1) * m->layers_per_unit;
        int last = first + m->layers_per_unit - 1;
        if (last >= c->num_layers) last = c->num_layers - 1;
        for (int l = last; l >= first; l--) {
            BlockTensors p = block_tensors(m, u, l - first, unit_params);
            BlockTensors g = block_tensors(m, u, l - first, unit_grads);
            float* residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * stride * C;
            float* ln1 = a->ln1 + l * stride * C;
            float* ln1_mean = a->ln1_mean + l * stride;
            float* ln1_rstd = a->ln1_rstd + l * stride;
            float* qkv = a->qkv + l * stride * 3 * C;
            float* atty = a->atty + l * stride * C;
            float* lse = a->att_lse + l * stride * NH;
            float* residual2 = a->residual2 + l * stride * C;
            float* ln2 = a->ln2 + l * stride * C;
            float* ln2_mean = a->ln2_mean + l * stride;
            float* ln2_rstd = a->ln2_rstd + l * stride;
            float* fch = a->fch + l * stride * 4 * C;
            float* fch_gelu = a->fch_gelu + l * stride * 4 * C;

            // dresidual holds d(residual3); the MLP branch adds into it to give d(residual2).
            memset(a->dfch_gelu, 0, BT * 4 * C * sizeof(float));
            matmul_backward(a->dfch_gelu, g.t[FCPROJ_W], g.t[FCPROJ_B], a->dresidual, fch_gelu, p.t[FCPROJ_W], N, 4 * (int)C, (int)C);
            memset(a->dfch, 0, BT * 4 * C * sizeof(float));
            gelu_backward(a->dfch, fch, a->dfch_gelu, BT * 4 * C);
            memset(a->dbtc, 0, BT * C * sizeof(float));
            matmul_backward(a->dbtc, g.t[FC_W], g.t[FC_B], a->dfch, ln2, p.t[FC_W], N, (int)C, 4 * (int)C);
            layernorm_backward(a->dresidual, g.t[LN2_W], g.t[LN2_B], a->dbtc, residual2, p.t[LN2_W], ln2_mean, ln2_rstd, N, (int)C);
            // Attention branch: d(residual2) -> d(residual).
            memset(a->dbtc, 0, BT * C * sizeof(float));
            matmul_backward(a->dbtc, g.t[ATTPROJ_W], g.t[ATTPROJ_B], a->dresidual, atty, p.t[ATTPROJ_W], N, (int)C, (int)C);
            memset(a->dqkv, 0, BT * 3 * C * sizeof(float));
            attention_backward(a->dqkv, a->dbtc, qkv, atty, lse, B, T, (int)C, NH);
            memset(a->dbtc, 0, BT * C * sizeof(float));
            matmul_backward(a->dbtc, g.t[QKV_W], g.t[QKV_B], a->dqkv, ln1, p.t[QKV_W], N, (int)C, 3 * (int)C);
            layernorm_backward(a->dresidual, g.t[LN1_W], g.t[LN1_B], a->dbtc, residual, p.t[LN1_W], ln1_mean, ln1_rstd, N, (int)C);
        }
        fsdp_backward_post(f, u);
    }
    encoder_backward(droot.wte, droot.wpe, a->dresidual, inputs, B, T, (int)C);
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

// mkdir -p: creates dir and its missing parents. 0, or -1 with errno set.
static int mkdir_p(const char* dir) {
    char path[1024];
    snprintf(path, sizeof(path), "%s", dir);
    for (char* p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
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
    tokens[0] = GPT2_EOT;
    int length = n_tokens + 1 < T ? n_tokens + 1 : T;
    TokenizerUtf8 utf8;
    tokenizer_utf8_init(&utf8);
    if (pg->rank == 0) { printf("sample (step %d):\n---\n", step); fflush(stdout); }
    for (int t = 1; t < length; t++) {
        gpt2_forward(model, tokens, zeros, 1, t, 0.0f);
        const float* row = model->acts.logits + (size_t)(t - 1) * c->padded_vocab_size;
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
    free(tokens); free(zeros); free(idx); free(val);
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
"      --threads N              OpenMP/BLAS threads per rank [OMP_NUM_THREADS, else cores / local ranks]\n"
"      --peak-tflops F          the device's peak dense BF16 TFLOP/s for MFU [from the GPU's name; none on cpu]\n"
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
    OPT_COMM_TIMEOUT, OPT_MAX_BAD_STEPS, OPT_PEAK_TFLOPS,
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
        {"peak-tflops", required_argument, 0, OPT_PEAK_TFLOPS},
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
        case OPT_PEAK_TFLOPS: r = parse_float("--peak-tflops", optarg, 1e-6, 1e7, &o->peak_tflops, e); break;
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

// Device choice. The cpu device is the reference; a CUDA device plugs in here.
static const char* choose_device(const char* requested, char* why, size_t whylen) {
    int gpus = 0;
#ifdef __CUDACC__
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
#endif
    if (!strcmp(requested, "cuda")) return NULL;
    if (!strcmp(requested, "cpu")) { snprintf(why, whylen, "requested"); return "cpu"; }
    if (gpus > 0) snprintf(why, whylen, "%d GPU(s) visible, but this build has no CUDA device yet", gpus);
    else snprintf(why, whylen, "no usable GPU");
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
    float* arenas[CKPT_KINDS] = {f->master, f->adam_m, f->adam_v};
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
    float* arenas[CKPT_KINDS] = {f->master, f->adam_m, f->adam_v};
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
    f->params_dirty = 1;
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
        if (!device) { snprintf(pe.msg, sizeof(pe.msg), "--device cuda: this build has no CUDA device yet; use --device cpu"); rc = 1; }
    }
    if (rc) {
        if (pg.rank == 0) fprintf(stderr, "error: %s (see --help)\n", pe.msg);
        process_group_finalize(&pg);
        return 1;
    }
    if (process_group_split(&pg, opt.shard_group_size, err, sizeof(err))) fatal(&pg, "%s", err);
    // The cuda device will pass its GPU's name; the cpu device has no table entry.
    double peak_tflops = opt.peak_tflops > 0 ? opt.peak_tflops : device_peak_tflops(NULL);

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
    gpt2_build(&model, &config, opt.unit_layers, &pg, &fcfg, B, T);
    if (opt.init_from) {
        if (load_model_file(&model.layout, &model.fsdp, opt.init_from, file_version, err, sizeof(err))) fatal(&pg, "%s", err);
    } else {
        init_parameters(&model.layout, &model.fsdp, opt.seed);
    }

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
        if (mkdir_p(opt.output_dir) != 0) fatal(&pg, "-o %s: cannot create: %s", opt.output_dir, strerror(errno));
        char path[1100];
        snprintf(path, sizeof(path), "%s/metrics.jsonl", opt.output_dir);
        metrics = fopen(path, resumed ? "a" : "w");  // a resumed run continues the same log
        if (!metrics) fatal(&pg, "%s: cannot open for writing: %s", path, strerror(errno));
    }

    size_t act_bytes = model.acts.total_floats * sizeof(float);
    size_t io_bytes = 2 * (size_t)B * T * sizeof(int);
    if (pg.rank == 0) {
        printf("fsdp.c train_gpt | device %s (%s) | %d rank(s) via %s (%s), %d thread(s) each\n", device, why, pg.world,
               pg.launcher, pg.transport, threads);
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
        FsdpMemory* mm = &model.fsdp.memory;
        printf("memory budget per rank:\n");
        print_memory_line("sharded params + grads + Adam m, v", mm->shard_state);
        print_memory_line("gathered parameter slots", mm->gathered);
        print_memory_line("full-gradient slots", mm->full_grads);
        print_memory_line("activations", act_bytes);
        print_memory_line("total", mm->shard_state + mm->gathered + mm->full_grads + act_bytes + io_bytes);
        fflush(stdout);
    }

    int* inputs = (int*)malloc(io_bytes / 2);
    int* targets = (int*)malloc(io_bytes / 2);
    // Everything the budget counts is allocated and touched by now.
    double setup_rss = max_over_ranks_mib(&pg, current_rss_bytes());
    if (pg.rank == 0) printf("resident after setup: %.1f MiB per rank (max over ranks; the budget plus the program and its libraries)\n", setup_rss);
    float dloss = 1.0f / (float)((double)B * T * grad_accum * pg.world);
    double train_ms_total = 0.0, data_ms_total = 0.0;
    FsdpTraffic train_traffic = {0, 0, 0};  // communication of the training steps only
    int timed_steps = 0, steps_run = 0;  // steps_run: this job's; the first is not timed
    double run_t0 = now_seconds();
    long ckpt_reported = -1;  // the last async commit announced
    int bad_in_a_row = 0;     // steps skipped for a non-finite loss or gradient norm
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
                for (long i = 0; i < (long)B * T; i++) local += model.acts.losses[i];
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
        FsdpTraffic before = model.fsdp.traffic;
        fsdp_zero_grad(&model.fsdp, grad_accum);
        double local_loss = 0.0;
        for (int k = 0; k < grad_accum; k++) {
            // This rank's rows of the global batch: the batch does not depend on W and B.
            double d0 = now_seconds();
            if (loader_read_micro_batch(&train_loader, k, pg.world, pg.rank, B, inputs, targets, err, sizeof(err))) fatal(&pg, "%s", err);
            data_seconds += now_seconds() - d0;
            gpt2_forward(&model, inputs, targets, B, T, dloss);
            for (long i = 0; i < (long)B * T; i++) local_loss += model.acts.losses[i];
            gpt2_backward(&model, inputs, B, T);
            fsdp_end_micro_step(&model.fsdp);
        }
        loader_advance(&train_loader, (uint64_t)global_seqs);
        int completed = step + 1;
        if (pg.rank == 0 && test_hook_at(test_nan_loss_steps, completed)) local_loss = NAN;
        if (pg.rank == 0 && test_hook_at(test_nan_grad_steps, completed)) model.fsdp.grad_shard[0] = NAN;
        // One reduction carries the loss and whether any rank was asked to stop, so that every
        // rank takes the same decision at the same step.
        double reduced[2] = {local_loss, stop_signal != 0 ? 1.0 : 0.0};
        comm_all_reduce_f64(pg.world_comm, reduced, 2, COMM_SUM);
        double loss = reduced[0] / (double)total_tokens;
        int stop_now = reduced[1] > 0.0;
        float lr = learning_rate(step, max_steps, opt.lr, opt.warmup_steps, opt.final_lr_frac, opt.lr_decay);
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
        if (steps_run++ > 0) { train_ms_total += ms; data_ms_total += data_seconds * 1000.0; timed_steps++; }
        double tok_s = (double)total_tokens / (ms / 1000.0);
        if (pg.rank == 0) {
            int end_step = opt.stop_at_step && opt.stop_at_step < max_steps ? opt.stop_at_step : max_steps;
            double avg_ms = timed_steps > 0 ? train_ms_total / timed_steps : ms;
            char eta[32], mfu[32] = "", loss_s[32], norm_s[32];
            format_duration((end_step - completed) * avg_ms / 1000.0, eta, sizeof(eta));
            if (peak_flops > 0) snprintf(mfu, sizeof(mfu), " | mfu %.1f%%", 100.0 * tok_s * flops_per_token / peak_flops);
            double mem_mib = (double)peak_rss_bytes() / (1024.0 * 1024.0);
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
        if (save_model_file(&model.layout, &model.fsdp, &pg, opt.save_model, err, sizeof(err)))
            fatal_agreed(&pg, "--save-model: %s", err);
        if (pg.rank == 0) printf("saved %s\n", opt.save_model);
    }

    // Measured peak resident memory, every rank. Above the setup figure it holds what the
    // libraries allocate while training: OpenBLAS's per-thread buffers and MPI's reduction
    // temporaries (Open MPI's non-blocking reduce-scatter stages whole units on one rank).
    double peak = max_over_ranks_mib(&pg, peak_rss_bytes());
    if (pg.rank == 0) {
        if (timed_steps > 0)
            printf("average step %.1f ms (%.0f tok/s) over %d steps after the first; data loading %.3f ms of it (%.2f%%, rank 0)\n",
                   train_ms_total / timed_steps, (double)total_tokens * timed_steps / (train_ms_total / 1000.0), timed_steps,
                   data_ms_total / timed_steps, 100.0 * data_ms_total / train_ms_total);
        printf("peak resident memory per rank: %.1f MiB (max over ranks)\n", peak);
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
    if (tokenizer) tokenizer_free(tokenizer);
    loader_close(&train_loader);
    if (have_val) loader_close(&val_loader);
    gpt2_free(&model);
    process_group_finalize(&pg);
    if (exit_code == EXIT_PREEMPTED && pg.rank == 0) printf("exiting with status %d: resume with --resume auto\n", EXIT_PREEMPTED);
    return exit_code;
}
#endif  // TESTING
