// Tests of the CPU reference kernels (kernels/cpu_kernels.c).
//
// Every kernel is compared with a naive, obviously-correct double-precision reference
// written below, on small random inputs with awkward sizes. Every backward is also checked
// against central finite differences of the naive forward (loss = sum(out * R) with a
// fixed random R), which validates the reference and the kernel independently of each
// other. On top of that: accumulation semantics (backward adds into nonzero buffers),
// bitwise determinism of two identical calls, causality and T = 1 for attention,
// grouped-query attention against multi-head attention on repeated k and v, the
// in-place/evaluation semantics of the fused cross-entropy, and sizes that cross the
// kernels' internal tile widths.
//
// Output: one line per check, "ok - <name>" or "not ok - <name>: <why>"; exit status 1 if
// anything failed. Run with OMP_NUM_THREADS=2 (dev/test/test_kernels_cpu.sh); with fewer
// threads configured the program raises it to 2 so that the determinism checks mean
// something. TEST_VERBOSE=1 also prints how close each comparison came to its tolerance.
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"
#include "kernels/cpu_kernels_llama.h"
#include "kernels/kernels.h"

// ----------------------------------------------------------------------------
// Tolerances

// fp32 kernel vs double reference. Each fp32 operation is off by at most half an ulp
// (6e-8 relative) and the chains here are short (sums over <= 150 terms, a few
// transcendental calls at ~2e-7), so observed errors are ~1e-6 at worst; 1e-5 leaves
// margin while any wrong formula, index or sign is off by O(1).
#define TOL_REL 1e-5
// ... plus an absolute floor, as a fraction of the largest |value| of the array compared:
// an entry that cancels to ~0 still carries the absolute rounding error of the terms
// that cancelled, so a purely relative test would be meaningless there.
#define TOL_ABS_FRAC 1e-5
// Central differences in double: truncation error ~h^2 |f'''| ~1e-10, rounding error
// ~1e-16 |L| / h ~1e-10 for our |L| < 100, so the naive double gradient must match to
// ~1e-8; 1e-7 (relative, and as a fraction of the largest gradient) is safe.
#define FD_STEP 1e-5
#define FD_TOL 1e-7
// GELU: the header's formula 0.5 x (1 + tanh u) evaluated in double has cancellation for
// x < -6 (1 + tanh u underflows relative to 1), where |gelu| < 1e-14 anyway; below this
// absolute floor the comparison is not meaningful in either precision.
#define GELU_ABS_FLOOR 1e-12
// AdamW: a handful of fp32 operations per element, no sums: a few ulp.
#define ADAMW_TOL_REL 1e-6
// sum_squares accumulates exact products in double; only summation order differs from
// the sequential reference (n * 1e-16 relative at worst for the sizes tested).
#define SUMSQ_TOL_REL 1e-12

// ----------------------------------------------------------------------------
// Reporting

static int n_failed = 0, n_passed = 0;

static void report(int ok, const char* name, const char* fmt, ...) {
    if (ok) {
        printf("ok - %s\n", name);
        n_passed++;
        return;
    }
    printf("not ok - %s: ", name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    n_failed++;
}

// got vs want elementwise: |got - want| <= rel * |want| + abs_frac * max|want| + abs_floor.
// Reports the element with the largest error relative to its tolerance.
static int check_close_ex(const char* name, const double* got, const double* want, size_t n,
                          double rel, double abs_frac, double abs_floor) {
    double maxabs = 0.0;
    for (size_t i = 0; i < n; i++) maxabs = fmax(maxabs, fabs(want[i]));
    double worst = 0.0;
    size_t wi = 0;
    int nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && isfinite(want[i])) { nonfinite = 1; wi = i; break; }
        double tol = rel * fabs(want[i]) + abs_frac * maxabs + abs_floor;
        double err = fabs(got[i] - want[i]);
        double ratio = tol > 0.0 ? err / tol : (err > 0.0 ? INFINITY : 0.0);
        if (ratio > worst) { worst = ratio; wi = i; }
    }
    int ok = !nonfinite && worst <= 1.0;
    if (n == 0) { report(1, name, ""); return 1; }
    if (getenv("TEST_VERBOSE"))  // how close to its tolerance each comparison came
        printf("#   worst |err|/tolerance = %.3g (max |want| = %.3g)\n", worst, maxabs);
    double tol = rel * fabs(want[wi]) + abs_frac * maxabs + abs_floor;
    report(ok, name, "element %zu of %zu: got %.9g, want %.9g, |err| %.3g > tolerance %.3g",
           wi, n, got[wi], want[wi], fabs(got[wi] - want[wi]), tol);
    return ok;
}

static int check_close_dd(const char* name, const double* got, const double* want, size_t n,
                          double rel, double abs_frac) {
    return check_close_ex(name, got, want, n, rel, abs_frac, 0.0);
}

static double* to_double(const float* x, size_t n);

static int check_close_fd(const char* name, const float* got, const double* want, size_t n,
                          double rel, double abs_frac) {
    double* g = to_double(got, n);
    int ok = check_close_dd(name, g, want, n, rel, abs_frac);
    free(g);
    return ok;
}

static int check_bitwise(const char* name, const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            report(0, name, "element %zu of %zu differs: %.9g vs %.9g", i, n, a[i], b[i]);
            return 0;
        }
    }
    report(1, name, "");
    return 1;
}

// ----------------------------------------------------------------------------
// Memory and random numbers (splitmix64: fixed seed, same inputs on every run)

static void* xcalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}
static float* falloc(size_t n) { return xcalloc(n, sizeof(float)); }
static double* dalloc(size_t n) { return xcalloc(n, sizeof(double)); }

static uint64_t rng_state = 0x5eed1234abcdULL;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
// uniform in [-1, 1)
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1.0p-52 - 1.0; }
static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static float* frand(size_t n, double scale, double offset) {
    float* x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(offset + scale * rng_uniform());
    return x;
}
static double* to_double(const float* x, size_t n) {
    double* d = dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float* fcopy(const float* x, size_t n) {
    float* y = falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}
static double maxabs_d(const double* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}
static double dot_d(const double* a, const double* b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// ----------------------------------------------------------------------------
// Finite differences: grad[i] = dL/dx[i], x being one of the inputs ctx's loss reads.
// Only every `stride`-th element is probed (1 = all); the others get NaN and are skipped.

typedef double (*loss_fn)(void* ctx);

static void fd_gradient(loss_fn f, void* ctx, double* x, size_t n, size_t stride, double* grad) {
    for (size_t i = 0; i < n; i++) {
        if (i % stride != 0) { grad[i] = NAN; continue; }
        const double old = x[i];
        x[i] = old + FD_STEP;
        const double lp = f(ctx);
        x[i] = old - FD_STEP;
        const double lm = f(ctx);
        x[i] = old;
        grad[i] = (lp - lm) / (2.0 * FD_STEP);
    }
}

// Compares the finite-difference gradient of x with the reference's (tight, FD_TOL) and
// the kernel's (fp32 tolerance). Two lines: "<what> fd vs reference", "<what> fd vs kernel".
static void check_fd(const char* what, loss_fn f, void* ctx, double* x, size_t n, size_t stride,
                     const double* ref_grad, const float* kernel_grad) {
    double* fd = dalloc(n);
    fd_gradient(f, ctx, x, n, stride, fd);
    size_t m = 0;
    double* a = dalloc(n);
    double* b = dalloc(n);
    double* c = dalloc(n);
    for (size_t i = 0; i < n; i += stride) { a[m] = fd[i]; b[m] = ref_grad[i]; c[m] = kernel_grad[i]; m++; }
    char name[256];
    snprintf(name, sizeof name, "%s: finite differences vs reference gradient", what);
    check_close_dd(name, b, a, m, FD_TOL, FD_TOL);
    snprintf(name, sizeof name, "%s: finite differences vs kernel gradient", what);
    check_close_dd(name, c, a, m, TOL_REL, TOL_ABS_FRAC);
    free(fd); free(a); free(b); free(c);
}

// The standard checks of one gradient buffer of a backward kernel:
//   g_zero  kernel result from a zeroed buffer, vs the reference gradient;
//   g_acc   kernel result from g0 (random, with the gradient's magnitude), vs g0 + reference;
//   g_zero2 second run from zero, bitwise equal to g_zero.
static void check_grad(const char* what, const float* g_zero, const float* g_zero2,
                       const float* g0, const float* g_acc, const double* ref, size_t n) {
    char name[256];
    snprintf(name, sizeof name, "%s matches reference", what);
    check_close_fd(name, g_zero, ref, n, TOL_REL, TOL_ABS_FRAC);
    double* want = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = (double)g0[i] + ref[i];
    snprintf(name, sizeof name, "%s accumulates into a nonzero buffer", what);
    check_close_fd(name, g_acc, want, n, TOL_REL, TOL_ABS_FRAC);
    snprintf(name, sizeof name, "%s deterministic (two calls bitwise equal)", what);
    check_bitwise(name, g_zero, g_zero2, n);
    free(want);
}

// A random start buffer for accumulation checks, with the magnitude of the gradient, so
// that a kernel overwriting instead of adding is off by O(tolerance^-1).
static float* grad_start(const double* ref, size_t n) {
    double s = maxabs_d(ref, n);
    return frand(n, s > 0.0 ? s : 1.0, 0.0);
}

// ----------------------------------------------------------------------------
// Naive double references

static void ref_encoder_forward(double* out, const int* inp, const double* wte, const double* wpe,
                                int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[(b * T + t) * C + c] = wte[inp[b * T + t] * C + c] + wpe[t * C + c];
}
static void ref_encoder_backward(double* dwte, double* dwpe, const double* dout, const int* inp,
                                 int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                dwte[inp[b * T + t] * C + c] += dout[(b * T + t) * C + c];
                dwpe[t * C + c] += dout[(b * T + t) * C + c];
            }
}

static void ref_layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                                  const double* w, const double* bias, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double* x = inp + (size_t)n * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (x[c] - m) * s * w[c] + bias[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}
static void ref_layernorm_backward(double* dinp, double* dw, double* db, const double* dout,
                                   const double* inp, const double* w, const double* mean,
                                   const double* rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* x = inp + (size_t)n * C;
        const double* d = dout + (size_t)n * C;
        double a = 0.0, bsum = 0.0;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - mean[n]) * rstd[n];
            a += w[c] * d[c];
            bsum += w[c] * d[c] * norm;
        }
        a /= C;
        bsum /= C;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - mean[n]) * rstd[n];
            dinp[(size_t)n * C + c] += (w[c] * d[c] - a - norm * bsum) * rstd[n];
            dw[c] += norm * d[c];
            db[c] += d[c];
        }
    }
}

