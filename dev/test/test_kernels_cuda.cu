// GPU tests of the hand-written 16-bit CUDA kernels (kernels/cuda_encoder.cuh, cuda_norm.cuh,
// cuda_activation.cuh, cuda_bias.cuh, cuda_rope.cuh, cuda_crossentropy.cuh, cuda_optimizer.cuh)
// against their CPU twins (kernels/cpu_kernels.h, cpu_kernels_llama.h, fp32), for both storage
// types T16: bf16 and fp16 (--param-dtype).
//
// For every kernel: random inputs from a fixed seed, rounded to T16; the GPU kernel runs on
// the T16 values, the CPU twin on the same values as fp32; outputs are compared with the
// tolerances below. Backward kernels (and the other reductions) also run twice from the same
// state and must agree bitwise. Stochastic rounding (bf16's parameter copy) is checked for
// unbiasedness and for independence from how a range is split into launches; fp16's copy is
// rounded to nearest, checked bitwise. Shapes exercise the edge cases: C not a multiple of the
// block width, N = 1, Vp > V, odd n, unaligned pointers. Every kernel that is a template on
// T16 runs in both types on every shape (test_storage_kernels); the names of the fp16 checks
// end in " [fp16]", the bf16 ones carry no tag.
//
// Output: "ok - <check> (max err ...)" or "not ok - <check>: ..." per check; exit status 1
// if any check failed. Without a usable GPU: "ok - cuda kernels # skip no GPU", status 0.
#include <math.h>
#ifndef FSDP_NO_MPI
#include <mpi.h>  // not used: proves the headers build next to MPI's and the CPU kernels'
#endif
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "kernels/cpu_kernels_llama.h"
#include "kernels/cuda_activation.cuh"
#include "kernels/cuda_bias.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_crossentropy.cuh"
#include "kernels/cuda_encoder.cuh"
#include "kernels/cuda_matmul.cuh"
#include "kernels/cuda_norm.cuh"
#include "kernels/cuda_optimizer.cuh"
#include "kernels/cuda_rope.cuh"

// ----------------------------------------------------------------------------
// Tolerances
//
// bf16 outputs. Both sides start from the same bf16 inputs and compute in fp32; they differ
// by the order of fp32 operations (sums over at most ~10^4 terms: relative differences
// ~1e-6), FMA contraction, and expf (GPU, <= 2 ulp) vs fast_expf (CPU, <= 1 ulp). The
// GPU's result is then rounded to bf16 once: at most half a bf16 ulp, 2^-9 relative. So each
// element must satisfy |gpu - cpu| <= 2^-8 |cpu| (one bf16 ulp: the rounding plus room for a
// value that sits on a rounding boundary) + 1e-3 max|cpu| (an absolute floor for elements
// that cancel to ~0, whose fp32 error is relative to the terms that cancelled, not to the
// result). This is stricter than "1e-2 of the tensor's max magnitude" everywhere and catches
// errors confined to small elements, while any wrong index, sign or formula is off by O(1).
static constexpr double BF16_TOL_REL = 1.0 / 256.0;
static constexpr double BF16_TOL_ABS_FRAC = 1e-3;
// fp16 outputs (IEEE binary16: an 11-bit significand, normal from 2^-14, largest finite 65504;
// every input here stays within [2^-14, 65504] in magnitude or is 0, except where a check is
// about the edges). The same fp32 computation as above, rounded once to fp16: to nearest, so
// |fp16(y) - y| <= 2^-11 |y| for a normal y (the unit roundoff of an 11-bit significand) and
// <= 2^-25 (half the subnormal spacing 2^-24) below 2^-14. With y the GPU's fp32 value and
// |y - cpu| = d its fp32 difference, |gpu - cpu| <= 2^-11 |cpu| + (1 + 2^-11) d: the relative
// tolerance is the rounding itself, 2^-11 (8 times tighter than bf16's 2^-8, the ratio of the
// two roundings), and d goes to the absolute floor. d is a handful of fp32 ulps of the terms
// (sums of <= ~10^4 terms in another order: ~sqrt(n) 2^-24 ~ 6e-6 of their magnitude, expf
// vs fast_expf ~2e-7): the floor is 2^-16 ~ 1.5e-5 of max|cpu|, 64 times tighter than bf16's
// 1e-3 (which also had to absorb bf16 boundary cases), plus the 2^-25 of a subnormal result
// (crossentropy's unscaled dlogits at V = 50257 are ~3e-7: subnormal in fp16).
static constexpr double FP16_TOL_REL = 1.0 / 2048.0;
static constexpr double FP16_TOL_ABS_FRAC = 1.0 / 65536.0;
static constexpr double FP16_TOL_ABS_MIN = 1.0 / 33554432.0;  // 2^-25
// fp32 statistics (LayerNorm mean/rstd, losses): fp32 sums in another order, ~1e-6 relative.
// mean may cancel to ~0, so its floor is relative to the input's magnitude. (The same for
// either storage type: the inputs are exact in fp32, only the fp32 arithmetic differs.)
static const double STAT_TOL_REL = 1e-5;
static const double MEAN_TOL_OF_MAX_INPUT = 1e-5;
static const double LOSS_TOL_ABS = 1e-5;
// AdamW fp32 state: a handful of fp32 operations per element and step, FMA contraction
// allowed on either side: a few ulp per step, 3 steps.
static const double ADAMW_TOL_REL = 1e-5;
static const double ADAMW_TOL_ABS_FRAC = 1e-6;
// Sum of squares: exact products summed in double, only the order differs.
static const double SUMSQ_TOL_REL = 1e-12;

// The storage type's name, the tag its checks' names end in, and its tolerances (above).
template <class T16> struct Dtype;
template <> struct Dtype<bf16> {
    static constexpr const char* name = "bf16";
    static constexpr const char* tag = "";  // the bf16 checks keep their names
    static constexpr double rel = BF16_TOL_REL, abs_frac = BF16_TOL_ABS_FRAC, abs_min = 0.0;
};
template <> struct Dtype<fp16> {
    static constexpr const char* name = "fp16";
    static constexpr const char* tag = " [fp16]";
    static constexpr double rel = FP16_TOL_REL, abs_frac = FP16_TOL_ABS_FRAC, abs_min = FP16_TOL_ABS_MIN;
};
template <class T16> static constexpr bool is_bf16 = std::is_same<T16, bf16>::value;

// ----------------------------------------------------------------------------
// Reporting

static int n_failed = 0, n_passed = 0;
static const char* g_dtype_tag = "";  // appended to every check's name (DtypeScope)

static void report(bool ok, const char* name, const char* fmt, ...) {
    char detail[512] = "";
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    if (ok) {
        n_passed++;
        if (detail[0]) printf("ok - %s%s (%s)\n", name, g_dtype_tag, detail);
        else printf("ok - %s%s\n", name, g_dtype_tag);
    } else {
        n_failed++;
        printf("not ok - %s%s: %s\n", name, g_dtype_tag, detail[0] ? detail : "failed");
    }
    fflush(stdout);
}
// Every test of a T16 kernel holds one while it runs: its checks' names then end in T16's tag.
template <class T16>
struct DtypeScope {
    const char* saved;
    DtypeScope() : saved(g_dtype_tag) { g_dtype_tag = Dtype<T16>::tag; }
    ~DtypeScope() { g_dtype_tag = saved; }
};

// ----------------------------------------------------------------------------
// Random inputs (fixed seed), bf16 conversions, device buffers

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() { s += 0x9e3779b97f4a7c15ull; return splitmix64_mix(s); }
    double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    float normal() {
        const double u1 = uniform() + 1e-300, u2 = uniform();
        return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    int below(int n) { return (int)(next() % (uint64_t)n); }
};

template <class T16>
static float round16(float x) { return to_float(from_float<T16>(x)); }
static float round_bf16(float x) { return round16<bf16>(x); }

// n values scale * normal + offset, rounded to T16 (so the fp32 copy is exactly the T16 input).
template <class T16>
static std::vector<float> rand16(Rng& rng, size_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = round16<T16>(scale * rng.normal() + offset);
    return v;
}
static std::vector<float> rand_f32(Rng& rng, size_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = scale * rng.normal() + offset;
    return v;
}
template <class T16>
static std::vector<T16> to16(const std::vector<float>& x) {
    std::vector<T16> y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = from_float<T16>(x[i]);
    return y;
}
template <class T16>
static std::vector<float> from16(const std::vector<T16>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = to_float(x[i]);
    return y;
}
template <class T16>
static uint16_t bits_of(T16 x) { uint16_t u; memcpy(&u, &x, sizeof u); return u; }

// Device buffers; every allocation is freed at exit by the driver (the process is short).
template <class T>
static T* dev_alloc(size_t n) {
    T* p = NULL;
    CUDA_CHECK(cudaMalloc((void**)&p, (n > 0 ? n : 1) * sizeof(T)));
    return p;
}
template <class T>
static T* dev_upload(const std::vector<T>& h) {
    T* p = dev_alloc<T>(h.size());
    if (!h.empty()) CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
template <class T>
static void dev_set(T* p, const std::vector<T>& h) {
    if (!h.empty()) CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
static std::vector<T> dev_download(const T* p, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n > 0) CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
static void* dev_scratch(size_t bytes) {
    void* p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes > 0 ? bytes : 1));
    return p;
}

// ----------------------------------------------------------------------------
// Comparisons

static double max_abs(const std::vector<float>& x) {
    double m = 0.0;
    for (float v : x) m = fmax(m, fabs((double)v));
    return m;
}

// Elementwise |got - ref| <= rel |ref| + abs_tol; reports the largest error relative to
// max|ref| and the first violation.
static void check_close(const char* name, const std::vector<float>& got, const std::vector<float>& ref,
                        double rel, double abs_tol) {
    if (got.size() != ref.size()) { report(false, name, "size %zu vs %zu", got.size(), ref.size()); return; }
    const double mx = max_abs(ref);
    double worst = 0.0;
    long bad = -1;
    for (size_t i = 0; i < ref.size(); i++) {
        const double err = fabs((double)got[i] - (double)ref[i]);
        if (!(err <= rel * fabs((double)ref[i]) + abs_tol)) { if (bad < 0) bad = (long)i; }
        if (err > worst || err != err) worst = err;
    }
    if (bad >= 0) {
        report(false, name, "element %ld: got %.9g, want %.9g (max err %.3g, max|ref| %.3g)", bad,
               (double)got[bad], (double)ref[bad], worst, mx);
    } else {
        report(true, name, "max err %.3g = %.2g of max|ref| %.3g", worst, mx > 0 ? worst / mx : 0.0, mx);
    }
}
// check_close with each element's relative tolerance taken of scale[i] instead of |ref[i]|
// (for results rounded more than once: the sum of the magnitudes each rounding saw).
static void check_close_scaled(const char* name, const std::vector<float>& got, const std::vector<float>& ref,
                               const std::vector<float>& scale, double rel, double abs_tol) {
    if (got.size() != ref.size() || scale.size() != ref.size()) {
        report(false, name, "size %zu vs %zu (scales %zu)", got.size(), ref.size(), scale.size());
        return;
    }
    double worst = 0.0;
    long bad = -1;
    for (size_t i = 0; i < ref.size(); i++) {
        const double err = fabs((double)got[i] - (double)ref[i]);
        if (!(err <= rel * (double)scale[i] + abs_tol) && bad < 0) bad = (long)i;
        if (err > worst || err != err) worst = err;
    }
    if (bad >= 0)
        report(false, name, "element %ld: got %.9g, want %.9g, allowed %.3g (max err %.3g)", bad, (double)got[bad],
               (double)ref[bad], rel * (double)scale[bad] + abs_tol, worst);
    else
        report(true, name, "max err %.3g = %.2g of max|ref| %.3g", worst, max_abs(ref) > 0 ? worst / max_abs(ref) : 0.0,
               max_abs(ref));
}
template <class T16>
static void check16(const char* name, const std::vector<T16>& got, const std::vector<float>& ref) {
    const double abs_tol = fmax(Dtype<T16>::abs_frac * max_abs(ref), Dtype<T16>::abs_min);
    check_close(name, from16(got), ref, Dtype<T16>::rel, abs_tol);
}
// got must be exactly T16(ref) (round to nearest even): for kernels whose fp32 arithmetic
// is the CPU twin's, operation for operation.
template <class T16>
static void check16_exact(const char* name, const std::vector<T16>& got, const std::vector<float>& ref) {
    if (got.size() != ref.size()) { report(false, name, "size %zu vs %zu", got.size(), ref.size()); return; }
    for (size_t i = 0; i < ref.size(); i++) {
        const T16 want = from_float<T16>(ref[i]);
        const bool both_nan = isnan(to_float(got[i])) && isnan(ref[i]);
        if (bits_of(got[i]) != bits_of(want) && !both_nan) {
            report(false, name, "element %zu: got %.9g (0x%04x), want %s(%.9g) = 0x%04x", i, (double)to_float(got[i]),
                   bits_of(got[i]), Dtype<T16>::name, (double)ref[i], bits_of(want));
            return;
        }
    }
    report(true, name, "bitwise equal to %s(cpu), %zu elements", Dtype<T16>::name, ref.size());
}
template <class T>
static void check_bitwise(const char* name, const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size()) { report(false, name, "size %zu vs %zu", a.size(), b.size()); return; }
    for (size_t i = 0; i < a.size(); i++) {
        if (memcmp(&a[i], &b[i], sizeof(T)) != 0) {
            report(false, name, "first difference at element %zu of %zu", i, a.size());
            return;
        }
    }
    report(true, name, "bitwise equal, %zu elements", a.size());
}

// ----------------------------------------------------------------------------
// Encoder

template <class T16>
static void test_encoder(Rng& rng, int B, int T, int C, int V, bool one_token) {
    const DtypeScope<T16> dtype;
    char name[200];
    const int N = B * T;
    std::vector<int> inp(N);
    for (int n = 0; n < N; n++) inp[n] = one_token ? V / 2 : rng.below(V);
    std::vector<float> wte = rand16<T16>(rng, (size_t)V * C, 0.5f), wpe = rand16<T16>(rng, (size_t)T * C, 0.5f);
    int* d_inp = dev_upload(inp);
    T16* d_wte = dev_upload(to16<T16>(wte));
    T16* d_wpe = dev_upload(to16<T16>(wpe));
    T16* d_out = dev_alloc<T16>((size_t)N * C);

    // Forward: one fp32 add, then round: exactly bf16 of the CPU's fp32 result.
    std::vector<float> ref((size_t)N * C);
    encoder_forward(ref.data(), inp.data(), wte.data(), wpe.data(), B, T, C, 0, V);
    encoder_forward_cuda(d_out, d_inp, d_wte, d_wpe, B, T, C, 0, V, 0);
    snprintf(name, sizeof name, "encoder_forward B=%d T=%d C=%d V=%d", B, T, C, V);
    check16_exact(name, dev_download(d_out, (size_t)N * C), ref);

    // Backward, accumulating into nonzero gradients. The GPU adds every row to dwte/dwpe in
    // the CPU twin's order, so the fp32 sums are identical: bitwise equal to bf16(cpu).
    std::vector<float> dout = rand16<T16>(rng, (size_t)N * C, 1.0f);
    std::vector<float> dwte0 = rand16<T16>(rng, (size_t)V * C, 0.1f), dwpe0 = rand16<T16>(rng, (size_t)T * C, 0.1f);
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C, 0, V);
    T16* d_dout = dev_upload(to16<T16>(dout));
    T16* d_dwte = dev_upload(to16<T16>(dwte0));
    T16* d_dwpe = dev_upload(to16<T16>(dwpe0));
    const size_t sbytes = encoder_backward_scratch_bytes(B, T, V);
    void* scratch = dev_scratch(sbytes);
    encoder_backward_cuda(d_dwte, d_dwpe, scratch, sbytes, d_dout, d_inp, B, T, C, V, 0, V, 1, 0);
    std::vector<T16> g_dwte = dev_download(d_dwte, (size_t)V * C), g_dwpe = dev_download(d_dwpe, (size_t)T * C);
    snprintf(name, sizeof name, "encoder_backward dwte B=%d T=%d C=%d V=%d%s", B, T, C, V, one_token ? " (one token id)" : "");
    check16_exact(name, g_dwte, dwte);
    snprintf(name, sizeof name, "encoder_backward dwpe B=%d T=%d C=%d", B, T, C);
    check16_exact(name, g_dwpe, dwpe);
    // Determinism: again from the same state.
    dev_set(d_dwte, to16<T16>(dwte0));
    dev_set(d_dwpe, to16<T16>(dwpe0));
    encoder_backward_cuda(d_dwte, d_dwpe, scratch, sbytes, d_dout, d_inp, B, T, C, V, 0, V, 1, 0);
    snprintf(name, sizeof name, "encoder_backward deterministic B=%d T=%d C=%d V=%d", B, T, C, V);
    std::vector<T16> both1 = g_dwte, both2 = dev_download(d_dwte, (size_t)V * C);
    both1.insert(both1.end(), g_dwpe.begin(), g_dwpe.end());
    std::vector<T16> p2 = dev_download(d_dwpe, (size_t)T * C);
    both2.insert(both2.end(), p2.begin(), p2.end());
    check_bitwise(name, both1, both2);
    // accumulate 0: dwpe overwritten, never read (NaN there must not show); dwte still added to.
    std::vector<float> dwte_o = dwte0, dwpe_o((size_t)T * C, 0.0f);
    encoder_backward(dwte_o.data(), dwpe_o.data(), dout.data(), inp.data(), B, T, C, 0, V);
    dev_set(d_dwte, to16<T16>(dwte0));
    dev_set(d_dwpe, to16<T16>(std::vector<float>((size_t)T * C, NAN)));
    encoder_backward_cuda(d_dwte, d_dwpe, scratch, sbytes, d_dout, d_inp, B, T, C, V, 0, V, 0, 0);
    snprintf(name, sizeof name, "encoder_backward overwrite: dwte added to B=%d T=%d C=%d V=%d", B, T, C, V);
    check16_exact(name, dev_download(d_dwte, (size_t)V * C), dwte_o);
    snprintf(name, sizeof name, "encoder_backward overwrite: dwpe over NaN B=%d T=%d C=%d", B, T, C);
    check16_exact(name, dev_download(d_dwpe, (size_t)T * C), dwpe_o);

    cudaFree(d_inp); cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_out); cudaFree(d_dout);
    cudaFree(d_dwte); cudaFree(d_dwpe); cudaFree(scratch);
}

