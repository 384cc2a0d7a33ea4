// A thread's elements in the cluster radix select: its 64-bit mask of valid elements, and the
// keys of its vectors (held as keys or as raw values, as the tier keeps them).
#pragma once
#include "cluster/config.cuh"

__device__ __forceinline__ bool bit(u64 mask, int i) { return (mask >> i) & 1; }
// The valid bits of this thread's vector u.
__device__ __forceinline__ u32 vec_bits(u64 valid, int u) { return (u32)(valid >> (u * DS_VEC)) & ((1u << DS_VEC) - 1); }

// The key of a packed maximum w of elements (the larger of the two halves' keys for the 16-bit
// dtypes): a key at or above each of them, and one of theirs. Not keys of the elements: those the
// compiler keeps live across the later passes, and they spill.
__device__ __forceinline__ u32 word_top_key(u32 w) {
#if DS_DTYPE == 0
    return key_of(w);
#else
    return max(key_of((bits_t)w), key_of((bits_t)(w >> 16)));
#endif
}
__device__ __forceinline__ u32 vec_top_key(const Vec& v) { return word_top_key(vec_max(v)); }

__device__ __forceinline__ u32 elem_key(const Vec& v, int e) { return KEYED ? (u32)v.b[e] : key_of(v.b[e]); }
// elem_key at a run-time e, by selects: v.b[e] would move v to local memory.
__device__ __forceinline__ u32 elem_key_at(const Vec& v, u32 e) {
#if DS_DTYPE == 0
    const u32 w = e & 2 ? (e & 1 ? v.v.w : v.v.z) : (e & 1 ? v.v.y : v.v.x);
    return KEYED ? w : key_of(w);
#else
    const u32 w = e & 4 ? (e & 2 ? v.v.w : v.v.z) : (e & 2 ? v.v.y : v.v.x);
    const bits_t b = (bits_t)(e & 1 ? w >> 16 : w);
    return KEYED ? (u32)b : key_of(b);
#endif
}
