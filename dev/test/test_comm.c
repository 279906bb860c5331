// A battery of checks of comm/comm.h over one transport, run by every rank of a world:
//
//   build/test_comm --transport tcp --rank R --world W --rendezvous file:DIR --run-id ID [--timeout S]
//   mpirun -np W build/test_comm --transport mpi
//
// Each check compares what the collectives produce with a direct computation (every rank
// can compute every other rank's inputs). The ranks agree on each verdict: rank 0 prints
// "ok - ..." when every rank passed; a rank that failed prints "not ok - ...: rank R: why".
// Options for dev/test/test_comm.sh: --big (64 MiB collectives, with their throughput),
// --quick (a few checks only), --spin S (all-gathers in a loop for S seconds, for killing a
// rank mid-run), --stall-rank R --stall S (rank R sleeps S seconds before a barrier),
// --mismatch (rank 1 issues a different size), --free-port (print a free TCP port, exit),
// --label NAME (instead of "comm tcp W=3" in the check names), --bench (64 MiB timings),
// --minimal (the rendezvous and one all_reduce: for many ranks), --huge (> 2 GiB; by hand),
// --mesh (process_group_split: every tp x shard layout of the world, and its refusals).
#include <arpa/inet.h>
#include <math.h>
#ifndef FSDP_NO_MPI
#include <mpi.h>
#endif
#include <signal.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/process_group.h"

typedef struct {
    CommWorld* cw;
    Comm* world;
    int rank, size;
    char prefix[128];   // "comm tcp W=3", or --label
    char why[512];      // this rank's reason for the check in progress failing ("" = fine)
    int failures;
} T;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

// Records the first failure of the check in progress.
static void fail(T* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(T* t, const char* fmt, ...) {
    if (t->why[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->why, sizeof(t->why), fmt, ap);
    va_end(ap);
}

// Ends a check: the ranks agree (MIN of "passed") so that rank 0 reports ok only for all.
static void verdict(T* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(T* t, const char* fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    int32_t passed = t->why[0] == 0;
    comm_all_reduce_i32(t->world, &passed, 1, COMM_MIN);
    if (t->why[0]) printf("not ok - %s: %s: rank %d: %s\n", t->prefix, name, t->rank, t->why);
    else if (passed && t->rank == 0) printf("ok - %s: %s\n", t->prefix, name);
    if (!passed) t->failures++;
    t->why[0] = 0;
    fflush(stdout);
}

// Inputs every rank can recompute for every other rank.
static unsigned char byte_of(int r, size_t i) { return (unsigned char)(r * 131 + i * 7 + 1); }
// Multiples of 1/2 below 512: sums of a few are exact in any order.
static float exact_f32(int r, size_t i) { return (float)(((size_t)(r + 1) * 31 + i * 7) % 1024) * 0.5f; }
static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static float random_f32(int r, size_t i) { return (float)((double)(splitmix(((uint64_t)r << 40) ^ i) >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }

static void* xmalloc(size_t n) {
    void* p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_comm: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill_shard(unsigned char* s, int r, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) s[i] = byte_of(r, i);
}

static void check_gathered(T* t, const unsigned char* full, size_t bytes, int p, const int* who, const char* what) {
    for (int g = 0; g < p; g++)
        for (size_t i = 0; i < bytes; i++)
            if (full[(size_t)g * bytes + i] != byte_of(who ? who[g] : g, i)) {
                fail(t, "%s of %zu bytes: slot %d byte %zu is %u, expected %u", what, bytes, g, i,
                     full[(size_t)g * bytes + i], byte_of(who ? who[g] : g, i));
                return;
            }
}

static void test_world(T* t, int expect_rank, int expect_size, const char* transport) {
    int lr, ls;
    comm_local(t->cw, &lr, &ls);
    if (strcmp(comm_transport(t->cw), transport) != 0) fail(t, "transport is %s", comm_transport(t->cw));
    if (expect_rank >= 0 && (t->rank != expect_rank || t->size != expect_size))
        fail(t, "rank %d of %d, expected %d of %d", t->rank, t->size, expect_rank, expect_size);
    // Every rank of these tests runs on this host.
    if (lr != t->rank || ls != t->size) fail(t, "local rank %d of %d, expected %d of %d", lr, ls, t->rank, t->size);
    verdict(t, "world: rank, size, local rank and size");
}

static void test_all_gather(T* t) {
    const size_t sizes[] = {0, 1, 3, 7, 1000, 65537, (1 << 20) + 13};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t b = sizes[k];
        unsigned char* shard = (unsigned char*)xmalloc(b);
        unsigned char* full = (unsigned char*)xmalloc(b * (size_t)t->size);
        fill_shard(shard, t->rank, b);
        memset(full, 0xEE, b * (size_t)t->size);
        comm_wait(t->world, comm_all_gather_start(t->world, shard, full, b));
        check_gathered(t, full, b, t->size, NULL, "all_gather");
        // In place: the shard already sits in its slot.
        memset(full, 0xEE, b * (size_t)t->size);
        fill_shard(full + (size_t)t->rank * b, t->rank, b);
        comm_wait(t->world, comm_all_gather_start(t->world, full + (size_t)t->rank * b, full, b));
        check_gathered(t, full, b, t->size, NULL, "in-place all_gather");
        free(shard);
        free(full);
    }
    verdict(t, "all_gather of 0, 1, 3, 7, 1000, 65537, 1 MiB + 13 bytes per rank (also in place)");
}

static void fill_full_exact(float* full, int r, int p, size_t n) {
    for (size_t i = 0; i < (size_t)p * n; i++) full[i] = exact_f32(r, i);
}

// shard: this rank's (group rank me's) part of the reduce-scatter over a group of p ranks
// whose member g is world rank who[g] (who NULL: the world).
static void check_reduce_scatter_in(T* t, const float* shard, size_t n, int p, int me, const int* who) {
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int g = 0; g < p; g++) want += exact_f32(who ? who[g] : g, (size_t)me * n + i);
        if (shard[i] != want) {
            fail(t, "reduce_scatter of %zu per rank: element %zu is %g, expected %g", n, i, shard[i], want);
            return;
        }
    }
}

static void check_reduce_scatter_exact(T* t, const float* shard, size_t n) {
    check_reduce_scatter_in(t, shard, n, t->size, t->rank, NULL);
}

static void test_reduce_scatter(T* t) {
    const size_t sizes[] = {0, 1, 5, 1023, 100003};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        float* full = (float*)xmalloc((size_t)t->size * n * sizeof(float));
        float* shard = (float*)xmalloc(n * sizeof(float));
        fill_full_exact(full, t->rank, t->size, n);
        for (size_t i = 0; i < n; i++) shard[i] = -1;
        comm_wait(t->world, comm_reduce_scatter_f32_start(t->world, full, shard, n));
        check_reduce_scatter_exact(t, shard, n);
        for (size_t i = 0; i < (size_t)t->size * n; i++)
            if (full[i] != exact_f32(t->rank, i)) {
                fail(t, "reduce_scatter modified its input at %zu", i);
                break;
            }
        free(full);
        free(shard);
    }
    verdict(t, "reduce_scatter f32 sum of 0, 1, 5, 1023, 100003 per rank");
}

// Random inputs: the result against a float64 sum (tolerance), and bitwise the same twice.
static void test_reduce_scatter_determinism(T* t) {
    size_t n = 300007;
    float* full = (float*)xmalloc((size_t)t->size * n * sizeof(float));
    float* a = (float*)xmalloc(n * sizeof(float));
    float* b = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < (size_t)t->size * n; i++) full[i] = random_f32(t->rank, i);
    comm_wait(t->world, comm_reduce_scatter_f32_start(t->world, full, a, n));
    comm_wait(t->world, comm_reduce_scatter_f32_start(t->world, full, b, n));
    if (memcmp(a, b, n * sizeof(float)) != 0) fail(t, "two reduce_scatters of the same input differ");
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < t->size; r++) want += random_f32(r, (size_t)t->rank * n + i);
        if (fabs(a[i] - want) > 1e-5 * t->size) {
            fail(t, "element %zu is %.9g, the float64 sum %.9g", i, a[i], want);
            break;
        }
    }
    free(full);
    free(a);
    free(b);
    verdict(t, "reduce_scatter of random floats: accurate, and bitwise the same twice");
}

