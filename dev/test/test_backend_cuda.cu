// GPU tests of the CUDA device's FsdpBackend (fsdp/backend_cuda.cuh) against host computations.
//
//   ./build/test_backend_cuda                      1 rank: the NCCL path (W = 1) and the staged
//                                                  path (W = 1)
//   mpirun -np 2 ./build/test_backend_cuda         2 ranks: the staged path (ranks sharing one
//                                                  GPU), or NCCL too when every rank has its own
//                                                  GPU; HSDP (shard groups of 1, 2 replicas)
//
// Checks, for each path (and both reduce dtypes where it matters): all-gather (several ops in
// flight, waited in another order, one in place), reduce-scatter (bf16 and fp32 reduction;
// `full` left unchanged), all_reduce_replicas (several staging chunks), step_decide (loss, norm,
// skip, loss scaling), accumulate, sum_squares, adamw (vs the CPU twin), refresh_param_shard
// (stochastic rounding: bitwise equal to a host computation and independent of how the range
// is split), alloc / zero
// / host copies, and an ordering stress: kernels write a gather's source and destination slot,
// or a reduce-scatter's input, behind random delays (a spinning kernel on the compute stream,
// and on the comm stream) and a kernel checks every result right after wait(), repeated; a
// missing event (CUDA_NOTES.md arrows 1-5) shows up as mismatches.
//
// Data are pure functions of (tag, rank, index), so every rank computes every rank's
// contribution on the host. Every check is agreed over the ranks (all must pass); rank 0 prints
// "ok - ..." / "not ok - ..."; exit status 1 if any failed. Without a GPU:
// "ok - cuda backend # skip no GPU", status 0.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "kernels/cuda_common.cuh"
#include "fsdp/backend_cpu.h"
#include "fsdp/backend_cuda.cuh"
#include "fsdp/flat_unit.h"
#include "fsdp/fsdp.h"
#include "comm/process_group.h"

static ProcessGroup g_pg;
static int n_failed = 0, n_passed = 0;

// Every rank calls check() for every check, in the same order; it passes when it passed on
// every rank. Rank 0 prints the verdict; another rank that failed prints its detail to stderr.
static void check(bool ok, const char* name, const char* fmt, ...) {
    char detail[512] = "";
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    int32_t all = ok ? 1 : 0;
    comm_all_reduce_i32(g_pg.world_comm, &all, 1, COMM_MIN);
    if (all) n_passed++;
    else n_failed++;
    if (!ok && g_pg.rank != 0) fprintf(stderr, "[rank %d] %s: %s\n", g_pg.rank, name, detail);
    if (g_pg.rank == 0) {
        if (all) {
            if (detail[0]) printf("ok - %s (%s)\n", name, detail);
            else printf("ok - %s\n", name);
        } else {
            printf("not ok - %s: %s\n", name, ok ? "failed on another rank (see its stderr)" : detail);
        }
        fflush(stdout);
    }
}

// ----------------------------------------------------------------------------
// Deterministic data

static uint64_t hash3(uint64_t tag, uint64_t r, uint64_t i) {
    return splitmix64_mix(splitmix64_mix(tag * 0x9e3779b97f4a7c15ull + r) + i * 0xd1b54a32d192ed03ull);
}
static float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }
// In [-2, 2), exactly a bf16.
static float hval_bf16(uint64_t tag, int r, size_t i) {
    return round_bf16((float)((double)(hash3(tag, (uint64_t)r, i) >> 40) * (4.0 / 16777216.0) - 2.0));
}
// In [-2, 2), a general fp32.
static float hval_f32(uint64_t tag, int r, size_t i) {
    return (float)((double)(hash3(tag, (uint64_t)r, i) >> 40) * (4.0 / 16777216.0) - 2.0);
}
static uint16_t bits_of(bf16 x) { uint16_t u; memcpy(&u, &x, sizeof u); return u; }
static uint32_t fbits(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }

template <class T>
static T* dev_alloc(size_t n) {
    T* p = NULL;
    CUDA_CHECK(cudaMalloc((void**)&p, (n > 0 ? n : 1) * sizeof(T)));
    return p;
}
template <class T>
static void dev_set(T* p, const std::vector<T>& h) {
    CUDA_CHECK(cudaDeviceSynchronize());
    if (!h.empty()) CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy may return before the DMA lands (it only staged the
    // bytes), and the backend's streams are non-blocking, i.e. not ordered after the legacy
    // stream's copy: wait for it here.
    CUDA_CHECK(cudaDeviceSynchronize());
}
template <class T>
static std::vector<T> dev_get(const T* p, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n > 0) CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
static std::vector<bf16> to_bf16(const std::vector<float>& x) {
    std::vector<bf16> y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = float_to_bf16(x[i]);
    return y;
}

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() { s += 0x9e3779b97f4a7c15ull; return splitmix64_mix(s); }
    double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
    size_t below(size_t n) { return (size_t)(next() % (uint64_t)n); }
};

// Test setup shared by every backend instance.
static const size_t kMaxShard = 4104;   // the largest shard a test uses (elements per rank)
static const int kMaxOps = 8;
static const uint64_t kSeed = 1234567;

struct Setup {
    const ProcessGroup* pg;
    FsdpBackend be;
    CudaBackendConfig cfg;
    char label[96];
};

