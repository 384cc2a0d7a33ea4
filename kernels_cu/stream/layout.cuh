// Where a streaming CTA's work and shared memory lie: its slice of a split row, and the warps'
// vector queues and the ring after the candidate buffer.
#pragma once
#include "stream/stream_range.cuh"

// The warps' vector queues follow Shared, then the ring of blocks (deepselect_rt/cuda/plan.py
// stream_smem_bytes: the candidate buffer, _STREAM_SCRATCH_BYTES, 40 bytes a thread, the ring).
constexpr u32 QUEUE_OFFSET = (sizeof(Shared) + 15) / 16 * 16;
constexpr u32 RING_OFFSET = QUEUE_OFFSET + sizeof(VectorQueue);
static_assert(QUEUE_OFFSET <= sizeof(u64) * CAP + 1088, "plan.py's _STREAM_SCRATCH_BYTES covers Shared");
static_assert(sizeof(VectorQueue) == 40 * DS_THREADS && RING_OFFSET % 16 == 0, "plan.py's queue bytes");
static_assert(sizeof(VectorRing) == 16 * DS_STAGES * DS_LOADS * DS_THREADS, "plan.py's ring bytes");

// Slice `c` of `s` of [lo, hi): whole 16-byte vectors of the row except at its ends, so every
// slice but the row's own edges starts aligned when the row does.
__device__ __forceinline__ void slice_of(i64& lo, i64& hi, u32 s, u32 c) {
    const i64 per = ((hi - lo + s - 1) / s + DS_VEC - 1) / DS_VEC * DS_VEC;
    const i64 a = lo + per * c;
    lo = a < hi ? a : hi;
    hi = a + per < hi ? a + per : hi;
}