// Beyond 32-bit sizes (by hand only: ~7 GiB of memory at W = 2): an all-gather whose full
// buffer passes 2 GiB, and a broadcast of one message larger than 2 GiB.
static void test_huge(T* t) {
    size_t b = ((size_t)1 << 30) + 4099;
    unsigned char* shard = (unsigned char*)xmalloc(b);
    unsigned char* full = (unsigned char*)xmalloc(b * (size_t)t->size);
    fill_shard(shard, t->rank, b);
    double t0 = now_s();
    comm_wait(t->world, comm_all_gather_start(t->world, shard, full, b));
    double dt = now_s() - t0;
    check_gathered(t, full, b, t->size, NULL, "all_gather");
    free(shard);
    verdict(t, "all_gather of 1 GiB + 4099 bytes per rank (%.1f s)", dt);
    size_t bb = b * (size_t)t->size;
    if (t->rank != 0) memset(full, 0, bb);
    else for (size_t i = 0; i < bb; i++) full[i] = (unsigned char)(i * 2654435761u >> 24);
    t0 = now_s();
    comm_broadcast(t->world, full, bb, 0);
    dt = now_s() - t0;
    for (size_t i = 0; i < bb; i++)
        if (full[i] != (unsigned char)(i * 2654435761u >> 24)) { fail(t, "broadcast: byte %zu wrong", i); break; }
    free(full);
    verdict(t, "broadcast of %.2f GiB (%.1f s)", (double)bb / (1 << 30), dt);
}

static void test_big(T* t) {
    size_t total = (size_t)64 << 20;
    size_t b = total / (size_t)t->size + 4099;  // > 64 MiB in all, and no nice multiple
    unsigned char* shard = (unsigned char*)xmalloc(b);
    unsigned char* full = (unsigned char*)xmalloc(b * (size_t)t->size);
    fill_shard(shard, t->rank, b);
    memset(full, 0, b * (size_t)t->size);  // timed: not the page faults of a fresh buffer
    comm_barrier(t->world);
    double t0 = now_s();
    comm_wait(t->world, comm_all_gather_start(t->world, shard, full, b));
    double dt = now_s() - t0;
    check_gathered(t, full, b, t->size, NULL, "all_gather");
    free(shard);
    free(full);
    verdict(t, "all_gather of %.1f MiB (%.3f s, %.2f GB/s of the gathered buffer)",
            (double)(b * (size_t)t->size) / (1 << 20), dt, (double)(b * (size_t)t->size) / dt / 1e9);

    size_t n = total / 4 / (size_t)t->size + 1001;
    float* fullf = (float*)xmalloc((size_t)t->size * n * sizeof(float));
    float* shardf = (float*)xmalloc(n * sizeof(float));
    fill_full_exact(fullf, t->rank, t->size, n);
    comm_wait(t->world, comm_reduce_scatter_f32_start(t->world, fullf, shardf, n));  // warms scratch
    comm_barrier(t->world);
    t0 = now_s();
    comm_wait(t->world, comm_reduce_scatter_f32_start(t->world, fullf, shardf, n));
    dt = now_s() - t0;
    check_reduce_scatter_exact(t, shardf, n);
    free(fullf);
    free(shardf);
    verdict(t, "reduce_scatter of %.1f MiB (%.3f s, %.2f GB/s of the input buffer)",
            (double)((size_t)t->size * n * 4) / (1 << 20), dt, (double)((size_t)t->size * n * 4) / dt / 1e9);
}