static void ref_matmul_forward(double* out, const double* inp, const double* w, const double* bias,
                               int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = s;
        }
}
static void ref_matmul_backward(double* dinp, double* dw, double* db, const double* dout,
                                const double* inp, const double* w, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)n * OC + o];
            for (int c = 0; c < C; c++) {
                dinp[(size_t)n * C + c] += d * w[(size_t)o * C + c];
                dw[(size_t)o * C + c] += d * inp[(size_t)n * C + c];
            }
            db[o] += d;
        }
}

// Plain softmax attention with an explicit causal mask (T x T is fine in a test), with
// KVH kv heads: qkv rows of QW = C + 2 KVH hs, query head h reads kv head h / (NH / KVH).
static void ref_attention_forward(double* out, double* lse, const double* qkv,
                                  int B, int T, int C, int NH, int KVH) {
    const int hs = C / NH, group = NH / KVH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs;
    const double scale = 1.0 / sqrt((double)hs);
    double* s = dalloc(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const size_t koff = C + (size_t)(h / group) * hs, voff = koff + (size_t)KVH * hs;
                const double* q = qkv + ((size_t)b * T + t) * QW + h * hs;
                double m = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double* k = qkv + ((size_t)b * T + j) * QW + koff;
                    double d = 0.0;
                    for (int i = 0; i < hs; i++) d += q[i] * k[i];
                    s[j] = d * scale;
                    m = fmax(m, s[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
                double* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double* v = qkv + ((size_t)b * T + j) * QW + voff;
                    double p = exp(s[j] - m) / sum;
                    for (int i = 0; i < hs; i++) o[i] += p * v[i];
                }
                if (lse) lse[((size_t)b * NH + h) * T + t] = m + log(sum);
            }
    free(s);
}
// Textbook softmax backward: dS_j = P_j (dP_j - sum_k P_k dP_k) (no use of out or lse).
// Each query head adds its share into the dk, dv of its kv head.
static void ref_attention_backward(double* dqkv, const double* dout, const double* qkv,
                                   int B, int T, int C, int NH, int KVH) {
    const int hs = C / NH, group = NH / KVH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs;
    const double scale = 1.0 / sqrt((double)hs);
    double* P = dalloc(T);
    double* dP = dalloc(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const size_t koff = C + (size_t)(h / group) * hs, voff = koff + (size_t)KVH * hs;
                const double* q = qkv + ((size_t)b * T + t) * QW + h * hs;
                const double* d = dout + ((size_t)b * T + t) * C + h * hs;
                double m = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double* k = qkv + ((size_t)b * T + j) * QW + koff;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    P[j] = s * scale;
                    m = fmax(m, P[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) { P[j] = exp(P[j] - m); sum += P[j]; }
                double pdp = 0.0;
                for (int j = 0; j <= t; j++) {
                    P[j] /= sum;
                    const double* v = qkv + ((size_t)b * T + j) * QW + voff;
                    dP[j] = 0.0;
                    for (int i = 0; i < hs; i++) dP[j] += d[i] * v[i];
                    pdp += P[j] * dP[j];
                }
                double* dq = dqkv + ((size_t)b * T + t) * QW + h * hs;
                for (int j = 0; j <= t; j++) {
                    const double* k = qkv + ((size_t)b * T + j) * QW + koff;
                    double* dk = dqkv + ((size_t)b * T + j) * QW + koff;
                    double* dv = dqkv + ((size_t)b * T + j) * QW + voff;
                    double dS = P[j] * (dP[j] - pdp);
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dS * k[i] * scale;
                        dk[i] += dS * q[i] * scale;
                        dv[i] += P[j] * d[i];
                    }
                }
            }
    free(P);
    free(dP);
}

#define GELU_K 0.7978845608028654  // sqrt(2/pi)
static double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(GELU_K * (x + 0.044715 * x * x * x)));
}
static double ref_gelu_grad(double x) {
    double u = GELU_K * (x + 0.044715 * x * x * x);
    double ch = cosh(u);
    return 0.5 * (1.0 + tanh(u)) + 0.5 * x / (ch * ch) * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
}

// losses[i] = logsumexp(row) - row[target]; grad = (softmax - onehot) * dloss on j < V.
static void ref_crossentropy(double* losses, double* grad, const double* logits, const int* targets,
                             int N, int V, int Vp, double dloss) {
    for (int i = 0; i < N; i++) {
        const double* row = logits + (size_t)i * Vp;
        double m = -INFINITY, sum = 0.0;
        for (int j = 0; j < V; j++) m = fmax(m, row[j]);
        for (int j = 0; j < V; j++) sum += exp(row[j] - m);
        double lse = m + log(sum);
        losses[i] = lse - row[targets[i]];
        if (grad)
            for (int j = 0; j < V; j++)
                grad[(size_t)i * Vp + j] = (exp(row[j] - lse) - (j == targets[i])) * dloss;
    }
}

// ----------------------------------------------------------------------------
// Encoder