static void setup_init(Setup* s, const ProcessGroup* pg, int use_nccl, int reduce_fp32, cudaStream_t compute) {
    s->pg = pg;
    memset(&s->cfg, 0, sizeof s->cfg);
    s->cfg.use_nccl = use_nccl;
    s->cfg.reduce_fp32 = reduce_fp32;
    s->cfg.max_unit_padded = kMaxShard * (size_t)pg->shard_size;
    s->cfg.seed = kSeed;
    s->cfg.compute = compute;
    fsdp_backend_cuda_init(&s->be, pg, kMaxOps, &s->cfg);
    snprintf(s->label, sizeof s->label, "%s %s-reduce S=%d R=%d", use_nccl ? "nccl" : "staged",
             reduce_fp32 ? "fp32" : "bf16", pg->shard_size, pg->replicate_size);
}

// ----------------------------------------------------------------------------
// All-gather

static void test_all_gather(Setup* s) {
    const int W = s->pg->shard_size, R = s->pg->shard_rank;
    const size_t sizes[] = {1, 7, 1000, kMaxShard};
    const int nk = 4;
    std::vector<bf16*> shard(nk + 1), full(nk + 1);
    size_t ns[5];
    for (int k = 0; k <= nk; k++) {
        const size_t n = k < nk ? sizes[k] : 1000;  // k == nk: in place
        ns[k] = n;
        std::vector<float> mine(n);
        for (size_t i = 0; i < n; i++) mine[i] = hval_bf16(100 + k, R, i);
        full[k] = dev_alloc<bf16>(W * n);
        CUDA_CHECK(cudaMemset(full[k], 0xff, W * n * sizeof(bf16)));
        if (k < nk) {
            shard[k] = dev_alloc<bf16>(n);
            dev_set(shard[k], to_bf16(mine));
        } else {
            shard[k] = full[k] + (size_t)R * n;
            dev_set(shard[k], to_bf16(mine));
        }
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int k = 0; k <= nk; k++) s->be.all_gather_start(s->be.ctx, k, shard[k], full[k], ns[k]);
    for (int k = nk; k >= 0; k--) s->be.wait(s->be.ctx, k);
    for (int k = 0; k <= nk; k++) {
        const size_t n = ns[k];
        std::vector<bf16> got = dev_get(full[k], W * n);
        size_t bad = 0, first = (size_t)-1;
        for (int r = 0; r < W; r++)
            for (size_t i = 0; i < n; i++)
                if (bits_of(got[(size_t)r * n + i]) != bits_of(float_to_bf16(hval_bf16(100 + k, r, i)))) {
                    if (!bad) first = (size_t)r * n + i;
                    bad++;
                }
        char name[160];
        snprintf(name, sizeof name, "%s: all_gather n=%zu%s", s->label, n, k == nk ? " in place" : "");
        check(bad == 0, name, bad ? "%zu of %zu elements differ (first at %zu)" : NULL, bad, W * n, first);
        if (k < nk) CUDA_CHECK(cudaFree(shard[k]));
        CUDA_CHECK(cudaFree(full[k]));
    }
}

// ----------------------------------------------------------------------------
// Reduce-scatter

static void test_reduce_scatter(Setup* s) {
    const int W = s->pg->shard_size, R = s->pg->shard_rank;
    const bool fp32 = s->cfg.reduce_fp32 != 0;
    const size_t sizes[] = {1, 7, 1000, kMaxShard};
    const int nk = 4;
    std::vector<bf16*> full(nk);
    std::vector<void*> out(nk);  // reduce_out_bytes per element: fp32, or bf16 (NCCL reducing in bf16)
    const size_t ob = s->be.reduce_out_bytes;
    const bool bf16_out = ob == sizeof(bf16);
    if (!(ob == sizeof(float) || (bf16_out && !fp32 && s->cfg.use_nccl)))
        check(false, "reduce_out_bytes", "%zu bytes per element (reduce_fp32 %d)", ob, (int)fp32);
    std::vector<std::vector<bf16>> sent(nk);
    for (int k = 0; k < nk; k++) {
        const size_t n = sizes[k];
        std::vector<float> mine(W * n);
        for (size_t j = 0; j < W * n; j++) mine[j] = hval_bf16(200 + k, R, j);
        sent[k] = to_bf16(mine);
        full[k] = dev_alloc<bf16>(W * n);
        dev_set(full[k], sent[k]);
        CUDA_CHECK(cudaMalloc(&out[k], n * ob));
        CUDA_CHECK(cudaMemset(out[k], 0xff, n * ob));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int k = 0; k < nk; k++) s->be.reduce_scatter_start(s->be.ctx, kMaxOps - 1 - k, full[k], out[k], sizes[k]);
    const int order[] = {2, 0, 3, 1};
    for (int k : order) s->be.wait(s->be.ctx, kMaxOps - 1 - k);
    for (int k = 0; k < nk; k++) {
        const size_t n = sizes[k];
        std::vector<float> got(n);
        if (bf16_out) {
            std::vector<bf16> h = dev_get((const bf16*)out[k], n);
            for (size_t i = 0; i < n; i++) got[i] = bf16_to_float(h[i]);
        } else {
            got = dev_get((const float*)out[k], n);
        }
        std::vector<bf16> after = dev_get(full[k], W * n);
        double max_err = 0.0;
        size_t bad = 0, first = (size_t)-1, changed = 0;
        for (size_t i = 0; i < n; i++) {
            float sum = 0.0f;
            double abs_sum = 0.0;
            for (int r = 0; r < W; r++) {
                const float t = hval_bf16(200 + k, r, (size_t)R * n + i);
                sum += t;
                abs_sum += fabs(t);
            }
            const float ref = fp32 ? sum : round_bf16(sum);
            // W = 1: exact. Otherwise the order of the sum (and, reducing in bf16, NCCL rounds each
            // partial sum: up to W - 1 roundings of 2^-9 relative to the partial sums).
            const double tol = W == 1 ? 0.0 : (fp32 ? 1e-6 * abs_sum : (double)W * ldexp(1.0, -9) * abs_sum + 1e-6 * abs_sum);
            const double err = fabs((double)got[i] - (double)ref);
            if (!(err <= tol) || (W == 1 && fbits(got[i]) != fbits(ref))) {
                if (!bad) first = i;
                bad++;
            }
            if (err > max_err || err != err) max_err = err;
        }
        for (size_t j = 0; j < W * n; j++) changed += bits_of(after[j]) != bits_of(sent[k][j]);
        char name[160];
        snprintf(name, sizeof name, "%s: reduce_scatter n=%zu", s->label, n);
        if (bad == 0 && changed == 0) check(true, name, "max err %.3g", max_err);
        else check(false, name, "max err %.3g, %zu of %zu outside tolerance (first at %zu), %zu input elements changed",
                   max_err, bad, n, first, changed);
        CUDA_CHECK(cudaFree(full[k]));
        CUDA_CHECK(cudaFree(out[k]));
    }
}

