// Element traits of the input dtype chosen at compile time by DS_DTYPE
// (0 float32, 1 float16, 2 bfloat16; the codes of deepselect_rt/cuda/variants.py).
// Elements are handled as raw bit patterns: no cuda_fp16/cuda_bf16 headers are needed.
#pragma once
#include "common/types.cuh"

#if DS_DTYPE == 0
typedef u32 bits_t;
#define DS_ELEM_BITS 32
#elif DS_DTYPE == 1 || DS_DTYPE == 2
typedef u16 bits_t;
#define DS_ELEM_BITS 16
#else
#error "DS_DTYPE must be 0 (float32), 1 (float16) or 2 (bfloat16)"
#endif

// The quiet NaN NumPy and torch produce for float('nan') in this dtype (the sentinel value).
#if DS_DTYPE == 0
#define DS_CANONICAL_NAN 0x7fc00000u
#elif DS_DTYPE == 2
#define DS_CANONICAL_NAN 0x7fc0u
#else
#define DS_CANONICAL_NAN 0x7e00u
#endif

// -inf, twice in a 32-bit word for the 16-bit dtypes.
#if DS_DTYPE == 0
#define DS_NEG_INF_WORD 0xff800000u
#elif DS_DTYPE == 2
#define DS_NEG_INF_WORD 0xff80ff80u
#else
#define DS_NEG_INF_WORD 0xfc00fc00u
#endif

#define DS_ELEM_BYTES (DS_ELEM_BITS / 8)
// Elements per 16-byte vector load.
#define DS_VEC (16 / DS_ELEM_BYTES)

// One 16-byte vector load, as raw bits or as elements.
union Vec {
    uint4 v;
    bits_t b[DS_VEC];
};

__device__ __forceinline__ float to_float(bits_t b) {
#if DS_DTYPE == 0
    return __uint_as_float(b);
#elif DS_DTYPE == 2
    return __uint_as_float((u32)b << 16);
#else
    float f;
    asm("{ .reg .b16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(b));
    return f;
#endif
}

__device__ __forceinline__ bool is_nan_bits(bits_t b) {
#if DS_DTYPE == 0
    return (b & 0x7fffffffu) > 0x7f800000u;
#elif DS_DTYPE == 2
    return (b & 0x7fffu) > 0x7f80u;
#else
    return (b & 0x7fffu) > 0x7c00u;
#endif
}

// Packed maximum that keeps NaN (sm_80+), so a NaN never hides behind a number.
__device__ __forceinline__ u32 max2_nan(u32 a, u32 b) {
    u32 d;
#if DS_DTYPE == 0
    asm("max.NaN.f32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#elif DS_DTYPE == 1
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#endif
    return d;
}

// The packed maximum of a vector's elements (one per 16-bit half for the 16-bit dtypes).
__device__ __forceinline__ u32 vec_max(const Vec& v) {
    return max2_nan(max2_nan(v.v.x, v.v.y), max2_nan(v.v.z, v.v.w));
}
