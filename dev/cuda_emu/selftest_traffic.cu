// Self-check of the emulator's traffic counts (emu.h, "Traffic counts"), written as a small
// CUDA program: dev/test/test_traffic_emu.sh transforms it, compiles it with the counting
// instrumentation (-fsanitize=kernel-address ... -O0) and links dev/cuda_emu/traffic_hooks.cpp,
// as it does train_gpt. Each case runs alone between two reads of the totals, on the legacy
// stream, synchronised; the expected figures are derived by hand from what the case does:
//   - a copy of n floats: n x 4 bytes loaded and stored, as accesses and as sectors;
//   - each thread reading three neighbours: 3x the accesses, the sectors once (one launch);
//   - the same copy twice: the sectors twice (the distinct set is per launch);
//   - a read-modify-write in place: n x 4 loaded and stored; a buffer stored, then read back
//     in the same launch: the loads accessed, not counted (they hit the cache);
//   - one 2-byte load per 32-byte sector: 2 bytes accessed, 32 counted per thread;
//   - host code reading a device buffer (possible here, not on a GPU) and a kernel touching
//     only shared memory and its stack: nothing;
//   - one mma.sync m16n8k16 per warp: 2 x 16 x 8 x 16 FLOPs per warp;
//   - cp.async of 16 bytes per thread: 16 bytes loaded, the shared-memory side not counted;
//   - cuBLASLt D (m x n, bf16) = A^T B: 2mnk FLOPs, (mk + kn + mn) x 2 bytes;
//   - cudaMemsetAsync and a device-to-device cudaMemcpyAsync of b bytes: b stored; b + b.
// Output: TAP lines "ok - traffic: ..." / "not ok - traffic: ...".
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <emu_selftest_check.h>  // CHECK

static int failures = 0;

static void expect(const char* what, double got, double want) {
    const bool ok = got == want;
    printf("%s - traffic: %s: %.0f (expected %.0f)\n", ok ? "ok" : "not ok", what, got, want);
    if (!ok) failures++;
}

__global__ void copy_kernel(float* dst, const float* src, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
__global__ void neighbours_kernel(float* dst, const float* src, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + src[(i + 1) % n] + src[(i + 2) % n];
}
__global__ void scale_in_place_kernel(float* x, int n) {  // a load then a store of each element
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * x[i];
}
__global__ void write_then_read_kernel(float* x, float* y, int n) {  // x stored, then read back
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 1.0f;
    if (i < n) y[i] = x[i] + 1.0f;
}
__global__ void strided_kernel(uint16_t* dst, const uint16_t* src, int n) {  // n threads
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[16 * i];
}
__global__ void local_kernel(int* sink_unused) {
    __shared__ float tile[64];
    float stack[8];
    for (int j = 0; j < 8; j++) stack[j] = (float)(threadIdx.x + j);
    tile[threadIdx.x] = stack[threadIdx.x % 8];
    __syncthreads();
    if (tile[(threadIdx.x + 1) % 64] < -1.0f) *sink_unused = 1;  // never: tile holds >= 0
}
__global__ void mma_kernel(float* out) {
    float d[4] = {0, 0, 0, 0};
    const uint32_t z = 0;
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(z), "r"(z), "r"(z), "r"(z), "r"(z), "r"(z));
    if (threadIdx.x == 0 && d[0] != 0.0f) out[0] = d[0];  // never: the product is zero
}
__global__ void cp_async_kernel(float* out, const float* src) {  // 32 threads, 16 bytes each
    extern __shared__ __align__(16) float buf[];  // 128 floats
    const unsigned s = (unsigned)__cvta_generic_to_shared(buf + 4 * threadIdx.x);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src + 4 * threadIdx.x));
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    if (buf[4 * threadIdx.x] < -1.0f) out[0] = 1.0f;  // never: src holds 1s
}

static emu::Traffic totals(void) {
    CHECK(cudaDeviceSynchronize());
    emu::Traffic t;
    emu::traffic_totals(&t);
    return t;
}