// Several operations in flight at once, waited for out of order, with computing in between.
static void test_overlap(T* t) {
    int p = t->size;
    size_t ag_b[3] = {1000, 1 << 20, 3};
    size_t rs_n[3] = {5000, 77777, 1};
    unsigned char *ag_s[3], *ag_f[3];
    float *rs_f[3], *rs_s[3];
    CommTicket tk[6];
    for (int k = 0; k < 3; k++) {
        ag_s[k] = (unsigned char*)xmalloc(ag_b[k]);
        ag_f[k] = (unsigned char*)xmalloc(ag_b[k] * (size_t)p);
        fill_shard(ag_s[k], t->rank, ag_b[k]);
        rs_f[k] = (float*)xmalloc((size_t)p * rs_n[k] * sizeof(float));
        rs_s[k] = (float*)xmalloc(rs_n[k] * sizeof(float));
        fill_full_exact(rs_f[k], t->rank, p, rs_n[k]);
    }
    for (int k = 0; k < 3; k++) {
        tk[2 * k] = comm_all_gather_start(t->world, ag_s[k], ag_f[k], ag_b[k]);
        tk[2 * k + 1] = comm_reduce_scatter_f32_start(t->world, rs_f[k], rs_s[k], rs_n[k]);
    }
    volatile double acc = 0;  // the caller computes while the operations progress
    for (int i = 0; i < 2000000; i++) acc += sqrt((double)i);
    const int order[6] = {5, 2, 0, 4, 3, 1};
    for (int k = 0; k < 6; k++) comm_wait(t->world, tk[order[k]]);
    comm_wait(t->world, tk[0]);  // waiting again is harmless
    for (int k = 0; k < 3; k++) {
        check_gathered(t, ag_f[k], ag_b[k], p, NULL, "overlapped all_gather");
        check_reduce_scatter_exact(t, rs_s[k], rs_n[k]);
        free(ag_s[k]);
        free(ag_f[k]);
        free(rs_f[k]);
        free(rs_s[k]);
    }
    verdict(t, "6 non-blocking all_gathers/reduce_scatters in flight, waited out of order");
}

static double f64_of(int r, size_t i) { return (double)((r * 7919 + (int)(i % 1000) * 31) % 1000) * 0.25 - 100; }
static int32_t i32_of(int r, size_t i) { return (r * 7919 + (int32_t)(i % 100000) * 31) % 1000 - 500; }

static void test_all_reduce(T* t) {
    const size_t sizes[] = {1, 7, 1000, 100003};  // the last takes the ring path
    const CommOp ops[3] = {COMM_SUM, COMM_MAX, COMM_MIN};
    const char* op_names[3] = {"sum", "max", "min"};
    for (size_t k = 0; k < 4; k++) {
        size_t n = sizes[k];
        double* d = (double*)xmalloc(n * sizeof(double));
        int32_t* x = (int32_t*)xmalloc(n * sizeof(int32_t));
        float* f = (float*)xmalloc(n * sizeof(float));
        for (int o = 0; o < 3; o++) {
            for (size_t i = 0; i < n; i++) d[i] = f64_of(t->rank, i), x[i] = i32_of(t->rank, i), f[i] = exact_f32(t->rank, i);
            comm_all_reduce_f64(t->world, d, n, ops[o]);
            comm_all_reduce_i32(t->world, x, n, ops[o]);
            comm_all_reduce_f32(t->world, f, n, ops[o]);
            for (size_t i = 0; i < n; i++) {
                double wd = f64_of(0, i);
                int32_t wx = i32_of(0, i);
                float wf = exact_f32(0, i);
                for (int r = 1; r < t->size; r++) {
                    double vd = f64_of(r, i);
                    int32_t vx = i32_of(r, i);
                    float vf = exact_f32(r, i);
                    wd = ops[o] == COMM_SUM ? wd + vd : ops[o] == COMM_MAX ? fmax(wd, vd) : fmin(wd, vd);
                    wx = ops[o] == COMM_SUM ? wx + vx : ops[o] == COMM_MAX ? (vx > wx ? vx : wx) : (vx < wx ? vx : wx);
                    wf = ops[o] == COMM_SUM ? wf + vf : ops[o] == COMM_MAX ? fmaxf(wf, vf) : fminf(wf, vf);
                }
                if (d[i] != wd) { fail(t, "f64 %s of %zu: element %zu is %g, expected %g", op_names[o], n, i, d[i], wd); break; }
                if (x[i] != wx) { fail(t, "i32 %s of %zu: element %zu is %d, expected %d", op_names[o], n, i, x[i], wx); break; }
                if (f[i] != wf) { fail(t, "f32 %s of %zu: element %zu is %g, expected %g", op_names[o], n, i, f[i], wf); break; }
            }
        }
        for (size_t i = 0; i < n; i++) f[i] = exact_f32(t->rank, i);
        comm_all_reduce_f32_sum(t->world, f, n);
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < t->size; r++) want += exact_f32(r, i);
            if (f[i] != want) { fail(t, "f32 sum of %zu: element %zu is %g, expected %g", n, i, f[i], want); break; }
        }
        free(d);
        free(x);
        free(f);
    }
    verdict(t, "all_reduce f64/i32/f32 sum/max/min (and f32 sum by comm_all_reduce_f32_sum) of 1, 7, 1000, 100003 elements");

    // Random floats: every rank must end with the same bits (small and ring paths).
    const size_t rn[2] = {100, 200003};
    for (int k = 0; k < 2; k++) {
        size_t n = rn[k];
        float* f = (float*)xmalloc(n * sizeof(float));
        float* all = (float*)xmalloc(n * sizeof(float) * (size_t)t->size);
        for (size_t i = 0; i < n; i++) f[i] = random_f32(t->rank, i);
        comm_all_reduce_f32_sum(t->world, f, n);
        comm_wait(t->world, comm_all_gather_start(t->world, f, all, n * sizeof(float)));
        for (int r = 0; r < t->size; r++)
            if (memcmp(all + (size_t)r * n, f, n * sizeof(float)) != 0) {
                fail(t, "all_reduce of %zu random floats: rank %d's result differs from this rank's", n, r);
                break;
            }
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < t->size; r++) want += random_f32(r, i);
            if (fabs(f[i] - want) > 1e-5 * t->size) { fail(t, "element %zu is %.9g, the float64 sum %.9g", i, f[i], want); break; }
        }
        free(f);
        free(all);
    }
    verdict(t, "all_reduce of random floats: accurate and bitwise identical on every rank");
}

