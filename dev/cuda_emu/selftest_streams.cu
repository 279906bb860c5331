// Self-test of the emulator's asynchronous streams (dev/cuda_emu/emu.h, "Runtime"), written
// as a small CUDA program: dev/test/test_kernels_emu.sh transforms and builds it like the
// kernel tests and runs it under the emulator only (it reads the emulator's seed from
// EMU_SEED and calls emu::enqueue/emu::die).
//
// Run without arguments, it is the driver: it runs itself as `--child` once per seed
// (EMU_SEED=1..kSeeds, and a few with EMU_STREAMS=sync), each child running every scenario
// once and printing one "name=value" line per scenario, and checks over all the seeds that
//   - a stream race shows: without an event the consumer stream reads poison for some seed
//     (so the emulator really reorders streams), never with cudaEventRecord +
//     cudaStreamWaitEvent; the same for the legacy stream against a non-blocking stream
//     (also after a cudaMemset, which is asynchronous), never against a blocking stream;
//   - a re-recorded event does not move an earlier wait; a never-recorded event is complete;
//   - cudaEventQuery answers cudaErrorNotReady for some seed before the host synchronises,
//     cudaSuccess after; a pinned device-to-host cudaMemcpyAsync read before
//     cudaStreamSynchronize is stale for some seed, right after it always; copies from and
//     to pageable memory behave synchronously (staged, or waited for);
//   - kernel arguments are the values at the launch (also through templates, commas in
//     arguments and NULL); cuBLASLt reads alpha at the call; a CUB sort is stream-ordered;
//   - EMU_STREAMS=sync never shows the races;
// and that an abort inside deferred work names the kernel / operation and its stream, and
// that exiting with work still queued is clean. Output: TAP lines "ok - streams: ...".
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>

#include <emu_selftest_check.h>  // CHECK

static const int N = 512;
static const int kSeeds = 32;

