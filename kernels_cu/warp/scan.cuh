// Warp-wide inclusive prefix sum.
#pragma once
#include "common/types.cuh"

__device__ __forceinline__ u32 warp_inclusive_sum(u32 v) {
    const u32 lane = threadIdx.x & 31;
#pragma unroll
    for (u32 o = 1; o < 32; o <<= 1) {
        u32 t = __shfl_up_sync(DS_FULL_MASK, v, o);
        if (lane >= o) v += t;
    }
    return v;
}
