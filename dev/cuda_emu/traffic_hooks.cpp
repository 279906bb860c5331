// The hooks of a traffic-counting build (emu.h, "Traffic counts"): the kernels' translation
// unit is compiled with
//   -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0
//   --param asan-stack=0 --param asan-globals=0 -O0
// so that GCC calls __asan_{load,store}{1,2,4,8,16,N}_noabort(address[, size]) before every
// memory access it emits (the kernel-address flavour checks nothing itself and needs no
// runtime library: these functions are the whole of it). -O0: optimising, GCC removes a
// check that an earlier one of the same address dominates (the store of a
// read-modify-write), which is right for address checking but loses the store here. This file is compiled without the
// flag. Each hook passes the access to the emulator, which counts it only when a kernel is
// running on the calling thread and the address lies in a device buffer.
#include <stddef.h>
#include <stdint.h>

#include "emu.h"

#define HOOKS(N)                                                                                           \
    void __asan_load##N##_noabort(uintptr_t a) { emu::traffic_access((const void*)a, N, 0); }            \
    void __asan_store##N##_noabort(uintptr_t a) { emu::traffic_access((const void*)a, N, 1); }
extern "C" {
HOOKS(1)
HOOKS(2)
HOOKS(4)
HOOKS(8)
HOOKS(16)
void __asan_loadN_noabort(uintptr_t a, size_t n) { emu::traffic_access((const void*)a, n, 0); }
void __asan_storeN_noabort(uintptr_t a, size_t n) { emu::traffic_access((const void*)a, n, 1); }
void __asan_handle_no_return(void) {}
}
