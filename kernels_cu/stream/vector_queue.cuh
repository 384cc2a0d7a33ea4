// Per-warp queues of 16-byte vectors that may reach the threshold (their packed maximum does),
// so the exact per-element test runs with every lane busy. Tested in place, a vector with one
// such lane in 32 cost the whole warp the per-element test and the append, and most vectors
// that reach the test are such vectors.
//
// Compile-time parameters: DS_THREADS.
#pragma once
#include "common/dtype.cuh"

// Entries per warp, a power of two: fewer than 32 stay after a drain, and one load adds <= 32.
constexpr u32 QUEUE_CAP = 64;

struct VectorQueue {
    uint4 vec[DS_THREADS / 32][QUEUE_CAP];
    u32 index[DS_THREADS / 32][QUEUE_CAP];  // the vector's index in the range's vectors
};

// A warp's view of its queue: a ring of `count` entries from `head` (both warp-uniform).
struct WarpQueue {
    uint4* vec;
    u32* index;
    u32 head, count;

    __device__ __forceinline__ void init(VectorQueue& q) {
        const u32 warp = threadIdx.x >> 5;
        vec = q.vec[warp];
        index = q.index[warp];
        head = count = 0;
    }

    // Queues this lane's vector v (vector index vi) when `may`. Every lane of the warp calls it.
    __device__ __forceinline__ void push(bool may, const Vec& v, u32 vi) {
        const u32 lanes = __ballot_sync(DS_FULL_MASK, may);
        if (may) {
            const u32 before = __popc(lanes & ((1u << (threadIdx.x & 31)) - 1));
            const u32 slot = (head + count + before) & (QUEUE_CAP - 1);
            vec[slot] = v.v;
            index[slot] = vi;
        }
        count += __popc(lanes);
    }

    // Takes up to 32 entries, one a lane: `take` of them (the first `take` lanes get one). The
    // caller passes them to `use(valid, v, vi)`; every lane of the warp calls it.
    template <class Use>
    __device__ __forceinline__ void pop(u32 take, Use use) {
        __syncwarp();  // the pushes are visible
        const u32 lane = threadIdx.x & 31;
        const u32 slot = (head + lane) & (QUEUE_CAP - 1);
        Vec v;
        u32 vi = 0;
        v.v = make_uint4(0, 0, 0, 0);
        if (lane < take) {
            v.v = vec[slot];
            vi = index[slot];
        }
        __syncwarp();  // read before a later push reuses the slots
        head = (head + take) & (QUEUE_CAP - 1);
        count -= take;
        use(lane < take, v, vi);
    }
};
