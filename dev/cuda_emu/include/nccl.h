// Shim: NCCL for the CPU emulator (see ../emu.h). NCCL is NOT emulated: this header only lets
// code that can use NCCL compile (types, constants and functions as in NCCL 2.21's nccl.h).
// Every call that would create a communicator or move data answers ncclInvalidUsage, and
// ncclGetLastError says why, so train_gpt --comm nccl under the emulator stops with a clear
// error; the emulated runs use --comm mpi (collectives staged through host memory over MPI).
#pragma once
#include <stddef.h>

#include <cuda_runtime.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 0
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)
#define NCCL_UNIQUE_ID_BYTES 128

typedef struct ncclComm* ncclComm_t;
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7,
} ncclResult_t;
typedef enum {
    ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3,
    ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9,
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct {
    size_t size;
    unsigned magic, version;
    int blocking, cgaClusterSize, minCTAs, maxCTAs;
    const char* netName;
    int splitShare;
    const char* commName;
} ncclConfig_t;
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)
#define NCCL_CONFIG_INITIALIZER                                                                  \
    {sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),          \
     NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
     NULL, NCCL_CONFIG_UNDEF_INT, NULL}

#define EMU_NCCL_WHY "NCCL is not emulated by dev/cuda_emu (run with --comm mpi)"
static inline ncclResult_t emu_nccl_refuse(void) { return ncclInvalidUsage; }

static inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}
static inline const char* ncclGetLastError(ncclComm_t) { return EMU_NCCL_WHY; }
static inline ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return emu_nccl_refuse(); }
static inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int, ncclUniqueId, int) { *c = NULL; return emu_nccl_refuse(); }
static inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* c, int, ncclUniqueId, int, ncclConfig_t*) {
    *c = NULL;
    return emu_nccl_refuse();
}
// No communicator ever exists: these act on NULL (as after a failed init) and succeed.
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* s) { *s = ncclSuccess; return c ? ncclInvalidUsage : ncclSuccess; }
static inline ncclResult_t ncclCommAbort(ncclComm_t c) { return c ? ncclInvalidUsage : ncclSuccess; }
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) { return c ? ncclInvalidUsage : ncclSuccess; }
static inline ncclResult_t ncclCommFinalize(ncclComm_t c) { return c ? ncclInvalidUsage : ncclSuccess; }
static inline ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
static inline ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) { return emu_nccl_refuse(); }
static inline ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
    return emu_nccl_refuse();
}
static inline ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
    return emu_nccl_refuse();
}
static inline ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return emu_nccl_refuse(); }
