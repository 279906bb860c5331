// Shim: half precision of the CPU emulator (see ../emu.h), per the CUDA Math API documentation
// ("Half Precision Conversion and Data Movement", "Half Comparison Functions"): __half is an
// IEEE 754 binary16 (1 sign, 5 exponent, 10 fraction bits: subnormals down to 2^-24, largest
// finite 65504); __float2half(_rn) and __double2half round to nearest even, once (subnormals
// included, overflow gives inf, a NaN gives the canonical NaN 0x7fff, as the host code of
// cuda_fp16.hpp does); __half2float is exact (a NaN gives the canonical fp32 NaN 0x7fffffff,
// its sign dropped, as there too); __half2 holds .x (low half in memory) and .y. As with the bf16
// shim, no arithmetic operators or conversion constructors: the functions only. CUDA 12's
// cuda_bf16.h includes this header (for __half), and so does the shim's.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

struct __half { unsigned short __x; };
struct __half2 { __half x, y; };
typedef __half half;
typedef __half2 half2;

// The binary16 bits nearest to d, ties to even. Every float is a double, so float inputs are
// rounded once too (through float a value could round twice: at a binary16 midpoint then to
// even, where the exact value was above or below it).
static inline unsigned short emu_half_bits_rn(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    const unsigned short sign = (unsigned short)((u >> 48) & 0x8000u);
    const uint64_t a = u & 0x7fffffffffffffffull;
    if (a > 0x7ff0000000000000ull) return 0x7fffu;  // NaN
    const int e = (int)(a >> 52) - 1023;            // |d| in [2^e, 2^(e+1))
    if (e >= 16) return sign | 0x7c00u;             // beyond 2^16 (inf included): inf
    if (e < -25) return sign;                       // below 2^-25 (half the smallest subnormal): 0
    const uint64_t m = (a & 0xfffffffffffffull) | (1ull << 52);  // |d| = m 2^(e-52)
    // The result's unit in the last place: 2^(e-10) for a normal binary16 (e >= -14), 2^-24
    // (fixed) for a subnormal one; q = |d| in those units, rounded.
    const int shift = e >= -14 ? 42 : 28 - e;
    uint64_t q = m >> shift;
    const uint64_t rem = m & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1))) q++;
    // Normal: q in [2^10, 2^11], so adding it to the exponent field carries the implicit bit
    // (and a q of 2^11 rounds up into the next binade, 65520 and beyond into inf). Subnormal:
    // q <= 2^10, where 2^10 is the smallest normal's encoding.
    return (unsigned short)(sign | (e >= -14 ? ((unsigned)(e + 14) << 10) + q : q));
}

static inline float __half2float(__half h) {
    const unsigned e = (h.__x >> 10) & 31u, m = h.__x & 0x3ffu;
    float f;
    if (e == 31 && m) {
        const uint32_t nan = 0x7fffffffu;
        memcpy(&f, &nan, sizeof f);
        return f;
    }
    if (e == 31) f = INFINITY;
    else if (e == 0) f = ldexpf((float)m, -24);  // subnormal (or zero): m 2^-24, exact
    else f = ldexpf((float)(m | 0x400u), (int)e - 25);
    return (h.__x & 0x8000u) ? -f : f;
}
static inline __half __double2half(double d) { __half r; r.__x = emu_half_bits_rn(d); return r; }
static inline __half __float2half_rn(float f) { return __double2half(f); }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline __half __ushort_as_half(unsigned short s) { __half r; r.__x = s; return r; }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half2 __floats2half2_rn(float lo, float hi) {
    __half2 r;
    r.x = __float2half_rn(lo);
    r.y = __float2half_rn(hi);
    return r;
}
// -1 for -inf, 1 for +inf, 0 otherwise.
static inline int __hisinf(__half h) { return (h.__x & 0x7fffu) == 0x7c00u ? (h.__x & 0x8000u ? -1 : 1) : 0; }
static inline bool __hisnan(__half h) { return (h.__x & 0x7fffu) > 0x7c00u; }
