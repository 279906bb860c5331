// GPU test: cuBLASLt matmuls (kernels/cuda_matmul.cuh) and attention (kernels/cuda_attention.cuh:
// the flash kernels of cuda_attention_flash.cuh, the cuBLAS path of cuda_attention_cublas.cuh)
// against their CPU twins (kernels/cpu_kernels.h), on the same random inputs rounded to the
// 16-bit storage type T16: bf16, and fp16 (--param-dtype fp16; its checks' names end in
// " [fp16]", bf16's carry no tag).
// Prints one "ok - ..." / "not ok - ..." line per check; exits 1 if any failed. Without a
// usable GPU: "ok - cuda matmul and attention # skip no GPU", exit 0 (after the refusal
// checks, which need no GPU: bad arguments are rejected with a message before any CUDA call).
// `test_attention_cuda matmul` stops after the matmul checks; `test_attention_cuda pipelined`
// runs the flash-pipelined checks only (test_attention_pipelined: a quick look at that kernel).
//
// Tolerances (errors are max |gpu - cpu| over the tensor divided by max |cpu| over it, i.e.
// relative to the tensor's largest magnitude, unless stated):
// - bf16 outputs: 1e-2. A bf16 store alone is off by up to 2^-9 = 0.2% of the value; the
//   attention also rounds P and dS to bf16 before its tensor-core products, and its D_i
//   comes from the bf16 out. Gradient sections (dq, dk, dv) are normalised separately,
//   each by max(its own max, 1e-2 x the max over all of dqkv), so that a section that is
//   exactly zero in theory (dq, dk at T = 1) compares against the gradient's scale.
// - fp16 outputs: 1e-2 / 8 = 1.25e-3. Every error above is a sum of roundings to T16 (the
//   stores, P and dS before their products, the out D_i is computed from, the unfused GELU's
//   pre-activation, beta = 1's product and sum), each proportional to the type's unit
//   roundoff: 2^-8 for bf16 (an 8-bit significand), 2^-11 for fp16 (11 bits: 8 times
//   smaller), while the fp32 arithmetic's share (~1e-6) is far below both. So fp16's bound is
//   bf16's times 2^-11 / 2^-8. The inputs (|x| <= 4, sums of <= 384 products) stay well
//   inside fp16's range (largest finite 65504); P and dS below fp16's normal range (2^-14)
//   are rounded to multiples of 2^-24, at most 2^-25 off each: < 300 x 2^-25 x 2 ~ 2e-5 of a
//   row's output, also far below the bound.
// - fp32 outputs of 16-bit products (dweight in fp32): 1e-4 (only the summation order
//   differs: bf16's and fp16's products are both exact in fp32, 8 + 8 and 11 + 11 bits).
// - lse (fp32 end to end, from exact products of the 16-bit inputs): 1e-4 x max(1, max |lse|),
//   for either type.
// - flash vs cublas (both on the GPU, each within the tolerance of the CPU): twice the
//   tolerance (2e-2 for bf16, 2.5e-3 for fp16).
// - determinism: bitwise equality of two runs (forward and backward, every path; dweight).
// Attention shapes: T = 1, 64, 100, 200, 256, 300 (flash's forward tiles are 128 queries,
// its backward blocks 128 keys: partial first tiles, several tiles with a partial last one,
// exact multiples), head sizes 64 and 128, B = 2 with 2 and 4 heads; a sharp softmax; a head
// size only cublas supports. Grouped-query attention (KVH kv heads shared by NH / KVH query
// heads each; qkv rows of C + 2 KVH hs): NH = 4 with KVH = 2 and NH = 8 with KVH = 1, both
// head sizes, T = 100 and 200. The implementations are listed in kImpls. fp16 runs a
// subset (the emulator's run time: test_attention_shapes). flash-pipelined (its own forward,
// flash's backward pipelined: its dqkv from flash's out and lse must be flash's, bitwise)
// runs on shapes of its own (test_attention_pipelined: T = 1, 37, 130, 257,
// i.e. one partial tile up to three 128-key tiles, all three slots of its K/V ring, the last
// partial; GQA 4/2 and 4/1; both head sizes and types), against the CPU, flash and itself.
// - GELU epilogue: besides the tolerance check against gelu_forward, a projection test tells
//   the tanh approximation from the erf GELU (they differ by < 5e-4, below bf16 resolution per
//   element, but not on average over 10^5 elements): see test_gelu_flavour (both types).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "kernels/cuda_attention.cuh"
#include "kernels/cuda_attention_flash.cuh"  // FlashShape: the shared memory the test prints
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_matmul.cuh"

static int g_failed = 0;

static void report(bool ok, const char* name, const char* detail) {
    if (ok) printf("ok - %s (%s)\n", name, detail);
    else { printf("not ok - %s: %s\n", name, detail); g_failed++; }
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// Host helpers

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1) {}
    float uniform() {  // [0, 1)
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        return (float)((s * 2685821657736338717ull) >> 40) * (1.0f / 16777216.0f);
    }
    float sym(float amp) { return amp * (2.0f * uniform() - 1.0f); }
};

// The storage type's tolerance (see the top), and the tag its checks' names end in.
static const double BF16_TOL = 1e-2, FP16_TOL = 1e-2 / 8;
template <class T16> static constexpr bool kFp16 = std::is_same<T16, fp16>::value;
template <class T16> static double tol16() { return kFp16<T16> ? FP16_TOL : BF16_TOL; }
template <class T16> static const char* tag16() { return kFp16<T16> ? " [fp16]" : ""; }

// n values uniform in [-amp, amp), rounded to T16 (so CPU and GPU see the same numbers).
template <class T16>
static std::vector<float> rand16(Rng& r, size_t n, float amp) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = to_float(from_float<T16>(r.sym(amp)));
    return v;
}