// ----------------------------------------------------------------------------
// HSDP replica all-reduce and the host all-reduce

static void test_replicas(Setup* s) {
    const int Rn = s->pg->replicate_size, rr = s->pg->replicate_rank;
    const size_t n = 150001;  // several staging chunks (65536 elements each here)
    std::vector<float> mine(n);
    for (size_t i = 0; i < n; i++) mine[i] = hval_f32(300, rr, i);
    float* buf = dev_alloc<float>(n + 1);
    // An odd offset: the copies must not assume 16-byte alignment.
    float* d = buf + 1;
    dev_set(d, mine);
    s->be.all_reduce_replicas(s->be.ctx, d, n);
    std::vector<float> got = dev_get(d, n);
    size_t bad = 0, first = (size_t)-1;
    double max_err = 0.0;
    for (size_t i = 0; i < n; i++) {
        float sum = 0.0f;
        double abs_sum = 0.0;
        for (int r = 0; r < Rn; r++) {
            const float t = hval_f32(300, r, i);
            sum += t;
            abs_sum += fabs(t);
        }
        const double tol = Rn <= 2 ? 0.0 : 1e-6 * abs_sum;  // two terms: the sum is order-free
        const double err = fabs((double)got[i] - (double)sum);
        if (!(err <= tol)) {
            if (!bad) first = i;
            bad++;
        }
        if (err > max_err || err != err) max_err = err;
    }
    char name[160];
    snprintf(name, sizeof name, "%s: all_reduce_replicas n=%zu%s", s->label, n, Rn == 1 ? " (one replica: unchanged)" : "");
    if (bad == 0) check(true, name, "max err %.3g", max_err);
    else check(false, name, "max err %.3g, %zu of %zu wrong (first at %zu)", max_err, bad, n, first);
    CUDA_CHECK(cudaFree(buf));

    // step_decide: the loss sum over the world, the sum of squares over the shard group (ranks
    // base .. base + S - 1), then the decision, all on the device; the host reads it through
    // step_stats_fetch / step_stats_wait. Rank r contributes loss r + 1 and squares 4 (r + 1).
    const int base = s->pg->replicate_rank * s->pg->shard_size;
    double want_loss = 0.0, want_sq = 0.0;
    for (int r = 0; r < g_pg.world; r++) want_loss += (double)r + 1.0;
    for (int r = 0; r < s->pg->shard_size; r++) want_sq += 4.0 * ((double)(base + r) + 1.0);
    FsdpStepStats* d_stats = (FsdpStepStats*)s->be.alloc(s->be.ctx, sizeof(FsdpStepStats));
    FsdpStepStats* h_stats = (FsdpStepStats*)s->be.alloc_host(s->be.ctx, sizeof(FsdpStepStats));
    // Cases: 0 plain (no loss scaling: scale 1, static); 1 one rank's loss NaN: every rank
    // skips; 2 loss scaling (fp16) at scale 8, dynamic with growth interval 2 and one clean
    // step behind it: the squares carry 8^2, the norm and clip scale are unscaled (the clip
    // scale folds 1/8 in), and this clean step doubles the scale; 3 the same with one rank's
    // squares infinite (an fp16 overflow): skipped, the scale halved, the count reset.
    for (int c = 0; c < 4; c++) {
        const float scale = c >= 2 ? 8.0f : 1.0f;
        FsdpStepStats mine;
        memset(&mine, 0, sizeof(mine));
        mine.loss_sum = (double)g_pg.rank + 1.0;
        mine.sumsq = 4.0 * ((double)g_pg.rank + 1.0) * (double)(scale * scale);
        mine.loss_scale = scale;
        if (c >= 2) { mine.growth_interval = 2; mine.good_steps = 1; }
        if (c == 1 && g_pg.rank == g_pg.world - 1) mine.loss_sum = NAN;
        if (c == 3 && g_pg.rank == base + s->pg->shard_size - 1) mine.sumsq = INFINITY;
        s->be.copy_to_device(s->be.ctx, d_stats, &mine, sizeof(mine));
        const float clip = 1.0f;
        s->be.step_decide(s->be.ctx, d_stats, 10.0, clip);
        s->be.step_stats_fetch(s->be.ctx, h_stats, d_stats);
        s->be.step_stats_wait(s->be.ctx);
        const float norm = (float)sqrt(want_sq * (double)(scale * scale)) / scale;
        const bool sums = h_stats->loss_sum == want_loss && h_stats->loss == want_loss / 10.0;
        bool ok = false;
        if (c == 0) ok = sums && h_stats->sumsq == want_sq && h_stats->norm == norm && h_stats->clip_scale == clip / norm &&
                         h_stats->skip == 0 && h_stats->loss_scale == 1.0f && h_stats->overflow == 0;
        if (c == 1) ok = h_stats->skip == 1 && isnan(h_stats->loss) && h_stats->overflow == 0;
        if (c == 2) ok = sums && h_stats->norm == norm && h_stats->clip_scale == clip / norm / scale && h_stats->skip == 0 &&
                         h_stats->step_loss_scale == scale && h_stats->loss_scale == 2.0f * scale &&
                         h_stats->good_steps == 0 && h_stats->overflow == 0;
        if (c == 3) ok = h_stats->skip == 1 && h_stats->overflow == 1 && h_stats->step_loss_scale == scale &&
                         h_stats->loss_scale == scale / 2.0f && h_stats->good_steps == 0;
        static const char* what[4] = {"", " with one rank's loss NaN: skip", " at loss scale 8: unscaled norm, scale doubled",
                                      " at loss scale 8, squares overflowed: skip, scale halved"};
        snprintf(name, sizeof name, "%s: step_decide%s", s->label, what[c]);
        check(ok, name, "loss sum %g (want %g), squares %g (want %g), loss %g, norm %g, clip scale %g, skip %d, scale %g -> %g, "
              "overflow %d", h_stats->loss_sum, want_loss, h_stats->sumsq, want_sq * scale * scale, h_stats->loss,
              (double)h_stats->norm, (double)h_stats->clip_scale, h_stats->skip, (double)h_stats->step_loss_scale,
              (double)h_stats->loss_scale, h_stats->overflow);
    }
    s->be.release(s->be.ctx, d_stats);
    s->be.release_host(s->be.ctx, h_stats);
}

