// train_gpt --plan: what a run with these flags would need and do, from the model's real
// schedule run on the sim device (kernels/kernels_sim.h, fsdp/backend_sim.h) instead of a
// GPU. This file: the driver (plan_main: one process plays rank 0 of each world, the model
// built and stepped as a run does it), the device profiles (built in, or a key=value file),
// the topology that picks a collective's link, the flag helpers, and the tables the plan
// prints. The model's build and its step are train_gpt.cu's, lent through PlanModelOps:
// nothing here repeats them.
#ifndef FSDP_TRAIN_PLAN_H
#define FSDP_TRAIN_PLAN_H

#include <stddef.h>
#include "comm/process_group.h"
#include "fsdp/backend_sim.h"
#include "fsdp/fsdp.h"
#include "kernels/kernels_sim.h"
#include "model/model.h"
#include "train/device.h"
#include "train/metrics.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PLAN_MAX_WORLDS 16
#define PLAN_MAX_TP 1024   // --tp's bound (tensor parallel stays within one node of --gpus-per-node)

// A device as the cost model sees it. Bandwidths are per GPU and per direction.
typedef struct SimProfile {
    char name[64];
    int fp32;                  // 1: the cpu device (fp32 everywhere, host memory); 0: a GPU (bf16)
    double tflops;             // peak dense TFLOP/s in the compute dtype (bf16 tensor cores)
    double hbm_gbs;            // device-memory bandwidth, GB/s
    double mem_gib;            // device memory, GiB
    double nvlink_gbs;         // intra-node link, GB/s per direction per GPU
    double ib_gbs;             // inter-node network, GB/s per direction per GPU
    double nvlink_latency_us;  // per ring step (assumptions, not datasheet figures)
    double ib_latency_us;
    double launch_us;          // per-kernel overhead
    double host_link_gbs;      // --offload optimizer: host <-> GPU copies, GB/s per direction per GPU
    double host_mem_gbs;       // ... and the host memory bandwidth each rank's optimizer streams at
    double matmul_eff, vector_eff, mem_eff;  // fractions of peak reached (FLOPs, HBM bytes)
    // Attention's fraction of the peak per implementation (SimAttention) and head size
    // (64, 128), and the fraction of HBM the model's vector kernels stream at.
    double attention_eff[SIM_ATTENTION_IMPLS][SIM_HEAD_SIZES];
    double vector_mem_eff;
    double time_scale[SIM_GROUPS];  // a calibration's factors per kernel group (0 or 1: none)
    int threads;               // "cpu": the threads per rank its rates were measured with (0: not measured)
} SimProfile;

// NAME is a built-in profile (plan_profile_names; "cpu" measures this machine, ~2 s, with
// the OpenMP/BLAS threads set now), else a key=value file (README: "Planning a run"). 0, or 1 with one line in err naming the flag, file and line.
int plan_profile(const char* name_or_file, SimProfile* p, char* err, size_t errlen);
const char* plan_profile_names(void);   // "a100-40, a100-80, h100, h200, b200, cpu"
// --plan-world "8,64,512": 1 .. PLAN_MAX_WORLDS sizes, each >= 1. 0, or 1 with err.
int plan_parse_world(const char* s, int* worlds, int* n, char* err, size_t errlen);

// --plan-tp "1,2,4,8": 1 .. PLAN_MAX_WORLDS degrees, each in [1, PLAN_MAX_TP]. 0, or 1 with err.
int plan_parse_tp(const char* s, int* tps, int* n, char* err, size_t errlen);
// Whether tensor parallelism of degree tp can split c for sequences of T, as a run checks it
// (model_tp_check, then T): NULL, else the refusal in why ("--tp 8 does not divide the 4 heads").
const char* plan_tp_check(const ModelConfig* c, int tp, int T, char* why, size_t n);

// The costs of a run on p whose attention is `attention` (--attention's name, resolved per
// head size by the sim).
SimCosts plan_costs(const SimProfile* p, SimAttention attention);
// The link of a group of `size` ranks, `stride` apart, that contains rank 0 (node-aligned):
// NVLink when it stays in one node of gpus_per_node, else the network.
SimLink plan_link(const SimProfile* p, int gpus_per_node, int stride, int size);

