#include "train/plan.h"

#include <cblas.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/profile.h"
#include "util/regular_file.h"

// ---------------------------------------------------------------------------------------
// Device profiles. Compute, memory and link figures are the vendors' datasheets (dense, no
// sparsity; NVLink's "GB/s" is both directions together, so per direction it is half; the
// network is one NIC per GPU as in the DGX/HGX systems). Memory is the datasheet's "GB",
// which is what nvidia-smi shows in GiB give or take 1% (H100 80GB: 81559 MiB).
// Latencies and the launch overhead are assumptions of the model, not datasheet figures: NCCL
// ring steps of a few microseconds, 3 us per kernel. The efficiencies of the GPU profiles are
// what this project's kernels reached on one H200 (2026-12-04, scripts/device_check.sh;
// README "Results"), the same for every GPU profile (the others have not been measured:
// Hopper's H100 runs the same kernels on the same SMs; an A100's mma.sync would reach a larger
// share of its lower peak, a B200's a smaller one):
// - matmul_eff 0.69: cuBLASLt's GEMMs took 1.01x (d48) and 1.03x (d12) the time planned at
//   0.70 (--calibrate-from on the profiled steps), so 0.70 / 1.02.
// - attention_eff, per implementation and head size (columns 64, 128), a fraction of the peak
//   on the FLOPs the planner counts (the flash tiles' query x key pairs: 1.0625x the causal
//   count at T = 1024 and head size 64):
//   flash 0.138: attention took 21.4% of d48's profiled 331.9 ms step and 26.4% of d12's
//     62.5 ms, 127 and 131 TFLOP/s on the causal count, 0.136 and 0.141 of 989 on ours;
//   cublas 0.032: build/test_attention_cuda at B = 4, T = 1024, 12 heads of 64, 0.245 ms
//     forward + 0.507 ms backward (30 TFLOP/s on the causal count);
//   cudnn 0.354: a PROJECTION until device_check measures it: cuDNN 9's fused attention on
//     an H100 as FlashAttention-3's paper plots it (arXiv 2407.08608, figs. 5-6: causal, head
//     size 64, T = 1k: 288 TFLOP/s forward, ~350 backward; 330 over a forward and backward);
//   flash-pipelined 0.138: not measured: flash's figure, until device_check times it (its
//     forward's tiles differ, its backward does flash's work pipelined);
//   head size 128: not measured for any implementation; the 64 column's figures.
// - mem_eff 0.80: streaming kernels' share of HBM: the optimizer's kernels (grad norm, AdamW)
//   took 0.96x and 1.03x their time planned at it; the roofline tables' copy bandwidth.
// - vector_mem_eff 0.465: the model's vector kernels (LayerNorm and residual, cross-entropy,
//   embedding, GELU) took 1.77x (d48) and 1.73x (d12) their time planned at 0.80 (the model's
//   bytes, which test_traffic_emu holds to the kernels'), so 0.80 / 1.72: a bandwidth this
//   project's kernels reach today, not the hardware's.
// - vector_eff 0.50 (FLOPs of the vector kernels: never their bound on a GPU) is assumed.
// A profile file overrides any of them (README: "Planning a run").
// host_link_gbs and host_mem_gbs (--offload optimizer) are assumptions: PCIe Gen4 / Gen5 x16
// is 32 / 64 GB/s per direction on paper, shared with the NICs on a node; a 2-socket host's
// DRAM (~300-600 GB/s) shared by 8 ranks' optimizer threads.
#define GPU_DEFAULTS .nvlink_latency_us = 3.0, .ib_latency_us = 8.0, .launch_us = 3.0, \
                     .host_link_gbs = 25.0, .host_mem_gbs = 25.0, \
                     .matmul_eff = 0.69, .attention_eff = {{0.138, 0.138}, {0.032, 0.032}, {0.354, 0.354}, \
                                                           {0.138, 0.138}}, \
                     .vector_eff = 0.50, .mem_eff = 0.80, .vector_mem_eff = 0.465
static const SimProfile builtin[] = {
    // NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS (624 with sparsity),
    // A100 40GB SXM 1,555 GB/s HBM2, 80GB SXM 2,039 GB/s HBM2e, NVLink 600 GB/s; DGX A100
    // datasheet: 8x 200 Gb/s HDR InfiniBand (ConnectX-6) for 8 GPUs = 25 GB/s per GPU.
    {"a100-40", 0, 312.0, 1555.0, 40.0, 300.0, 25.0, GPU_DEFAULTS},
    {"a100-80", 0, 312.0, 2039.0, 80.0, 300.0, 25.0, GPU_DEFAULTS},
    // NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BF16 1,979 TFLOPS with sparsity (989
    // dense), 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s; DGX H100: 8x 400 Gb/s ConnectX-7
    // (NDR) = 50 GB/s per GPU.
    {"h100", 0, 989.0, 3350.0, 80.0, 450.0, 50.0, GPU_DEFAULTS},
    // NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 1,979 TFLOPS with sparsity,
    // 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s; HGX H200 with 400 Gb/s ConnectX-7 per GPU.
    {"h200", 0, 989.0, 4800.0, 141.0, 450.0, 50.0, GPU_DEFAULTS},
    // NVIDIA DGX B200 / HGX B200 datasheets: BF16 4.5 PFLOPS with sparsity per GPU (2.25
    // dense), 180 GB HBM3e at 8 TB/s, fifth-generation NVLink 1.8 TB/s; 8x 400 Gb/s
    // ConnectX-7 for 8 GPUs.
    {"b200", 0, 2250.0, 8000.0, 180.0, 900.0, 50.0, GPU_DEFAULTS},
    // The cpu device (fp32, OpenBLAS): tflops and hbm_gbs are measured on this machine when
    // the profile is chosen (cpu_measure below); the rest are assumptions: the matmul rate
    // is sgemm's, measured (efficiency 1); the reference attention and vector kernels are
    // plain loops, far from sgemm's rate; collectives between ranks of one host go through
    // MPI's shared memory.
    {"cpu", 1, 0.0, 0.0, 16.0, 5.0, 1.25, .nvlink_latency_us = 5.0, .ib_latency_us = 20.0, .launch_us = 2.0,
     .matmul_eff = 1.0, .attention_eff = {{0.1, 0.1}, {0.1, 0.1}, {0.1, 0.1}, {0.1, 0.1}}, .vector_eff = 0.1, .mem_eff = 1.0,
     .vector_mem_eff = 1.0},
};
#define N_BUILTIN (sizeof(builtin) / sizeof(builtin[0]))

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// --sim-device cpu: this machine's fp32 rates with the threads OpenMP/OpenBLAS have now, in
// about 2 s: sgemm of 1024^3 (the size of a small model's matmuls: its rate is what the
// cpu device's matmuls reach) for 1 s, then a parallel streaming copy of 64 MiB arrays
// (read + write counted) for 1 s. Fails only when out of memory.
static int cpu_measure(SimProfile* p, char* err, size_t errlen) {
    const int n = 1024;
    const size_t copy_n = (size_t)16 << 20;  // floats: 64 MiB per array, beyond the caches
    float* a = (float*)malloc((size_t)n * n * sizeof(float));
    float* b = (float*)malloc((size_t)n * n * sizeof(float));
    float* c = (float*)malloc((size_t)n * n * sizeof(float));
    float* src = (float*)malloc(copy_n * sizeof(float));
    float* dst = (float*)malloc(copy_n * sizeof(float));
    if (!a || !b || !c || !src || !dst) {
        free(a); free(b); free(c); free(src); free(dst);
        snprintf(err, errlen, "--sim-device cpu: out of host memory for the microbenchmark");
        return 1;
    }
    for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = (float)(i % 7) * 0.01f; b[i] = (float)(i % 5) * 0.02f; c[i] = 0.0f; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);  // warm-up
    double t0 = seconds_now(), t = 0.0;
    long iters = 0;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        iters++;
        t = seconds_now() - t0;
    } while (t < 1.0);
    p->tflops = 2.0 * n * (double)n * n * iters / t / 1e12;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < copy_n; i++) { src[i] = (float)i; dst[i] = 0.0f; }
    t0 = seconds_now();
    iters = 0;
    do {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < copy_n; i++) dst[i] = src[i] + 1.0f;
        iters++;
        t = seconds_now() - t0;
    } while (t < 1.0);
    p->hbm_gbs = 2.0 * copy_n * sizeof(float) * (double)iters / t / 1e9;
    volatile float sink = c[1] + dst[copy_n - 1];  // keep the work
    (void)sink;
    free(a); free(b); free(c); free(src); free(dst);
    return 0;
}

const char* plan_profile_names(void) { return "a100-40, a100-80, h100, h200, b200, cpu"; }