static void test_broadcast(T* t) {
    const size_t sizes[] = {0, 13, 100000, (3 << 20) + 5};
    int root = t->size - 1;
    for (size_t k = 0; k < 4; k++) {
        size_t b = sizes[k];
        unsigned char* buf = (unsigned char*)xmalloc(b);
        if (t->rank == root) fill_shard(buf, 77, b);
        else memset(buf, 0xEE, b);
        comm_broadcast(t->world, buf, b, root);
        for (size_t i = 0; i < b; i++)
            if (buf[i] != byte_of(77, i)) { fail(t, "broadcast of %zu bytes: byte %zu wrong", b, i); break; }
        free(buf);
    }
    verdict(t, "broadcast of 0, 13, 100000, 3 MiB + 5 bytes from rank %d", root);
}

static void test_gather(T* t) {
    int p = t->size, root = 1 % p;
    size_t b = 17;
    unsigned char* send = (unsigned char*)xmalloc(b);
    unsigned char* recv = (unsigned char*)xmalloc(b * (size_t)p);
    fill_shard(send, t->rank, b);
    memset(recv, 0xEE, b * (size_t)p);
    comm_gather(t->world, send, b, t->rank == root ? recv : NULL, root);
    if (t->rank == root) check_gathered(t, recv, b, p, NULL, "gather");
    free(send);
    free(recv);
    verdict(t, "gather of 17 bytes per rank to rank %d", root);

    // gatherv: rank r sends r * 1000 + 3 bytes; the root learns the sizes with a gather first.
    root = p - 1;
    size_t mine = (size_t)t->rank * 1000 + 3;
    send = (unsigned char*)xmalloc(mine);
    fill_shard(send, t->rank, mine);
    size_t* counts = (size_t*)xmalloc((size_t)p * sizeof(size_t));
    comm_gather(t->world, &mine, sizeof(mine), counts, root);
    unsigned char* all = NULL;
    if (t->rank == root) {
        size_t total = 0;
        for (int r = 0; r < p; r++) {
            if (counts[r] != (size_t)r * 1000 + 3) fail(t, "gathered count %d is %zu", r, counts[r]);
            total += counts[r];
        }
        all = (unsigned char*)xmalloc(total);
    }
    comm_gatherv(t->world, send, mine, all, counts, root);
    if (t->rank == root) {
        size_t at = 0;
        for (int r = 0; r < p && !t->why[0]; r++) {
            for (size_t i = 0; i < counts[r]; i++)
                if (all[at + i] != byte_of(r, i)) { fail(t, "gatherv: rank %d's byte %zu wrong", r, i); break; }
            at += counts[r];
        }
    }
    free(send);
    free(counts);
    free(all);
    verdict(t, "gatherv of r * 1000 + 3 bytes from rank r to rank %d", root);
}

// HSDP-like groups (color = rank / 2), their transpose, and a group in reverse rank order, with
// operations on them and on the world interleaved and in flight together.
static void test_split(T* t) {
    int p = t->size, me = t->rank;
    Comm* shard = comm_split(t->world, me / 2, me);
    Comm* repl = comm_split(t->world, me % 2, me);
    Comm* rev = comm_split(t->world, 0, -me);
    int shard_size = p - me / 2 * 2 < 2 ? 1 : 2;
    int repl_size = (p - me % 2 + 1) / 2;
    if (comm_size(shard) != shard_size || comm_rank(shard) != me % 2)
        fail(t, "shard group: rank %d of %d, expected %d of %d", comm_rank(shard), comm_size(shard), me % 2, shard_size);
    if (comm_size(repl) != repl_size || comm_rank(repl) != me / 2)
        fail(t, "replica group: rank %d of %d, expected %d of %d", comm_rank(repl), comm_size(repl), me / 2, repl_size);
    if (comm_size(rev) != p || comm_rank(rev) != p - 1 - me)
        fail(t, "reversed group: rank %d of %d, expected %d of %d", comm_rank(rev), comm_size(rev), p - 1 - me, p);

    size_t b = 4099, n = 3001;
    unsigned char* s = (unsigned char*)xmalloc(b);
    fill_shard(s, me, b);
    unsigned char* f_shard = (unsigned char*)xmalloc(b * 2);
    unsigned char* f_repl = (unsigned char*)xmalloc(b * (size_t)repl_size);
    unsigned char* f_rev = (unsigned char*)xmalloc(b * (size_t)p);
    float* rs_full = (float*)xmalloc((size_t)p * n * sizeof(float));
    float* rs_out = (float*)xmalloc(n * sizeof(float));
    fill_full_exact(rs_full, me, p, n);
    CommTicket t1 = comm_all_gather_start(shard, s, f_shard, b);
    CommTicket t2 = comm_reduce_scatter_f32_start(t->world, rs_full, rs_out, n);
    CommTicket t3 = comm_all_gather_start(repl, s, f_repl, b);
    double sum = me;
    comm_all_reduce_f64(repl, &sum, 1, COMM_SUM);   // blocking, behind the three in flight
    CommTicket t4 = comm_all_gather_start(rev, s, f_rev, b);
    int32_t mx = me;
    comm_all_reduce_i32(shard, &mx, 1, COMM_MAX);
    comm_wait(repl, t3);
    comm_wait(rev, t4);
    comm_wait(t->world, t2);
    comm_wait(shard, t1);
    int who[64];
    for (int g = 0; g < shard_size; g++) who[g] = me / 2 * 2 + g;
    check_gathered(t, f_shard, b, shard_size, who, "shard-group all_gather");
    for (int g = 0; g < repl_size; g++) who[g] = me % 2 + 2 * g;
    check_gathered(t, f_repl, b, repl_size, who, "replica-group all_gather");
    for (int g = 0; g < p; g++) who[g] = p - 1 - g;
    check_gathered(t, f_rev, b, p, who, "reversed-group all_gather");
    check_reduce_scatter_exact(t, rs_out, n);
    double want_sum = 0;
    for (int g = 0; g < repl_size; g++) want_sum += me % 2 + 2 * g;
    if (sum != want_sum) fail(t, "replica-group sum %g, expected %g", sum, want_sum);
    if (mx != me / 2 * 2 + shard_size - 1) fail(t, "shard-group max %d, expected %d", mx, me / 2 * 2 + shard_size - 1);
    free(s);
    free(f_shard);
    free(f_repl);
    free(f_rev);
    free(rs_full);
    free(rs_out);
    verdict(t, "split: groups of rank / 2, rank %% 2 and reversed keys; operations on them and the world interleaved");
}