// ----------------------------------------------------------------------------
// Memory, copies, elementwise work

static void test_memory_and_math(Setup* s) {
    const FsdpBackend* be = &s->be;
    char name[160];

    // alloc is zero-filled; zero() zeroes; pinned host memory is zero-filled; copies round-trip.
    const size_t bytes = 40003;
    unsigned char* p = (unsigned char*)be->alloc(be->ctx, bytes);
    std::vector<unsigned char> h = dev_get(p, bytes);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += h[i] != 0;
    snprintf(name, sizeof name, "%s: alloc is zero-filled", s->label);
    check(nonzero == 0, name, nonzero ? "%zu nonzero bytes" : NULL, nonzero);
    unsigned char* hp = (unsigned char*)be->alloc_host(be->ctx, bytes);
    nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += hp[i] != 0;
    for (size_t i = 0; i < bytes; i++) hp[i] = (unsigned char)(i * 7 + 3);
    be->copy_to_device(be->ctx, p + 1, hp, bytes - 1);
    std::vector<unsigned char> back(bytes, 0);
    be->copy_to_host(be->ctx, back.data(), p + 1, bytes - 1);
    size_t wrong = 0;
    for (size_t i = 0; i + 1 < bytes; i++) wrong += back[i] != hp[i];
    snprintf(name, sizeof name, "%s: alloc_host zero-filled, copy_to_device/copy_to_host round trip", s->label);
    check(nonzero == 0 && wrong == 0, name, nonzero || wrong ? "%zu nonzero host bytes, %zu bytes differ" : NULL, nonzero, wrong);
    be->zero(be->ctx, p, bytes);
    h = dev_get(p, bytes);
    nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += h[i] != 0;
    snprintf(name, sizeof name, "%s: zero", s->label);
    check(nonzero == 0, name, nonzero ? "%zu nonzero bytes" : NULL, nonzero);
    be->release_host(be->ctx, hp);
    be->release(be->ctx, p);

    // accumulate (aligned and unaligned): bitwise dst + src.
    const size_t n = 100003;
    std::vector<float> a(n + 3), b(n + 3);
    for (size_t i = 0; i < n + 3; i++) { a[i] = hval_f32(400, g_pg.rank, i); b[i] = hval_f32(401, g_pg.rank, i); }
    for (int off = 0; off <= 1; off++) {
        float* da = dev_alloc<float>(n + 3);
        float* db = dev_alloc<float>(n + 3);
        dev_set(da, a);
        dev_set(db, b);
        be->accumulate(be->ctx, da + off, db + 3 * off, n);
        std::vector<float> got = dev_get(da + off, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += fbits(got[i]) != fbits(a[off + i] + b[3 * off + i]);
        snprintf(name, sizeof name, "%s: accumulate n=%zu%s", s->label, n, off ? " unaligned" : "");
        check(bad == 0, name, bad ? "%zu of %zu differ" : NULL, bad, n);
        // sum_squares against the CPU twin (double; only the order differs).
        const double got_sq = be->sum_squares(be->ctx, db + 3 * off, n);
        const double ref_sq = sum_squares(b.data() + 3 * off, n);
        snprintf(name, sizeof name, "%s: sum_squares n=%zu%s", s->label, n, off ? " unaligned" : "");
        check(fabs(got_sq - ref_sq) <= 1e-12 * ref_sq, name, "got %.17g, expected %.17g", got_sq, ref_sq);
        CUDA_CHECK(cudaFree(da));
        CUDA_CHECK(cudaFree(db));
    }
    const double zero_sq = be->sum_squares(be->ctx, NULL, 0);
    snprintf(name, sizeof name, "%s: sum_squares n=0", s->label);
    check(zero_sq == 0.0, name, "got %g", zero_sq);

    // adamw: three steps against the CPU twin.
    const size_t na = 10007;
    std::vector<float> prm(na), m(na, 0.0f), v(na, 0.0f), g(na);
    for (size_t i = 0; i < na; i++) { prm[i] = hval_f32(500, 0, i); g[i] = 0.1f * hval_f32(501, 0, i); }
    float *dp = dev_alloc<float>(na), *dm = dev_alloc<float>(na), *dv = dev_alloc<float>(na), *dg = dev_alloc<float>(na);
    dev_set(dp, prm); dev_set(dm, m); dev_set(dv, v); dev_set(dg, g);
    for (int t = 1; t <= 3; t++) {
        be->adamw(be->ctx, dp, dm, dv, dg, na, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f);
        adamw_update(prm.data(), m.data(), v.data(), g.data(), na, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f);
    }
    std::vector<float> gp = dev_get(dp, na), gm = dev_get(dm, na), gv = dev_get(dv, na);
    double max_rel = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < na; i++) {
        const float pairs[3][2] = {{gp[i], prm[i]}, {gm[i], m[i]}, {gv[i], v[i]}};
        for (auto& q : pairs) {
            const double err = fabs((double)q[0] - (double)q[1]);
            const double tol = 1e-5 * fabs((double)q[1]) + 1e-8;
            if (!(err <= tol)) bad++;
            const double rel = err / (fabs((double)q[1]) + 1e-30);
            if (rel > max_rel) max_rel = rel;
        }
    }
    snprintf(name, sizeof name, "%s: adamw 3 steps vs CPU twin", s->label);
    check(bad == 0, name, "max rel err %.3g, %zu values outside tolerance", max_rel, bad);
    CUDA_CHECK(cudaFree(dp)); CUDA_CHECK(cudaFree(dm)); CUDA_CHECK(cudaFree(dv)); CUDA_CHECK(cudaFree(dg));
}