// The embedding over a tensor-parallel rank's vocabulary range, against the CPU twin with the
// same range (itself checked in test_kernels_cpu: the whole range is the arithmetic of before,
// the ranges' partial embeddings sum to the full one). test_encoder above runs the whole range.
// Each rank's forward reads its slice of one wte (wpe: rank 0 only); each rank's backward adds
// into its slice of one dwte (dwpe: rank 0), so every row is added to by one rank: bitwise
// T16(cpu), and a rank writing outside its slice shows as a row added to twice. V < Vp: the
// last rank of tp = 4 has no token.
template <class T16>
static void test_encoder_vocab_split(int B, int T, int C, int V, int Vp, bool with_wpe) {
    const DtypeScope<T16> dtype;
    Rng rng(4242);  // its own inputs: the other tests' random stream stays as it was
    char name[200];
    const int N = B * T;
    std::vector<int> inp(N);
    for (int n = 0; n < N; n++) inp[n] = rng.below(V);
    inp[0] = Vp / 4 - 1;
    inp[1] = Vp / 4;
    std::vector<float> wte = rand16<T16>(rng, (size_t)Vp * C, 0.5f), wpe = rand16<T16>(rng, (size_t)T * C, 0.5f);
    std::vector<float> dout = rand16<T16>(rng, (size_t)N * C, 1.0f);
    std::vector<float> dwte0 = rand16<T16>(rng, (size_t)Vp * C, 0.1f), dwpe0 = rand16<T16>(rng, (size_t)T * C, 0.1f);
    int* d_inp = dev_upload(inp);
    T16* d_wte = dev_upload(to16<T16>(wte));
    T16* d_wpe = dev_upload(to16<T16>(wpe));
    T16* d_dout = dev_upload(to16<T16>(dout));
    T16* d_dwte = dev_alloc<T16>((size_t)Vp * C);
    T16* d_dwpe = dev_alloc<T16>((size_t)T * C);
    T16* d_out = dev_alloc<T16>((size_t)N * C);
    const size_t sbytes = encoder_backward_scratch_bytes(B, T, V);
    void* scratch = dev_scratch(sbytes);
    for (int tp = 2; tp <= 4; tp += 2) {
        const int rows = Vp / tp;
        std::vector<float> ref, part((size_t)N * C), dwte = dwte0, dwpe = dwpe0;
        std::vector<T16> got;
        dev_set(d_dwte, to16<T16>(dwte0));
        dev_set(d_dwpe, to16<T16>(dwpe0));
        for (int t = 0; t < tp; t++) {
            const int vb = t * rows;
            const bool pos = with_wpe && t == 0;
            encoder_forward(part.data(), inp.data(), wte.data() + (size_t)vb * C, pos ? wpe.data() : NULL, B, T, C, vb,
                            vb + rows);
            encoder_forward_cuda(d_out, d_inp, d_wte + (size_t)vb * C, pos ? d_wpe : NULL, B, T, C, vb, vb + rows, 0);
            ref.insert(ref.end(), part.begin(), part.end());
            std::vector<T16> g = dev_download(d_out, (size_t)N * C);
            got.insert(got.end(), g.begin(), g.end());
            encoder_backward(dwte.data() + (size_t)vb * C, pos ? dwpe.data() : NULL, dout.data(), inp.data(), B, T, C, vb,
                             vb + rows);
            encoder_backward_cuda(d_dwte + (size_t)vb * C, pos ? d_dwpe : NULL, scratch, sbytes, d_dout, d_inp, B, T, C, V, vb,
                                  vb + rows, 1, 0);
        }
        snprintf(name, sizeof name, "encoder_forward tp=%d vocabulary ranges%s B=%d T=%d C=%d V=%d Vp=%d", tp,
                 with_wpe ? "" : " without wpe", B, T, C, V, Vp);
        check16_exact(name, got, ref);
        snprintf(name, sizeof name, "encoder_backward tp=%d vocabulary ranges: dwte slices%s B=%d T=%d C=%d V=%d Vp=%d", tp,
                 with_wpe ? "" : " without wpe", B, T, C, V, Vp);
        check16_exact(name, dev_download(d_dwte, (size_t)Vp * C), dwte);
        if (with_wpe) {
            snprintf(name, sizeof name, "encoder_backward tp=%d vocabulary ranges: rank 0's dwpe B=%d T=%d C=%d", tp, B, T, C);
            check16_exact(name, dev_download(d_dwpe, (size_t)T * C), dwpe);
        }
    }
    cudaFree(d_inp); cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_dout); cudaFree(d_dwte); cudaFree(d_dwpe);
    cudaFree(d_out); cudaFree(scratch);
}

// ----------------------------------------------------------------------------
// LayerNorm

// The norms' epsilon of both families' presets (ModelConfig.norm_eps's default); the forward
// tests also run at kOtherEps, large enough (these rows' variance is ~1) that a kernel adding
// another eps than the one it is given fails them.
static constexpr float kNormEps = 1e-5f, kOtherEps = 0.5f;

template <class T16>
static void test_layernorm_forward(Rng& rng, int N, int C, bool fused, bool alias, float eps) {
    const DtypeScope<T16> dtype;
    char name[240];
    char tag[160];
    snprintf(tag, sizeof tag, "%s eps=%g",
             fused ? (alias ? "fused_residual_layernorm_forward (residual aliases a)" : "fused_residual_layernorm_forward")
                   : "layernorm_forward", (double)eps);
    // Inputs with a mean far from 0 exercise the two-pass variance.
    std::vector<float> a = rand16<T16>(rng, (size_t)N * C, 1.5f, 3.0f);
    std::vector<float> b = rand16<T16>(rng, (size_t)N * C, 1.0f);
    std::vector<float> w = rand16<T16>(rng, C, 0.3f, 1.0f), bias = rand16<T16>(rng, C, 0.2f);
    std::vector<float> x = a;  // what the layernorm sees
    if (fused) {
        residual_forward(x.data(), a.data(), b.data(), x.size());
        for (auto& v : x) v = round16<T16>(v);  // the GPU normalises the rounded residual
    }
    std::vector<float> out((size_t)N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C, eps);

    T16* d_a = dev_upload(to16<T16>(a));
    T16* d_b = dev_upload(to16<T16>(b));
    T16* d_w = dev_upload(to16<T16>(w));
    T16* d_bias = dev_upload(to16<T16>(bias));
    T16* d_out = dev_alloc<T16>((size_t)N * C);
    T16* d_res = alias ? d_a : dev_alloc<T16>((size_t)N * C);
    float* d_mean = dev_alloc<float>(N);
    float* d_rstd = dev_alloc<float>(N);
    if (fused) fused_residual_layernorm_forward_cuda(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, eps, 0);
    else layernorm_forward_cuda(d_out, d_mean, d_rstd, d_a, d_w, d_bias, N, C, eps, 0);

    if (fused) {
        snprintf(name, sizeof name, "%s residual N=%d C=%d", tag, N, C);
        std::vector<float> sum((size_t)N * C);
        residual_forward(sum.data(), a.data(), b.data(), sum.size());
        check16_exact(name, dev_download(d_res, (size_t)N * C), sum);
    }
    snprintf(name, sizeof name, "%s out N=%d C=%d", tag, N, C);
    check16(name, dev_download(d_out, (size_t)N * C), out);
    snprintf(name, sizeof name, "%s mean N=%d C=%d", tag, N, C);
    check_close(name, dev_download(d_mean, N), mean, STAT_TOL_REL, MEAN_TOL_OF_MAX_INPUT * max_abs(x));
    snprintf(name, sizeof name, "%s rstd N=%d C=%d", tag, N, C);
    check_close(name, dev_download(d_rstd, N), rstd, STAT_TOL_REL, 0.0);

    cudaFree(d_a); cudaFree(d_b); cudaFree(d_w); cudaFree(d_bias); cudaFree(d_out);
    if (!alias) cudaFree(d_res);
    cudaFree(d_mean); cudaFree(d_rstd);
}

template <class T16>
static void test_layernorm_backward(Rng& rng, int N, int C) {
    const DtypeScope<T16> dtype;
    char name[200];
    std::vector<float> x = rand16<T16>(rng, (size_t)N * C, 1.5f, 2.0f);
    std::vector<float> w = rand16<T16>(rng, C, 0.3f, 1.0f), bias = rand16<T16>(rng, C, 0.2f);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C, kNormEps);
    std::vector<float> dout = rand16<T16>(rng, (size_t)N * C, 1.0f);
    std::vector<float> dinp0 = rand16<T16>(rng, (size_t)N * C, 0.5f);
    std::vector<float> dw0 = rand16<T16>(rng, C, 1.0f), db0 = rand16<T16>(rng, C, 1.0f);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C);

    T16* d_x = dev_upload(to16<T16>(x));
    T16* d_w = dev_upload(to16<T16>(w));
    T16* d_dout = dev_upload(to16<T16>(dout));
    float* d_mean = dev_upload(mean);
    float* d_rstd = dev_upload(rstd);
    T16* d_dinp = dev_upload(to16<T16>(dinp0));
    T16* d_dw = dev_upload(to16<T16>(dw0));
    T16* d_db = dev_upload(to16<T16>(db0));
    const size_t sbytes = layernorm_backward_scratch_bytes(N, C);
    void* scratch = dev_scratch(sbytes);
    layernorm_backward_cuda(d_dinp, d_dw, d_db, scratch, sbytes, d_dout, d_x, d_w, d_mean, d_rstd, N, C, 1, 0);
    std::vector<T16> g_dinp = dev_download(d_dinp, (size_t)N * C), g_dw = dev_download(d_dw, C), g_db = dev_download(d_db, C);
    snprintf(name, sizeof name, "layernorm_backward dinp N=%d C=%d", N, C);
    check16(name, g_dinp, dinp);
    snprintf(name, sizeof name, "layernorm_backward dweight N=%d C=%d", N, C);
    check16(name, g_dw, dw);
    snprintf(name, sizeof name, "layernorm_backward dbias N=%d C=%d", N, C);
    check16(name, g_db, db);

    dev_set(d_dinp, to16<T16>(dinp0));
    dev_set(d_dw, to16<T16>(dw0));
    dev_set(d_db, to16<T16>(db0));
    layernorm_backward_cuda(d_dinp, d_dw, d_db, scratch, sbytes, d_dout, d_x, d_w, d_mean, d_rstd, N, C, 1, 0);
    std::vector<T16> all1 = g_dinp, all2 = dev_download(d_dinp, (size_t)N * C);
    all1.insert(all1.end(), g_dw.begin(), g_dw.end());
    all1.insert(all1.end(), g_db.begin(), g_db.end());
    std::vector<T16> w2 = dev_download(d_dw, C), b2 = dev_download(d_db, C);
    all2.insert(all2.end(), w2.begin(), w2.end());
    all2.insert(all2.end(), b2.begin(), b2.end());
    snprintf(name, sizeof name, "layernorm_backward deterministic N=%d C=%d", N, C);
    check_bitwise(name, all1, all2);

    // accumulate 0: dweight and dbias overwritten, never read (NaN there must not show).
    std::vector<float> dinp_o = dinp0, dw_o(C, 0.0f), db_o(C, 0.0f);
    layernorm_backward(dinp_o.data(), dw_o.data(), db_o.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    dev_set(d_dinp, to16<T16>(dinp0));
    dev_set(d_dw, to16<T16>(std::vector<float>(C, NAN)));
    dev_set(d_db, to16<T16>(std::vector<float>(C, NAN)));
    layernorm_backward_cuda(d_dinp, d_dw, d_db, scratch, sbytes, d_dout, d_x, d_w, d_mean, d_rstd, N, C, 0, 0);
    snprintf(name, sizeof name, "layernorm_backward overwrite: dinp N=%d C=%d", N, C);
    check16(name, dev_download(d_dinp, (size_t)N * C), dinp_o);
    snprintf(name, sizeof name, "layernorm_backward overwrite: dweight over NaN N=%d C=%d", N, C);
    check16(name, dev_download(d_dw, C), dw_o);
    snprintf(name, sizeof name, "layernorm_backward overwrite: dbias over NaN N=%d C=%d", N, C);
    check16(name, dev_download(d_db, C), db_o);

    cudaFree(d_x); cudaFree(d_w); cudaFree(d_dout); cudaFree(d_mean); cudaFree(d_rstd);
    cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db); cudaFree(scratch);
}

// ----------------------------------------------------------------------------
// GELU (flat kernels; misalign = 1 runs on pointers one element past an
// allocation, so the scalar path is used)

template <class T16>
static void test_gelu(Rng& rng, size_t n, int misalign) {
    const DtypeScope<T16> dtype;
    char name[200];
    const char* tag = misalign ? " unaligned" : "";
    std::vector<float> x = rand16<T16>(rng, n, 3.0f);  // covers the tails (|x| up to ~15)
    std::vector<float> dout = rand16<T16>(rng, n, 1.0f), dinp0 = rand16<T16>(rng, n, 0.5f);
    std::vector<float> out(n), dinp = dinp0, dzero(n, 0.0f);
    gelu_forward(out.data(), x.data(), n);
    gelu_backward(dinp.data(), x.data(), dout.data(), n);
    gelu_backward(dzero.data(), x.data(), dout.data(), n);  // = gelu'(x) * dout

    T16* d_x = dev_alloc<T16>(n + 1);
    T16* d_out = dev_alloc<T16>(n + 1);
    T16* d_dout = dev_alloc<T16>(n + 1);
    T16* d_dinp = dev_alloc<T16>(n + 1);
    T16* X = d_x + misalign; T16* O = d_out + misalign; T16* D = d_dout + misalign; T16* DI = d_dinp + misalign;
    dev_set(X, to16<T16>(x));
    dev_set(D, to16<T16>(dout));
    dev_set(DI, to16<T16>(dinp0));
    gelu_forward_cuda(O, X, n, 0);
    snprintf(name, sizeof name, "gelu_forward n=%zu%s", n, tag);
    check16(name, dev_download(O, n), out);
    gelu_backward_cuda(DI, X, D, n, 0);
    snprintf(name, sizeof name, "gelu_backward (accumulate) n=%zu%s", n, tag);
    check16(name, dev_download(DI, n), dinp);
    gelu_backward_inplace_cuda(D, X, n, 0);
    snprintf(name, sizeof name, "gelu_backward_inplace n=%zu%s", n, tag);
    check16(name, dev_download(D, n), dzero);
    // In place forward: out aliases inp.
    gelu_forward_cuda(X, X, n, 0);
    snprintf(name, sizeof name, "gelu_forward in place n=%zu%s", n, tag);
    check16(name, dev_download(X, n), out);
    cudaFree(d_x); cudaFree(d_out); cudaFree(d_dout); cudaFree(d_dinp);
}

// ----------------------------------------------------------------------------
// Bias gradient (CPU twin: matmul_backward's dbias, with a 1-channel input)

template <class T16>
static void test_bias_backward(Rng& rng, int N, int OC) {
    const DtypeScope<T16> dtype;
    char name[200];
    std::vector<float> dout = rand16<T16>(rng, (size_t)N * OC, 1.0f);
    std::vector<float> db0 = rand16<T16>(rng, OC, 1.0f), db = db0;
    std::vector<float> inp(N, 0.0f), weight(OC, 0.0f), dweight(OC, 0.0f);
    matmul_backward(NULL, dweight.data(), db.data(), dout.data(), inp.data(), weight.data(), N, 1, OC);
    T16* d_dout = dev_upload(to16<T16>(dout));
    T16* d_db = dev_upload(to16<T16>(db0));
    const size_t sbytes = bias_backward_scratch_bytes(N, OC);
    void* scratch = dev_scratch(sbytes);
    bias_backward_cuda(d_db, scratch, sbytes, d_dout, N, OC, 1, 0);
    std::vector<T16> g1 = dev_download(d_db, OC);
    snprintf(name, sizeof name, "bias_backward N=%d OC=%d", N, OC);
    check16(name, g1, db);
    dev_set(d_db, to16<T16>(db0));
    bias_backward_cuda(d_db, scratch, sbytes, d_dout, N, OC, 1, 0);
    snprintf(name, sizeof name, "bias_backward deterministic N=%d OC=%d", N, OC);
    check_bitwise(name, g1, dev_download(d_db, OC));
    // accumulate 0: overwritten, never read (NaN there must not show).
    std::vector<float> db_o(OC, 0.0f), dweight_o(OC, 0.0f);
    matmul_backward(NULL, dweight_o.data(), db_o.data(), dout.data(), inp.data(), weight.data(), N, 1, OC);
    dev_set(d_db, to16<T16>(std::vector<float>(OC, NAN)));
    bias_backward_cuda(d_db, scratch, sbytes, d_dout, N, OC, 0, 0);
    snprintf(name, sizeof name, "bias_backward overwrite over NaN N=%d OC=%d", N, OC);
    check16(name, dev_download(d_db, OC), db_o);
    cudaFree(d_dout); cudaFree(d_db); cudaFree(scratch);
}