typedef struct { int B, T, C; const int* inp; double *wte, *wpe, *R, *out; } EncoderCtx;
static double encoder_loss(void* p) {
    EncoderCtx* c = p;
    ref_encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_encoder(int B, int T, int C, int vocab) {
    char tag[64], name[256];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d vocab=%d", B, T, C, vocab);
    const size_t N = (size_t)B * T, nwte = (size_t)vocab * C, nwpe = (size_t)T * C;
    int* inp = xcalloc(N, sizeof(int));
    for (size_t i = 0; i < N; i++) inp[i] = rng_int(vocab);
    inp[1] = inp[0];  // make sure a token repeats within a sequence and across the batch
    inp[N - 1] = inp[0];
    float* wte = frand(nwte, 1.0, 0.0);
    float* wpe = frand(nwpe, 1.0, 0.0);
    float* out = falloc(N * C);
    encoder_forward(out, inp, wte, wpe, B, T, C, 0, vocab);
    double *wte_d = to_double(wte, nwte), *wpe_d = to_double(wpe, nwpe), *out_ref = dalloc(N * C);
    ref_encoder_forward(out_ref, inp, wte_d, wpe_d, B, T, C);
    snprintf(name, sizeof name, "encoder_forward %s matches reference", tag);
    check_close_fd(name, out, out_ref, N * C, TOL_REL, TOL_ABS_FRAC);

    float* R = frand(N * C, 1.0, 0.0);
    double* R_d = to_double(R, N * C);
    double *dwte_ref = dalloc(nwte), *dwpe_ref = dalloc(nwpe);
    ref_encoder_backward(dwte_ref, dwpe_ref, R_d, inp, B, T, C);
    float *dwte = falloc(nwte), *dwpe = falloc(nwpe), *dwte2 = falloc(nwte), *dwpe2 = falloc(nwpe);
    encoder_backward(dwte, dwpe, R, inp, B, T, C, 0, vocab);
    encoder_backward(dwte2, dwpe2, R, inp, B, T, C, 0, vocab);
    float *g0te = grad_start(dwte_ref, nwte), *g0pe = grad_start(dwpe_ref, nwpe);
    float *accte = fcopy(g0te, nwte), *accpe = fcopy(g0pe, nwpe);
    encoder_backward(accte, accpe, R, inp, B, T, C, 0, vocab);
    snprintf(name, sizeof name, "encoder_backward %s dwte (repeated token ids)", tag);
    check_grad(name, dwte, dwte2, g0te, accte, dwte_ref, nwte);
    snprintf(name, sizeof name, "encoder_backward %s dwpe", tag);
    check_grad(name, dwpe, dwpe2, g0pe, accpe, dwpe_ref, nwpe);

    EncoderCtx ctx = {B, T, C, inp, wte_d, wpe_d, R_d, dalloc(N * C)};
    snprintf(name, sizeof name, "encoder_backward %s dwte", tag);
    check_fd(name, encoder_loss, &ctx, wte_d, nwte, 1, dwte_ref, dwte);
    snprintf(name, sizeof name, "encoder_backward %s dwpe", tag);
    check_fd(name, encoder_loss, &ctx, wpe_d, nwpe, 1, dwpe_ref, dwpe);

    free(ctx.out); free(inp); free(wte); free(wpe); free(out); free(wte_d); free(wpe_d);
    free(out_ref); free(R); free(R_d); free(dwte_ref); free(dwpe_ref); free(dwte); free(dwpe);
    free(dwte2); free(dwpe2); free(g0te); free(g0pe); free(accte); free(accpe);
}

// The vocabulary range of a tensor-parallel rank (kernels.h), through the cpu table. With the
// whole range (0, Vp) the kernels do the arithmetic they did before the range existed, written
// out below in float in the same order: bitwise equal. Split over tp ranks (wpe given to the
// first only, the one rank of the group that adds it), the partial embeddings summed over the
// ranks are the full embedding, and each rank's dwte slice (accumulated onto a random start)
// is its rows of the full dwte, bitwise: each sum has one nonzero term, each dwte row the same
// additions in the same order. Tokens sit at the ranges' edges, and with V < Vp the last range
// of tp = 4 holds no token at all (its slice must come back as it went in).
static void test_encoder_vocab_split(int B, int T, int C, int V, int Vp, int with_wpe) {
    char tag[96], name[256];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d V=%d Vp=%d%s", B, T, C, V, Vp, with_wpe ? "" : " no wpe");
    Kernels k;
    kernels_cpu_init(&k, Vp);
    const int N = B * T;
    const size_t NC = (size_t)N * C, nwte = (size_t)Vp * C, nwpe = (size_t)T * C;
    int* inp = xcalloc(N, sizeof(int));
    for (int n = 0; n < N; n++) inp[n] = rng_int(V);
    const int edges[] = {0, Vp / 4 - 1, Vp / 4, Vp / 2 - 1, Vp / 2, V - 1};
    for (int e = 0; e < 6 && e < N; e++) inp[e] = edges[e] < V ? edges[e] : V - 1;
    inp[N - 1] = inp[0];  // a repeated token
    float *wte = frand(nwte, 1.0, 0.0), *wpe = with_wpe ? frand(nwpe, 1.0, 0.0) : NULL;
    float *out = falloc(NC), *old = falloc(NC), *part = falloc(NC), *sum = falloc(NC);

    kernel_encoder_forward(&k, out, inp, wte, wpe, B, T, C, 0, Vp);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            old[(size_t)n * C + c] = wte[(size_t)inp[n] * C + c] + (wpe ? wpe[(size_t)(n % T) * C + c] : 0.0f);
    snprintf(name, sizeof name, "encoder_forward %s range (0, Vp) bitwise as before", tag);
    check_bitwise(name, out, old, NC);

    float *dout = frand(NC, 1.0, 0.0), *g0te = frand(nwte, 1.0, 0.0), *g0pe = frand(nwpe, 1.0, 0.0);
    float *dwte = fcopy(g0te, nwte), *dwpe = fcopy(g0pe, nwpe), *old_te = fcopy(g0te, nwte), *old_pe = fcopy(g0pe, nwpe);
    kernel_encoder_backward(&k, dwte, with_wpe ? dwpe : NULL, dout, inp, B, T, C, 0, Vp, 1);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) old_te[(size_t)inp[n] * C + c] += dout[(size_t)n * C + c];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int b = 0; b < B; b++) acc += dout[((size_t)b * T + t) * C + c];
            old_pe[(size_t)t * C + c] += acc;
        }
    snprintf(name, sizeof name, "encoder_backward %s range (0, Vp) dwte bitwise as before", tag);
    check_bitwise(name, dwte, old_te, nwte);
    if (with_wpe) {
        snprintf(name, sizeof name, "encoder_backward %s range (0, Vp) dwpe bitwise as before", tag);
        check_bitwise(name, dwpe, old_pe, nwpe);
    }

    for (int tp = 2; tp <= 4; tp += 2) {
        const int rows = Vp / tp;
        for (int t = 0; t < tp; t++) {
            const int vb = t * rows;
            kernel_encoder_forward(&k, part, inp, wte + (size_t)vb * C, t == 0 ? wpe : NULL, B, T, C, vb, vb + rows);
            if (t == 0) memcpy(sum, part, NC * sizeof(float));
            else for (size_t i = 0; i < NC; i++) sum[i] += part[i];
        }
        snprintf(name, sizeof name, "encoder_forward %s tp=%d: the partial embeddings sum to the full one", tag, tp);
        check_bitwise(name, sum, out, NC);

        int slices_ok = 1, bad_rank = -1;
        for (int t = 0; t < tp && slices_ok; t++) {
            const int vb = t * rows;
            float* slice = fcopy(g0te + (size_t)vb * C, (size_t)rows * C);
            float* pe = t == 0 && with_wpe ? fcopy(g0pe, nwpe) : NULL;
            kernel_encoder_backward(&k, slice, pe, dout, inp, B, T, C, vb, vb + rows, 1);
            if (memcmp(slice, dwte + (size_t)vb * C, (size_t)rows * C * sizeof(float)) != 0) { slices_ok = 0; bad_rank = t; }
            if (pe) {
                snprintf(name, sizeof name, "encoder_backward %s tp=%d: rank 0's dwpe is the full dwpe", tag, tp);
                check_bitwise(name, pe, dwpe, nwpe);
            }
            free(slice);
            free(pe);
        }
        snprintf(name, sizeof name, "encoder_backward %s tp=%d: the dwte slices are the full dwte's rows", tag, tp);
        report(slices_ok, name, "rank %d's slice differs", bad_rank);
    }
    free(inp); free(wte); free(wpe); free(out); free(old); free(part); free(sum); free(dout); free(g0te); free(g0pe);
    free(dwte); free(dwpe); free(old_te); free(old_pe);
}

// ----------------------------------------------------------------------------
// LayerNorm

typedef struct { int N, C; double eps; double *inp, *w, *b, *R, *out; } LayerNormCtx;
static double layernorm_loss(void* p) {
    LayerNormCtx* c = p;
    ref_layernorm_forward(c->out, NULL, NULL, c->inp, c->w, c->b, c->N, c->C, c->eps);
    return dot_d(c->out, c->R, (size_t)c->N * c->C);
}

// eps: the model's norm_eps (1e-5 by default; a large one shows that the kernel adds the eps it
// is given: these rows' variance is ~1.3, so 0.5 changes rstd by ~15%, 1e-5 would not show).
static void test_layernorm(int N, int C, float eps) {
    char tag[64], name[256];
    snprintf(tag, sizeof tag, "N=%d C=%d eps=%g", N, C, (double)eps);
    const size_t NC = (size_t)N * C;
    // Rows with a mean well away from 0 exercise the variance computation.
    float* inp = frand(NC, 2.0, 3.0);
    float* w = frand(C, 0.5, 1.0);
    float* b = frand(C, 0.5, 0.0);
    float *out = falloc(NC), *mean = falloc(N), *rstd = falloc(N);
    layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
    double *inp_d = to_double(inp, NC), *w_d = to_double(w, C), *b_d = to_double(b, C);
    double *out_ref = dalloc(NC), *mean_ref = dalloc(N), *rstd_ref = dalloc(N);
    ref_layernorm_forward(out_ref, mean_ref, rstd_ref, inp_d, w_d, b_d, N, C, (double)eps);
    snprintf(name, sizeof name, "layernorm_forward %s out matches reference", tag);
    check_close_fd(name, out, out_ref, NC, TOL_REL, TOL_ABS_FRAC);
    snprintf(name, sizeof name, "layernorm_forward %s mean matches reference", tag);
    check_close_fd(name, mean, mean_ref, N, TOL_REL, TOL_ABS_FRAC);
    snprintf(name, sizeof name, "layernorm_forward %s rstd matches reference", tag);
    check_close_fd(name, rstd, rstd_ref, N, TOL_REL, TOL_ABS_FRAC);
    float* out2 = falloc(NC);
    layernorm_forward(out2, mean, rstd, inp, w, b, N, C, eps);
    snprintf(name, sizeof name, "layernorm_forward %s deterministic", tag);
    check_bitwise(name, out, out2, NC);

    float* R = frand(NC, 1.0, 0.0);
    double* R_d = to_double(R, NC);
    double *dinp_ref = dalloc(NC), *dw_ref = dalloc(C), *db_ref = dalloc(C);
    ref_layernorm_backward(dinp_ref, dw_ref, db_ref, R_d, inp_d, w_d, mean_ref, rstd_ref, N, C);
    float *dinp = falloc(NC), *dw = falloc(C), *db = falloc(C);
    float *dinp2 = falloc(NC), *dw2 = falloc(C), *db2 = falloc(C);
    layernorm_backward(dinp, dw, db, R, inp, w, mean, rstd, N, C);
    layernorm_backward(dinp2, dw2, db2, R, inp, w, mean, rstd, N, C);
    float *g0i = grad_start(dinp_ref, NC), *g0w = grad_start(dw_ref, C), *g0b = grad_start(db_ref, C);
    float *acci = fcopy(g0i, NC), *accw = fcopy(g0w, C), *accb = fcopy(g0b, C);
    layernorm_backward(acci, accw, accb, R, inp, w, mean, rstd, N, C);
    snprintf(name, sizeof name, "layernorm_backward %s dinp", tag);
    check_grad(name, dinp, dinp2, g0i, acci, dinp_ref, NC);
    snprintf(name, sizeof name, "layernorm_backward %s dweight", tag);
    check_grad(name, dw, dw2, g0w, accw, dw_ref, C);
    snprintf(name, sizeof name, "layernorm_backward %s dbias", tag);
    check_grad(name, db, db2, g0b, accb, db_ref, C);

    LayerNormCtx ctx = {N, C, (double)eps, inp_d, w_d, b_d, R_d, dalloc(NC)};
    snprintf(name, sizeof name, "layernorm_backward %s dinp", tag);
    check_fd(name, layernorm_loss, &ctx, inp_d, NC, 1, dinp_ref, dinp);
    snprintf(name, sizeof name, "layernorm_backward %s dweight", tag);
    check_fd(name, layernorm_loss, &ctx, w_d, C, 1, dw_ref, dw);
    snprintf(name, sizeof name, "layernorm_backward %s dbias", tag);
    check_fd(name, layernorm_loss, &ctx, b_d, C, 1, db_ref, db);

    free(ctx.out); free(inp); free(w); free(b); free(out); free(mean); free(rstd); free(inp_d);
    free(w_d); free(b_d); free(out_ref); free(mean_ref); free(rstd_ref); free(out2); free(R);
    free(R_d); free(dinp_ref); free(dw_ref); free(db_ref); free(dinp); free(dw); free(db);
    free(dinp2); free(dw2); free(db2); free(g0i); free(g0w); free(g0b); free(acci); free(accw);
    free(accb);
}

