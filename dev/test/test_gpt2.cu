// Model-level tests of the cpu device, built from train_gpt.cu itself (like llm.c's
// test_gpt2), single process:
//
//   test_gpt2 dump --model M.bin --tokens SHARD.bin -b B -t T --steps N --out STATE.bin
//       Runs the model of M.bin (an llm.c file written by train_gpt --save-model) on the
//       first B*T+1 tokens of SHARD.bin and writes what dev/test/torch_reference.py compares
//       against PyTorch: logits, loss, every gradient, then N AdamW steps' losses and norms.
//   test_gpt2 dump-llama --layers L --channels C --heads NH --kv-heads KVH --ffn-dim F
//                        --vocab V --max-seq maxT --rope-theta THETA --rope-factor FACTOR
//                        --seed S --tokens SHARD.bin -b B -t T --steps N --out STATE.bin
//                        [--device cpu|cuda] [--attention auto|flash|cublas]
//       A Llama 3 model of that shape (FACTOR 0: plain RoPE; > 1: Llama 3.1's frequency
//       scaling with low_freq_factor 1, high_freq_factor 4, original_max_pos 8192),
//       initialised by model_init_weights(S) (--init-scale K, optional: every weight then
//       multiplied by K, as fdcheck does, to move activations off their near-linear regime),
//       run on the first B*T+1 tokens of SHARD.bin, on the cpu device (fp32, the default) or
//       the cuda device (bf16 compute, fp32 master weights and optimizer: a GPU, or the CPU
//       emulator's build of this file, dev/test/test_train_emu.sh);
//       writes what dev/test/torch_llama.py compares against PyTorch. Llama has no llm.c
//       model file, so the state carries the initial weights itself. Format (little-endian):
//         int32 header[256] = {20261201, 1, B, T, N, V, Vp, L, NH, KVH, C, F, maxT,
//                              rope_original_max_pos, device (0 cpu fp32, 1 cuda bf16), 0...}
//         float32 hyper[256] = {lr, beta1, beta2, eps, weight_decay, grad_clip, rope_theta,
//                               rope_factor, rope_low_freq_factor, rope_high_freq_factor, 0...}
//         int32 x[B*T], int32 y[B*T]               the batch (y: x shifted by one token)
//         float32 params[P]                        the initial weights, flat-unit order:
//             tok_embeddings [Vp,C], norm [C], output [Vp,C], then for each layer
//             attention_norm [C], attention.wqkv [(NH+2KVH)hs, C] (q heads, k heads, v heads),
//             attention.wo [C,C], ffn_norm [C], feed_forward.w13 [2F,C] (w1 rows, then w3),
//             feed_forward.w2 [C,F]; each row-major, padded vocabulary rows included
//         float32 logits[B*T*Vp]                   at the initial weights, all Vp columns
//         float32 loss                             their mean cross-entropy
//         float32 grads[P]                         d(mean loss)/d(params), same order
//         float32 losses[N], float32 norms[N]      N AdamW steps on the same batch: each
//             step's loss and global gradient norm (before clipping), as `dump` writes them
//   test_gpt2 fdcheck
//       Finite-difference check of the whole model's gradient on a tiny model (vocab 64).
#define TESTING
#include "../../train_gpt.cu"
#include <stdarg.h>

#define STATE_MAGIC 20261130
#define STATE_VERSION 1
#define LLAMA_STATE_MAGIC 20261201
#define LLAMA_STATE_VERSION 1

static ProcessGroup g_pg;  // the test's process group (world 1)

