// Self-check of the emulator's fp16 (IEEE binary16, __half) support, written as a small CUDA
// program: dev/test/test_kernels_emu.sh transforms and builds it like selftest_streams.cu and
// runs it under the emulator only (it re-runs itself with --bad-mma N to see an abort).
// The reference is GCC's _Float16 (an IEEE binary16 whose conversions libgcc's soft-float code
// does, correctly rounded: not the shim's code), plus bit patterns derived by hand:
//   - include/cuda_fp16.h: every one of the 65536 patterns through __half2float (exact, NaN
//     to the canonical 0x7fffffff) and back through __float2half_rn (the same pattern, NaN to
//     0x7fff), __hisnan / __hisinf; __float2half_rn on every 251st fp32 pattern, every 31st one
//     in the range that rounds to a finite non-zero half, every midpoint between adjacent halves
//     and its fp32 neighbours (ties to even, subnormals, the 65504 / 65520 overflow boundary),
//     and a table of special values; __double2half rounds once where going through fp32 would
//     round twice; __floats2half2_rn puts lo in the low half; <cuda_bf16.h> alone brings __half
//     (this file includes nothing else for it, as CUDA 12's header does);
//   - mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: one tile with subnormal A elements,
//     against a double reference (exact here, so bit for bit), and the .bf16 form still decodes
//     bf16 on the same fragments; another type string aborts with "unsupported PTX instruction";
//   - cuBLASLt with CUDA_R_16F A and B: fp16 D with the BIAS epilogue (every element the
//     correctly rounded exact result: within half an fp16 ulp), fp32 D with BIAS then beta = 1 in
//     place, GELU_AUX_BIAS (aux and D fp16) and DGELU, the "ulp" candidate flips fp16 bits, and
//     16F x 16BF (either way) and a D of the other 16-bit type are refused.
// NCCL's ncclFloat16 is checked by dev/cuda_emu/nccl_selftest.cpp. Output: TAP lines
// "ok - fp16: ..." / "not ok - fp16: ...".
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#ifndef __FLT16_MAX__
#error "selftest_fp16 needs the compiler's _Float16 (GCC >= 12 on x86-64) as its reference"
#endif

#include <emu_selftest_check.h>  // CHECK

