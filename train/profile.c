#include "train/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/plan.h"

// The kernel kinds (KernelKind's values), then what is not a kernel.
enum { PH_HOST = KERNEL_KINDS, PH_FSDP, PH_OPTIMIZER, PH_COUNT };
static const char* const phase_names[PH_COUNT] = {
    [KERNEL_EMBED] = "embedding", [KERNEL_LAYERNORM] = "layernorm (+ residual add)",
    [KERNEL_MATMUL] = "matmul (transformer blocks)", [KERNEL_LM_HEAD] = "matmul (lm head)",
    [KERNEL_ATTENTION] = "attention", [KERNEL_LOSS] = "cross-entropy",
    [PH_HOST] = "host (data, the loop)", [PH_FSDP] = "fsdp waits (gather / reduce)",
    [PH_OPTIMIZER] = "grad norm + AdamW",
};

const char* profile_phase_name(int kind) { return kind >= 0 && kind < PH_COUNT ? phase_names[kind] : "?"; }

static void mark(StepProfile* p, int phase, int backward) {
    if (!p->dev) return;
    if (p->n == p->cap) {  // grows only during the one profiled step
        p->cap = p->cap ? 2 * p->cap : 512;
        p->marks = (void**)realloc(p->marks, (size_t)p->cap * sizeof(void*));
        p->what = (unsigned char*)realloc(p->what, (size_t)p->cap);
        p->launches = (long long*)realloc(p->launches, (size_t)p->cap * sizeof(long long));
        if (!p->marks || !p->what || !p->launches) { fprintf(stderr, "error: out of memory (--profile-step)\n"); exit(1); }
    }
    Kernels* k = &p->dev->kernels;
    p->launches[p->n] = k->launches ? k->launches(k) : -1;
    p->marks[p->n] = k->mark(k);
    p->what[p->n] = (unsigned char)(phase * 2 + backward);
    p->n++;
}

static void on_kernel(void* ctx, KernelKind kind, int backward) { mark((StepProfile*)ctx, (int)kind, backward); }

// The tee: each vector kernel (and the zeroing the model does between them) is first costed
// by the sim twin, its bytes charged to the phase of the mark before it (what its time is
// charged to), then run by the device. TEE(fn, (params after k), args after k).
static void tee_count(StepProfile* p, double before) {
    const double moved = p->twin_clock.mem_bytes[0] + p->twin_clock.mem_bytes[1] + p->twin_clock.mem_bytes[2] - before;
    const int what = p->n ? p->what[p->n - 1] : -1;
    if (what >= 0 && what / 2 < KERNEL_KINDS) p->kind_bytes[what / 2][what % 2] += moved;
}
#define TEE_PARAMS(...) __VA_ARGS__
#define TEE(fn, params, ...)                                                                                     \
    static void tee_##fn(Kernels* k, TEE_PARAMS params) {                                                        \
        StepProfile* p = (StepProfile*)k->on_kernel_ctx;                                                         \
        const double before = p->twin_clock.mem_bytes[0] + p->twin_clock.mem_bytes[1] + p->twin_clock.mem_bytes[2]; \
        p->twin.fn(&p->twin, __VA_ARGS__);                                                                       \
        tee_count(p, before);                                                                                    \
        p->inner.fn(k, __VA_ARGS__);                                                                             \
    }
TEE(encoder_forward, (void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C, int vocab_begin,
    int vocab_end), out, inp, wte, wpe, B, T, C, vocab_begin, vocab_end)
TEE(encoder_backward, (void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C, int vocab_begin,
    int vocab_end, int accumulate), dwte, dwpe, dout, inp, B, T, C, vocab_begin, vocab_end, accumulate)
TEE(layernorm_forward, (void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias, int N, int C,
    float eps), out, mean, rstd, inp, weight, bias, N, C, eps)
TEE(residual_layernorm_forward, (void* residual, void* out, float* mean, float* rstd, const void* a, const void* b,
    const void* weight, const void* bias, int N, int C, float eps), residual, out, mean, rstd, a, b, weight, bias, N, C, eps)
TEE(layernorm_backward, (void* dinp, void* dweight, void* dbias, const void* dout, const void* inp, const void* weight,
    const float* mean, const float* rstd, int N, int C, int accumulate), dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
    C, accumulate)
TEE(crossentropy, (void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss), logits, losses, targets,
    N, V, Vp, dloss)
TEE(rmsnorm_forward, (void* out, float* rstd, const void* inp, const void* weight, int N, int C, float eps), out, rstd, inp,
    weight, N, C, eps)