__global__ void fill_kernel(float* p, int n, float v) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}
__global__ void copy_kernel(float* dst, const float* src, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
__global__ void oob_kernel(float* p, int n) { p[n + threadIdx.x] = 1.0f; }
template <class T, int K>
__global__ void args_kernel(T* out, int a, int b, const float* maybe_null) {
    out[0] = (T)(a * K);
    out[1] = (T)b;
    out[2] = maybe_null ? (T)1 : (T)0;
}
template <int A, int B> struct Sum { static const int value = A + B; };

static float* dev_buffer() {  // a fresh buffer: poison (NaN) until written
    float* p;
    CHECK(cudaMalloc(&p, N * sizeof(float)));
    return p;
}
// What the host sees in a device buffer (after synchronising): "fresh" if all v, "poison" if
// any NaN, else "other".
static const char* classify(const float* d, float v) {
    float h[N];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    bool nan = false, all = true;
    for (int i = 0; i < N; i++) {
        nan |= isnan(h[i]);
        all &= h[i] == v;
    }
    return all ? "fresh" : nan ? "poison" : "other";
}
static void launch_fill(float* p, float v, cudaStream_t s) { fill_kernel<<<(N + 127) / 128, 128, 0, s>>>(p, N, v); }
static void launch_copy(float* dst, const float* src, cudaStream_t s) {
    copy_kernel<<<(N + 127) / 128, 128, 0, s>>>(dst, src, N);
}

static void child() {
    cudaStream_t s1, s2, sb;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaStreamCreate(&sb));  // blocking: synchronises with the legacy stream
    cudaEvent_t ev, ev2;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&ev2));

    {  // producer on s1, consumer on s2, no event
        float *a = dev_buffer(), *b = dev_buffer();
        launch_fill(a, 1.0f, s1);
        launch_copy(b, a, s2);
        CHECK(cudaDeviceSynchronize());
        printf("race_no_event=%s\n", classify(b, 1.0f));
    }
    {  // the same with the hand-off
        float *a = dev_buffer(), *b = dev_buffer();
        launch_fill(a, 1.0f, s1);
        CHECK(cudaEventRecord(ev, s1));
        CHECK(cudaStreamWaitEvent(s2, ev, 0));
        launch_copy(b, a, s2);
        CHECK(cudaDeviceSynchronize());
        printf("race_event=%s\n", classify(b, 1.0f));
    }
    {  // re-record: the wait stays on the first record (a = 1); a later write (a = 2) and the
       // second record are unordered with the consumer
        float *a = dev_buffer(), *b = dev_buffer();
        launch_fill(a, 1.0f, s1);
        CHECK(cudaEventRecord(ev, s1));
        CHECK(cudaStreamWaitEvent(s2, ev, 0));
        launch_fill(a, 2.0f, s1);
        CHECK(cudaEventRecord(ev, s1));
        launch_copy(b, a, s2);
        CHECK(cudaDeviceSynchronize());
        float h;
        CHECK(cudaMemcpy(&h, b, sizeof h, cudaMemcpyDeviceToHost));
        printf("rerecord=%s\n", isnan(h) ? "poison" : h == 1.0f ? "first" : h == 2.0f ? "second" : "other");
    }
    {  // a never-recorded event: complete, and waiting on it waits for nothing
        cudaEvent_t e;
        CHECK(cudaEventCreate(&e));
        const cudaError_t q = cudaEventQuery(e);
        CHECK(cudaEventSynchronize(e));
        float* a = dev_buffer();
        CHECK(cudaStreamWaitEvent(s2, e, 0));
        launch_fill(a, 3.0f, s2);
        CHECK(cudaStreamSynchronize(s2));
        printf("unrecorded=%s\n", q == cudaSuccess && !strcmp(classify(a, 3.0f), "fresh") ? "ok" : "bad");
        CHECK(cudaEventDestroy(e));
    }
    {  // cudaEventQuery before and after the host synchronises
        float* a = dev_buffer();
        launch_fill(a, 4.0f, s1);
        CHECK(cudaEventRecord(ev2, s1));
        const cudaError_t before = cudaEventQuery(ev2);
        CHECK(cudaEventSynchronize(ev2));
        const cudaError_t after = cudaEventQuery(ev2);
        printf("query_before=%s\n", before == cudaErrorNotReady ? "notready" : before == cudaSuccess ? "success" : "error");
        printf("query_after=%s\n", after == cudaSuccess && !strcmp(classify(a, 4.0f), "fresh") ? "ok" : "bad");
        const cudaError_t sq = cudaStreamQuery(s1);
        printf("stream_query_after=%s\n", sq == cudaSuccess ? "ok" : "bad");
    }
    {  // pinned device-to-host: asynchronous
        float* a = dev_buffer();
        float* h;
        CHECK(cudaMallocHost(&h, N * sizeof(float)));
        for (int i = 0; i < N; i++) h[i] = 0.0f;
        launch_fill(a, 5.0f, s1);
        CHECK(cudaMemcpyAsync(h, a, N * sizeof(float), cudaMemcpyDeviceToHost, s1));
        const float early = ((volatile float*)h)[N - 1];
        CHECK(cudaStreamSynchronize(s1));
        bool all = true;
        for (int i = 0; i < N; i++) all &= h[i] == 5.0f;
        printf("pinned_before_sync=%s\n", early == 0.0f ? "stale" : early == 5.0f ? "fresh" : "other");
        printf("pinned_after_sync=%s\n", all ? "ok" : "bad");
        CHECK(cudaFreeHost(h));
    }
    {  // pageable: device-to-host returns with the data; host-to-device stages the source
        float* a = dev_buffer();
        static float h[N], g[N];
        launch_fill(a, 6.0f, s1);
        CHECK(cudaMemcpyAsync(h, a, sizeof h, cudaMemcpyDeviceToHost, s1));
        bool all = true;
        for (int i = 0; i < N; i++) all &= h[i] == 6.0f;
        printf("pageable_d2h=%s\n", all ? "ok" : "bad");
        float* b = dev_buffer();
        for (int i = 0; i < N; i++) g[i] = 7.0f;
        CHECK(cudaMemcpyAsync(b, g, sizeof g, cudaMemcpyHostToDevice, s1));
        for (int i = 0; i < N; i++) g[i] = -1.0f;  // the copy was staged: the device gets 7
        CHECK(cudaStreamSynchronize(s1));
        printf("pageable_h2d=%s\n", !strcmp(classify(b, 7.0f), "fresh") ? "ok" : "bad");
    }
    {  // the legacy stream against blocking and non-blocking streams
        float *a = dev_buffer(), *b = dev_buffer();
        launch_fill(a, 8.0f, sb);
        launch_copy(b, a, 0);  // waits for sb
        CHECK(cudaDeviceSynchronize());
        printf("legacy_after_blocking=%s\n", classify(b, 8.0f));
        float *c = dev_buffer(), *d = dev_buffer();
        launch_fill(c, 9.0f, 0);
        launch_copy(d, c, sb);  // waits for the legacy stream
        CHECK(cudaDeviceSynchronize());
        printf("blocking_after_legacy=%s\n", classify(d, 9.0f));
        float *e = dev_buffer(), *f = dev_buffer();
        launch_fill(e, 10.0f, s1);
        launch_copy(f, e, 0);  // does not wait for the non-blocking s1
        CHECK(cudaDeviceSynchronize());
        printf("legacy_after_nonblocking=%s\n", classify(f, 10.0f));
        float *x = dev_buffer(), *y = dev_buffer();
        CHECK(cudaMemset(x, 0, N * sizeof(float)));  // asynchronous, on the legacy stream
        launch_copy(y, x, s1);
        CHECK(cudaDeviceSynchronize());
        printf("memset_then_nonblocking=%s\n", classify(y, 0.0f));
    }
    {  // kernel arguments: the values at the launch
        float* o;
        CHECK(cudaMalloc(&o, 8 * sizeof(float)));
        int v = 5;
        const float* none = NULL;
        args_kernel<float, 2><<<1, 1, 0, s1>>>(o, v, std::min<int>(Sum<3, 4>::value, 100), NULL);
        v = 9;
        args_kernel<float, 1><<<1, 1, 0, s1>>>(o + 4, v, Sum<1, 2>::value, none == NULL ? o : NULL);
        v = -1;
        float h[8];
        CHECK(cudaStreamSynchronize(s1));
        CHECK(cudaMemcpy(h, o, sizeof h, cudaMemcpyDeviceToHost));
        const bool ok = h[0] == 10.0f && h[1] == 7.0f && h[2] == 0.0f && h[4] == 9.0f && h[5] == 3.0f && h[6] == 1.0f;
        printf("args_by_value=%s\n", ok ? "ok" : "bad");
    }
    {  // cuBLASLt reads alpha when called: D (1x1, fp32) = alpha * A * B with A = B = 1
        cublasLtHandle_t lt;
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, ld;
        __nv_bfloat16 one[2] = {__float2bfloat16(1.0f), __float2bfloat16(1.0f)};
        __nv_bfloat16* ab;
        float* dd = dev_buffer();
        CHECK(cudaMalloc(&ab, 256));
        CHECK(cudaMemcpy(ab, one, sizeof one, cudaMemcpyHostToDevice));
        bool ok = cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS &&
                  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 1, 1, 1) == CUBLAS_STATUS_SUCCESS &&
                  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 1, 1, 1) == CUBLAS_STATUS_SUCCESS &&
                  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 1, 1, 1) == CUBLAS_STATUS_SUCCESS;
        float alpha = 2.0f, beta = 0.0f;
        // (on the blocking sb: it waits for the cudaMemcpy above, which is asynchronous from
        // pageable memory; on a non-blocking stream the matmul could read A and B before it)
        ok = ok && cublasLtMatmul(lt, desc, &alpha, ab, la, ab + 1, lb, &beta, dd, ld, dd, ld, NULL, NULL, 0, sb) ==
                       CUBLAS_STATUS_SUCCESS;
        alpha = 5.0f;
        float h = 0;
        CHECK(cudaStreamSynchronize(sb));
        CHECK(cudaMemcpy(&h, dd, sizeof h, cudaMemcpyDeviceToHost));
        printf("cublaslt_alpha_at_call=%s\n", ok && h == 2.0f ? "ok" : "bad");
    }
    {  // CUB: the sort runs after the kernel that writes its keys (same stream)
        int* keys;
        int* vals;
        CHECK(cudaMalloc(&keys, 4 * N * sizeof(int)));
        vals = keys + 2 * N;
        static int hk[N];
        for (int i = 0; i < N; i++) hk[i] = (i * 37) % N;
        int* pinned_keys;
        CHECK(cudaMallocHost(&pinned_keys, sizeof hk));
        memcpy(pinned_keys, hk, sizeof hk);
        CHECK(cudaMemcpyAsync(keys, pinned_keys, sizeof hk, cudaMemcpyHostToDevice, s2));
        CHECK(cudaMemcpyAsync(vals, pinned_keys, sizeof hk, cudaMemcpyHostToDevice, s2));
        size_t tb = 0;
        CHECK(cub::DeviceRadixSort::SortPairs(NULL, tb, keys, keys + N, vals, vals + N, N, 0, 32, s2));
        void* tmp;
        CHECK(cudaMalloc(&tmp, tb));
        CHECK(cub::DeviceRadixSort::SortPairs(tmp, tb, keys, keys + N, vals, vals + N, N, 0, 32, s2));
        CHECK(cudaStreamSynchronize(s2));
        CHECK(cudaMemcpy(hk, keys + N, sizeof hk, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < N; i++) ok &= hk[i] == i;
        printf("cub_sort_ordered=%s\n", ok ? "ok" : "bad");
        CHECK(cudaFreeHost(pinned_keys));
    }
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// Driver

struct Run { std::map<std::string, std::string> v; std::string err; int status; };
static std::string self;

static Run run_child(const char* env, const char* arg) {
    Run r;
    const char* tmp = getenv("TMPDIR");
    const std::string ef = std::string(tmp && *tmp ? tmp : "/tmp") + "/selftest_streams." + std::to_string(getpid()) + ".err";
    const std::string cmd = std::string(env) + " " + self + " " + arg + " 2>" + ef;
    FILE* p = popen(cmd.c_str(), "r");
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
        std::string s(line);
        if (!s.empty() && s.back() == '\n') s.pop_back();
        const size_t eq = s.find('=');
        if (eq != std::string::npos) r.v[s.substr(0, eq)] = s.substr(eq + 1);
    }
    r.status = p ? pclose(p) : -1;
    if (FILE* f = fopen(ef.c_str(), "r")) {
        while (fgets(line, sizeof line, f)) r.err += line;
        fclose(f);
    }
    remove(ef.c_str());
    return r;
}