// refresh_param_shard: stochastic rounding whose bits depend only on (seed, unit, step, global
// index): one call over the range == the range split into pieces == the host computation.
static void test_refresh(Setup* s) {
    const FsdpBackend* be = &s->be;
    const size_t n = 10000, G = 12345;
    const uint64_t unit = 3;
    const int step = 5;
    std::vector<float> master(n);
    for (size_t i = 0; i < n; i++) master[i] = hval_f32(600, 0, i);
    float* dm = dev_alloc<float>(n);
    bf16* whole = dev_alloc<bf16>(n);
    bf16* pieces = dev_alloc<bf16>(n);
    bf16* other = dev_alloc<bf16>(n);
    dev_set(dm, master);
    be->refresh_param_shard(be->ctx, whole, dm, n, unit, G, NULL, 0, step);
    Rng rng(99);
    for (size_t a = 0; a < n;) {
        size_t len = 1 + rng.below(1500);
        if (len > n - a) len = n - a;
        be->refresh_param_shard(be->ctx, pieces + a, dm + a, len, unit, G + a, NULL, 0, step);
        a += len;
    }
    be->refresh_param_shard(be->ctx, other, dm, n, unit + 1, G, NULL, 0, step);
    std::vector<bf16> w = dev_get(whole, n), p = dev_get(pieces, n), o = dev_get(other, n);
    const uint64_t key = sr_key(cuda_backend_sr_seed(kSeed, unit), step);
    size_t bad_split = 0, bad_ref = 0, differ_unit = 0, not_neighbour = 0;
    for (size_t i = 0; i < n; i++) {
        const bf16 ref = sr_round_bf16(master[i], sr_bits(key, G + i));
        bad_split += bits_of(w[i]) != bits_of(p[i]);
        bad_ref += bits_of(w[i]) != bits_of(ref);
        differ_unit += bits_of(w[i]) != bits_of(o[i]);
        // The result is one of the two bf16 values around master[i] (truncation or one up).
        uint32_t u = fbits(master[i]) & 0xffff0000u;
        float lo, hi;
        memcpy(&lo, &u, 4);
        u += 0x10000u;
        memcpy(&hi, &u, 4);
        const float got = bf16_to_float(w[i]);
        not_neighbour += !(got == lo || got == hi);
    }
    char name[160];
    snprintf(name, sizeof name, "%s: refresh_param_shard split-independent and equal to the host", s->label);
    check(bad_split == 0 && bad_ref == 0 && not_neighbour == 0, name,
          bad_split == 0 && bad_ref == 0 && not_neighbour == 0 ? NULL : "%zu differ between one call and pieces, %zu from the host reference, %zu not a neighbour", bad_split,
          bad_ref, not_neighbour);
    snprintf(name, sizeof name, "%s: refresh_param_shard units use different random streams", s->label);
    check(differ_unit > 0, name, "%zu of %zu differ between unit %d and unit %d", differ_unit, n, (int)unit, (int)unit + 1);
    CUDA_CHECK(cudaFree(dm)); CUDA_CHECK(cudaFree(whole)); CUDA_CHECK(cudaFree(pieces)); CUDA_CHECK(cudaFree(other));
}