// What one simulated step of rank 0 gave.
typedef struct {
    int world, shard_size, replicas, B, T, grad_accum;
    int tp, dp;                                 // --tp and the data-parallel size world / tp
    double tp_bytes, tp_s;                      // TP collectives per step: bytes this rank sends, their time
    double fsdp_bytes;                          // the FSDP engine's bytes per step (this rank)
    // The budget's parts (device memory per rank): parameters (shards in every dtype and the
    // gathered slots), gradients (shards and full-gradient slots), Adam's m and v, activations.
    size_t mem_params, mem_grads, mem_optimizer, mem_activations;
    long tokens_per_step;                       // all ranks
    size_t num_parameters;
    double model_flops_per_token;               // 6N + 6LCT, as the MFU of a real run
    double peak_tflops;                         // the profile's, per rank (the cpu's: measured for this world)
    double step_s;
    double busy[SIM_PHASES], exposed[SIM_PHASES], comm_busy[SIM_PHASES];
    double comm_bytes[SIM_PHASES], mem_bytes[SIM_PHASES], flops[SIM_PHASES];
    double bound_time[SIM_BOUNDS];
    double group_time[SIM_GROUPS + 1];          // kernel time by group (kernels_sim.h)
    double comm_lower_bound_s;                  // this rank's comm bytes over its fastest link
    size_t budget_bytes;                        // device memory per rank (the run's budget)
    int offload;                                // --offload optimizer (waits include the host's)
    long kernels;                               // kernel launches per step (kernels_sim.h)
    long kind_launches[KERNEL_KINDS][2];        // the model's, by kind and direction
    long attention_calls[2];                    // attention forwards and backwards
    int layers;
    double kind_bytes[KERNEL_KINDS][2];         // the model's kernels by kind and direction (the roofline table)
    double kind_time[KERNEL_KINDS][2];
    SimAttention attention;                     // the implementation planned (auto resolved)
    int head_size;
    double attention_eff;                       // its efficiency at this head size
} PlanRow;

double plan_tokens_per_s(const PlanRow* r);
double plan_mfu(const PlanRow* r);
// The resource the step spends most time on: "matmul", "memory bandwidth", "communication"
// (exposed; with --offload optimizer also the waits for the host's copies and AdamW) or
// "host" (launch overheads), with its share of the step in *share.
const char* plan_limiter(const PlanRow* r, double* share);
// The copy bandwidth of a GPU (by its name, as the device reports it): the built-in profile
// of that part's HBM x mem_eff (a device-to-device copy's share), in GB/s, with its source
// in `source`; 0 for a GPU no built-in profile describes (the source says so).
double plan_copy_gbs(const char* gpu_name, char* source, size_t n);
// The per-world detail (after the budget) and the scaling table.
void plan_print_detail(const PlanRow* r, const SimProfile* p);
void plan_print_scaling(const PlanRow* rows, int n, const SimProfile* p, int fixed_global_batch);
// --plan-tp's table: one row per TP degree planned at one world size.
void plan_print_tp(const PlanRow* rows, int n, const SimProfile* p);
// --calibrate-from LOG: a real run's --profile-step table (LOG: its output) against the plan
// of the same flags (row, planned with profile p): prints to stdout a profile file, p's
// figures with each kernel group's time scaled by measured / planned, so that a plan with it
// reproduces the profiled step's matmul, attention, vector-kernel and optimizer times. 0, or
// 1 with one line in err.
int plan_calibrate(const char* log_path, const PlanRow* row, const SimProfile* p, char* err, size_t errlen);

// What the plan runs of the model, lent by train_gpt.cu. The model (its struct, its build with
// the device constructor of train/device.cuh, its schedule and the step a run takes) lives
// there, and train/ cannot include it: a table of three functions keeps the plan on the same
// code as a run, the model opaque here, and what the plan reads of it in ModelParts.
typedef struct {
    // model_build's: rank 0 of pg on the device dopt names (the sim); fills *parts. Ends the
    // process when out of memory.
    void* (*build)(const ModelConfig* c, int layers_per_unit, const ProcessGroup* pg, const FsdpConfig* fcfg,
                   const DeviceOptions* dopt, int B, int T, ModelParts* parts);
    void (*step)(void* model, int grad_accum);  // one optimizer step as a run takes it, without data
    void (*free)(void* model);
} PlanModelOps;

// train_gpt --plan: checks the flags, prints the plan of each world (or with --calibrate-from
// the calibrated profile) and returns the exit status. Started under a launcher, rank 0 plans.
int plan_main(const Options* opt, const ModelConfig* config, const PlanModelOps* ops);

#ifdef __cplusplus
}
#endif
#endif