// A profile file or a calibration log is read only when it is a regular file (a FIFO or
// /dev/zero given by mistake would block or never end; util/regular_file.h), of at most
// these sizes: a profile is a few lines, a log a run's output.
#define PLAN_PROFILE_MAX_BYTES ((size_t)1 << 20)
#define PLAN_LOG_MAX_BYTES ((size_t)1 << 28)

// A number in [min, max] (the whole string, finite). 0, or 1.
static int in_range(const char* s, double min, double max, double* out) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min || v > max) return 1;
    *out = v;
    return 0;
}

// A profile file: lines KEY=VALUE, '#' comments, blank lines. like=NAME starts from a
// built-in profile; without it tflops, hbm_gbs and mem_gib are required and the rest take
// the GPU defaults above. Every number must lie in its key's range: wide enough for any
// device from a laptop CPU to GPUs well past today's, narrow enough that a typo (1e300
// TFLOP/s, a latency of 1e-300 us) is refused instead of planning steps of 300 digits.
static int read_profile_text(const char* path, char* text, size_t len, SimProfile* p, char* err, size_t errlen) {
    static const SimProfile gpu = {"", 0, 0, 0, 0, 300.0, 25.0, GPU_DEFAULTS};
    *p = gpu;
    const char* base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(p->name, sizeof(p->name), "%s", base);
    if (strlen(text) != len) {
        snprintf(err, errlen, "--sim-device %s: not a text file (a NUL byte at offset %zu)", path, strlen(text));
        return 1;
    }
    double legacy_attention_eff = 0.0;
    const struct { const char* key; double* v; double min, max; const char* unit; } keys[] = {
        {"tflops", &p->tflops, 1e-4, 1e5, "TFLOP/s"}, {"hbm_gbs", &p->hbm_gbs, 1e-2, 1e6, "GB/s"},
        {"mem_gib", &p->mem_gib, 1e-2, 1e6, "GiB"}, {"nvlink_gbs", &p->nvlink_gbs, 1e-3, 1e6, "GB/s"},
        {"ib_gbs", &p->ib_gbs, 1e-3, 1e6, "GB/s"}, {"host_link_gbs", &p->host_link_gbs, 1e-3, 1e6, "GB/s"},
        {"host_mem_gbs", &p->host_mem_gbs, 1e-3, 1e6, "GB/s"},
        {"nvlink_latency_us", &p->nvlink_latency_us, 1e-3, 1e7, "us"}, {"ib_latency_us", &p->ib_latency_us, 1e-3, 1e7, "us"},
        {"launch_us", &p->launch_us, 1e-3, 1e6, "us"}, {"matmul_eff", &p->matmul_eff, 1e-4, 1.0, "a fraction of the peak"},
        {"attention_eff_flash_64", &p->attention_eff[SIM_ATTENTION_FLASH][0], 1e-4, 1.0, "a fraction of the peak"},
        {"attention_eff_flash_128", &p->attention_eff[SIM_ATTENTION_FLASH][1], 1e-4, 1.0, "a fraction of the peak"},
        {"attention_eff_cublas_64", &p->attention_eff[SIM_ATTENTION_CUBLAS][0], 1e-4, 1.0, "a fraction of the peak"},
        {"attention_eff_cublas_128", &p->attention_eff[SIM_ATTENTION_CUBLAS][1], 1e-4, 1.0, "a fraction of the peak"},
        {"attention_eff_cudnn_64", &p->attention_eff[SIM_ATTENTION_CUDNN][0], 1e-4, 1.0, "a fraction of the peak"},
        {"attention_eff_cudnn_128", &p->attention_eff[SIM_ATTENTION_CUDNN][1], 1e-4, 1.0, "a fraction of the peak"},
        {"attention_eff_flash-pipelined_64", &p->attention_eff[SIM_ATTENTION_FLASH_PIPELINED][0], 1e-4, 1.0,
         "a fraction of the peak"},
        {"attention_eff_flash-pipelined_128", &p->attention_eff[SIM_ATTENTION_FLASH_PIPELINED][1], 1e-4, 1.0,
         "a fraction of the peak"},
        // An older profile's one attention efficiency: every implementation and head size
        // not given its own (applied after the file is read, whatever the order).
        {"attention_eff", &legacy_attention_eff, 1e-4, 1.0, "a fraction of the peak"},
        {"vector_eff", &p->vector_eff, 1e-4, 1.0, "a fraction of the peak"},
        {"mem_eff", &p->mem_eff, 1e-4, 1.0, "a fraction of the peak"},
        {"vector_mem_eff", &p->vector_mem_eff, 1e-4, 1.0, "a fraction of the peak"},
        {"matmul_time_scale", &p->time_scale[SIM_GROUP_MATMUL], 1e-4, 1e4, "a factor"},
        {"attention_time_scale", &p->time_scale[SIM_GROUP_ATTENTION], 1e-4, 1e4, "a factor"},
        {"vector_time_scale", &p->time_scale[SIM_GROUP_VECTOR], 1e-4, 1e4, "a factor"},
        {"optimizer_time_scale", &p->time_scale[SIM_GROUP_OPTIMIZER], 1e-4, 1e4, "a factor"}};
    const int n_keys = (int)(sizeof(keys) / sizeof(keys[0]));
    int seen_required = 0, liked = 0, legacy_line = 0, attention_given[SIM_ATTENTION_IMPLS * SIM_HEAD_SIZES] = {0};
    char* next = text;
    for (int lineno = 1; next && *next; lineno++) {
        char* s = next;
        next = strchr(s, '\n');
        if (next) *next++ = '\0';
        char* hash = strchr(s, '#');
        if (hash) *hash = '\0';
        while (isspace((unsigned char)*s)) s++;
        size_t n = strlen(s);
        while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
        if (!*s) continue;
        char* eq = strchr(s, '=');
        if (!eq) { snprintf(err, errlen, "--sim-device %s:%d: expected KEY=VALUE, got '%.80s'", path, lineno, s); return 1; }
        *eq = '\0';
        char *key = s, *val = eq + 1;
        size_t kl = strlen(key);
        while (kl > 0 && isspace((unsigned char)key[kl - 1])) key[--kl] = '\0';
        while (isspace((unsigned char)*val)) val++;
        if (!strcmp(key, "name")) { snprintf(p->name, sizeof(p->name), "%s", val); continue; }
        if (!strcmp(key, "like")) {
            int found = 0;
            char keep[64];
            snprintf(keep, sizeof(keep), "%s", p->name);
            for (size_t i = 0; i < N_BUILTIN; i++)
                if (!strcmp(builtin[i].name, val)) { *p = builtin[i]; found = 1; }
            if (found && p->tflops <= 0 && cpu_measure(p, err, errlen)) return 1;
            if (!found) { snprintf(err, errlen, "--sim-device %s:%d: like=%s: not a built-in device (%s)", path, lineno, val, plan_profile_names()); return 1; }
            snprintf(p->name, sizeof(p->name), "%s", keep);
            liked = 1;
            continue;
        }
        if (!strcmp(key, "dtype")) {
            if (!strcmp(val, "bf16")) p->fp32 = 0;
            else if (!strcmp(val, "fp32")) p->fp32 = 1;
            else { snprintf(err, errlen, "--sim-device %s:%d: dtype: expected bf16 or fp32, got '%s'", path, lineno, val); return 1; }
            continue;
        }
        int k = 0;
        while (k < n_keys && strcmp(keys[k].key, key)) k++;
        if (k == n_keys) {
            char known[1024] = "name, like, dtype";
            for (int i = 0; i < n_keys; i++) snprintf(known + strlen(known), sizeof(known) - strlen(known), ", %s", keys[i].key);
            snprintf(err, errlen, "--sim-device %s:%d: unknown key '%s' (expected %s)", path, lineno, key, known);
            return 1;
        }
        if (in_range(val, keys[k].min, keys[k].max, keys[k].v)) {
            snprintf(err, errlen, "--sim-device %s:%d: %s: expected a number in [%g, %g] (%s), got '%.80s'", path, lineno, key,
                     keys[k].min, keys[k].max, keys[k].unit, val);
            return 1;
        }
        if (k < 3) seen_required |= 1 << k;
        for (int a = 0; a < SIM_ATTENTION_IMPLS * SIM_HEAD_SIZES; a++)
            if (keys[k].v == &p->attention_eff[0][0] + a) attention_given[a] = 1;
        if (keys[k].v == &legacy_attention_eff) legacy_line = lineno;
    }
    if (legacy_line) {
        for (int a = 0; a < SIM_ATTENTION_IMPLS * SIM_HEAD_SIZES; a++)
            if (!attention_given[a]) (&p->attention_eff[0][0])[a] = legacy_attention_eff;
        fprintf(stderr, "note: --sim-device %s:%d: attention_eff=%g (an older profile's one attention efficiency) applies to "
                "every implementation and head size not given its own attention_eff_{flash,cublas,cudnn,flash-pipelined}_{64,128}\n", path,
                legacy_line, legacy_attention_eff);
    }
    if (!liked && seen_required != 7) {
        snprintf(err, errlen, "--sim-device %s: needs tflops, hbm_gbs and mem_gib (or like=NAME)", path);
        return 1;
    }
    return 0;
}