// ----------------------------------------------------------------------------
// Fused softmax + cross-entropy

template <class T16>
static void test_crossentropy(Rng& rng, int N, int V, int Vp) {
    const DtypeScope<T16> dtype;
    char name[200];
    std::vector<float> logits = rand16<T16>(rng, (size_t)N * Vp, 2.0f);
    for (int i = 0; i < N; i++)  // padded columns hold junk that must be ignored
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 100.0f;
    std::vector<int> targets(N);
    for (int i = 0; i < N; i++) targets[i] = rng.below(V);
    const float dloss = 1.0f / (float)N;
    std::vector<float> ref = logits, losses(N);
    crossentropy_softmax_fused(ref.data(), losses.data(), targets.data(), N, V, Vp, dloss);

    T16* d_logits = dev_upload(to16<T16>(logits));
    int* d_targets = dev_upload(targets);
    float* d_losses = dev_alloc<float>(N);
    // Evaluation (dloss = 0): losses only, logits untouched.
    crossentropy_softmax_fused_cuda(d_logits, d_losses, d_targets, N, V, Vp, 0.0f, NULL, 0);
    snprintf(name, sizeof name, "crossentropy losses (dloss=0) N=%d V=%d Vp=%d", N, V, Vp);
    check_close(name, dev_download(d_losses, N), losses, STAT_TOL_REL, LOSS_TOL_ABS);
    snprintf(name, sizeof name, "crossentropy dloss=0 leaves logits untouched N=%d V=%d Vp=%d", N, V, Vp);
    check_bitwise(name, dev_download(d_logits, (size_t)N * Vp), to16<T16>(logits));
    // Training: dlogits in place (no loss scale: dloss_scale NULL).
    crossentropy_softmax_fused_cuda(d_logits, d_losses, d_targets, N, V, Vp, dloss, NULL, 0);
    std::vector<float> g_losses = dev_download(d_losses, N);
    std::vector<T16> g_dlogits = dev_download(d_logits, (size_t)N * Vp);
    snprintf(name, sizeof name, "crossentropy losses N=%d V=%d Vp=%d", N, V, Vp);
    check_close(name, g_losses, losses, STAT_TOL_REL, LOSS_TOL_ABS);
    snprintf(name, sizeof name, "crossentropy dlogits in place N=%d V=%d Vp=%d", N, V, Vp);
    check16(name, g_dlogits, ref);
    bool pad_zero = true;
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) pad_zero = pad_zero && bits_of(g_dlogits[(size_t)i * Vp + j]) == 0;
    snprintf(name, sizeof name, "crossentropy padded columns get +0 N=%d V=%d Vp=%d", N, V, Vp);
    report(pad_zero, name, pad_zero ? NULL : "a padded column is not +0");
    // Determinism.
    dev_set(d_logits, to16<T16>(logits));
    crossentropy_softmax_fused_cuda(d_logits, d_losses, d_targets, N, V, Vp, dloss, NULL, 0);
    snprintf(name, sizeof name, "crossentropy deterministic N=%d V=%d Vp=%d", N, V, Vp);
    std::vector<float> l2 = dev_download(d_losses, N);
    check_bitwise(name, g_dlogits, dev_download(d_logits, (size_t)N * Vp));
    snprintf(name, sizeof name, "crossentropy losses deterministic N=%d V=%d Vp=%d", N, V, Vp);
    check_bitwise(name, g_losses, l2);
    // Loss scaling: dloss_scale (device) multiplies dloss. A scale of 1 gives the bits of NULL;
    // 1024 (a power of two: exact in fp32, so the fp32 dlogits are exactly 1024 times the
    // unscaled ones) gives dlogits within the same tolerance of 1024 x the CPU twin's (in fp16
    // they are then normal numbers: checked to 2^-11 of each element), and leaves the losses.
    float* d_scale = dev_upload(std::vector<float>{1.0f});
    dev_set(d_logits, to16<T16>(logits));
    crossentropy_softmax_fused_cuda(d_logits, d_losses, d_targets, N, V, Vp, dloss, d_scale, 0);
    snprintf(name, sizeof name, "crossentropy dloss_scale 1 gives the dlogits of NULL N=%d V=%d Vp=%d", N, V, Vp);
    check_bitwise(name, g_dlogits, dev_download(d_logits, (size_t)N * Vp));
    dev_set(d_scale, std::vector<float>{1024.0f});
    dev_set(d_logits, to16<T16>(logits));
    crossentropy_softmax_fused_cuda(d_logits, d_losses, d_targets, N, V, Vp, dloss, d_scale, 0);
    std::vector<float> ref_scaled = ref;
    for (float& v : ref_scaled) v *= 1024.0f;
    snprintf(name, sizeof name, "crossentropy dlogits with dloss_scale 1024 = 1024 x cpu N=%d V=%d Vp=%d", N, V, Vp);
    check16(name, dev_download(d_logits, (size_t)N * Vp), ref_scaled);
    snprintf(name, sizeof name, "crossentropy losses unchanged by dloss_scale 1024 N=%d V=%d Vp=%d", N, V, Vp);
    check_bitwise(name, dev_download(d_losses, N), g_losses);
    cudaFree(d_logits); cudaFree(d_targets); cudaFree(d_losses); cudaFree(d_scale);
}

template <class T16>
static void test_crossentropy_bad_target(Rng& rng) {
    const DtypeScope<T16> dtype;
    const int N = 2, V = 10, Vp = 16;
    std::vector<float> logits = rand16<T16>(rng, (size_t)N * Vp, 1.0f);
    std::vector<int> targets = {-1, V};
    T16* d_logits = dev_upload(to16<T16>(logits));
    int* d_targets = dev_upload(targets);
    float* d_losses = dev_alloc<float>(N);
    crossentropy_softmax_fused_cuda(d_logits, d_losses, d_targets, N, V, Vp, 0.5f, NULL, 0);
    std::vector<float> l = dev_download(d_losses, N);
    report(isnan(l[0]) && isnan(l[1]), "crossentropy target outside [0, V) gives a NaN loss",
           "losses %g %g", (double)l[0], (double)l[1]);
    cudaFree(d_logits); cudaFree(d_targets); cudaFree(d_losses);
}

// The vocab-parallel cross-entropy's three phases against their CPU twins, each rank of a tp
// group in turn on its columns (Vp / tp of them, the first V_local real), the group's
// reductions done on the host from the CPU's results so that both sides see the same inputs at
// every phase: the maxima bitwise (the same values compared), the sums and losses within the
// fp32 statistics' tolerance (sums in another order, expf vs fast_expf), the dlogits within the
// storage type's, padding +0; dloss = 0 leaves the logits alone; dloss_scale 1024 gives 1024 x
// the CPU's dlogits. V < Vp: a rank with padding, and with tp = 4 one with no real column.
template <class T16>
static void test_crossentropy_vocab_split(int N, int V, int Vp, int tp) {
    const DtypeScope<T16> dtype;
    Rng rng(1717);  // its own inputs: the other tests' random stream stays as it was
    char name[200], tag[80];
    snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d tp=%d", N, V, Vp, tp);
    const int Vl = Vp / tp;
    std::vector<float> logits = rand16<T16>(rng, (size_t)N * Vp, 2.0f);
    for (int i = 0; i < N; i++)  // padded columns hold junk that must be ignored
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 100.0f;
    std::vector<int> targets(N);
    for (int i = 0; i < N; i++) targets[i] = rng.below(V);
    targets[0] = V - 1;
    const float dloss = 1.0f / (float)N;
    auto local_vocab = [&](int vb) { return V - vb < 0 ? 0 : V - vb > Vl ? Vl : V - vb; };
    std::vector<std::vector<float>> part(tp);
    std::vector<float> row_max(N, -INFINITY), sums(2 * (size_t)N, 0.0f), rm(N), s(2 * (size_t)N);
    std::vector<float> got_max, want_max;
    for (int t = 0; t < tp; t++) {
        part[t].resize((size_t)N * Vl);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vl; j++) part[t][(size_t)i * Vl + j] = logits[(size_t)i * Vp + t * Vl + j];
        crossentropy_tp_max(rm.data(), part[t].data(), N, local_vocab(t * Vl), Vl);
        for (int i = 0; i < N; i++) row_max[i] = fmaxf(row_max[i], rm[i]);
        want_max.insert(want_max.end(), rm.begin(), rm.end());
    }
    std::vector<float> got_sums, want_sums;
    for (int t = 0; t < tp; t++) {
        crossentropy_tp_sums(s.data(), part[t].data(), row_max.data(), targets.data(), N, local_vocab(t * Vl), Vl, t * Vl);
        for (size_t i = 0; i < s.size(); i++) sums[i] += s[i];
        want_sums.insert(want_sums.end(), s.begin(), s.end());
    }
    int* d_targets = dev_upload(targets);
    float* d_row_max = dev_upload(row_max);
    float* d_sums = dev_upload(sums);
    float* d_out = dev_alloc<float>(2 * (size_t)N);
    float* d_losses = dev_alloc<float>(N);
    float* d_scale = dev_upload(std::vector<float>{1024.0f});
    T16* d_part = dev_alloc<T16>((size_t)N * Vl);
    std::vector<float> got_losses, want_losses, want_dlogits, want_scaled;
    std::vector<T16> got_dlogits, got_scaled;
    bool untouched = true, pad_zero = true;
    for (int t = 0; t < tp; t++) {
        const int vb = t * Vl, V_local = local_vocab(vb);
        const std::vector<T16> p16 = to16<T16>(part[t]);
        dev_set(d_part, p16);
        crossentropy_tp_max_cuda(d_out, d_part, N, V_local, Vl, 0);
        std::vector<float> g = dev_download(d_out, N);
        got_max.insert(got_max.end(), g.begin(), g.end());
        crossentropy_tp_sums_cuda(d_out, d_part, d_row_max, d_targets, N, V_local, Vl, vb, 0);
        g = dev_download(d_out, 2 * (size_t)N);
        got_sums.insert(got_sums.end(), g.begin(), g.end());
        // dloss = 0: losses only.
        crossentropy_tp_finish_cuda(d_part, d_losses, d_row_max, d_sums, d_targets, N, V_local, Vl, vb, 0.0f, NULL, 0);
        const std::vector<T16> after = dev_download(d_part, (size_t)N * Vl);
        for (size_t i = 0; i < after.size(); i++) untouched = untouched && bits_of(after[i]) == bits_of(p16[i]);
        std::vector<float> ref = part[t], losses(N);
        crossentropy_tp_finish(ref.data(), losses.data(), row_max.data(), sums.data(), targets.data(), N, V_local, Vl, vb,
                               dloss);
        want_losses.insert(want_losses.end(), losses.begin(), losses.end());
        g = dev_download(d_losses, N);
        got_losses.insert(got_losses.end(), g.begin(), g.end());
        want_dlogits.insert(want_dlogits.end(), ref.begin(), ref.end());
        crossentropy_tp_finish_cuda(d_part, d_losses, d_row_max, d_sums, d_targets, N, V_local, Vl, vb, dloss, NULL, 0);
        std::vector<T16> d = dev_download(d_part, (size_t)N * Vl);
        for (int i = 0; i < N; i++)
            for (int j = V_local; j < Vl; j++) pad_zero = pad_zero && bits_of(d[(size_t)i * Vl + j]) == 0;
        got_dlogits.insert(got_dlogits.end(), d.begin(), d.end());
        dev_set(d_part, p16);
        crossentropy_tp_finish_cuda(d_part, d_losses, d_row_max, d_sums, d_targets, N, V_local, Vl, vb, dloss, d_scale, 0);
        d = dev_download(d_part, (size_t)N * Vl);
        got_scaled.insert(got_scaled.end(), d.begin(), d.end());
        for (float v : ref) want_scaled.push_back(v * 1024.0f);
    }
    snprintf(name, sizeof name, "crossentropy_tp max %s", tag);
    check_bitwise(name, got_max, want_max);
    snprintf(name, sizeof name, "crossentropy_tp sums %s", tag);
    check_close(name, got_sums, want_sums, STAT_TOL_REL, LOSS_TOL_ABS);
    snprintf(name, sizeof name, "crossentropy_tp losses %s", tag);
    check_close(name, got_losses, want_losses, STAT_TOL_REL, LOSS_TOL_ABS);
    snprintf(name, sizeof name, "crossentropy_tp dloss=0 leaves logits untouched %s", tag);
    report(untouched, name, untouched ? NULL : "the logits changed");
    snprintf(name, sizeof name, "crossentropy_tp dlogits in place %s", tag);
    check16(name, got_dlogits, want_dlogits);
    snprintf(name, sizeof name, "crossentropy_tp padding columns get +0 %s", tag);
    report(pad_zero, name, pad_zero ? NULL : "a padding column is not +0");
    snprintf(name, sizeof name, "crossentropy_tp dlogits with dloss_scale 1024 = 1024 x cpu %s", tag);
    check16(name, got_scaled, want_scaled);
    cudaFree(d_targets); cudaFree(d_row_max); cudaFree(d_sums); cudaFree(d_out); cudaFree(d_losses); cudaFree(d_scale);
    cudaFree(d_part);
}

// ----------------------------------------------------------------------------
// AdamW and stochastic rounding

template <class T16>
struct AdamState {
    float *p, *m, *v, *g;
    T16* pb;  // the compute-dtype parameter copy
};

template <class T16>
static AdamState<T16> adam_upload(const std::vector<float>& p, const std::vector<float>& m,
                                  const std::vector<float>& v, const std::vector<float>& g) {
    AdamState<T16> s;
    s.p = dev_upload(p); s.m = dev_upload(m); s.v = dev_upload(v); s.g = dev_upload(g);
    s.pb = dev_alloc<T16>(p.size());
    return s;
}
template <class T16>
static void adam_free(AdamState<T16>& s) { cudaFree(s.p); cudaFree(s.m); cudaFree(s.v); cudaFree(s.g); cudaFree(s.pb); }

