// CTA-wide exclusive prefix sums in thread order (deterministic), for compaction in column order.
#pragma once
#include "warp/scan.cuh"

// The CTA-wide part of ranks in column order (slot_ranks; cluster/compact.cuh): adds to
// base[] the flagged elements of the warps before this one (`run`: this warp's); returns the
// CTA's total.
template <int NT, int V>
__device__ __forceinline__ u32 warp_offsets(u32 run, u32 (&base)[V], u32* warp_totals) {
    static_assert(NT <= 1024, "one warp scans the warp totals");
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_totals[warp] = run;
    __syncthreads();
    const u32 t = lane < NT / 32 ? warp_totals[lane] : 0;
    const u32 incl = warp_inclusive_sum(t);
    const u32 before = __shfl_sync(DS_FULL_MASK, incl - t, warp);
    const u32 total = __shfl_sync(DS_FULL_MASK, incl, 31);
#pragma unroll
    for (int u = 0; u < V; ++u) base[u] += before;
    __syncthreads();  // warp_totals may be reused
    return total;
}

// Ranks of flagged elements when each warp holds a contiguous run of V slots per lane, slot u of
// lane l before slot u of lane l + 1 and after every slot u - 1 of the warp (the layout of a
// warp's coalesced loads). n[u]: this thread's flagged elements in slot u. On return base[u] is
// how many flagged elements of the CTA come before slot u of this thread; returns the CTA's
// total. warp_totals holds NT / 32 entries. Contains barriers: every thread must call it.
template <int NT, int V>
__device__ __forceinline__ u32 slot_ranks(const u32 (&n)[V], u32 (&base)[V], u32* warp_totals) {
    u32 run = 0;
#pragma unroll
    for (int u = 0; u < V; ++u) {
        const u32 incl = warp_inclusive_sum(n[u]);
        base[u] = run + incl - n[u];
        run += __shfl_sync(DS_FULL_MASK, incl, 31);
    }
    return warp_offsets<NT, V>(run, base, warp_totals);
}