int plan_profile(const char* name_or_file, SimProfile* p, char* err, size_t errlen) {
    for (size_t i = 0; i < N_BUILTIN; i++) {
        if (strcmp(builtin[i].name, name_or_file)) continue;
        *p = builtin[i];
        return p->tflops > 0 ? 0 : cpu_measure(p, err, errlen);
    }
    char why[1200];
    size_t len;
    char* text = read_regular_file(name_or_file, PLAN_PROFILE_MAX_BYTES, &len, why, sizeof(why));
    if (!text) {
        snprintf(err, errlen, "--sim-device '%s': not a built-in device (%s) nor a readable profile file (%s)", name_or_file,
                 plan_profile_names(), why);
        return 1;
    }
    int rc = read_profile_text(name_or_file, text, len, p, err, errlen);
    free(text);
    return rc;
}

double plan_copy_gbs(const char* gpu_name, char* source, size_t n) {
    // Parts by a piece of the name (cudaDeviceProp's: "NVIDIA H100 80GB HBM3", "NVIDIA
    // A100-SXM4-40GB"), the first match deciding; the PCIe and NVL H100s have other HBM rates
    // than the SXM part the h100 profile describes (NULL: no profile).
    static const struct { const char* part; const char* profile; } parts[] = {
        {"H200", "h200"}, {"H100 PCIe", NULL}, {"H100 NVL", NULL}, {"H100", "h100"},
        {"A100-SXM4-40GB", "a100-40"}, {"A100-SXM4-80GB", "a100-80"}, {"B200", "b200"},
    };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (!strstr(gpu_name, parts[i].part)) continue;
        for (size_t j = 0; parts[i].profile && j < N_BUILTIN; j++)
            if (!strcmp(builtin[j].name, parts[i].profile)) {
                snprintf(source, n, "%.0f GB/s: the %s profile's HBM %.0f GB/s x mem_eff %.2f, not measured here",
                         builtin[j].hbm_gbs * builtin[j].mem_eff, parts[i].profile, builtin[j].hbm_gbs, builtin[j].mem_eff);
                return builtin[j].hbm_gbs * builtin[j].mem_eff;
            }
        break;
    }
    snprintf(source, n, "unknown for %.80s: no built-in profile of its HBM", gpu_name[0] ? gpu_name : "this device");
    return 0.0;
}

// A comma-separated list of 1 .. PLAN_MAX_WORLDS whole numbers in [1, max] (--plan-world's
// world sizes, --plan-tp's degrees: `what`, with an example). 0, or 1 with err.
static int parse_list(const char* flag, const char* what, const char* example, long max, const char* s, int* v, int* n,
                      char* err, size_t errlen) {
    *n = 0;
    const char* q = s;
    if (!*q) { snprintf(err, errlen, "%s: expected a comma-separated list of %s, e.g. %s, got ''", flag, what, example); return 1; }
    while (*q) {
        char* end;
        errno = 0;
        long x = strtol(q, &end, 10);
        if (end == q || errno || x < 1 || x > max || (*end && *end != ',')) {
            snprintf(err, errlen, "%s: expected a comma-separated list of %s in [1, %ld], e.g. %s, got '%s'", flag, what, max,
                     example, s);
            return 1;
        }
        if (*n == PLAN_MAX_WORLDS) { snprintf(err, errlen, "%s: at most %d %s, got '%s'", flag, PLAN_MAX_WORLDS, what, s); return 1; }
        v[(*n)++] = (int)x;
        q = *end ? end + 1 : end;
        if (*end == ',' && !*q) { snprintf(err, errlen, "%s: a trailing comma in '%s'", flag, s); return 1; }
    }
    return 0;
}

int plan_parse_world(const char* s, int* worlds, int* n, char* err, size_t errlen) {
    return parse_list("--plan-world", "world sizes", "8,64,512", 1 << 20, s, worlds, n, err, errlen);
}

int plan_parse_tp(const char* s, int* tps, int* n, char* err, size_t errlen) {
    return parse_list("--plan-tp", "TP degrees", "1,2,4,8", PLAN_MAX_TP, s, tps, n, err, errlen);
}

const char* plan_tp_check(const ModelConfig* c, int tp, int T, char* why, size_t n) {
    if (model_tp_check(c, tp, why, n)) return why;
    if (T % tp) { snprintf(why, n, "--tp %d does not divide -t %d", tp, T); return why; }
    return NULL;
}

SimCosts plan_costs(const SimProfile* p, SimAttention attention) {
    SimCosts c = {.peak_flops = p->tflops * 1e12, .mem_bw = p->hbm_gbs * 1e9, .matmul_eff = p->matmul_eff,
                  .vector_eff = p->vector_eff, .mem_eff = p->mem_eff, .launch_s = p->launch_us * 1e-6};
    for (int g = 0; g < SIM_GROUPS; g++) c.time_scale[g] = p->time_scale[g] > 0 ? p->time_scale[g] : 1.0;
    memcpy(c.attention_impl_eff, p->attention_eff, sizeof(c.attention_impl_eff));
    c.attention = attention;
    c.vector_mem_eff = p->vector_mem_eff;
    return c;
}

SimLink plan_link(const SimProfile* p, int gpus_per_node, int stride, int size) {
    int inter = (long)(size - 1) * stride >= gpus_per_node;
    SimLink l = {(inter ? p->ib_gbs : p->nvlink_gbs) * 1e9, (inter ? p->ib_latency_us : p->nvlink_latency_us) * 1e-6};
    return l;
}

// ---------------------------------------------------------------------------------------
// Tables

static double sum3(const double* x) { return x[0] + x[1] + x[2]; }

double plan_tokens_per_s(const PlanRow* r) { return r->step_s > 0 ? (double)r->tokens_per_step / r->step_s : 0.0; }

double plan_mfu(const PlanRow* r) {
    return plan_tokens_per_s(r) * r->model_flops_per_token / (r->peak_tflops * 1e12 * r->world);
}

const char* plan_limiter(const PlanRow* r, double* share) {
    double t[4] = {r->bound_time[SIM_BOUND_MATMUL] + r->bound_time[SIM_BOUND_ATTENTION], r->bound_time[SIM_BOUND_MEMORY],
                   sum3(r->exposed), r->bound_time[SIM_BOUND_LAUNCH]};
    static const char* names[4] = {"matmul", "memory bandwidth", "communication", "host"};
    int best = 0;
    for (int i = 1; i < 4; i++) if (t[i] > t[best]) best = i;
    *share = r->step_s > 0 ? t[best] / r->step_s : 0.0;
    // Offloaded, compute also waits for the host link's copies and the host's AdamW.
    if (best == 2 && r->offload) return "communication or the offloaded optimizer (host link, host AdamW)";
    return names[best];
}

