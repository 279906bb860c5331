// train/: what the training program is made of besides its story (train_gpt.cu): the device
// constructor (this file, device.h), the command line and its checks (options.h), what a run
// reports (metrics.h: the step line, the setup lines, the memory budget), the --plan driver
// (plan.h), the step profiler (profile.h), the LR schedule, the sampler, the checkpoint
// writer (run_ckpt.h), the run-directory lock, stop signals and the tests' failure hooks.
//
// The one constructor of a device: the kernel table and its FSDP backend together, for the
// cpu (fp32 reference kernels, MPI/TCP collectives on host memory) or, in a CUDA build, a
// GPU (BF16 kernels, NCCL or host-staged collectives). The only place the training program
// asks whether this build has CUDA. Included by train_gpt.cu (compiled by nvcc when it
// exists, by the host C++ compiler otherwise).
#ifndef FSDP_TRAIN_DEVICE_CUH
#define FSDP_TRAIN_DEVICE_CUH

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/backend_cpu.h"
#include "fsdp/backend_sim.h"
#include "kernels/kernels_sim.h"
#include "train/device.h"
#include "train/plan.h"
#include "train/test_hooks.h"
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include "fsdp/backend_cuda.cuh"
#include "kernels/kernels_cuda.cuh"
#endif

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

static void cpu_close(Device* d) { fsdp_backend_cpu_free(&d->backend); }

// Tensor parallelism on the cpu: the TP group's collectives on host memory (fp32).
static void cpu_tp_all_gather(void* ctx, void* full, const void* local, size_t n) {
    Comm* c = ((const ProcessGroup*)ctx)->tp_comm;
    comm_wait(c, comm_all_gather_start(c, local, full, n * sizeof(float)));
}
static int64_t cpu_tp_reduce_scatter_start(void* ctx, void* local, const void* full, size_t n) {
    return comm_reduce_scatter_f32_start(((const ProcessGroup*)ctx)->tp_comm, (const float*)full, (float*)local, n);
}
static void cpu_tp_wait(void* ctx, int64_t ticket) { comm_wait(((const ProcessGroup*)ctx)->tp_comm, ticket); }
static void cpu_tp_reduce_scatter(void* ctx, void* local, const void* full, size_t n) {
    cpu_tp_wait(ctx, cpu_tp_reduce_scatter_start(ctx, local, full, n));
}
static void cpu_tp_all_reduce_f32(void* ctx, float* x, size_t n, int max) {
    comm_all_reduce_f32(((const ProcessGroup*)ctx)->tp_comm, x, n, max ? COMM_MAX : COMM_SUM);
}

#ifdef __CUDACC__
typedef struct {
    cudaStream_t stream;       // the model's compute stream (the backend orders its comm against it)
    size_t baseline_used;      // device memory in use before this process allocated any
} CudaDeviceState;

// The kernel table's host waits go through the backend's deadline.
static void cuda_host_wait(void* backend, cudaStream_t s, const char* what) {
    fsdp_backend_cuda_host_wait((FsdpBackend*)backend, s, what);
}

static double cuda_memory_in_use_mib(const Device* d) {
    const CudaDeviceState* st = (const CudaDeviceState*)d->impl;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0.0;
    size_t used = total_b - free_b;
    return used > st->baseline_used ? (double)(used - st->baseline_used) / (1024.0 * 1024.0) : 0.0;
}

static void cuda_profile_start(Device* d) {
    fsdp_backend_cuda_profile_start(&d->backend);
    const char* why_not = "";
    if (!kernels_cuda_count_launches(&d->kernels, 1, &why_not)) fprintf(stderr, "warning: --profile-step: kernel launches not counted: %s\n", why_not);
}

