// Thread-block cluster primitives (sm_90+), in PTX: NVRTC compiles without the toolkit's
// cooperative_groups headers.
#pragma once
#include "common/types.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The two halves of a cluster barrier, every thread of every CTA of the cluster: arrive
// releases this CTA's shared-memory writes, wait acquires the others'. Work between them
// overlaps the wait; until wait returns, this CTA's shared memory stays alive for the others.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// An arrival that releases nothing: a CTA's first, whose wait shows only that every CTA of the
// cluster has started. Before that another CTA's shared memory may not be there to store to
// (compute-sanitizer's racecheck flags such stores).
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }

__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// The shared::cta address of `p`, a shared-memory pointer of this CTA.
__device__ __forceinline__ u32 shared_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }" : "=r"(a) : "l"(p));
    return a;
}

// The shared::cluster address of `p` (a shared-memory pointer of this CTA) in CTA `rank`.
__device__ __forceinline__ u32 cluster_map(const void* p, u32 rank) {
    u32 remote;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_addr(p)), "r"(rank));
    return remote;
}

// An mbarrier (8 bytes of shared memory, aligned) through which a CTA waits for the others'
// copies and stores into its shared memory (cluster_copy, cluster_store_async) instead of a
// cluster barrier: a barrier's arrive makes every thread wait for its remote stores to be
// acknowledged (the cluster radix select's largest stall); a receiver's wait covers only the
// bytes it needs. Init before the cluster barrier that precedes the first store to it (see
// mbar_init_fence).
__device__ __forceinline__ void mbar_init(u64* bar, u32 arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(bar)), "r"(arrivals) : "memory");
}

// Makes this thread's mbar_init visible to the cluster at its next cluster barrier arrive.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival on this CTA's `bar`, which also expects `bytes` more of stores in this phase (they
// may land before it: the phase completes when both are done).
__device__ __forceinline__ void mbar_arrive_expect(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(bar)), "r"(bytes)
                 : "memory");
}

// Waits until the phase of `bar` with this parity (its phases alternate 0, 1, 0, ...) completes;
// the stores it counted are then visible to this thread.
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
    const u32 addr = shared_addr(bar);
    u32 done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(addr), "r"(parity) : "memory");
}

// Orders this thread's earlier shared-memory writes before bulk copies (the async proxy) that
// it, or after a barrier another thread, issues.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// A bulk copy of `bytes` (a multiple of 16, both ends 16-byte aligned) of this CTA's shared
// memory at `src` to another CTA's at `dst` (cluster_map), completing that many bytes on its
// mbarrier `bar`: one instruction where 16-byte stores took one a vector.
__device__ __forceinline__ void cluster_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "r"(shared_addr(src)), "r"(bytes), "r"(bar)
                 : "memory");
}

// A 16-byte store to another CTA's shared memory (shared::cluster addresses from cluster_map)
// that completes 16 bytes of the expected count of its mbarrier `bar`.
__device__ __forceinline__ void cluster_store_async(u32 addr, uint4 v, u32 bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(addr),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
                 : "memory");
}

// Loads and stores at a shared::cluster address (cluster_map). Ordered by the cluster barriers.
__device__ __forceinline__ u64 cluster_load_u64(u32 addr) {
    u64 v;
    asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void cluster_store_u64(u32 addr, u64 v) {
    asm volatile("st.shared::cluster.u64 [%0], %1;" ::"r"(addr), "l"(v) : "memory");
}

#endif
