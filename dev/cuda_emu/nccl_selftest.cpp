// Self-test of the emulator's NCCL shim (nccl.cpp), run by dev/test/test_train_emu.sh: forks
// NRANKS processes (one emulated device each) that check what NCCL's documentation promises:
// the collectives' results (in place and not, messages of many chunks, bf16 / fp16 / fp32 /
// int32, sum / avg / max; fp16 against GCC's _Float16, not the cuda_fp16.h shim), argument checks, the non-blocking protocol, a peer's abort and a dead peer
// (ncclRemoteError instead of a hang), a duplicate device, and no /dev/shm segment left over.
// Prints "ok - ..." / "not ok - ..." lines (rank 0's, then any failure of another rank);
// exits 0 when every check passed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

static const int N = 3;
static int g_rank, g_failed;

#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (!(cond)) {                                            \
            g_failed = 1;                                         \
            printf("not ok - nccl shim rank %d: ", g_rank);       \
            printf(__VA_ARGS__);                                  \
            printf(" (%s:%d; last error: %s)\n", __FILE__, __LINE__, ncclGetLastError(NULL)); \
        }                                                         \
    } while (0)

// Polls a non-blocking communicator to a settled state.
static ncclResult_t settle(ncclComm_t c, ncclResult_t r) {
    for (int i = 0; r == ncclInProgress && i < 1000000; i++) {
        ncclResult_t s = ncclSuccess;
        if (ncclCommGetAsyncError(c, &s) != ncclSuccess) return ncclInternalError;
        r = s;
        if (r == ncclInProgress) usleep(100);
    }
    return r;
}

static ncclComm_t make_comm(ncclUniqueId id, int nranks, int rank, int blocking) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, nranks, id, rank, &cfg);
    if (!blocking) {
        CHECK(r == ncclInProgress, "non-blocking init answered %d, not ncclInProgress", (int)r);
        ncclResult_t s = ncclSuccess;
        // Another call before the state is ncclSuccess is misuse.
        CHECK(ncclAllReduce(NULL, NULL, 1, ncclFloat32, ncclSum, c, 0) == ncclInvalidUsage,
              "a collective during ncclInProgress was not refused");
        ncclCommGetAsyncError(c, &s);
        r = settle(c, s);
    }
    CHECK(r == ncclSuccess, "init: %s", ncclGetErrorString(r));
    return c;
}

static float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
// fp16 reference: GCC's _Float16 (conversions correctly rounded, from double too), so that
// rounding the exact sum of two fp16 values once is what NCCL's fp16 addition gives.
static uint16_t h16(double x) {
    const _Float16 h = (_Float16)x;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}
static double f16(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, sizeof h);
    return (double)h;
}
// Rank r's fp16 element j: mostly ordinary values; every 50th near 2^15 (its sum overflows to
// inf), the next subnormal, the next cancelling across ranks.
static uint16_t val16(int r, size_t j) {
    if (j % 50 == 0) return h16(25000.0 + 1000.0 * r);
    if (j % 50 == 1) return h16(3e-6 * (r + 1));
    if (j % 50 == 2) return h16((r == 1 ? -2.0 : 1.0) * (1000.0 + (double)(j % 7)) + 0.25 * r);
    return h16(0.1 * (r + 1) + (double)(j % 37) * 0.37);
}

