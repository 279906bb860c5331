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

MemoryBudget memory_budget(const ModelParts* m, int grad_accum) {
    const FsdpMemory* mm = &m->fsdp->memory;
    MemoryBudget b;
    b.device = mm->shard_state + mm->gathered + mm->full_grads + m->activation_bytes + device_extra_bytes(m->dev);
    size_t io_bytes = 4 * (size_t)grad_accum * m->B * m->T * sizeof(int);  // inputs, targets: two sets (by step parity)
    size_t step_losses_bytes = (size_t)m->B * m->T * sizeof(float);       // a validation micro-batch's losses
    b.host_extra = io_bytes + step_losses_bytes;
    return b;
}

void print_memory_budget(const ModelParts* m, const MemoryBudget* b) {
    const FsdpMemory* mm = &m->fsdp->memory;
    const Device* dev = m->dev;
    int on_gpu = !dev->backend.host_is_device;  // the budget is device memory, apart from the host's
    printf("memory budget per rank%s:\n", on_gpu ? " (GPU memory)" : "");
    // (on cuda the shards also hold the bf16 copy of the parameters; offloaded, only that)
    print_memory_line(mm->host_offload ? "sharded bf16 params (optimizer offloaded)" : "sharded params + grads + Adam m, v",
                      mm->shard_state);
    print_memory_line("gathered parameter slots", mm->gathered);
    print_memory_line("full-gradient slots", mm->full_grads);
    print_memory_line("activations", m->activation_bytes);
    for (int i = 0; i < dev->n_device_lines; i++) print_memory_line(dev->device_lines[i].what, dev->device_lines[i].bytes);
    if (on_gpu) {
        print_memory_line("total", b->device);
        if (mm->host_offload)
            print_memory_line("host: offloaded master, m, v, grads + staging (pinned)", mm->host_offload);
        else
            print_memory_line("host: fp32 mirror of master, m, v", mm->host_mirror);
        for (int i = 0; i < dev->n_host_lines; i++) print_memory_line(dev->host_lines[i].what, dev->host_lines[i].bytes);
    } else {
        print_memory_line("total", b->device + b->host_extra);
    }
}

double model_flops_per_token(const ModelConfig* c, size_t num_parameters, int T) {
    return 6.0 * (double)num_parameters + 6.0 * c->num_layers * c->channels * (double)T;
}

void print_model_line(const ModelConfig* c, size_t num_parameters) {
    char what[256];
    model_describe(c, 0, what, sizeof(what));
    printf("model: %s, max_seq %d, vocab %d (padded %d): %zu parameters\n", what, c->max_seq_len, c->vocab_size,
           c->padded_vocab_size, num_parameters);
}

void print_setup(const Options* opt, const ProcessGroup* pg, const char* device, const char* why, int threads,
                 double peak_tflops, const ModelParts* m, int grad_accum, long tokens_per_step, int max_steps,
                 const DataLoader* train, const MemoryBudget* b) {
    printf("fsdp.c train_gpt | device %s (%s) | %d rank(s) via %s (%s), %d thread(s) each\n", device, why, pg->world,
           pg->launcher, pg->transport, threads);
    if (m->dev->description[0])
        printf("%s: %s | peak %.0f TFLOP/s%s\n", m->dev->name, m->dev->description, peak_tflops,
               peak_tflops > 0 ? "" : " (unknown GPU: no MFU; --peak-tflops sets it)");
    print_model_line(m->config, m->layout->num_parameters);
    printf("sharding: %d unit(s) of %d block(s) + root, shard group %d x %d replica(s), prefetch %d, reshard after forward %d, grad sync %s\n",
           m->layout->n_units - 1, opt->unit_layers, pg->shard_size, pg->replicate_size, opt->prefetch,
           opt->reshard_after_forward, opt->no_grad_sync_until_last ? "last micro-step" : "every micro-step");
    if (pg->tp_size > 1)
        printf("tensor parallel: groups of %d rank(s) (sequence parallel), %d data-parallel rank(s)\n", pg->tp_size,
               pg->dp_size);
    printf("batch: %d x %d per rank, %d rank(s), %d accumulation step(s) = %ld tokens per step; %d steps\n", m->B, m->T,
           pg->dp_size, grad_accum, tokens_per_step, max_steps);
    printf("train data: %d shard(s), %zu sequences per epoch%s\n", train->n_shards, train->windows_per_epoch,
           opt->shuffle ? ", shuffled" : "");
    print_memory_budget(m, b);
    fflush(stdout);
}

