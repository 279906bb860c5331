#include "train/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The kernel kinds (KernelKind's values), then what is not a kernel.
enum { PH_HOST = KERNEL_KINDS, PH_FSDP, PH_OPTIMIZER, PH_COUNT };
static const char* const phase_names[PH_COUNT] = {
    [KERNEL_EMBED] = "embedding", [KERNEL_LAYERNORM] = "layernorm (+ residual add)",
    [KERNEL_MATMUL] = "matmul (transformer blocks)", [KERNEL_LM_HEAD] = "matmul (lm head)",
    [KERNEL_ATTENTION] = "attention", [KERNEL_LOSS] = "cross-entropy",
    [PH_HOST] = "host (data, the loop)", [PH_FSDP] = "fsdp waits (gather / reduce)",
    [PH_OPTIMIZER] = "grad norm + AdamW",
};

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

static void on_fsdp(void* ctx, FsdpEvent e) {
    mark((StepProfile*)ctx, e == FSDP_EVENT_OPTIMIZER ? PH_OPTIMIZER : PH_FSDP, e == FSDP_EVENT_BACKWARD);
}

void profile_begin(StepProfile* p, Device* d, Fsdp* f, int layers) {
    p->dev = d;
    p->layers = layers;
    p->fsdp = f;
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