static void die(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_gpt2: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void build_model(Model* model, const ModelConfig* c, int B, int T) {
    FsdpConfig fcfg = {1, 1, 1, 0, 0.0f, 0};
    model_build(model, c, 1, &g_pg, &fcfg, NULL, B, T);  // the cpu device
}

// The cuda device (bf16 compute) with train_gpt's defaults but the attention kernel; the
// engine as build_model's (W = 1: the shard is the whole unit).
static void build_model_cuda(Model* model, const ModelConfig* c, int B, int T, const char* attention) {
    FsdpConfig fcfg = {1, 1, 1, 0, 0.0f, 0};
    DeviceOptions dopt = {1, "auto", 0, attention, 2, 1337, RECOMPUTE_NONE, -1, 0, NULL, NULL, 0};
    model_build(model, c, 1, &g_pg, &fcfg, &dopt, B, T);
}

// The last forward's mean loss, on any device (the losses copied to the host first).
static double mean_loss_any(Model* model, float* host_losses, int B, int T) {
    model_losses_to_host(model, host_losses, B, T);
    model->dev.kernels.synchronize(&model->dev.kernels);
    double sum = 0.0;
    for (int i = 0; i < B * T; i++) sum += host_losses[i];
    return sum / (double)(B * T);
}

static double mean_loss(const Model* model, int B, int T) {
    double sum = 0.0;
    for (int i = 0; i < B * T; i++) sum += model->acts.losses[i];
    return sum / (double)(B * T);
}

// One forward + backward on (inputs, targets) leaving the gradient in the fp32 shard
// (at W = 1 the shard is the whole flat unit). Returns the mean loss.
static double forward_backward(Model* model, const int* inputs, const int* targets, int B, int T) {
    fsdp_zero_grad(&model->fsdp, 1);
    model_forward(model, inputs, targets, B, T, 1.0f / (float)(B * T));
    double loss = mean_loss(model, B, T);
    fsdp_add_loss(&model->fsdp, model->acts.losses, (size_t)B * T);
    model_backward(model, B, T);
    fsdp_end_micro_step(&model->fsdp);
    return loss;
}

static void write_all(FILE* fp, const void* p, size_t bytes, const char* path) {
    if (fwrite(p, 1, bytes, fp) != bytes) die("%s: write failed", path);
}

static int run_dump(int argc, char** argv) {
    const char *model_path = NULL, *tokens_path = NULL, *out_path = NULL;
    int B = 4, T = 64, steps = 10;
    float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, clip = 1.0f;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model_path = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens")) tokens_path = argv[i + 1];
        else if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "-b")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lr")) lr = (float)atof(argv[i + 1]);
        else die("dump: unknown option %s", argv[i]);
    }
    if (!model_path || !tokens_path || !out_path || B < 1 || T < 1 || steps < 1) die("dump: missing or bad arguments");
    char err[1024];
    ModelConfig c;
    int version;
    if (read_model_header(model_path, &c, &version, err, sizeof(err))) die("%s", err);
    if (T > c.max_seq_len) die("-t %d exceeds the model's %d positions", T, c.max_seq_len);
    Model model;
    build_model(&model, &c, B, T);
    if (model_load_weights(&model, model_path, version, err, sizeof(err))) die("%s", err);

    DataLoader dl;
    if (loader_open(&dl, tokens_path, (size_t)T, c.vocab_size, 0, 0, err, sizeof(err))) die("%s", err);
    int* x = (int*)malloc((size_t)B * T * sizeof(int));
    int* y = (int*)malloc((size_t)B * T * sizeof(int));
    if (loader_read_windows(&dl, 0, B, x, y, err, sizeof(err))) die("%s", err);
    loader_close(&dl);

    size_t Vp = (size_t)c.padded_vocab_size, P = model.layout.num_parameters;
    float* logits = (float*)malloc((size_t)B * T * Vp * sizeof(float));
    float* grads = (float*)malloc(P * sizeof(float));
    float* losses = (float*)malloc((size_t)steps * sizeof(float));
    float* norms = (float*)malloc((size_t)steps * sizeof(float));

    model_forward(&model, x, y, B, T, 0.0f);
    memcpy(logits, model.acts.logits, (size_t)B * T * Vp * sizeof(float));  // the cpu device: host memory
    float loss = (float)mean_loss(&model, B, T);
    fsdp_release_all(&model.fsdp);

    for (int s = 0; s < steps; s++) {
        losses[s] = (float)forward_backward(&model, x, y, B, T);
        if (s == 0) {
            // The gradient in llm.c's file order (the shard is the whole unit at W = 1).
            for (int u = 0; u < model.layout.n_units; u++) {
                const FlatUnit* unit = &model.layout.units[u];
                for (int i = 0; i < unit->n_tensors; i++) {
                    int layer;
                    const TensorSpec* spec = unit_tensor_spec(&model.layout, u, i, &layer);
                    memcpy(grads + llmc_offset(&c, spec->llmc_kind, layer), model.fsdp.grad_shard + model.fsdp.shard_offset[u] + unit->tensors[i].offset,
                           unit->tensors[i].numel * sizeof(float));
                }
            }
        }
        fsdp_step_decide(&model.fsdp, (double)B * T, clip);
        fsdp_optimizer_step(&model.fsdp, lr, beta1, beta2, eps, wd, s + 1);
        fsdp_step_stats_fetch(&model.fsdp);
        norms[s] = fsdp_step_stats_wait(&model.fsdp)->norm;
    }

    FILE* fp = fopen(out_path, "wb");
    if (!fp) die("%s: cannot create", out_path);
    int32_t h[256] = {0};
    h[0] = STATE_MAGIC; h[1] = STATE_VERSION; h[2] = B; h[3] = T; h[4] = steps; h[5] = c.vocab_size;
    h[6] = c.padded_vocab_size; h[7] = c.num_layers; h[8] = c.num_heads; h[9] = c.channels; h[10] = c.max_seq_len;
    float hyper[256] = {0};
    hyper[0] = lr; hyper[1] = beta1; hyper[2] = beta2; hyper[3] = eps; hyper[4] = wd; hyper[5] = clip;
    write_all(fp, h, sizeof(h), out_path);
    write_all(fp, hyper, sizeof(hyper), out_path);
    write_all(fp, x, (size_t)B * T * sizeof(int), out_path);
    write_all(fp, y, (size_t)B * T * sizeof(int), out_path);
    write_all(fp, logits, (size_t)B * T * Vp * sizeof(float), out_path);
    write_all(fp, &loss, sizeof(float), out_path);
    write_all(fp, grads, P * sizeof(float), out_path);
    write_all(fp, losses, (size_t)steps * sizeof(float), out_path);
    write_all(fp, norms, (size_t)steps * sizeof(float), out_path);
    if (fclose(fp) != 0) die("%s: close failed", out_path);
    printf("dump: B=%d T=%d loss %.6f, %d steps, final loss %.6f -> %s\n", B, T, loss, steps, losses[steps - 1], out_path);
    free(x); free(y); free(logits); free(grads); free(losses); free(norms);
    model_free(&model);
    return 0;
}