// bf16's parameter copy is stochastically rounded, fp16's rounded to nearest (store8_param):
// each checked bitwise against its definition; everything else is the same for both.
template <class T16>
static void test_adamw(Rng& rng) {
    const DtypeScope<T16> dtype;
    const char* copy = is_bf16<T16> ? "bf16 SR copy" : "fp16 copy";
    char name[200];
    const size_t n = 100003;  // odd: a scalar tail
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    const uint64_t seed = 0x1234abcdull;
    const size_t goff = 1000000007ull;  // global index of element 0 (beyond 2^29: 64-bit math)
    std::vector<float> p0 = rand_f32(rng, n, 0.5f), m0(n, 0.0f), v0(n, 0.0f);
    std::vector<std::vector<float>> grads;
    for (int t = 0; t < 3; t++) grads.push_back(rand_f32(rng, n, 1.0f));

    // Three steps against the CPU twin.
    std::vector<float> p = p0, m = m0, v = v0;
    AdamState<T16> s = adam_upload<T16>(p0, m0, v0, grads[0]);
    for (int t = 1; t <= 3; t++) {
        adamw_update(p.data(), m.data(), v.data(), grads[t - 1].data(), n, lr, b1, b2, eps, wd, t, gs);
        dev_set(s.g, grads[t - 1]);
        adamw_update_cuda(s.p, s.m, s.v, s.pb, s.g, n, lr, b1, b2, eps, wd, NULL, 0, t, gs, NULL, NULL, seed, goff, 0);
    }
    std::vector<float> gp = dev_download(s.p, n), gm = dev_download(s.m, n), gv = dev_download(s.v, n);
    std::vector<T16> gpb = dev_download(s.pb, n);
    check_close("adamw_update 3 steps: param", gp, p, ADAMW_TOL_REL, ADAMW_TOL_ABS_FRAC * max_abs(p));
    check_close("adamw_update 3 steps: m", gm, m, ADAMW_TOL_REL, ADAMW_TOL_ABS_FRAC * max_abs(m));
    check_close("adamw_update 3 steps: v", gv, v, ADAMW_TOL_REL, ADAMW_TOL_ABS_FRAC * max_abs(v));
    // The bf16 copy is the stochastic rounding of the new master with the documented bits.
    if constexpr (is_bf16<T16>) {
        const uint64_t key = sr_key(seed, 3);
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (bits_of(gpb[i]) != bits_of(sr_round_bf16(gp[i], sr_bits(key, goff + i)))) bad = i;
        report(bad == n, "adamw_update bf16 copy = SR(master, seed, t, global index)",
               bad == n ? NULL : "element %zu differs", bad);
        bool within = true;
        for (size_t i = 0; i < n; i++) {
            const double d = fabs((double)bf16_to_float(gpb[i]) - (double)gp[i]);
            within = within && d <= ldexp(fabs((double)gp[i]), -7);  // below one bf16 ulp
        }
        report(within, "adamw_update bf16 copy within one bf16 ulp of master", NULL);
    } else {  // fp16: exactly __float2half_rn of the new master, seed and step unused
        check16_exact("adamw_update fp16 copy = round to nearest of master", gpb, gp);
    }
    // The standalone copy gives the same bits as the fused one.
    {
        T16* d_sr = dev_alloc<T16>(n);
        param_copy_cuda(d_sr, s.p, n, seed, 3, goff, 0);
        snprintf(name, sizeof name, "param_copy equals the AdamW %s copy", Dtype<T16>::name);
        check_bitwise(name, dev_download(d_sr, n), gpb);
        cudaFree(d_sr);
    }
    // Determinism and the device-side scale: grad_scale 1 with *d_grad_scale = gs is the same.
    {
        AdamState<T16> s2 = adam_upload<T16>(p0, m0, v0, grads[0]);
        float* d_scale = dev_upload(std::vector<float>{gs});
        for (int t = 1; t <= 3; t++) {
            dev_set(s2.g, grads[t - 1]);
            adamw_update_cuda(s2.p, s2.m, s2.v, s2.pb, s2.g, n, lr, b1, b2, eps, wd, NULL, 0, t, 1.0f, d_scale, NULL, seed, goff, 0);
        }
        check_bitwise("adamw_update deterministic, device grad scale (param)", dev_download(s2.p, n), gp);
        snprintf(name, sizeof name, "adamw_update deterministic, device grad scale (%s copy)", Dtype<T16>::name);
        check_bitwise(name, dev_download(s2.pb, n), gpb);
        // The device's skip flag (a step decided as non-finite): nothing changes, even with a
        // NaN gradient.
        int* d_skip = dev_upload(std::vector<int>{1});
        std::vector<float> nan_grad = grads[0];
        nan_grad[7] = NAN;
        dev_set(s2.g, nan_grad);
        adamw_update_cuda(s2.p, s2.m, s2.v, s2.pb, s2.g, n, lr, b1, b2, eps, wd, NULL, 0, 4, 1.0f, d_scale, d_skip, seed,
                          goff, 0);
        check_bitwise("adamw_update with the device skip flag set changes nothing (param)", dev_download(s2.p, n), gp);
        snprintf(name, sizeof name, "adamw_update with the device skip flag set changes nothing (%s copy)",
                 Dtype<T16>::name);
        check_bitwise(name, dev_download(s2.pb, n), gpb);
        adam_free(s2);
        cudaFree(d_scale);
        cudaFree(d_skip);
    }
    // Independent of the split: [0, k) and [k, n) with the matching global offsets (k not a
    // multiple of 8: the second launch runs unaligned, on the scalar path).
    for (size_t k : {(size_t)12345, (size_t)8000}) {
        AdamState<T16> s3 = adam_upload<T16>(p0, m0, v0, grads[0]);
        for (int t = 1; t <= 3; t++) {
            dev_set(s3.g, grads[t - 1]);
            adamw_update_cuda(s3.p, s3.m, s3.v, s3.pb, s3.g, k, lr, b1, b2, eps, wd, NULL, 0, t, gs, NULL, NULL, seed, goff, 0);
            adamw_update_cuda(s3.p + k, s3.m + k, s3.v + k, s3.pb + k, s3.g + k, n - k, lr, b1, b2, eps,
                              wd, NULL, 0, t, gs, NULL, NULL, seed, goff + k, 0);
        }
        snprintf(name, sizeof name, "adamw_update split at %zu equals one launch (param, m, v)", k);
        std::vector<float> a = dev_download(s3.p, n), am = dev_download(s3.m, n), av = dev_download(s3.v, n);
        a.insert(a.end(), am.begin(), am.end());
        a.insert(a.end(), av.begin(), av.end());
        std::vector<float> b = gp;
        b.insert(b.end(), gm.begin(), gm.end());
        b.insert(b.end(), gv.begin(), gv.end());
        check_bitwise(name, a, b);
        snprintf(name, sizeof name, "adamw_update split at %zu equals one launch (%s)", k, copy);
        check_bitwise(name, dev_download(s3.pb, n), gpb);
        adam_free(s3);
    }
    // One launch over a "unit" whose runs differ in decay, against per-run launches (decay on
    // the runs the table marks, 0 elsewhere): bitwise, 16-bit copy included. The runs end off
    // the 8-element groups, so a group meets two of them.
    {
        const std::vector<uint64_t> toggles = {5, 40000, 40003, 77777, 90001, n};  // decayed: [5,40000) [40003,77777) [90001,n)
        const std::vector<size_t> cuts = {0, 5, 40000, 40003, 77777, 90001, n};
        AdamState<T16> su = adam_upload<T16>(p0, m0, v0, grads[0]), sr = adam_upload<T16>(p0, m0, v0, grads[0]);
        uint64_t* d_toggles = dev_upload(toggles);
        for (int t = 1; t <= 3; t++) {
            dev_set(su.g, grads[t - 1]);
            dev_set(sr.g, grads[t - 1]);
            adamw_update_cuda(su.p, su.m, su.v, su.pb, su.g, n, lr, b1, b2, eps, wd, d_toggles, (int)toggles.size(), t, gs,
                              NULL, NULL, seed, goff, 0);
            for (size_t r = 0; r + 1 < cuts.size(); r++) {
                const size_t a = cuts[r], len = cuts[r + 1] - a;
                adamw_update_cuda(sr.p + a, sr.m + a, sr.v + a, sr.pb + a, sr.g + a, len, lr, b1, b2, eps, r % 2 ? wd : 0.0f,
                                  NULL, 0, t, gs, NULL, NULL, seed, goff + a, 0);
            }
        }
        std::vector<float> a = dev_download(su.p, n), b = dev_download(sr.p, n);
        check_bitwise("adamw_update with a decay table equals one launch per run (param)", a, b);
        check_bitwise("adamw_update with a decay table equals one launch per run (m)", dev_download(su.m, n), dev_download(sr.m, n));
        snprintf(name, sizeof name, "adamw_update with a decay table equals one launch per run (%s)", copy);
        check_bitwise(name, dev_download(su.pb, n), dev_download(sr.pb, n));
        bool differs = false;  // the table matters: a no-decay run differs from decaying it
        for (size_t i = 0; i < 5; i++) differs = differs || a[i] != gp[i];
        report(differs, "adamw_update: the first run (no decay) differs from the all-decay launch", NULL);
        adam_free(su); adam_free(sr);
        cudaFree(d_toggles);
    }
    adam_free(s);
}

// Folding reduced shards into the fp32 accumulator: the first copies (no zeroing), later ones
// add, from fp32 or T16, and the fused sum of squares equals sum_squares_cuda of the result.
template <class T16>
static void test_fold_grad(Rng& rng) {
    const DtypeScope<T16> dtype;
    const size_t n = 300007;
    std::vector<float> a = rand_f32(rng, n, 1.0f), b = rand_f32(rng, n, 1.0f);
    std::vector<float> b16 = from16(to16<T16>(b));
    float* d_dst = dev_upload(rand_f32(rng, n, 9.0f));  // garbage: the first fold must overwrite it
    float* d_a = dev_upload(a);
    T16* d_b = dev_upload(to16<T16>(b));
    double* d_sum = dev_upload(std::vector<double>{0.0});
    double* d_ref = dev_upload(std::vector<double>{0.0});
    void* scratch = dev_alloc<unsigned char>(sum_squares_scratch_bytes());
    fold_grad_cuda(d_dst, d_a, n, 1, NULL, NULL, 0, 0);
    check_bitwise("fold_grad first: dst = src (fp32), nothing zeroed before", dev_download(d_dst, n), a);
    fold_grad_cuda(d_dst, d_b, n, 0, d_sum, scratch, sum_squares_scratch_bytes(), 0);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; i++) want[i] = a[i] + b16[i];
    std::vector<float> got = dev_download(d_dst, n);
    char name[64];
    snprintf(name, sizeof name, "fold_grad: dst += %s src", Dtype<T16>::name);
    check_bitwise(name, got, want);
    sum_squares_cuda(d_ref, scratch, sum_squares_scratch_bytes(), d_dst, n, 0, 0);
    const double fused = dev_download(d_sum, 1)[0], ref = dev_download(d_ref, 1)[0];
    double exact = 0.0;
    for (size_t i = 0; i < n; i++) exact += (double)want[i] * (double)want[i];
    report(fabs(fused - ref) <= 1e-12 * ref && fabs(fused - exact) <= 1e-12 * exact,
           "fold_grad's fused sum of squares equals sum_squares_cuda of the result (1e-12)", "fused %.17g, pass %.17g, host %.17g",
           fused, ref, exact);
    // Accumulating: a second fused fold adds its sum to the same double.
    fold_grad_cuda(d_dst, d_a, n, 1, d_sum, scratch, sum_squares_scratch_bytes(), 0);
    double again = 0.0;
    for (size_t i = 0; i < n; i++) again += (double)a[i] * (double)a[i];
    const double two = dev_download(d_sum, 1)[0];
    report(fabs(two - (fused + again)) <= 1e-12 * two, "fold_grad's sum of squares accumulates over folds", "%.17g vs %.17g",
           two, fused + again);
    // Unaligned (scalar path) and a tail: the same values.
    float* d_dst2 = dev_upload(std::vector<float>(n + 1, 0.0f));
    fold_grad_cuda(d_dst2 + 1, d_a, n, 1, NULL, NULL, 0, 0);
    std::vector<float> g2 = dev_download(d_dst2, n + 1);
    check_bitwise("fold_grad unaligned (scalar path)", std::vector<float>(g2.begin() + 1, g2.end()), a);
    cudaFree(d_dst); cudaFree(d_a); cudaFree(d_b); cudaFree(d_sum); cudaFree(d_ref); cudaFree(scratch); cudaFree(d_dst2);
}

static void test_stochastic_rounding(void) {
    const size_t n = (size_t)1 << 20;
    // x between two bf16 neighbours lo < x < hi: E[SR(x)] = x, P(hi) = (x - lo) / (hi - lo).
    const float xs[3] = {1.0f + (1.0f / 3.0f) * 0.0078125f, -3.3f, 1e-3f * 1.2345f};
    bf16* d_out = dev_alloc<bf16>(n);
    float* d_in = dev_alloc<float>(n);
    for (float x : xs) {
        dev_set(d_in, std::vector<float>(n, x));
        param_copy_cuda(d_out, d_in, n, 42, 7, 0, 0);
        std::vector<bf16> r = dev_download(d_out, n);
        // The two neighbours by truncation and truncation + 1 ulp (in magnitude).
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        const uint32_t ulo = u & 0xffff0000u, uhi = ulo + 0x10000u;
        float lo, hi;
        memcpy(&lo, &ulo, sizeof lo);
        memcpy(&hi, &uhi, sizeof hi);
        const double p = ((double)x - lo) / ((double)hi - lo);
        double sum = 0.0;
        size_t up = 0, other = 0;
        for (size_t i = 0; i < n; i++) {
            const float y = bf16_to_float(r[i]);
            sum += y;
            if (y == hi) up++;
            else if (y != lo) other++;
        }
        const double mean = sum / n, frac = (double)up / n;
        const double sigma_mean = fabs((double)hi - lo) * sqrt(p * (1 - p) / n);
        const double sigma_frac = sqrt(p * (1 - p) / n);
        char name[200];
        snprintf(name, sizeof name, "stochastic rounding of %.9g is unbiased", (double)x);
        const bool ok = other == 0 && fabs(mean - x) <= 5 * sigma_mean && fabs(frac - p) <= 5 * sigma_frac;
        report(ok, name, "mean - x = %.3g (5 sigma %.3g; round-to-nearest bias %.3g), P(up) %.5f vs %.5f, %zu off-grid",
               mean - x, 5 * sigma_mean, (double)round_bf16(x) - x, frac, p, other);
    }
    // Exactly representable values never move; inf and NaN pass through.
    {
        const std::vector<float> ex = {1.0f, -2.5f, 0.0f, -0.0f, round_bf16(3.0e38f), INFINITY, -INFINITY, NAN};
        std::vector<float> big(n);
        for (size_t i = 0; i < n; i++) big[i] = ex[i % ex.size()];
        dev_set(d_in, big);
        param_copy_cuda(d_out, d_in, n, 42, 7, 0, 0);
        std::vector<bf16> r = dev_download(d_out, n);
        bool ok = true;
        for (size_t i = 0; i < n; i++) {
            const float y = bf16_to_float(r[i]);
            ok = ok && (isnan(big[i]) ? isnan(y) : (memcmp(&y, &big[i], 4) == 0));
        }
        report(ok, "stochastic rounding keeps bf16 values, +-0, inf and NaN", NULL);
    }
    // Splitting a cast into two launches with the right global offsets changes nothing.
    {
        Rng rng(99);
        std::vector<float> x = rand_f32(rng, 100001, 1.0f);
        float* d_x = dev_upload(x);
        bf16* d_a = dev_alloc<bf16>(x.size());
        bf16* d_b = dev_alloc<bf16>(x.size());
        param_copy_cuda(d_a, d_x, x.size(), 5, 11, 777, 0);
        const size_t k = 33333;
        param_copy_cuda(d_b, d_x, k, 5, 11, 777, 0);
        param_copy_cuda(d_b + k, d_x + k, x.size() - k, 5, 11, 777 + k, 0);
        check_bitwise("param_copy bf16 (stochastic rounding) split into two launches equals one", dev_download(d_b, x.size()),
                      dev_download(d_a, x.size()));
        // And the bits do change with the step.
        param_copy_cuda(d_b, d_x, x.size(), 5, 12, 777, 0);
        std::vector<bf16> a = dev_download(d_a, x.size()), b = dev_download(d_b, x.size());
        size_t diff = 0;
        for (size_t i = 0; i < x.size(); i++) diff += bits_of(a[i]) != bits_of(b[i]);
        report(diff > x.size() / 10, "stochastic rounding bits depend on the step", "%zu of %zu differ", diff, x.size());
        cudaFree(d_x); cudaFree(d_a); cudaFree(d_b);
    }
    cudaFree(d_out); cudaFree(d_in);
}

