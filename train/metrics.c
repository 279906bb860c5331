#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

size_t current_rss_bytes(void) {
    FILE* fp = fopen("/proc/self/statm", "r");
    if (!fp) return 0;
    unsigned long pages_total = 0, pages_resident = 0;
    int n = fscanf(fp, "%lu %lu", &pages_total, &pages_resident);
    fclose(fp);
    return n == 2 ? (size_t)pages_resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

double max_over_ranks_mib(const ProcessGroup* pg, size_t bytes) {
    double mib = (double)bytes / (1024.0 * 1024.0);
    comm_all_reduce_f64(pg->world_comm, &mib, 1, COMM_MAX);
    return mib;
}

// Peak dense BF16 tensor-core throughput (no sparsity), from the vendors' data sheets, by a
// part of the device name. More specific names first ("GH200" before "H200").
typedef struct { const char* name; double tflops; } PeakFlops;
static const PeakFlops peak_flops_table[] = {
    {"GB200", 2500.0}, {"B200", 2250.0}, {"GH200", 989.0}, {"H200", 989.0},
    {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.0},  // plain "H100" is the SXM part
    {"H800", 989.0}, {"A100", 312.0}, {"A800", 312.0},
};

double device_peak_tflops(const char* device_name) {
    if (!device_name || !device_name[0]) return 0.0;
    for (size_t i = 0; i < sizeof(peak_flops_table) / sizeof(peak_flops_table[0]); i++)
        if (strstr(device_name, peak_flops_table[i].name)) return peak_flops_table[i].tflops;
    return 0.0;
}

void print_memory_line(const char* what, size_t bytes) {
    printf("  %-34s %10.1f MiB\n", what, (double)bytes / (1024.0 * 1024.0));
}

static void format_duration(double seconds, char* out, size_t n) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600) snprintf(out, n, "%ldh%02ldm", s / 3600, s % 3600 / 60);
    else if (s >= 60) snprintf(out, n, "%ldm%02lds", s / 60, s % 60);
    else snprintf(out, n, "%lds", s);
}

// JSON has no NaN or Infinity: a non-finite value is written as null.
static void json_number(char* out, size_t n, const char* fmt, double x) {
    if (isfinite(x)) snprintf(out, n, fmt, x);
    else snprintf(out, n, "null");
}

int metrics_open(Metrics* mt, int rank, const char* output_dir, int resumed, char* err, size_t errlen) {
    mt->rank = rank;
    mt->jsonl = NULL;
    if (rank != 0 || !output_dir) return 0;
    if (ckpt_mkdir_p(output_dir) != 0) { snprintf(err, errlen, "-o %s: cannot create: %s", output_dir, strerror(errno)); return 1; }
    char path[1100];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", output_dir);
    mt->jsonl = fopen(path, resumed ? "a" : "w");  // a resumed run continues the same log
    if (!mt->jsonl) { snprintf(err, errlen, "%s: cannot open for writing: %s", path, strerror(errno)); return 1; }
    return 0;
}

void metrics_step(Metrics* mt, const StepRecord* r, const FsdpTraffic* traffic) {
    mt->traffic.gathered += traffic->gathered;
    mt->traffic.reduce_scattered += traffic->reduce_scattered;
    mt->traffic.replica_reduced += traffic->replica_reduced;
    if (r->profiled) mt->profiled_steps++;
    // The first step warms up; the profiled step's marks cost time of their own.
    if (mt->steps_run++ > 0 && !r->profiled) {
        mt->train_ms_total += r->ms;
        mt->data_ms_total += r->data_ms;
        mt->timed_steps++;
    }
    if (mt->rank != 0) return;
    double tok_s = (double)mt->tokens_per_step / (r->ms / 1000.0);
    double avg_ms = mt->timed_steps > 0 ? mt->train_ms_total / mt->timed_steps : r->ms;
    char eta[32], mfu[32] = "", loss_s[32], norm_s[32], scale[48] = "", skipped[96] = "";
    format_duration((mt->end_step - r->step) * avg_ms / 1000.0, eta, sizeof(eta));
    if (mt->peak_flops > 0) snprintf(mfu, sizeof(mfu), " | mfu %.1f%%", 100.0 * tok_s * mt->flops_per_token / mt->peak_flops);
    if (r->loss_scale > 0) snprintf(scale, sizeof(scale), " | scale %.9g", r->loss_scale);
    if (r->overflow)
        snprintf(skipped, sizeof(skipped), " | update skipped: gradient overflow, loss scale %.9g -> %.9g", r->loss_scale,
                 r->next_loss_scale);
    else if (r->skipped) snprintf(skipped, sizeof(skipped), " | update skipped: non-finite loss or gradient norm");
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s%s | mem %.0f MiB%s | eta %s%s\n",
           r->step, mt->max_steps, r->loss, r->norm, r->lr, r->ms, tok_s, mfu, r->mem_mib, scale, eta, skipped);
    fflush(stdout);
    if (!mt->jsonl) return;
    json_number(loss_s, sizeof(loss_s), "%.9f", r->loss);
    json_number(norm_s, sizeof(norm_s), "%.6f", r->norm);
    fprintf(mt->jsonl, "{\"step\":%d,\"loss\":%s,\"lr\":%.6e,\"grad_norm\":%s,\"ms\":%.3f,\"data_ms\":%.3f,"
                       "\"tokens_per_s\":%.1f,\"tokens\":%ld,\"mem_mib\":%.1f",
            r->step, loss_s, r->lr, norm_s, r->ms, r->data_ms, tok_s, mt->tokens_per_step * (long)r->step, r->mem_mib);
    if (mt->peak_flops > 0) fprintf(mt->jsonl, ",\"mfu\":%.5f", tok_s * mt->flops_per_token / mt->peak_flops);
    if (r->skipped) fprintf(mt->jsonl, ",\"skipped\":true");
    if (r->loss_scale > 0) fprintf(mt->jsonl, ",\"loss_scale\":%.9g", r->loss_scale);
    if (r->overflow) fprintf(mt->jsonl, ",\"overflow\":true");
    fprintf(mt->jsonl, "}\n");
    fflush(mt->jsonl);
}

