// Shim: bfloat16 of the CPU emulator (see ../emu.h), per the CUDA Math API documentation:
// __nv_bfloat16 is the upper 16 bits of an IEEE fp32; conversions from float round to
// nearest even (NaN stays a NaN, overflow gives inf); __nv_bfloat162 holds .x (low half in
// memory) and .y. Like CUDA 12's cuda_bf16.h, it brings in cuda_fp16.h (__half).
#pragma once
#include <stdint.h>
#include <string.h>

#include "cuda_fp16.h"

struct __nv_bfloat16 { unsigned short __x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

static inline float __bfloat162float(__nv_bfloat16 b) {
    const uint32_t u = (uint32_t)b.__x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { r.__x = 0x7fffu; return r; }  // NaN: canonical
    u += 0x7fffu + ((u >> 16) & 1u);                                     // nearest, ties to even
    r.__x = (unsigned short)(u >> 16);
    return r;
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { __nv_bfloat16 r; r.__x = s; return r; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    __nv_bfloat162 r;
    r.x = __float2bfloat16_rn(lo);
    r.y = __float2bfloat16_rn(hi);
    return r;
}