static int failures = 0;
static void report(bool ok, const char* what, const std::string& detail) {
    printf("%s - fp16: %s (%s)\n", ok ? "ok" : "not ok", what, detail.c_str());
    failures += !ok;
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static float from_fbits(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
static uint16_t rbits(_Float16 h) { uint16_t u; memcpy(&u, &h, sizeof u); return u; }
static _Float16 ref_half(uint16_t u) { _Float16 h; memcpy(&h, &u, sizeof h); return h; }
static bool nan16(uint16_t b) { return (b & 0x7fffu) > 0x7c00u; }
static uint16_t rn(float f) { return __half_as_ushort(__float2half_rn(f)); }

// Counts mismatches, keeping the first one's description.
struct Tally {
    long n = 0, bad = 0;
    std::string first;
    void add(bool ok, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
    std::string detail() const {
        return std::to_string(bad) + " of " + std::to_string(n) + " wrong" + (bad ? "; first: " + first : "");
    }
};
void Tally::add(bool ok, const char* fmt, ...) {
    n++;
    if (ok) return;
    if (bad++ == 0) {
        char buf[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        first = buf;
    }
}
// __float2half_rn(f) against _Float16's conversion: the same bits, or both NaN with ours 0x7fff.
static void check_rn(Tally& t, float f) {
    const uint16_t got = rn(f), want = rbits((_Float16)f);
    t.add(isnan(f) ? got == 0x7fffu && nan16(want) : got == want, "0x%08x: 0x%04x, want 0x%04x", fbits(f), got, want);
}

// ----------------------------------------------------------------------------
// (a) include/cuda_fp16.h

static void conversions() {
    Tally all, cls;
    for (uint32_t b = 0; b < 65536; b++) {
        const __half h = __ushort_as_half((uint16_t)b);
        const float f = __half2float(h), r = (float)ref_half((uint16_t)b);
        if (nan16((uint16_t)b)) {
            all.add(fbits(f) == 0x7fffffffu && rn(f) == 0x7fffu, "NaN 0x%04x: 0x%08x, back 0x%04x", b, fbits(f), rn(f));
        } else {
            all.add(fbits(f) == fbits(r) && rn(f) == b, "0x%04x: %a (want %a), back 0x%04x", b, f, r, rn(f));
        }
        cls.add(__hisnan(h) == (bool)isnan(r) && __hisinf(h) == (isinf(r) ? (r < 0 ? -1 : 1) : 0),
                "0x%04x: __hisnan %d __hisinf %d", b, (int)__hisnan(h), __hisinf(h));
    }
    report(all.bad == 0, "every binary16 pattern: __half2float exact, __float2half_rn gives it back (NaN: canonical)",
           all.detail());
    report(cls.bad == 0, "__hisnan / __hisinf on every pattern", cls.detail());

    // fp32 patterns: a stride over all of them (both signs, NaN, inf, fp32 subnormals), and a
    // finer one over |x| in [2^-26, 2^17), where the binary16 result is not just 0 or inf.
    Tally sweep;
    for (uint64_t u = 0; u < (1ull << 32); u += 251) check_rn(sweep, from_fbits((uint32_t)u));
    for (uint32_t u = 0x32800000u; u < 0x48000000u; u += 31) {
        check_rn(sweep, from_fbits(u));
        check_rn(sweep, from_fbits(u | 0x80000000u));
    }
    report(sweep.bad == 0, "__float2half_rn = _Float16's rounding on a stride of fp32 patterns", sweep.detail());

    // Midpoints between adjacent binary16 values (exact in fp32), from 0 / 2^-24 up to 65504 /
    // 65536 (the first value past the largest finite one: its midpoint 65520 rounds to inf):
    // the tie goes to the even pattern, its fp32 neighbours to the nearer value.
    Tally mid;
    for (uint32_t b = 0; b < 0x7c00u; b++) {
        const float lo = __half2float(__ushort_as_half((uint16_t)b));
        const float hi = b + 1 < 0x7c00u ? __half2float(__ushort_as_half((uint16_t)(b + 1))) : 65536.0f;
        const float m = lo + (hi - lo) / 2;
        const uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
        for (int s = 0; s < 2; s++) {
            const uint16_t sg = s ? 0x8000u : 0;
            const float sm = s ? -m : m;
            const float below = nextafterf(sm, 0.0f), above = nextafterf(sm, s ? -INFINITY : INFINITY);
            mid.add(rn(sm) == (even | sg) && rn(below) == (b | sg) && rn(above) == ((b + 1) | sg),
                    "between 0x%04x and 0x%04x: %a -> 0x%04x, %a -> 0x%04x, %a -> 0x%04x", b | sg, (b + 1) | sg,
                    sm, rn(sm), below, rn(below), above, rn(above));
            check_rn(mid, sm);
            check_rn(mid, below);
            check_rn(mid, above);
        }
    }
    report(mid.bad == 0, "__float2half_rn at every midpoint: ties to even, neighbours to the nearer value (vs _Float16 too)",
           mid.detail());

    // Special values, bit patterns derived by hand.
    const struct { float f; uint16_t want; } table[] = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
        {NAN, 0x7fff}, {-NAN, 0x7fff}, {from_fbits(0x7f800001u), 0x7fff}, {from_fbits(0xffc00123u), 0x7fff},
        {65504.0f, 0x7bff}, {65519.998f, 0x7bff}, {65520.0f, 0x7c00}, {-65520.0f, 0xfc00}, {FLT_MAX, 0x7c00},
        {1.0f, 0x3c00}, {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x3p-11f, 0x3c02}, {-2.0f, 0xc000},
        {0x1p-14f, 0x0400}, {0x1p-14f - 0x1p-25f, 0x0400}, {0x1p-14f - 0x1p-24f, 0x03ff}, {0x1p-14f - 0x3p-25f, 0x03fe},
        {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000}, {-0x1p-25f, 0x8000}, {nextafterf(0x1p-25f, 1.0f), 0x0001},
        {0x3p-25f, 0x0002}, {0x5p-25f, 0x0002}, {0x7p-25f, 0x0004}, {FLT_MIN, 0x0000}, {-FLT_TRUE_MIN, 0x8000},
    };
    Tally tab;
    for (const auto& e : table) tab.add(rn(e.f) == e.want, "%a: 0x%04x, want 0x%04x", e.f, rn(e.f), e.want);
    report(tab.bad == 0, "__float2half_rn on special values (+-0, +-inf, NaNs, 65504/65520, subnormal ties)", tab.detail());

    // __double2half: once from double. Just past a midpoint (by far less than an fp32 ulp) it
    // rounds away from the tie that an fp32 intermediate would make; and random doubles.
    Tally dbl;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint32_t b = 1; b < 0x7bffu; b += 7) {
        const double lo = __half2float(__ushort_as_half((uint16_t)b)), hi = __half2float(__ushort_as_half((uint16_t)(b + 1)));
        const double m = lo + (hi - lo) / 2, eps = (hi - lo) * 0x1p-30;
        const uint16_t up = __half_as_ushort(__double2half(m + eps)), down = __half_as_ushort(__double2half(m - eps));
        dbl.add(up == b + 1 && down == b && up == rbits((_Float16)(m + eps)) && down == rbits((_Float16)(m - eps)),
                "around %a: 0x%04x / 0x%04x, want 0x%04x / 0x%04x", m, up, down, b + 1, b);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const double r = ldexp((double)(x >> 11), -53 - (int)(x % 30)) * ((x >> 7) & 1 ? -1 : 1) * 65536.0;
        const uint16_t got = __half_as_ushort(__double2half(r)), want = rbits((_Float16)r);
        dbl.add(got == want, "%a: 0x%04x, want 0x%04x", r, got, want);
    }
    dbl.add(__half_as_ushort(__double2half(NAN)) == 0x7fffu && __half_as_ushort(__double2half(-INFINITY)) == 0xfc00u &&
                __half_as_ushort(__double2half(65520.0)) == 0x7c00u && __half_as_ushort(__double2half(0x1p-25)) == 0,
            "NaN / -inf / 65520 / 2^-25");
    report(dbl.bad == 0, "__double2half rounds once (not through fp32), as _Float16 does", dbl.detail());

    const __half2 p = __floats2half2_rn(1.0f, -0x1p-24f);
    uint32_t word;
    memcpy(&word, &p, sizeof word);
    char hex[16];
    snprintf(hex, sizeof hex, "0x%08x", word);
    report(__half_as_ushort(p.x) == 0x3c00u && __half_as_ushort(p.y) == 0x8001u && word == 0x80013c00u,
           "__floats2half2_rn: .x = lo in the low 16 bits, .y = hi", std::string("the word ") + hex);
}

// ----------------------------------------------------------------------------
// (b) mma.sync m16n8k16 with .f16 (and .bf16) A/B

// One warp: D = A B + C, A 16x16, B 16x8, C and D 16x8, row-major 16-bit patterns / floats in
// global memory. Each lane gathers its fragments as the PTX ISA lays them out (groupID g =
// lane / 4, t = lane % 4; two elements per register, the lower index in the low half):
// A register r holds row g + 8 (r & 1), columns 2t + 8 (r >> 1) and the next; B register r
// rows 2t + 8r and the next, column g; C/D elements i: row g + 8 (i >> 1), column 2t + (i & 1).
template <bool F16>
__global__ void mma_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D) {
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    uint32_t a[4], b[2];
    float d[4];
    for (int r = 0; r < 4; r++) {
        const int at = (g + 8 * (r & 1)) * 16 + 2 * t + 8 * (r >> 1);
        a[r] = A[at] | (uint32_t)A[at + 1] << 16;
    }
    for (int r = 0; r < 2; r++) b[r] = B[(2 * t + 8 * r) * 8 + g] | (uint32_t)B[(2 * t + 8 * r + 1) * 8 + g] << 16;
    for (int i = 0; i < 4; i++) d[i] = C[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
    if (F16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    for (int i = 0; i < 4; i++) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}
// Type strings the emulator does not have (mixed inputs; fp16 accumulators): must abort.
__global__ void bad_mma_kernel(int which, float* out) {
    float d[4] = {0, 0, 0, 0};
    const uint32_t z = 0;
    if (which == 0) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(z), "r"(z), "r"(z), "r"(z), "r"(z), "r"(z));
    } else {
        uint32_t h0 = 0, h1 = 0;
        asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
            : "+r"(h0), "+r"(h1)
            : "r"(z), "r"(z), "r"(z), "r"(z), "r"(z), "r"(z));
        d[0] = (float)(h0 + h1);
    }
    out[threadIdx.x] = d[0];
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
// A random fp16 pattern of magnitude in [2^lo, 2^(hi+1)), either sign.
static uint16_t rnd_half(int lo, int hi) {
    const uint32_t e = (uint32_t)(lo + (int)(rnd() % (uint32_t)(hi - lo + 1)) + 15);
    return (uint16_t)((rnd() & 1) << 15 | e << 10 | (rnd() & 0x3ffu));
}
static uint16_t rnd_bf16(int lo, int hi) {
    const uint32_t e = (uint32_t)(lo + (int)(rnd() % (uint32_t)(hi - lo + 1)) + 127);
    return (uint16_t)((rnd() & 1) << 15 | e << 7 | (rnd() & 0x7fu));
}

static void mma_checks() {
    // Magnitudes in [2^-4, 2^4) (and three subnormal A elements): every product is exact and
    // the sums span < 53 bits, so the double reference is exact in any order and D is its
    // single rounding to fp32, bit for bit.
    for (int f16 = 1; f16 >= 0; f16--) {
        std::vector<uint16_t> A(256), B(128);
        std::vector<float> C(128), D(128);
        for (auto& v : A) v = f16 ? rnd_half(-4, 3) : rnd_bf16(-4, 3);
        for (auto& v : B) v = f16 ? rnd_half(-4, 3) : rnd_bf16(-4, 3);
        if (f16) { A[1] = 0x0001; A[5 * 16 + 9] = 0x83ff; A[255] = 0x0200; }
        auto val = [&](uint16_t u) {
            return f16 ? (double)(float)ref_half(u) : (double)from_fbits((uint32_t)u << 16);
        };
        for (auto& v : C) v = (float)val(f16 ? rnd_half(-4, 3) : rnd_bf16(-4, 3));
        uint16_t *dA, *dB;
        float *dC, *dD;
        CHECK(cudaMalloc(&dA, 512));
        CHECK(cudaMalloc(&dB, 256));
        CHECK(cudaMalloc(&dC, 512));
        CHECK(cudaMalloc(&dD, 512));
        CHECK(cudaMemcpy(dA, A.data(), 512, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dB, B.data(), 256, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dC, C.data(), 512, cudaMemcpyHostToDevice));
        if (f16) mma_kernel<true><<<1, 32>>>(dA, dB, dC, dD);
        else mma_kernel<false><<<1, 32>>>(dA, dB, dC, dD);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(D.data(), dD, 512, cudaMemcpyDeviceToHost));
        Tally t;
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++) {
                double s = C[r * 8 + c];
                for (int k = 0; k < 16; k++) s += val(A[r * 16 + k]) * val(B[k * 8 + c]);
                t.add(fbits(D[r * 8 + c]) == fbits((float)s), "D[%d][%d] = %a, want %a", r, c, D[r * 8 + c], (float)s);
            }
        report(t.bad == 0,
               f16 ? "mma.sync m16n8k16 .f32.f16.f16.f32: one tile (subnormal A elements included) = the double reference"
                   : "mma.sync m16n8k16 .f32.bf16.bf16.f32 on the same fragments still decodes bf16",
               t.detail());
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dB));
        CHECK(cudaFree(dC));
        CHECK(cudaFree(dD));
    }
}