TEE(residual_rmsnorm_forward, (void* residual, void* out, float* rstd, const void* a, const void* b, const void* weight, int N,
    int C, float eps), residual, out, rstd, a, b, weight, N, C, eps)
TEE(rmsnorm_backward, (void* dinp, void* dweight, const void* dout, const void* inp, const void* weight, const float* rstd, int N,
    int C, int accumulate), dinp, dweight, dout, inp, weight, rstd, N, C, accumulate)
TEE(zero, (void* ptr, size_t bytes), ptr, bytes)

// The functions teed (kernels.h's names).
#define TEED(X) X(encoder_forward) X(encoder_backward) X(layernorm_forward) X(residual_layernorm_forward) \
                X(layernorm_backward) X(crossentropy) X(rmsnorm_forward) X(residual_rmsnorm_forward) X(rmsnorm_backward) X(zero)
static void tee_begin(StepProfile* p, Kernels* k) {
    p->inner = *k;
    // A clock with unit rates: only its byte counts are read.
    memset(&p->twin_clock, 0, sizeof(p->twin_clock));
    p->twin_clock.costs = (SimCosts){.peak_flops = 1, .mem_bw = 1, .matmul_eff = 1, .attention_eff = 1, .vector_eff = 1, .mem_eff = 1};
    p->twin_clock.kind = -1;
    kernels_sim_init(&p->twin, &p->twin_clock, k->lm_head_rows, k->act_bytes);
    memset(p->kind_bytes, 0, sizeof(p->kind_bytes));
#define TEE_SET(fn) k->fn = tee_##fn;
    TEED(TEE_SET)
    p->teed = 1;
}
static void tee_end(StepProfile* p, Kernels* k) {
#define TEE_RESTORE(fn) k->fn = p->inner.fn;
    TEED(TEE_RESTORE)
    p->teed = 0;
}

static void on_fsdp(void* ctx, FsdpEvent e) {
    mark((StepProfile*)ctx, e == FSDP_EVENT_OPTIMIZER ? PH_OPTIMIZER : PH_FSDP, e == FSDP_EVENT_BACKWARD);
}

void profile_begin(StepProfile* p, Device* d, Fsdp* f, int layers) {
    p->dev = d;
    p->layers = layers;
    p->fsdp = f;
    // cuda (a GPU's memory): the vector kernels' bytes for the roofline table.
    if (!d->backend.host_is_device) tee_begin(p, &d->kernels);
    d->kernels.on_kernel = on_kernel;
    d->kernels.on_kernel_ctx = p;
    f->on_event = on_fsdp;
    f->on_event_ctx = p;
    if (d->profile_start) d->profile_start(d);
}

void profile_host(StepProfile* p) { mark(p, PH_HOST, 0); }