// Tensor parallelism's rounding key (optimizer_math.h's SrKeyRun): a "global unit" of the
// split shapes (a column-parallel weight of 3 segments, a row-parallel weight, a replicated
// vector, a column-parallel bias of 3 segments), each TP rank's local unit of it for tp = 2
// and 4, its key runs written from the boxes (one per segment; the row-parallel weight one
// strided run), then launches over shards of uneven sizes (cuts inside runs and rows): every
// local element's bf16 bits, from param_copy and from AdamW's fused copy, equal the TP-1
// launch's at its global element, bitwise; the padding past the unit is keyed by the global
// unit's numel + its place. A key of the local index fails this (the runs are what it tests).
static void test_sr_key_runs(void) {
    Rng rng(4242);
    const size_t R = 8, C = 40, OC = 12, RC = 64, NV = 37, BR = 16;   // segment rows, cols; row-parallel; vector; bias segment
    struct Spec { size_t rows, cols; int kind; };   // kind 0: column (3 segments), 1: row, 2: replicated
    const Spec specs[] = {{3 * R, C, 0}, {OC, RC, 1}, {NV, 1, 2}, {3 * BR, 1, 0}};
    size_t goff[4], N = 0;
    for (int t = 0; t < 4; t++) { goff[t] = N; N += specs[t].rows * specs[t].cols; }
    const uint64_t seed = 0x5eedull;
    const int step = 7;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    const std::vector<float> xg = rand_f32(rng, N, 0.7f), gg = rand_f32(rng, N, 1.0f);
    const std::vector<float> zeros(N, 0.0f);
    // The TP-1 launches: the reference bits per global element (and AdamW's new master).
    float* d_xg = dev_upload(xg);
    bf16* d_ref = dev_alloc<bf16>(N);
    param_copy_cuda(d_ref, d_xg, N, seed, step, 0, 0);
    const std::vector<bf16> ref = dev_download(d_ref, N);
    AdamState<bf16> sg = adam_upload<bf16>(xg, zeros, zeros, gg);
    adamw_update_cuda(sg.p, sg.m, sg.v, sg.pb, sg.g, N, lr, b1, b2, eps, 0.0f, NULL, 0, step, 1.0f, NULL, NULL, seed, 0, 0);
    const std::vector<bf16> ref_adam = dev_download(sg.pb, N);
    for (int tp : {2, 4}) {
        for (int r = 0; r < tp; r++) {
            // The local unit: each tensor's local elements in row-major local order, their
            // global indices written out element by element; the runs from the boxes.
            std::vector<uint64_t> gidx;
            std::vector<SrKeyRun> runs;
            for (int t = 0; t < 4; t++) {
                const Spec& sp = specs[t];
                const uint64_t local0 = gidx.size();
                if (sp.kind == 1) {   // [OC, RC/tp] at global column r RC/tp
                    const size_t lc = sp.cols / tp;
                    for (size_t i = 0; i < sp.rows; i++)
                        for (size_t j = 0; j < lc; j++) gidx.push_back(goff[t] + i * sp.cols + r * lc + j);
                    runs.push_back({local0, sp.rows, lc, goff[t] + r * lc, sp.cols});
                } else if (sp.kind == 2) {
                    for (size_t e = 0; e < sp.rows; e++) gidx.push_back(goff[t] + e);
                    runs.push_back({local0, 1, sp.rows, goff[t], sp.rows});
                } else {              // 3 segments of rows/3 rows, rows [seg + r rows/3/tp, + rows/3/tp) each
                    const size_t seg = sp.rows / 3, lr_ = seg / tp;
                    for (int s3 = 0; s3 < 3; s3++) {
                        const size_t g0 = s3 * seg + r * lr_;
                        runs.push_back({(uint64_t)gidx.size(), 1, lr_ * sp.cols, goff[t] + g0 * sp.cols, lr_ * sp.cols});
                        for (size_t i = 0; i < lr_; i++)
                            for (size_t j = 0; j < sp.cols; j++) gidx.push_back(goff[t] + (g0 + i) * sp.cols + j);
                    }
                }
            }
            const size_t n = gidx.size(), pad = 13;
            runs.push_back({n, 1, 1, N, 1});   // the padding: the global unit's numel on
            std::vector<float> xl(n + pad), gl(n + pad, 0.0f);
            for (size_t i = 0; i < n; i++) { xl[i] = xg[gidx[i]]; gl[i] = gg[gidx[i]]; }
            for (size_t p = 0; p < pad; p++) xl[n + p] = 0.3f + 0.01f * p;
            SrKeyRun* d_runs = dev_upload(runs);
            float* d_xl = dev_upload(xl);
            bf16* d_out = dev_alloc<bf16>(n + pad);
            // Shards of uneven sizes: cuts inside runs and rows, one at an odd element.
            const size_t cuts[] = {0, 5, n / 3 + 1, n / 2 + 3, n - 1, n + pad};
            for (int c = 0; c + 1 < 6; c++)
                param_copy_cuda(d_out + cuts[c], d_xl + cuts[c], cuts[c + 1] - cuts[c], seed, step, cuts[c], 0, d_runs,
                                (int)runs.size());
            const std::vector<bf16> out = dev_download(d_out, n + pad);
            const uint64_t key = sr_key(seed, step);
            size_t bad = n + pad;
            for (size_t i = 0; i < n && bad == n + pad; i++) if (bits_of(out[i]) != bits_of(ref[gidx[i]])) bad = i;
            for (size_t p = 0; p < pad && bad == n + pad; p++)
                if (bits_of(out[n + p]) != bits_of(sr_round_bf16(xl[n + p], sr_bits(key, N + p)))) bad = n + p;
            char name[160];
            snprintf(name, sizeof name, "param_copy bf16 with key runs, tp %d rank %d, uneven shards: the TP-1 bits per global element", tp, r);
            report(bad == n + pad, name, bad == n + pad ? NULL : "local element %zu differs", bad);
            // AdamW's fused copy, two uneven launches.
            std::vector<float> zl(n + pad, 0.0f);
            AdamState<bf16> sl = adam_upload<bf16>(xl, zl, zl, gl);
            const size_t k = n / 2 + 3;
            adamw_update_cuda(sl.p, sl.m, sl.v, sl.pb, sl.g, k, lr, b1, b2, eps, 0.0f, NULL, 0, step, 1.0f, NULL, NULL,
                              seed, 0, 0, d_runs, (int)runs.size());
            adamw_update_cuda(sl.p + k, sl.m + k, sl.v + k, sl.pb + k, sl.g + k, n + pad - k, lr, b1, b2, eps, 0.0f,
                              NULL, 0, step, 1.0f, NULL, NULL, seed, k, 0, d_runs, (int)runs.size());
            const std::vector<bf16> adam = dev_download(sl.pb, n + pad);
            bad = n;
            for (size_t i = 0; i < n && bad == n; i++) if (bits_of(adam[i]) != bits_of(ref_adam[gidx[i]])) bad = i;
            snprintf(name, sizeof name, "adamw_update bf16 copy with key runs, tp %d rank %d: the TP-1 bits per global element", tp, r);
            report(bad == n, name, bad == n ? NULL : "local element %zu differs", bad);
            adam_free(sl);
            cudaFree(d_runs); cudaFree(d_xl); cudaFree(d_out);
        }
    }
    // No runs: each element keyed by its own index, as before tensor parallelism.
    {
        bf16* d_none = dev_alloc<bf16>(N);
        param_copy_cuda(d_none, d_xg, N, seed, step, 0, 0, (const SrKeyRun*)NULL, 0);
        const std::vector<bf16> none = dev_download(d_none, N);
        const uint64_t key = sr_key(seed, step);
        size_t bad = N;
        for (size_t i = 0; i < N && bad == N; i++)
            if (bits_of(none[i]) != bits_of(sr_round_bf16(xg[i], sr_bits(key, i)))) bad = i;
        report(bad == N, "param_copy bf16 without key runs: element i keyed by i", bad == N ? NULL : "element %zu differs", bad);
        cudaFree(d_none);
    }
    adam_free(sg);
    cudaFree(d_xg); cudaFree(d_ref);
}

// ----------------------------------------------------------------------------
// Sum of squares, clip scale

static void test_sum_squares(Rng& rng, size_t n, int misalign) {
    char name[200];
    std::vector<float> x = rand_f32(rng, n, 0.01f);
    const double ref = sum_squares(x.data(), n);
    float* d_x = dev_alloc<float>(n + 1);
    dev_set(d_x + misalign, x);
    double* d_out = dev_alloc<double>(1);
    const size_t sbytes = sum_squares_scratch_bytes();
    void* scratch = dev_scratch(sbytes);
    sum_squares_cuda(d_out, scratch, sbytes, d_x + misalign, n, 0, 0);
    const double got = dev_download(d_out, 1)[0];
    snprintf(name, sizeof name, "sum_squares n=%zu%s", n, misalign ? " unaligned" : "");
    const double err = fabs(got - ref) / (ref > 0 ? ref : 1.0);
    report(err <= SUMSQ_TOL_REL, name, "relative err %.3g", err);
    // accumulate = 1 adds to the current value; and the result is deterministic.
    dev_set(d_out, std::vector<double>{5.0});
    sum_squares_cuda(d_out, scratch, sbytes, d_x + misalign, n, 1, 0);
    const double acc = dev_download(d_out, 1)[0];
    snprintf(name, sizeof name, "sum_squares accumulate n=%zu%s", n, misalign ? " unaligned" : "");
    report(acc == 5.0 + got, name, "got %.17g, want %.17g", acc, 5.0 + got);
    sum_squares_cuda(d_out, scratch, sbytes, d_x + misalign, n, 0, 0);
    const double again = dev_download(d_out, 1)[0];
    snprintf(name, sizeof name, "sum_squares deterministic n=%zu%s", n, misalign ? " unaligned" : "");
    report(memcmp(&again, &got, sizeof got) == 0, name, "%.17g vs %.17g", again, got);
    // The plain sum (per-token losses): against a double sum in order, and accumulating.
    double ref_sum = 0.0;
    for (size_t i = 0; i < n; i++) ref_sum += x[i];
    sum_f32_cuda(d_out, scratch, sbytes, d_x + misalign, n, 0, 0);
    const double sum = dev_download(d_out, 1)[0];
    snprintf(name, sizeof name, "sum_f32 n=%zu%s", n, misalign ? " unaligned" : "");
    double sum_mag = 0.0;
    for (size_t i = 0; i < n; i++) sum_mag += fabs(x[i]);
    report(fabs(sum - ref_sum) <= 1e-12 * (sum_mag > 0 ? sum_mag : 1.0), name, "got %.17g, want %.17g", sum, ref_sum);
    sum_f32_cuda(d_out, scratch, sbytes, d_x + misalign, n, 1, 0);
    const double twice = dev_download(d_out, 1)[0];
    snprintf(name, sizeof name, "sum_f32 accumulate n=%zu%s", n, misalign ? " unaligned" : "");
    report(twice == sum + sum, name, "got %.17g, want %.17g", twice, sum + sum);
    cudaFree(d_x); cudaFree(d_out); cudaFree(scratch);
}

static void test_grad_clip_scale(void) {
    double* d_sumsq = dev_alloc<double>(1);
    float* d_scale = dev_alloc<float>(1);
    float* d_norm = dev_alloc<float>(1);
    const double sumsqs[3] = {4.0, 0.25, 7.3};
    const float clips[3] = {1.0f, 0.0f, 3.0f};
    bool ok = true;
    char detail[200] = "";
    for (double ss : sumsqs) {
        for (float clip : clips) {
            dev_set(d_sumsq, std::vector<double>{ss});
            grad_clip_scale_cuda(d_scale, d_norm, d_sumsq, clip, 0);
            const float scale = dev_download(d_scale, 1)[0], norm = dev_download(d_norm, 1)[0];
            const float want_norm = (float)sqrt(ss);
            const float want = (clip > 0.0f && want_norm > clip) ? clip / want_norm : 1.0f;  // fsdp.c
            if (scale != want || norm != want_norm) {
                ok = false;
                snprintf(detail, sizeof detail, "sumsq %g clip %g: scale %g norm %g, want %g %g", ss,
                         (double)clip, (double)scale, (double)norm, (double)want, (double)want_norm);
            }
        }
    }
    report(ok, "grad_clip_scale matches fsdp.c's rule", ok ? NULL : "%s", detail);
    cudaFree(d_sumsq); cudaFree(d_scale); cudaFree(d_norm);
}

// ----------------------------------------------------------------------------
// Casts and accumulation (exact operations: bitwise against the host)

template <class T16>
static void test_casts(Rng& rng, size_t n, int misalign) {
    const DtypeScope<T16> dtype;
    const char* dt = Dtype<T16>::name;
    char name[200];
    const char* tag = misalign ? " unaligned" : "";
    std::vector<float> x = rand_f32(rng, n, 10.0f);
    // Special values: ties, +-0, denormals, overflow to inf, inf, NaN; then fp16's: ties at 1
    // (1 + 2^-11 to 1, 1 + 3 2^-11 up to 1 + 2^-9), subnormal ties (2^-25 to 0, 3 2^-25 to
    // 2^-23), the smallest normal 2^-14 and the largest subnormal, 65519 (to 65504) and 65520
    // (the tie above 65504: to inf).
    const float specials[] = {0.0f, -0.0f, 1.00390625f, 1.01171875f, 1e-40f, -3e-39f, 3.4e38f,
                              -3.39e38f, INFINITY, -INFINITY, NAN, 65504.0f, 1.00048828125f, 1.00146484375f,
                              0x1p-25f, -0x3p-25f, 0x1p-14f, 0x3ffp-24f, 65519.0f, -65520.0f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0] && i < n; i++) x[i] = specials[i];
    float* d_x = dev_alloc<float>(n + 1);
    T16* d_b = dev_alloc<T16>(n + 1);
    float* d_y = dev_alloc<float>(n + 1);
    float* X = d_x + misalign; T16* Bp = d_b + misalign; float* Y = d_y + misalign;
    dev_set(X, x);
    cast_from_f32_cuda(Bp, X, n, 0);
    snprintf(name, sizeof name, "cast_f32_to_%s n=%zu%s", dt, n, tag);
    std::vector<T16> b = dev_download(Bp, n);
    check16_exact(name, b, x);
    cast_to_f32_cuda(Y, Bp, n, 0);
    snprintf(name, sizeof name, "cast_%s_to_f32 n=%zu%s", dt, n, tag);
    std::vector<float> y = dev_download(Y, n), want(n);
    for (size_t i = 0; i < n; i++) want[i] = to_float(b[i]);
    check_bitwise(name, y, want);
    if constexpr (!is_bf16<T16>) {
        // fp16's parameter copy rounds to nearest (store8_param): the cast's bits, whatever
        // the seed, step and offset (bf16's stochastic copy: test_stochastic_rounding).
        for (int step = 1; step <= 2; step++) {
            param_copy_cuda(Bp, X, n, 42 + step, step, 1000 * step, 0);
            snprintf(name, sizeof name, "param_copy to fp16 (round to nearest) n=%zu%s, step %d", n, tag, step);
            check_bitwise(name, dev_download(Bp, n), b);
        }
    }

    // dst += src, fp32 and T16 sources (finite values only, so bitwise comparison holds).
    std::vector<float> dst0 = rand_f32(rng, n, 1.0f), src = rand_f32(rng, n, 1.0f);
    std::vector<float> srcb = rand16<T16>(rng, n, 1.0f);
    std::vector<float> ref1(n), ref2(n);
    for (size_t i = 0; i < n; i++) { ref1[i] = dst0[i] + src[i]; ref2[i] = dst0[i] + srcb[i]; }
    dev_set(Y, dst0);
    dev_set(X, src);
    accumulate_f32_cuda(Y, X, n, 0);
    snprintf(name, sizeof name, "accumulate_f32 n=%zu%s", n, tag);
    check_bitwise(name, dev_download(Y, n), ref1);
    dev_set(Y, dst0);
    dev_set(Bp, to16<T16>(srcb));
    accumulate_to_f32_cuda(Y, Bp, n, 0);
    snprintf(name, sizeof name, "accumulate_%s_to_f32 n=%zu%s", dt, n, tag);
    check_bitwise(name, dev_download(Y, n), ref2);
    cudaFree(d_x); cudaFree(d_b); cudaFree(d_y);
}


// ----------------------------------------------------------------------------
// cuBLASLt algorithm choice (kernels/cuda_matmul.cuh): candidates, timing, the plan cache
//
// The same GEMMs (GPT-2's linear layers in every form the model uses: bias, GELU and DGELU
// epilogues, accumulation with beta = 1 into bf16 and fp32, and a strided batch) run through
// contexts that choose differently. Everywhere: tuning in the exact mode gives the untuned
// bits, on the operands it was timed on and on others (the cached plans); each shape is
// planned, timed and waited for once; accumulating calls add their product once. Under the
// emulator, whose fake cuBLASLt can return failing, slow and other-bits candidates
// (EMU_CUBLASLT_ALGOS, dev/cuda_emu/cublaslt.cpp), also: which candidate each mode picks,
// that a failing one is skipped, that a GELU epilogue none of whose candidates runs falls
// back to the kernels, the default (tuning off), and the full plan table.

template <class T16>
struct MmOperands {
    int N, C, OC;
    std::vector<float> inp, w, bias, dout, pre_c, dinp0;  // the T16 values, as fp32
    T16 *d_inp, *d_w, *d_bias, *d_dout, *d_pre_c;
};
template <class T16>
static MmOperands<T16> mm_operands(Rng& rng, int N, int C, int OC) {
    MmOperands<T16> o;
    o.N = N; o.C = C; o.OC = OC;
    o.inp = rand16<T16>(rng, (size_t)N * C, 1.0f);
    o.w = rand16<T16>(rng, (size_t)OC * C, 1.0f);
    o.bias = rand16<T16>(rng, OC, 1.0f);
    o.dout = rand16<T16>(rng, (size_t)N * OC, 1.0f);
    o.pre_c = rand16<T16>(rng, (size_t)N * C, 2.0f);
    o.dinp0 = rand16<T16>(rng, (size_t)N * C, 4.0f);
    o.d_inp = dev_upload(to16<T16>(o.inp));
    o.d_w = dev_upload(to16<T16>(o.w));
    o.d_bias = dev_upload(to16<T16>(o.bias));
    o.d_dout = dev_upload(to16<T16>(o.dout));
    o.d_pre_c = dev_upload(to16<T16>(o.pre_c));
    return o;
}
template <class T16>
static void mm_operands_free(MmOperands<T16>& o) {
    cudaFree(o.d_inp); cudaFree(o.d_w); cudaFree(o.d_bias); cudaFree(o.d_dout); cudaFree(o.d_pre_c);
}

struct MmOut {
    const char* name;
    bool f32, half;  // fp32, fp16 (else bf16)
    std::vector<uint8_t> bytes;
    std::vector<float> values() const {
        const size_t n = bytes.size() / (f32 ? 4 : 2);
        std::vector<float> v(n);
        for (size_t i = 0; i < n; i++) {
            if (f32) memcpy(&v[i], &bytes[i * 4], 4);
            else if (half) { fp16 h; memcpy(&h, &bytes[i * 2], 2); v[i] = to_float(h); }
            else { bf16 b; memcpy(&b, &bytes[i * 2], 2); v[i] = bf16_to_float(b); }
        }
        return v;
    }
};
template <class T>
static MmOut mm_fetch(const char* name, const T* d, size_t n) {
    MmOut o;
    o.name = name;
    o.f32 = std::is_same<T, float>::value;
    o.half = std::is_same<T, fp16>::value;
    o.bytes = dev_download((const uint8_t*)d, n * sizeof(T));
    return o;
}

static int g_mm_waits = 0;
static void mm_test_wait(void* ctx, cudaStream_t s, const char* what) {
    (void)ctx; (void)what;
    g_mm_waits++;
    CUDA_CHECK(cudaStreamSynchronize(s));
}

// A context choosing by `mode` (quiet, waiting through mm_test_wait).
static MatmulContext* mm_context(int mode) {
    MatmulContext* mm = (MatmulContext*)malloc(sizeof(MatmulContext));
    matmul_context_init(mm);
    matmul_set_autotune(mm, mode);
    mm->tune_report = 0;
    mm->host_wait = mm_test_wait;
    return mm;
}
static void mm_context_free(MatmulContext* mm) {
    matmul_context_destroy(mm);
    free(mm);
}

