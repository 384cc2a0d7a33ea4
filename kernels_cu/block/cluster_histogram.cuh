// The histogram merge of a radix select run by every CTA of a cluster (radix_digits' Hist):
// each CTA counts its own elements, and every CTA picks the same digit from the cluster's sums.
#pragma once
#include "block/cluster.cuh"
#include "block/radix_select.cuh"

// Most CTAs a cluster can have (the non-portable size; deepselect_rt/cuda/plan.py MAX_SPLIT).
constexpr u32 MAX_CLUSTER = 16;
// A CTA's histogram of one pass: 256 bins, then GROUPS sums of 16 bins each.
constexpr u32 GROUPS = 16;
constexpr u32 HIST_WORDS = 256 + GROUPS;

// The sum over CTAs [first, first + 8) of the cluster (those below `size`) of the word at `p`.
__device__ __forceinline__ u32 cluster_sum8(const u32* p, u32 first, u32 size) {
    u32 sum = 0;
#pragma unroll
    for (u32 c = 0; c < 8; ++c)
        if (first + c < size) sum += cluster_load_u32(cluster_map(p, first + c));
    return sum;
}

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
    u32 (*own)[HIST_WORDS];  // this CTA's histograms, by pass parity, read by the whole cluster
    u32 size;                // CTAs in the cluster
    u32 passes = 0;          // passes merged so far, over every select run with this object

    // Both buffers start zeroed; then pass p zeroes the other parity's buffer after its cluster
    // barrier, which no CTA passes before it has read pass p - 1's. The parity runs on across
    // selects, so one that stops after a pass cannot race the next.
    __device__ __forceinline__ u32* begin(SelectScratch&) {
        if (passes == 0) {
            for (u32 i = threadIdx.x; i < HIST_WORDS; i += NT) own[0][i] = own[1][i] = 0;
            __syncthreads();
        }
        return own[passes & 1];
    }

    // Warp 0 of every CTA picks the digit in two rounds of remote loads: the CTAs' sums of 16
    // bins give the group holding the remaining-th largest, then that group's 16 bins of every
    // CTA give the digit (every CTA loading all 256 bins of every CTA, 4096 remote loads a CTA,
    // took ~2 us a pass on an H200). Lane l sums index 15 - l % 16 over CTAs l / 16 * 8 + [0, 8).
    __device__ __forceinline__ void pick(SelectScratch& s, u32 remaining) {
        static_assert(MAX_CLUSTER == 16 && GROUPS == 16, "two half-warps of 8 CTAs; 16 groups of 16 bins");
        u32* h = own[passes & 1];
        const u32 lane = threadIdx.x & 31;
        __syncthreads();  // this CTA's histogram is complete
        if (threadIdx.x < 32) {
            const uint4 a = *reinterpret_cast<const uint4*>(h + 8 * lane);
            const uint4 b = *reinterpret_cast<const uint4*>(h + 8 * lane + 4);
            u32 sum = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
            sum += __shfl_xor_sync(DS_FULL_MASK, sum, 1);
            if (!(lane & 1)) h[256 + lane / 2] = sum;
        }
        cluster_sync();
        if (threadIdx.x < 32) {
            const u32 i = 15 - (lane & 15), first = (lane >> 4) * 8;
            u32 n = cluster_sum8(h + 256 + i, first, size);
            n += __shfl_xor_sync(DS_FULL_MASK, n, 16);
            u32 above, count;
            const u32 group = 15 - first_reaching(n, 0, remaining, above, count);
            n = cluster_sum8(h + 16 * group + i, first, size);
            n += __shfl_xor_sync(DS_FULL_MASK, n, 16);
            const u32 digit = 16 * group + 15 - first_reaching(n, above, remaining, above, count);
            if (lane == 0) {
                s.digit = digit;
                s.above = above;
                s.bucket = count;
            }
        } else {
            u32* next = own[(passes + 1) & 1];
            for (u32 j = threadIdx.x - 32; j < HIST_WORDS; j += NT - 32) next[j] = 0;
        }
        ++passes;
        __syncthreads();
    }
};
