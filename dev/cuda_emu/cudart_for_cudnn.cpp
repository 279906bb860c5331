// The CUDA runtime the cudnn-frontend sees under the emulator: the frontend (with dynamic
// loading) dlopens a libcudart of its own for the few runtime calls it makes (version, device
// properties, the workspace's memset), named by CUDNN_FRONTEND_CUDART_LIB_NAME, which the
// emulated tests point at this library (dev/cuda_emu/build.sh, build_fake_cudnn). It answers
// as one sm_90 GPU (an H100's 132 SMs), compiled against the real CUDA headers, since the
// frontend was. Memory operations wait for the emulated stream (the emulator's
// cudaStreamSynchronize, found in the process) and then act on the host memory that the
// emulator's "device" memory is. A call the frontend makes that is not here fails its dlsym:
// the frontend names the symbol.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

typedef int (*StreamSync)(void*);
static int wait_stream(cudaStream_t s) {
    StreamSync sync = (StreamSync)dlsym(RTLD_DEFAULT, "_Z21cudaStreamSynchronizeP11CUstream_st");
    return sync ? sync((void*)s) : 1;
}

extern "C" {
cudaError_t cudaRuntimeGetVersion(int* v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake cudart error"; }
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    switch (a) {
        case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
        case cudaDevAttrMultiProcessorCount: *v = 132; break;
        default: *v = 0;
    }
    return cudaSuccess;
}
static void props(cudaDeviceProp* p) {
    memset(p, 0, sizeof(*p));
    strcpy(p->name, "emulated sm_90 (fake cudart for the cuDNN frontend)");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) { props(p); return cudaSuccess; }
cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* p, int) { props(p); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
    if (wait_stream(s)) return cudaErrorUnknown;
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
    if (wait_stream(s)) return cudaErrorUnknown;
    memcpy(d, src, n);
    return cudaSuccess;
}
}