// --- the mesh (process_group_split) ----------------------------------------------------
// Every expectation below is the formula rank = (replicate_rank * S + shard_rank) * tp + tp_rank
// worked out directly, never read back from the ProcessGroup under test.

enum { MESH_MAX = 64 };

// c must be a group of `size` ranks where this rank is `rank` and member g is world rank
// members[g]: checked by gathering every member's world rank over c itself.
static void check_group(T* t, const char* what, Comm* c, int size, int rank, const int* members) {
    if (!c) { fail(t, "%s is NULL", what); return; }
    if (comm_size(c) != size || comm_rank(c) != rank) {
        fail(t, "%s: rank %d of %d, expected %d of %d", what, comm_rank(c), comm_size(c), rank, size);
        return;
    }
    int32_t me = t->rank, all[MESH_MAX];
    comm_wait(c, comm_all_gather_start(c, &me, all, sizeof(me)));
    for (int g = 0; g < size; g++)
        if (all[g] != members[g]) { fail(t, "%s: member %d is world rank %d, expected %d", what, g, all[g], members[g]); return; }
}

// comm_all_reduce_f32 sum, max and min over a group with members who[0..p-1]: sums of the
// exact values (multiples of 1/2) and extremes of random ones are exact in any order. The
// sizes take the small path and the ring.
static void check_all_reduce_f32_in(T* t, const char* what, Comm* c, int p, const int* who) {
    const size_t sizes[3] = {1, 1000, 20001};
    const CommOp ops[3] = {COMM_SUM, COMM_MAX, COMM_MIN};
    const char* op_names[3] = {"sum", "max", "min"};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        float* x = (float*)xmalloc(n * sizeof(float));
        for (int o = 0; o < 3; o++) {
            for (size_t i = 0; i < n; i++) x[i] = o == 0 ? exact_f32(t->rank, i) : random_f32(t->rank, i);
            comm_all_reduce_f32(c, x, n, ops[o]);
            for (size_t i = 0; i < n; i++) {
                float want = o == 0 ? exact_f32(who[0], i) : random_f32(who[0], i);
                for (int g = 1; g < p; g++) {
                    float v = o == 0 ? exact_f32(who[g], i) : random_f32(who[g], i);
                    want = o == 0 ? want + v : o == 1 ? fmaxf(want, v) : fminf(want, v);
                }
                if (x[i] != want) {
                    fail(t, "f32 %s of %zu over the %s: element %zu is %.9g, expected %.9g", op_names[o], n, what, i, x[i], want);
                    break;
                }
            }
        }
        free(x);
    }
}

