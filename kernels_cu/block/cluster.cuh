// Thread-block cluster primitives (sm_90+), in PTX: NVRTC compiles without the toolkit's
// cooperative_groups headers.
#pragma once
#include "common/types.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Every thread of every CTA of the cluster: release this CTA's shared-memory writes, acquire
// the others'.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The shared::cluster address of `p` (a shared-memory pointer of this CTA) in CTA `rank`.
__device__ __forceinline__ u32 cluster_map(const void* p, u32 rank) {
    u32 local, remote;
    asm("{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }" : "=r"(local) : "l"(p));
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}

__device__ __forceinline__ u64 cluster_load_u64(u32 addr) {
    u64 v;
    asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(addr) : "memory");
    return v;
}
#endif