static void collectives(ncclComm_t c, int me) {
    cudaStream_t s;
    cudaStreamCreate(&s);
    const size_t n = 1000;  // with 256-byte slots: many chunks, a short last one
    // AllGather in place (bf16) and not (int32).
    __nv_bfloat16 *g;
    cudaMalloc(&g, N * n * 2);
    std::vector<__nv_bfloat16> h(N * n);
    for (size_t i = 0; i < n; i++) h[me * n + i] = __float2bfloat16_rn((float)(me * 32 + (int)(i % 32)));
    cudaMemcpy(g + me * n, &h[me * n], n * 2, cudaMemcpyHostToDevice);
    CHECK(settle(c, ncclAllGather(g + me * n, g, n, ncclBfloat16, c, s)) == ncclSuccess, "in-place all-gather");
    cudaStreamSynchronize(s);
    cudaMemcpy(h.data(), g, N * n * 2, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) bad += __bfloat162float(h[r * n + i]) != (float)(r * 32 + (int)(i % 32));
    CHECK(bad == 0, "in-place bf16 all-gather: %d wrong elements", bad);
    int *a, *b;
    cudaMalloc(&a, n * 4);
    cudaMalloc(&b, N * n * 4);
    std::vector<int> hi(N * n);
    for (size_t i = 0; i < n; i++) hi[i] = me * 7 + (int)i;
    cudaMemcpy(a, hi.data(), n * 4, cudaMemcpyHostToDevice);
    CHECK(settle(c, ncclAllGather(a, b, n, ncclInt32, c, s)) == ncclSuccess, "all-gather");
    cudaStreamSynchronize(s);
    cudaMemcpy(hi.data(), b, N * n * 4, cudaMemcpyDeviceToHost);
    bad = 0;
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) bad += hi[r * n + i] != r * 7 + (int)i;
    CHECK(bad == 0, "int32 all-gather: %d wrong elements", bad);

    // ReduceScatter: fp32 sum in place; bf16 sum (rounded after every addition, rank order).
    float* f;
    cudaMalloc(&f, N * n * 4);
    std::vector<float> hf(N * n);
    auto val = [](int r, size_t j) { return 0.1f * (float)(r + 1) + (float)(j % 37) * 0.37f; };
    for (size_t j = 0; j < N * n; j++) hf[j] = val(me, j);
    cudaMemcpy(f, hf.data(), N * n * 4, cudaMemcpyHostToDevice);
    CHECK(settle(c, ncclReduceScatter(f, f + me * n, n, ncclFloat32, ncclSum, c, s)) == ncclSuccess, "in-place reduce-scatter");
    cudaStreamSynchronize(s);
    cudaMemcpy(hf.data(), f + me * n, n * 4, cudaMemcpyDeviceToHost);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float e = val(0, me * n + i);
        for (int r = 1; r < N; r++) e += val(r, me * n + i);
        bad += hf[i] != e;
    }
    CHECK(bad == 0, "in-place fp32 reduce-scatter: %d wrong elements", bad);
    __nv_bfloat16* gs;
    cudaMalloc(&gs, n * 2);
    for (size_t j = 0; j < N * n; j++) h[j] = __float2bfloat16_rn(val(me, j));
    cudaMemcpy(g, h.data(), N * n * 2, cudaMemcpyHostToDevice);
    CHECK(settle(c, ncclReduceScatter(g, gs, n, ncclBfloat16, ncclSum, c, s)) == ncclSuccess, "bf16 reduce-scatter");
    cudaStreamSynchronize(s);
    cudaMemcpy(h.data(), gs, n * 2, cudaMemcpyDeviceToHost);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float e = bf(val(0, me * n + i));
        for (int r = 1; r < N; r++) e = bf(e + bf(val(r, me * n + i)));
        bad += __bfloat162float(h[i]) != e;
    }
    CHECK(bad == 0, "bf16 reduce-scatter: %d wrong elements", bad);

    // fp16: ReduceScatter sum; AllReduce avg in place (each input times the fp32 1/nranks,
    // rounded to fp16, as for bf16); Reduce max to rank 2. Rounded to fp16 after every
    // operation, in rank order.
    {
        __half *x, *y;
        cudaMalloc(&x, N * n * 2);
        cudaMalloc(&y, N * n * 2);
        std::vector<uint16_t> hx(N * n);
        for (size_t j = 0; j < N * n; j++) hx[j] = val16(me, j);
        cudaMemcpy(x, hx.data(), N * n * 2, cudaMemcpyHostToDevice);
        CHECK(settle(c, ncclReduceScatter(x, y, n, ncclFloat16, ncclSum, c, s)) == ncclSuccess, "fp16 reduce-scatter");
        cudaStreamSynchronize(s);
        cudaMemcpy(hx.data(), y, n * 2, cudaMemcpyDeviceToHost);
        bad = 0;
        int infs = 0, subnormals = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t e = val16(0, me * n + i);
            for (int r = 1; r < N; r++) e = h16(f16(e) + f16(val16(r, me * n + i)));
            bad += hx[i] != e;
            infs += e == 0x7c00u;
            subnormals += e > 0 && e < 0x0400u;
        }
        CHECK(bad == 0 && infs > 0 && subnormals > 0, "fp16 reduce-scatter sum: %d wrong elements (%d inf, %d subnormal)",
              bad, infs, subnormals);
        for (size_t j = 0; j < n; j++) hx[j] = val16(me, j + 1);
        cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice);
        CHECK(settle(c, ncclAllReduce(x, x, n, ncclHalf, ncclAvg, c, s)) == ncclSuccess, "fp16 all-reduce avg");
        cudaStreamSynchronize(s);
        cudaMemcpy(hx.data(), x, n * 2, cudaMemcpyDeviceToHost);
        bad = 0;
        const float scale = (float)(1.0 / N);
        auto pre = [&](int r, size_t j) { return f16(h16((float)f16(val16(r, j + 1)) * scale)); };
        for (size_t i = 0; i < n; i++) {
            uint16_t e = h16(pre(0, i));
            for (int r = 1; r < N; r++) e = h16(f16(e) + pre(r, i));
            bad += hx[i] != e;
        }
        CHECK(bad == 0, "fp16 all-reduce avg: %d wrong elements", bad);
        for (size_t j = 0; j < n; j++) hx[j] = val16(me, j + 2);
        cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice);
        CHECK(settle(c, ncclReduce(x, y, n, ncclFloat16, ncclMax, 2, c, s)) == ncclSuccess, "fp16 reduce max");
        cudaStreamSynchronize(s);
        if (me == 2) {
            cudaMemcpy(hx.data(), y, n * 2, cudaMemcpyDeviceToHost);
            bad = 0;
            for (size_t i = 0; i < n; i++) {
                double e = f16(val16(0, i + 2));
                for (int r = 1; r < N; r++) e = std::max(e, f16(val16(r, i + 2)));
                bad += hx[i] != h16(e);
            }
            CHECK(bad == 0, "fp16 reduce max: %d wrong elements", bad);
        }
        cudaFree(x);
        cudaFree(y);
    }

    // AllReduce: fp32 avg in place, int32 max.
    for (size_t i = 0; i < n; i++) hf[i] = (float)(me * 2 + 1) * (float)i;
    cudaMemcpy(f, hf.data(), n * 4, cudaMemcpyHostToDevice);
    CHECK(settle(c, ncclAllReduce(f, f, n, ncclFloat32, ncclAvg, c, s)) == ncclSuccess, "all-reduce avg");
    cudaStreamSynchronize(s);
    cudaMemcpy(hf.data(), f, n * 4, cudaMemcpyDeviceToHost);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += fabsf(hf[i] - (float)N * (float)i) > 1e-3f * (float)i;
    CHECK(bad == 0, "fp32 all-reduce avg: %d wrong elements", bad);
    for (size_t i = 0; i < n; i++) hi[i] = (int)((i + (size_t)me * 333) % n);
    cudaMemcpy(a, hi.data(), n * 4, cudaMemcpyHostToDevice);
    CHECK(settle(c, ncclAllReduce(a, b, n, ncclInt32, ncclMax, c, s)) == ncclSuccess, "all-reduce max");
    cudaStreamSynchronize(s);
    cudaMemcpy(hi.data(), b, n * 4, cudaMemcpyDeviceToHost);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        int e = 0;
        for (int r = 0; r < N; r++) e = std::max(e, (int)((i + (size_t)r * 333) % n));
        bad += hi[i] != e;
    }
    CHECK(bad == 0, "int32 all-reduce max: %d wrong elements", bad);

    // Argument checks (NCCL: ncclInvalidArgument; the emulator also checks extents and overlap).
    CHECK(ncclAllGather(a, b, n, ncclInt32, NULL, s) == ncclInvalidArgument, "NULL comm accepted");
    CHECK(ncclAllGather(a, b, n, (ncclDataType_t)42, c, s) == ncclInvalidArgument, "bad data type accepted");
    CHECK(ncclAllReduce(a, b, n, ncclInt32, (ncclRedOp_t)42, c, s) == ncclInvalidArgument, "bad op accepted");
    CHECK(ncclAllGather(a, NULL, n, ncclInt32, c, s) == ncclInvalidArgument, "NULL recvbuff accepted");
    CHECK(ncclAllGather(a, a, n, ncclInt32, c, s) == ncclInvalidArgument, "recvbuff too small accepted");
    CHECK(ncclAllGather(b + 1, b, n / 2, ncclInt32, c, s) == ncclInvalidArgument || me * (n / 2) == 1,
          "overlapping, not in place, all-gather accepted");
    CHECK(ncclReduceScatter(f, f + 1, n, ncclFloat32, ncclSum, c, s) == ncclInvalidArgument,
          "reduce-scatter with a wrong in-place offset accepted");
    CHECK(ncclBroadcast(a, b, n, ncclInt32, N, c, s) == ncclInvalidArgument, "root out of range accepted");
    cudaFree(a); cudaFree(b); cudaFree(f); cudaFree(g); cudaFree(gs);
    cudaStreamDestroy(s);
}