void plan_print_detail(const PlanRow* r, const SimProfile* p) {
    static const char* phase[SIM_PHASES] = {"forward", "backward", "optimizer"};
    // A rank's tokens: its data-parallel rank's, which its TP group (tp ranks) shares.
    double N = (double)r->num_parameters, tokens_rank = (double)r->B * r->T * r->grad_accum / (r->tp > 1 ? r->tp : 1);
    double budget_gib = r->budget_bytes / 1073741824.0;
    // On a GPU, 1 GiB is kept for the CUDA context, which the budget does not count (it is
    // measured above the context; the context's own size has not been measured yet).
    printf("fits: %s (%.2f GiB of %.0f GiB per rank%s)\n", budget_gib + (p->fp32 ? 0.0 : 1.0) <= p->mem_gib ? "yes" : "NO",
           budget_gib, p->mem_gib, p->fp32 ? "" : ", 1 GiB of it kept for the CUDA context");
    printf("FLOPs per token: %.3g (model: 6N + 6LCT, what MFU counts); executed by the schedule's kernels (recompute included): %.3g\n",
           r->model_flops_per_token, sum3(r->flops) / tokens_rank);
    printf("bytes per parameter per step (this rank; N = %zu):\n", r->num_parameters);
    printf("  %-10s %14s %14s\n", "phase", "communication", "device memory");
    for (int i = 0; i < SIM_PHASES; i++)
        printf("  %-10s %14.2f %14.2f\n", phase[i], r->comm_bytes[i] / N, r->mem_bytes[i] / N);
    printf("time per step (rank 0, ms):\n");
    printf("  %-10s %10s %10s %10s %12s\n", "phase", "compute", "exposed", "total", "comm (busy)");
    for (int i = 0; i < SIM_PHASES; i++)
        printf("  %-10s %10.2f %10.2f %10.2f %12.2f\n", phase[i], r->busy[i] * 1e3, r->exposed[i] * 1e3,
               (r->busy[i] + r->exposed[i]) * 1e3, r->comm_busy[i] * 1e3);
    printf("  %-10s %10.2f %10.2f %10.2f %12.2f\n", "step", sum3(r->busy) * 1e3, sum3(r->exposed) * 1e3, r->step_s * 1e3,
           sum3(r->comm_busy) * 1e3);
    printf("kernel time by bound (ms): matmul %.2f, attention %.2f, memory bandwidth %.2f, launch overhead %.2f (%ld kernels)\n",
           r->bound_time[SIM_BOUND_MATMUL] * 1e3, r->bound_time[SIM_BOUND_ATTENTION] * 1e3, r->bound_time[SIM_BOUND_MEMORY] * 1e3,
           r->bound_time[SIM_BOUND_LAUNCH] * 1e3, r->kernels);
    if (!p->fp32) {
        // As --profile-step counts them on the cuda device (CUPTI): per phase of the model,
        // the step, a transformer block (its LayerNorm, matmul and attention phases over the
        // layers). The plan's step count leaves out the collectives' kernels, which a GPU's
        // count includes.
        long model = 0, block[2] = {0, 0};
        char phases[1024] = "";
        size_t used = 0;
        for (int i = 0; i < KERNEL_KINDS; i++)
            for (int b = 0; b < 2; b++) {
                model += r->kind_launches[i][b];
                if (i == KERNEL_LAYERNORM || i == KERNEL_MATMUL || i == KERNEL_ATTENTION) block[b] += r->kind_launches[i][b];
                if (r->kind_launches[i][b] && used < sizeof(phases))
                    used += (size_t)snprintf(phases + used, sizeof(phases) - used, "%s%s %s %ld", used ? ", " : "",
                                             profile_phase_name(i), b ? "backward" : "forward", r->kind_launches[i][b]);
            }
        const int L = r->layers > 0 ? r->layers : 1;
        printf("kernel launches in the step (planned, the cuda device's; collectives not counted): %ld (model %ld, engine and "
               "optimizer %ld); per transformer block: forward %.1f, backward %.1f\n", r->kernels, model, r->kernels - model,
               (double)block[0] / L, (double)block[1] / L);
        printf("  per phase: %s\n", phases);
    }
    printf("kernel time by group (ms): matmul %.3f, attention %.3f, vector %.3f, optimizer %.3f, engine (folds, zeroing) %.3f\n",
           r->group_time[SIM_GROUP_MATMUL] * 1e3, r->group_time[SIM_GROUP_ATTENTION] * 1e3, r->group_time[SIM_GROUP_VECTOR] * 1e3,
           r->group_time[SIM_GROUP_OPTIMIZER] * 1e3, r->group_time[SIM_GROUP_OTHER] * 1e3);
    const int col = sim_head_size_column(r->head_size);
    printf("attention: %s at head size %d, %.3g of the peak (the profile's attention_eff_%s_%d%s)\n",
           p->fp32 ? "the cpu device's kernels" : sim_attention_names[r->attention], r->head_size, r->attention_eff,
           sim_attention_names[r->attention], sim_head_sizes[col], p->fp32 ? ": the cpu profile plans them in flash's column" : "");
    if (r->tp > 1)
        printf("tensor parallel: TP bytes per step %.0f (this rank's all-gathers, reduce-scatters and all-reduces), %.2f ms "
               "exposed; FSDP bytes per step %.0f\n", r->tp_bytes, r->tp_s * 1e3, r->fsdp_bytes);
    printf("communication lower bound (bytes over the fastest link, no latency): %.2f ms\n", r->comm_lower_bound_s * 1e3);
    printf("step %.2f ms | %.0f tokens/s (all %d ranks) | MFU %.1f%%\n", r->step_s * 1e3, plan_tokens_per_s(r), r->world,
           100.0 * plan_mfu(r));
    double share;
    const char* lim = plan_limiter(r, &share);
    printf("limited by: %s (%.0f%% of the step)\n", lim, 100.0 * share);
    // The roofline table, as --profile-step prints it for a run on a GPU (there: measured).
    double ms[KERNEL_KINDS][2];
    for (int i = 0; i < KERNEL_KINDS; i++)
        for (int b = 0; b < 2; b++) ms[i][b] = r->kind_time[i][b] * 1e3;
    char source[160];
    const double gbs = p->hbm_gbs * p->mem_eff;
    if (p->fp32) snprintf(source, sizeof(source), "%.0f GB/s: this machine's streaming copy, measured when the plan started", gbs);
    else snprintf(source, sizeof(source), "%.0f GB/s: the %s profile's HBM %.0f GB/s x mem_eff %.2f", gbs, p->name, p->hbm_gbs, p->mem_eff);
    profile_print_roofline("planned", (const double(*)[2])r->kind_bytes, (const double(*)[2])ms, r->mem_bytes[SIM_OPTIMIZER],
                           r->busy[SIM_OPTIMIZER] * 1e3, gbs, source);
}

void plan_print_scaling(const PlanRow* rows, int n, const SimProfile* p, int fixed_global_batch) {
    printf("scaling on %s (projections from the cost model, not measurements; rank 0 of each world simulated):\n", p->name);
    if (fixed_global_batch)
        printf("held fixed: the global batch (--total-batch-tokens %ld) and the micro-batch (%d x %d); accumulation steps = batch / (B x T x W)\n",
               rows[0].tokens_per_step, rows[0].B, rows[0].T);
    else
        printf("held fixed: the micro-batch per rank (%d x %d, one accumulation step): the global batch grows with W\n", rows[0].B,
               rows[0].T);
    printf("(ms per step; exposed: compute waiting for collectives; comm LB: this rank's bytes over the fastest link)\n");
    printf("  %7s %6s %6s %11s %10s %10s %10s %11s %10s %11s %6s %9s  %s\n", "world", "shard", "accum", "tokens/step", "step ms",
           "compute", "exposed", "comm busy", "comm LB", "tokens/s", "MFU", "mem GiB", "limited by");
    for (int i = 0; i < n; i++) {
        const PlanRow* r = &rows[i];
        double share;
        const char* lim = plan_limiter(r, &share);
        printf("  %7d %6d %6d %11ld %10.2f %10.2f %10.2f %11.2f %10.2f %11.0f %5.1f%% %9.2f  %s\n", r->world, r->shard_size,
               r->grad_accum, r->tokens_per_step, r->step_s * 1e3, sum3(r->busy) * 1e3, sum3(r->exposed) * 1e3,
               sum3(r->comm_busy) * 1e3, r->comm_lower_bound_s * 1e3, plan_tokens_per_s(r), 100.0 * plan_mfu(r),
               r->budget_bytes / 1073741824.0, lim);
    }
    double share;
    const char* lim = plan_limiter(&rows[n - 1], &share);
    printf("limited by at %d ranks: %s (%.0f%% of the step)\n", rows[n - 1].world, lim, 100.0 * share);
}

void plan_print_tp(const PlanRow* rows, int n, const SimProfile* p) {
    const double gib = 1073741824.0;
    printf("tensor parallel at world size %d on %s (projections from the cost model, not measurements; TP x DP = world;\n",
           rows[0].world, p->name);
    printf("TP collectives on the intra-node link, exposed; memory per rank in GiB; bytes per step this rank's, GB):\n");
    printf("  %4s %5s %6s %6s %11s %8s %8s %8s %8s %8s %8s %8s %10s %11s %6s %5s\n", "TP", "DP", "shard", "accum", "tokens/step",
           "params", "grads", "optim", "acts", "total", "TP GB", "FSDP GB", "step ms", "tokens/s", "MFU", "fits");
    for (int i = 0; i < n; i++) {
        const PlanRow* r = &rows[i];
        const double total = r->budget_bytes / gib;
        printf("  %4d %5d %6d %6d %11ld %8.4g %8.4g %8.4g %8.4g %8.4g %8.4g %8.4g %10.2f %11.0f %5.1f%% %5s\n", r->tp, r->dp,
               r->shard_size, r->grad_accum, r->tokens_per_step, r->mem_params / gib, r->mem_grads / gib, r->mem_optimizer / gib,
               r->mem_activations / gib, total, r->tp_bytes / 1e9, r->fsdp_bytes / 1e9, r->step_s * 1e3, plan_tokens_per_s(r),
               100.0 * plan_mfu(r), total + (p->fp32 ? 0.0 : 1.0) <= p->mem_gib ? "yes" : "NO");
    }
}