// ----------------------------------------------------------------------------
// RMSNorm (Llama's; its backward is checked against PyTorch in test_llama.sh): the forward and
// its rstd against a float64 reference, at the model's eps (as for LayerNorm, a large eps shows
// that it is the one added).

static void test_rmsnorm_forward(int N, int C, float eps) {
    char tag[64], name[256];
    snprintf(tag, sizeof tag, "N=%d C=%d eps=%g", N, C, (double)eps);
    const size_t NC = (size_t)N * C;
    float* inp = frand(NC, 1.0, 0.5);
    float* w = frand(C, 0.5, 1.0);
    float *out = falloc(NC), *rstd = falloc(N);
    rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    double *out_ref = dalloc(NC), *rstd_ref = dalloc(N);
    for (int n = 0; n < N; n++) {
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)inp[(size_t)n * C + c] * inp[(size_t)n * C + c];
        rstd_ref[n] = 1.0 / sqrt(ss / C + (double)eps);
        for (int c = 0; c < C; c++) out_ref[(size_t)n * C + c] = inp[(size_t)n * C + c] * rstd_ref[n] * w[c];
    }
    snprintf(name, sizeof name, "rmsnorm_forward %s out matches reference", tag);
    check_close_fd(name, out, out_ref, NC, TOL_REL, TOL_ABS_FRAC);
    snprintf(name, sizeof name, "rmsnorm_forward %s rstd matches reference", tag);
    check_close_fd(name, rstd, rstd_ref, N, TOL_REL, TOL_ABS_FRAC);
    free(inp); free(w); free(out); free(rstd); free(out_ref); free(rstd_ref);
}

// ----------------------------------------------------------------------------
// Matmul

typedef struct { int N, C, OC; double *inp, *w, *b, *R, *out; } MatmulCtx;
static double matmul_loss(void* p) {
    MatmulCtx* c = p;
    ref_matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot_d(c->out, c->R, (size_t)c->N * c->OC);
}

static void test_matmul(int N, int C, int OC) {
    char tag[64], name[256];
    snprintf(tag, sizeof tag, "N=%d C=%d OC=%d", N, C, OC);
    const size_t NC = (size_t)N * C, NO = (size_t)N * OC, WC = (size_t)OC * C;
    float *inp = frand(NC, 1.0, 0.0), *w = frand(WC, 1.0, 0.0), *b = frand(OC, 1.0, 0.0);
    double *inp_d = to_double(inp, NC), *w_d = to_double(w, WC), *b_d = to_double(b, OC);
    float* out = falloc(NO);
    double* out_ref = dalloc(NO);
    matmul_forward(out, inp, w, b, N, C, OC);
    ref_matmul_forward(out_ref, inp_d, w_d, b_d, N, C, OC);
    snprintf(name, sizeof name, "matmul_forward %s with bias matches reference", tag);
    check_close_fd(name, out, out_ref, NO, TOL_REL, TOL_ABS_FRAC);
    float* out2 = falloc(NO);
    matmul_forward(out2, inp, w, b, N, C, OC);
    snprintf(name, sizeof name, "matmul_forward %s deterministic", tag);
    check_bitwise(name, out, out2, NO);
    matmul_forward(out, inp, w, NULL, N, C, OC);
    ref_matmul_forward(out_ref, inp_d, w_d, NULL, N, C, OC);
    snprintf(name, sizeof name, "matmul_forward %s without bias matches reference", tag);
    check_close_fd(name, out, out_ref, NO, TOL_REL, TOL_ABS_FRAC);

    float* R = frand(NO, 1.0, 0.0);
    double* R_d = to_double(R, NO);
    double *dinp_ref = dalloc(NC), *dw_ref = dalloc(WC), *db_ref = dalloc(OC);
    ref_matmul_backward(dinp_ref, dw_ref, db_ref, R_d, inp_d, w_d, N, C, OC);
    float *dinp = falloc(NC), *dw = falloc(WC), *db = falloc(OC);
    float *dinp2 = falloc(NC), *dw2 = falloc(WC), *db2 = falloc(OC);
    matmul_backward(dinp, dw, db, R, inp, w, N, C, OC);
    matmul_backward(dinp2, dw2, db2, R, inp, w, N, C, OC);
    float *g0i = grad_start(dinp_ref, NC), *g0w = grad_start(dw_ref, WC), *g0b = grad_start(db_ref, OC);
    float *acci = fcopy(g0i, NC), *accw = fcopy(g0w, WC), *accb = fcopy(g0b, OC);
    matmul_backward(acci, accw, accb, R, inp, w, N, C, OC);
    snprintf(name, sizeof name, "matmul_backward %s dinp", tag);
    check_grad(name, dinp, dinp2, g0i, acci, dinp_ref, NC);
    snprintf(name, sizeof name, "matmul_backward %s dweight", tag);
    check_grad(name, dw, dw2, g0w, accw, dw_ref, WC);
    snprintf(name, sizeof name, "matmul_backward %s dbias", tag);
    check_grad(name, db, db2, g0b, accb, db_ref, OC);

    // dinp and dbias may be NULL: dweight alone must still be right.
    float* dw3 = falloc(WC);
    matmul_backward(NULL, dw3, NULL, R, inp, w, N, C, OC);
    snprintf(name, sizeof name, "matmul_backward %s with dinp=dbias=NULL gives dweight", tag);
    check_close_fd(name, dw3, dw_ref, WC, TOL_REL, TOL_ABS_FRAC);

    // The kernel table's halves (kernels.h; tensor parallelism runs a reduce-scatter between
    // them): dinp alone, then dweight and dbias alone, each bitwise the whole call's, on fresh
    // gradients (accumulate 0) and accumulating onto a start.
    Kernels k;
    kernels_cpu_init(&k, OC);
    for (int acc = 0; acc <= 1; acc++) {
        float *wi = falloc(NC), *ww = fcopy(g0w, WC), *wb = fcopy(g0b, OC);
        float *hi = falloc(NC), *hw = fcopy(g0w, WC), *hb = fcopy(g0b, OC);
        kernel_matmul_backward(&k, wi, ww, wb, R, inp, w, NULL, N, C, OC, acc);
        kernel_matmul_backward(&k, hi, NULL, NULL, R, NULL, w, NULL, N, C, OC, acc);
        kernel_matmul_backward(&k, NULL, hw, hb, R, inp, NULL, NULL, N, C, OC, acc);
        snprintf(name, sizeof name, "matmul_backward %s accumulate %d: the dinp half alone bitwise the whole's", tag, acc);
        check_bitwise(name, hi, wi, NC);
        snprintf(name, sizeof name, "matmul_backward %s accumulate %d: the dweight half alone bitwise the whole's", tag, acc);
        check_bitwise(name, hw, ww, WC);
        snprintf(name, sizeof name, "matmul_backward %s accumulate %d: its dbias bitwise the whole's", tag, acc);
        check_bitwise(name, hb, wb, OC);
        free(wi); free(ww); free(wb); free(hi); free(hw); free(hb);
    }

    MatmulCtx ctx = {N, C, OC, inp_d, w_d, b_d, R_d, dalloc(NO)};
    snprintf(name, sizeof name, "matmul_backward %s dinp", tag);
    check_fd(name, matmul_loss, &ctx, inp_d, NC, 1, dinp_ref, dinp);
    snprintf(name, sizeof name, "matmul_backward %s dweight", tag);
    check_fd(name, matmul_loss, &ctx, w_d, WC, 1, dw_ref, dw);
    snprintf(name, sizeof name, "matmul_backward %s dbias", tag);
    check_fd(name, matmul_loss, &ctx, b_d, OC, 1, db_ref, db);

    free(ctx.out); free(inp); free(w); free(b); free(inp_d); free(w_d); free(b_d); free(out);
    free(out_ref); free(out2); free(R); free(R_d); free(dinp_ref); free(dw_ref); free(db_ref);
    free(dinp); free(dw); free(db); free(dinp2); free(dw2); free(db2); free(g0i); free(g0w);
    free(g0b); free(acci); free(accw); free(accb); free(dw3);
}

// ----------------------------------------------------------------------------
// Attention

typedef struct { int B, T, C, NH, KVH; double *qkv, *R, *out; } AttentionCtx;
static double attention_loss(void* p) {
    AttentionCtx* c = p;
    ref_attention_forward(c->out, NULL, c->qkv, c->B, c->T, c->C, c->NH, c->KVH);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->C);
}

// Makes the scores of key j grow (ramp > 0) or shrink (ramp < 0) with j, so that the
// running max of the online softmax changes across key tiles (or stays on the first).
// kw = KVH * hs columns of k per row of QW.
static void ramp_keys(float* qkv, int B, int T, int C, size_t QW, int kw, double ramp) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++) {
            double f = ramp > 0 ? 0.25 + ramp * j / T : 0.25 - ramp * (T - 1 - j) / T;
            for (int c = 0; c < kw; c++) qkv[((size_t)b * T + j) * QW + C + c] *= (float)f;
        }
}

