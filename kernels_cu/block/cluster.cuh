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

// The shared::cluster address of `p` (a shared-memory pointer of this CTA) in CTA `rank`.
__device__ __forceinline__ u32 cluster_map(const void* p, u32 rank) {
    u32 local, remote;
    asm("{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }" : "=r"(local) : "l"(p));
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
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

__device__ __forceinline__ void cluster_store_u32(u32 addr, u32 v) {
    asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void cluster_store_v4(u32 addr, uint4 v) {
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
#endif