// ---- dump-llama (format in the header comment)

// Writes every tensor of the model, in flat-unit order, from `base` (an arena laid out like
// the fp32 shards: at W = 1 each unit's shard is the whole unit, padding excluded here).
static void write_tensors(FILE* fp, const Model* model, const float* base, const char* path) {
    for (int u = 0; u < model->layout.n_units; u++) {
        const FlatUnit* unit = &model->layout.units[u];
        for (int i = 0; i < unit->n_tensors; i++)
            write_all(fp, base + model->fsdp.shard_offset[u] + unit->tensors[i].offset,
                      unit->tensors[i].numel * sizeof(float), path);
    }
}

static int run_dump_llama(int argc, char** argv) {
    const char *tokens_path = NULL, *out_path = NULL;
    int B = 4, T = 32, steps = 10, seed = 1337;
    float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, clip = 1.0f, init_scale = 1.0f;
    const char *device = "cpu", *attention = "auto";
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.arch = ARCH_LLAMA3;
    c.num_layers = 2; c.channels = 64; c.num_heads = 4; c.num_kv_heads = 2; c.ffn_dim = 96;
    c.vocab_size = GPT2_VOCAB; c.max_seq_len = 64; c.rope_theta = 500000.0f; c.norm_eps = MODEL_DEFAULT_NORM_EPS;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--tokens")) tokens_path = v;
        else if (!strcmp(k, "--out")) out_path = v;
        else if (!strcmp(k, "-b")) B = atoi(v);
        else if (!strcmp(k, "-t")) T = atoi(v);
        else if (!strcmp(k, "--steps")) steps = atoi(v);
        else if (!strcmp(k, "--lr")) lr = (float)atof(v);
        else if (!strcmp(k, "--seed")) seed = atoi(v);
        else if (!strcmp(k, "--init-scale")) init_scale = (float)atof(v);
        else if (!strcmp(k, "--layers")) c.num_layers = atoi(v);
        else if (!strcmp(k, "--channels")) c.channels = atoi(v);
        else if (!strcmp(k, "--heads")) c.num_heads = atoi(v);
        else if (!strcmp(k, "--kv-heads")) c.num_kv_heads = atoi(v);
        else if (!strcmp(k, "--ffn-dim")) c.ffn_dim = atoi(v);
        else if (!strcmp(k, "--vocab")) c.vocab_size = atoi(v);
        else if (!strcmp(k, "--max-seq")) c.max_seq_len = atoi(v);
        else if (!strcmp(k, "--rope-theta")) c.rope_theta = (float)atof(v);
        else if (!strcmp(k, "--rope-factor")) c.rope_factor = (float)atof(v);
        else if (!strcmp(k, "--device")) device = v;
        else if (!strcmp(k, "--attention")) attention = v;
        else die("dump-llama: unknown option %s", k);
    }
    const int on_cuda = !strcmp(device, "cuda");
    if (!on_cuda && strcmp(device, "cpu") != 0) die("dump-llama: --device %s: expected cpu or cuda", device);
    if (!tokens_path || !out_path || B < 1 || T < 1 || steps < 1) die("dump-llama: missing or bad arguments");
    // Llama 3.1's scaling parameters (those of every released 3.1/3.2 checkpoint).
    c.rope_low_freq_factor = 1.0f; c.rope_high_freq_factor = 4.0f; c.rope_original_max_pos = 8192;
    c.padded_vocab_size = c.vocab_size > 0 ? pad_vocab(c.vocab_size) : 0;
    const char* bad = model_config_check(&c);
    if (bad) die("dump-llama: bad model shape: %s", bad);
    if (T > c.max_seq_len) die("-t %d exceeds --max-seq %d", T, c.max_seq_len);
    Model model;
    if (on_cuda) build_model_cuda(&model, &c, B, T, attention);
    else build_model(&model, &c, B, T);
    model_init_weights(&model, (uint64_t)seed);
    if (init_scale != 1.0f) {
        // Scaled in the host mirror of the master shard, then uploaded again (which rounds the
        // compute copies anew and marks the gathered ones stale).
        for (size_t i = 0; i < model.fsdp.total_shard; i++) model.fsdp.host_master[i] *= init_scale;
        fsdp_upload_state(&model.fsdp, 0);
    }

    char err[1024];
    DataLoader dl;
    if (loader_open(&dl, tokens_path, (size_t)T, c.vocab_size, 0, 0, err, sizeof(err))) die("%s", err);
    int* x = (int*)malloc((size_t)B * T * sizeof(int));
    int* y = (int*)malloc((size_t)B * T * sizeof(int));
    if (loader_read_windows(&dl, 0, B, x, y, err, sizeof(err))) die("%s", err);
    loader_close(&dl);

    const size_t Vp = (size_t)c.padded_vocab_size, total = model.fsdp.total_shard;
    float* params0 = (float*)malloc(total * sizeof(float));
    float* logits = (float*)malloc((size_t)B * T * Vp * sizeof(float));
    float* grads = (float*)malloc(total * sizeof(float));
    float* losses = (float*)malloc((size_t)steps * sizeof(float));
    float* norms = (float*)malloc((size_t)steps * sizeof(float));
    float* host_losses = (float*)malloc((size_t)B * T * sizeof(float));
    memcpy(params0, model.fsdp.host_master, total * sizeof(float));  // the fp32 initial weights
    Kernels* k = &model.dev.kernels;

    model_forward(&model, x, y, B, T, 0.0f);
    for (size_t row = 0; row < (size_t)B * T; row++)   // (the staging holds one row)
        k->act_to_host_f32(k, logits + row * Vp, (const char*)model.acts.logits + row * Vp * k->act_bytes, Vp);
    float loss = (float)mean_loss_any(&model, host_losses, B, T);
    fsdp_release_all(&model.fsdp);

    for (int s = 0; s < steps; s++) {
        // One forward + backward leaving the gradient in the fp32 shard (forward_backward's
        // steps, with the losses read from wherever the device keeps them).
        fsdp_zero_grad(&model.fsdp, 1);
        model_forward(&model, x, y, B, T, 1.0f / (float)(B * T));
        losses[s] = (float)mean_loss_any(&model, host_losses, B, T);
        fsdp_add_loss(&model.fsdp, model.acts.losses, (size_t)B * T);
        model_backward(&model, B, T);
        fsdp_end_micro_step(&model.fsdp);
        if (s == 0) {
            model.fsdp.be.copy_to_host(model.fsdp.be.ctx, grads, model.fsdp.grad_shard, total * sizeof(float));
            k->synchronize(k);
        }
        fsdp_step_decide(&model.fsdp, (double)B * T, clip);
        fsdp_optimizer_step(&model.fsdp, lr, beta1, beta2, eps, wd, s + 1);
        fsdp_step_stats_fetch(&model.fsdp);
        norms[s] = fsdp_step_stats_wait(&model.fsdp)->norm;
    }

    FILE* fp = fopen(out_path, "wb");
    if (!fp) die("%s: cannot create", out_path);
    int32_t h[256] = {0};
    h[0] = LLAMA_STATE_MAGIC; h[1] = LLAMA_STATE_VERSION; h[2] = B; h[3] = T; h[4] = steps; h[5] = c.vocab_size;
    h[6] = c.padded_vocab_size; h[7] = c.num_layers; h[8] = c.num_heads; h[9] = c.num_kv_heads; h[10] = c.channels;
    h[11] = c.ffn_dim; h[12] = c.max_seq_len; h[13] = c.rope_original_max_pos; h[14] = on_cuda;
    float hyper[256] = {0};
    hyper[0] = lr; hyper[1] = beta1; hyper[2] = beta2; hyper[3] = eps; hyper[4] = wd; hyper[5] = clip;
    hyper[6] = c.rope_theta; hyper[7] = c.rope_factor; hyper[8] = c.rope_low_freq_factor; hyper[9] = c.rope_high_freq_factor;
    write_all(fp, h, sizeof(h), out_path);
    write_all(fp, hyper, sizeof(hyper), out_path);
    write_all(fp, x, (size_t)B * T * sizeof(int), out_path);
    write_all(fp, y, (size_t)B * T * sizeof(int), out_path);
    write_tensors(fp, &model, params0, out_path);
    write_all(fp, logits, (size_t)B * T * Vp * sizeof(float), out_path);
    write_all(fp, &loss, sizeof(float), out_path);
    write_tensors(fp, &model, grads, out_path);
    write_all(fp, losses, (size_t)steps * sizeof(float), out_path);
    write_all(fp, norms, (size_t)steps * sizeof(float), out_path);
    if (fclose(fp) != 0) die("%s: close failed", out_path);
    printf("dump-llama (%s): L=%d C=%d NH=%d KVH=%d F=%d V=%d, B=%d T=%d: loss %.6f, %d steps, final loss %.6f -> %s\n",
           model.dev.name, c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_dim, c.vocab_size, B, T, loss,
           steps, losses[steps - 1], out_path);
    free(x); free(y); free(params0); free(logits); free(grads); free(losses); free(norms); free(host_losses);
    model_free(&model);
    return 0;
}