// ---------------------------------------------------------------------------------------
// Calibration from a real run's --profile-step table (train/profile.c's rows: a phase name,
// an optional direction, then "N ms"). Rows of the same group add up over directions.

static const struct { const char* row; int group; } profile_rows[] = {
    {"matmul (transformer blocks)", SIM_GROUP_MATMUL}, {"matmul (lm head)", SIM_GROUP_MATMUL},
    {"attention", SIM_GROUP_ATTENTION}, {"embedding", SIM_GROUP_VECTOR},
    {"layernorm (+ residual add)", SIM_GROUP_VECTOR}, {"cross-entropy", SIM_GROUP_VECTOR},
    {"grad norm + AdamW", SIM_GROUP_OPTIMIZER},
};
static const char* const group_key[SIM_GROUPS] = {"matmul", "attention", "vector", "optimizer"};

int plan_calibrate(const char* log_path, const PlanRow* row, const SimProfile* p, char* err, size_t errlen) {
    char why[1200];
    char* text = read_regular_file(log_path, PLAN_LOG_MAX_BYTES, NULL, why, sizeof(why));
    if (!text) { snprintf(err, errlen, "--calibrate-from %s", why); return 1; }
    double measured[SIM_GROUPS] = {0};
    int in_table = 0, tables = 0, step = 0, lineno = 0, bad = 0;
    SimAttention ran = (SimAttention)-1;  // the attention the run names (cuda: its device line), else the plan's
    for (char *line = text, *next; line && *line && !bad; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        const char* att = !strncmp(line, "attention: ", 11) ? line + 11 : strstr(line, "| attention ");
        if (att && (int)ran < 0) {
            if (att != line + 11) att += 12;
            for (int a = 0; a < SIM_ATTENTION_IMPLS; a++) {
                const size_t n = strlen(sim_attention_names[a]);
                if (!strncmp(att, sim_attention_names[a], n) && (att[n] == ',' || att[n] == ' ' || !att[n])) ran = (SimAttention)a;
            }
        }
        if (!strncmp(line, "profile of step ", 16)) {
            in_table = 1;
            tables++;
            step = atoi(line + 16);
            memset(measured, 0, sizeof(measured));  // the last table counts
            continue;
        }
        if (!in_table) continue;
        if (strncmp(line, "  ", 2) != 0) { in_table = 0; continue; }
        for (size_t i = 0; i < sizeof(profile_rows) / sizeof(profile_rows[0]); i++) {
            const size_t n = strlen(profile_rows[i].row);
            if (strncmp(line + 2, profile_rows[i].row, n) != 0 || line[2 + n] != ' ') continue;
            const char* ms = strstr(line + 2 + n, " ms ");
            if (!ms) break;
            const char* num = ms;
            while (num > line + 2 + n && (isdigit((unsigned char)num[-1]) || num[-1] == '.')) num--;
            // A kernel group's time in a step: at most a day (a 1e300 typed into a log would
            // otherwise scale the profile to times of 300 digits).
            char* end;
            errno = 0;
            const double v = strtod(num, &end);
            if (end != ms || errno || !isfinite(v) || v < 0.0 || v > 864e5) {
                snprintf(err, errlen, "--calibrate-from %s:%d: %s: expected a time in [0, 86400000] ms, got '%.60s'", log_path,
                         lineno, profile_rows[i].row, line + 2 + n);
                bad = 1;
                break;
            }
            measured[profile_rows[i].group] += v;
            break;
        }
    }
    free(text);
    if (bad) return 1;
    if (tables == 0) {
        snprintf(err, errlen, "--calibrate-from %s: no --profile-step table in it (run train_gpt with --profile-step N and keep its output)", log_path);
        return 1;
    }
    double scale[SIM_GROUPS];
    for (int g = 0; g < SIM_GROUPS; g++) {
        const double old = p->time_scale[g] > 0 ? p->time_scale[g] : 1.0, planned = row->group_time[g] * 1e3;
        scale[g] = measured[g] > 0 && planned > 0 ? old * measured[g] / planned : old;
        // The profile printed below must read back (read_profile_text's range for a factor).
        if (scale[g] < 1e-4 || scale[g] > 1e4) {
            snprintf(err, errlen, "--calibrate-from %s: %s measured %.6g ms against %.6g ms planned: a time scale of %.3g, "
                     "outside [0.0001, 10000] (is the log from a run of the same flags?)", log_path, group_key[g], measured[g],
                     planned, scale[g]);
            return 1;
        }
    }
    // Attention: the efficiency of the implementation that ran, at this head size, instead of a
    // time scale. The planned attention time P is s F / (peak e) for the kernels its FLOPs
    // bound (A, the plan's attention-bound time) plus the rest (s x their bytes' time and the
    // launches, counted as the implementation that ran launches them); with s = 1 and e' the
    // FLOP-bound part must take the measured M less the rest: e' = e (A / s) / (M - rest). Where that leaves (0, 1] (the bytes alone take
    // longer than measured, or a faster rate than the peak), the time scale stays.
    SimProfile cal = *p;
    if ((int)ran < 0) ran = row->attention;
    const int col = sim_head_size_column(row->head_size);
    const double s_att = p->time_scale[SIM_GROUP_ATTENTION] > 0 ? p->time_scale[SIM_GROUP_ATTENTION] : 1.0;
    const double M = measured[SIM_GROUP_ATTENTION], P = row->group_time[SIM_GROUP_ATTENTION] * 1e3;
    // The rest as the implementation that ran launches it (the plan's may launch another count).
    double relaunch_ms = 0.0;
    if (!p->fp32)
        for (int b = 0; b < 2; b++)
            relaunch_ms += (double)row->attention_calls[b] * p->launch_us * 1e-3 *
                           (sim_attention_launches(ran, row->head_size, b) - sim_attention_launches(row->attention, row->head_size, b));
    const double A = row->bound_time[SIM_BOUND_ATTENTION] * 1e3, rest = M - (P - A) / s_att - relaunch_ms;
    const double eff = rest > 0 && A > 0 && M > 0 ? row->attention_eff * (A / s_att) / rest : 0.0;
    const int by_eff = eff >= 1e-4 && eff <= 1.0;
    if (by_eff) {
        cal.attention_eff[ran][col] = eff;
        scale[SIM_GROUP_ATTENTION] = 1.0;
    }
    printf("# %s calibrated from the --profile-step table of step %d in %s (train_gpt --plan --calibrate-from):\n",
           p->name, step, log_path);
    printf("# the kernel groups' times, measured there and planned for the same flags (rank 0 of %d):\n", row->world);
    for (int g = 0; g < SIM_GROUPS; g++) {
        printf("#   %-9s measured %10.3f ms, planned %10.3f ms -> ", group_key[g], measured[g], row->group_time[g] * 1e3);
        if (g == SIM_GROUP_ATTENTION && by_eff)
            printf("attention_eff_%s_%d %.4g (was %.4g)\n", sim_attention_names[ran], sim_head_sizes[col], eff, p->attention_eff[ran][col]);
        else
            printf("time scale %.4g%s\n", scale[g], measured[g] > 0 && row->group_time[g] > 0 ? "" : " (not in both: kept)");
    }
    printf("# Not calibrated: communication (exposed waits depend on the overlap, not one rate) and host time.\n");
    printf("name=%s-calibrated\ndtype=%s\ntflops=%.6g\nhbm_gbs=%.6g\nmem_gib=%.6g\nnvlink_gbs=%.6g\nib_gbs=%.6g\n", p->name,
           p->fp32 ? "fp32" : "bf16", p->tflops, p->hbm_gbs, p->mem_gib, p->nvlink_gbs, p->ib_gbs);
    printf("host_link_gbs=%.6g\nhost_mem_gbs=%.6g\n", p->host_link_gbs, p->host_mem_gbs);
    printf("nvlink_latency_us=%.6g\nib_latency_us=%.6g\nlaunch_us=%.6g\n", p->nvlink_latency_us, p->ib_latency_us, p->launch_us);
    printf("matmul_eff=%.6g\nvector_eff=%.6g\nmem_eff=%.6g\nvector_mem_eff=%.6g\n", p->matmul_eff, p->vector_eff, p->mem_eff,
           p->vector_mem_eff);
    for (int a = 0; a < SIM_ATTENTION_IMPLS; a++)
        for (int h = 0; h < SIM_HEAD_SIZES; h++)
            printf("attention_eff_%s_%d=%.6g\n", sim_attention_names[a], sim_head_sizes[h], cal.attention_eff[a][h]);
    for (int g = 0; g < SIM_GROUPS; g++) printf("%s_time_scale=%.6g\n", group_key[g], scale[g]);
    return 0;
}