static void cuda_profile_finish(Device* d, size_t shard_elements, char* lines, size_t n) {
    double ms[CB_PROF_KINDS] = {0}, ledger[CB_LEDGER_KINDS] = {0};
    int count[CB_PROF_KINDS] = {0};
    char waits[512];
    fsdp_backend_cuda_ledger(&d->backend, ledger);
    const int host_waits = fsdp_backend_cuda_host_waits(&d->backend, waits, sizeof(waits));
    fsdp_backend_cuda_profile_finish(&d->backend, ms, count);
    kernels_cuda_count_launches(&d->kernels, 0, NULL);
    const double per = shard_elements ? 1.0 / (double)shard_elements : 0.0;
    size_t at = (size_t)snprintf(lines, n, "host waits in the step (backend): %d%s%s%s\n  optimizer path on the compute stream, "
                                 "counted from the launches: %.1f B per shard element (gradient-slot zeroing %.1f, folds + norm "
                                 "%.1f, AdamW + bf16 shard %.1f; the weight-gradient GEMMs write the slots without reading them "
                                 "but for unsharded accumulation's later micro-steps)",
                                 host_waits, host_waits ? " (" : "", waits, host_waits ? ")" : "",
                                 (ledger[CB_LEDGER_ZERO] + ledger[CB_LEDGER_FOLD] + ledger[CB_LEDGER_ADAMW]) * per,
                                 ledger[CB_LEDGER_ZERO] * per, ledger[CB_LEDGER_FOLD] * per, ledger[CB_LEDGER_ADAMW] * per);
    if (at < n && count[CB_PROF_GATHER] + count[CB_PROF_REDUCE] + count[CB_PROF_REPLICA] > 0)
        snprintf(lines + at, n - at, "\n  comm stream (NCCL, beside the compute above): all-gather %.3f ms (%d), reduce-scatter "
                 "%.3f ms (%d), replica all-reduce %.3f ms (%d)", ms[CB_PROF_GATHER], count[CB_PROF_GATHER],
                 ms[CB_PROF_REDUCE], count[CB_PROF_REDUCE], ms[CB_PROF_REPLICA], count[CB_PROF_REPLICA]);
}

// The roofline table's copy bandwidth (cuda_common.cuh's measurement), at the profiled step's
// end (the step's own timing is done), its wait under the backend's deadline. The buffers
// are freed before the next step, so the run's memory in use, sampled at a step's end,
// never holds them.
static void cuda_wait_stream(void* d, cudaStream_t s) { ((Device*)d)->kernels.synchronize(&((Device*)d)->kernels); }
static double cuda_copy_gbs(Device* d, char* how, size_t n) {
    const CudaDeviceState* st = (const CudaDeviceState*)d->impl;
    return copy_bandwidth_gbs(st->stream, cuda_wait_stream, d, how, n);
}

static void cuda_step_done(Device* d) { kernels_cuda_matmul_report(&d->kernels); }

static void cuda_close(Device* d) {
    CudaDeviceState* st = (CudaDeviceState*)d->impl;
    kernels_cuda_free(&d->kernels);
    fsdp_backend_cuda_free(&d->backend);
    CUDA_CHECK(cudaStreamDestroy(st->stream));
    free(st);
}

