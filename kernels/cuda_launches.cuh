// Counting kernel launches (--profile-step) with CUPTI's callback API: every launch this
// process makes, on any stream, while counting is on: our kernels (runtime API,
// cudaLaunchKernel), cuBLASLt's and NCCL's (driver API, cuLaunchKernel(Ex)). A runtime launch
// reaches the driver too; the driver callback inside a runtime launch is not counted again.
//
// A real build loads libcupti at run time (dlopen), so that a machine without it still runs
// and says why launches were not counted; built against the emulator's shim
// (dev/cuda_emu/include/cupti.h, FSDP_CUPTI_EMULATED), the shim's functions are called
// directly and report every emulated launch, cuBLASLt matmul and NCCL collective. Without
// cupti.h at build time, counting is compiled out (and says so). The count lives in the
// caller's LaunchCounter (CUPTI's userdata): no global state.
#ifndef FSDP_KERNELS_CUDA_LAUNCHES_CUH
#define FSDP_KERNELS_CUDA_LAUNCHES_CUH

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<cupti.h>)
#include <cupti.h>
#define FSDP_HAVE_CUPTI 1
#endif
#endif
#if defined(FSDP_HAVE_CUPTI) && !defined(FSDP_CUPTI_EMULATED)
#include <dlfcn.h>
#endif

typedef struct {
    long long launches;     // counted since launch_counter_start
    int in_runtime_launch;  // depth of runtime launches in progress (their driver call is the same kernel)
    int active;
    char why_not[160];      // why counting is off ("" while it is on)
#ifdef FSDP_HAVE_CUPTI
    CUpti_SubscriberHandle subscriber;
    void* lib;              // libcupti (real builds)
    CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
    CUptiResult (*enable_domain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
    CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
#endif
} LaunchCounter;

#ifdef FSDP_HAVE_CUPTI
static void CUPTIAPI launch_counter_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                             const void* cbdata) {
    LaunchCounter* c = (LaunchCounter*)userdata;
    const CUpti_CallbackData* d = (const CUpti_CallbackData*)cbdata;
    const int enter = d->callbackSite == CUPTI_API_ENTER;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        if (cbid != CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 && cbid != CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 &&
            cbid != CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060)
            return;
        if (enter) {
            c->launches++;
            c->in_runtime_launch++;
        } else if (c->in_runtime_launch > 0) {
            c->in_runtime_launch--;
        }
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && enter && c->in_runtime_launch == 0) {
        if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
            cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
            cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel)
            c->launches++;
    }
}
#endif

// Starts counting from zero. 0 (and c->why_not) when launches cannot be counted here.
static inline int launch_counter_start(LaunchCounter* c) {
    c->launches = 0;
    c->in_runtime_launch = 0;
    c->why_not[0] = '\0';
#ifndef FSDP_HAVE_CUPTI
    snprintf(c->why_not, sizeof(c->why_not), "built without cupti.h");
    return 0;
#else
#ifdef FSDP_CUPTI_EMULATED
    c->subscribe = cuptiSubscribe;
    c->enable_domain = cuptiEnableDomain;
    c->unsubscribe = cuptiUnsubscribe;
#else
    if (!c->lib) {
        // FSDP_CUPTI_LIB first (e.g. a pip wheel's nvidia/cuda_cupti/lib/libcupti.so.13), then
        // the loader's path, then the toolkit's usual places.
        const char* env = getenv("FSDP_CUPTI_LIB");
        const char* names[] = {env && *env ? env : "libcupti.so", "libcupti.so", "libcupti.so.13", "libcupti.so.12",
                               "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so"};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !c->lib; i++) c->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!c->lib) {
            snprintf(c->why_not, sizeof(c->why_not), "libcupti not found (set FSDP_CUPTI_LIB; dlopen: %s)", dlerror());
            return 0;
        }
        c->subscribe = (CUptiResult(*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*))dlsym(c->lib, "cuptiSubscribe");
        c->enable_domain = (CUptiResult(*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain))dlsym(c->lib, "cuptiEnableDomain");
        c->unsubscribe = (CUptiResult(*)(CUpti_SubscriberHandle))dlsym(c->lib, "cuptiUnsubscribe");
    }
    if (!c->subscribe || !c->enable_domain || !c->unsubscribe) {
        snprintf(c->why_not, sizeof(c->why_not), "libcupti lacks the callback API");
        return 0;
    }
#endif
    CUptiResult r = c->subscribe(&c->subscriber, launch_counter_callback, c);
    if (r == CUPTI_SUCCESS) r = c->enable_domain(1, c->subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    if (r == CUPTI_SUCCESS) r = c->enable_domain(1, c->subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
    if (r != CUPTI_SUCCESS) {
        snprintf(c->why_not, sizeof(c->why_not), "CUPTI refused a callback subscription (error %d)", (int)r);
        if (c->subscriber) c->unsubscribe(c->subscriber);
        c->subscriber = NULL;
        return 0;
    }
    c->active = 1;
    return 1;
#endif
}

// Stops counting (c->launches keeps the count). The library stays loaded, for the next start
// and because the driver keeps calling into it after it has been subscribed once: it is
// never dlclose'd.
static inline void launch_counter_stop(LaunchCounter* c) {
#ifdef FSDP_HAVE_CUPTI
    if (c->active) c->unsubscribe(c->subscriber);
    c->subscriber = NULL;
#endif
    c->active = 0;
}

#endif  // FSDP_KERNELS_CUDA_LAUNCHES_CUH