template <class T16>
static T16* dev16(const std::vector<float>& v) {
    std::vector<T16> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = from_float<T16>(v[i]);
    T16* d = NULL;
    CUDA_CHECK(cudaMalloc(&d, v.size() * sizeof(T16) + 16));
    CUDA_CHECK(cudaMemcpy(d, h.data(), v.size() * sizeof(T16), cudaMemcpyHostToDevice));
    return d;
}
template <class T16>
static T16* dev16_fill(size_t n, unsigned char byte) {  // 0xff bytes = NaN (bf16 and fp16)
    T16* d = NULL;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(T16) + 16));
    CUDA_CHECK(cudaMemset(d, byte, n * sizeof(T16)));
    return d;
}
template <class T16>
static std::vector<float> host16(const T16* d, size_t n) {
    std::vector<T16> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T16), cudaMemcpyDeviceToHost));
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = to_float(h[i]);
    return v;
}
static std::vector<float> host_f32(const float* d, size_t n) {
    std::vector<float> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
}
static bool dev_equal(const void* a, const void* b, size_t bytes) {
    std::vector<unsigned char> x(bytes), y(bytes);
    CUDA_CHECK(cudaMemcpy(x.data(), a, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(y.data(), b, bytes, cudaMemcpyDeviceToHost));
    return memcmp(x.data(), y.data(), bytes) == 0;
}

static double max_abs(const std::vector<float>& v) {
    double m = 0.0;
    for (float x : v) m = fmax(m, fabs((double)x));
    return m;
}

// max |got - ref| / max(max |ref|, floor); +inf when got has a non-finite value.
static double rel_err(const std::vector<float>& got, const std::vector<float>& ref, double floor_ = 0.0) {
    double e = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!isfinite(got[i])) return INFINITY;
        e = fmax(e, fabs((double)got[i] - (double)ref[i]));
    }
    const double norm = fmax(fmax(max_abs(ref), floor_), 1e-30);
    return e / norm;
}

// Section s (0: q, 1: k, 2: v) of every row of a [rows, C + 2 kvw] tensor: q is C wide,
// k and v kvw = KVH hs wide each.
static std::vector<float> section(const std::vector<float>& v, int C, int kvw, int s) {
    const size_t qw = (size_t)C + 2 * (size_t)kvw, rows = v.size() / qw;
    const size_t off = s == 0 ? 0 : (size_t)C + (size_t)(s - 1) * kvw, w = s == 0 ? (size_t)C : (size_t)kvw;
    std::vector<float> out(rows * w);
    for (size_t r = 0; r < rows; r++) memcpy(&out[r * w], &v[r * qw + off], w * sizeof(float));
    return out;
}

// ----------------------------------------------------------------------------
// Matmul

