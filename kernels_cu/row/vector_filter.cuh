// The threshold test of one 16-byte vector: a packed maximum first (most vectors stop there),
// then the exact composite test of each element.
#pragma once
#include "common/keys.cuh"

// False when no element of v can reach a threshold whose float test is `floor` (Floor::from).
__device__ __forceinline__ bool vector_may_pass(const Vec& v, float floor) {
    const u32 m = vec_max(v);
#if DS_DTYPE == 0
    return !(__uint_as_float(m) < floor);
#else
    return !(to_float((bits_t)m) < floor) || !(to_float((bits_t)(m >> 16)) < floor);
#endif
}

// Bit e set when element e (column col0 + e) survives the threshold thr.
__device__ __forceinline__ u32 filter(const Vec& v, u32 col0, u64 thr, const Floor& floor) {
    if (!vector_may_pass(v, floor.from(col0))) return 0;
    u32 pass = 0;
#pragma unroll
    for (int e = 0; e < DS_VEC; ++e) {
        if (!(to_float(v.b[e]) < floor.value) && make_comp(key_of(v.b[e]), col0 + e) >= thr) pass |= 1u << e;
    }
    return pass;
}
