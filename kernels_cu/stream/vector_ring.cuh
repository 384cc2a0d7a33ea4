// A ring of DS_STAGES blocks of the row in shared memory, filled by asynchronous copies
// (cp.async, sm_80+), so the bytes in flight are bounded by shared memory rather than by the
// registers that held two blocks before. Each thread copies, and later reads, only its own
// vectors: no barrier guards the ring.
//
// Compile-time parameters: DS_THREADS, DS_LOADS, DS_STAGES.
#pragma once
#include "common/dtype.cuh"

#ifndef DS_STAGES
#define DS_STAGES 4
#endif
static_assert(DS_STAGES >= 2, "one block read while the next loads");

struct VectorRing {
    uint4 vec[DS_STAGES][DS_LOADS][DS_THREADS];

    // Starts copying this thread's vectors of block `blk` (of `per_block` vectors, DS_LOADS a
    // thread) into stage `stage`; vectors at or past nvec are skipped.
    __device__ __forceinline__ void fetch(u32 stage, const uint4* vrow, u32 blk, u32 per_block, u32 nvec) {
#pragma unroll
        for (int u = 0; u < DS_LOADS; ++u) {
            const u32 vi = blk * per_block + u * DS_THREADS + threadIdx.x;
            if (vi < nvec) {
                const u32 dst = (u32)__cvta_generic_to_shared(&vec[stage][u][threadIdx.x]);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(vrow + vi) : "memory");
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    // This thread's vectors of stage `stage`, once every fetch but the latest DS_STAGES - 2
    // has landed.
    __device__ __forceinline__ void take(Vec (&v)[DS_LOADS], u32 stage) {
        asm volatile("cp.async.wait_group %0;" ::"n"(DS_STAGES - 2) : "memory");
#pragma unroll
        for (int u = 0; u < DS_LOADS; ++u) v[u].v = vec[stage][u][threadIdx.x];
    }

    __device__ __forceinline__ void drain() { asm volatile("cp.async.wait_all;" ::: "memory"); }
};