// The GPU is the local rank's modulo the GPUs visible (several ranks share one with --comm mpi).
static void cuda_open(Device* d, const DeviceOptions* o, const ProcessGroup* pg, const FsdpConfig* fcfg,
                      const ModelLayout* m, int B, int T) {
    const ModelConfig* c = &m->config;
    CudaDeviceState* st = (CudaDeviceState*)calloc(1, sizeof(CudaDeviceState));
    if (!st) fatal(pg, "out of host memory");
    int gpus = 0;
    CUDA_CHECK(cudaGetDeviceCount(&gpus));
    int gpu = pg->local_rank % gpus;
    CUDA_CHECK(cudaSetDevice(gpu));
    CUDA_CHECK(cudaFree(0));  // create the context now: the baseline below includes it
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    st->baseline_used = total_b - free_b;

    CudaBackendConfig bc;
    memset(&bc, 0, sizeof(bc));
    char comm_why[128];
    if (!strcmp(o->comm, "auto")) {
        bc.use_nccl = pg->local_world <= gpus;
        snprintf(comm_why, sizeof(comm_why), "%s", bc.use_nccl ? "one GPU per local rank" : "ranks share a GPU, which NCCL refuses");
    } else {
        bc.use_nccl = !strcmp(o->comm, "nccl");
        snprintf(comm_why, sizeof(comm_why), "requested");
        if (bc.use_nccl && pg->local_world > gpus)
            fatal_agreed(pg, "--comm nccl: %d local ranks share %d GPU(s), which NCCL refuses; use --comm mpi", pg->local_world, gpus);
    }
    // Before sm_80 (a T4, sm_75): no bf16 tensor cores (fp16 only), and none of the flash
    // kernels' instructions (cp.async, mma.sync m16n8k16).
    const int sm80 = prop.major >= 8;
    if (!sm80 && !o->param_fp16)
        fatal_agreed(pg, "%s (sm_%d%d) has no bf16 tensor cores: train with --param-dtype fp16", prop.name, prop.major,
                     prop.minor);
    AttentionImpl attention;
    int hs = c->channels / c->num_heads;
    // cudnn (auto's first choice, on published figures: README "Attention"): the library must
    // load and build this run's graphs; each rank checks its own GPU. An explicit cudnn that
    // cannot ends the run with cuDNN's reason; auto falls back to the choice before cuDNN.
    AttentionContext attn;
    memset(&attn, 0, sizeof(attn));
    char cudnn_why[512] = "";
    int have_cudnn = 0;
    if (!strcmp(o->attention, "auto") || !strcmp(o->attention, "cudnn")) {
        const int kvh = c->num_kv_heads > 0 ? c->num_kv_heads : c->num_heads;
        have_cudnn = attention_context_try_cudnn(&attn, cudnn_why, sizeof(cudnn_why)) == 0 &&
                     attention_context_prepare(&attn, B, T, c->channels, c->num_heads, kvh, o->param_fp16, cudnn_why,
                                               sizeof(cudnn_why)) == 0;
        if (!have_cudnn) attention_context_destroy(&attn);
        if (!strcmp(o->attention, "cudnn")) fatal_agreed_any(pg, !have_cudnn, "--attention cudnn: %s", cudnn_why);
    }
    if (have_cudnn) attention = ATTENTION_CUDNN;
    else if (!strcmp(o->attention, "auto")) attention = sm80 && attention_flash_supports(hs) ? ATTENTION_FLASH : ATTENTION_CUBLAS;
    else if (strcmp(o->attention, "cublas") && !sm80)
        fatal_agreed(pg, "--attention %s needs sm_80 or newer (cp.async, mma.sync m16n8k16), %s is sm_%d%d; use --attention cublas",
                     o->attention, prop.name, prop.major, prop.minor);
    else if (strcmp(o->attention, "cublas") && !attention_flash_supports(hs))
        fatal_agreed(pg, "--attention %s supports head sizes 64 and 128, this model's is %d; use --attention cublas", o->attention, hs);
    else attention = (AttentionImpl)attention_impl_from_name(o->attention);

    if (attention != ATTENTION_CUDNN) attention_context_init(&attn, attention);
    if (pg->rank == 0) {
        if (attention == ATTENTION_CUDNN) printf("attention: cudnn (%s)\n", cudnn_attention_describe(attn.cudnn));
        else if (!strcmp(o->attention, "auto"))
            printf("attention: %s (auto; cudnn unavailable: %s)\n", attention_impl_name(attention), cudnn_why);
        else printf("attention: %s (requested)\n", attention_impl_name(attention));
    }

    CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    bc.reduce_fp32 = o->reduce_fp32;
    bc.param_fp16 = o->param_fp16;
    for (int u = 0; u < m->n_units; u++)
        if (m->units[u].padded > bc.max_unit_padded) bc.max_unit_padded = m->units[u].padded;
    bc.seed = o->seed;
    // Tensor parallel: the schedule's collectives carry at most every row of the micro-batch
    // (N x C activations; the loss's 2N statistics), the engine's a unit's replicated tensors.
    bc.tp_max_elems = (size_t)B * T * (c->channels > 2 ? (size_t)c->channels : 2);
    if (bc.max_unit_padded > bc.tp_max_elems) bc.tp_max_elems = bc.max_unit_padded;
    bc.compute = st->stream;
    bc.offload_units = fcfg->offload ? m->n_units : 0;
    bc.offload_threads = omp_get_max_threads();
    // The staged path pins host buffers per op slot: the root's size only where it goes.
    int max_ops = fsdp_max_ops(fcfg, m->n_units);
    size_t* op_padded = (size_t*)malloc((size_t)max_ops * sizeof(size_t));
    if (!op_padded) fatal(pg, "out of host memory");
    fsdp_op_padded(fcfg, m->units, m->n_units, op_padded);
    bc.op_padded = op_padded;
    fsdp_backend_cuda_init(&d->backend, pg, max_ops, &bc);
    free(op_padded);
    CudaKernelsShape shape = {B, T, c->channels, c->num_heads, c->vocab_size, c->padded_vocab_size};
    // Selective recompute rebuilds the GELU output with the GELU kernel: the forward must have
    // made it that way too (its epilogue form differs in the last bits).
    const int recomputable_gelu = o->recompute == RECOMPUTE_SELECTIVE;
    kernels_cuda_init(&d->kernels, st->stream, cuda_host_wait, &d->backend, &attn, o->gelu_fusion, recomputable_gelu,
                      o->param_fp16, &shape);
    kernels_cuda_set_matmul_autotune(&d->kernels, o->matmul_autotune, pg->rank == 0);
    if (pg->tp_size > 1)
        d->tp = (TpComm){d->backend.ctx, cuda_tp_all_gather, cuda_tp_reduce_scatter,
                         cuda_tp_reduce_scatter_start, cuda_tp_wait, cuda_tp_all_reduce_f32};

    d->name = "cuda";
    d->impl = st;
    snprintf(d->gpu_name, sizeof(d->gpu_name), "%s", prop.name);
    snprintf(d->description, sizeof(d->description),
             "GPU %d of %d: %s, %.1f GiB, sm_%d%d | %s | collectives %s (%s), reduce %s | attention %s, gelu fusion %d%s, "
             "matmul autotune %s%s", gpu, gpus,
             prop.name, prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor,
             o->param_fp16 ? "fp16 with loss scaling" : "bf16",
             bc.use_nccl ? "nccl" : "mpi (staged through host memory)", comm_why,
             o->reduce_fp32 ? "fp32" : o->param_fp16 ? "fp16" : "bf16",
             attention_impl_name(attention), o->gelu_fusion,
             recomputable_gelu && o->gelu_fusion > 0 ? " (backward only: selective recompute)" : "",
             kernels_cuda_matmul_autotune_name(&d->kernels), fcfg->offload ? " | optimizer on the host" : "");
    size_t workspace = kernels_cuda_workspace_bytes(&d->kernels);
    d->device_lines[0] = (MemoryLine){"collective buffers (backend)", fsdp_backend_cuda_device_bytes(&d->backend)};
    d->device_lines[1] = (MemoryLine){"cuBLASLt workspace", workspace};
    d->device_lines[2] = (MemoryLine){"kernel + attention scratch, tokens", kernels_cuda_device_bytes(&d->kernels) - workspace};
    // What the CUDA libraries took for themselves so far (NCCL's communicators, cuBLASLt's
    // handle, the code loaded), and the driver's rounding of our buffers: in use above the
    // context less what the backend and the kernels allocated. Measured, not modelled: 582 MiB
    // on an H200 at W = 1 (0 under the emulator, whose libraries allocate nothing).
    // NCCL may connect its peers (and take their buffers) at the first collective instead.
    // Ranks sharing a GPU would count each other's buffers: not measured there.
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t ours = fsdp_backend_cuda_device_bytes(&d->backend) + kernels_cuda_device_bytes(&d->kernels);
    const size_t above = total_b - free_b > st->baseline_used ? total_b - free_b - st->baseline_used : 0;
    d->device_lines[3] = pg->local_world > gpus ? (MemoryLine){"CUDA libraries (GPU shared)", 0}
                                                : (MemoryLine){"CUDA libraries (measured)", above > ours ? above - ours : 0};
    d->n_device_lines = 4;
    d->host_lines[0] = (MemoryLine){"host: pinned staging (backend)", fsdp_backend_cuda_host_bytes(&d->backend)};
    d->n_host_lines = 1;
    d->memory_in_use_mib = cuda_memory_in_use_mib;
    d->profile_start = cuda_profile_start;
    d->step_done = cuda_step_done;
    d->profile_finish = cuda_profile_finish;
    d->copy_gbs = cuda_copy_gbs;
    d->close = cuda_close;
}
#endif  // __CUDACC__

