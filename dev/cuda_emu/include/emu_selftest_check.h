// Not a CUDA shim: the emulator's self-test programs' (selftest_*.cu) check of a runtime call,
// which ends the program with status 2 and the call's text when it does not succeed.
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)