static void test_attention(int B, int T, int C, int NH, int KVH, double amp, double ramp, size_t fd_stride) {
    char tag[112], name[256];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d KVH=%d amp=%g ramp=%g", B, T, C, NH, KVH, amp, ramp);
    const int hs = C / NH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs;
    const size_t NQ = (size_t)B * T * QW, NO = (size_t)B * T * C, NL = (size_t)B * NH * T;
    float* qkv = frand(NQ, amp, 0.0);
    if (ramp != 0.0) ramp_keys(qkv, B, T, C, QW, KVH * hs, ramp);
    double* qkv_d = to_double(qkv, NQ);
    float *out = falloc(NO), *lse = falloc(NL), *out2 = falloc(NO), *lse2 = falloc(NL);
    attention_forward(out, lse, qkv, B, T, C, NH, KVH);
    attention_forward(out2, lse2, qkv, B, T, C, NH, KVH);
    double *out_ref = dalloc(NO), *lse_ref = dalloc(NL);
    ref_attention_forward(out_ref, lse_ref, qkv_d, B, T, C, NH, KVH);
    snprintf(name, sizeof name, "attention_forward %s out matches reference", tag);
    check_close_fd(name, out, out_ref, NO, TOL_REL, TOL_ABS_FRAC);
    snprintf(name, sizeof name, "attention_forward %s lse matches reference", tag);
    check_close_fd(name, lse, lse_ref, NL, TOL_REL, TOL_ABS_FRAC);
    snprintf(name, sizeof name, "attention_forward %s deterministic (out)", tag);
    check_bitwise(name, out, out2, NO);
    snprintf(name, sizeof name, "attention_forward %s deterministic (lse)", tag);
    check_bitwise(name, lse, lse2, NL);

    float* R = frand(NO, 1.0, 0.0);
    double* R_d = to_double(R, NO);
    double* dqkv_ref = dalloc(NQ);
    ref_attention_backward(dqkv_ref, R_d, qkv_d, B, T, C, NH, KVH);
    float *dqkv = falloc(NQ), *dqkv2 = falloc(NQ);
    attention_backward(dqkv, R, qkv, out, lse, B, T, C, NH, KVH);
    attention_backward(dqkv2, R, qkv, out, lse, B, T, C, NH, KVH);
    float* g0 = grad_start(dqkv_ref, NQ);
    float* acc = fcopy(g0, NQ);
    attention_backward(acc, R, qkv, out, lse, B, T, C, NH, KVH);
    snprintf(name, sizeof name, "attention_backward %s dqkv", tag);
    check_grad(name, dqkv, dqkv2, g0, acc, dqkv_ref, NQ);

    if (fd_stride > 0) {
        AttentionCtx ctx = {B, T, C, NH, KVH, qkv_d, R_d, dalloc(NO)};
        snprintf(name, sizeof name, "attention_backward %s dqkv", tag);
        check_fd(name, attention_loss, &ctx, qkv_d, NQ, fd_stride, dqkv_ref, dqkv);
        free(ctx.out);
    }
    free(qkv); free(qkv_d); free(out); free(lse); free(out2); free(lse2); free(out_ref);
    free(lse_ref); free(R); free(R_d); free(dqkv_ref); free(dqkv); free(dqkv2); free(g0); free(acc);
}

// Grouped-query attention is multi-head attention on k, v repeated over each group (HF's
// repeat_kv): the forward must give bitwise the outputs of that expanded MHA input (the same
// operations on the same numbers), the backward bitwise its dq, and as dk, dv of kv head j
// the sum of the expanded heads' dk, dv over j's group (within rounding: summed in
// another order).
static void test_attention_gqa_is_repeated_mha(int B, int T, int NH, int KVH, int hs) {
    char tag[96], name[256];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d KVH=%d hs=%d", B, T, NH, KVH, hs);
    const int C = NH * hs, group = NH / KVH;
    const size_t QW = (size_t)C + 2 * (size_t)KVH * hs, C3 = 3 * (size_t)C;
    const size_t NQ = (size_t)B * T * QW, NM = (size_t)B * T * C3, NO = (size_t)B * T * C, NL = (size_t)B * NH * T;
    float* qkv = frand(NQ, 1.0, 0.0);
    float* mha = falloc(NM);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        memcpy(mha + r * C3, qkv + r * QW, (size_t)C * sizeof(float));
        for (int h = 0; h < NH; h++)
            for (int s = 0; s < 2; s++)  // k, then v
                memcpy(mha + r * C3 + (size_t)(s + 1) * C + (size_t)h * hs,
                       qkv + r * QW + C + (size_t)s * KVH * hs + (size_t)(h / group) * hs, (size_t)hs * sizeof(float));
    }
    float *out = falloc(NO), *lse = falloc(NL), *out_m = falloc(NO), *lse_m = falloc(NL);
    attention_forward(out, lse, qkv, B, T, C, NH, KVH);
    attention_forward(out_m, lse_m, mha, B, T, C, NH, NH);
    snprintf(name, sizeof name, "attention_forward GQA %s out bitwise that of MHA on repeated k, v", tag);
    check_bitwise(name, out, out_m, NO);
    snprintf(name, sizeof name, "attention_forward GQA %s lse bitwise that of MHA on repeated k, v", tag);
    check_bitwise(name, lse, lse_m, NL);

    float* R = frand(NO, 1.0, 0.0);
    float *dqkv = falloc(NQ), *dmha = falloc(NM);
    attention_backward(dqkv, R, qkv, out, lse, B, T, C, NH, KVH);
    attention_backward(dmha, R, mha, out_m, lse_m, B, T, C, NH, NH);
    float *dq = falloc(NO), *dq_m = falloc(NO);
    size_t nkv = (size_t)B * T * 2 * KVH * hs;
    double *dkv = dalloc(nkv), *dkv_m = dalloc(nkv);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        memcpy(dq + r * C, dqkv + r * QW, (size_t)C * sizeof(float));
        memcpy(dq_m + r * C, dmha + r * C3, (size_t)C * sizeof(float));
        for (size_t i = 0; i < 2 * (size_t)KVH * hs; i++) dkv[r * 2 * KVH * hs + i] = dqkv[r * QW + C + i];
        for (int h = 0; h < NH; h++)
            for (int s = 0; s < 2; s++)
                for (int i = 0; i < hs; i++)
                    dkv_m[r * 2 * KVH * hs + (size_t)s * KVH * hs + (size_t)(h / group) * hs + i] +=
                        dmha[r * C3 + (size_t)(s + 1) * C + (size_t)h * hs + i];
    }
    snprintf(name, sizeof name, "attention_backward GQA %s dq bitwise that of MHA on repeated k, v", tag);
    check_bitwise(name, dq, dq_m, NO);
    snprintf(name, sizeof name, "attention_backward GQA %s dk, dv are the group sums of MHA's", tag);
    check_close_dd(name, dkv, dkv_m, nkv, TOL_REL, TOL_ABS_FRAC);
    free(qkv); free(mha); free(out); free(lse); free(out_m); free(lse_m); free(R); free(dqkv); free(dmha);
    free(dq); free(dq_m); free(dkv); free(dkv_m);
}

// T = 1: the only key is the query's own, so out = v exactly and lse = q.k * scale.
static void test_attention_t1(void) {
    const int B = 2, T = 1, C = 12, NH = 3, hs = C / NH;
    const size_t NQ = (size_t)B * T * 3 * C, NO = (size_t)B * T * C, NL = (size_t)B * NH * T;
    float* qkv = frand(NQ, 1.0, 0.0);
    float *out = falloc(NO), *lse = falloc(NL);
    attention_forward(out, lse, qkv, B, T, C, NH, NH);
    double *v = dalloc(NO), *s = dalloc(NL);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            double d = 0.0;
            for (int i = 0; i < hs; i++) {
                v[(size_t)b * C + h * hs + i] = qkv[(size_t)b * 3 * C + 2 * C + h * hs + i];
                d += (double)qkv[(size_t)b * 3 * C + h * hs + i] * qkv[(size_t)b * 3 * C + C + h * hs + i];
            }
            s[b * NH + h] = d / sqrt((double)hs);
        }
    check_close_fd("attention_forward T=1 gives out = v", out, v, NO, TOL_REL, TOL_ABS_FRAC);
    check_close_fd("attention_forward T=1 gives lse = q.k/sqrt(hs)", lse, s, NL, TOL_REL, TOL_ABS_FRAC);
    free(qkv); free(out); free(lse); free(v); free(s);
}

// Causality: changing token t0 (its q, k and v) must leave every output before t0
// bitwise unchanged; and with dout zero from t0 on, the gradient of tokens >= t0 is 0.
static void test_attention_causal(void) {
    const int B = 2, T = 7, C = 12, NH = 3, t0 = 4;
    const size_t NQ = (size_t)B * T * 3 * C, NO = (size_t)B * T * C, NL = (size_t)B * NH * T;
    float* qkv = frand(NQ, 1.0, 0.0);
    float *out = falloc(NO), *lse = falloc(NL), *out2 = falloc(NO), *lse2 = falloc(NL);
    attention_forward(out, lse, qkv, B, T, C, NH, NH);
    for (int c = 0; c < 3 * C; c++) qkv[((size_t)0 * T + t0) * 3 * C + c] += 0.5f;
    attention_forward(out2, lse2, qkv, B, T, C, NH, NH);
    int ok = 1, changed = 0;
    size_t bad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                int same = memcmp(&out[i], &out2[i], sizeof(float)) == 0;
                if (b == 0 && t >= t0) { changed |= !same; continue; }
                if (!same && ok) { ok = 0; bad = i; }
            }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t i = ((size_t)b * NH + h) * T + t;
                if ((b != 0 || t < t0) && memcmp(&lse[i], &lse2[i], sizeof(float)) != 0 && ok) {
                    ok = 0; bad = i;
                }
            }
    const char* fname = "attention_forward is causal (a later token does not change earlier outputs)";
    if (!ok) report(0, fname, "output/lse element %zu before the changed token %d differs", bad, t0);
    else report(changed, fname, "changing token %d changed none of the outputs (test is void)", t0);

    float* dout = frand(NO, 1.0, 0.0);
    for (int b = 0; b < B; b++)
        for (int t = t0; t < T; t++)
            for (int c = 0; c < C; c++) dout[((size_t)b * T + t) * C + c] = 0.0f;
    float* dqkv = falloc(NQ);
    attention_backward(dqkv, dout, qkv, out2, lse2, B, T, C, NH, NH);
    ok = 1;
    int nonzero_before = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < 3 * C; c++) {
                float g = dqkv[((size_t)b * T + t) * 3 * C + c];
                if (t >= t0 && g != 0.0f && ok) { ok = 0; bad = ((size_t)b * T + t) * 3 * C + c; }
                if (t < t0 && g != 0.0f) nonzero_before = 1;
            }
    const char* bname = "attention_backward is causal (no gradient to tokens after the last nonzero dout)";
    if (!ok) report(0, bname, "dqkv[%zu] = %g is not zero", bad, dqkv[bad]);
    else report(nonzero_before, bname, "all gradients are zero (test is void)");
    free(qkv); free(out); free(lse); free(out2); free(lse2); free(dout); free(dqkv);
}