double print_setup_memory(const ProcessGroup* pg, const Device* dev, size_t device_budget) {
    double setup_rss = max_over_ranks_mib(pg, current_rss_bytes());
    if (pg->rank == 0) printf("resident after setup: %.1f MiB per rank (max over ranks; the budget plus the program and its libraries)\n", setup_rss);
    if (!dev->memory_in_use_mib) return 0.0;
    double used = dev->memory_in_use_mib(dev);
    double setup_dev = max_over_ranks_mib(pg, (size_t)(used * 1048576.0));
    if (pg->rank == 0)
        printf("GPU memory after setup: %.1f MiB in use (max over ranks; cudaMemGetInfo above the context%s), budget %.1f MiB\n",
               setup_dev, pg->local_world > 1 ? ", every process on the GPU" : "", device_budget / 1048576.0);
    return used;
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

void step_record_decision(StepRecord* r, const FsdpStepStats* s, int loss_scaling) {
    r->loss = s->loss;
    r->norm = s->norm;
    r->skipped = s->skip;
    if (loss_scaling) {
        r->loss_scale = s->step_loss_scale;
        r->next_loss_scale = s->loss_scale;
        r->overflow = s->overflow;
    }
}

double step_memory_mib(const Device* dev, double* device_max) {
    if (!dev->memory_in_use_mib) return (double)peak_rss_bytes() / (1024.0 * 1024.0);
    double used = dev->memory_in_use_mib(dev);
    if (used > *device_max) *device_max = used;
    return *device_max;
}

int metrics_open(Metrics* mt, const ProcessGroup* pg, const Options* opt, int resume_step, char* err, size_t errlen) {
    mt->rank = pg->rank;
    mt->pg = pg;
    mt->jsonl = NULL;
    mt->tb.fp = NULL;
    if (pg->rank != 0) return 0;
    const char* output_dir = opt->output_dir;
    if (output_dir) {
        if (ckpt_mkdir_p(output_dir) != 0) { snprintf(err, errlen, "-o %s: cannot create: %s", output_dir, strerror(errno)); return 1; }
        char path[1100];
        snprintf(path, sizeof(path), "%s/metrics.jsonl", output_dir);
        mt->jsonl = fopen(path, resume_step >= 0 ? "a" : "w");  // a resumed run continues the same log
        if (!mt->jsonl) { snprintf(err, errlen, "%s: cannot open for writing: %s", path, strerror(errno)); return 1; }
    }
    char tb_dir[1024];
    if (run_tensorboard_dir(opt, tb_dir, sizeof(tb_dir)) && tb_open(&mt->tb, tb_dir, resume_step, err, errlen)) return 1;
    return 0;
}

// The step's figures as TensorBoard scalars, the same as its JSON object's (less the counts).
static void tb_step(Metrics* mt, const StepRecord* r, double tok_s) {
    TbScalar v[9];
    int n = 0;
    v[n++] = (TbScalar){"train/loss", (float)r->loss};
    v[n++] = (TbScalar){"train/lr", r->lr};
    v[n++] = (TbScalar){"train/grad_norm", r->norm};
    v[n++] = (TbScalar){"train/step_ms", (float)r->ms};
    v[n++] = (TbScalar){"train/data_ms", (float)r->data_ms};
    v[n++] = (TbScalar){"train/tokens_per_s", (float)tok_s};
    v[n++] = (TbScalar){"train/mem_mib", (float)r->mem_mib};
    if (mt->peak_flops > 0) v[n++] = (TbScalar){"train/mfu", (float)(tok_s * mt->flops_per_token / mt->peak_flops)};
    if (r->loss_scale > 0) v[n++] = (TbScalar){"train/loss_scale", r->loss_scale};
    char err[1600];
    if (tb_write_scalars(&mt->tb, r->step, v, n, err, sizeof(err))) fatal(mt->pg, "%s", err);
}

void metrics_step(Metrics* mt, const StepRecord* r, const FsdpTraffic* traffic) {
    mt->traffic.gathered += traffic->gathered;
    mt->traffic.reduce_scattered += traffic->reduce_scattered;
    mt->traffic.replica_reduced += traffic->replica_reduced;
    mt->traffic.tp_replicated_reduced += traffic->tp_replicated_reduced;
    mt->tp.gathered += r->tp.gathered;
    mt->tp.reduce_scattered += r->tp.reduce_scattered;
    mt->tp.all_reduced += r->tp.all_reduced;
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
    tb_step(mt, r, tok_s);
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
    const TbScalar v = {"val/loss", (float)val_loss};
    char err[1600];
    if (tb_write_scalars(&mt->tb, step, &v, 1, err, sizeof(err))) fatal(mt->pg, "%s", err);
}

void metrics_eval(Metrics* mt, int step, const EvalResult* res, const char* set_path) {
    if (mt->rank != 0) return;
    const double acc_norm = (double)res->correct_norm / res->examples, acc = (double)res->correct / res->examples;
    printf("eval acc_norm %.4f (%d/%d), acc %.4f (step %d; %s: %ld forwards of %dx%d per rank, %.2f s)\n", acc_norm,
           res->correct_norm, res->examples, acc, step, set_path, res->forwards, res->B, res->T, res->seconds);
    if (mt->jsonl) {
        fprintf(mt->jsonl, "{\"step\":%d,\"eval_acc_norm\":%.6f,\"eval_acc\":%.6f,\"eval_examples\":%d}\n", step, acc_norm,
                acc, res->examples);
        fflush(mt->jsonl);
    }
    const TbScalar v[2] = {{"eval/acc_norm", (float)acc_norm}, {"eval/acc", (float)acc}};
    char err[1600];
    if (tb_write_scalars(&mt->tb, step, v, 2, err, sizeof(err))) fatal(mt->pg, "%s", err);
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
    if (mt->steps_run == 0) return;
    printf("communication per step per rank: all-gather %.1f MiB, reduce-scatter %.1f MiB, replica all-reduce %.1f MiB; "
           "3 x params x (W-1)/W x micro-steps = %.1f MiB",
           tr->gathered / steps / mib, tr->reduce_scattered / steps / mib, tr->replica_reduced / steps / mib, formula / mib);
    // Tensor parallel: the schedule's collectives and the engine's all-reduces of the replicated
    // gradients, as a ring moves them (TpBytes): the planner's TP bytes per step, exactly.
    if (pg->tp_size > 1) {
        const double all_reduced = (double)mt->tp.all_reduced + tp_all_reduce_bytes((double)tr->tp_replicated_reduced, pg->tp_size);
        const double tp_total = (double)(mt->tp.gathered + mt->tp.reduce_scattered) + all_reduced;
        printf("; TP all-gather %.1f MiB, TP reduce-scatter %.1f MiB, TP all-reduce %.1f MiB (the loss's and the replicated "
               "gradients'): TP bytes per step %.0f",
               mt->tp.gathered / steps / mib, mt->tp.reduce_scattered / steps / mib, all_reduced / steps / mib, tp_total / steps);
    }
    printf("\n");
}

void metrics_close(Metrics* mt) {
    if (mt->jsonl) fclose(mt->jsonl);
    mt->jsonl = NULL;
    char err[1600];
    if (tb_close(&mt->tb, err, sizeof(err))) fatal(mt->pg, "%s", err);
}