// Every form of GEMM the model issues, on o, on stream s; the outputs, in a fixed order.
template <class T16>
static std::vector<MmOut> mm_run_ops(MatmulContext* mm, const MmOperands<T16>& o, cudaStream_t s) {
    const int N = o.N, C = o.C, OC = o.OC;
    const cudaDataType_t t16 = mm_type_of(o.d_inp);
    std::vector<MmOut> outs;
    T16* out = dev_alloc<T16>((size_t)N * OC);
    T16* gout = dev_alloc<T16>((size_t)N * OC);
    T16* gpre = dev_alloc<T16>((size_t)N * OC);
    T16* dacc = dev_upload(to16<T16>(o.dinp0));
    T16* dinp = dev_alloc<T16>((size_t)N * C);
    T16* dgelu = dev_alloc<T16>((size_t)N * C);
    T16* dw16 = dev_alloc<T16>((size_t)OC * C);
    float* dw32 = dev_alloc<float>((size_t)OC * C);
    const int BM = 16, BN = 40, BATCH = 3;  // batch of [16, C] @ [40, C]^T, alpha 0.5
    float* bat = dev_alloc<float>((size_t)BATCH * BM * BN);
    CUDA_CHECK(cudaMemset(out, 0xff, (size_t)N * OC * 2));  // NaN: must be overwritten
    CUDA_CHECK(cudaMemset(gout, 0xff, (size_t)N * OC * 2));
    CUDA_CHECK(cudaMemset(gpre, 0xff, (size_t)N * OC * 2));
    CUDA_CHECK(cudaMemset(dinp, 0xff, (size_t)N * C * 2));
    CUDA_CHECK(cudaMemset(dgelu, 0xff, (size_t)N * C * 2));
    CUDA_CHECK(cudaMemset(bat, 0xff, (size_t)BATCH * BM * BN * 4));
    CUDA_CHECK(cudaMemset(dw16, 0, (size_t)OC * C * 2));
    CUDA_CHECK(cudaMemset(dw32, 0, (size_t)OC * C * 4));
    CUDA_CHECK(cudaDeviceSynchronize());
    matmul_forward_cuda(mm, out, NULL, o.d_inp, o.d_w, o.d_bias, N, C, OC, s);
    matmul_forward_cuda(mm, gout, gpre, o.d_inp, o.d_w, o.d_bias, N, C, OC, s);
    // The dinp shape first with beta = 1 (its candidates are timed on a scratch copy), then
    // overwriting (the plan is cached: beta is not part of the key).
    matmul_backward_dinp_cuda(mm, dacc, o.d_dout, o.d_w, NULL, N, C, OC, 1, s);
    matmul_backward_dinp_cuda(mm, dinp, o.d_dout, o.d_w, NULL, N, C, OC, 0, s);
    matmul_backward_dinp_cuda(mm, dgelu, o.d_dout, o.d_w, o.d_pre_c, N, C, OC, 0, s);
    for (int k = 0; k < 2; k++) {
        matmul_backward_dweight_cuda(mm, dw16, t16, o.d_dout, o.d_inp, N, C, OC, 1, s);
        matmul_backward_dweight_cuda(mm, dw32, CUDA_R_32F, o.d_dout, o.d_inp, N, C, OC, 1, s);
    }
    MatmulGemm g = mm_gemm_init();
    g.ab_type = t16;
    g.M = BM; g.N = BN; g.K = C;
    g.A = o.d_inp; g.lda = C; g.strideA = (long long)BM * C;
    g.B = o.d_w; g.ldb = C; g.transB = 1; g.strideB = (long long)BN * C;
    g.D = bat; g.ldd = BN; g.d_type = CUDA_R_32F; g.strideD = (long long)BM * BN;
    g.batch = BATCH;
    g.alpha = 0.5f;
    matmul_gemm_cuda(mm, &g, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    outs.push_back(mm_fetch("forward + bias", out, (size_t)N * OC));
    outs.push_back(mm_fetch("forward + bias + GELU", gout, (size_t)N * OC));
    outs.push_back(mm_fetch("forward pre-GELU", gpre, (size_t)N * OC));
    outs.push_back(mm_fetch("dinp accumulated (beta 1)", dacc, (size_t)N * C));
    outs.push_back(mm_fetch("dinp", dinp, (size_t)N * C));
    outs.push_back(mm_fetch("dinp + GELU backward", dgelu, (size_t)N * C));
    outs.push_back(mm_fetch("dweight 16-bit accumulated twice", dw16, (size_t)OC * C));
    outs.push_back(mm_fetch("dweight fp32 accumulated twice", dw32, (size_t)OC * C));
    outs.push_back(mm_fetch("batched GEMM", bat, (size_t)BATCH * BM * BN));
    cudaFree(out); cudaFree(gout); cudaFree(gpre); cudaFree(dacc); cudaFree(dinp); cudaFree(dgelu);
    cudaFree(dw16); cudaFree(dw32); cudaFree(bat);
    return outs;
}

// "" when a and b are bitwise equal output for output, else which output first differs.
static std::string mm_first_difference(const std::vector<MmOut>& a, const std::vector<MmOut>& b) {
    if (a.size() != b.size()) return "different output counts";
    for (size_t i = 0; i < a.size(); i++)
        if (a[i].bytes != b[i].bytes) return a[i].name;
    return "";
}
#ifdef FSDP_CUBLASLT_EMULATED
// Every plan: how many candidates, which is in use, whether it was timed. "" when as expected.
static std::string mm_plans_are(const MatmulContext* mm, int ncand, int chosen, int tuned) {
    char buf[200] = "";
    for (int i = 0; i < mm->nplans; i++) {
        const MatmulPlan* p = &mm->plans[i];
        if (p->ncandidates != ncand || p->chosen != chosen || p->tuned != tuned) {
            snprintf(buf, sizeof buf, "plan %d of %d: %d candidates, #%d in use, tuned %d (want %d, #%d, %d)", i,
                     mm->nplans, p->ncandidates, p->chosen, p->tuned, ncand, chosen, tuned);
            return buf;
        }
    }
    return "";
}
#endif

// The untuned outputs' accumulations against the CPU twin, element by element (every form
// against the twin, to a tensor-wide tolerance: dev/test/test_attention_cuda.cu).
template <class T16>
static void mm_check_untuned(const MmOperands<T16>& X, const std::vector<MmOut>& offX) {
    const DtypeScope<T16> dtype;
    const int N = X.N, C = X.C, OC = X.OC;
    std::vector<float> dinp = X.dinp0, dw((size_t)OC * C, 0.0f), product((size_t)N * C, 0.0f), unused((size_t)OC * C);
    matmul_backward(dinp.data(), dw.data(), NULL, X.dout.data(), X.inp.data(), X.w.data(), N, C, OC);
    matmul_backward(NULL, dw.data(), NULL, X.dout.data(), X.inp.data(), X.w.data(), N, C, OC);
    matmul_backward(product.data(), unused.data(), NULL, X.dout.data(), X.inp.data(), X.w.data(), N, C, OC);
    // Two T16 roundings allowed, each element's: cuBLASLt on an H200 rounds the product to
    // bf16 before it adds beta * C and rounds again (its max error, 0.238, was exactly that
    // of bf16(bf16(product) + C) against the fp32 sum); the emulator rounds once. The same
    // holds for fp16 with fp16's rounding: |fp16(fp16(p) + c) - (p + c)| <= 2^-11 (|p| +
    // |p + c|) + (fp32 differences), i.e. Dtype<T16>::rel of the slack below, plus the floor.
    std::vector<float> slack(product.size());
    for (size_t i = 0; i < slack.size(); i++) slack[i] = fabsf(product[i]) + fabsf(dinp[i]);
    char name[160];
    snprintf(name, sizeof name, "matmul (untuned) dinp accumulated onto its input, beta 1 (two %s roundings)",
             Dtype<T16>::name);
    check_close_scaled(name, offX[3].values(), dinp, slack, Dtype<T16>::rel,
                       fmax(Dtype<T16>::abs_frac * max_abs(dinp), Dtype<T16>::abs_min));
    // fp32 output: the products of 16-bit inputs are exact in fp32 (8 + 8 or 11 + 11 significand
    // bits), so only the fp32 summation order differs, whatever T16 is.
    check_close("matmul (untuned) dweight fp32 accumulated twice", offX[7].values(), dw, 1e-5, 1e-5 * max_abs(dw));
}

// Every form of GEMM (mm_run_ops) in T16, untuned, and the accumulations' accuracy as above
// (for fp16; bf16's run inside test_matmul_autotune).
template <class T16>
static void test_matmul_untuned(Rng& rng) {
    MmOperands<T16> X = mm_operands<T16>(rng, 64, 96, 160);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    MatmulContext* off = mm_context(MATMUL_TUNE_OFF);
    mm_check_untuned(X, mm_run_ops(off, X, s));
    mm_context_free(off);
    CUDA_CHECK(cudaStreamDestroy(s));
    mm_operands_free(X);
}

static void test_matmul_autotune(Rng& rng) {
    const int N = 64, C = 96, OC = 160;
    MmOperands<bf16> X = mm_operands<bf16>(rng, N, C, OC), Y = mm_operands<bf16>(rng, N, C, OC);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    char det[400];

    // Untuned reference outputs, and their accuracy (the accumulations against the CPU twin).
    MatmulContext* off = mm_context(MATMUL_TUNE_OFF);
    const std::vector<MmOut> offX = mm_run_ops(off, X, s), offY = mm_run_ops(off, Y, s);
    mm_check_untuned(X, offX);

    // Exact mode: the untuned bits, on the operands it timed (X) and on others (Y); each
    // shape planned, timed and waited for once.
    {
        MatmulContext* ex = mm_context(MATMUL_TUNE_EXACT);
        g_mm_waits = 0;
        const std::vector<MmOut> exX = mm_run_ops(ex, X, s);
        const long long q1 = ex->heuristic_queries, t1 = ex->tuned_shapes, c1 = ex->timed_candidates;
        const int w1 = g_mm_waits;
        const std::vector<MmOut> exY = mm_run_ops(ex, Y, s);
        const std::string dx = mm_first_difference(exX, offX), dy = mm_first_difference(exY, offY);
        if (dx.empty() && dy.empty())
            snprintf(det, sizeof det, "%zu outputs, on the operands timed and on others", exX.size());
        else
            snprintf(det, sizeof det, "%s%s%s%s differs", dx.empty() ? "" : "timed operands: ", dx.c_str(),
                     dy.empty() ? "" : "; other operands: ", dy.c_str());
        report(dx.empty() && dy.empty(), "matmul autotune exact: every output bitwise equal to the untuned one", "%s", det);
        char summary[512];
        const int said = matmul_autotune_summary(ex, summary, sizeof summary);
        snprintf(det, sizeof det, "%d plans, %lld heuristic queries (%lld after the first pass), %lld shapes tuned "
                 "(%lld), %lld candidates timed (%lld), %d host waits (%d)", ex->nplans, ex->heuristic_queries, q1,
                 ex->tuned_shapes, t1, ex->timed_candidates, c1, g_mm_waits, w1);
        bool once = ex->heuristic_queries == ex->nplans && q1 == ex->nplans && ex->tuned_shapes == t1 &&
                    ex->timed_candidates == c1 && g_mm_waits == w1 && w1 == t1 && ex->untuned_shapes == 0 &&
                    said == (t1 > 0);
#ifdef FSDP_CUBLASLT_EMULATED  // the fake's default: four interchangeable candidates per shape
        once = once && ex->nplans == 7 && t1 == 7 && c1 == 4 * 7 && ex->other_bits_candidates == 0 &&
               ex->unrepeatable_candidates == 0;
#endif
        report(once, "matmul autotune: each shape planned, timed and waited for once", det);
        if (said) printf("# %s\n", summary);
        mm_context_free(ex);
    }
    // Fastest mode: within bf16 rounding of the untuned outputs (bits may differ).
    {
        MatmulContext* fa = mm_context(MATMUL_TUNE_FASTEST);
        const std::vector<MmOut> faX = mm_run_ops(fa, X, s);
        double worst = 0.0;
        for (size_t i = 0; i < faX.size(); i++) {
            const std::vector<float> a = faX[i].values(), b = offX[i].values();
            const double mx = fmax(max_abs(b), 1e-30);
            for (size_t j = 0; j < a.size(); j++) worst = fmax(worst, fabs((double)a[j] - b[j]) / mx);
        }
        report(worst <= 1e-2, "matmul autotune fastest: outputs within bf16 rounding of the untuned ones",
               "max err %.2e of max|untuned|, tol 1e-2", worst);
        mm_context_free(fa);
    }

#ifdef FSDP_CUBLASLT_EMULATED
    // The default under the emulator: no timing, nothing to report.
    {
        MatmulContext* dflt = (MatmulContext*)malloc(sizeof(MatmulContext));
        matmul_context_init(dflt);
        const std::vector<MmOut> o = mm_run_ops(dflt, X, s);
        char summary[512];
        const bool quiet = !matmul_autotune_summary(dflt, summary, sizeof summary);
        snprintf(det, sizeof det, "mode %s, %lld shapes tuned, %d plans", matmul_autotune_name(dflt->autotune),
                 dflt->tuned_shapes, dflt->nplans);
        report(dflt->autotune == MATMUL_TUNE_OFF && dflt->tuned_shapes == 0 && quiet &&
               mm_first_difference(o, offX).empty() && mm_plans_are(dflt, 4, 0, 0).empty(),
               "matmul autotune is off by default under the emulator", det);
        mm_context_free(dflt);
    }
    // Candidates: #0 fails at run time, #1 slow (20 ms), #2 fast (4 ms), #3 fastest with other
    // bits, #4 medium (12 ms). Off keeps #1 (the first that runs), exact #2, fastest #3.
    setenv("EMU_CUBLASLT_ALGOS", "fail,ok:20,ok:4,ulp,ok:12", 1);
    for (int mode = MATMUL_TUNE_OFF; mode <= MATMUL_TUNE_FASTEST; mode++) {
        MatmulContext* mm = mm_context(mode);
        g_mm_waits = 0;
        const std::vector<MmOut> oX = mm_run_ops(mm, X, s), oY = mm_run_ops(mm, Y, s);
        const int want = mode == MATMUL_TUNE_OFF ? 1 : mode == MATMUL_TUNE_EXACT ? 2 : 3;
        const int timed = mode != MATMUL_TUNE_OFF;
        const std::string plans = mm_plans_are(mm, 5, want, timed);
        const long long P = mm->nplans;
        const bool counts = P == 7 && mm->heuristic_queries == P && mm->failed_candidates == P &&
                            mm->tuned_shapes == (timed ? P : 0) && mm->timed_candidates == (timed ? 4 * P : 0) &&
                            mm->other_bits_candidates == (timed ? P : 0) && g_mm_waits == (timed ? P : 0);
        bool bits;
        std::string what;
        if (mode != MATMUL_TUNE_FASTEST) {
            what = mm_first_difference(oX, offX) + mm_first_difference(oY, offY);
            bits = what.empty();
        } else {  // #3: every element of D one bit off the exact result (the aux is exact)
            bits = true;
            for (size_t i = 0; i < oX.size(); i++) {
                const size_t es = oX[i].f32 ? 4 : 2;
                const bool aux = !strcmp(oX[i].name, "forward pre-GELU");
                for (size_t j = 0; j < oX[i].bytes.size(); j += es) {
                    const bool flipped = (oX[i].bytes[j] ^ offX[i].bytes[j]) == 1 &&
                                         !memcmp(&oX[i].bytes[j + 1], &offX[i].bytes[j + 1], es - 1);
                    const bool same = !memcmp(&oX[i].bytes[j], &offX[i].bytes[j], es);
                    // Two accumulated calls flip twice with a sum between: only outputs of one
                    // call are checked bit for bit.
                    const bool single = strstr(oX[i].name, "twice") == NULL;
                    if (single && !(aux ? same : flipped)) { bits = false; what = oX[i].name; break; }
                }
                if (!bits) break;
            }
        }
        char summary[512];
        const int said = matmul_autotune_summary(mm, summary, sizeof summary);
        const bool gain = !timed || (said && mm->tune_ratio_min > 2.0);
        char ratios[64] = "";
        if (timed) snprintf(ratios, sizeof ratios, ", first/chosen %.2fx-%.2fx", mm->tune_ratio_min, mm->tune_ratio_max);
        snprintf(det, sizeof det, "%s%s%lld plans, %lld queries, %lld failed, %lld tuned, %lld timed, %lld other bits, "
                 "%d waits%s; %s%s", plans.c_str(), plans.empty() ? "" : "; ", P, mm->heuristic_queries,
                 mm->failed_candidates, mm->tuned_shapes, mm->timed_candidates, mm->other_bits_candidates, g_mm_waits,
                 ratios, bits ? "bits as expected" : "unexpected bits in ", what.c_str());
        char name[160];
        snprintf(name, sizeof name, "matmul autotune %s picks candidate #%d of [fail, 20 ms, 4 ms, 4 ms other bits, "
                 "12 ms], skips the failing one", matmul_autotune_name(mode), want);
        report(plans.empty() && counts && bits && gain, name, det);
        if (said) printf("# %s\n", summary);
        mm_context_free(mm);
    }

    // A candidate whose bits vary from call to call (#1, the fastest: it matches the first
    // on its first run) is chosen in neither timed mode.
    setenv("EMU_CUBLASLT_ALGOS", "ok:20,noisy,ok:4", 1);
    for (int mode = MATMUL_TUNE_EXACT; mode <= MATMUL_TUNE_FASTEST; mode++) {
        MatmulContext* mm = mm_context(mode);
        const std::vector<MmOut> oX = mm_run_ops(mm, X, s);
        const std::string plans = mm_plans_are(mm, 3, 2, 1), what = mm_first_difference(oX, offX);
        snprintf(det, sizeof det, "%s%s%d plans, %lld not repeatable, %lld other bits; %s%s", plans.c_str(),
                 plans.empty() ? "" : "; ", mm->nplans, mm->unrepeatable_candidates, mm->other_bits_candidates,
                 what.empty() ? "bitwise equal to untuned" : "differs from untuned: ", what.c_str());
        char name[160];
        snprintf(name, sizeof name, "matmul autotune %s never picks a candidate whose bits vary between calls",
                 matmul_autotune_name(mode));
        report(plans.empty() && what.empty() && mm->unrepeatable_candidates == mm->nplans, name, det);
        mm_context_free(mm);
    }
    unsetenv("EMU_CUBLASLT_ALGOS");

    // A GELU epilogue none of whose candidates runs (or none found: EMU_CUBLASLT_NO_GELU)
    // falls back to the GELU kernels, as with fusion off; plain GEMMs keep running.
    {
        MatmulContext* unf = mm_context(MATMUL_TUNE_OFF);
        matmul_set_gelu_fusion(unf, 0);
        unsetenv("EMU_CUBLASLT_ALGOS");
        const std::vector<MmOut> ref = mm_run_ops(unf, X, s);
        mm_context_free(unf);
        for (int no_gelu = 0; no_gelu < 2; no_gelu++) {
            if (no_gelu) setenv("EMU_CUBLASLT_NO_GELU", "1", 1);
            else setenv("EMU_CUBLASLT_ALGOS", "nogelu,nogelu:1", 1);
            MatmulContext* mm = mm_context(MATMUL_TUNE_EXACT);
            const std::vector<MmOut> o = mm_run_ops(mm, X, s);
            const std::string d = mm_first_difference(o, ref);
            snprintf(det, sizeof det, "fusion after: forward %d, backward %d; %s%s", mm->fuse_gelu_forward,
                     mm->fuse_gelu_backward, d.empty() ? "bitwise equal to fusion off" : "differs from fusion off: ",
                     d.c_str());
            report(d.empty() && !mm->fuse_gelu_forward && !mm->fuse_gelu_backward,
                   no_gelu ? "matmul autotune: GELU epilogues the heuristic has nothing for fall back to the kernels"
                           : "matmul autotune: GELU epilogues whose every candidate fails fall back to the kernels",
                   det);
            mm_context_free(mm);
            unsetenv("EMU_CUBLASLT_NO_GELU");
            unsetenv("EMU_CUBLASLT_ALGOS");
        }
    }

    // A full plan table: the 65th shape is planned per call, untimed, and still skips the
    // failing candidate.
    {
        setenv("EMU_CUBLASLT_ALGOS", "fail,ok", 1);
        MatmulContext* mm = mm_context(MATMUL_TUNE_EXACT);
        bf16* out = dev_alloc<bf16>((size_t)N * OC);
        for (int rows = 1; rows <= MATMUL_PLAN_CACHE; rows++)
            matmul_forward_cuda(mm, out, NULL, X.d_inp, X.d_w, NULL, rows, C, OC, s);
        const long long q = mm->heuristic_queries, t = mm->tuned_shapes, f = mm->failed_candidates;
        std::vector<MmOut> got;
        for (int k = 0; k < 2; k++) {
            CUDA_CHECK(cudaMemsetAsync(out, 0xff, (size_t)N * OC * 2, s));
            matmul_forward_cuda(mm, out, NULL, X.d_inp, X.d_w, NULL, N, C, OC - 8, s);
            CUDA_CHECK(cudaStreamSynchronize(s));
            got.push_back(mm_fetch("forward", out, (size_t)N * (OC - 8)));
        }
        unsetenv("EMU_CUBLASLT_ALGOS");
        MatmulContext* ref = mm_context(MATMUL_TUNE_OFF);
        CUDA_CHECK(cudaMemsetAsync(out, 0xff, (size_t)N * OC * 2, s));
        matmul_forward_cuda(ref, out, NULL, X.d_inp, X.d_w, NULL, N, C, OC - 8, s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const MmOut want = mm_fetch("forward", out, (size_t)N * (OC - 8));
        snprintf(det, sizeof det, "%d plans, %lld tuned; beyond the table: %lld queries, %lld tuned, %lld failed "
                 "for 2 calls", mm->nplans, t, mm->heuristic_queries - q, mm->tuned_shapes - t,
                 mm->failed_candidates - f);
        report(mm->nplans == MATMUL_PLAN_CACHE && t == MATMUL_PLAN_CACHE && mm->heuristic_queries - q == 2 &&
               mm->tuned_shapes == t && mm->failed_candidates - f == 2 && got[0].bytes == want.bytes &&
               got[1].bytes == want.bytes, "matmul autotune: shapes beyond the plan table run untimed", det);
        mm_context_free(ref);
        mm_context_free(mm);
        cudaFree(out);
    }
#else
    printf("# matmul autotune: the checks of candidates that fail, are slow or differ need the emulator's fake cuBLASLt\n");
#endif
    mm_context_free(off);
    CUDA_CHECK(cudaStreamDestroy(s));
    mm_operands_free(X);
    mm_operands_free(Y);
}
// The bias gradient in the weight-gradient GEMM's epilogue (cuBLASLt's BGRADB through
// matmul_backward_dweight_dbias_cuda; CPU twin: matmul_backward's dweight and dbias): written
// over NaN, two calls bitwise equal, never used to accumulate (accumulate 1 leaves dbias to
// the caller). Under the emulator also its fallback: a shape the heuristic has nothing for
// (EMU_CUBLASLT_NO_BGRAD) or whose every candidate's bits vary (tuned, all "noisy") is
// refused once (one heuristic query, dbias untouched, dweight still right) and counted in
// the tuning's summary.
template <class T16>
static bool same_bits(const std::vector<T16>& a, const std::vector<T16>& b) {
    return a.size() == b.size() && !memcmp(a.data(), b.data(), a.size() * sizeof(T16));
}
template <class T16>
static void test_matmul_bias_grad(Rng& rng) {
    const DtypeScope<T16> dtype;
    const int N = 64, C = 96, OC = 160;
    MmOperands<T16> X = mm_operands<T16>(rng, N, C, OC);
    std::vector<float> dw((size_t)OC * C, 0.0f), db(OC, 0.0f);
    matmul_backward(NULL, dw.data(), db.data(), X.dout.data(), X.inp.data(), X.w.data(), N, C, OC);
    const cudaDataType_t t16 = mm_type_of(X.d_inp);
    T16* d_dw = dev_alloc<T16>((size_t)OC * C);
    T16* d_db = dev_alloc<T16>(OC);
    const std::vector<T16> nan16 = to16<T16>(std::vector<float>(OC, NAN));
    const std::vector<T16> other = to16<T16>(rand16<T16>(rng, OC, 1.0f));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    char det[300];

    MatmulContext* mm = mm_context(MATMUL_TUNE_OFF);
    int done[3];
    std::vector<T16> got[3];
    for (int k = 0; k < 3; k++) {  // twice overwriting NaN, then accumulating onto `other`
        dev_set(d_db, k < 2 ? nan16 : other);
        CUDA_CHECK(cudaDeviceSynchronize());  // (a pageable copy is not ordered with stream s)
        done[k] = matmul_backward_dweight_dbias_cuda(mm, d_dw, t16, d_db, X.d_dout, X.d_inp, N, C, OC, k == 2, s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        got[k] = dev_download(d_db, OC);
        if (k == 0) check16("matmul dweight with the bias gradient epilogue: dweight vs CPU twin",
                            dev_download(d_dw, (size_t)OC * C), dw);
    }
    snprintf(det, sizeof det, "returned %d, %d (written), %d (accumulate: left to the caller); %lld plans, "
             "%lld refused", done[0], done[1], done[2], (long long)mm->nplans, mm->bgrad_refused);
    report(done[0] == 1 && done[1] == 1 && done[2] == 0 && mm->bgrad_refused == 0,
           "matmul dweight GEMM writes the bias gradient in its epilogue only when it overwrites", "%s", det);
    check16("matmul bias gradient epilogue (BGRADB) over NaN vs CPU twin's dbias", got[0], db);
    check_bitwise("matmul bias gradient epilogue: two calls bitwise equal", got[0], got[1]);
    check_bitwise("matmul bias gradient: accumulate 1 leaves dbias untouched", got[2], other);
    mm_context_free(mm);

#ifdef FSDP_CUBLASLT_EMULATED
    for (int how = 0; how < 2; how++) {  // 0: no algorithm for the epilogue; 1: none repeats its bits
        if (how == 0) setenv("EMU_CUBLASLT_NO_BGRAD", "1", 1);
        else setenv("EMU_CUBLASLT_ALGOS", "noisy,noisy", 1);
        MatmulContext* r = mm_context(how == 0 ? MATMUL_TUNE_OFF : MATMUL_TUNE_EXACT);
        long long queries[2];
        int ret[2];
        bool untouched = true;
        for (int k = 0; k < 2; k++) {
            dev_set(d_db, other);
            CUDA_CHECK(cudaDeviceSynchronize());
            ret[k] = matmul_backward_dweight_dbias_cuda(r, d_dw, t16, d_db, X.d_dout, X.d_inp, N, C, OC, 0, s);
            CUDA_CHECK(cudaStreamSynchronize(s));
            queries[k] = r->heuristic_queries;
            untouched = untouched && same_bits(dev_download(d_db, OC), other);
        }
        char summary[512] = "";
        const int said = matmul_autotune_summary(r, summary, sizeof summary);
        // The first call asks for the epilogue (refused) and for the plain GEMM; the second
        // asks for nothing.
        const bool said_ok = how == 0 ? !said : said && strstr(summary, "bias gradient epilogue refused for 1 shapes");
        // (Refused after tuning, the candidates' gradient may be left in dbias: the caller's
        // reduction overwrites it, as BGRAD is only asked for where dbias is overwritten.)
        untouched = untouched || how == 1;
        snprintf(det, sizeof det, "returned %d, %d; heuristic queries %lld, then %lld; %lld refused; dbias %s; "
                 "summary: %s", ret[0], ret[1], queries[0], queries[1], r->bgrad_refused,
                 untouched ? "untouched" : "WRITTEN", said ? summary : "(none)");
        report(ret[0] == 0 && ret[1] == 0 && queries[0] == 2 && queries[1] == 2 && r->bgrad_refused == 1 && untouched &&
               said_ok, how == 0 ? "matmul bias gradient epilogue the heuristic has nothing for: refused once, "
                                   "left to the caller"
                                 : "matmul bias gradient epilogue whose every candidate varies: refused once, "
                                   "left to the caller", "%s", det);
        if (how == 0) check16("matmul dweight beside a refused bias gradient epilogue vs CPU twin",
                              dev_download(d_dw, (size_t)OC * C), dw);
        mm_context_free(r);
        unsetenv("EMU_CUBLASLT_NO_BGRAD");
        unsetenv("EMU_CUBLASLT_ALGOS");
    }
    // Tuned, the bias gradient is hashed like D: a candidate with other bits (ulp flips the
    // gradient's too) is not chosen in the exact mode, one whose bits vary in neither.
    setenv("EMU_CUBLASLT_ALGOS", "ok:20,noisy,ulp,ok:4", 1);
    {
        MatmulContext* ex = mm_context(MATMUL_TUNE_EXACT);
        dev_set(d_db, nan16);
        CUDA_CHECK(cudaDeviceSynchronize());
        const int ret = matmul_backward_dweight_dbias_cuda(ex, d_dw, t16, d_db, X.d_dout, X.d_inp, N, C, OC, 0, s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const std::vector<T16> g = dev_download(d_db, OC);
        snprintf(det, sizeof det, "returned %d, plan %d of %d candidates, %lld other bits, %lld not repeatable", ret,
                 ex->nplans ? ex->plans[0].chosen : -1, ex->nplans ? ex->plans[0].ncandidates : 0,
                 ex->other_bits_candidates, ex->unrepeatable_candidates);
        report(ret == 1 && ex->nplans == 1 && ex->plans[0].chosen == 3 && ex->other_bits_candidates >= 1 &&
               ex->unrepeatable_candidates == 1 && same_bits(g, got[0]),
               "matmul autotune exact: a bias gradient epilogue keeps the untuned bits (candidate #3 of "
               "[20 ms, noisy, other bits, 4 ms])", "%s", det);
        mm_context_free(ex);
    }
    unsetenv("EMU_CUBLASLT_ALGOS");
#endif
    CUDA_CHECK(cudaStreamDestroy(s));
    cudaFree(d_dw); cudaFree(d_db);
    mm_operands_free(X);
}

// ----------------------------------------------------------------------------
// The Llama family (RMSNorm, RoPE, SwiGLU, the embedding without positions: cuda_norm.cuh,
// cuda_rope.cuh, cuda_activation.cuh, cuda_encoder.cuh against kernels/cpu_kernels_llama.h)

// The embedding without learned positions (wpe and dwpe NULL): wte rows only, bitwise.
template <class T16>
static void test_encoder_no_positions(Rng& rng, int B, int T, int C, int V) {
    const DtypeScope<T16> dtype;
    char name[200];
    const int N = B * T;
    std::vector<int> inp(N);
    for (int n = 0; n < N; n++) inp[n] = rng.below(V);
    std::vector<float> wte = rand16<T16>(rng, (size_t)V * C, 0.5f), ref((size_t)N * C);
    encoder_forward(ref.data(), inp.data(), wte.data(), NULL, B, T, C, 0, V);
    int* d_inp = dev_upload(inp);
    T16* d_wte = dev_upload(to16<T16>(wte));
    T16* d_out = dev_alloc<T16>((size_t)N * C);
    encoder_forward_cuda(d_out, d_inp, d_wte, NULL, B, T, C, 0, V, 0);
    snprintf(name, sizeof name, "encoder_forward without wpe B=%d T=%d C=%d V=%d", B, T, C, V);
    check16_exact(name, dev_download(d_out, (size_t)N * C), ref);

    std::vector<float> dout = rand16<T16>(rng, (size_t)N * C, 1.0f), dwte0 = rand16<T16>(rng, (size_t)V * C, 0.1f);
    std::vector<float> dwte = dwte0;
    encoder_backward(dwte.data(), NULL, dout.data(), inp.data(), B, T, C, 0, V);
    T16* d_dout = dev_upload(to16<T16>(dout));
    T16* d_dwte = dev_alloc<T16>((size_t)V * C);
    const size_t sbytes = encoder_backward_scratch_bytes(B, T, V);
    void* scratch = dev_scratch(sbytes);
    for (int accumulate = 0; accumulate <= 1; accumulate++) {  // dwte added to either way
        dev_set(d_dwte, to16<T16>(dwte0));
        encoder_backward_cuda(d_dwte, NULL, scratch, sbytes, d_dout, d_inp, B, T, C, V, 0, V, accumulate, 0);
        snprintf(name, sizeof name, "encoder_backward without dwpe (accumulate %d) B=%d T=%d C=%d V=%d", accumulate, B, T,
                 C, V);
        check16_exact(name, dev_download(d_dwte, (size_t)V * C), dwte);
    }
    cudaFree(d_inp); cudaFree(d_wte); cudaFree(d_out); cudaFree(d_dout); cudaFree(d_dwte); cudaFree(scratch);
}

template <class T16>
static void test_rmsnorm_forward(Rng& rng, int N, int C, bool fused, bool alias, float eps) {
    const DtypeScope<T16> dtype;
    char name[240];
    char tag[160];
    snprintf(tag, sizeof tag, "%s eps=%g",
             fused ? (alias ? "fused_residual_rmsnorm_forward (residual aliases a)" : "fused_residual_rmsnorm_forward")
                   : "rmsnorm_forward", (double)eps);
    std::vector<float> a = rand16<T16>(rng, (size_t)N * C, 1.5f, 0.5f), b = rand16<T16>(rng, (size_t)N * C, 1.0f);
    std::vector<float> w = rand16<T16>(rng, C, 0.3f, 1.0f);
    std::vector<float> x = a, sum((size_t)N * C);  // what the norm sees: the rounded residual when fused
    if (fused) {
        residual_forward(sum.data(), a.data(), b.data(), sum.size());
        for (size_t i = 0; i < x.size(); i++) x[i] = round16<T16>(sum[i]);
    }
    std::vector<float> out((size_t)N * C), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);

    T16* d_a = dev_upload(to16<T16>(a));
    T16* d_b = dev_upload(to16<T16>(b));
    T16* d_w = dev_upload(to16<T16>(w));
    T16* d_out = dev_alloc<T16>((size_t)N * C);
    T16* d_res = alias ? d_a : dev_alloc<T16>((size_t)N * C);
    float* d_rstd = dev_alloc<float>(N);
    if (fused) fused_residual_rmsnorm_forward_cuda(d_res, d_out, d_rstd, d_a, d_b, d_w, N, C, eps, 0);
    else rmsnorm_forward_cuda(d_out, d_rstd, d_a, d_w, N, C, eps, 0);
    std::vector<T16> g_out = dev_download(d_out, (size_t)N * C);
    std::vector<float> g_rstd = dev_download(d_rstd, N);

    if (fused) {
        snprintf(name, sizeof name, "%s residual N=%d C=%d", tag, N, C);
        check16_exact(name, dev_download(d_res, (size_t)N * C), sum);
    }
    snprintf(name, sizeof name, "%s out N=%d C=%d", tag, N, C);
    check16(name, g_out, out);
    snprintf(name, sizeof name, "%s rstd N=%d C=%d", tag, N, C);
    check_close(name, g_rstd, rstd, STAT_TOL_REL, 0.0);
    if (fused) {
        // A recompute normalises the stored residual: the fused kernel's output, bit for bit.
        T16* d_out2 = dev_alloc<T16>((size_t)N * C);
        float* d_rstd2 = dev_alloc<float>(N);
        rmsnorm_forward_cuda(d_out2, d_rstd2, d_res, d_w, N, C, eps, 0);
        std::vector<T16> o2 = dev_download(d_out2, (size_t)N * C);
        std::vector<float> r2 = dev_download(d_rstd2, N);
        snprintf(name, sizeof name, "%s = rmsnorm_forward of its residual (out) N=%d C=%d", tag, N, C);
        check_bitwise(name, g_out, o2);
        snprintf(name, sizeof name, "%s = rmsnorm_forward of its residual (rstd) N=%d C=%d", tag, N, C);
        check_bitwise(name, g_rstd, r2);
        cudaFree(d_out2); cudaFree(d_rstd2);
    }
    cudaFree(d_a); cudaFree(d_b); cudaFree(d_w); cudaFree(d_out); cudaFree(d_rstd);
    if (!alias) cudaFree(d_res);
}

template <class T16>
static void test_rmsnorm_backward(Rng& rng, int N, int C) {
    const DtypeScope<T16> dtype;
    char name[200];
    std::vector<float> x = rand16<T16>(rng, (size_t)N * C, 1.5f, 0.5f), w = rand16<T16>(rng, C, 0.3f, 1.0f);
    std::vector<float> out((size_t)N * C), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kNormEps);
    std::vector<float> dout = rand16<T16>(rng, (size_t)N * C, 1.0f), dinp0 = rand16<T16>(rng, (size_t)N * C, 0.5f);
    std::vector<float> dw0 = rand16<T16>(rng, C, 1.0f);

    T16* d_x = dev_upload(to16<T16>(x));
    T16* d_w = dev_upload(to16<T16>(w));
    T16* d_dout = dev_upload(to16<T16>(dout));
    float* d_rstd = dev_upload(rstd);
    T16* d_dinp = dev_alloc<T16>((size_t)N * C);
    T16* d_dw = dev_alloc<T16>(C);
    const size_t sbytes = rmsnorm_backward_scratch_bytes(N, C);
    void* scratch = dev_scratch(sbytes);
    // accumulate 1 onto nonzero gradients; 0: dweight overwritten, never read (NaN there
    // must not show). dinp accumulates in both.
    for (int accumulate = 1; accumulate >= 0; accumulate--) {
        std::vector<float> dinp = dinp0, dw = accumulate ? dw0 : std::vector<float>(C, 0.0f);
        rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
        const std::vector<T16> dw_start = to16<T16>(accumulate ? dw0 : std::vector<float>(C, NAN));
        std::vector<T16> runs[2];
        for (int run = 0; run < 2; run++) {  // twice from the same state: bitwise equal
            dev_set(d_dinp, to16<T16>(dinp0));
            dev_set(d_dw, dw_start);
            rmsnorm_backward_cuda(d_dinp, d_dw, scratch, sbytes, d_dout, d_x, d_w, d_rstd, N, C, accumulate, 0);
            runs[run] = dev_download(d_dinp, (size_t)N * C);
            std::vector<T16> g_dw = dev_download(d_dw, C);
            if (run == 0) {
                snprintf(name, sizeof name, "rmsnorm_backward (accumulate %d) dinp N=%d C=%d", accumulate, N, C);
                check16(name, runs[0], dinp);
                snprintf(name, sizeof name, "rmsnorm_backward (accumulate %d) dweight%s N=%d C=%d", accumulate,
                         accumulate ? "" : " over NaN", N, C);
                check16(name, g_dw, dw);
            }
            runs[run].insert(runs[run].end(), g_dw.begin(), g_dw.end());
        }
        snprintf(name, sizeof name, "rmsnorm_backward (accumulate %d) deterministic N=%d C=%d", accumulate, N, C);
        check_bitwise(name, runs[0], runs[1]);
    }
    cudaFree(d_x); cudaFree(d_w); cudaFree(d_dout); cudaFree(d_rstd); cudaFree(d_dinp); cudaFree(d_dw); cudaFree(scratch);
}

// Forward and inverse against the twin, the v heads untouched, determinism, and the inverse
// of the forward giving back the input: the rotation keeps a pair's norm, so the two
// roundings (after each pass) are each within half an ulp of that norm (tolerance: one ulp
// of twice the norm per element).
template <class T16>
static void test_rope(Rng& rng, int B, int T, int NH, int KVH, int hs, RopeParams p, const char* what) {
    const DtypeScope<T16> dtype;
    char name[240];
    const size_t W = (size_t)(NH + 2 * KVH) * hs, n = (size_t)B * T * W;
    std::vector<float> qkv = rand16<T16>(rng, n, 1.0f);
    std::vector<float> fwd = qkv, inv = qkv;
    rope_forward(fwd.data(), B, T, NH, KVH, hs, p, 0);
    rope_forward(inv.data(), B, T, NH, KVH, hs, p, 1);
    const std::vector<T16> q16 = to16<T16>(qkv);
    T16* d = dev_upload(q16);
    char shape[160];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d KVH=%d hs=%d, %s", B, T, NH, KVH, hs, what);

    rope_cuda(d, B, T, NH, KVH, hs, p, 0, 0);
    const std::vector<T16> g_fwd = dev_download(d, n);
    snprintf(name, sizeof name, "rope forward %s", shape);
    check16(name, g_fwd, fwd);
    std::vector<T16> v_in, v_out;  // the v heads: the last KVH heads of each row
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (size_t c = (size_t)(NH + KVH) * hs; c < W; c++) {
            v_in.push_back(q16[r * W + c]);
            v_out.push_back(g_fwd[r * W + c]);
        }
    snprintf(name, sizeof name, "rope forward leaves v untouched %s", shape);
    check_bitwise(name, v_out, v_in);

    rope_cuda(d, B, T, NH, KVH, hs, p, 1, 0);  // the inverse of the forward: back to the input
    std::vector<float> scale(n);
    for (size_t i = 0; i < n; i += 2) scale[i] = scale[i + 1] = 2.0f * hypotf(qkv[i], qkv[i + 1]);
    snprintf(name, sizeof name, "rope inverse(forward) = input %s", shape);
    check_close_scaled(name, from16(dev_download(d, n)), qkv, scale, Dtype<T16>::rel, Dtype<T16>::abs_min);

    dev_set(d, q16);
    rope_cuda(d, B, T, NH, KVH, hs, p, 1, 0);
    snprintf(name, sizeof name, "rope inverse %s", shape);
    check16(name, dev_download(d, n), inv);

    dev_set(d, q16);
    rope_cuda(d, B, T, NH, KVH, hs, p, 0, 0);
    snprintf(name, sizeof name, "rope deterministic %s", shape);
    check_bitwise(name, dev_download(d, n), g_fwd);
    cudaFree(d);
}

// misalign = 1: every tensor one element past its allocation (the scalar path).
template <class T16>
static void test_swiglu(Rng& rng, int N, int F, int misalign) {
    const DtypeScope<T16> dtype;
    char name[200];
    const char* tag = misalign ? " unaligned" : "";
    const size_t nf = (size_t)N * F;
    std::vector<float> inp = rand16<T16>(rng, 2 * nf, 3.0f);  // gates out to the sigmoid's tails
    std::vector<float> dout = rand16<T16>(rng, nf, 1.0f), out(nf), dinp(2 * nf);
    swiglu_forward(out.data(), inp.data(), N, F);
    swiglu_backward(dinp.data(), dout.data(), inp.data(), N, F);
    T16* d_inp = dev_alloc<T16>(2 * nf + 1);
    T16* d_out = dev_alloc<T16>(nf + 1);
    T16* d_dout = dev_alloc<T16>(nf + 1);
    T16* d_dinp = dev_alloc<T16>(2 * nf + 1);
    T16* I = d_inp + misalign; T16* O = d_out + misalign; T16* D = d_dout + misalign; T16* DI = d_dinp + misalign;
    dev_set(I, to16<T16>(inp));
    dev_set(D, to16<T16>(dout));
    dev_set(DI, to16<T16>(std::vector<float>(2 * nf, NAN)));  // overwritten, never read
    swiglu_forward_cuda(O, I, N, F, 0);
    snprintf(name, sizeof name, "swiglu_forward N=%d F=%d%s", N, F, tag);
    check16(name, dev_download(O, nf), out);
    swiglu_backward_cuda(DI, D, I, N, F, 0);
    snprintf(name, sizeof name, "swiglu_backward (dinp over NaN) N=%d F=%d%s", N, F, tag);
    check16(name, dev_download(DI, 2 * nf), dinp);
    cudaFree(d_inp); cudaFree(d_out); cudaFree(d_dout); cudaFree(d_dinp);
}

// ----------------------------------------------------------------------------
// Every test of a T16 kernel, on every shape, for one storage type (then the tests that are
// not about it, in bf16's run, in the order they always ran): bf16's checks keep their inputs.

template <class T16>
static void test_storage_kernels(Rng& rng) {
    // Encoder: N = 1; C = 200 (not a multiple of 256 channels per warp); small V (many
    // repeated ids, unused rows must stay unchanged); a single id repeated 200 times (runs
    // longer than the 32-entry chunks); GPT-2-like widths.
    test_encoder<T16>(rng, 1, 1, 8, 3, false);
    test_encoder<T16>(rng, 3, 37, 200, 50, false);
    test_encoder<T16>(rng, 2, 100, 24, 5, true);
    test_encoder<T16>(rng, 4, 64, 768, 1000, false);

    // LayerNorm: N = 1; C = 776 (not a multiple of 256); C = 1600 (d48); many row blocks;
    // C = 2064 (over 2048: the forward re-reads the row instead of keeping it in registers).
    const int ln_shapes[][2] = {{1, 8}, {67, 776}, {130, 1600}, {3, 2064}};
    for (auto& s : ln_shapes) {
        test_layernorm_forward<T16>(rng, s[0], s[1], false, false, kNormEps);
        test_layernorm_forward<T16>(rng, s[0], s[1], true, false, kNormEps);
    }
    test_layernorm_forward<T16>(rng, 33, 264, true, true, kNormEps);
    test_layernorm_forward<T16>(rng, 67, 776, false, false, kOtherEps);   // the model's eps, not 1e-5
    test_layernorm_forward<T16>(rng, 33, 264, true, false, kOtherEps);
    // Backward (one pass: each thread holds 1, 2 or 4 packs of 8 channels, of 4, 2 or 1 rows
    // at a time): 1 pack (C <= 2048; C = 776: 97 packs on 128 threads), 2 packs (C = 2056:
    // 257 packs on 160 threads, most of them with one), 4 packs (C = 4104: 513 packs on 160
    // threads; C = 8192, the widest); N not a multiple of the rows at a time, blocks of 16
    // rows and of more (N = 9000: 18).
    const int lnb_shapes[][2] = {{1, 8}, {67, 776}, {1000, 264}, {9000, 64}, {257, 1600},
                                 {21, 2056}, {37, 4104}, {5, 8192}};
    for (auto& s : lnb_shapes) test_layernorm_backward<T16>(rng, s[0], s[1]);

    // Flat kernels: sizes around the 8-element groups, odd sizes, unaligned pointers.
    for (size_t n : {(size_t)1, (size_t)7, (size_t)8, (size_t)1000, (size_t)100003}) test_gelu<T16>(rng, n, 0);
    test_gelu<T16>(rng, 1001, 1);

    // Bias gradient: N = 1; OC = 1000 (not a multiple of 256); many row blocks; tall.
    const int bias_shapes[][2] = {{1, 8}, {333, 1000}, {5000, 72}, {20000, 264}};
    for (auto& s : bias_shapes) test_bias_backward<T16>(rng, s[0], s[1]);

    // Cross-entropy: V = 1 (loss 0, gradient 0); Vp > V with V not a multiple of 8; GPT-2's
    // padded vocabulary.
    test_crossentropy<T16>(rng, 1, 1, 8);
    test_crossentropy<T16>(rng, 3, 37, 48);
    test_crossentropy<T16>(rng, 5, 1000, 1024);
    test_crossentropy<T16>(rng, 64, 50257, 50304);
    test_crossentropy_bad_target<T16>(rng);

    test_adamw<T16>(rng);
    test_fold_grad<T16>(rng);
    if (is_bf16<T16>) {  // not about the storage type
        test_stochastic_rounding();  // bf16's parameter copy
        test_sum_squares(rng, 1, 0);
        test_sum_squares(rng, 1000, 0);
        test_sum_squares(rng, 10000003, 0);  // more than one grid-stride pass
        test_sum_squares(rng, 100001, 1);
        test_grad_clip_scale();
    }

    test_casts<T16>(rng, 100003, 0);
    test_casts<T16>(rng, 1001, 1);
    test_casts<T16>(rng, 5, 0);

    // The Llama family. The embedding without positions; RMSNorm as LayerNorm's shapes plus
    // C = 203 (not a multiple of 8: the scalar path) and C = 2053 (scalar, 2 packs a thread);
    // RoPE with grouped-query heads, Llama 3.1's scaling (hs = 16 and 64 put frequencies in
    // each of its three bands) and plain, hs = 6 (the pair-wise path), positions up to 8191
    // (angles of 8191 rad); SwiGLU with F around the 8-column groups and unaligned.
    test_encoder_no_positions<T16>(rng, 1, 1, 8, 3);
    test_encoder_no_positions<T16>(rng, 3, 37, 200, 50);
    const int rms_shapes[][2] = {{1, 8}, {67, 776}, {37, 203}, {130, 1600}};
    for (auto& s : rms_shapes) {
        test_rmsnorm_forward<T16>(rng, s[0], s[1], false, false, kNormEps);
        test_rmsnorm_forward<T16>(rng, s[0], s[1], true, false, kNormEps);
    }
    test_rmsnorm_forward<T16>(rng, 33, 264, true, true, kNormEps);
    test_rmsnorm_forward<T16>(rng, 67, 776, false, false, kOtherEps);   // the model's eps, not 1e-5
    test_rmsnorm_forward<T16>(rng, 37, 203, true, false, kOtherEps);
    const int rmsb_shapes[][2] = {{1, 8}, {67, 776}, {1000, 264}, {37, 203}, {21, 2056}, {9, 2053}, {37, 4104}, {5, 8192}};
    for (auto& s : rmsb_shapes) test_rmsnorm_backward<T16>(rng, s[0], s[1]);
    const RopeParams llama31 = {500000.0f, 8.0f, 1.0f, 4.0f, 8192}, plain = {10000.0f, 1.0f, 1.0f, 1.0f, 0};
    test_rope<T16>(rng, 2, 37, 4, 2, 64, llama31, "Llama 3.1 scaling");
    test_rope<T16>(rng, 3, 19, 2, 2, 16, plain, "theta 10000");
    test_rope<T16>(rng, 2, 11, 3, 1, 6, plain, "theta 10000");
    test_rope<T16>(rng, 1, 8192, 1, 1, 16, llama31, "Llama 3.1 scaling");
    test_rope<T16>(rng, 1, 8192, 2, 1, 16, plain, "theta 10000");
    for (int F : {1, 8, 203, 1000}) test_swiglu<T16>(rng, 3, F, 0);
    test_swiglu<T16>(rng, 4, 64, 1);

    if constexpr (is_bf16<T16>) test_matmul_autotune(rng);
    else test_matmul_untuned<T16>(rng);
    test_matmul_bias_grad<T16>(rng);

    // Tensor parallelism's vocabulary ranges (their own random inputs: last, so nothing above
    // changes). The embedding: tp = 2 and 4 over Vp = 64 (V = 50: the last range of 4 has no
    // token), with and without wpe. The cross-entropy: Vp = 64 with V = 37 (tp = 2: a rank
    // with padding; 4: one with no real column), tp = 1, N = 1, GPT-2-like 1000 of 1024.
    test_encoder_vocab_split<T16>(3, 37, 24, 50, 64, true);
    test_encoder_vocab_split<T16>(2, 16, 200, 50, 64, false);
    for (int tp : {1, 2, 4}) test_crossentropy_vocab_split<T16>(5, 37, 64, tp);
    test_crossentropy_vocab_split<T16>(1, 64, 64, 2);
    test_crossentropy_vocab_split<T16>(3, 1000, 1024, 4);
    if constexpr (is_bf16<T16>) test_sr_key_runs();   // (its own random inputs, last)
}

// ----------------------------------------------------------------------------

int main(void) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("ok - cuda kernels # skip no GPU\n");
        return 0;
    }
    CUDA_CHECK(cudaSetDevice(0));
    Rng rng(20240520);

    test_storage_kernels<bf16>(rng);
    test_storage_kernels<fp16>(rng);

    CUDA_CHECK(cudaDeviceSynchronize());
    printf("# cuda kernels: %d passed, %d failed\n", n_passed, n_failed);
    return n_failed > 0 ? 1 : 0;
}