// ----------------------------------------------------------------------------
// GELU, residual

typedef struct { size_t n; double *x, *R; } GeluCtx;
static double gelu_loss(void* p) {
    GeluCtx* c = p;
    double L = 0.0;
    for (size_t i = 0; i < c->n; i++) L += ref_gelu(c->x[i]) * c->R[i];
    return L;
}

static void test_gelu(void) {
    // Random values plus the places where GELU is delicate: 0, tiny, the knee, saturation
    // on both sides, and values where x^3 dominates.
    static const float special[] = {0.0f, 1e-7f, -1e-7f, 1e-3f, -1e-3f, 0.5f, -0.5f, 1.0f, -1.0f,
                                    2.0f, -2.0f, 3.0f, -3.0f, 5.0f, -5.0f, 8.0f, -8.0f, 10.0f,
                                    -10.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e4f, -1e4f};
    const size_t nspecial = sizeof special / sizeof special[0];
    const size_t n = 1000 + nspecial;  // odd size: vector tails, split over threads
    float* x = frand(n, 4.0, 0.0);
    memcpy(x, special, sizeof special);
    double* x_d = to_double(x, n);
    float *y = falloc(n), *y2 = falloc(n);
    gelu_forward(y, x, n);
    gelu_forward(y2, x, n);
    double* y_ref = dalloc(n);
    for (size_t i = 0; i < n; i++) y_ref[i] = ref_gelu(x_d[i]);
    double* y_d = to_double(y, n);
    check_close_ex("gelu_forward matches reference (incl. 0, +-1e-7 .. +-1e4)", y_d, y_ref, n,
                   TOL_REL, 0.0, GELU_ABS_FLOOR);
    check_bitwise("gelu_forward deterministic", y, y2, n);
    float* yin = fcopy(x, n);
    gelu_forward(yin, yin, n);
    check_bitwise("gelu_forward in place (out == inp) gives the same result", yin, y, n);

    float* R = frand(n, 1.0, 0.0);
    double* R_d = to_double(R, n);
    double* dx_ref = dalloc(n);
    for (size_t i = 0; i < n; i++) dx_ref[i] = ref_gelu_grad(x_d[i]) * R_d[i];
    float *dx = falloc(n), *dx2 = falloc(n);
    gelu_backward(dx, x, R, n);
    gelu_backward(dx2, x, R, n);
    float* g0 = grad_start(dx_ref, n);
    float* acc = fcopy(g0, n);
    gelu_backward(acc, x, R, n);
    double* dx_d = to_double(dx, n);
    // GELU's derivative crosses zero (x ~ -0.75) through cancelling O(1) terms, so near
    // there only an absolute error relative to the array's scale is meaningful.
    check_close_ex("gelu_backward dinp matches reference", dx_d, dx_ref, n, TOL_REL, TOL_ABS_FRAC,
                   GELU_ABS_FLOOR);
    double* want = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = (double)g0[i] + dx_ref[i];
    check_close_fd("gelu_backward dinp accumulates into a nonzero buffer", acc, want, n, TOL_REL,
                   TOL_ABS_FRAC);
    check_bitwise("gelu_backward deterministic", dx, dx2, n);
    // Finite differences, leaving out |x| = 1e4 (the specials' last two), where a step of
    // 1e-5 is lost in the fp64 resolution of x^3.
    size_t skip = 0;
    while (skip < nspecial && fabs(x_d[skip]) < 1e3) skip++;  // specials end with +-1e4
    GeluCtx ctx2 = {n - nspecial, x_d + nspecial, R_d + nspecial};
    check_fd("gelu_backward dinp (random x)", gelu_loss, &ctx2, x_d + nspecial, n - nspecial, 1,
             dx_ref + nspecial, dx + nspecial);
    GeluCtx ctx3 = {skip, x_d, R_d};
    check_fd("gelu_backward dinp (special x)", gelu_loss, &ctx3, x_d, skip, 1, dx_ref, dx);

    free(x); free(x_d); free(y); free(y2); free(y_ref); free(y_d); free(yin); free(R); free(R_d);
    free(dx_ref); free(dx); free(dx2); free(g0); free(acc); free(dx_d); free(want);
}

static void test_residual(void) {
    const size_t n = 1001;
    float *a = frand(n, 1.0, 0.0), *b = frand(n, 1.0, 0.0), *out = falloc(n);
    residual_forward(out, a, b, n);
    // a + b in fp32 is correctly rounded, so it must equal the rounded double sum exactly.
    float* want = falloc(n);
    for (size_t i = 0; i < n; i++) want[i] = (float)((double)a[i] + (double)b[i]);
    check_bitwise("residual_forward equals the correctly rounded sum", out, want, n);
    float* a2 = fcopy(a, n);
    residual_forward(a2, a2, b, n);
    check_bitwise("residual_forward in place (out == a)", a2, want, n);
    free(a); free(b); free(out); free(want); free(a2);
}

// ----------------------------------------------------------------------------
// Cross-entropy

typedef struct { int N, V, Vp; const int* targets; double *logits, dloss, *losses; } CrossEntropyCtx;
static double crossentropy_loss(void* p) {
    CrossEntropyCtx* c = p;
    ref_crossentropy(c->losses, NULL, c->logits, c->targets, c->N, c->V, c->Vp, 0.0);
    double L = 0.0;
    for (int i = 0; i < c->N; i++) L += c->losses[i] * c->dloss;
    return L;
}

static void test_crossentropy(int N, int V, int Vp, double amp, int fd) {
    char tag[96], name[256];
    snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d amp=%g", N, V, Vp, amp);
    const size_t NV = (size_t)N * Vp;
    float* logits = frand(NV, amp, 0.0);
    // Padded columns hold garbage (NaN, huge) that must be ignored.
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = (j % 2) ? NAN : 1e30f;
    // One row far from 0: exp without the max subtraction would overflow.
    for (int j = 0; j < V; j++) logits[(size_t)(N / 2) * Vp + j] += 1000.0f;
    int* targets = xcalloc(N, sizeof(int));
    for (int i = 0; i < N; i++) targets[i] = rng_int(V);
    targets[0] = V - 1;  // edges of the real vocabulary
    targets[N - 1] = 0;
    double* logits_d = to_double(logits, NV);
    const double dloss = 1.0 / N;
    double *losses_ref = dalloc(N), *grad_ref = dalloc(NV);
    ref_crossentropy(losses_ref, grad_ref, logits_d, targets, N, V, Vp, dloss);

    // Evaluation: dloss = 0 leaves the logits alone.
    float* ev = fcopy(logits, NV);
    float* losses = falloc(N);
    crossentropy_softmax_fused(ev, losses, targets, N, V, Vp, 0.0f);
    snprintf(name, sizeof name, "crossentropy %s dloss=0 losses match reference", tag);
    check_close_fd(name, losses, losses_ref, N, TOL_REL, TOL_ABS_FRAC);
    snprintf(name, sizeof name, "crossentropy %s dloss=0 leaves logits untouched", tag);
    check_bitwise(name, ev, logits, NV);

    // Training: gradient in place.
    float *tr = fcopy(logits, NV), *tr2 = fcopy(logits, NV), *losses2 = falloc(N);
    crossentropy_softmax_fused(tr, losses, targets, N, V, Vp, (float)dloss);
    crossentropy_softmax_fused(tr2, losses2, targets, N, V, Vp, (float)dloss);
    snprintf(name, sizeof name, "crossentropy %s dloss=1/N losses match reference", tag);
    check_close_fd(name, losses, losses_ref, N, TOL_REL, TOL_ABS_FRAC);
    double* g = dalloc(NV);
    for (size_t i = 0; i < NV; i++) g[i] = tr[i];
    snprintf(name, sizeof name, "crossentropy %s dlogits match reference", tag);
    check_close_dd(name, g, grad_ref, NV, TOL_REL, TOL_ABS_FRAC);  // padded: ref is 0
    int padded_zero = 1;
    size_t bad = 0;
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++)
            if (tr[(size_t)i * Vp + j] != 0.0f && padded_zero) { padded_zero = 0; bad = (size_t)i * Vp + j; }
    snprintf(name, sizeof name, "crossentropy %s padded columns get zero gradient", tag);
    report(padded_zero, name, "logits[%zu] = %g", bad, padded_zero ? 0.0 : tr[bad]);
    snprintf(name, sizeof name, "crossentropy %s deterministic", tag);
    check_bitwise(name, tr, tr2, NV);
    int rows_sum_zero = 1;
    for (int i = 0; i < N && rows_sum_zero; i++) {
        double s = 0.0;
        for (int j = 0; j < V; j++) s += tr[(size_t)i * Vp + j];
        if (fabs(s) > 1e-6 * dloss) { rows_sum_zero = 0; bad = (size_t)i; }
    }
    snprintf(name, sizeof name, "crossentropy %s each gradient row sums to 0", tag);
    report(rows_sum_zero, name, "row %zu", bad);

    if (fd) {
        CrossEntropyCtx ctx = {N, V, Vp, targets, logits_d, dloss, dalloc(N)};
        // Only the real columns are inputs of the loss.
        double *a = dalloc(NV), *b = dalloc(NV), *c = dalloc(NV);
        size_t m = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < V; j++) {
                size_t k = (size_t)i * Vp + j;
                double old = logits_d[k];
                logits_d[k] = old + FD_STEP;
                double lp = crossentropy_loss(&ctx);
                logits_d[k] = old - FD_STEP;
                double lm = crossentropy_loss(&ctx);
                logits_d[k] = old;
                a[m] = (lp - lm) / (2.0 * FD_STEP);
                b[m] = grad_ref[k];
                c[m] = tr[k];
                m++;
            }
        snprintf(name, sizeof name, "crossentropy %s: finite differences vs reference gradient", tag);
        check_close_dd(name, b, a, m, FD_TOL, FD_TOL);
        snprintf(name, sizeof name, "crossentropy %s: finite differences vs kernel gradient", tag);
        check_close_dd(name, c, a, m, TOL_REL, TOL_ABS_FRAC);
        free(ctx.losses); free(a); free(b); free(c);
    }
    free(logits); free(targets); free(logits_d); free(losses_ref); free(grad_ref); free(ev);
    free(losses); free(tr); free(tr2); free(losses2); free(g);
}

