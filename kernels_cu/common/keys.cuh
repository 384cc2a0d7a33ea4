// Order-preserving keys and the (key, column) composite that makes every element unique.
//
// key: unsigned, ordered like the contract's total order (-inf < ... < -0.0 < +0.0 < ... < +inf),
// with every NaN mapped to the largest key (so NaN ranks above +inf and NaNs tie: "propagate").
// composite: key in the high 32 bits, ~column in the low 32 bits, so a larger composite means a
// larger key or, for equal keys, a LOWER column. Columns are < 2**31, hence every composite of a
// real element is >= 2**31 and 0 is free to mean "nothing" (padding, the initial threshold).
#pragma once
#include "common/dtype.cuh"

#define DS_SIGN_BIT ((u32)1 << (DS_ELEM_BITS - 1))
#define DS_KEY_MASK ((u32)(((u64)1 << DS_ELEM_BITS) - 1))
#define DS_KEY_NAN DS_KEY_MASK

__device__ __forceinline__ u32 key_of(bits_t b) {
    if (is_nan_bits(b)) return DS_KEY_NAN;
    u32 x = (u32)b;
    return (x & DS_SIGN_BIT) ? (~x & DS_KEY_MASK) : (x | DS_SIGN_BIT);
}

// The keys of a vector's elements, in place (two at once for the 16-bit dtypes: the sign picks
// the bits to flip, and a NaN half becomes all ones).
__device__ __forceinline__ void to_keys(Vec& v) {
    u32* w = reinterpret_cast<u32*>(&v.v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#if DS_DTYPE == 0
        const u32 nan = (w[i] & 0x7fffffffu) > 0x7f800000u ? ~0u : 0u;
        w[i] = (w[i] ^ ((u32)((int)w[i] >> 31) | 0x80000000u)) | nan;
#else
        const u32 neg = (w[i] >> 15) & 0x00010001u;
        const u32 nan = __vcmpgtu2(w[i] & 0x7fff7fffu, DS_DTYPE == 2 ? 0x7f807f80u : 0x7c007c00u);
        w[i] = (w[i] ^ (neg * 0x7fffu | 0x80008000u)) | nan;
#endif
    }
}

// Inverse of key_of for non-NaN keys (a NaN's payload is lost: callers gather NaN values).
__device__ __forceinline__ bits_t bits_of_key(u32 key) {
    return (bits_t)((key & DS_SIGN_BIT) ? (key ^ DS_SIGN_BIT) : (~key & DS_KEY_MASK));
}

__device__ __forceinline__ u64 make_comp(u32 key, u32 col) { return ((u64)key << 32) | (u32)~col; }
__device__ __forceinline__ u32 comp_col(u64 c) { return ~(u32)c; }
__device__ __forceinline__ u32 comp_key(u64 c) { return (u32)(c >> 32); }

// A cheap first test of the elements that may reach threshold `thr`: every such element (and
// every NaN: NaN compares false) passes !(f < value), and one equal to `value` reaches T only at
// a column <= tie_col (ties go to the lower column), so past it !(f < above) is the test. With
// heavy ties at T's key (few distinct values, mostly -inf) that rejects most vectors before the
// per-element test, which would otherwise make such rows much slower than normal ones.
struct Floor {
    float value, above;  // above: the next float above value, or value where no bound applies
    u32 tie_col;

    // The test's float for elements at columns >= col.
    __device__ __forceinline__ float from(u32 col) const { return col <= tie_col ? value : above; }
};

__device__ __forceinline__ Floor threshold_floor(u64 thr) {
    const u32 key = comp_key(thr);
    const float all = __int_as_float(0xff800000);  // -inf: test everything
    if (thr == 0 || key == DS_KEY_NAN) return {all, all, 0xffffffffu};
    const float value = to_float(bits_of_key(key));
    // -0.0 and +0.0 are equal floats but different keys: no column bound at zero.
    if (value == 0.f) return {value, value, 0xffffffffu};
    return {value, nextafterf(value, __int_as_float(0x7f800000)), comp_col(thr)};
}

// Highest bit position (plus one) a composite can use: key bits above the 32 column bits.
#define DS_COMP_BITS (32 + DS_ELEM_BITS)