// ----------------------------------------------------------------------------
// Ordering stress

static __global__ void spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
// Small integers: exact in bf16, and so are their sums over up to 8 ranks.
static __host__ __device__ inline float gather_pattern(int k, int r, size_t i) {
    return (float)((int)(((size_t)k * 7 + (size_t)r * 13 + i) % 63) - 31);
}
static __host__ __device__ inline float grad_pattern(int k, int r, size_t j) {
    return (float)((int)(((size_t)k * 5 + (size_t)r * 11 + j * 3) % 63) - 31);
}
static __global__ void fill_kernel(bf16* x, size_t n, int k, int r, int which) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(which == 0 ? gather_pattern(k, r, i) : which == 1 ? grad_pattern(k, r, i) : NAN);
}
static __global__ void check_gather_kernel(const bf16* full, size_t n, int W, int k, unsigned* bad) {
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < (size_t)W * n; j += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(j / n);
        if (__bfloat162float(full[j]) != gather_pattern(k, r, j - (size_t)r * n)) atomicAdd(bad, 1u);
    }
}
// out: fp32, or bf16 (bf16_out) where the backend leaves NCCL's bf16 sum.
static __global__ void check_rs_kernel(const void* out, int bf16_out, size_t n, int W, int R, int k, unsigned* bad) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (int r = 0; r < W; r++) sum += grad_pattern(k, r, (size_t)R * n + i);
        const float got = bf16_out ? bf16_to_float(((const bf16*)out)[i]) : ((const float*)out)[i];
        if (got != sum) atomicAdd(bad, 1u);
    }
}

static void test_stress(Setup* s, int iters) {
    const int W = s->pg->shard_size, R = s->pg->shard_rank;
    CudaBackend* cb = (CudaBackend*)s->be.ctx;
    cudaStream_t compute = s->cfg.compute;
    const size_t n = 4096;
    bf16* shard = dev_alloc<bf16>(n);
    bf16* slot[2] = {dev_alloc<bf16>(W * n), dev_alloc<bf16>(W * n)};
    bf16* grad = dev_alloc<bf16>(W * n);
    const int bf16_out = s->be.reduce_out_bytes == sizeof(bf16);
    void* out = NULL;
    CUDA_CHECK(cudaMalloc(&out, n * s->be.reduce_out_bytes));
    unsigned* bad = dev_alloc<unsigned>(2);
    CUDA_CHECK(cudaMemset(bad, 0, 2 * sizeof(unsigned)));
    CUDA_CHECK(cudaDeviceSynchronize());
    Rng rng(4242 + (uint64_t)g_pg.rank);
    const long long max_cycles = 200000;  // ~0.1 ms
    auto spin = [&](cudaStream_t st) {
        const long long c = (long long)rng.below((size_t)max_cycles);
        if (c > 0) {
            spin_kernel<<<1, 1, 0, st>>>(c);
            CUDA_CHECK(cudaGetLastError());
        }
    };
    const unsigned grid = 64, block = 256;
    for (int k = 0; k < iters; k++) {
        const int op_g = k % 3, op_r = 3 + k % 3;
        bf16* full = slot[k % 2];
        // Arrow 5: the shard is rewritten (after a delay) just before the gather that reads it.
        spin(compute);
        fill_kernel<<<grid, block, 0, compute>>>(shard, n, k, R, 0);
        // Arrow 2: the slot's last writer (after a delay) comes before the gather into it.
        spin(compute);
        fill_kernel<<<grid, block, 0, compute>>>(full, W * n, k, R, 2);
        CUDA_CHECK(cudaGetLastError());
        if (cb->comm) spin(cb->comm);  // a slow collective: a missing wait reads the junk
        s->be.all_gather_start(s->be.ctx, op_g, shard, full, n);
        // Arrow 1: the check runs right after wait().
        s->be.wait(s->be.ctx, op_g);
        check_gather_kernel<<<grid, block, 0, compute>>>(full, n, W, k, bad);
        // Arrow 3: the gradient is written (after a delay) just before its reduce-scatter.
        spin(compute);
        fill_kernel<<<grid, block, 0, compute>>>(grad, W * n, k, R, 1);
        CUDA_CHECK(cudaGetLastError());
        if (cb->comm) spin(cb->comm);
        s->be.reduce_scatter_start(s->be.ctx, op_r, grad, out, n);
        s->be.wait(s->be.ctx, op_r);
        check_rs_kernel<<<grid, block, 0, compute>>>(out, bf16_out, n, W, R, k, bad + 1);
        // After wait() the gradient slot is the compute stream's again: overwrite it at once.
        fill_kernel<<<grid, block, 0, compute>>>(grad, W * n, k, R, 2);
        CUDA_CHECK(cudaGetLastError());
    }
    std::vector<unsigned> b = dev_get(bad, 2);
    char name[160];
    snprintf(name, sizeof name, "%s: event ordering stress (%d iterations, random delays)", s->label, iters);
    check(b[0] == 0 && b[1] == 0, name, b[0] || b[1] ? "%u gathered and %u reduced elements wrong" : NULL, b[0], b[1]);
    CUDA_CHECK(cudaFree(shard)); CUDA_CHECK(cudaFree(slot[0])); CUDA_CHECK(cudaFree(slot[1]));
    CUDA_CHECK(cudaFree(grad)); CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(bad));
}