// The vocab-parallel cross-entropy (kernels.h: crossentropy_tp_*) through the cpu table, each
// rank of a tp group played in turn on its columns of the logits, the group's reductions done
// here (the max, then the sums in rank order): every rank's losses equal the fused kernel's
// within 1e-6 relative (the sum of exps is added in another order), the dlogits concatenated
// equal its dlogits within 1e-6 of their largest magnitude and each element's 1e-6, padding
// columns exactly 0; tp = 1 is bitwise the fused kernel. dloss = 0 leaves the logits alone.
// The padding holds NaN and 1e30 that must not leak in; with V < Vp some rank has padding,
// and where V <= (tp - 1) Vp / tp the last rank has no real column at all (its max -inf).
static int local_vocab(int V, int vb, int Vl) { return V - vb < 0 ? 0 : V - vb > Vl ? Vl : V - vb; }

static void test_crossentropy_vocab_split(int N, int V, int Vp, double amp, int tp) {
    char tag[96], name[256];
    snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d tp=%d", N, V, Vp, tp);
    Kernels k;
    kernels_cpu_init(&k, Vp);
    const size_t NV = (size_t)N * Vp;
    const int Vl = Vp / tp;
    float* logits = frand(NV, amp, 0.0);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = (j % 2) ? NAN : 1e30f;
    for (int j = 0; j < V; j++) logits[(size_t)(N / 2) * Vp + j] += 1000.0f;  // exp would overflow without the max
    int* targets = xcalloc(N, sizeof(int));
    for (int i = 0; i < N; i++) targets[i] = rng_int(V);
    targets[0] = V - 1;
    targets[N - 1] = 0;
    if (N > 2 && Vl < V) targets[1] = Vl;  // the first column of rank 1
    const float dloss = 1.0f / (float)N;
    float *full = fcopy(logits, NV), *losses_full = falloc(N);
    kernel_crossentropy(&k, full, losses_full, targets, N, V, Vp, dloss);

    float **part = xcalloc(tp, sizeof(float*)), **losses = xcalloc(tp, sizeof(float*));
    float *row_max = falloc(N), *rm = falloc(N), *sums = falloc(2 * (size_t)N), *s = falloc(2 * (size_t)N);
    for (int i = 0; i < N; i++) row_max[i] = -INFINITY;
    int empty_rank_ok = 1;
    for (int t = 0; t < tp; t++) {
        const int vb = t * Vl, V_local = local_vocab(V, vb, Vl);
        part[t] = falloc((size_t)N * Vl);
        losses[t] = falloc(N);
        for (int i = 0; i < N; i++) memcpy(part[t] + (size_t)i * Vl, logits + (size_t)i * Vp + vb, Vl * sizeof(float));
        kernel_crossentropy_tp_max(&k, rm, part[t], N, V_local, Vl);
        for (int i = 0; i < N; i++) {
            if (rm[i] > row_max[i]) row_max[i] = rm[i];
            if (V_local == 0 && rm[i] != -INFINITY) empty_rank_ok = 0;
        }
    }
    if (V <= (tp - 1) * Vl) {
        snprintf(name, sizeof name, "crossentropy_tp %s: a rank with no real column has max -inf", tag);
        report(empty_rank_ok, name, "a finite max");
    }
    for (int t = 0; t < tp; t++) {
        const int vb = t * Vl;
        kernel_crossentropy_tp_sums(&k, s, part[t], row_max, targets, N, local_vocab(V, vb, Vl), Vl, vb);
        for (int i = 0; i < 2 * N; i++) sums[i] = t == 0 ? s[i] : sums[i] + s[i];
    }
    // Evaluation first: the logits stay, the losses are those of the training call below.
    float* ev = fcopy(part[0], (size_t)N * Vl);
    kernel_crossentropy_tp_finish(&k, ev, losses[0], row_max, sums, targets, N, local_vocab(V, 0, Vl), Vl, 0, 0.0f);
    snprintf(name, sizeof name, "crossentropy_tp %s dloss=0 leaves the logits untouched", tag);
    check_bitwise(name, ev, part[0], (size_t)N * Vl);
    float* ev_losses = fcopy(losses[0], N);

    float* cat = falloc(NV);
    int pad_zero = 1, same_losses = 1;
    for (int t = 0; t < tp; t++) {
        const int vb = t * Vl, V_local = local_vocab(V, vb, Vl);
        kernel_crossentropy_tp_finish(&k, part[t], losses[t], row_max, sums, targets, N, V_local, Vl, vb, dloss);
        for (int i = 0; i < N; i++) {
            memcpy(cat + (size_t)i * Vp + vb, part[t] + (size_t)i * Vl, Vl * sizeof(float));
            for (int j = V_local; j < Vl; j++) pad_zero &= part[t][(size_t)i * Vl + j] == 0.0f;
        }
        same_losses &= memcmp(losses[t], losses[0], N * sizeof(float)) == 0;
    }
    snprintf(name, sizeof name, "crossentropy_tp %s every rank has the same losses", tag);
    report(same_losses, name, "the ranks' losses differ");
    snprintf(name, sizeof name, "crossentropy_tp %s dloss=0 gives the same losses", tag);
    check_bitwise(name, ev_losses, losses[0], N);
    snprintf(name, sizeof name, "crossentropy_tp %s padding columns get zero gradient", tag);
    report(pad_zero, name, "a padding column is not 0");
    if (tp == 1) {
        snprintf(name, sizeof name, "crossentropy_tp %s losses bitwise the fused kernel's", tag);
        check_bitwise(name, losses[0], losses_full, N);
        snprintf(name, sizeof name, "crossentropy_tp %s dlogits bitwise the fused kernel's", tag);
        check_bitwise(name, cat, full, NV);
    } else {
        double *lf = to_double(losses_full, N), *df = to_double(full, NV);
        snprintf(name, sizeof name, "crossentropy_tp %s losses match the fused kernel's", tag);
        check_close_fd(name, losses[0], lf, N, 1e-6, 1e-6);
        snprintf(name, sizeof name, "crossentropy_tp %s dlogits match the fused kernel's", tag);
        check_close_fd(name, cat, df, NV, 1e-6, 1e-6);
        free(lf);
        free(df);
    }
    for (int t = 0; t < tp; t++) { free(part[t]); free(losses[t]); }
    free(part); free(losses); free(logits); free(targets); free(full); free(losses_full); free(row_max); free(rm);
    free(sums); free(s); free(ev); free(ev_losses); free(cat);
}

// ----------------------------------------------------------------------------
// AdamW, sum of squares

static void ref_adamw(double* p, double* m, double* v, const float* grad, size_t n, double lr,
                      double b1, double b2, double eps, double wd, int t, double grad_scale) {
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        double mhat = m[i] / (1.0 - pow(b1, t)), vhat = v[i] / (1.0 - pow(b2, t));
        p[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * p[i]);
    }
}

static void test_adamw(void) {
    const size_t n = 1003;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *p = frand(n, 1.0, 0.0), *m = falloc(n), *v = falloc(n);
    double *p_ref = to_double(p, n), *m_ref = dalloc(n), *v_ref = dalloc(n);
    float *p2 = fcopy(p, n), *m2 = falloc(n), *v2 = falloc(n);
    for (int t = 1; t <= 3; t++) {
        float* grad = frand(n, 1.0, 0.0);
        adamw_update(p, m, v, grad, n, lr, b1, b2, eps, wd, t, gs);
        adamw_update(p2, m2, v2, grad, n, lr, b1, b2, eps, wd, t, gs);
        ref_adamw(p_ref, m_ref, v_ref, grad, n, lr, b1, b2, eps, wd, t, gs);
        free(grad);
    }
    check_close_fd("adamw_update 3 steps: param matches reference", p, p_ref, n, ADAMW_TOL_REL, ADAMW_TOL_REL);
    check_close_fd("adamw_update 3 steps: m matches reference", m, m_ref, n, ADAMW_TOL_REL, ADAMW_TOL_REL);
    check_close_fd("adamw_update 3 steps: v matches reference", v, v_ref, n, ADAMW_TOL_REL, ADAMW_TOL_REL);
    check_bitwise("adamw_update deterministic", p, p2, n);

    // Known answer: first step, no decay, zero moments: the bias corrections make
    // mhat = g and vhat = g^2, so each parameter moves by lr * sign(g) (|g| >> eps).
    float *q = frand(n, 1.0, 0.0), *mq = falloc(n), *vq = falloc(n), *gq = frand(n, 1.0, 0.0);
    for (size_t i = 0; i < n; i++) if (fabsf(gq[i]) < 1e-3f) gq[i] = 1e-3f;
    double* want = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = (double)q[i] - lr * (gq[i] > 0 ? 1.0 : -1.0);
    adamw_update(q, mq, vq, gq, n, lr, b1, b2, eps, 0.0f, 1, 1.0f);
    check_close_fd("adamw_update first step moves each param by lr*sign(grad)", q, want, n,
                   ADAMW_TOL_REL, ADAMW_TOL_REL);
    free(p); free(m); free(v); free(p_ref); free(m_ref); free(v_ref); free(p2); free(m2); free(v2);
    free(q); free(mq); free(vq); free(gq); free(want);
}