static std::string self;
static void bad_mma_checks() {
    const char* strings[2] = {"mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32",
                              "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"};
    for (int which = 0; which < 2; which++) {
        const std::string cmd = self + " --bad-mma " + std::to_string(which) + " 2>&1";
        FILE* p = popen(cmd.c_str(), "r");
        std::string out;
        char line[512];
        while (p && fgets(line, sizeof line, p)) out += line;
        const int status = p ? pclose(p) : -1;
        const std::string want = std::string("unsupported PTX instruction: ") + strings[which];
        const size_t at = out.find("EMU: ");
        report(status != 0 && out.find(want) != std::string::npos, "an mma type string not emulated aborts",
               std::string(strings[which]) + ": " + (at == std::string::npos ? "no EMU: message" : out.substr(at, out.find('\n', at) - at)));
    }
}

// ----------------------------------------------------------------------------
// (c) cuBLASLt with CUDA_R_16F

// Half an fp16 ulp at x: half the spacing of x's binade (2^-24 below 2^-14, subnormals).
static double half_ulp16(double x) {
    int e;
    frexp(fabs(x), &e);  // |x| in [2^(e-1), 2^e)
    return ldexp(1.0, (x == 0 || e - 1 < -14 ? -14 : e - 1) - 11);
}
static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double dgelu(double x) {
    const double c = sqrt(2.0 / M_PI), th = tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

struct Lt {
    cublasLtHandle_t h;
    cublasLtMatmulPreference_t pref;
};
// D (m x n, type dt) = alpha op(A) op(B) + beta C with A stored k x m (op T), B k x n (op N),
// C = D in place; epilogue e with its pointers. Returns the status of the heuristic or of the
// matmul (then synchronised).
static cublasStatus_t matmul(Lt& lt, cudaDataType at, cudaDataType bt, cudaDataType dt, int m, int n, int k,
                             const void* A, const void* B, void* D, float beta, uint32_t e, const void* bias,
                             void* aux) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const int32_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    const int64_t aux_ld = m;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    if (bias) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (aux) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    }
    cublasLtMatrixLayoutCreate(&la, at, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, bt, k, n, k);
    cublasLtMatrixLayoutCreate(&ld, dt, m, n, m);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.h, desc, la, lb, ld, ld, lt.pref, 1, &res, &got);
    const float alpha = 1.0f;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul(lt.h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, NULL, 0, 0);
    CHECK(cudaDeviceSynchronize());
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return st;
}

