// CTA-wide exclusive prefix sum of one flag per thread, in thread order (deterministic).
#pragma once
#include "common/types.cuh"

template <int NT>
struct FlagScan {
    u32 warp_totals[NT / 32];
    u32 total;
};

// Returns this thread's rank among the flagged threads; sets *total to the flagged count.
// Contains barriers: every thread of the CTA must call it.
template <int NT>
__device__ __forceinline__ u32 cta_flag_rank(bool flag, FlagScan<NT>& s, u32* total) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 bal = __ballot_sync(DS_FULL_MASK, flag);
    if (lane == 0) s.warp_totals[warp] = __popc(bal);
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 run = 0;
        for (int w = 0; w < NT / 32; ++w) {
            const u32 t = s.warp_totals[w];
            s.warp_totals[w] = run;
            run += t;
        }
        s.total = run;
    }
    __syncthreads();
    const u32 rank = s.warp_totals[warp] + __popc(bal & ((1u << lane) - 1));
    *total = s.total;
    __syncthreads();
    return rank;
}