template <class T16>
static void test_matmul(MatmulContext* mm, int N, int C, int OC, uint64_t seed) {
    char name[160], det[256];
    const double tol = tol16<T16>();
    Rng r(seed);
    const std::vector<float> inp = rand16<T16>(r, (size_t)N * C, 1.0f);
    const std::vector<float> w = rand16<T16>(r, (size_t)OC * C, 1.0f);
    const std::vector<float> bias = rand16<T16>(r, OC, 1.0f);
    const std::vector<float> dout = rand16<T16>(r, (size_t)N * OC, 1.0f);
    const std::vector<float> dinp0 = rand16<T16>(r, (size_t)N * C, 4.0f);
    const std::vector<float> pre_c = rand16<T16>(r, (size_t)N * C, 3.0f);  // a pre-GELU of width C
    T16 *d_inp = dev16<T16>(inp), *d_w = dev16<T16>(w), *d_bias = dev16<T16>(bias), *d_dout = dev16<T16>(dout);
    T16* d_pre_c = dev16<T16>(pre_c);
    T16* d_out = dev16_fill<T16>((size_t)N * OC, 0xff);
    T16* d_aux = dev16_fill<T16>((size_t)N * OC, 0xff);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d%s", N, C, OC, tag16<T16>());

    // forward without and with bias (out prefilled with NaN: it must be overwritten)
    std::vector<float> ref((size_t)N * OC);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        matmul_forward(ref.data(), inp.data(), w.data(), with_bias ? bias.data() : NULL, N, C, OC);
        matmul_forward_cuda(mm, d_out, NULL, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        const double e = rel_err(host16(d_out, ref.size()), ref);
        snprintf(name, sizeof name, "matmul forward%s %s", with_bias ? " + bias" : "", shape);
        snprintf(det, sizeof det, "err %.2e, tol %.3g", e, tol);
        report(e <= tol, name, det);
    }

    // forward with the GELU_AUX_BIAS epilogue: out = gelu(pre), aux = pre
    {
        std::vector<float> pre((size_t)N * OC), act((size_t)N * OC);
        matmul_forward(pre.data(), inp.data(), w.data(), bias.data(), N, C, OC);
        gelu_forward(act.data(), pre.data(), act.size());
        CUDA_CHECK(cudaMemset(d_out, 0xff, (size_t)N * OC * sizeof(T16)));
        matmul_forward_cuda(mm, d_out, d_aux, d_inp, d_w, d_bias, N, C, OC, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        const double e_out = rel_err(host16(d_out, act.size()), act);
        const double e_aux = rel_err(host16(d_aux, pre.size()), pre);
        // (read after the call: a refused epilogue has turned the fusion off and run the kernel)
        snprintf(name, sizeof name, "matmul forward + bias + GELU %s %s",
                 mm->fuse_gelu_forward ? "epilogue" : "kernel (unfused)", shape);
        snprintf(det, sizeof det, "gelu out err %.2e, pre-gelu aux err %.2e, tol %.3g", e_out, e_aux, tol);
        report(e_out <= tol && e_aux <= tol, name, det);
    }

    // dinp: overwrite (dinp prefilled with NaN), then accumulate onto dinp0
    {
        T16* d_dinp = dev16_fill<T16>((size_t)N * C, 0xff);
        std::vector<float> ref_d((size_t)N * C, 0.0f), dw_scratch((size_t)OC * C, 0.0f);
        matmul_backward(ref_d.data(), dw_scratch.data(), NULL, dout.data(), inp.data(), w.data(), N, C, OC);
        matmul_backward_dinp_cuda(mm, d_dinp, d_dout, d_w, NULL, N, C, OC, 0, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        double e = rel_err(host16(d_dinp, ref_d.size()), ref_d);
        snprintf(name, sizeof name, "matmul backward dinp (overwrite) %s", shape);
        snprintf(det, sizeof det, "err %.2e, tol %.3g", e, tol);
        report(e <= tol, name, det);

        CUDA_CHECK(cudaFree(d_dinp));
        d_dinp = dev16<T16>(dinp0);
        std::vector<float> ref_a = dinp0;
        matmul_backward(ref_a.data(), dw_scratch.data(), NULL, dout.data(), inp.data(), w.data(), N, C, OC);
        matmul_backward_dinp_cuda(mm, d_dinp, d_dout, d_w, NULL, N, C, OC, 1, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        e = rel_err(host16(d_dinp, ref_a.size()), ref_a);
        snprintf(name, sizeof name, "matmul backward dinp (accumulate, beta=1) %s", shape);
        snprintf(det, sizeof det, "err %.2e, tol %.3g", e, tol);
        report(e <= tol, name, det);

        // DGELU epilogue: dinp = gelu'(pre) * (dout @ W), overwriting
        CUDA_CHECK(cudaMemset(d_dinp, 0xff, (size_t)N * C * sizeof(T16)));
        std::vector<float> ref_g((size_t)N * C, 0.0f);
        gelu_backward(ref_g.data(), pre_c.data(), ref_d.data(), ref_g.size());
        matmul_backward_dinp_cuda(mm, d_dinp, d_dout, d_w, d_pre_c, N, C, OC, 0, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        e = rel_err(host16(d_dinp, ref_g.size()), ref_g);
        snprintf(name, sizeof name, "matmul backward dinp + %s %s",
                 mm->fuse_gelu_backward ? "DGELU epilogue" : "GELU backward kernel (unfused)", shape);
        snprintf(det, sizeof det, "err %.2e vs gelu_backward, tol %.3g", e, tol);
        report(e <= tol, name, det);
        CUDA_CHECK(cudaFree(d_dinp));
    }

    // dweight accumulated twice (beta = 1), T16 and fp32, plus bitwise determinism
    {
        std::vector<float> ref_w((size_t)OC * C, 0.0f);
        for (int k = 0; k < 2; k++)
            matmul_backward(NULL, ref_w.data(), NULL, dout.data(), inp.data(), w.data(), N, C, OC);
        const size_t nw = (size_t)OC * C;
        T16* d_dw = dev16_fill<T16>(nw, 0);
        T16* d_dw2 = dev16_fill<T16>(nw, 0);
        float *d_dw32 = NULL;
        CUDA_CHECK(cudaMalloc(&d_dw32, nw * sizeof(float)));
        CUDA_CHECK(cudaMemset(d_dw32, 0, nw * sizeof(float)));
        for (int k = 0; k < 2; k++) {
            matmul_backward_dweight_cuda(mm, d_dw, mm_type_of(d_dout), d_dout, d_inp, N, C, OC, 1, 0);
            matmul_backward_dweight_cuda(mm, d_dw2, mm_type_of(d_dout), d_dout, d_inp, N, C, OC, 1, 0);
            matmul_backward_dweight_cuda(mm, d_dw32, CUDA_R_32F, d_dout, d_inp, N, C, OC, 1, 0);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        const double e16 = rel_err(host16(d_dw, nw), ref_w);
        const double e32 = rel_err(host_f32(d_dw32, nw), ref_w);
        snprintf(name, sizeof name, "matmul backward dweight accumulated twice %s", shape);
        snprintf(det, sizeof det, "%s err %.2e (tol %.3g), fp32 err %.2e (tol 1e-4)", kFp16<T16> ? "fp16" : "bf16",
                 e16, tol, e32);
        report(e16 <= tol && e32 <= 1e-4, name, det);
        snprintf(name, sizeof name, "matmul backward dweight bitwise deterministic %s", shape);
        report(dev_equal(d_dw, d_dw2, nw * sizeof(T16)), name, "two identical accumulations");
        CUDA_CHECK(cudaFree(d_dw));
        CUDA_CHECK(cudaFree(d_dw2));
        CUDA_CHECK(cudaFree(d_dw32));
    }
    CUDA_CHECK(cudaFree(d_inp)); CUDA_CHECK(cudaFree(d_w)); CUDA_CHECK(cudaFree(d_bias));
    CUDA_CHECK(cudaFree(d_dout)); CUDA_CHECK(cudaFree(d_pre_c));
    CUDA_CHECK(cudaFree(d_out)); CUDA_CHECK(cudaFree(d_aux));
}

// Is cuBLASLt's GELU the tanh approximation (GPT-2's, the CPU twin's) or the erf form? Per
// element they differ by < 4.8e-4, under a bf16 rounding step, so project the GPU's error
// onto the difference: with d = gelu_tanh(x) - gelu_erf(x) over many x,
//   proj = sum (gpu - gelu_tanh) d / sum d^2
// is ~0 when the GPU computes gelu_tanh and ~-1 when it computes gelu_erf (the rounding
// noise is uncorrelated with d; its contribution here is a few 1e-2). Only the epilogue can
// be told apart: it applies the GELU to the fp32 accumulator. The GELU kernel reads bf16
// inputs, a grid of ~2400 values in [-4, 4] on which the output's bf16 rounding alone
// projects to 0.88 (numpy over that grid), so when the epilogue is not in use this skips.
template <class T16>
static void test_gelu_flavour(MatmulContext* mm) {
    char name[96];
    snprintf(name, sizeof name, "cuBLASLt GELU epilogue is the tanh approximation%s", tag16<T16>());
    const int N = 512, C = 256, OC = 512;
    Rng r(7);
    const std::vector<float> inp = rand16<T16>(r, (size_t)N * C, 0.4f);  // pre-activations ~ N(0, 2^2)
    const std::vector<float> w = rand16<T16>(r, (size_t)OC * C, 1.0f);
    T16 *d_inp = dev16<T16>(inp), *d_w = dev16<T16>(w);
    T16* d_out = dev16_fill<T16>((size_t)N * OC, 0);
    T16* d_aux = dev16_fill<T16>((size_t)N * OC, 0);
    matmul_forward_cuda(mm, d_out, d_aux, d_inp, d_w, NULL, N, C, OC, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> pre((size_t)N * OC);
    matmul_forward(pre.data(), inp.data(), w.data(), NULL, N, C, OC);
    const std::vector<float> got = host16(d_out, pre.size());
    if (!mm->fuse_gelu_forward) {  // refused: the kernel ran, on 16-bit inputs (see above)
        printf("ok - %s # skip the epilogue is not in use; test_kernels_cuda checks the GELU kernel against "
               "gelu_forward\n", name);
        CUDA_CHECK(cudaFree(d_inp)); CUDA_CHECK(cudaFree(d_w)); CUDA_CHECK(cudaFree(d_out)); CUDA_CHECK(cudaFree(d_aux));
        return;
    }
    double num = 0.0, den = 0.0;
    size_t used = 0;
    for (size_t i = 0; i < pre.size(); i++) {
        const double x = pre[i];
        if (fabs(x) > 4.0) continue;
        const double gt = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        const double ge = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        const double d = gt - ge;
        num += ((double)got[i] - gt) * d;
        den += d * d;
        used++;
    }
    const double proj = den > 0 ? num / den : NAN;
    char det[200];
    snprintf(det, sizeof det, "projection %.3f over %zu values: 0 = tanh, -1 = erf; tol |proj| < 0.3", proj, used);
    report(fabs(proj) < 0.3, name, det);
    CUDA_CHECK(cudaFree(d_inp)); CUDA_CHECK(cudaFree(d_w)); CUDA_CHECK(cudaFree(d_out)); CUDA_CHECK(cudaFree(d_aux));
}

// Every matmul form in T16 against the CPU twin on two shapes (one repeated: its plans are
// cached), then with the GELU fusion off, and the epilogue's GELU flavour.
template <class T16>
static void test_matmuls(MatmulContext* mm) {
    test_matmul<T16>(mm, 128, 256, 384, 1);
    test_matmul<T16>(mm, 100, 72, 200, 2);
    {   // Plans are cached: repeating a shape runs no new heuristic query.
        const long long q0 = mm->heuristic_queries;
        test_matmul<T16>(mm, 128, 256, 384, 1);
        char name[64], det[128];
        snprintf(name, sizeof name, "matmul plans are cached per shape%s", tag16<T16>());
        snprintf(det, sizeof det, "%lld new heuristic queries when repeating a shape, %d plans cached",
                 mm->heuristic_queries - q0, mm->nplans);
        report(mm->heuristic_queries == q0, name, det);
    }
    // The unfused GELU (--gelu-fusion 0, and what a refused epilogue falls back to): the
    // matmul, then gelu_forward_cuda / gelu_backward_inplace_cuda, against the same twins.
    const int fwd = mm->fuse_gelu_forward, bwd = mm->fuse_gelu_backward;
    matmul_set_gelu_fusion(mm, 0);
    test_matmul<T16>(mm, 100, 72, 200, 3);
    mm->fuse_gelu_forward = fwd;
    mm->fuse_gelu_backward = bwd;
    test_gelu_flavour<T16>(mm);
}

// ----------------------------------------------------------------------------
// Attention

struct AttnRun {
    std::vector<float> out, lse, dqkv;
    bool deterministic;
};

// Every implementation, flash first (the others are compared with it). cudnn runs where its
// library loads (FSDP_CUDNN_LIB; under the emulator the fake cuDNN of dev/cuda_emu/cudnn.cpp)
// and only on the shapes of test_attention_cudnn (the fake interprets its graphs on the CPU).
// flash-pipelined only on the shapes of test_attention_pipelined. A shape's test names the
// implementations it runs as a mask of (1 << i) for kImpls[i].
static const AttentionImpl kImpls[] = {ATTENTION_FLASH, ATTENTION_CUBLAS, ATTENTION_CUDNN, ATTENTION_FLASH_PIPELINED};
static const int kNImpls = 4;
static const int kCudnn = 2;      // kImpls[kCudnn] == ATTENTION_CUDNN
static const int kPipelined = 3;  // kImpls[kPipelined] == ATTENTION_FLASH_PIPELINED
static const unsigned kFlashCublas = 1u << 0 | 1u << 1, kWithCudnn = kFlashCublas | 1u << kCudnn,
                      kFlashPipelined = 1u << 0 | 1u << kPipelined;

// Runs forward + backward of ac's implementation twice (second time into fresh NaN-filled
// buffers; the scratch is refilled with NaN before each run) and returns the first results
// and whether the two runs were bitwise equal.
template <class T16>
static AttnRun run_attention(const AttentionContext* ac, MatmulContext* mm, const T16* d_qkv, const T16* d_dout,
                             int B, int T, int C, int NH, int KVH) {
    const AttentionImpl impl = ac->impl;
    const size_t nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    const size_t nqkv = (size_t)B * T * ((size_t)C + 2 * (size_t)KVH * (C / NH));
    const size_t fs = attention_forward_scratch_bytes(impl, B, T, C, NH);
    const size_t bs = attention_backward_scratch_bytes(impl, B, T, C, NH);
    void* scratch = NULL;
    const size_t ss = fs > bs ? fs : bs;
    if (ss) CUDA_CHECK(cudaMalloc(&scratch, ss));
    T16* out[2]; float* lse[2]; T16* dqkv[2];
    for (int k = 0; k < 2; k++) {
        out[k] = dev16_fill<T16>(nout, 0xff);
        dqkv[k] = dev16_fill<T16>(nqkv, 0xff);
        CUDA_CHECK(cudaMalloc(&lse[k], nlse * sizeof(float)));
        CUDA_CHECK(cudaMemset(lse[k], 0xff, nlse * sizeof(float)));
    }
    for (int k = 0; k < 2; k++) {
        if (ss) CUDA_CHECK(cudaMemset(scratch, 0xff, ss));
        attention_forward_cuda(ac, mm, out[k], lse[k], d_qkv, scratch, ss, B, T, C, NH, KVH, 0);
        attention_backward_cuda(ac, mm, dqkv[k], d_dout, d_qkv, out[k], lse[k], scratch, ss, B, T, C, NH, KVH, 0);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    AttnRun res;
    res.out = host16(out[0], nout);
    res.lse = host_f32(lse[0], nlse);
    res.dqkv = host16(dqkv[0], nqkv);
    res.deterministic = dev_equal(out[0], out[1], nout * sizeof(T16)) &&
                        dev_equal(lse[0], lse[1], nlse * sizeof(float)) &&
                        dev_equal(dqkv[0], dqkv[1], nqkv * sizeof(T16));
    for (int k = 0; k < 2; k++) {
        CUDA_CHECK(cudaFree(out[k])); CUDA_CHECK(cudaFree(lse[k])); CUDA_CHECK(cudaFree(dqkv[k]));
    }
    if (scratch) CUDA_CHECK(cudaFree(scratch));
    return res;
}

static double lse_err(const std::vector<float>& got, const std::vector<float>& ref) {
    double e = 0.0, m = 1.0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!isfinite(got[i])) return INFINITY;
        e = fmax(e, fabs((double)got[i] - (double)ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    return e / m;
}

// Errors of dq, dk, dv sections, each normalised by max(section max, 1e-2 x overall max);
// kvw = KVH hs, the width of the k and v sections.
static void dqkv_errs(const std::vector<float>& got, const std::vector<float>& ref, int C, int kvw, double e[3]) {
    const double floor_ = 1e-2 * max_abs(ref);
    for (int s = 0; s < 3; s++) e[s] = rel_err(section(got, C, kvw, s), section(ref, C, kvw, s), floor_);
}

// NH query heads sharing KVH kv heads (KVH == NH: plain multi-head attention); impls: which
// of kImpls run (cudnn only where its library loaded).
template <class T16>
static void test_attention(const AttentionContext* ctx, MatmulContext* mm, int B, int T, int NH, int KVH, int hs,
                           float amp, uint64_t seed, unsigned impls = kFlashCublas) {
    const double tol = tol16<T16>();
    const int C = NH * hs, kvw = KVH * hs;
    const size_t QW = (size_t)C + 2 * (size_t)kvw;
    char shape[112], name[200], det[256], kv[24] = "";
    if (KVH != NH) snprintf(kv, sizeof kv, " KVH=%d", KVH);
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d%s hs=%d%s%s", B, T, NH, kv, hs, amp > 2.0f ? " sharp" : "",
             tag16<T16>());
    Rng r(seed);
    const std::vector<float> qkv = rand16<T16>(r, (size_t)B * T * QW, amp);
    const std::vector<float> dout = rand16<T16>(r, (size_t)B * T * C, 1.0f);
    std::vector<float> out_c((size_t)B * T * C), lse_c((size_t)B * NH * T), dqkv_c((size_t)B * T * QW, 0.0f);
    attention_forward(out_c.data(), lse_c.data(), qkv.data(), B, T, C, NH, KVH);
    attention_backward(dqkv_c.data(), dout.data(), qkv.data(), out_c.data(), lse_c.data(), B, T, C, NH, KVH);
    T16 *d_qkv = dev16<T16>(qkv), *d_dout = dev16<T16>(dout);

    AttnRun runs[kNImpls];
    bool have[kNImpls] = {};
    for (int i = 0; i < kNImpls; i++) {
        const AttentionImpl impl = kImpls[i];
        const char* iname = attention_impl_name(impl);
        if (!(impls >> i & 1) || (impl == ATTENTION_CUDNN && !ctx[i].cudnn)) continue;  // (cudnn's skip: once, in main)
        if (attention_impl_is_flash(impl) && !attention_flash_supports(hs)) {
            snprintf(name, sizeof name, "attention %s %s # skip head size not supported", iname, shape);
            printf("ok - %s\n", name);
            continue;
        }
        runs[i] = run_attention(&ctx[i], mm, d_qkv, d_dout, B, T, C, NH, KVH);
        have[i] = true;
        const AttnRun& a = runs[i];
        const double eo = rel_err(a.out, out_c), el = lse_err(a.lse, lse_c);
        snprintf(name, sizeof name, "attention %s forward %s", iname, shape);
        snprintf(det, sizeof det, "out err %.2e (tol %.3g), lse err %.2e (tol 1e-4)", eo, tol, el);
        report(eo <= tol && el <= 1e-4, name, det);
        double e[3];
        dqkv_errs(a.dqkv, dqkv_c, C, kvw, e);
        snprintf(name, sizeof name, "attention %s backward %s", iname, shape);
        snprintf(det, sizeof det, "dq %.2e dk %.2e dv %.2e (tol %.3g)", e[0], e[1], e[2], tol);
        report(e[0] <= tol && e[1] <= tol && e[2] <= tol, name, det);
        snprintf(name, sizeof name, "attention %s bitwise deterministic %s", iname, shape);
        report(a.deterministic, name, "two forward+backward runs");
    }
    for (int i = 1; i < kNImpls; i++) {  // flash against each other implementation
        if (!have[0] || !have[i]) continue;
        const double eo = rel_err(runs[0].out, runs[i].out), el = lse_err(runs[0].lse, runs[i].lse);
        double e[3];
        dqkv_errs(runs[0].dqkv, runs[i].dqkv, C, kvw, e);
        snprintf(name, sizeof name, "attention flash vs %s %s", attention_impl_name(kImpls[i]), shape);
        const double t2 = 2 * tol;
        snprintf(det, sizeof det, "out %.2e lse %.2e dq %.2e dk %.2e dv %.2e (tol %.3g, lse 1e-4)", eo, el, e[0], e[1],
                 e[2], t2);
        report(eo <= t2 && el <= 1e-4 && e[0] <= t2 && e[1] <= t2 && e[2] <= t2, name, det);
    }
    if (have[0] && have[kPipelined]) {
        // flash-pipelined's backward on flash's out and lse: its main kernel does flash's
        // arithmetic in flash's order (only the pipelining differs), so dqkv must be flash's, bitwise.
        const size_t nout = (size_t)B * T * C, nlse = (size_t)B * NH * T, nqkv = (size_t)B * T * QW;
        const size_t ss = attention_backward_scratch_bytes(ATTENTION_FLASH_PIPELINED, B, T, C, NH);
        T16 *out = dev16_fill<T16>(nout, 0xff), *dqkv = dev16_fill<T16>(nqkv, 0xff);
        float* lse = NULL;
        void* scratch = NULL;
        CUDA_CHECK(cudaMalloc(&lse, nlse * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&scratch, ss));
        attention_forward_cuda(&ctx[0], mm, out, lse, d_qkv, NULL, 0, B, T, C, NH, KVH, 0);
        attention_backward_cuda(&ctx[kPipelined], mm, dqkv, d_dout, d_qkv, out, lse, scratch, ss, B, T, C, NH, KVH, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = host16(dqkv, nqkv);
        snprintf(name, sizeof name, "attention flash forward + flash-pipelined backward = flash's dqkv, bitwise %s", shape);
        report(got == runs[0].dqkv, name, "the same out and lse in");
        CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(dqkv)); CUDA_CHECK(cudaFree(lse)); CUDA_CHECK(cudaFree(scratch));
    }
    if (have[0] && have[kCudnn]) {
        // cudnn's forward then flash's backward on cudnn's out and lse: the lse must mean what
        // flash's does (natural-log LSE of the scaled scores) for the gradients to agree.
        const size_t nout = (size_t)B * T * C, nlse = (size_t)B * NH * T, nqkv = (size_t)B * T * QW;
        const size_t ss = attention_backward_scratch_bytes(ATTENTION_FLASH, B, T, C, NH);
        T16 *out = dev16_fill<T16>(nout, 0xff), *dqkv = dev16_fill<T16>(nqkv, 0xff);
        float* lse = NULL;
        void* scratch = NULL;
        CUDA_CHECK(cudaMalloc(&lse, nlse * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&scratch, ss));
        attention_forward_cuda(&ctx[kCudnn], mm, out, lse, d_qkv, NULL, 0, B, T, C, NH, KVH, 0);
        attention_backward_cuda(&ctx[0], mm, dqkv, d_dout, d_qkv, out, lse, scratch, ss, B, T, C, NH, KVH, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        double e[3];
        dqkv_errs(host16(dqkv, nqkv), runs[0].dqkv, C, kvw, e);
        snprintf(name, sizeof name, "attention cudnn forward + flash backward %s", shape);
        snprintf(det, sizeof det, "dq %.2e dk %.2e dv %.2e against flash's own (tol %.3g)", e[0], e[1], e[2], 2 * tol);
        report(e[0] <= 2 * tol && e[1] <= 2 * tol && e[2] <= 2 * tol, name, det);
        CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(dqkv)); CUDA_CHECK(cudaFree(lse)); CUDA_CHECK(cudaFree(scratch));
    }
    CUDA_CHECK(cudaFree(d_qkv));
    CUDA_CHECK(cudaFree(d_dout));
}

// cudnn on a few shapes of each kind (the fake cuDNN interprets the frontend's graphs on the
// CPU, slowly): GPT-2's heads (KVH == NH) and grouped-query attention (NH 4 over KVH 2, and 1),
// head sizes 64 and 128, odd T, both 16-bit types; each against the CPU, flash and itself.
template <class T16>
static void test_attention_cudnn(const AttentionContext* ctx, MatmulContext* mm, uint64_t seed) {
    test_attention<T16>(ctx, mm, 2, 37, 2, 2, 64, 2.0f, seed++, kWithCudnn);
    test_attention<T16>(ctx, mm, 1, 45, 4, 2, 128, 2.0f, seed++, kWithCudnn);
    if (!kFp16<T16>) {
        test_attention<T16>(ctx, mm, 1, 33, 4, 1, 64, 2.0f, seed++, kWithCudnn);
        test_attention<T16>(ctx, mm, 1, 29, 2, 2, 128, 3.0f, seed++, kWithCudnn);
    }
}

// A forward shape cuDNN refuses runs on flash (the sampler's and evaluation's shapes; the
// run's own are built at startup). The emulator's fake cuDNN is told to refuse
// (EMU_CUDNN_REFUSE=1, read at each new graph): the output must be flash's, bitwise, twice (the
// refusal is kept, said once). Where cuDNN is real the switch means nothing: skipped.
static void test_attention_cudnn_refused_shape(const AttentionContext* ctx, MatmulContext* mm) {
    const char* name = "attention cudnn: a forward shape cuDNN refuses runs on flash (bitwise flash's, twice)";
    if (!strstr(cudnn_attention_describe(ctx[kCudnn].cudnn), "fake_cudnn")) {
        printf("ok - %s # skip not the emulator's fake cuDNN\n", name);
        return;
    }
    const int B = 1, T = 19, NH = 2, hs = 64, C = NH * hs;
    Rng r(77);
    bf16* d_qkv = dev16<bf16>(rand16<bf16>(r, (size_t)B * T * 3 * C, 2.0f));
    bf16* out[3];
    float* lse[3];
    for (int k = 0; k < 3; k++) {
        out[k] = dev16_fill<bf16>((size_t)B * T * C, 0xff);
        CUDA_CHECK(cudaMalloc(&lse[k], (size_t)B * NH * T * sizeof(float)));
    }
    attention_forward_cuda(&ctx[0], mm, out[0], lse[0], d_qkv, NULL, 0, B, T, C, NH, NH, 0);
    setenv("EMU_CUDNN_REFUSE", "1", 1);
    for (int k = 1; k < 3; k++) attention_forward_cuda(&ctx[kCudnn], mm, out[k], lse[k], d_qkv, NULL, 0, B, T, C, NH, NH, 0);
    unsetenv("EMU_CUDNN_REFUSE");
    CUDA_CHECK(cudaDeviceSynchronize());
    bool same = true;
    for (int k = 1; k < 3; k++)
        same = same && dev_equal(out[0], out[k], (size_t)B * T * C * sizeof(bf16)) &&
               dev_equal(lse[0], lse[k], (size_t)B * NH * T * sizeof(float));
    report(same, name, "B=1 T=19 NH=2 hs=64");
    for (int k = 0; k < 3; k++) { CUDA_CHECK(cudaFree(out[k])); CUDA_CHECK(cudaFree(lse[k])); }
    CUDA_CHECK(cudaFree(d_qkv));
}

// Every shape in bf16. fp16 (the emulator's run time: the shapes do not depend on the type)
// on 2 heads and T = 1 (one key), 100 (a partial first tile), 256 (exact multiples of the
// tiles) and 300 (several tiles, a partial last one), both head sizes, then the sharp softmax
// and the head size only cublas supports. Then grouped-query attention: groups of 2 (T = 100:
// one partial tile of 128 queries or keys, several query blocks of the backward) and one kv
// head for 8 query heads (T = 200: a full tile and a partial one), both head sizes in bf16,
// groups of 2 at hs 64 in fp16.
template <class T16>
static void test_attention_shapes(const AttentionContext* ctx, MatmulContext* mm, uint64_t seed) {
    const int Ts[] = {1, 64, 100, 200, 256, 300};
    const int NHs[] = {2, 4};
    const int HSs[] = {64, 128};
    for (int hs : HSs)
        for (int NH : NHs)
            for (int T : Ts)
                if (!kFp16<T16> || (NH == 2 && T != 64 && T != 200)) test_attention<T16>(ctx, mm, 2, T, NH, NH, hs, 2.0f, seed++);
    test_attention<T16>(ctx, mm, 2, 256, 2, 2, 64, 3.0f, seed++);  // sharp softmax: large running-max rescalings
    test_attention<T16>(ctx, mm, 1, 200, 3, 3, 32, 2.0f, seed++);  // head size only the cublas path supports
    for (int hs : HSs) {
        if (kFp16<T16> && hs != 64) continue;
        test_attention<T16>(ctx, mm, 2, 100, 4, 2, hs, 2.0f, seed++);
        if (!kFp16<T16>) test_attention<T16>(ctx, mm, 2, 200, 8, 1, hs, 2.0f, seed++);
    }
}

// flash-pipelined (kernels/cuda_attention_flash_pipelined.cuh) with flash beside it: GPT-2's
// heads at T = 1 (one key), 37 (a partial tile), 130 (a full 128-key tile and a 2-key one)
// and 257 (three tiles at hs 64, five at hs 128: every slot of the 3-stage K/V ring reused,
// the last tile partial), a sharp softmax; grouped-query attention 4 over 2 and 4 over 1 kv
// heads. fp16: a subset (the emulator's time).
template <class T16>
static void test_attention_pipelined(const AttentionContext* ctx, MatmulContext* mm, uint64_t seed) {
    const int Ts[] = {1, 37, 130, 257};
    for (int hs : {64, 128})
        for (int T : Ts)
            if (!kFp16<T16> || T == 37 || (T == 257 && hs == 64))
                test_attention<T16>(ctx, mm, 1, T, 2, 2, hs, 2.0f, seed++, kFlashPipelined);
    if (!kFp16<T16>) test_attention<T16>(ctx, mm, 1, 257, 2, 2, 64, 3.0f, seed++, kFlashPipelined);  // sharp softmax
    test_attention<T16>(ctx, mm, 1, 130, 4, 2, kFp16<T16> ? 128 : 64, 2.0f, seed++, kFlashPipelined);
    if (!kFp16<T16>) test_attention<T16>(ctx, mm, 1, 130, 4, 1, 128, 2.0f, seed++, kFlashPipelined);
}

// GPT-2 size (T = 1024): flash against cublas, cudnn (where it loaded) and flash-pipelined (no
// CPU: too slow here), determinism, and timings of each printed as comments (the device
// check reads them).
static void test_attention_large(const AttentionContext* ctx, MatmulContext* mm, int B, int T, int NH, int hs) {
    const int C = NH * hs;
    char shape[96], name[200], det[256];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d hs=%d", B, T, NH, hs);
    Rng r(99);
    const std::vector<float> qkv = rand16<bf16>(r, (size_t)B * T * 3 * C, 2.0f);
    const std::vector<float> dout = rand16<bf16>(r, (size_t)B * T * C, 1.0f);
    bf16 *d_qkv = dev16<bf16>(qkv), *d_dout = dev16<bf16>(dout);
    AttnRun runs[kNImpls];
    bool have[kNImpls] = {};
    for (int i = 0; i < kNImpls; i++) {
        have[i] = i != kCudnn || ctx[i].cudnn != NULL;  // cudnn where it loaded
        if (have[i]) runs[i] = run_attention(&ctx[i], mm, d_qkv, d_dout, B, T, C, NH, NH);
    }
    for (int i = 1; i < kNImpls; i++) {
        if (!have[i]) continue;
        const double eo = rel_err(runs[0].out, runs[i].out), el = lse_err(runs[0].lse, runs[i].lse);
        double e[3];
        dqkv_errs(runs[0].dqkv, runs[i].dqkv, C, C, e);
        snprintf(name, sizeof name, "attention flash vs %s %s", attention_impl_name(kImpls[i]), shape);
        snprintf(det, sizeof det, "out %.2e lse %.2e dq %.2e dk %.2e dv %.2e (tol 2e-2, lse 1e-4)", eo, el, e[0], e[1], e[2]);
        report(eo <= 2e-2 && el <= 1e-4 && e[0] <= 2e-2 && e[1] <= 2e-2 && e[2] <= 2e-2, name, det);
    }
    for (int i = 0; i < kNImpls; i++) {
        if (!have[i]) continue;
        snprintf(name, sizeof name, "attention %s bitwise deterministic %s", attention_impl_name(kImpls[i]), shape);
        report(runs[i].deterministic, name, "two forward+backward runs");
    }

    // Timings (informational).
    const size_t nout = (size_t)B * T * C;
    bf16* out = dev16_fill<bf16>(nout, 0);
    bf16* dqkv = dev16_fill<bf16>(3 * nout, 0);
    float* lse = NULL;
    CUDA_CHECK(cudaMalloc(&lse, (size_t)B * NH * T * sizeof(float)));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const double fwd_flops = 2.0 * B * NH * (double)T * T * hs;  // causal: half of 2 GEMMs of 2 T^2 hs
    for (int i = 0; i < kNImpls; i++) {
        if (!have[i]) continue;
        const AttentionContext* ac = &ctx[i];
        const AttentionImpl ai = ac->impl;
        const size_t fs = attention_forward_scratch_bytes(ai, B, T, C, NH), bs = attention_backward_scratch_bytes(ai, B, T, C, NH);
        const size_t ss = fs > bs ? fs : bs;
        void* scratch = NULL;
        if (ss) CUDA_CHECK(cudaMalloc(&scratch, ss));
        float ms[2];
        for (int pass = 0; pass < 2; pass++) {
            const int iters = 10;
            attention_forward_cuda(ac, mm, out, lse, d_qkv, scratch, ss, B, T, C, NH, NH, 0);  // warm-up
            attention_backward_cuda(ac, mm, dqkv, d_dout, d_qkv, out, lse, scratch, ss, B, T, C, NH, NH, 0);
            CUDA_CHECK(cudaEventRecord(e0, 0));
            for (int i = 0; i < iters; i++) {
                if (pass == 0) attention_forward_cuda(ac, mm, out, lse, d_qkv, scratch, ss, B, T, C, NH, NH, 0);
                else attention_backward_cuda(ac, mm, dqkv, d_dout, d_qkv, out, lse, scratch, ss, B, T, C, NH, NH, 0);
            }
            CUDA_CHECK(cudaEventRecord(e1, 0));
            CUDA_CHECK(cudaEventSynchronize(e1));
            CUDA_CHECK(cudaEventElapsedTime(&ms[pass], e0, e1));
            ms[pass] /= iters;
        }
        printf("# attention %s %s: forward %.3f ms (%.1f TFLOP/s causal), backward %.3f ms (%.1f TFLOP/s at 2.5x forward flops)\n",
               attention_impl_name(ai), shape, ms[0], fwd_flops / (ms[0] * 1e9), ms[1], 2.5 * fwd_flops / (ms[1] * 1e9));
        if (scratch) CUDA_CHECK(cudaFree(scratch));
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(dqkv)); CUDA_CHECK(cudaFree(lse));
    CUDA_CHECK(cudaFree(d_qkv)); CUDA_CHECK(cudaFree(d_dout));
}

// ----------------------------------------------------------------------------
// Refusals: bad arguments end the process with status 1 and a message, before any CUDA
// call, so these run (in a forked child) with or without a GPU.

// A context made without a GPU: the implementation and a shared-memory limit of `optin`.
static AttentionContext host_context(AttentionImpl impl, int optin) {
    AttentionContext ac;
    ac.impl = impl;
    ac.smem_optin = optin;
    ac.cudnn = NULL;
    return ac;
}
static void refuse_head_size(void) {  // hs = 96 / 3 = 32: not a flash head size
    const AttentionContext ac = host_context(ATTENTION_FLASH, 227 << 10);
    attention_forward_cuda(&ac, NULL, (bf16*)256, (float*)256, (const bf16*)256, NULL, 0, 1, 8, 96, 3, 3, 0);
}
static void refuse_scratch(void) {  // the flash backward needs D and the dQ slices: room for D only
    const AttentionContext ac = host_context(ATTENTION_FLASH, 227 << 10);
    attention_backward_cuda(&ac, NULL, (bf16*)256, (const bf16*)256, (const bf16*)256, (const bf16*)256,
                            (const float*)256, (void*)256, align_up_256((size_t)1 * 2 * 8 * sizeof(float)),
                            1, 8, 128, 2, 2, 0);
}
static void refuse_smem(void) {  // a GPU with 99 KiB per block (sm_86): flash's hs 128 backward needs more
    const AttentionContext ac = host_context(ATTENTION_FLASH, 99 << 10);
    attention_backward_cuda(&ac, NULL, (bf16*)256, (const bf16*)256, (const bf16*)256, (const bf16*)256,
                            (const float*)256, (void*)256, 1 << 20, 1, 8, 256, 2, 2, 0);
}
static void refuse_smem_pipelined(void) {  // sm_86 again: flash-pipelined's hs 64 forward needs 126 KiB
    const AttentionContext ac = host_context(ATTENTION_FLASH_PIPELINED, 99 << 10);
    attention_forward_cuda(&ac, NULL, (bf16*)256, (float*)256, (const bf16*)256, NULL, 0, 1, 8, 128, 2, 2, 0);
}
static void refuse_uninitialised(void) {  // attention_context_init never ran
    const AttentionContext ac = host_context(ATTENTION_FLASH, 0);
    attention_forward_cuda(&ac, NULL, (bf16*)256, (float*)256, (const bf16*)256, NULL, 0, 1, 8, 128, 2, 2, 0);
}
static void refuse_kv_heads(void) {  // 3 kv heads for 4 query heads
    const AttentionContext ac = host_context(ATTENTION_FLASH, 227 << 10);
    attention_forward_cuda(&ac, NULL, (bf16*)256, (float*)256, (const bf16*)256, NULL, 0, 1, 8, 256, 4, 3, 0);
}
static void refuse_zero_kv_heads(void) {
    const AttentionContext ac = host_context(ATTENTION_CUBLAS, 0);
    attention_backward_cuda(&ac, NULL, (bf16*)256, (const bf16*)256, (const bf16*)256, (const bf16*)256,
                            (const float*)256, (void*)256, 1 << 20, 1, 8, 256, 4, 0, 0);
}
static void refuse_cudnn_unloaded(void) {  // a cudnn context whose library never loaded
    const AttentionContext ac = host_context(ATTENTION_CUDNN, 0);
    attention_forward_cuda(&ac, NULL, (bf16*)256, (float*)256, (const bf16*)256, NULL, 0, 1, 8, 128, 2, 2, 0);
}
static void refuse_dgelu_accumulate(void) {
    matmul_backward_dinp_cuda(NULL, (bf16*)256, (const bf16*)256, (const bf16*)256, (const bf16*)256, 8, 8, 8, 1, 0);
}

static void expect_refusal(const char* name, void (*fn)(void), const char* needle) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) { report(false, name, "pipe failed"); return; }
    const pid_t pid = fork();
    if (pid < 0) { report(false, name, "fork failed"); return; }
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        _exit(0);  // not refused
    }
    close(fds[1]);
    std::string msg;
    char buf[512];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, (size_t)got);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(msg.c_str(), needle) != NULL;
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    report(ok, name, msg.empty() ? "no message" : msg.c_str());
}

int main(int argc, char** argv) {
    expect_refusal("flash attention refuses an unsupported head size", refuse_head_size,
                   "flash attention supports head sizes 64 and 128");
    expect_refusal("flash attention backward refuses a scratch without room for the dQ slices", refuse_scratch,
                   "too small");
    expect_refusal("flash attention refuses a kernel needing more shared memory than the GPU allows", refuse_smem,
                   "bytes of shared memory per block, this GPU allows 101376");
    expect_refusal("flash-pipelined attention refuses a forward needing more shared memory than the GPU allows",
                   refuse_smem_pipelined, "flash-pipelined attention forward needs 129024 bytes of shared memory");
    expect_refusal("flash attention refuses an uninitialised AttentionContext", refuse_uninitialised,
                   "not initialised");
    expect_refusal("attention refuses a kv-head count that does not divide the heads (NH=4, KVH=3)", refuse_kv_heads,
                   "3 kv heads do not divide the 4 heads");
    expect_refusal("attention backward refuses zero kv heads", refuse_zero_kv_heads, "0 kv heads do not divide");
    expect_refusal("matmul refuses DGELU with accumulation", refuse_dgelu_accumulate, "cannot accumulate");
    expect_refusal("cudnn attention refuses a context without the library", refuse_cudnn_unloaded,
                   "cuDNN is not loaded in this AttentionContext");

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("ok - cuda matmul and attention # skip no GPU\n");
        return 0;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        printf("ok - cuda matmul and attention # skip %s is sm_%d%d, the kernels need sm_80+\n", prop.name,
               prop.major, prop.minor);
        return 0;
    }
    printf("# device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    MatmulContext* mm = (MatmulContext*)malloc(sizeof(MatmulContext));
    matmul_context_init(mm);

    const bool only_pipelined = argc > 1 && !strcmp(argv[1], "pipelined");
    if (!only_pipelined) {
        test_matmuls<bf16>(mm);
        test_matmuls<fp16>(mm);
    }
    printf("# GELU fusion in use: forward %s, backward %s\n", mm->fuse_gelu_forward ? "epilogue" : "kernel",
           mm->fuse_gelu_backward ? "epilogue" : "kernel");
    if (argc > 1 && !strcmp(argv[1], "matmul")) {  // the matmul checks only
        matmul_context_destroy(mm);
        free(mm);
        return g_failed ? 1 : 0;
    }

    // One context per implementation (as kImpls), made once: the shared-memory opt-in.
    AttentionContext ctx[kNImpls];
    for (int i = 0; i < kNImpls; i++)
        if (i != kCudnn) attention_context_init(&ctx[i], kImpls[i]);
    char why[512];
    if (attention_context_try_cudnn(&ctx[kCudnn], why, sizeof why) == 0)
        printf("# cudnn: %s\n", cudnn_attention_describe(ctx[kCudnn].cudnn));
    else
        printf("ok - attention cudnn # skip %s\n", why);
    printf("# shared memory per block: flash forward %zu / %zu, backward %zu / %zu bytes (hs 64 / 128); "
           "flash-pipelined forward %zu / %zu; this GPU allows %d\n", FlashShape<64>::fwd_smem,
           FlashShape<128>::fwd_smem, FlashShape<64>::bwd_smem, FlashShape<128>::bwd_smem,
           FlashPipelinedShape<64>::fwd_smem, FlashPipelinedShape<128>::fwd_smem, ctx[0].smem_optin);

    test_attention_pipelined<bf16>(ctx, mm, 400);
    test_attention_pipelined<fp16>(ctx, mm, 500);
    if (only_pipelined) {
        for (int i = 0; i < kNImpls; i++) attention_context_destroy(&ctx[i]);
        matmul_context_destroy(mm);
        free(mm);
        return g_failed ? 1 : 0;
    }
    test_attention_shapes<bf16>(ctx, mm, 10);
    test_attention_shapes<fp16>(ctx, mm, 100);
    if (ctx[kCudnn].cudnn) {
        test_attention_cudnn<bf16>(ctx, mm, 200);
        test_attention_cudnn<fp16>(ctx, mm, 300);
        test_attention_cudnn_refused_shape(ctx, mm);
    }
    if (argc > 1 && !strcmp(argv[1], "cudnn")) {  // everything but the large shape
        for (int i = 0; i < kNImpls; i++) attention_context_destroy(&ctx[i]);
        matmul_context_destroy(mm);
        free(mm);
        return g_failed ? 1 : 0;
    }
    test_attention_large(ctx, mm, 4, 1024, 12, 64);
    for (int i = 0; i < kNImpls; i++) attention_context_destroy(&ctx[i]);

    matmul_context_destroy(mm);
    free(mm);
    return g_failed ? 1 : 0;
}
