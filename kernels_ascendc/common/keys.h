// Order-preserving keys and the (key, column) composite, for the scalar unit.
//
// key: unsigned, ordered like the contract's total order (-inf < ... < -0.0 < +0.0 < ... < +inf),
// every NaN mapped to the largest key (NaN ranks above +inf and NaNs tie: "propagate").
// composite: key in the high 32 bits, ~column in the low 32 bits, so a larger composite is a
// larger key or, for equal keys, a LOWER column. The same encoding as kernels_cu/common/keys.cuh.
#pragma once
#include "common/dtype.h"

#define DS_SIGN_BIT ((uint32_t)1 << (DS_ELEM_BITS - 1))
#define DS_KEY_MASK ((uint32_t)(((uint64_t)1 << DS_ELEM_BITS) - 1))
#define DS_KEY_NAN DS_KEY_MASK

__aicore__ inline uint32_t key_of(uint32_t b) {
    if (is_nan_bits(b)) return DS_KEY_NAN;
    return (b & DS_SIGN_BIT) ? (~b & DS_KEY_MASK) : (b | DS_SIGN_BIT);
}

// Inverse of key_of for non-NaN keys (a NaN's payload is lost: the writer re-reads NaN values).
__aicore__ inline uint32_t bits_of_key(uint32_t key) {
    return (key & DS_SIGN_BIT) ? (key ^ DS_SIGN_BIT) : (~key & DS_KEY_MASK);
}

__aicore__ inline uint64_t make_comp(uint32_t key, uint32_t col) {
    return ((uint64_t)key << 32) | (uint32_t)~col;
}
__aicore__ inline uint32_t comp_key(uint64_t c) { return (uint32_t)(c >> 32); }
__aicore__ inline uint32_t comp_col(uint64_t c) { return ~(uint32_t)c; }

// The vector pre-filter's floor for threshold composite `thr`: every element that can still beat
// thr compares >= it (equal keys included: the scalar test settles ties by column). A NaN
// threshold gives -inf; NaN lanes pass the filter on their own.
__aicore__ inline ds_cmp_t floor_of(uint64_t thr) {
    uint32_t key = comp_key(thr);
    return key == DS_KEY_NAN ? cmp_neg_inf() : cmp_of_bits(bits_of_key(key));
}