static void sim_close(Device* d) { fsdp_backend_sim_free(&d->backend); }

// The sim device (--plan): the cpu's engine and dtypes for the cpu profile, else the cuda
// device's (bf16, fused optimizer path, host mirror), with costs instead of work. Its own
// buffers are the cuda device's, estimated: the cuBLASLt workspace is exact
// (MATMUL_WORKSPACE_BYTES), the kernel scratch and token buffers approximate (a few MiB).
static void sim_open(Device* d, const DeviceOptions* o, const ProcessGroup* pg, const FsdpConfig* fcfg,
                     const ModelLayout* m, int B, int T) {
    const SimProfile* p = o->sim;
    const int gpn = o->gpus_per_node;
    SimBackendConfig bc = {p->fp32, o->reduce_fp32, pg->shard_size, pg->replicate_size,
                           plan_link(p, gpn, 1, pg->shard_size), plan_link(p, gpn, pg->shard_size, pg->replicate_size),
                           p->host_link_gbs * 1e9, p->host_mem_gbs * 1e9};
    fsdp_backend_sim_init(&d->backend, o->sim_clock, &bc, fsdp_max_ops(fcfg, m->n_units));
    kernels_sim_init(&d->kernels, o->sim_clock, m->config.padded_vocab_size, p->fp32 ? sizeof(float) : 2);
    d->name = "sim";
    char measured[64] = "";
    if (p->threads) snprintf(measured, sizeof(measured), ", measured with %d thread(s) per rank", p->threads);
    snprintf(d->description, sizeof(d->description), "%s (simulated%s): %.3g TFLOP/s, memory %.0f GB/s and %.0f GiB, links %.0f GB/s in a node and %.0f GB/s across, %d rank(s) per node",
             p->name, measured, p->tflops, p->hbm_gbs, p->mem_gib, p->nvlink_gbs, p->ib_gbs, gpn);
    if (!p->fp32) {
        size_t N = (size_t)B * T, padded = 0;
        for (int u = 0; u < m->n_units; u++) if (m->units[u].padded > padded) padded = m->units[u].padded;
        d->device_lines[0] = (MemoryLine){"collective buffers (estimated)", (o->reduce_fp32 ? padded * sizeof(float) : 0) + 8448};
        d->device_lines[1] = (MemoryLine){"cuBLASLt workspace", (size_t)32 << 20};
        // cuda_kernels_scratch_bytes' largest terms (one buffer serves every kernel): the
        // flash attention backward's D and dQ slices (attention_backward_scratch_bytes: R(T)
        // rows per (b, head), key blocks of 128), the LayerNorm and bias backward partial sums
        // (up to 512 and 256 row blocks), the embedding backward's sort (its CUB temp guessed
        // at 2N ints); plus the two token buffers.
        const size_t C = (size_t)m->config.channels, NH = (size_t)m->config.num_heads, ints = (N * sizeof(int) + 255) / 256 * 256;
        const size_t j = ((size_t)T + 127) / 128, R = j * (size_t)T - 128 * (j * (j > 0 ? j - 1 : 0) / 2);
        const size_t ln_blocks = N / 16 < 1 ? 1 : N / 16 > 512 ? 512 : N / 16, b_blocks = N / 32 < 1 ? 1 : N / 32 > 256 ? 256 : N / 32;
        size_t scratch = ((size_t)B * NH * T * sizeof(float) + 255) / 256 * 256 + ((size_t)B * C * R * sizeof(float) + 255) / 256 * 256;
        if (2 * ln_blocks * C * sizeof(float) > scratch) scratch = 2 * ln_blocks * C * sizeof(float);
        if (b_blocks * 4 * C * sizeof(float) > scratch) scratch = b_blocks * 4 * C * sizeof(float);
        if (5 * ints > scratch) scratch = 5 * ints;
        d->device_lines[2] = (MemoryLine){"kernel scratch, tokens (estimated)", scratch + 2 * ints};
        // What a real run measures as the CUDA libraries' share (cuda_open): 582 MiB on one
        // H200 at W = 1 (device_check, 2026-12-04), for every GPU profile until others are
        // measured; NCCL's peer buffers at W > 1 are not in it.
        d->device_lines[3] = (MemoryLine){"CUDA libraries (as on an H200)", (size_t)582 << 20};
        d->n_device_lines = 4;
    }
    d->close = sim_close;
}

