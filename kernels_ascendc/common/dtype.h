// The input dtype, chosen at compile time by DS_DTYPE (codes shared with
// deepselect_rt/ascend/variants.py): element, compare and bit-pattern types.
//
// bfloat16 is widened to float32 for the vector compare (exact); float16 and float32 compare
// in their own type.
#pragma once
#include "kernel_operator.h"

#define DS_DTYPE_F32 0
#define DS_DTYPE_F16 1
#define DS_DTYPE_BF16 2

#if DS_DTYPE == DS_DTYPE_F32
using ds_elem_t = float;
using ds_cmp_t = float;
using ds_bits_t = uint32_t;
#define DS_ELEM_BITS 32
#define DS_EXP_MASK 0x7F800000u
#define DS_ABS_MASK 0x7FFFFFFFu
#define DS_QNAN_BITS 0x7FC00000u
#elif DS_DTYPE == DS_DTYPE_F16
using ds_elem_t = half;
using ds_cmp_t = half;
using ds_bits_t = uint16_t;
#define DS_ELEM_BITS 16
#define DS_EXP_MASK 0x7C00u
#define DS_ABS_MASK 0x7FFFu
#define DS_QNAN_BITS 0x7E00u
#elif DS_DTYPE == DS_DTYPE_BF16
using ds_elem_t = bfloat16_t;
using ds_cmp_t = float;
using ds_bits_t = uint16_t;
#define DS_ELEM_BITS 16
#define DS_EXP_MASK 0x7F80u
#define DS_ABS_MASK 0x7FFFu
#define DS_QNAN_BITS 0x7FC0u
#else
#error "DS_DTYPE must be 0 (float32), 1 (float16) or 2 (bfloat16)"
#endif

// NaN: all exponent bits set and a non-zero mantissa, so the magnitude exceeds that of inf.
__aicore__ inline bool is_nan_bits(uint32_t b) {
    return (b & DS_ABS_MASK) > DS_EXP_MASK;
}

// A compare-type scalar from an element's bit pattern (bfloat16 bits are the top half of a float).
__aicore__ inline ds_cmp_t cmp_of_bits(uint32_t b) {
#if DS_DTYPE == DS_DTYPE_F16
    union { uint16_t u; half h; } v;
    v.u = (uint16_t)b;
    return v.h;
#else
    union { uint32_t u; float f; } v;
    v.u = DS_ELEM_BITS == 16 ? b << 16 : b;
    return v.f;
#endif
}

// -inf in the compare type: a floor that lets every non-NaN element through.
__aicore__ inline ds_cmp_t cmp_neg_inf() {
#if DS_DTYPE == DS_DTYPE_F16
    return cmp_of_bits(0xFC00u);
#else
    return cmp_of_bits(DS_ELEM_BITS == 16 ? 0xFF80u : 0xFF800000u);
#endif
}