// The FSDP engine's pattern under tensor parallelism: the shard group's next gather (and a
// gradient reduce-scatter) in flight while blocking collectives run on the TP group, then
// the waits. Every result must be exact on every rank.
static void check_interleaving(T* t, const ProcessGroup* pg, const int* shard_who, const int* tp_who) {
    int S = pg->shard_size, tp = pg->tp_size;
    size_t b = (1 << 18) + 13, n = 30011, tb = 4099, tn = 3001, an = 20001;
    unsigned char* s = (unsigned char*)xmalloc(b);
    unsigned char* sf = (unsigned char*)xmalloc(b * (size_t)S);
    float* rs_full = (float*)xmalloc((size_t)S * n * sizeof(float));
    float* rs_out = (float*)xmalloc(n * sizeof(float));
    unsigned char* ts = (unsigned char*)xmalloc(tb);
    unsigned char* tf = (unsigned char*)xmalloc(tb * (size_t)tp);
    float* trs_full = (float*)xmalloc((size_t)tp * tn * sizeof(float));
    float* trs_out = (float*)xmalloc(tn * sizeof(float));
    float* ar = (float*)xmalloc(an * sizeof(float));
    fill_shard(s, t->rank, b);
    fill_full_exact(rs_full, t->rank, S, n);
    fill_shard(ts, t->rank, tb);
    fill_full_exact(trs_full, t->rank, tp, tn);
    for (size_t i = 0; i < an; i++) ar[i] = exact_f32(t->rank, i);
    memset(sf, 0xEE, b * (size_t)S);

    CommTicket gather = comm_all_gather_start(pg->shard_comm, s, sf, b);
    CommTicket scatter = comm_reduce_scatter_f32_start(pg->shard_comm, rs_full, rs_out, n);
    comm_wait(pg->tp_comm, comm_all_gather_start(pg->tp_comm, ts, tf, tb));
    comm_wait(pg->tp_comm, comm_reduce_scatter_f32_start(pg->tp_comm, trs_full, trs_out, tn));
    comm_all_reduce_f32(pg->tp_comm, ar, an, COMM_SUM);
    float mx = (float)t->rank;
    comm_all_reduce_f32(pg->tp_comm, &mx, 1, COMM_MAX);
    comm_wait(pg->shard_comm, scatter);
    comm_wait(pg->shard_comm, gather);

    check_gathered(t, tf, tb, tp, tp_who, "tp-group all_gather behind the shard group's");
    check_reduce_scatter_in(t, trs_out, tn, tp, pg->tp_rank, tp_who);
    for (size_t i = 0; i < an; i++) {
        float want = 0;
        for (int g = 0; g < tp; g++) want += exact_f32(tp_who[g], i);
        if (ar[i] != want) { fail(t, "tp-group f32 sum in flight: element %zu is %g, expected %g", i, ar[i], want); break; }
    }
    if (mx != (float)tp_who[tp - 1]) fail(t, "tp-group f32 max of the ranks is %g, expected %d", mx, tp_who[tp - 1]);
    check_gathered(t, sf, b, S, shard_who, "shard-group all_gather across tp-group collectives");
    check_reduce_scatter_in(t, rs_out, n, S, pg->shard_rank, shard_who);
    free(s); free(sf); free(rs_full); free(rs_out); free(ts); free(tf); free(trs_full); free(trs_out); free(ar);
}

static void mesh_case(T* t, CommWorld* cw, int tp, int shard) {
    int W = t->size, dp = W / tp, S = shard ? shard : dp, R = dp / S;
    int tp_rank = t->rank % tp, dp_rank = t->rank / tp, shard_rank = dp_rank % S, repl_rank = dp_rank / S;
    ProcessGroup pg;
    memset(&pg, 0, sizeof(pg));
    process_group_attach(&pg, cw);
    char err[256];
    if (process_group_split(&pg, tp, shard, err, sizeof(err))) {
        fail(t, "refused: %s", err);
    } else {
        if (pg.tp_size != tp || pg.tp_rank != tp_rank || pg.dp_size != dp || pg.dp_rank != dp_rank ||
            pg.shard_size != S || pg.shard_rank != shard_rank || pg.replicate_size != R || pg.replicate_rank != repl_rank)
            fail(t, "tp %d/%d dp %d/%d shard %d/%d replicate %d/%d, expected tp %d/%d dp %d/%d shard %d/%d replicate %d/%d",
                 pg.tp_rank, pg.tp_size, pg.dp_rank, pg.dp_size, pg.shard_rank, pg.shard_size, pg.replicate_rank,
                 pg.replicate_size, tp_rank, tp, dp_rank, dp, shard_rank, S, repl_rank, R);
        int tp_who[MESH_MAX], shard_who[MESH_MAX], repl_who[MESH_MAX], model_who[MESH_MAX];
        for (int g = 0; g < tp; g++) tp_who[g] = dp_rank * tp + g;
        for (int g = 0; g < S; g++) shard_who[g] = (repl_rank * S + g) * tp + tp_rank;
        for (int g = 0; g < R; g++) repl_who[g] = (g * S + shard_rank) * tp + tp_rank;
        for (int g = 0; g < S * tp; g++) model_who[g] = repl_rank * S * tp + g;
        check_group(t, "tp_comm", pg.tp_comm, tp, tp_rank, tp_who);
        check_group(t, "shard_comm", pg.shard_comm, S, shard_rank, shard_who);
        if (R == 1 && pg.replicate_comm) fail(t, "replicate_comm is not NULL with one replica");
        if (R > 1) check_group(t, "replicate_comm", pg.replicate_comm, R, repl_rank, repl_who);
        check_group(t, "model_comm", pg.model_comm, S * tp, shard_rank * tp + tp_rank, model_who);
        // At tp 1 the groups are the very ones of before the mesh: no new shard group without
        // HSDP, and the model group is the shard group.
        if (tp == 1 && R == 1 && pg.shard_comm != pg.world_comm) fail(t, "tp 1 without HSDP: shard_comm is not the world's");
        if (tp == 1 && pg.model_comm != pg.shard_comm) fail(t, "tp 1: model_comm is not shard_comm");
        if (pg.tp_comm == pg.world_comm) fail(t, "tp_comm is the world's comm, not a group of its own");
        if (!t->why[0]) {
            check_all_reduce_f32_in(t, "tp group", pg.tp_comm, tp, tp_who);
            check_all_reduce_f32_in(t, "model group", pg.model_comm, S * tp, model_who);
            check_interleaving(t, &pg, shard_who, tp_who);
        }
    }
    verdict(t, "mesh --tp %d --shard-group-size %d (%d x %d x %d): ranks, group members, f32 all_reduce on tp/model, "
            "shard-group ops in flight across tp ops", tp, shard, R, S, tp);
}

