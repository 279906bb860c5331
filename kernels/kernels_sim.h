// The sim device's kernel table (train_gpt --plan): the model schedule runs unchanged, but
// each kernel only advances a virtual clock by its modelled cost instead of computing.
// Nothing is read or written through the table's pointers (the sim's allocations are fake
// addresses that are never dereferenced), so a 1.5B model plans in a few megabytes.
//
// Cost of one kernel, from its real shapes: the FLOPs it does and the bytes it moves,
//   time = max(FLOPs / (peak x efficiency of its kind), bytes / (bandwidth x efficiency))
//          + launches x launch overhead,
// the roofline of the device (train/plan.c gives the figures per device profile). On the
// cuda profiles an operation is charged the kernel launches the cuda device issues for the
// same call (kernels/kernels_cuda.cuh: e.g. a LayerNorm backward is its kernel and the sum of
// its partial sums, a matmul backward two GEMMs and, when the bias gradient is not in the
// epilogue, two more), so that --plan's launch count is --profile-step's; on the cpu profile
// every call is one (the host's call overhead).
//
// The clock (SimClock) is shared with the sim FSDP backend (fsdp/backend_sim.c): two
// streams, compute and comm. A collective starts on the comm stream once the compute stream
// has issued it; a wait for it moves the compute clock to the collective's end.
#ifndef FSDP_KERNELS_KERNELS_SIM_H
#define FSDP_KERNELS_KERNELS_SIM_H

#include <stddef.h>
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// What the step is doing, for the per-phase table (set by the engine's events).
typedef enum { SIM_FORWARD, SIM_BACKWARD, SIM_OPTIMIZER, SIM_PHASES } SimPhase;
// What bounds a kernel's time: its FLOPs (matmul-like or attention), its bytes, or the launch.
typedef enum { SIM_BOUND_MATMUL, SIM_BOUND_ATTENTION, SIM_BOUND_MEMORY, SIM_BOUND_LAUNCH, SIM_BOUNDS } SimBound;
// The rate a kernel's FLOPs run at.
typedef enum { SIM_WORK_MATMUL, SIM_WORK_ATTENTION, SIM_WORK_VECTOR } SimWork;
// The groups of kernels a real run's --profile-step table times separately, which a
// calibration scales (train/plan.h): the matmuls (blocks and LM head), attention, the
// vector kernels of the model (embedding, LayerNorms, cross-entropy), the optimizer's.
// SIM_GROUP_OTHER: the engine's kernels outside the optimizer (gradient folds, zeroing).
typedef enum { SIM_GROUP_MATMUL, SIM_GROUP_ATTENTION, SIM_GROUP_VECTOR, SIM_GROUP_OPTIMIZER, SIM_GROUPS,
               SIM_GROUP_OTHER = SIM_GROUPS } SimGroup;

// The attention implementations a run can pick (--attention; train/device.cuh) and the head
// sizes the flash kernels support: a profile has one attention efficiency per pair (other
// head sizes take the nearer column, 64 up to 96, 128 above). auto is resolved per head
// size as a run on a machine without cuDNN resolves it: flash at 64 and 128, else cublas
// (never flash-pipelined: auto does not pick it until a GPU has measured it).
typedef enum { SIM_ATTENTION_FLASH, SIM_ATTENTION_CUBLAS, SIM_ATTENTION_CUDNN, SIM_ATTENTION_FLASH_PIPELINED,
               SIM_ATTENTION_IMPLS, SIM_ATTENTION_AUTO = SIM_ATTENTION_IMPLS } SimAttention;
enum { SIM_HEAD_SIZES = 2 };
extern const char* const sim_attention_names[SIM_ATTENTION_IMPLS + 1];  // "flash", ..., "flash-pipelined", "auto"
extern const int sim_head_sizes[SIM_HEAD_SIZES];                        // 64, 128
SimAttention sim_attention_from_name(const char* name);  // --attention's names; -1 when unknown
SimAttention sim_attention_resolve(SimAttention a, int head_size);
int sim_head_size_column(int head_size);