static int child(int me, ncclUniqueId id, ncclUniqueId id2, ncclUniqueId id3) {
    g_rank = me;
    cudaSetDevice(me);
    ncclComm_t c = make_comm(id, N, me, me != 1);  // rank 1 blocking, the others not: both paths
    if (c) collectives(c, me);
    if (c) {
        ncclResult_t r = ncclCommFinalize(c);
        CHECK(settle(c, r) == ncclSuccess, "finalize");
        CHECK(ncclCommDestroy(c) == ncclSuccess, "destroy");
    }
    // A peer's abort: after one all-reduce together (every rank is past the initialisation),
    // rank 0 aborts while ranks 1 and 2 wait in a second one.
    c = make_comm(id2, N, me, 0);
    float* x;
    cudaMalloc(&x, 64);
    cudaMemset(x, 0, 64);
    CHECK(settle(c, ncclAllReduce(x, x, 16, ncclFloat32, ncclSum, c, 0)) == ncclSuccess, "all-reduce");
    if (me == 0) {
        cudaStreamSynchronize(0);
        usleep(200000);
        CHECK(ncclCommAbort(c) == ncclSuccess, "abort");
    } else {
        settle(c, ncclAllReduce(x, x, 16, ncclFloat32, ncclSum, c, 0));
        cudaStreamSynchronize(0);  // the work item gives up: the stream completes
        ncclResult_t s = ncclSuccess;
        ncclCommGetAsyncError(c, &s);
        CHECK(s == ncclRemoteError, "after a peer's abort: %s", ncclGetErrorString(s));
        ncclCommAbort(c);
    }
    // A dead peer: after one all-reduce together, rank 2 exits; the others' next all-reduce
    // ends with ncclRemoteError.
    c = make_comm(id3, N, me, 0);
    CHECK(settle(c, ncclAllReduce(x, x, 16, ncclFloat32, ncclSum, c, 0)) == ncclSuccess, "all-reduce");
    cudaStreamSynchronize(0);
    if (me == 2) {
        fflush(stdout);
        _exit(g_failed);
    }
    settle(c, ncclAllReduce(x, x, 16, ncclFloat32, ncclSum, c, 0));
    cudaStreamSynchronize(0);
    ncclResult_t s = ncclSuccess;
    ncclCommGetAsyncError(c, &s);
    CHECK(s == ncclRemoteError, "after a peer's death: %s", ncclGetErrorString(s));
    CHECK(strstr(ncclGetLastError(NULL), "exited") || strstr(ncclGetLastError(NULL), "aborted"),
          "the last error names neither the dead peer nor the abort that followed");
    ncclCommAbort(c);
    cudaFree(x);
    return g_failed;
}

