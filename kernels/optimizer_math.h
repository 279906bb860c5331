// The optimizer's per-element arithmetic, written once for the GPU's AdamW kernel
// (cuda_optimizer.cuh) and the host threads of --offload optimizer (fsdp/offload.c), so that
// both give the same bits: AdamW with explicit roundings (no fused multiply-add on either
// side: nvcc's __f*_rn intrinsics are never contracted, and the host file is compiled with
// -ffp-contract=off), and the stochastic rounding to bf16 whose random bits are a pure
// function of (seed, step, global element index).
// Plain C for the host compiler; __host__ __device__ functions under nvcc (and the CPU
// emulator, which defines __host__ too).
#ifndef FSDP_KERNELS_OPTIMIZER_MATH_H
#define FSDP_KERNELS_OPTIMIZER_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __host__
#define OPT_MATH static __host__ __device__ __forceinline__
#else
#define OPT_MATH static inline
#endif

#ifdef __CUDA_ARCH__  // device code: the IEEE-rounded intrinsics, which nvcc never fuses
#define OPT_MUL(a, b) __fmul_rn(a, b)
#define OPT_ADD(a, b) __fadd_rn(a, b)
#define OPT_SUB(a, b) __fsub_rn(a, b)
#define OPT_DIV(a, b) __fdiv_rn(a, b)
#define OPT_SQRT(a) __fsqrt_rn(a)
#else
#define OPT_MUL(a, b) ((a) * (b))
#define OPT_ADD(a, b) ((a) + (b))
#define OPT_SUB(a, b) ((a) - (b))
#define OPT_DIV(a, b) ((a) / (b))
#define OPT_SQRT(a) sqrtf(a)
#endif

// One element of AdamW (cpu_kernels.h's adamw_update, the same order of operations): g the
// gradient already scaled (clip), bc1 / bc2 the bias corrections 1 - beta^t rounded to float,
// omb1 / omb2 = 1 - beta1 / beta2, wd this element's weight decay (0 for biases and norms).
OPT_MATH void adamw_element(float* p, float* m, float* v, float g, float lr, float beta1, float beta2, float omb1,
                            float omb2, float bc1, float bc2, float eps, float wd) {
    const float mi = OPT_ADD(OPT_MUL(beta1, *m), OPT_MUL(omb1, g));
    const float vi = OPT_ADD(OPT_MUL(beta2, *v), OPT_MUL(OPT_MUL(omb2, g), g));
    const float mhat = OPT_DIV(mi, bc1);
    const float vhat = OPT_DIV(vi, bc2);
    const float step = OPT_ADD(OPT_DIV(mhat, OPT_ADD(OPT_SQRT(vhat), eps)), OPT_MUL(wd, *p));
    *p = OPT_SUB(*p, OPT_MUL(lr, step));
    *m = mi;
    *v = vi;
}

// Stochastic rounding to bf16. The random bits of element i at optimizer step t:
//   key = sr_key(seed, t)            (once per launch or task)
//   r   = sr_bits(key, i)            the splitmix64 output for counter i + 1 of a stream seeded
//                                    with key; the top 16 bits are used
// with i the element's GLOBAL index in its flat unit, so a value is rounded the same way
// whatever the world size, the sharding, the device and the way a range is split. Under
// tensor parallelism a rank's unit holds only its part of the split tensors: i is then the
// element's index in the unit as it is at TP 1 (the global unit: the same tensors whole),
// found through the unit's SrKeyRun table (sr_key_index), so a value rounds the same at any --tp.
OPT_MATH uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
OPT_MATH uint64_t sr_key(uint64_t seed, int step) {
    return splitmix64_mix(seed ^ splitmix64_mix(0x5352u + (uint64_t)(uint32_t)step));
}
OPT_MATH uint32_t sr_bits(uint64_t key, uint64_t index) {
    return (uint32_t)(splitmix64_mix(key + (index + 1) * 0x9e3779b97f4a7c15ull) >> 48);
}
// The seed of a flat unit's stream: a hash of the run seed and the unit (its stream id), so
// units do not share random bits.
OPT_MATH uint64_t sr_unit_seed(uint64_t seed, uint64_t unit_stream) {
    return splitmix64_mix(seed ^ splitmix64_mix(0x756e697473726e67ull + unit_stream));
}

// A run of a unit's local elements and their places in the global unit: local element
// local_begin + j (j < rows * cols) is global element
//   global_begin + (j / cols) * global_stride + j % cols
// (a box of a row-parallel weight: rows of cols local columns in rows of global_stride). A
// contiguous run has cols == global_stride (then it is global_begin + j, for any j: the last
// run of a table, the unit's padding, uses that to cover every index past the tensors). A
// table is sorted by local_begin, its first run starting at 0; no table (n_runs 0) is the
// identity, the unit of a run without tensor parallelism.
typedef struct {
    uint64_t local_begin, rows, cols, global_begin, global_stride;
} SrKeyRun;

// The last run starting at or before local element i (binary search).
OPT_MATH int sr_run_find(const SrKeyRun* runs, int n_runs, uint64_t i) {
    int lo = 0, hi = n_runs;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (runs[mid].local_begin <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}
// The global index of local element i in run r. 32-bit division where it fits: the AdamW
// kernel is memory-bound, and a GPU's 64-bit division is a long software sequence.
OPT_MATH uint64_t sr_run_index(const SrKeyRun* r, uint64_t i) {
    const uint64_t j = i - r->local_begin;
    if (r->cols == r->global_stride) return r->global_begin + j;
    uint64_t row, col;
    if (j <= 0xffffffffu && r->cols <= 0xffffffffu) {
        const uint32_t j32 = (uint32_t)j, c32 = (uint32_t)r->cols, q = j32 / c32;
        row = q;
        col = j32 - q * c32;
    } else {
        row = j / r->cols;
        col = j % r->cols;
    }
    return r->global_begin + row * r->global_stride + col;
}
// The index that keys local element i's random bits (sr_bits): its global index.
OPT_MATH uint64_t sr_key_index(const SrKeyRun* runs, int n_runs, uint64_t i) {
    if (n_runs == 0) return i;
    return sr_run_index(&runs[sr_run_find(runs, n_runs, i)], i);
}

// The bf16 bits of x rounded with 16 random bits: they are added below the bf16 mantissa and
// the rest truncated, so it rounds up (in magnitude) with probability (dropped bits) / 2^16
// and E[result] = x. Finite values only (inf and NaN: the caller's round to nearest).
OPT_MATH uint16_t sr_round_bf16_bits(float x, uint32_t bits16) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + (bits16 & 0xffffu)) & 0xffff0000u;  // a carry may reach the exponent: correct
    return (uint16_t)(u >> 16);
}
OPT_MATH int sr_finite(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

#endif  // FSDP_KERNELS_OPTIMIZER_MATH_H