// A refused split: non-zero, the one line expected, and nothing changed (nor communicated).
static void mesh_refusal(T* t, CommWorld* cw, int tp, int shard, const char* want) {
    ProcessGroup pg, before;
    memset(&pg, 0, sizeof(pg));
    process_group_attach(&pg, cw);
    before = pg;
    char err[256] = "";
    int rc = process_group_split(&pg, tp, shard, err, sizeof(err));
    if (rc == 0) fail(t, "--tp %d --shard-group-size %d was accepted", tp, shard);
    else if (strcmp(err, want) != 0) fail(t, "message '%s', expected '%s'", err, want);
    else if (memcmp(&pg, &before, sizeof(pg)) != 0) fail(t, "the refused split changed the process group");
    verdict(t, "mesh refused: --tp %d --shard-group-size %d: '%s'", tp, shard, want);
}

static void test_mesh(T* t, CommWorld* cw) {
    int W = t->size;
    if (W > MESH_MAX) { fail(t, "more than %d ranks", MESH_MAX); verdict(t, "mesh"); return; }
    for (int tp = 1; tp <= W; tp++) {
        if (W % tp) continue;
        for (int shard = 0; shard <= W / tp; shard++)
            if (shard == 0 || (W / tp) % shard == 0) mesh_case(t, cw, tp, shard);
    }
    char want[256];
    mesh_refusal(t, cw, 0, 0, "--tp 0 must be at least 1");
    int bad = 2;
    while (W % bad == 0) bad++;
    snprintf(want, sizeof(want), "--tp %d does not divide the world size %d", bad, W);
    mesh_refusal(t, cw, bad, 0, want);
    snprintf(want, sizeof(want), "--shard-group-size %d does not divide the world size %d", W + 1, W);
    mesh_refusal(t, cw, 1, W + 1, want);  // tp 1: the message of before the mesh
    snprintf(want, sizeof(want), "--shard-group-size -1 does not divide the world size %d", W);
    mesh_refusal(t, cw, 1, -1, want);
    int tp = 2;
    while (tp < W && W % tp) tp++;
    if (tp < W) {
        snprintf(want, sizeof(want), "--shard-group-size %d does not divide the %d data-parallel ranks (world size %d / --tp %d)",
                 W / tp + 1, W / tp, W, tp);
        mesh_refusal(t, cw, tp, W / tp + 1, want);
    }
}

// After a barrier every rank must have entered it: compare entry and exit times (one host:
// CLOCK_MONOTONIC is the same clock in every process).
static void test_barrier(T* t) {
    sleep_s(0.03 * t->rank);
    double entered = now_s();
    comm_barrier(t->world);
    double left = now_s();
    double* all = (double*)xmalloc((size_t)t->size * sizeof(double));
    comm_wait(t->world, comm_all_gather_start(t->world, &entered, all, sizeof(double)));
    for (int r = 0; r < t->size; r++)
        if (all[r] > left) fail(t, "left the barrier %.3f s before rank %d entered it", all[r] - left, r);
    free(all);
    int reps = 200;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) comm_barrier(t->world);
    double us = (now_s() - t0) / reps * 1e6;
    verdict(t, "barrier (then %d more: %.0f us each)", reps, us);
}

static void test_small_latency(T* t) {
    int reps = 500;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) {
        double x = t->rank + i;
        comm_all_reduce_f64(t->world, &x, 1, COMM_SUM);
        double want = (double)t->size * i + (double)t->size * (t->size - 1) / 2;
        if (x != want) { fail(t, "iteration %d: %g, expected %g", i, x, want); break; }
    }
    double us = (now_s() - t0) / reps * 1e6;
    verdict(t, "%d all_reduces of one double (%.0f us each)", reps, us);
}

// Best of reps timed runs of a 64 MiB all-gather and reduce-scatter (buffers warm).
static void bench(T* t, int reps) {
    size_t total = (size_t)64 << 20, b = total / (size_t)t->size, n = b / 4;
    unsigned char* full = (unsigned char*)xmalloc(total);
    unsigned char* shard = (unsigned char*)xmalloc(b);
    memset(full, 1, total);
    memset(shard, 2, b);
    double best_ag = 1e9, best_rs = 1e9;
    for (int i = 0; i <= reps; i++) {  // the first of each is a warm-up
        comm_barrier(t->world);
        double t0 = now_s();
        comm_wait(t->world, comm_all_gather_start(t->world, shard, full, b));
        double ag = now_s() - t0;
        comm_barrier(t->world);
        t0 = now_s();
        comm_wait(t->world, comm_reduce_scatter_f32_start(t->world, (const float*)full, (float*)shard, n));
        double rs = now_s() - t0;
        if (i > 0 && ag < best_ag) best_ag = ag;
        if (i > 0 && rs < best_rs) best_rs = rs;
    }
    if (t->rank == 0)
        printf("# bench %s: 64 MiB all_gather %.1f ms (%.2f GB/s), reduce_scatter %.1f ms (%.2f GB/s); "
               "GB/s = full buffer bytes / time, best of %d\n",
               t->prefix, best_ag * 1e3, (double)total / best_ag / 1e9, best_rs * 1e3, (double)total / best_rs / 1e9,
               reps);
    free(full);
    free(shard);
}

static volatile sig_atomic_t signals_seen;
static void on_signal(int sig) { (void)sig; signals_seen++; }

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr*)&sa, sizeof(sa)) < 0 || getsockname(fd, (struct sockaddr*)&sa, &sl) < 0)
        return -1;
    close(fd);
    return ntohs(sa.sin_port);
}

static void usage(void) {
    fprintf(stderr, "usage: test_comm --transport tcp --rank R --world W --rendezvous file:DIR|tcp://HOST:PORT "
                    "--run-id ID\n"
                    "                 [--timeout S] [--label NAME] [--quick] [--minimal] [--big] [--huge] [--bench]\n"
                    "                 [--spin S] [--stall-rank R --stall S] [--mismatch] [--mesh]\n"
                    "       mpirun -np W test_comm --transport mpi [--quick] [--big] [--huge] [--bench] [--mesh]\n"
                    "       test_comm --free-port\n");
    exit(2);
}