template <class T> static T* to_device(const std::vector<T>& h) {
    T* d;
    CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <class T> static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

static void cublaslt_checks() {
    Lt lt;
    cublasLtCreate(&lt.h);
    cublasLtMatmulPreferenceCreate(&lt.pref);
    const int m = 24, n = 16, k = 37;  // k: not a multiple of the 4-way unrolled dot product
    // Magnitudes in [2^-3, 2^3): exact products, sums (and the bias) exact in double.
    std::vector<uint16_t> A((size_t)k * m), B((size_t)k * n), bias16(m);
    for (auto& v : A) v = rnd_half(-3, 2);
    for (auto& v : B) v = rnd_half(-3, 2);
    for (auto& v : bias16) v = rnd_half(-3, 2);
    // D[0][0] = 1 + 2^-11 + 2^-40 exactly: rounded once it is 1 + 2^-10; through fp32 it would
    // be the tie 1 + 2^-11, then 1 (to even).
    // (The 2^-20 factors, subnormal, keep every other sum within 53 bits too.)
    const uint16_t one = 0x3c00, two_m11 = 0x1000, two_m20 = 0x0010;
    A[0] = one;
    B[0] = one;
    A[1] = two_m11;
    B[1] = one;
    A[2] = two_m20;
    B[2] = two_m20;
    for (int p = 3; p < k; p++) B[p] = 0;
    bias16[0] = 0;
    std::vector<float> bias32(m);
    for (int i = 0; i < m; i++) bias32[i] = (float)ref_half(rnd_half(-3, 2));
    auto h = [](uint16_t u) { return (double)(float)ref_half(u); };
    std::vector<double> prod((size_t)m * n);  // op(A) op(B), exact
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += h(A[(size_t)i * k + p]) * h(B[(size_t)j * k + p]);
            prod[(size_t)j * m + i] = s;
        }
    uint16_t *dA = to_device(A), *dB = to_device(B), *dbias16 = to_device(bias16), *dD16, *daux;
    float *dbias32 = to_device(bias32), *dD32;
    CHECK(cudaMalloc(&dD16, (size_t)m * n * 2));
    CHECK(cudaMalloc(&daux, (size_t)m * n * 2));
    CHECK(cudaMalloc(&dD32, (size_t)m * n * 4));

    // fp16 D, BIAS: the exact value rounded once (= _Float16's rounding), within half an ulp.
    cublasStatus_t st = matmul(lt, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, m, n, k, dA, dB, dD16, 0.0f,
                               CUBLASLT_EPILOGUE_BIAS, dbias16, NULL);
    std::vector<uint16_t> D16 = to_host(dD16, (size_t)m * n);
    Tally t;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const double x = prod[(size_t)j * m + i] + h(bias16[i]), got = h(D16[(size_t)j * m + i]);
            t.add(D16[(size_t)j * m + i] == rbits((_Float16)x) && fabs(got - x) <= half_ulp16(x),
                  "D[%d][%d] = %a, exact %a", i, j, got, x);
        }
    report(st == CUBLAS_STATUS_SUCCESS && t.bad == 0,
           "cuBLASLt 16F x 16F -> 16F, BIAS epilogue: each element within half an fp16 ulp of the exact result",
           "status " + std::to_string((int)st) + ", " + t.detail());

    // fp32 D, BIAS (fp32, D's type), then beta = 1 in place: D += op(A) op(B).
    st = matmul(lt, CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, m, n, k, dA, dB, dD32, 0.0f, CUBLASLT_EPILOGUE_BIAS, dbias32, NULL);
    std::vector<float> D32 = to_host(dD32, (size_t)m * n);
    cublasStatus_t st2 = matmul(lt, CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, m, n, k, dA, dB, dD32, 1.0f,
                                CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    std::vector<float> D32b = to_host(dD32, (size_t)m * n);
    t = Tally();
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const size_t at = (size_t)j * m + i;
            const float want = (float)(prod[at] + bias32[i]), want2 = (float)((double)D32[at] + prod[at]);
            t.add(fbits(D32[at]) == fbits(want) && fbits(D32b[at]) == fbits(want2), "D[%d][%d] = %a then %a, want %a then %a",
                  i, j, D32[at], D32b[at], want, want2);
        }
    report(st == CUBLAS_STATUS_SUCCESS && st2 == CUBLAS_STATUS_SUCCESS && t.bad == 0,
           "cuBLASLt 16F x 16F -> 32F: BIAS, then beta = 1 in place (the exact result rounded once to fp32)",
           "status " + std::to_string((int)st) + "/" + std::to_string((int)st2) + ", " + t.detail());

    // GELU_AUX_BIAS: aux = the pre-activation, D = gelu of it, both fp16; then DGELU with that aux.
    st = matmul(lt, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, m, n, k, dA, dB, dD16, 0.0f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                dbias16, daux);
    D16 = to_host(dD16, (size_t)m * n);
    const std::vector<uint16_t> aux = to_host(daux, (size_t)m * n);
    st2 = matmul(lt, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, m, n, k, dA, dB, dD16, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL, daux);
    const std::vector<uint16_t> G16 = to_host(dD16, (size_t)m * n);
    t = Tally();
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const size_t at = (size_t)j * m + i;
            const double pre = prod[at] + h(bias16[i]), g = gelu(pre), dg = prod[at] * dgelu(h(aux[at]));
            // (libm's tanh in both: the slack allows a different evaluation order of the formula)
            t.add(aux[at] == rbits((_Float16)pre) && fabs(h(D16[at]) - g) <= half_ulp16(g) * (1 + 1e-9) &&
                      fabs(h(G16[at]) - dg) <= half_ulp16(dg) * (1 + 1e-9),
                  "[%d][%d]: aux %a (pre %a), gelu %a (want %a), dgelu %a (want %a)", i, j, h(aux[at]), pre, h(D16[at]),
                  g, h(G16[at]), dg);
        }
    report(st == CUBLAS_STATUS_SUCCESS && st2 == CUBLAS_STATUS_SUCCESS && t.bad == 0,
           "cuBLASLt 16F GELU_AUX_BIAS (aux and D fp16) and DGELU: within half an fp16 ulp",
           "status " + std::to_string((int)st) + "/" + std::to_string((int)st2) + ", " + t.detail());

    // The "ulp" candidate (EMU_CUBLASLT_ALGOS) flips the lowest bit of every fp16 element.
    matmul(lt, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, m, n, k, dA, dB, dD16, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    D16 = to_host(dD16, (size_t)m * n);
    setenv("EMU_CUBLASLT_ALGOS", "ulp", 1);
    st = matmul(lt, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, m, n, k, dA, dB, dD16, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    unsetenv("EMU_CUBLASLT_ALGOS");
    const std::vector<uint16_t> U16 = to_host(dD16, (size_t)m * n);
    int flipped = 0;
    for (size_t i = 0; i < U16.size(); i++) flipped += (U16[i] ^ D16[i]) == 1;
    report(st == CUBLAS_STATUS_SUCCESS && flipped == m * n, "cuBLASLt's \"ulp\" candidate flips the lowest bit of fp16 D",
           std::to_string(flipped) + " of " + std::to_string(m * n) + " elements");

    // Refused: 16F with 16BF (either operand), and a D of the other 16-bit type.
    const struct { cudaDataType a, b, d; const char* what; } bad[] = {
        {CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F, "16F x 16BF"}, {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, "16BF x 16F"},
        {CUDA_R_16F, CUDA_R_16BF, CUDA_R_16F, "16F x 16BF -> 16F"}, {CUDA_R_16F, CUDA_R_16F, CUDA_R_16BF, "16F x 16F -> 16BF"},
        {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, "16BF x 16BF -> 16F"},
    };
    std::string refused;
    bool all_refused = true;
    for (const auto& b : bad) {
        // Refused by the heuristic (matmul() asks it first) and by cublasLtMatmul itself.
        st = matmul(lt, b.a, b.b, b.d, m, n, k, dA, dB, b.d == CUDA_R_32F ? (void*)dD32 : (void*)dD16, 0.0f,
                    CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&la, b.a, m, k, m);
        cublasLtMatrixLayoutCreate(&lb, b.b, k, n, k);
        cublasLtMatrixLayoutCreate(&ld, b.d, m, n, m);
        const float one = 1.0f, zero = 0.0f;
        void* D = b.d == CUDA_R_32F ? (void*)dD32 : (void*)dD16;
        const cublasStatus_t st3 = cublasLtMatmul(lt.h, desc, &one, dA, la, dB, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(desc);
        const bool ok = st == CUBLAS_STATUS_NOT_SUPPORTED && st3 == CUBLAS_STATUS_NOT_SUPPORTED;
        all_refused &= ok;
        refused += std::string(refused.empty() ? "" : ", ") + b.what + (ok ? " refused" : " ACCEPTED");
    }
    report(all_refused, "cuBLASLt refuses mixed 16F / 16BF operands and a D of the other 16-bit type", refused);
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dbias16));
    CHECK(cudaFree(dbias32));
    CHECK(cudaFree(dD16));
    CHECK(cudaFree(daux));
    CHECK(cudaFree(dD32));
    cublasLtMatmulPreferenceDestroy(lt.pref);
    cublasLtDestroy(lt.h);
}

int main(int argc, char** argv) {
    if (argc > 2 && !strcmp(argv[1], "--bad-mma")) {
        float* out;
        CHECK(cudaMalloc(&out, 32 * sizeof(float)));
        bad_mma_kernel<<<1, 32>>>(atoi(argv[2]), out);
        CHECK(cudaDeviceSynchronize());
        return 0;
    }
    self = argv[0];
    conversions();
    mma_checks();
    bad_mma_checks();
    cublaslt_checks();
    return failures ? 1 : 0;
}