void profile_report(StepProfile* p, int step, double host_ms, int rank) {
    Device* d = p->dev;
    Kernels* k = &d->kernels;
    const int teed = p->teed;
    if (teed) tee_end(p, k);
    k->on_kernel = NULL;
    p->fsdp->on_event = NULL;
    p->dev = NULL;
    // The device's own figures first: its count of the step's host waits must not include
    // the wait below, which only the profile needs.
    char device_lines[2048] = "";
    if (d->profile_finish) d->profile_finish(d, p->fsdp->total_shard, device_lines, sizeof(device_lines));
    k->synchronize(k);
    double ms[2 * PH_COUNT] = {0}, total = 0.0;
    int calls[2 * PH_COUNT] = {0};
    long long launched[2 * PH_COUNT] = {0}, all_launches = 0;
    const int counted = p->n > 1 && p->launches[0] >= 0 && p->launches[p->n - 1] >= 0;
    for (int i = 0; i + 1 < p->n; i++) {
        const double t = k->mark_ms(k, p->marks[i], p->marks[i + 1]);
        ms[p->what[i]] += t;
        calls[p->what[i]]++;
        total += t;
        if (counted) launched[p->what[i]] += p->launches[i + 1] - p->launches[i];
    }
    if (counted) all_launches = p->launches[p->n - 1] - p->launches[0];
    if (rank == 0) {
        printf("profile of step %d (rank 0, %s device; the stream's time between marks): %.2f ms, %.2f ms on the host clock\n",
               step, d->name, total, host_ms);
        for (int shown = 0; shown < 2 * PH_COUNT; shown++) {  // largest first
            int j = -1;
            for (int i = 0; i < 2 * PH_COUNT; i++)
                if (calls[i] && (j < 0 || ms[i] > ms[j])) j = i;
            if (j < 0) break;
            const int phase = j / 2, no_direction = phase == PH_HOST || phase == PH_OPTIMIZER;
            char launch_col[32] = "";
            if (counted) snprintf(launch_col, sizeof(launch_col), "  %6lld launches", launched[j]);
            printf("  %-30s %-8s %10.3f ms %5.1f%%  %5d interval(s)%s\n", phase_names[phase],
                   no_direction ? "" : j % 2 ? "backward" : "forward", ms[j], total > 0 ? 100.0 * ms[j] / total : 0.0,
                   calls[j], launch_col);
            calls[j] = 0;
        }
        if (counted) {
            // A transformer block's kernels: its layernorm, matmul and attention phases (the
            // final LayerNorm's one launch per direction rides along), per layer.
            long long block[2] = {0, 0};
            const int block_kinds[3] = {KERNEL_LAYERNORM, KERNEL_MATMUL, KERNEL_ATTENTION};
            for (int b = 0; b < 2; b++)
                for (int q = 0; q < 3; q++) block[b] += launched[block_kinds[q] * 2 + b];
            const int L = p->layers > 0 ? p->layers : 1;
            printf("  kernel launches in the step: %lld on every stream (fsdp and optimizer: %lld, %lld); per transformer "
                   "block: forward %.1f, backward %.1f\n", all_launches,
                   launched[PH_FSDP * 2] + launched[PH_FSDP * 2 + 1], launched[PH_OPTIMIZER * 2],
                   (double)block[0] / L, (double)block[1] / L);
        }
        if (device_lines[0]) printf("  %s\n", device_lines);
        if (teed) {
            double kind_ms[KERNEL_KINDS][2];
            for (int i = 0; i < KERNEL_KINDS; i++)
                for (int b = 0; b < 2; b++) kind_ms[i][b] = ms[i * 2 + b];
            // Measured on the device; the built-in profile's figure only where it could not be.
            char how[160], source[400];
            double gbs = d->copy_gbs ? d->copy_gbs(d, how, sizeof(how)) : 0.0;
            if (gbs > 0) {
                snprintf(source, sizeof(source), "%.0f GB/s measured (%s)", gbs, how);
            } else {
                char fallback[160];
                gbs = plan_copy_gbs(d->gpu_name, fallback, sizeof(fallback));
                snprintf(source, sizeof(source), "%s (%s)", fallback, d->copy_gbs ? how : "the device does not measure it");
            }
            profile_print_roofline("measured", (const double(*)[2])p->kind_bytes, (const double(*)[2])kind_ms, 0.0, -1.0, gbs, source);
        }
        fflush(stdout);
    }
    for (int i = 0; i < p->n; i++) k->mark_free(k, p->marks[i]);
    p->n = 0;
}

void profile_free(StepProfile* p) {
    free(p->marks);
    free(p->what);
    free(p->launches);
    memset(p, 0, sizeof(*p));
}

void profile_print_roofline(const char* time_what, const double bytes[KERNEL_KINDS][2], const double ms[KERNEL_KINDS][2],
                            double opt_bytes, double opt_ms, double copy_gbs, const char* bw_source) {
    static const int vector_kinds[] = {KERNEL_EMBED, KERNEL_LAYERNORM, KERNEL_LOSS};
    printf("vector kernels against the copy bandwidth (%s); ratio: the %s time over the bytes' time at it (target <= 1.25):\n",
           bw_source, time_what);
    printf("  %-30s %-9s %12s %12s %15s %8s\n", "family", "direction", "MB moved", time_what, "at copy bw", "ratio");
    for (int r = 0; r < 2 * 3 + 1; r++) {
        const int optimizer = r == 6, kind = optimizer ? 0 : vector_kinds[r / 2], b = r % 2;
        const double B = optimizer ? opt_bytes : bytes[kind][b], t = optimizer ? opt_ms : ms[kind][b];
        if (optimizer ? opt_ms < 0 : B <= 0 && t <= 0) continue;
        char ideal[32] = "-", ratio[32] = "-";
        if (copy_gbs > 0 && B > 0) {
            const double at = B / (copy_gbs * 1e9) * 1e3;
            snprintf(ideal, sizeof(ideal), "%.4f ms", at);
            snprintf(ratio, sizeof(ratio), "%.2f", t / at);
        }
        printf("  %-30s %-9s %12.4f %9.4f ms %15s %8s\n", optimizer ? phase_names[PH_OPTIMIZER] : phase_names[kind],
               optimizer ? "" : b ? "backward" : "forward", B / 1e6, t, ideal, ratio);
    }
}
