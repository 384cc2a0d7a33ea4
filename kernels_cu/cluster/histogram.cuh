// The histogram merge of a radix select run by every CTA of a cluster (radix_digits' Hist):
// each CTA counts its own elements and copies its histogram, with its sums of 16 bins, into
// every CTA's shared memory (bulk copies that an mbarrier of the receiver counts); warp 0 of
// every CTA waits for all of them there and picks the same digit from local copies.
// (Loading the others' histograms after a barrier cost a DSMEM round trip; a cluster barrier
// after plain remote stores made every thread wait for their acknowledgement.)
#pragma once
#include "cluster/primitives.cuh"
#include "block/radix_select.cuh"

// Most CTAs a cluster can have (the non-portable size; deepselect_rt/cuda/plan.py MAX_SPLIT).
constexpr u32 MAX_CLUSTER = 16;
// A CTA's histogram as copied: 256 bins, then 16 sums of 16 bins each.
constexpr u32 HIST_WORDS = 256 + 16;

// Shared memory of the merge. Pass p fills fill[p & 1] (bins, then the sums warp 0 adds),
// copies it into every CTA's inbox[p & 1] and counts the arrivals on arrived[p & 1].
struct ClusterHistograms {
    alignas(16) u32 fill[2][HIST_WORDS];
    alignas(16) u32 inbox[2][MAX_CLUSTER][HIST_WORDS];
    u64 arrived[2];  // mbarriers: one arrival (this CTA's) and every CTA's copied bytes
    u32 above[MAX_CLUSTER];  // every CTA's elements above the buckets of the select's passes
    u32 take, start; // place(): this CTA's ties at K taken, the output slot of its first winner
};
constexpr u32 HIST_BYTES = HIST_WORDS * (u32)sizeof(u32);
static_assert(HIST_BYTES % 16 == 0, "bulk copies move multiples of 16 bytes");

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

// For lanes 0..15: the elements of CTA `lane` (of `size`) in the bins above `digit` of a pass's
// copies. Lanes 0..15 add the sums of the groups above digit's, lanes 16..31 the bins above it
// within its group, of CTA lane - 16; four 16-byte loads a lane.
__device__ __forceinline__ u32 above_digit(const u32 (*inbox)[HIST_WORDS], u32 digit, u32 size) {
    const u32 lane = threadIdx.x & 31, c = lane & 15, group = digit >> 4;
    const u32 from = lane < 16 ? group + 1 : (digit & 15) + 1;
    const uint4* w = reinterpret_cast<const uint4*>(inbox[c] + (lane < 16 ? 256 : 16 * group));
    u32 n = 0;
    // One load at a time: it runs while the CTA holds its row in registers.
    if (c < size)
#pragma unroll 1
        for (u32 i = 0; i < 4; ++i) {
            const uint4 q = w[i];
            n += (4 * i >= from ? q.x : 0) + (4 * i + 1 >= from ? q.y : 0) + (4 * i + 2 >= from ? q.z : 0) +
                 (4 * i + 3 >= from ? q.w : 0);
        }
    return n + __shfl_xor_sync(DS_FULL_MASK, n, 16);
}

template <int NT>
struct ClusterHistogram {
    ClusterHistograms& sh;
    u32 size;        // CTAs in the cluster
    u32 rank;        // this CTA's rank in it
    u32 passes = 0;  // passes merged so far, over every select run with this object

    // Before the cluster barrier that precedes the first pass (mbar_init).
    __device__ static __forceinline__ void init(ClusterHistograms& sh) {
        if (threadIdx.x == 0) {
            mbar_init(&sh.arrived[0], 1);
            mbar_init(&sh.arrived[1], 1);
            mbar_init_fence();
        }
        for (u32 i = threadIdx.x; i < 256; i += NT) sh.fill[0][i] = 0;  // the later passes' are zeroed by pick
        if (threadIdx.x < MAX_CLUSTER) sh.above[threadIdx.x] = 0;
    }

    // The warp that counts every CTA's elements above each pass's digit, after the pick, into
    // sh.above (the last warp: in the compacting tiers it holds no candidates on normal rows).
    __device__ static __forceinline__ bool counting() { return threadIdx.x >= NT - 32; }

    // place()'s take and start (after a barrier that follows it).
    __device__ __forceinline__ u32 take() const { return sh.take; }
    __device__ __forceinline__ u32 start() const { return sh.start; }