void metrics_val(Metrics* mt, int step, double val_loss) {
    if (mt->rank != 0) return;
    printf("val loss %.6f (step %d)\n", val_loss, step);
    if (mt->jsonl) { fprintf(mt->jsonl, "{\"step\":%d,\"val_loss\":%.9f}\n", step, val_loss); fflush(mt->jsonl); }
}

void metrics_summary(Metrics* mt, const ProcessGroup* pg, double gpu_peak_mib, size_t device_budget,
                     size_t num_parameters, int grad_accum) {
    // Measured peak resident memory, every rank. Above the setup figure it holds what the
    // libraries allocate while training: OpenBLAS's per-thread buffers and MPI's reduction
    // temporaries (Open MPI's non-blocking reduce-scatter stages whole units on one rank).
    double peak = max_over_ranks_mib(pg, peak_rss_bytes());
    double peak_device = gpu_peak_mib >= 0 ? max_over_ranks_mib(pg, (size_t)(gpu_peak_mib * 1048576.0)) : 0.0;
    if (pg->rank != 0) return;
    if (mt->timed_steps > 0)
        printf("average step %.1f ms (%.0f tok/s) over %d steps after the first%s; data loading %.3f ms of it (%.2f%%, rank 0)\n",
               mt->train_ms_total / mt->timed_steps, (double)mt->tokens_per_step * mt->timed_steps / (mt->train_ms_total / 1000.0),
               mt->timed_steps, mt->profiled_steps ? " (not the profiled one)" : "", mt->data_ms_total / mt->timed_steps,
               100.0 * mt->data_ms_total / mt->train_ms_total);
    printf("peak resident memory per rank: %.1f MiB (max over ranks)\n", peak);
    if (gpu_peak_mib >= 0)
        printf("peak GPU memory per rank: %.1f MiB measured (max over ranks; cudaMemGetInfo above the context%s), budget %.1f MiB\n",
               peak_device, pg->local_world > 1 ? ", every process on the GPU" : "", device_budget / 1048576.0);
    // Communication per optimizer step, against FSDP's 3 x params x (W-1)/W (gather for
    // forward, again for backward, reduce-scatter): the root stays gathered for the whole
    // step, so it is gathered once instead of twice.
    const FsdpTraffic* tr = &mt->traffic;
    double steps = (double)mt->steps_run, W = (double)pg->shard_size, mib = 1024.0 * 1024.0;
    double formula = 3.0 * (double)num_parameters * sizeof(float) * (W - 1.0) / W * grad_accum;
    if (mt->steps_run > 0)
        printf("communication per step per rank: all-gather %.1f MiB, reduce-scatter %.1f MiB, replica all-reduce %.1f MiB; "
               "3 x params x (W-1)/W x micro-steps = %.1f MiB\n",
               tr->gathered / steps / mib, tr->reduce_scattered / steps / mib, tr->replica_reduced / steps / mib, formula / mib);
}

void metrics_close(Metrics* mt) {
    if (mt->jsonl) fclose(mt->jsonl);
    mt->jsonl = NULL;
}