static int failures = 0;
static void report(bool ok, const std::string& what, const std::string& detail) {
    printf("%s - streams: %s (%s)\n", ok ? "ok" : "not ok", what.c_str(), detail.c_str());
    failures += !ok;
}

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--child")) {
        child();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--oob")) {  // an out-of-bounds write in a deferred kernel
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        float* a = dev_buffer();
        oob_kernel<<<1, 32, 0, s>>>(a, N);
        CHECK(cudaStreamSynchronize(s));
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--die-in-work")) {  // an abort inside emu::enqueue work
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        emu::enqueue(s, "selftest work item", [] { emu::die("deliberate abort"); });
        CHECK(cudaStreamSynchronize(s));
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--exit-queued")) {  // return with work still queued
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        float* a = dev_buffer();
        for (int i = 0; i < 300; i++) launch_fill(a, (float)i, s);
        emu::enqueue(s, "slow work item", [] { usleep(200000); });
        for (int i = 0; i < 300; i++) launch_fill(a, (float)i, s);
        return 0;
    }
    self = argv[0];
    std::map<std::string, std::map<std::string, int>> seen;  // name -> value -> seeds
    int bad_runs = 0;
    std::string bad_detail;
    for (int seed = 1; seed <= kSeeds; seed++) {
        const Run r = run_child(("EMU_SEED=" + std::to_string(seed)).c_str(), "--child");
        if (r.status != 0 || r.v.empty()) {
            bad_runs++;
            if (bad_detail.empty()) bad_detail = "seed " + std::to_string(seed) + ": " + r.err.substr(0, 300);
        }
        for (auto& kv : r.v) seen[kv.first][kv.second]++;
    }
    report(bad_runs == 0, "every child run completed", bad_runs ? bad_detail : std::to_string(kSeeds) + " seeds");
    auto count = [&](const char* name, const char* value) { return seen[name][value]; };
    auto summary = [&](const char* name) {
        std::string s;
        for (auto& kv : seen[name]) s += (s.empty() ? "" : ", ") + kv.first + " " + std::to_string(kv.second);
        return s + " of " + std::to_string(kSeeds) + " seeds";
    };
    report(count("race_no_event", "poison") > 0 && count("race_no_event", "other") == 0,
           "two streams without an event: the consumer reads poison for some seed", summary("race_no_event"));
    report(count("race_event", "fresh") == kSeeds, "cudaEventRecord + cudaStreamWaitEvent: always the producer's data",
           summary("race_event"));
    report(count("rerecord", "first") > 0 && count("rerecord", "first") + count("rerecord", "second") == kSeeds,
           "a re-recorded event does not move an earlier cudaStreamWaitEvent (never poison; the first value for some seed)",
           summary("rerecord"));
    report(count("unrecorded", "ok") == kSeeds, "a never-recorded event is complete and waiting on it is a no-op",
           summary("unrecorded"));
    report(count("query_before", "notready") > 0 && count("query_before", "error") == 0,
           "cudaEventQuery is cudaErrorNotReady before the work is done (for some seed)", summary("query_before"));
    report(count("query_after", "ok") == kSeeds && count("stream_query_after", "ok") == kSeeds,
           "cudaEventQuery/cudaStreamQuery succeed after cudaEventSynchronize", summary("query_after"));
    report(count("pinned_before_sync", "stale") > 0 && count("pinned_before_sync", "other") == 0,
           "a pinned device-to-host cudaMemcpyAsync read before cudaStreamSynchronize is stale for some seed",
           summary("pinned_before_sync"));
    report(count("pinned_after_sync", "ok") == kSeeds, "... and right after it", summary("pinned_after_sync"));
    report(count("pageable_d2h", "ok") == kSeeds && count("pageable_h2d", "ok") == kSeeds,
           "cudaMemcpyAsync with pageable memory: device-to-host returns with the data, host-to-device stages the source",
           summary("pageable_d2h"));
    report(count("legacy_after_blocking", "fresh") == kSeeds && count("blocking_after_legacy", "fresh") == kSeeds,
           "the legacy stream and a blocking stream synchronise both ways", summary("legacy_after_blocking"));
    report(count("legacy_after_nonblocking", "poison") > 0,
           "the legacy stream does not wait for a non-blocking stream (poison for some seed)",
           summary("legacy_after_nonblocking"));
    report(count("memset_then_nonblocking", "poison") > 0,
           "cudaMemset is asynchronous: a non-blocking stream may run before it (poison for some seed)",
           summary("memset_then_nonblocking"));
    report(count("args_by_value", "ok") == kSeeds,
           "kernel arguments are the values at the launch (templates, commas, NULL)", summary("args_by_value"));
    report(count("cublaslt_alpha_at_call", "ok") == kSeeds, "cublasLtMatmul reads alpha when called",
           summary("cublaslt_alpha_at_call"));
    report(count("cub_sort_ordered", "ok") == kSeeds, "cub::DeviceRadixSort::SortPairs is ordered in its stream",
           summary("cub_sort_ordered"));

    // EMU_STREAMS=sync: everything in issue order, no race can show.
    int sync_bad = 0;
    for (int seed = 1; seed <= 4; seed++) {
        Run r = run_child(("EMU_STREAMS=sync EMU_SEED=" + std::to_string(seed)).c_str(), "--child");
        sync_bad += r.status != 0 || r.v["race_no_event"] != "fresh" || r.v["pinned_before_sync"] != "fresh" ||
                    r.v["legacy_after_nonblocking"] != "fresh" || r.v["query_before"] != "success";
    }
    report(sync_bad == 0, "EMU_STREAMS=sync runs everything when issued", std::to_string(sync_bad) + " of 4 runs differ");

    Run r = run_child("EMU_SEED=3", "--oob");
    report(r.status != 0 && r.err.find("EMU: ") != std::string::npos && r.err.find("kernel oob_kernel") != std::string::npos &&
               r.err.find("stream 1 (non-blocking)") != std::string::npos,
           "an abort in a deferred kernel names the kernel and its stream",
           r.err.substr(0, r.err.find('\n')).substr(0, 240));
    r = run_child("EMU_SEED=3", "--die-in-work");
    report(r.status != 0 && r.err.find("EMU: deliberate abort [selftest work item, on stream 1 (blocking)]") != std::string::npos,
           "an abort in emu::enqueue work names it and its stream", r.err.substr(0, r.err.find('\n')).substr(0, 240));
    r = run_child("EMU_SEED=3", "--exit-queued");
    report(r.status == 0 && r.err.find("EMU:") == std::string::npos, "exit with work still queued is clean",
           "status " + std::to_string(r.status) + (r.err.empty() ? "" : ": " + r.err.substr(0, r.err.find('\n')).substr(0, 200)));
    return failures ? 1 : 0;
}