int main() {
    setenv("EMU_DEVICE_COUNT", "3", 1);
    setenv("EMU_NCCL_SLOT_BYTES", "256", 1);
    setenv("EMU_NCCL_TIMEOUT", "20", 1);
    ncclUniqueId id, id2, id3, id4;
    ncclGetUniqueId(&id);
    ncclGetUniqueId(&id2);
    ncclGetUniqueId(&id3);
    ncclGetUniqueId(&id4);
    pid_t pids[N];
    for (int r = 0; r < N; r++) {
        pids[r] = fork();
        if (pids[r] == 0) { const int rc = child(r, id, id2, id3); fflush(stdout); _exit(rc); }
    }
    int failed = 0;
    for (int r = 0; r < N; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
    }
    // Two ranks on one device: refused at init (as NCCL's duplicate GPU check).
    pid_t p2 = fork();
    if (p2 == 0) {
        g_rank = 1;
        ncclComm_t c = NULL;
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclCommInitRankConfig(&c, 2, id4, 1, &cfg);
        ncclResult_t r = settle(c, ncclInProgress);
        ncclCommAbort(c);
        fflush(stdout);
        _exit(r == ncclInvalidUsage ? 0 : 1);
    }
    ncclComm_t c = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclCommInitRankConfig(&c, 2, id4, 0, &cfg);
    ncclResult_t r = settle(c, ncclInProgress);
    CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "device"), "two ranks on one device: %s",
          ncclGetErrorString(r));
    ncclCommAbort(c);
    int st = 0;
    waitpid(p2, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "two ranks on one device: rank 1 was not refused");
    failed |= g_failed;
    if (!failed) printf("ok - nccl shim: collectives (bf16, fp16, fp32, int32), argument checks, abort, dead peer, duplicate device (%d ranks)\n", N);
    return failed;
}