// The device's compute figures (train/plan.c's profiles).
typedef struct {
    double peak_flops;      // dense FLOP/s in the compute dtype
    double mem_bw;          // bytes/s of device memory
    double matmul_eff;      // fractions of peak_flops reached by matmuls, attention, vector kernels
    double attention_eff;
    double vector_eff;
    double mem_eff;         // fraction of mem_bw a streaming kernel reaches
    double launch_s;        // per-kernel overhead (launch, or the host's call on a cpu)
    double time_scale[SIM_GROUPS];  // a calibration's factor on each group's kernel times (1: none)
    // Attention's efficiency per implementation and head size (0: attention_eff above), the
    // implementation --attention names, and the fraction of mem_bw the model's vector kernels
    // (SIM_GROUP_VECTOR) reach (0: mem_eff). Last, so that a table filled in order without
    // them (dev/cuda_emu/traffic_audit.h: it counts, it does not time) keeps its meaning.
    double attention_impl_eff[SIM_ATTENTION_IMPLS][SIM_HEAD_SIZES];
    SimAttention attention;
    double vector_mem_eff;
} SimCosts;

typedef struct {
    SimCosts costs;
    double compute, comm;             // the two streams' clocks, seconds
    SimPhase phase;
    SimGroup group;                   // of the kernels issued now (set before each kernel)
    int kind, backward;               // the model kernel issued now (KernelKind; -1: the engine's)
    // Accumulated since the last sim_clock_reset:
    double busy[SIM_PHASES];          // compute-stream time in kernels
    double exposed[SIM_PHASES];       // compute-stream time spent waiting for collectives
    double comm_busy[SIM_PHASES];     // comm-stream time in collectives (issued in that phase)
    double comm_bytes[SIM_PHASES];    // bytes this rank received or sent in them
    double mem_bytes[SIM_PHASES];     // device-memory bytes the kernels moved
    double flops[SIM_PHASES];
    double bound_time[SIM_BOUNDS];    // kernel time by what bounds it (launch: the overheads)
    double group_time[SIM_GROUPS + 1];  // kernel time by group (SIM_GROUP_OTHER last)
    double kind_bytes[KERNEL_KINDS][2];  // the model kernels' bytes and time by kind and direction
    double kind_time[KERNEL_KINDS][2];   // (the --profile-step table's rows)
    long kind_launches[KERNEL_KINDS][2]; // the model kernels' launches by kind and direction
    long kernels;                     // kernel launches (a memset is none: CUPTI does not count it)
    long attention_calls[2];          // attention forwards and backwards (their launches: sim_attention_launches)
    // cuda: whether the matmuls' GELU runs in cuBLASLt's epilogue (forward, backward) rather
    // than as a kernel of its own (--gelu-fusion, and selective recompute's forward kernel:
    // train/device.cuh); set by the plan, kept by sim_clock_reset.
    int gelu_epilogue[2];
} SimClock;

void sim_clock_reset(SimClock* c);
// The group of a model kernel of this kind (kernels.h's KernelKind).
SimGroup sim_group_of_kind(KernelKind kind);
// One kernel on the compute stream: advances the clock, returns its time.
double sim_kernel(SimClock* c, SimWork work, double flops, double bytes);
// An operation of `launches` kernel launches, its FLOPs and bytes all of theirs: each launch
// pays the overhead. launches 0: a memset (cudaMemsetAsync), which occupies the stream for
// one launch's overhead but is no kernel launch (CUPTI's callback does not count it).
double sim_kernels(SimClock* c, int launches, SimWork work, double flops, double bytes);
// The kernel launches of one attention forward (backward 0) or backward (1) of implementation
// a (auto resolved at head_size) on the cuda device.
int sim_attention_launches(SimAttention a, int head_size, int backward);
// The attention efficiency the costs give a head size: their implementation's (auto
// resolved), else attention_eff.
double sim_attention_eff(const SimCosts* s, int head_size);

// The table over clock (which outlives it). act_bytes: 4 models the cpu device's fp32
// activations (and its GELU scratch), 2 the cuda device's bf16.
void kernels_sim_init(Kernels* k, SimClock* clock, int padded_vocab, size_t act_bytes);

#ifdef __cplusplus
}
#endif
#endif
