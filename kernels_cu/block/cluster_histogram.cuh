// The histogram merge of a radix select run by every CTA of a cluster (radix_digits' Hist):
// each CTA counts its own elements and pushes its histogram, with its sums of 16 bins, into
// every CTA's shared memory before the cluster barrier; after it, warp 0 of every CTA picks the
// same digit from local copies. (Loading the others' histograms after the barrier cost a DSMEM
// round trip, ~1,500 cycles on an H200, on top of the barrier.)
#pragma once
#include "block/cluster.cuh"
#include "block/radix_select.cuh"

// Most CTAs a cluster can have (the non-portable size; deepselect_rt/cuda/plan.py MAX_SPLIT).
constexpr u32 MAX_CLUSTER = 16;
// A CTA's histogram as pushed: 256 bins, then 16 sums of 16 bins each.
constexpr u32 HIST_WORDS = 256 + 16;

// Shared memory of the merge: this CTA's fill, and every CTA's histogram of a pass by parity.
struct ClusterHistograms {
    u32 fill[256];
    u32 inbox[2][MAX_CLUSTER][HIST_WORDS];
};

// Lanes 0..15 hold n[i] for i from the top (i = 15 - lane); of those whose running sum from the
// top, plus `base`, reaches `remaining`, the first: returns its lane; `before` gets base plus
// the sum above it and `count` its n. Lanes 16..31 hold copies and are ignored.
__device__ __forceinline__ u32 first_reaching(u32 n, u32 base, u32 remaining, u32& before, u32& count) {
    const u32 lane = threadIdx.x & 31;
    const u32 mine = lane < 16 ? n : 0;
    const u32 incl = warp_inclusive_sum(mine);
    const u32 at = __ffs(__ballot_sync(DS_FULL_MASK, lane < 16 && base + incl >= remaining)) - 1;
    before = base + __shfl_sync(DS_FULL_MASK, incl - mine, at);
    count = __shfl_sync(DS_FULL_MASK, mine, at);
    return at;
}

template <int NT>
struct ClusterHistogram {
    ClusterHistograms& sh;
    u32 size;        // CTAs in the cluster
    u32 rank;        // this CTA's rank in it
    u32 passes = 0;  // passes merged so far, over every select run with this object

    // The fill histogram, zeroed: before the first pass here, later by the pick before it.
    __device__ __forceinline__ u32* begin(SelectScratch&) {
        if (passes == 0) {
            for (u32 i = threadIdx.x; i < 256; i += NT) sh.fill[i] = 0;
            __syncthreads();
        }
        return sh.fill;
    }

    // Pass p pushes to inbox[p & 1]: a CTA pushes only after the barrier of pass p - 1, which no
    // CTA passes before its warp 0 has read pass p - 2's inbox. The parity runs on across
    // selects, so one that stops after a pass cannot race the next.
    __device__ __forceinline__ void pick(SelectScratch& s, u32 remaining) {
        static_assert(MAX_CLUSTER == 16, "two half-warps of 8 CTAs");
        u32 (*inbox)[HIST_WORDS] = sh.inbox[passes & 1];
        const u32 lane = threadIdx.x & 31;
        __syncthreads();  // this CTA's histogram is complete
        for (u32 t = threadIdx.x; t < 64 * size; t += NT)  // 64 vectors of 4 bins to each CTA
            cluster_store_v4(cluster_map(&inbox[rank][4 * (t & 63)], t >> 6), reinterpret_cast<const uint4*>(sh.fill)[t & 63]);
        if (threadIdx.x < 32) {  // the sums of 16 bins: lane l's group l % 16 to the CTAs c with c % 2 == l / 16
            const uint4 a = reinterpret_cast<const uint4*>(sh.fill)[2 * lane];
            const uint4 b = reinterpret_cast<const uint4*>(sh.fill)[2 * lane + 1];
            const u32 eight = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
            const u32 g = lane & 15;
            const u32 group = __shfl_sync(DS_FULL_MASK, eight, 2 * g) + __shfl_sync(DS_FULL_MASK, eight, 2 * g + 1);
            for (u32 c = lane >> 4; c < size; c += 2) cluster_store_u32(cluster_map(&inbox[rank][256 + g], c), group);
        }
        cluster_sync();
        if (threadIdx.x < 32) {
            // Lane l sums index 15 - l % 16 over CTAs l / 16 * 8 + [0, 8): first the group
            // holding the remaining-th largest, then the digit among its bins.
            const u32 i = 15 - (lane & 15), first = (lane >> 4) * 8;
            const auto sum8 = [&](u32 word) {
                u32 n = 0;
#pragma unroll
                for (u32 c = 0; c < 8; ++c) n += first + c < size ? inbox[first + c][word] : 0;
                return n + __shfl_xor_sync(DS_FULL_MASK, n, 16);
            };
            u32 above, count;
            const u32 group = 15 - first_reaching(sum8(256 + i), 0, remaining, above, count);
            const u32 digit = 16 * group + 15 - first_reaching(sum8(16 * group + i), above, remaining, above, count);
            if (lane == 0) {
                s.digit = digit;
                s.above = above;
                s.bucket = count;
            }
        } else {
            for (u32 j = threadIdx.x - 32; j < 256; j += NT - 32) sh.fill[j] = 0;  // pushed before the barrier
        }
        ++passes;
        __syncthreads();
    }
};
