// What a run reports: the step line on the console, metrics.jsonl, MFU against the device's
// peak, memory (resident, GPU, the budget table), and the end-of-run summary. Rank 0 prints;
// the figures that differ by rank are reduced (max) over every rank first.
#ifndef FSDP_TRAIN_METRICS_H
#define FSDP_TRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "comm/process_group.h"
#include "dataloader/loader.h"
#include "fsdp/fsdp.h"
#include "model/model.h"
#include "train/device.h"
#include "train/eval.h"
#include "train/options.h"
#include "train/tensorboard.h"

#ifdef __cplusplus
extern "C" {
#endif

double now_seconds(void);
size_t peak_rss_bytes(void);      // this process, bytes
size_t current_rss_bytes(void);   // 0 where /proc is unavailable
double max_over_ranks_mib(const ProcessGroup* pg, size_t bytes);
// Peak dense BF16 TFLOP/s of a GPU by its name; 0 when unknown (and for the cpu device).
double device_peak_tflops(const char* device_name);
void print_memory_line(const char* what, size_t bytes);

// The parts of a built model that the setup lines, the memory budget and --plan read. The
// model is train_gpt.cu's, which train/ cannot include: it lends these.
typedef struct {
    const ModelConfig* config;
    const ModelLayout* layout;
    Fsdp* fsdp;                 // the engine (its memory figures; --plan hooks its events)
    Device* dev;                // the device (its own buffers; --plan hooks its kernels)
    size_t activation_bytes;    // the activations, allocated for micro-batches of B x T
    int B, T;
} ModelParts;

// The memory budget per rank: what the run allocates for its whole life, computed once from
// the built model, for the run's setup lines and for --plan (the same figures by construction).
typedef struct {
    size_t device;       // device memory: engine state, slots, activations, the device's own buffers
    size_t host_extra;   // host buffers of a step's tokens and losses (the cpu's total counts them)
} MemoryBudget;

MemoryBudget memory_budget(const ModelParts* m, int grad_accum);
void print_memory_budget(const ModelParts* m, const MemoryBudget* b);
// The model's FLOPs per token for MFU (the run's and --plan's): 6N + 6LCT, the forward and
// backward of every weight plus attention's scores and weighted sums at T positions.
double model_flops_per_token(const ModelConfig* c, size_t num_parameters, int T);
// The model's line of the setup (the run's and --plan's).
void print_model_line(const ModelConfig* c, size_t num_parameters);
// What the run is, and the memory budget per rank, before the first step (rank 0): the device
// (why: choose_device's reason; threads per rank; the peak for MFU), the model, the sharding,
// the batch (grad_accum micro-steps, tokens_per_step over all ranks, max_steps), the data.
void print_setup(const Options* opt, const ProcessGroup* pg, const char* device, const char* why, int threads,
                 double peak_tflops, const ModelParts* m, int grad_accum, long tokens_per_step, int max_steps,
                 const DataLoader* train, const MemoryBudget* b);
// Once everything the budget counts is allocated and touched: the resident memory and, where
// the device measures it, the device memory in use (returned; else 0), max over ranks.
double print_setup_memory(const ProcessGroup* pg, const Device* dev, size_t device_budget);

// One optimizer step, as it is reported.
typedef struct {
    int step;            // completed steps
    double loss;
    float norm, lr;
    double ms, data_ms;  // the step on the host clock; of it, reading data
    double mem_mib;      // cpu: peak resident; cuda: GPU memory in use (max over the run)
    int skipped;         // non-finite loss or norm: no update
    float loss_scale;    // fp16: the scale this step's backward ran with (0: no loss scaling)
    float next_loss_scale;  // ... and the next step's
    int overflow;        // fp16: the gradients overflowed; skipped, and the scale halved
    int profiled;        // --profile-step's step (left out of the averages)
    TpBytes tp;          // what its TP collectives moved (the schedule's; zero without TP)
} StepRecord;

typedef struct {
    int rank;
    const ProcessGroup* pg;      // a write error ends the run (fatal) on every rank
    FILE* jsonl;                 // rank 0 with -o: metrics.jsonl (else NULL)
    TbWriter tb;                 // rank 0 with an event directory (--tensorboard): the same figures
    int max_steps, end_step;     // the schedule's steps; where this job stops
    long tokens_per_step;
    double flops_per_token;      // 6N + 6LCT
    double peak_flops;           // over every rank; 0: no MFU
    // this job's steps: the first and the profiled one are not timed
    int steps_run, timed_steps, profiled_steps;
    double train_ms_total, data_ms_total;
    FsdpTraffic traffic;         // communication of the training steps only
    TpBytes tp;                  // ... and of their TP collectives (the schedule's)
} Metrics;

// The step's decision (fsdp_step_decide's figures) into its record: loss, norm, skipped, and
// with loss scaling (fp16) the scale, the next one and whether the gradients overflowed.
void step_record_decision(StepRecord* r, const FsdpStepStats* s, int loss_scaling);
// The step line's memory, MiB: on the cpu the peak resident memory; on a device that measures
// its own (cuda), the most in use so far (*device_max, updated).
double step_memory_mib(const Device* dev, double* device_max);

// On rank 0: opens OUTPUT/metrics.jsonl when -o is set (appending when resumed) and a new
// TensorBoard event file in run_tensorboard_dir's directory when there is one. resume_step:
// the checkpoint's step a resumed run starts from, else -1. 0, or 1 with a message.
int metrics_open(Metrics* mt, const ProcessGroup* pg, const Options* opt, int resume_step, char* err, size_t errlen);
// Counts the step into the averages (traffic: what the step exchanged), prints its line and
// writes its JSON object and its TensorBoard event (a write error: fatal).
void metrics_step(Metrics* mt, const StepRecord* r, const FsdpTraffic* traffic);
void metrics_val(Metrics* mt, int step, double val_loss);
// A multiple-choice evaluation of set_path (train/eval.h): its line, JSON object
// (eval_acc_norm, eval_acc, eval_examples) and TensorBoard scalars (eval/acc_norm, eval/acc).
void metrics_eval(Metrics* mt, int step, const EvalResult* res, const char* set_path);
// The end of the run: average step time, peak memory (every rank), communication per step
// against FSDP's formula and, with TP, the TP collectives' bytes per step (the planner's "TP
// bytes per step", counted the same way). gpu_peak_mib < 0: no GPU figure. num_parameters:
// the rank's (tensor parallel: its part of the model, which its engine shards).
void metrics_summary(Metrics* mt, const ProcessGroup* pg, double gpu_peak_mib, size_t device_budget,
                     size_t num_parameters, int grad_accum);
void metrics_close(Metrics* mt);

#ifdef __cplusplus
}
#endif
#endif
