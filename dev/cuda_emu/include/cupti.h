// Shim: the subset of CUPTI's callback API that kernels/kernels_cuda.cuh uses to count kernel
// launches during --profile-step, implemented by ../emu.cpp (see ../emu.h). Names, types and
// the callback ids used follow cupti.h (the ids' values are CUPTI's); the emulator calls a
// subscriber back at every kernel launch (runtime domain, cudaLaunchKernel, enter then exit),
// and at every cuBLASLt matmul and NCCL collective (driver domain, cuLaunchKernel: one kernel
// each, as their real counterparts launch at least one).
#pragma once
#include <stdint.h>

// Code built against this shim calls these functions directly (a real build loads libcupti
// at run time, so that a machine without it still runs).
#define FSDP_CUPTI_EMULATED 1

#define CUPTIAPI
typedef enum { CUPTI_SUCCESS = 0, CUPTI_ERROR_INVALID_PARAMETER = 1, CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39 } CUptiResult;
typedef enum { CUPTI_CB_DOMAIN_INVALID = 0, CUPTI_CB_DOMAIN_DRIVER_API = 1, CUPTI_CB_DOMAIN_RUNTIME_API = 2 } CUpti_CallbackDomain;
typedef uint32_t CUpti_CallbackId;
typedef enum { CUPTI_API_ENTER = 0, CUPTI_API_EXIT = 1 } CUpti_ApiCallbackSite;
typedef struct {
    CUpti_ApiCallbackSite callbackSite;
    const char* functionName;
} CUpti_CallbackData;
typedef void(CUPTIAPI* CUpti_CallbackFunc)(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                            const void* cbdata);
typedef struct CUpti_Subscriber_st* CUpti_SubscriberHandle;

enum {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 = 211,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 = 214,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060 = 430,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel = 307,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz = 442,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel = 477,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx = 652,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz = 653,
};

// One subscriber at a time, as CUPTI: a second cuptiSubscribe before cuptiUnsubscribe fails.
CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata);
CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain);
CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber);
CUptiResult cuptiGetResultString(CUptiResult result, const char** str);
