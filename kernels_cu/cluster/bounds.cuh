// The one exchange before the digit passes: each CTA pushes its bounds (its largest key, and
// the prefilter's where that runs) into every CTA's shared memory.
#pragma once
#include "cluster/primitives.cuh"
#include "cluster/shared.cuh"

// Stores `mine` at slots[rank] of every CTA of the cluster, from threads 0 .. split - 1: the
// others' by st.async, which their mbarrier `arrived` counts; this CTA's own by a plain store
// (visible to warp 0 after a __syncwarp). Thread 0 first arms this CTA's `arrived` for the other
// CTAs' stores. Warp 0 reads the slots after mbar_wait(arrived).
__device__ __forceinline__ void push_to_cluster(uint4* slots, u64* arrived, uint4 mine, u32 split, u32 rank) {
    if (threadIdx.x == 0) mbar_arrive_expect(arrived, (split - 1) * (u32)sizeof(uint4));
    if (threadIdx.x < split) {
        if (threadIdx.x == rank) slots[rank] = mine;
        else cluster_store_async(cluster_map(&slots[rank], threadIdx.x), mine, cluster_map(arrived, threadIdx.x));
    }
}

// This CTA's largest key, in threads 0 .. split - 1 (after a barrier that follows the warps'):
// the prefiltered tiers' atomic maximum, the others' largest of the warps'.
__device__ __forceinline__ u32 cta_top(const Shared& sh) {
    if (PREFILTERED) return sh.cta_max;
    u32 top = 0;
#pragma unroll 8
    for (u32 w = 0; w < NT / 32; ++w) top = max(top, sh.warp_tops[w]);
    return top;
}

// Warp 0, after the wait for every CTA's bounds: the row's largest key (NaN's when it has one)
// to sh.top.
__device__ __forceinline__ void store_row_top(u32 split, Shared& sh) {
    const u32 top = __reduce_max_sync(DS_FULL_MASK, threadIdx.x < split ? sh.bounds[threadIdx.x].z : 0);
    if (threadIdx.x == 0) sh.top = top;
}

// The row's largest key to sh.top, for every thread: each CTA's pushed to every CTA.
__device__ __forceinline__ void row_top(u32 split, u32 rank, Shared& sh) {
    push_to_cluster(sh.bounds, &sh.bounds_arrived, make_uint4(0, 0, threadIdx.x < split ? cta_top(sh) : 0, 0), split, rank);
    if (threadIdx.x < 32) {
        mbar_wait(&sh.bounds_arrived, 0);
        __syncwarp();  // this CTA's own, stored by lane `rank`
        store_row_top(split, sh);
    }
    __syncthreads();
}