    // A new select over the same histograms: place() counts from its first pass on (every
    // thread; the counting warp's pick before is done).
    __device__ __forceinline__ void restart() {
        if (counting() && (threadIdx.x & 31) < MAX_CLUSTER) sh.above[threadIdx.x & 31] = 0;
    }

    // The fill histogram, zeroed (pass 0's by init, later ones by the pick before).
    __device__ __forceinline__ u32* begin(SelectScratch&) { return sh.fill[passes & 1]; }

    // The counting warp, after the select's last pass left `remaining` of the k largest in its
    // bucket (the ties at K): from every CTA's elements above K (sh.above) and at K (the last
    // pass's copies), each CTA's ties taken in CTA (column) order and where its winners start in
    // the row's output. Stores this CTA's take and start (read them after a barrier). Every CTA
    // places the same way.
    __device__ __forceinline__ void place(SelectScratch& s, u32 remaining) {
        const u32 lane = threadIdx.x & 31;
        const u32 (*inbox)[HIST_WORDS] = sh.inbox[(passes - 1) & 1];
        const u32 a = lane < size ? sh.above[lane] : 0;
        const u32 t = lane < size ? inbox[lane][s.digit] : 0;
        const u32 ties_before = warp_inclusive_sum(t) - t;
        const u32 take = ties_before >= remaining ? 0 : min(t, remaining - ties_before);
        const u32 wins = lane < size ? a + take : 0;
        const u32 start = warp_inclusive_sum(wins) - wins;
        if (lane == rank) {
            sh.take = take;
            sh.start = start;
        }
    }

    // Every CTA copies pass p's bins and sums to every CTA; warp 0 waits for all of them on
    // arrived[p & 1], whose phase p / 2 they complete. A CTA copies pass p only after it has
    // received every CTA's pass p - 1, which each sent after its warp 0 had read pass p - 2 from
    // the same buffer. The parity runs on across selects, so one that stops after a pass
    // cannot race the next.
    __device__ __forceinline__ Pick pick(SelectScratch& s, u32 remaining) {
        static_assert(MAX_CLUSTER == 16, "two half-warps of 8 CTAs");
        const u32 q = passes & 1;
        u32* fill = sh.fill[q];
        u32 (*inbox)[HIST_WORDS] = sh.inbox[q];
        const u32 lane = threadIdx.x & 31;
        fence_proxy_async();  // this thread's counts, for the copies
        __syncthreads();  // this CTA's histogram is complete
        if (threadIdx.x < 32) {
            // The sums of 16 bins after the bins (lanes 2g and 2g + 1 add group g), then one
            // copy a CTA.
            const uint4 a = reinterpret_cast<const uint4*>(fill)[2 * lane];
            const uint4 b = reinterpret_cast<const uint4*>(fill)[2 * lane + 1];
            const u32 eight = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
            const u32 group = eight + __shfl_down_sync(DS_FULL_MASK, eight, 1);
            if (!(lane & 1)) fill[256 + lane / 2] = group;
            fence_proxy_async();
            __syncwarp();
            // This CTA's own row by plain stores: compute-sanitizer's memcheck rejected bulk
            // copies whose destination is the issuing CTA.
            if (lane == 0) mbar_arrive_expect(&sh.arrived[q], (size - 1) * HIST_BYTES);
            if (lane < size && lane != rank)
                cluster_copy(cluster_map(inbox[rank], lane), fill, HIST_BYTES, cluster_map(&sh.arrived[q], lane));
            for (u32 j = lane; j < HIST_WORDS / 4; j += 32)
                reinterpret_cast<uint4*>(inbox[rank])[j] = reinterpret_cast<const uint4*>(fill)[j];
            __syncwarp();
        }
        // A second block for the wait and the pick: tools/cluster_phases.py marks between them.
        if (threadIdx.x < 32) {
            mbar_wait(&sh.arrived[q], (passes >> 1) & 1);
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
            // The next pass's bins. The last pass copied them from there, and those copies have
            // landed: every CTA sent this pass's after receiving them.
            for (u32 j = lane; j < 64; j += 32) reinterpret_cast<uint4*>(sh.fill[q ^ 1])[j] = make_uint4(0, 0, 0, 0);
        }
        ++passes;
        __syncthreads();
        // The pass's elements above its digit, of every CTA. Its copies stay until those of the
        // pass after next, which every CTA sends only after this one's next.
        if (counting()) {
            const u32 a = above_digit(inbox, s.digit, size);
            if (lane < MAX_CLUSTER) sh.above[lane] += a;
        }
        return {s.digit, s.above, s.bucket};
    }
};