static void test_sum_squares(void) {
    static const size_t sizes[] = {0, 1, 7, 255, 257, 1000, (1u << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        float* x = frand(n, 3.0, 0.5);
        double want = 0.0;
        for (size_t i = 0; i < n; i++) want += (double)x[i] * (double)x[i];
        double got = sum_squares(x, n), got2 = sum_squares(x, n);
        char name[128];
        snprintf(name, sizeof name, "sum_squares n=%zu matches reference", n);
        report(fabs(got - want) <= SUMSQ_TOL_REL * want, name, "got %.17g, want %.17g", got, want);
        snprintf(name, sizeof name, "sum_squares n=%zu deterministic", n);
        report(memcmp(&got, &got2, sizeof got) == 0, name, "%.17g vs %.17g", got, got2);
        free(x);
    }
}

// ----------------------------------------------------------------------------
// fast_expf (the kernels' exp): NaN-safe without changing any finite result

// fast_expf as it was before issue 35, the oracle for every non-NaN input: its one change is
// unsigned exponent arithmetic (this one's signed (n + 127) << 23 overflowed for a NaN, which
// UBSan reports, so it is never called with one here) and NaN in, NaN out (it returned 0).
static float expf_before_35(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    const float t = xc * 1.44269504088896341f + 12582912.0f;
    const float n = t - 12582912.0f;
    int32_t ti, mi, bits;
    const float magic = 12582912.0f;
    memcpy(&ti, &t, 4);
    memcpy(&mi, &magic, 4);
    const int32_t ni = ti - mi;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * (r * r) + r + 1.0f;
    bits = (ni + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return x >= -87.0f ? y * scale : 0.0f;
}

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void test_fast_expf(void) {
    // A stride through all 2^32 bit patterns (every exponent, both signs, subnormals), a finer
    // one through [-90, 90] (where results are neither 0 nor clamped: 37M values), the edges.
    uint64_t tried = 0, differ = 0;
    uint32_t first_bad = 0;
    const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, -87.0f, 88.0f, -87.00001f, 88.00001f, 87.99999f, -86.99999f,
                           1e-45f, -1e-45f, 3.4028235e38f, -3.4028235e38f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        tried++;
        if (to_bits(cpu_fast_expf(edges[i])) != to_bits(expf_before_35(edges[i])) && !differ++) first_bad = to_bits(edges[i]);
    }
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 65537) {
        const float x = from_bits((uint32_t)u);
        if (isnan(x)) continue;
        tried++;
        if (to_bits(cpu_fast_expf(x)) != to_bits(expf_before_35(x)) && !differ++) first_bad = (uint32_t)u;
    }
    for (uint32_t u = 0; u <= to_bits(90.0f); u += 61)
        for (int sign = 0; sign < 2; sign++) {
            const float x = from_bits(u | (uint32_t)sign << 31);
            tried++;
            if (to_bits(cpu_fast_expf(x)) != to_bits(expf_before_35(x)) && !differ++) first_bad = to_bits(x);
        }
    report(differ == 0, "fast_expf: bitwise the former fast_expf on every non-NaN input tried",
           "%llu of %llu differ, first at %a", (unsigned long long)differ, (unsigned long long)tried,
           (double)from_bits(first_bad));
    report(cpu_fast_expf(-INFINITY) == 0.0f && cpu_fast_expf(-88.0f) == 0.0f && cpu_fast_expf(INFINITY) == cpu_fast_expf(88.0f),
           "fast_expf: -inf and below -87 give 0, +inf gives exp(88)", "exp(-inf) %g, exp(inf) %g", (double)cpu_fast_expf(-INFINITY),
           (double)cpu_fast_expf(INFINITY));
    // NaN in, NaN out: quiet and signalling, either sign, any payload (the bits that made the
    // former exponent arithmetic overflow).
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu, 0x7fa5a5a5u};
    int all_nan = 1;
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) all_nan &= isnan(cpu_fast_expf(from_bits(nans[i])));
    report(all_nan, "fast_expf: NaN gives NaN (quiet, signalling, negative, any payload)", "a NaN gave a number");
    // What callers need of it: a NaN logit makes the loss NaN (it gave a finite loss that
    // ignored it), so the step is skipped; a NaN score reaches attention's output.
    float logits[8] = {0.5f, -1.0f, 2.0f, NAN, 0.0f, 1.0f, 0.0f, 0.0f}, loss;
    const int target = 0;
    crossentropy_softmax_fused(logits, &loss, &target, 1, 6, 8, 0.0f);
    report(isnan(loss), "fast_expf: a NaN logit gives a NaN cross-entropy loss", "loss %g", (double)loss);
}

// ----------------------------------------------------------------------------

int main(void) {
    if (omp_get_max_threads() < 2) omp_set_num_threads(2);
    printf("# test_kernels_cpu: %d OpenMP threads\n", omp_get_max_threads());

    test_encoder(2, 7, 12, 5);
    test_encoder(2, 5, 150, 4);  // C above the column tile width (64), ragged last tile
    test_encoder_vocab_split(2, 7, 12, 13, 16, 1);
    test_encoder_vocab_split(2, 5, 150, 13, 16, 1);  // C above the column tile width
    test_encoder_vocab_split(3, 4, 12, 16, 16, 0);   // no wpe (Llama), V == Vp

    test_layernorm(13, 12, 1e-5f);
    test_layernorm(5, 150, 1e-5f);
    test_layernorm(13, 12, 0.5f);   // another norm_eps

    test_rmsnorm_forward(13, 12, 1e-5f);
    test_rmsnorm_forward(5, 150, 0.5f);

    test_matmul(13, 12, 5);
    test_matmul(13, 12, 150);  // OC above the dbias column tile width
    test_matmul(1, 7, 3);

    // The kernels work in blocks of 16 queries and tiles of 64 (forward) / 32 (backward)
    // keys: T = 150 spans several of each with ragged ends.
    test_attention(2, 7, 12, 3, 3, 1.0, 0.0, 1);
    test_attention(1, 1, 12, 3, 3, 1.0, 0.0, 1);      // T = 1
    test_attention(2, 9, 12, 1, 1, 1.0, 0.0, 1);      // a single head
    test_attention(1, 20, 3, 3, 3, 1.0, 0.0, 1);      // hs = 1
    test_attention(2, 33, 24, 2, 2, 1.0, 0.0, 7);     // hs = 12: not a multiple of 4 or 16
    test_attention(1, 150, 16, 2, 2, 2.0, 0.0, 37);   // several query blocks and key tiles
    test_attention(1, 150, 16, 2, 2, 2.0, 4.0, 37);   // rising scores: the max moves every tile
    test_attention(1, 150, 16, 2, 2, 2.0, -4.0, 0);   // falling scores: the max is in the first tile
    test_attention(2, 70, 192, 3, 3, 1.0, 0.0, 0);    // hs = 64 like GPT-2
    test_attention(1, 40, 256, 2, 2, 1.0, 0.0, 97);   // hs = 128, the largest supported
    // Grouped-query attention (NH / KVH query heads per kv head), T across the tiles.
    test_attention(2, 33, 48, 4, 2, 1.0, 0.0, 5);     // hs = 12, groups of 2
    test_attention(1, 150, 64, 4, 2, 2.0, 4.0, 41);   // hs = 16, groups of 2, rising scores
    test_attention(1, 150, 64, 4, 1, 2.0, 0.0, 41);   // hs = 16, one kv head for all 4
    test_attention(2, 70, 256, 4, 2, 1.0, 0.0, 0);    // hs = 64
    test_attention(1, 70, 256, 4, 1, 1.0, 0.0, 113);  // hs = 64, one kv head
    test_attention(1, 20, 12, 4, 2, 1.0, 0.0, 1);     // hs = 3, every element by finite differences
    test_attention_gqa_is_repeated_mha(2, 70, 4, 2, 16);
    test_attention_gqa_is_repeated_mha(1, 100, 8, 1, 64);
    test_attention_t1();
    test_attention_causal();

    test_gelu();
    test_residual();

    test_crossentropy(13, 11, 16, 3.0, 1);
    test_crossentropy(3, 1000, 1024, 5.0, 1);
    test_crossentropy(4, 11, 11, 1.0, 1);  // V == Vp
    // Vocab-parallel: V = 11 of 16 (tp = 4: the last rank has no real column, the third 3 of
    // its 4); V = 40 of 48 (tp = 3, 4); V = 1000 of 1024; V == Vp.
    for (int tp = 1; tp <= 4; tp *= 2) test_crossentropy_vocab_split(13, 11, 16, 3.0, tp);
    for (int tp = 1; tp <= 4; tp++) test_crossentropy_vocab_split(5, 40, 48, 3.0, tp);
    for (int tp = 2; tp <= 4; tp *= 2) test_crossentropy_vocab_split(3, 1000, 1024, 5.0, tp);
    test_crossentropy_vocab_split(4, 12, 12, 1.0, 2);

    test_adamw();
    test_sum_squares();
    test_fast_expf();

    printf("# test_kernels_cpu: %d checks passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