// ---------------------------------------------------------------------------------------
// The driver: one process plays rank 0 of a virtual world of W ranks, with the same model
// build, engine, gathers, waits, optimizer passes and step function as a real run (ops, from
// train_gpt.cu), on kernels and collectives that only advance a clock.

static void plan_on_event(void* ctx, FsdpEvent e) {
    SimClock* c = (SimClock*)ctx;
    c->phase = e == FSDP_EVENT_FORWARD ? SIM_FORWARD : e == FSDP_EVENT_BACKWARD ? SIM_BACKWARD : SIM_OPTIMIZER;
    c->group = SIM_GROUP_OTHER;  // the engine's own kernels until the model's next one
    c->kind = -1;
}
// Before each model kernel (kernels.h's hook, as --profile-step uses it): its group.
static void plan_on_kernel(void* ctx, KernelKind kind, int backward) {
    SimClock* c = (SimClock*)ctx;
    c->group = sim_group_of_kind(kind);
    c->kind = (int)kind;
    c->backward = backward;
}

// ---------------------------------------------------------------------------------------
// Tensor parallel (--tp, --plan-tp). The model's TP schedule (#33: Megatron-style, sequence
// parallel) does not run on the sim yet, so a TP rank is planned as the data-parallel rank the
// sim steps (a world of world / tp ranks, gpus_per_node / tp of them per node), with the TP
// rank's share of the work priced from that schedule:
// - compute: every model kernel does 1 / tp of its work (matmul and attention FLOPs / tp, the
//   norms and residual adds on N / tp rows, the MLP's activation on N x H / tp, the
//   cross-entropy on Vp / tp columns): the sim's compute rates x tp, its launches unchanged;
// - FSDP: the engine shards what a TP rank holds, the TP-split parameters / tp and the
//   replicated ones whole: its bytes, memory and optimizer time x share, share = (split / tp +
//   replicated) / all parameters (the links' bandwidth / share: the same gathers and waits, each
//   moving share of the bytes; one share for every unit, where a unit's own differs a little);
// - the TP collectives (tp_traffic) on the intra-node link, all exposed (the schedule's overlap
//   of dX's reduce-scatter with the weight-gradient GEMM is not credited);
// - activations: tp_activation_bytes.

// The parameters by split (model/model.h's TpSplit): split over TP (column, row, vocabulary) or
// replicated, the replicated of the root and of one block apart.
typedef struct { double split, root_replicated, block_replicated; } TpParams;

static TpParams tp_params(const ModelConfig* c) {
    TpParams t = {0, 0, 0};
    const ModelFamily* f = model_family(c);
    size_t rows, cols;
    for (int i = 0; i < f->n_root; i++) {
        spec_shape(c, &f->root[i], &rows, &cols);
        if (f->root[i].tp == TP_REPLICATED) t.root_replicated += (double)rows * cols;
        else t.split += (double)rows * cols;
    }
    for (int i = 0; i < f->n_block; i++) {
        spec_shape(c, &f->block[i], &rows, &cols);
        if (f->block[i].tp == TP_REPLICATED) t.block_replicated += (double)rows * cols;
        else t.split += (double)rows * cols * c->num_layers;
    }
    return t;
}

// What a TP rank holds of the parameters, as a share of them all.
static double tp_share(const ModelConfig* c, const TpParams* t, int tp) {
    const double replicated = t->root_replicated + t->block_replicated * c->num_layers;
    return (t->split / tp + replicated) / (t->split + replicated);
}

// The TP collectives of one step, per phase: bytes this rank sends (a ring all-gather receives
// (tp - 1) / tp of [N, C], a reduce-scatter sends as much; an all-reduce sends twice (tp - 1) /
// tp of its buffer) and their time on link (sim_ring_time: the FSDP collectives' cost model).
// e: activation bytes, ge: a replicated gradient's (fp32 on the cpu, the compute dtype on cuda).
typedef struct { double bytes[SIM_PHASES], time[SIM_PHASES]; } TpTraffic;

static TpTraffic tp_traffic(const ModelConfig* c, const TpParams* tpp, int tp, int B, int T, double e, double ge, int grad_accum,
                            int syncs, int recompute, int layers_per_unit, const SimLink* link) {
    TpTraffic x;
    memset(&x, 0, sizeof(x));
    if (tp <= 1) return x;
    const double N = (double)B * T, C = c->channels, L = c->num_layers, part = (tp - 1.0) / tp;
    const double ag_bytes = part * N * C * e, ag_s = sim_ring_time(link, tp, N * C * e / tp, 0);
    // Per micro-step: each layer's forward 2 all-gathers (ln1, ln2) + 2 reduce-scatters (after
    // the row-parallel projections), backward 4 + 2, full recompute 2 + 1 more; the root's
    // forward 1 reduce-scatter (embedding) + 1 all-gather (final norm), backward the same.
    const double fwd = 4 * L + 2, bwd = 6 * L + 2 + (recompute == RECOMPUTE_FULL ? 3 * L : 0);
    // The vocab-parallel cross-entropy: all-reduces of the max (N fp32) and the sums (2N).
    const double ce_bytes = 2 * part * 3 * N * sizeof(float);
    const double ce_s = sim_ring_time(link, tp, N * sizeof(float) / tp, 1) + sim_ring_time(link, tp, 2 * N * sizeof(float) / tp, 1);
    x.bytes[SIM_FORWARD] = grad_accum * (fwd * ag_bytes + ce_bytes);
    x.time[SIM_FORWARD] = grad_accum * (fwd * ag_s + ce_s);
    x.bytes[SIM_BACKWARD] = grad_accum * bwd * ag_bytes;
    x.time[SIM_BACKWARD] = grad_accum * bwd * ag_s;
    // The replicated parameters' gradients: one all-reduce per unit per gradient sync.
    const double replicated = tpp->root_replicated + tpp->block_replicated * L;
    double sync_s = sim_ring_time(link, tp, tpp->root_replicated * ge / tp, 1);
    for (int first = 0; first < c->num_layers; first += layers_per_unit) {
        const int layers = c->num_layers - first < layers_per_unit ? c->num_layers - first : layers_per_unit;
        sync_s += sim_ring_time(link, tp, tpp->block_replicated * layers * ge / tp, 1);
    }
    x.bytes[SIM_BACKWARD] += syncs * 2 * part * replicated * ge;
    x.time[SIM_BACKWARD] += syncs * sync_s;
    return x;
}

// The activations of a TP rank (the schedule's buffers, train_gpt.cu's carve_activations, as
// sequence parallelism sizes them): what stays between blocks (the norms' outputs and
// statistics, residual2, residual3, the embedding's and the final norm's outputs) on its N / tp
// rows; what a column-parallel GEMM makes (qkv, the attention's output and statistics, fch and
// its activation, the logits) on all N rows and 1 / tp of the columns; one gathered [N, C]
// buffer and one [N, C] gradient buffer; the backward's scratch likewise. --recompute keeps
// one layer of what it rebuilds, as a run does.
static size_t tp_activation_bytes(const ModelConfig* c, int tp, size_t B, size_t T, size_t e, int recompute) {
    const ModelFamily* f = model_family(c);
    const size_t N = B * T, Nt = N / tp, C = (size_t)c->channels, L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
    const size_t Lk = recompute == RECOMPUTE_FULL ? 1 : L, Lc = recompute == RECOMPUTE_NONE ? L : 1, fl = sizeof(float);
    const size_t stats = (f->norm == NORM_LAYERNORM) + 1;  // LayerNorm keeps mean and rstd, RMSNorm rstd
    size_t Q, H, A, cols;
    spec_shape(c, family_block_role(f, BLOCK_QKVW), &Q, &cols);
    spec_shape(c, family_block_role(f, BLOCK_FCW), &H, &cols);
    spec_shape(c, family_block_role(f, BLOCK_FCPROJW), &cols, &A);
    const size_t Vp = (size_t)c->padded_vocab_size;
    size_t b = 0;
    b += Nt * C * e;                                               // the embedding's output
    b += 2 * Lc * Nt * C * e + 2 * stats * Lk * Nt * fl;           // ln1, ln2 and their statistics
    b += Lk * N * (Q / tp) * e + Lk * N * (C / tp) * e;            // qkv, the attention's output
    b += Lk * B * (NH / tp) * T * fl;                              // the attention's lse
    b += Lk * Nt * C * e + L * Nt * C * e;                         // residual2, residual3
    b += Lk * N * (H / tp) * e + Lc * N * (A / tp) * e;            // fch, its activation
    b += Nt * C * e + stats * Nt * fl;                             // the final norm
    b += N * (Vp / tp) * e + N * fl;                               // the logits, the losses
    b += 2 * N * C * e;                                            // the gathered [N, C] and its gradient
    b += 3 * Nt * C * e + N * (Q / tp) * e + N * (H / tp) * e;     // backward scratch: proj_out, dresidual, dbtc, dqkv, dfch
    if (f->mlp == MLP_SWIGLU) b += N * (A / tp) * e;               // dact
    return b;
}