int main(void) {
    const int n = 1024;  // floats: 4 KiB, 128 sectors
    float *a, *b;
    uint16_t *h16, *s16;
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    CHECK(cudaMalloc(&h16, n * sizeof(uint16_t)));
    CHECK(cudaMalloc(&s16, 16 * (size_t)n * sizeof(uint16_t)));
    CHECK(cudaMemset(a, 0, n * sizeof(float)));
    CHECK(cudaMemset(s16, 0, 16 * (size_t)n * sizeof(uint16_t)));

    emu::Traffic t0 = totals();
    copy_kernel<<<n / 256, 256>>>(b, a, n);
    emu::Traffic t1 = totals();
    expect("copy: bytes loaded (accesses)", t1.accessed[0] - t0.accessed[0], 4.0 * n);
    expect("copy: bytes stored (accesses)", t1.accessed[1] - t0.accessed[1], 4.0 * n);
    expect("copy: bytes loaded (sectors)", t1.sectors[0] - t0.sectors[0], 4.0 * n);
    expect("copy: bytes stored (sectors)", t1.sectors[1] - t0.sectors[1], 4.0 * n);
    expect("copy: launches", (double)(t1.launches - t0.launches), 1);

    t0 = totals();
    neighbours_kernel<<<n / 256, 256>>>(b, a, n);
    t1 = totals();
    expect("three reads per element: accesses", t1.accessed[0] - t0.accessed[0], 12.0 * n);
    expect("three reads per element: sectors once", t1.sectors[0] - t0.sectors[0], 4.0 * n);

    t0 = totals();
    copy_kernel<<<n / 256, 256>>>(b, a, n);
    copy_kernel<<<n / 256, 256>>>(b, a, n);
    t1 = totals();
    expect("two launches: sectors loaded twice", t1.sectors[0] - t0.sectors[0], 8.0 * n);

    t0 = totals();
    scale_in_place_kernel<<<n / 256, 256>>>(a, n);
    t1 = totals();
    expect("in place: bytes loaded", t1.sectors[0] - t0.sectors[0], 4.0 * n);
    expect("in place: bytes stored (the store after the load of the same address)", t1.sectors[1] - t0.sectors[1], 4.0 * n);

    t0 = totals();
    write_then_read_kernel<<<n / 256, 256>>>(a, b, n);
    t1 = totals();
    expect("stored, then read back: no load from DRAM", t1.sectors[0] - t0.sectors[0], 0);
    expect("stored, then read back: accessed", t1.accessed[0] - t0.accessed[0], 4.0 * n);
    expect("stored, then read back: two buffers stored", t1.sectors[1] - t0.sectors[1], 8.0 * n);

    t0 = totals();
    strided_kernel<<<n / 256, 256>>>(h16, s16, n);
    t1 = totals();
    expect("one 2-byte load per sector: accessed", t1.accessed[0] - t0.accessed[0], 2.0 * n);
    expect("one 2-byte load per sector: sectors", t1.sectors[0] - t0.sectors[0], 32.0 * n);
    expect("2-byte stores, 16 per sector: sectors", t1.sectors[1] - t0.sectors[1], 2.0 * n);

    t0 = totals();
    volatile float host_sum = 0;
    for (int i = 0; i < n; i++) host_sum = host_sum + a[i];  // the emulator's device memory is host memory
    local_kernel<<<1, 64>>>((int*)b);
    t1 = totals();
    expect("host reads and shared/stack accesses: nothing", (t1.accessed[0] + t1.accessed[1] + t1.sectors[0] + t1.sectors[1]) -
           (t0.accessed[0] + t0.accessed[1] + t0.sectors[0] + t0.sectors[1]), 0);

    t0 = totals();
    mma_kernel<<<3, 64>>>(b);  // 3 blocks of 2 warps
    t1 = totals();
    expect("mma.sync: FLOPs", t1.flops - t0.flops, 6.0 * 2 * 16 * 8 * 16);

    for (int i = 0; i < n; i++) a[i] = 1.0f;
    t0 = totals();
    cp_async_kernel<<<1, 32, 128 * sizeof(float)>>>(b, a);
    t1 = totals();
    expect("cp.async: bytes loaded", t1.sectors[0] - t0.sectors[0], 32.0 * 16);
    expect("cp.async: accesses", t1.accessed[0] - t0.accessed[0], 32.0 * 16);

    // cuBLASLt: D (m x n) = A^T (m x k) B (k x n), bf16, column-major, beta 0.
    const int m = 32, nn = 16, k = 64;
    __nv_bfloat16 *A, *B, *D;
    CHECK(cudaMalloc(&A, (size_t)k * m * 2));
    CHECK(cudaMalloc(&B, (size_t)k * nn * 2));
    CHECK(cudaMalloc(&D, (size_t)m * nn * 2));
    CHECK(cudaMemset(A, 0, (size_t)k * m * 2));
    CHECK(cudaMemset(B, 0, (size_t)k * nn * 2));
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, nn, k);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, nn, m);
    const float one = 1.0f, zero = 0.0f;
    t0 = totals();
    const cublasStatus_t st = cublasLtMatmul(h, desc, &one, A, la, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0);
    t1 = totals();
    expect("cuBLASLt: status", (double)st, (double)CUBLAS_STATUS_SUCCESS);
    expect("cuBLASLt: FLOPs", t1.flops - t0.flops, 2.0 * m * nn * k);
    expect("cuBLASLt: bytes loaded", t1.sectors[0] - t0.sectors[0], 2.0 * (m * k + k * nn));
    expect("cuBLASLt: bytes stored", t1.sectors[1] - t0.sectors[1], 2.0 * m * nn);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);

    t0 = totals();
    CHECK(cudaMemsetAsync(b, 0, 1000, 0));
    t1 = totals();
    expect("cudaMemsetAsync: bytes stored", t1.accessed[1] - t0.accessed[1], 1000);
    t0 = totals();
    CHECK(cudaMemcpyAsync(b, a, 2048, cudaMemcpyDeviceToDevice, 0));
    t1 = totals();
    expect("device-to-device copy: bytes loaded + stored", (t1.sectors[0] + t1.sectors[1]) - (t0.sectors[0] + t0.sectors[1]),
           4096);

    CHECK(cudaFree(A));
    CHECK(cudaFree(B));
    CHECK(cudaFree(D));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(h16));
    CHECK(cudaFree(s16));
    return failures ? 1 : 0;
}