// The device `o` asks for (NULL: the cpu), sized for micro-batches of B x T of model m and
// the engine's op slots under fcfg. Errors end the job (fatal) with one line.
static void device_open(Device* d, const DeviceOptions* o, const ProcessGroup* pg, const FsdpConfig* fcfg,
                        const ModelLayout* m, int B, int T) {
    memset(d, 0, sizeof(*d));
    if (o && o->sim) {
        sim_open(d, o, pg, fcfg, m, B, T);
        return;
    }
    if (o && o->cuda) {
#ifdef __CUDACC__
        cuda_open(d, o, pg, fcfg, m, B, T);
#ifdef FSDP_TRAFFIC_AUDIT  // dev/test/test_traffic_emu.sh's emulated build (a hook its header defines)
        FSDP_TRAFFIC_AUDIT(d, m, o, pg);
#endif
        test_hooks_tp_trace(d, pg);
        return;
#else
        fatal(pg, "--device cuda: this build has no CUDA support (built without nvcc)");
#endif
    }
    d->name = "cpu";
    fsdp_backend_cpu_init(&d->backend, pg, fsdp_max_ops(fcfg, m->n_units));
    kernels_cpu_init(&d->kernels, m->config.padded_vocab_size);
    d->tp = (TpComm){(void*)pg, cpu_tp_all_gather, cpu_tp_reduce_scatter, cpu_tp_reduce_scatter_start, cpu_tp_wait,
                     cpu_tp_all_reduce_f32};
    d->close = cpu_close;
    test_hooks_tp_trace(d, pg);
}

#endif