// Plans world size W at TP degree tp (both checked by check_run_flags and plan_tp_check)
// into row, printing the setup and budget lines when detail.
static void plan_one(const Options* opt, const ModelConfig* config, const SimProfile* prof, const PlanModelOps* ops,
                     int world, int tp, int detail, PlanRow* row) {
    const int dp = world / tp, gpn = opt->gpus_per_node / tp > 0 ? opt->gpus_per_node / tp : 1;
    const int S = opt->shard_group_size ? opt->shard_group_size : dp;
    const TpParams tpp = tp_params(config);
    const double share = tp > 1 ? tp_share(config, &tpp, tp) : 1.0;
    // Rank 0 of the virtual data-parallel world (no transport: nothing is sent).
    ProcessGroup pg;
    memset(&pg, 0, sizeof(pg));
    pg.world = dp;
    pg.local_world = dp < gpn ? dp : gpn;
    pg.launcher = "plan";
    pg.transport = "sim";
    pg.shard_size = S;
    pg.replicate_size = dp / S;
    memset(row, 0, sizeof(*row));
    row->world = world;
    row->tp = tp;
    row->dp = dp;
    row->shard_size = S;
    row->replicas = dp / S;
    row->B = opt->batch_size;
    row->T = opt->seq_len;
    batch_split(opt, dp, &row->tokens_per_step, &row->grad_accum);

    SimClock clock;
    memset(&clock, 0, sizeof(clock));
    clock.kind = -1;
    clock.costs = plan_costs(prof, sim_attention_from_name(opt->attention));  // a name plan_main checked
    // Where the cuda device runs the GELU (train/device.cuh): its launches.
    clock.gelu_epilogue[0] = opt->gelu_fusion >= 1 && opt->recompute != RECOMPUTE_SELECTIVE;
    clock.gelu_epilogue[1] = opt->gelu_fusion >= 2;
    DeviceOptions dopt = run_device_options(opt, 0);
    dopt.sim = prof;
    dopt.sim_clock = &clock;
    dopt.gpus_per_node = opt->gpus_per_node;
    FsdpConfig fcfg = run_fsdp_config(opt);
    ModelParts m;
    char description[sizeof(m.dev->description)];
    SimProfile tprof = *prof;
    if (tp > 1) {
        // The device line names the profile as given: from a build on it, before the one that
        // plans on the TP rank's links.
        void* shown = ops->build(config, opt->unit_layers, &pg, &fcfg, &dopt, row->B, row->T, &m);
        snprintf(description, sizeof(description), "%s", m.dev->description);
        ops->free(shown);
        tprof.nvlink_gbs /= share;
        tprof.ib_gbs /= share;
        dopt.sim = &tprof;
        dopt.gpus_per_node = gpn;
        clock.costs.peak_flops *= tp;
        clock.costs.mem_bw *= tp;
        clock.costs.time_scale[SIM_GROUP_OPTIMIZER] *= tp * share;
    }
    void* model = ops->build(config, opt->unit_layers, &pg, &fcfg, &dopt, row->B, row->T, &m);
    if (tp == 1) snprintf(description, sizeof(description), "%s", m.dev->description);
    m.fsdp->on_event = plan_on_event;
    m.fsdp->on_event_ctx = &clock;
    m.dev->kernels.on_kernel = plan_on_kernel;
    m.dev->kernels.on_kernel_ctx = &clock;
    const MemoryBudget budget = memory_budget(&m, row->grad_accum);
    // The budget's parts (fsdp.c's shard state: master, m, v and gradient shards of fp32, plus
    // the compute-dtype shard and the decay toggles), the FSDP parts x share under TP.
    const FsdpMemory* mm = &m.fsdp->memory;
    const size_t fp32_shard = m.fsdp->total_shard * sizeof(float);
    // The device's own buffers (sim_open's lines in train/device.cuh): under TP its collective
    // buffers hold the TP rank's share of a unit, its kernel scratch is a TP rank's (attention's
    // heads / tp, the row kernels' N / tp rows); the workspace and the libraries stay.
    size_t line_bytes[sizeof(m.dev->device_lines) / sizeof(m.dev->device_lines[0])], extra = 0;
    for (int i = 0; i < m.dev->n_device_lines; i++) {
        const char* what = m.dev->device_lines[i].what;
        const double f = tp == 1 ? 1.0 : !strncmp(what, "collective buffers", 18) ? share : !strncmp(what, "kernel scratch", 14) ? 1.0 / tp : 1.0;
        line_bytes[i] = (size_t)((double)m.dev->device_lines[i].bytes * f);
        extra += line_bytes[i];
    }
    if (mm->host_offload) {  // the optimizer's state and the gradient shards on the host
        row->mem_params = (size_t)((double)(mm->shard_state + mm->gathered) * share);
        row->mem_grads = (size_t)((double)mm->full_grads * share);
    } else {
        row->mem_params = (size_t)((double)(mm->shard_state - 3 * fp32_shard + mm->gathered) * share);
        row->mem_grads = (size_t)((double)(fp32_shard + mm->full_grads) * share);
        row->mem_optimizer = (size_t)((double)(2 * fp32_shard) * share);
    }
    row->mem_activations = tp > 1 ? tp_activation_bytes(config, tp, row->B, row->T, prof->fp32 ? 4 : 2, opt->recompute)
                                  : m.activation_bytes;
    row->budget_bytes = row->mem_params + row->mem_grads + row->mem_optimizer + row->mem_activations + extra;
    row->offload = opt->offload;
    row->num_parameters = m.layout->num_parameters;
    row->model_flops_per_token = model_flops_per_token(config, m.layout->num_parameters, row->T);
    row->peak_tflops = prof->tflops;
    if (detail) {
        printf("plan: rank 0 of %d on %s (a model of the run, not a measurement)\n", world, description);
        print_model_line(config, m.layout->num_parameters);
        if (tp > 1)
            printf("tensor parallel: TP %d x DP %d (sequence parallel; TP collectives on the intra-node link); a TP rank holds "
                   "%.4f of the parameters (the TP-split / %d, the replicated whole)\n", tp, dp, share, tp);
        printf("sharding: %d unit(s) of %d block(s) + root, shard group %d x %d replica(s), prefetch %d, reshard after forward %d, grad sync %s, recompute %s\n",
               m.layout->n_units - 1, opt->unit_layers, S, dp / S, opt->prefetch, opt->reshard_after_forward,
               opt->no_grad_sync_until_last ? "last micro-step" : "every micro-step",
               opt->recompute == RECOMPUTE_FULL ? "full" : opt->recompute == RECOMPUTE_SELECTIVE ? "selective" : "none");
        printf("batch: %d x %d per %s, %d rank(s), %d accumulation step(s) = %ld tokens per step\n", row->B, row->T,
               tp > 1 ? "data-parallel rank (its TP ranks share it)" : "rank", dp, row->grad_accum, row->tokens_per_step);
        if (tp == 1) {
            print_memory_budget(&m, &budget);
        } else {
            printf("memory budget per rank%s (the FSDP parts x %.4f; activations sequence-parallel):\n",
                   prof->fp32 ? "" : " (GPU memory)", share);
            print_memory_line("params (shards, gathered slots)", row->mem_params);
            print_memory_line("grads (shards, full-gradient slots)", row->mem_grads);
            print_memory_line("optimizer (Adam m, v)", row->mem_optimizer);
            print_memory_line("activations", row->mem_activations);
            for (int i = 0; i < m.dev->n_device_lines; i++) print_memory_line(m.dev->device_lines[i].what, line_bytes[i]);
            print_memory_line("total", row->budget_bytes);
        }
    }
    // A first step settles the slots (as every later step finds them); the second is timed.
    clock.phase = SIM_FORWARD;
    ops->step(model, row->grad_accum);
    sim_clock_reset(&clock);
    clock.compute = clock.comm = clock.compute > clock.comm ? clock.compute : clock.comm;
    const double t0 = clock.compute;
    clock.phase = SIM_FORWARD;
    ops->step(model, row->grad_accum);
    row->step_s = clock.compute - t0;
    // Under TP the sim's FLOPs and bytes are the data-parallel rank's: a TP rank's are 1 / tp
    // of the model's kernels' and share of the engine's.
    const double work = 1.0 / tp;
    for (int i = 0; i < SIM_PHASES; i++) {
        row->busy[i] = clock.busy[i];
        row->exposed[i] = clock.exposed[i];
        row->comm_busy[i] = clock.comm_busy[i];
        row->comm_bytes[i] = clock.comm_bytes[i] * share;
        row->mem_bytes[i] = clock.mem_bytes[i] * (i == SIM_OPTIMIZER ? share : work);
        row->flops[i] = clock.flops[i] * (i == SIM_OPTIMIZER ? share : work);
        row->fsdp_bytes += row->comm_bytes[i];
    }
    for (int i = 0; i < SIM_BOUNDS; i++) row->bound_time[i] = clock.bound_time[i];
    row->kernels = clock.kernels;
    row->layers = config->num_layers;
    row->attention_calls[0] = clock.attention_calls[0];
    row->attention_calls[1] = clock.attention_calls[1];
    for (int i = 0; i < KERNEL_KINDS; i++)
        for (int b = 0; b < 2; b++) {
            row->kind_launches[i][b] = clock.kind_launches[i][b];
            row->kind_bytes[i][b] = clock.kind_bytes[i][b] * work;
            row->kind_time[i][b] = clock.kind_time[i][b];
        }
    row->head_size = config->channels / config->num_heads;
    row->attention = sim_attention_resolve(clock.costs.attention, row->head_size);
    row->attention_eff = sim_attention_eff(&clock.costs, row->head_size);
    for (int g = 0; g <= SIM_GROUPS; g++) row->group_time[g] = clock.group_time[g];
    // The TP collectives: on the compute stream's critical path (exposed), in the phase that
    // issues them.
    const SimLink tp_link = plan_link(prof, opt->gpus_per_node, 1, tp);
    const double e = prof->fp32 ? 4.0 : 2.0;
    const TpTraffic x = tp_traffic(config, &tpp, tp, row->B, row->T, e, e, row->grad_accum,
                                   opt->no_grad_sync_until_last ? 1 : row->grad_accum, opt->recompute, opt->unit_layers, &tp_link);
    for (int i = 0; i < SIM_PHASES; i++) {
        row->exposed[i] += x.time[i];
        row->comm_busy[i] += x.time[i];
        row->comm_bytes[i] += x.bytes[i];
        row->tp_bytes += x.bytes[i];
        row->tp_s += x.time[i];
    }
    row->step_s += row->tp_s;
    double fastest = (prof->nvlink_gbs > prof->ib_gbs ? prof->nvlink_gbs : prof->ib_gbs) * 1e9;
    row->comm_lower_bound_s = (row->comm_bytes[0] + row->comm_bytes[1] + row->comm_bytes[2]) / fastest;
    ops->free(model);
}