// Central differences of the mean loss against the backward's gradient, on a few elements
// of every tensor (the largest-gradient element plus random ones). The forward is fp32, so
// the step is large-ish and the tolerance relative to the gradient's scale.
static int run_fdcheck(void) {
    // maxT 16, V 64 (padded 128), 2 layers, 2 heads, C 16; GPT-2 (the Llama fields stay zero)
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.max_seq_len = 16; c.vocab_size = 64; c.padded_vocab_size = 128; c.num_layers = 2; c.num_heads = 2; c.channels = 16;
    c.norm_eps = MODEL_DEFAULT_NORM_EPS;
    const int B = 2, T = 8;
    const float h = 3e-3f;
    const double rel_tol = 5e-3, abs_tol = 1e-5;
    Model model;
    build_model(&model, &c, B, T);
    model_init_weights(&model, 42);
    // GPT-2's init (std 0.02) keeps every pre-activation near zero, where GELU and softmax
    // are nearly linear and a wrong derivative can hide. Scale everything up threefold (LayerNorm
    // weights become 3 too) so that the nonlinearities are exercised; more makes the loss so
    // curved that central differences themselves lose accuracy.
    for (size_t i = 0; i < model.fsdp.total_shard; i++) model.fsdp.master[i] *= 3.0f;
    int x[B * T], y[B * T];
    uint64_t r = 7;
    for (int i = 0; i < B * T; i++) {
        r = splitmix64(r); x[i] = (int)(r % 64);
        r = splitmix64(r); y[i] = (int)(r % 64);
    }
    forward_backward(&model, x, y, B, T);
    size_t total = model.fsdp.total_shard;
    float* grad = (float*)malloc(total * sizeof(float));
    memcpy(grad, model.fsdp.grad_shard, total * sizeof(float));

    int failures = 0, checked = 0;
    for (int u = 0; u < model.layout.n_units; u++) {
        const FlatUnit* unit = &model.layout.units[u];
        for (int i = 0; i < unit->n_tensors; i++) {
            const FlatTensor* t = &unit->tensors[i];
            float* p = model.fsdp.master + model.fsdp.shard_offset[u] + t->offset;
            const float* g = grad + model.fsdp.shard_offset[u] + t->offset;
            size_t picks[4];
            size_t argmax = 0;
            for (size_t e = 1; e < t->numel; e++) if (fabsf(g[e]) > fabsf(g[argmax])) argmax = e;
            picks[0] = argmax;
            for (int k = 1; k < 4; k++) { r = splitmix64(r); picks[k] = (size_t)(r % t->numel); }
            double worst = 0.0;
            char detail[256] = "";
            int bad = 0;
            for (int k = 0; k < 4; k++) {
                size_t e = picks[k];
                float saved = p[e];
                p[e] = saved + h;
                model.fsdp.params_dirty = 1;  // gathered copies must see the change
                model_forward(&model, x, y, B, T, 0.0f);
                double up = mean_loss(&model, B, T);
                p[e] = saved - h;
                model.fsdp.params_dirty = 1;
                model_forward(&model, x, y, B, T, 0.0f);
                double down = mean_loss(&model, B, T);
                p[e] = saved;
                fsdp_release_all(&model.fsdp);
                model.fsdp.params_dirty = 1;
                double fd = (up - down) / (2.0 * h);
                double err = fabs(fd - g[e]);
                double allowed = rel_tol * fabs(g[argmax]) + abs_tol;
                if (err / allowed > worst) worst = err / allowed;
                if (err > allowed) {
                    bad = 1;
                    snprintf(detail, sizeof(detail), "element %zu: analytic %.6g, finite difference %.6g", e, g[e], fd);
                }
                checked++;
            }
            if (bad) { printf("not ok - fdcheck %s: %s\n", t->name, detail); failures++; }
            else printf("ok - fdcheck %s (worst error %.2f of tolerance)\n", t->name, worst);
        }
    }
    printf("# fdcheck: %d elements, %d tensors failed\n", checked, failures);
    free(grad);
    model_free(&model);
    return failures ? 1 : 0;
}

int main(int argc, char** argv) {
    char err[512];
    ProcessGroupOptions pg_opt = {NULL, NULL, 0.0};
    if (process_group_init(&g_pg, &argc, &argv, &pg_opt, err, sizeof(err))) die("%s", err);
    omp_set_num_threads(2);
    int rc;
    if (argc >= 2 && !strcmp(argv[1], "dump")) rc = run_dump(argc, argv);
    else if (argc >= 2 && !strcmp(argv[1], "dump-llama")) rc = run_dump_llama(argc, argv);
    else if (argc >= 2 && !strcmp(argv[1], "fdcheck")) rc = run_fdcheck();
    else { fprintf(stderr, "usage: test_gpt2 dump ... | dump-llama ... | fdcheck\n"); rc = 2; }
    process_group_finalize(&g_pg);
    return rc;
}
