// The threshold tests of one 16-byte vector: a packed maximum first (most vectors stop there),
// then, for the vectors queued, the exact test of each element's key.
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

// Bit e set when element e of a queued vector (column col0 + e), whose keys (to_keys) are
// `keys`, reaches the threshold thr: a larger key, or thr's key at a column no later than
// thr's. The keys serve the append too: recomputing them per element for the test and again
// for the append, behind a float test, made this a large share of the kernel's instructions.
__device__ __forceinline__ u32 keys_reaching(const Vec& keys, u32 col0, u64 thr) {
    const u32 tk = comp_key(thr), last = comp_col(thr);  // thr = 0: every column, key >= 0
    const u32 ties = last < col0 ? 0u : last - col0 >= DS_VEC - 1 ? (1u << DS_VEC) - 1 : (2u << (last - col0)) - 1;
    u32 pass = 0;
#pragma unroll
    for (int e = 0; e < DS_VEC; ++e) {
        const u32 key = keys.b[e];
        if (key > tk || (key == tk && (ties >> e & 1))) pass |= 1u << e;
    }
    return pass;
}