// --sim-device cpu for a run of `world` ranks: this machine measured with the threads each of
// its ranks gets, as set_threads gives them to a run (--threads, else OMP_NUM_THREADS, else
// the node's cores shared by its min(world, --gpus-per-node) ranks), not with every core; again
// only when that count changes (*threads: the count measured, 0 before the first). The plan's
// device line names the count.
static int cpu_profile_at(const Options* opt, int world, SimProfile* prof, int* threads, char* err, size_t errlen) {
    const int t = set_threads(opt, world < opt->gpus_per_node ? world : opt->gpus_per_node);
    if (t == *threads) return 0;
    *threads = t;
    if (plan_profile("cpu", prof, err, errlen)) return 1;
    prof->threads = t;
    return 0;
}

// --plan-tp: a row per degree at the one world size, a note for each degree that cannot run
// there (one that does not divide the world, the node or the model, or that the run's flags
// refuse at it: check_run_flags with that --tp). 1 with the error when none plans.
static int plan_tp_table(const Options* opt, const ModelConfig* config, const PlanModelOps* ops, SimProfile* prof, int cpu,
                         const int* worlds, int n_worlds) {
    if (n_worlds > 1) {
        fprintf(stderr, "error: --plan-tp plans one world size: give --plan-world one size, got '%s'\n", opt->plan_world);
        return 1;
    }
    const int world = worlds[0];
    int tps[PLAN_MAX_WORLDS], n = 0, planned = 0, threads = 0;
    char err[1024], notes[PLAN_MAX_WORLDS][1100], what[128];
    if (plan_parse_tp(opt->plan_tp, tps, &n, err, sizeof(err))) { fprintf(stderr, "error: %s\n", err); return 1; }
    if (cpu && cpu_profile_at(opt, world, prof, &threads, err, sizeof(err))) { fprintf(stderr, "error: %s\n", err); return 1; }
    PlanRow rows[PLAN_MAX_WORLDS];
    for (int i = 0; i < n; i++) {
        Options o = *opt;
        o.tp = tps[i];
        ParseError e;
        notes[i][0] = '\0';
        if (world % o.tp)
            snprintf(notes[i], sizeof(notes[i]), "does not divide the world size %d", world);
        else if (opt->gpus_per_node % o.tp)
            snprintf(notes[i], sizeof(notes[i]), "does not divide --gpus-per-node %d (tensor parallel stays within one node)",
                     opt->gpus_per_node);
        else if (plan_tp_check(config, o.tp, o.seq_len, what, sizeof(what)))
            snprintf(notes[i], sizeof(notes[i]), "%s", what);
        else if (check_run_flags(&o, config, world, "sim", NULL, &e))
            snprintf(notes[i], sizeof(notes[i]), "%s", e.msg);
        else
            plan_one(&o, config, prof, ops, world, o.tp, 0, &rows[planned++]);
    }
    print_model_line(config, model_num_parameters(config));
    if (planned) plan_print_tp(rows, planned, prof);
    for (int i = 0; i < n; i++)
        if (notes[i][0]) printf("  TP %d skipped: %s\n", tps[i], notes[i]);
    if (!planned) {
        fprintf(stderr, "error: --plan-tp %s: no degree plans at world size %d\n", opt->plan_tp, world);
        return 1;
    }
    return 0;
}

int plan_main(const Options* opt, const ModelConfig* config, const PlanModelOps* ops) {
    if (launcher_rank() != 0) return 0;  // started under a launcher: one plan is enough
    if ((int)sim_attention_from_name(opt->attention) < 0) {  // a name the run knows and the planner does not
        fprintf(stderr, "error: --attention %s: --plan knows flash, cublas, cudnn and auto\n", opt->attention);
        return 1;
    }
    char err[1024];
    ParseError e;
    SimProfile prof;
    const int cpu = !strcmp(opt->sim_device, "cpu");  // measured per world's threads (cpu_profile_at)
    int threads = 0;
    if (!cpu && plan_profile(opt->sim_device, &prof, err, sizeof(err))) { fprintf(stderr, "error: %s\n", err); return 1; }
    // The flags as a run checks them, before any output: first what no world changes.
    if (check_run_flags(opt, config, 0, "sim", NULL, &e)) { fprintf(stderr, "error: %s\n", e.msg); return 1; }
    int worlds[PLAN_MAX_WORLDS], n = 1;
    worlds[0] = opt->gpus_per_node;
    if (opt->plan_world && plan_parse_world(opt->plan_world, worlds, &n, err, sizeof(err))) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    PlanRow rows[PLAN_MAX_WORLDS];
    if (opt->plan_tp) return plan_tp_table(opt, config, ops, &prof, cpu, worlds, n);
    char what[128];
    if (opt->tp > 1 && opt->gpus_per_node % opt->tp) {
        fprintf(stderr, "error: --plan with --tp %d: it does not divide --gpus-per-node %d (tensor parallel stays within one node)\n",
                opt->tp, opt->gpus_per_node);
        return 1;
    }
    if (opt->tp > 1 && plan_tp_check(config, opt->tp, opt->seq_len, what, sizeof(what))) {
        fprintf(stderr, "error: --plan: %s\n", what);
        return 1;
    }
    for (int i = 0; i < n; i++)
        if (check_run_flags(opt, config, worlds[i], "sim", NULL, &e)) { fprintf(stderr, "error: %s\n", e.msg); return 1; }
    if (opt->calibrate_from) {  // only the calibrated profile, for the first world
        if (cpu && cpu_profile_at(opt, worlds[0], &prof, &threads, err, sizeof(err))) { fprintf(stderr, "error: %s\n", err); return 1; }
        plan_one(opt, config, &prof, ops, worlds[0], opt->tp, 0, &rows[0]);
        if (plan_calibrate(opt->calibrate_from, &rows[0], &prof, err, sizeof(err))) { fprintf(stderr, "error: %s\n", err); return 1; }
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (cpu && cpu_profile_at(opt, worlds[i], &prof, &threads, err, sizeof(err))) { fprintf(stderr, "error: %s\n", err); return 1; }
        plan_one(opt, config, &prof, ops, worlds[i], opt->tp, i == 0, &rows[i]);
        if (i == 0) plan_print_detail(&rows[0], &prof);
    }
    if (n > 1) plan_print_scaling(rows, n, &prof, opt->total_batch_tokens > 0);
    return 0;
}