int main(int argc, char** argv) {
    const char *transport = NULL, *rendezvous = NULL, *run_id = NULL, *label = NULL;
    int rank = -1, world = -1, big = 0, huge = 0, bench_reps = 0, minimal = 0, quick = 0, stall_rank = -1, mismatch = 0;
    int mesh = 0;
    double timeout = 30, spin = 0, stall = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--free-port")) { printf("%d\n", free_port()); return 0; }
        else if (!strcmp(a, "--big")) big = 1;
        else if (!strcmp(a, "--huge")) huge = 1;
        else if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--minimal")) minimal = 1;
        else if (!strcmp(a, "--bench")) bench_reps = 5;
        else if (!strcmp(a, "--mismatch")) mismatch = 1;
        else if (!strcmp(a, "--mesh")) mesh = 1;
        else if (!v) usage();
        else if (!strcmp(a, "--transport")) transport = argv[++i];
        else if (!strcmp(a, "--rank")) rank = atoi(argv[++i]);
        else if (!strcmp(a, "--world")) world = atoi(argv[++i]);
        else if (!strcmp(a, "--rendezvous")) rendezvous = argv[++i];
        else if (!strcmp(a, "--run-id")) run_id = argv[++i];
        else if (!strcmp(a, "--timeout")) timeout = atof(argv[++i]);
        else if (!strcmp(a, "--spin")) spin = atof(argv[++i]);
        else if (!strcmp(a, "--stall-rank")) stall_rank = atoi(argv[++i]);
        else if (!strcmp(a, "--stall")) stall = atof(argv[++i]);
        else if (!strcmp(a, "--label")) label = argv[++i];
        else usage();
    }
    if (!transport) usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    // As train_gpt does: SIGUSR1 (Slurm's --signal) only sets a flag, with SA_RESTART. The
    // transport must shrug off the interrupted system calls (the test sends a storm of them).
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    printf("# SIGUSR1 handled by pid %ld\n", (long)getpid());
    char err[1024] = "";
    CommWorld* cw = NULL;
    int is_mpi = !strcmp(transport, "mpi");
    if (is_mpi) {
#ifdef FSDP_NO_MPI
        snprintf(err, sizeof(err), "built without MPI (NO_MPI=1): only the tcp transport");
#else
        MPI_Init(&argc, &argv);
        cw = comm_mpi_init(timeout, err, sizeof(err));
#endif
    } else if (!strcmp(transport, "tcp")) {
        if (rank < 0 || world < 1 || !rendezvous || !run_id) usage();
        cw = comm_tcp_init(rank, world, rendezvous, run_id, timeout, err, sizeof(err));
    } else {
        usage();
    }
    if (!cw) {
        fprintf(stderr, "error: [rank %d] %s\n", rank, err);
        return 1;
    }
    T t;
    memset(&t, 0, sizeof(t));
    t.cw = cw;
    t.world = comm_world(cw);
    t.rank = comm_rank(t.world);
    t.size = comm_size(t.world);
    if (label) snprintf(t.prefix, sizeof(t.prefix), "%s", label);
    else snprintf(t.prefix, sizeof(t.prefix), "comm %s W=%d", transport, t.size);

    if (spin > 0) {
        // For killing a rank mid-run: all-gathers of 4 MiB until time is up.
        size_t b = (size_t)4 << 20;
        unsigned char* s = (unsigned char*)xmalloc(b);
        unsigned char* f = (unsigned char*)xmalloc(b * (size_t)t.size);
        memset(s, t.rank, b);
        printf("# spinning\n");
        double end = now_s() + spin;
        while (now_s() < end) comm_wait(t.world, comm_all_gather_start(t.world, s, f, b));
        comm_finalize(cw);
        return 0;
    }
    if (bench_reps) {
        bench(&t, bench_reps);
        comm_finalize(cw);
        return 0;
    }
    if (stall_rank >= 0) {
        if (t.rank == stall_rank) sleep_s(stall);
        comm_barrier(t.world);
    }
    if (mismatch) {
        // Rank 1 gathers a different size: both sides must say so, not read garbage.
        size_t b = t.rank == 1 ? 200 : 100;
        unsigned char* s = (unsigned char*)xmalloc(b);
        unsigned char* f = (unsigned char*)xmalloc(b * (size_t)t.size);
        memset(s, 1, b);
        comm_wait(t.world, comm_all_gather_start(t.world, s, f, b));
        comm_finalize(cw);
        return 0;
    }

    test_world(&t, is_mpi ? -1 : rank, world, transport);
    if (minimal) {  // many ranks: the rendezvous, and that every rank is there
        int32_t one = 1;
        comm_all_reduce_i32(t.world, &one, 1, COMM_SUM);
        if (one != t.size) fail(&t, "a sum of ones is %d", one);
        verdict(&t, "all_reduce of one int32");
        comm_finalize(cw);
        return t.failures ? 1 : 0;
    }
    if (mesh) {
        test_mesh(&t, cw);
        comm_finalize(cw);
        return t.failures ? 1 : 0;
    }
    test_all_gather(&t);
    test_reduce_scatter(&t);
    test_all_reduce(&t);
    if (!quick) {
        test_reduce_scatter_determinism(&t);
        test_overlap(&t);
        test_broadcast(&t);
        test_gather(&t);
        test_split(&t);
        test_barrier(&t);
        test_small_latency(&t);
    }
    if (big) test_big(&t);
    if (huge) test_huge(&t);
    int failures = t.failures;
    if (signals_seen) printf("# rank %d handled %d signals\n", t.rank, (int)signals_seen);
    comm_finalize(cw);
    return failures ? 1 : 0;
}