// ----------------------------------------------------------------------------
// The engine (fsdp/fsdp.c) on this backend against the engine on the CPU backend: the same
// initial master weights and the same (bf16-exact, small) gradients, 2 micro-steps per step,
// 3 optimizer steps. Gathered parameters must be the bf16 rounding of the CPU's (one bf16 ulp:
// stochastic rounding), gradient norms equal (the gradients' sums are exact), and the final
// master weights equal up to AdamW's fp32 differences. max_ops is the engine's exact number of
// op slots (fsdp_max_ops), which the staged path sizes its pinned buffers by.

static float engine_grad(int step, int micro, int u, int rank, size_t j) {
    return (float)((int)(hash3((uint64_t)(step * 16 + micro) * 64 + (uint64_t)u, (uint64_t)rank, j) % 17) - 8) / 64.0f;
}

static void test_engine(const ProcessGroup* pg, int use_nccl, int reduce_fp32, int sync_every, cudaStream_t compute) {
    const int W = pg->shard_size;
    const int n_units = 4;
    FlatUnit units[4];
    memset(units, 0, sizeof units);
    flat_unit_add(&units[0], "wte", 37, 16, 1);
    flat_unit_add(&units[0], "wpe", 8, 16, 1);
    flat_unit_add(&units[0], "lnf.w", 1, 16, 0);
    for (int u = 1; u < n_units; u++) {
        flat_unit_add(&units[u], "w", 16, 24, 1);
        flat_unit_add(&units[u], "b", 1, 24 + u, 0);
    }
    size_t max_padded = 0;
    for (int u = 0; u < n_units; u++) {
        flat_unit_finalize(&units[u], W, 64);
        if (units[u].padded > max_padded) max_padded = units[u].padded;
    }
    FsdpConfig fcfg = {1, 1, sync_every, 0, 0.0f, 0};
    const int max_ops = fsdp_max_ops(&fcfg, n_units);

    FsdpBackend cpu_be, gpu_be;
    fsdp_backend_cpu_init(&cpu_be, pg, max_ops);
    CudaBackendConfig bc;
    memset(&bc, 0, sizeof bc);
    bc.use_nccl = use_nccl;
    bc.reduce_fp32 = reduce_fp32;
    bc.max_unit_padded = max_padded;
    bc.seed = kSeed;
    bc.compute = compute;
    // Staging sized per op slot from the engine's own mapping (the root's slots hold the
    // root, larger than any block here): a wrong mapping ends the run with "exceeds op slot".
    size_t op_padded[16];
    if (max_ops > 16) { check(false, "engine op slots", "%d op slots, the test has room for 16", max_ops); return; }
    fsdp_op_padded(&fcfg, units, n_units, op_padded);
    bc.op_padded = op_padded;
    fsdp_backend_cuda_init(&gpu_be, pg, max_ops, &bc);
    Fsdp fc, fg;
    char err[256];
    if (fsdp_init(&fc, pg, &cpu_be, &fcfg, units, n_units, err, sizeof err) ||
        fsdp_init(&fg, pg, &gpu_be, &fcfg, units, n_units, err, sizeof err)) {
        check(false, "engine init", "%s", err);
        return;
    }
    for (int u = 0; u < n_units; u++) {
        size_t begin, end;
        fsdp_owned_range(&fc, u, &begin, &end);
        float* a = fsdp_host_master_shard(&fc, u);
        float* b = fsdp_host_master_shard(&fg, u);
        for (size_t i = begin; i < end; i++) a[i - begin] = b[i - begin] = i < units[u].numel ? 0.5f * hval_f32(700 + u, 0, i) : 0.0f;
    }
    fsdp_upload_state(&fc, 0);
    fsdp_upload_state(&fg, 0);

    size_t param_bad = 0, checked = 0;
    double norm_err = 0.0;
    for (int step = 1; step <= 3; step++) {
        const int micro_steps = 2;
        Fsdp* fs[2] = {&fc, &fg};
        float norms[2];
        std::vector<float> cpu_gathered[4];  // the CPU engine's gathered units at this step
        for (int e = 0; e < 2; e++) {
            Fsdp* f = fs[e];
            const bool gpu = e == 1;
            fsdp_zero_grad(f, micro_steps);
            for (int m = 0; m < micro_steps; m++) {
                for (int u = 0; u < n_units; u++) {
                    void* p = fsdp_forward_pre(f, u);
                    const size_t n = units[u].padded;
                    if (m == 0 && !gpu) cpu_gathered[u].assign((const float*)p, (const float*)p + n);
                    if (m == 0 && gpu) {
                        // The bf16 (stochastic) rounding of the CPU engine's values: within one
                        // bf16 ulp (plus AdamW's fp32 differences from step 2 on).
                        std::vector<bf16> h(n);
                        f->be.copy_to_host(f->be.ctx, h.data(), p, n * sizeof(bf16));
                        for (size_t i = 0; i < n; i++) {
                            const double x = cpu_gathered[u][i], y = bf16_to_float(h[i]);
                            checked++;
                            if (!(fabs(x - y) <= ldexp(fabs(x), -7) + 1e-6)) param_bad++;
                        }
                    }
                    fsdp_forward_post(f, u);
                }
                for (int u = n_units - 1; u >= 0; u--) {
                    fsdp_backward_pre(f, u);
                    void* g = fsdp_grad(f, u);
                    const size_t n = units[u].padded;
                    std::vector<float> gv(n, 0.0f);
                    for (size_t j = 0; j < units[u].numel; j++) gv[j] = engine_grad(step, m, u, pg->rank, j);
                    if (gpu) {
                        std::vector<bf16> gb = to_bf16(gv);
                        f->be.copy_to_device(f->be.ctx, g, gb.data(), n * sizeof(bf16));
                    } else {
                        memcpy(g, gv.data(), n * sizeof(float));
                    }
                    fsdp_backward_post(f, u);
                }
                fsdp_end_micro_step(f);
            }
            fsdp_step_decide(f, 1.0, 1.0f);
            fsdp_optimizer_step(f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
            fsdp_step_stats_fetch(f);
            norms[e] = fsdp_step_stats_wait(f)->norm;
        }
        const double rel = fabs((double)norms[0] - (double)norms[1]) / (fabs((double)norms[0]) + 1e-30);
        if (rel > norm_err || rel != rel) norm_err = rel;
    }
    fsdp_download_state(&fg);
    size_t master_bad = 0, total = 0;
    double max_rel = 0.0;
    for (size_t i = 0; i < fc.total_shard; i++) {
        const double x = fc.host_master[i], y = fg.host_master[i];
        const double err = fabs(x - y);
        total++;
        if (!(err <= 1e-5 * fabs(x) + 1e-6)) master_bad++;
        const double rel = err / (fabs(x) + 1e-30);
        if (rel > max_rel && fabs(x) > 1e-6) max_rel = rel;
    }
    char name[200];
    snprintf(name, sizeof name, "%s %s-reduce S=%d R=%d%s: engine (fsdp.c, 3 steps x 2 micro-steps) vs CPU backend",
             use_nccl ? "nccl" : "staged", reduce_fp32 ? "fp32" : "bf16", pg->shard_size, pg->replicate_size,
             sync_every ? "" : " no-sync");
    const bool ok = param_bad == 0 && norm_err <= 1e-6 && master_bad == 0 && checked > 0;
    if (ok) check(true, name, "gathered params within 1 bf16 ulp, norm rel err %.2g, master max rel err %.2g", norm_err, max_rel);
    else check(false, name, "%zu of %zu gathered params off, norm rel err %.3g, %zu of %zu master values off (max rel %.3g)",
               param_bad, checked, norm_err, master_bad, total, max_rel);
    fsdp_free(&fg);
    fsdp_free(&fc);
    fsdp_backend_cuda_free(&gpu_be);
    fsdp_backend_cpu_free(&cpu_be);
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("ok - cuda backend # skip no GPU\n");
        return 0;
    }
    ProcessGroupOptions opt = {NULL, NULL, 300.0};
    char msg[512];
    if (process_group_init(&g_pg, &argc, &argv, &opt, msg, sizeof msg)) {
        printf("not ok - cuda backend: %s\n", msg);
        return 1;
    }
    CUDA_CHECK(cudaSetDevice(g_pg.local_rank % count));
    // NCCL needs a GPU per rank: decided together (communicator creation is collective).
    int32_t shared = g_pg.local_world > count ? 1 : 0;
    comm_all_reduce_i32(g_pg.world_comm, &shared, 1, COMM_MAX);
    cudaStream_t compute;
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

    // HSDP groups (shard groups of 1 rank, W replicas) when there are several ranks.
    // With 4 or more ranks (an even number), also shard groups of 2 ranks.
    ProcessGroup hsdp[2] = {g_pg, g_pg};
    const int n_hsdp = g_pg.world == 1 ? 0 : (g_pg.world >= 4 && g_pg.world % 2 == 0) ? 2 : 1;
    for (int h = 0; h < n_hsdp; h++) {
        if (process_group_split(&hsdp[h], 1, h + 1, msg, sizeof msg)) {
            printf("not ok - cuda backend: %s\n", msg);
            return 1;
        }
    }

    for (int use_nccl = 1; use_nccl >= 0; use_nccl--) {
        if (use_nccl && shared) {
            if (g_pg.rank == 0) printf("ok - cuda backend nccl # skip %d ranks share a GPU (NCCL refuses that)\n", g_pg.local_world);
            continue;
        }
        for (int reduce_fp32 = 0; reduce_fp32 <= 1; reduce_fp32++) {
            Setup s;
            setup_init(&s, &g_pg, use_nccl, reduce_fp32, compute);
            test_all_gather(&s);
            test_reduce_scatter(&s);
            test_stress(&s, 200);
            if (!reduce_fp32) {
                test_replicas(&s);
                test_memory_and_math(&s);
                test_refresh(&s);
            }
            fsdp_backend_cuda_free(&s.be);
            test_engine(&g_pg, use_nccl, reduce_fp32, 1, compute);
        }
        test_engine(&g_pg, use_nccl, 0, 0, compute);
        for (int h = 0; h < n_hsdp; h++) {
            Setup s;
            setup_init(&s, &hsdp[h], use_nccl, 0, compute);
            test_replicas(&s);
            test_all_gather(&s);
            test_reduce_scatter(&s);
            fsdp_backend_cuda_free(&s.be);
            test_engine(&hsdp[h], use_nccl, 0, 1, compute);
        }
    }
    CUDA_CHECK(cudaStreamDestroy(compute));
    if (g_pg.rank == 0) {
        printf("# cuda backend: %d passed, %d failed (W=%d)\n", n_passed, n_failed, g_pg.world);
        fflush(stdout);
    }
    const int failed = n_failed;
    process_group_finalize(&g_pg);
    return failed ? 1 : 0;
}
