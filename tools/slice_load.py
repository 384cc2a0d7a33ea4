"""How fast one CTA an SM reads its slice of a row from cold HBM (issue 5: the cluster radix select
holds 8-64 elements a thread, and at 1M-element rows its load is half of the kernel's cycles):

    python tools/slice_load.py            # table of cycles per CTA and kernel us, every way below

Ways (1024 threads a CTA, one CTA an SM, V 16-byte vectors a thread laid out as the cluster
kernel's: each warp a contiguous run of the slice):

- ldg:        V `ld.global.cs` a thread into registers (the cluster kernel's load);
- ldg256:     the same with the `L2::256B` prefetch-size hint;
- prefetch:   thread 0 first asks for the whole slice in L2 (`cp.async.bulk.prefetch.L2`, 16 KiB
              requests), then the ldg loads;
- bulk:       thread 0 copies the slice to shared memory (`cp.async.bulk`, 16 KiB requests, one
              mbarrier), every thread then reads its vectors there;
- prologue:   ldg after the cluster kernel's prologue (an mbarrier made visible to the cluster,
              a relaxed cluster arrive; its wait at the end), one CTA a cluster;
- cluster8, cluster16: prologue in clusters of 8 or 16 CTAs (`__cluster_dims__`): a cluster's
              CTAs share one GPC's path to L2.

Each CTA's cycles run from a barrier at its start to a barrier after every thread has folded its
vectors into one word (the data has arrived). The L2 is flushed (a 256 MiB memset) before every
call; figures are medians over 30 calls, and the kernel's GPU us from CUDA events. Also: how many
clusters of 8-16 such CTAs the GPU holds at once (cuOccupancyMaxActiveClusters), the bound on the
rows one wave of the cluster kernel serves. Needs CuPy, cuda-bindings and an sm_90+ GPU. Prints
tables; --json writes the figures."""

import json
import statistics
from pathlib import Path

import gpu_tool

KERNELS = Path(__file__).resolve().parents[1] / "kernels_cu"
SOURCE = r"""
#include "common/types.cuh"
#include "cluster/primitives.cuh"

__device__ __forceinline__ uint4 ldg_256(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

template <int V, int MODE>
__device__ void slice_load(const uint4* x, u64* cycles, u32* sink) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ u64 bar;
    __shared__ u32 fold;
    const u32 per = 1024u * V;  // vectors of this CTA's slice
    const uint4* base = x + (u64)blockIdx.x * per;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) {
        fold = 0;
        if (MODE == 3) mbar_init(&bar, 1);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const u64 t0 = clock64();
    // The cluster kernel's prologue: mbarriers made visible to the cluster, its first arrive.
    if (MODE >= 4) {
        if (threadIdx.x == 0) {
            mbar_init(&bar, 1);
            mbar_init_fence();
        }
        cluster_arrive_relaxed();
    }
    constexpr u32 CHUNK = 16384;
    const u32 bytes = per * 16u;
    if (MODE == 2 && threadIdx.x == 0)
        for (u32 off = 0; off < bytes; off += CHUNK)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"((const char*)base + off), "r"(CHUNK) : "memory");
    if (MODE == 3 && threadIdx.x == 0) {
        mbar_arrive_expect(&bar, bytes);
        for (u32 off = 0; off < bytes; off += CHUNK)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(shared_addr(smem + off)), "l"((const char*)base + off), "r"(CHUNK), "r"(shared_addr(&bar))
                         : "memory");
    }
    uint4 v[V];
    if (MODE == 3) mbar_wait(&bar, 0);
#pragma unroll
    for (int u = 0; u < V; ++u) {
        const u32 i = ((warp * V + u) << 5) + lane;
        if (MODE == 0 || MODE == 2 || MODE >= 4) v[u] = __ldcs(base + i);
        else if (MODE == 1) v[u] = ldg_256(base + i);
        else v[u] = reinterpret_cast<const uint4*>(smem)[i];
    }
    u32 f = 0;
#pragma unroll
    for (int u = 0; u < V; ++u) f = max(f, max(max(v[u].x, v[u].y), max(v[u].z, v[u].w)));
    f = __reduce_max_sync(DS_FULL_MASK, f);
    if (lane == 0) atomicMax(&fold, f);
    __syncthreads();
    if (MODE >= 4) cluster_wait();
    if (threadIdx.x == 0) {
        cycles[blockIdx.x] = clock64() - t0;
        sink[blockIdx.x] = fold;
    }
}

#define WAY(V, M, ATTR) \
    extern "C" __global__ void __launch_bounds__(1024, 1) ATTR load_v##V##_m##M(const uint4* x, u64* c, u32* s) { \
        slice_load<V, M>(x, c, s); }
#define WAYS(V) WAY(V, 0, ) WAY(V, 1, ) WAY(V, 2, ) WAY(V, 3, ) WAY(V, 4, ) WAY(V, 5, __cluster_dims__(8, 1, 1)) \
    WAY(V, 6, __cluster_dims__(16, 1, 1))
WAYS(1) WAYS(8)
"""
MODES = {0: "ldg", 1: "ldg256", 2: "prefetch", 3: "bulk", 4: "prologue", 5: "cluster8", 6: "cluster16"}
CLUSTER = {"cluster8": 8, "cluster16": 16}


def allow_large_clusters(kernel):
    """Lets ``kernel`` (a CuPy RawKernel) run in clusters of more than 8 CTAs; its CUfunction."""
    from cuda.bindings import driver

    function = driver.CUfunction(kernel.kernel.ptr)
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    driver.cuFuncSetAttribute(function, attr, 1)
    return function


def max_active_clusters(kernel, size: int) -> int:
    """Clusters of ``size`` CTAs of ``kernel`` (1024 threads, 140 KiB of shared memory) resident at once."""
    from cuda.bindings import driver

    function = allow_large_clusters(kernel)
    config = driver.CUlaunchConfig()
    config.gridDimX, config.blockDimX, config.sharedMemBytes = size, 1024, 140 * 1024
    config.gridDimY = config.gridDimZ = config.blockDimY = config.blockDimZ = 1
    cluster = driver.CUlaunchAttribute()
    cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = size, 1, 1
    config.attrs, config.numAttrs = [cluster], 1
    err, count = driver.cuOccupancyMaxActiveClusters(function, config)
    return int(count) if int(err) == 0 else -int(err)


def main() -> None:
    parser = gpu_tool.parser(__doc__)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--calls", type=int, default=30, help="calls a way and CTA count (default 30)")
    args = gpu_tool.start("tools/slice_load.py", parser)
    import cupy as cp
    module = cp.RawModule(code=SOURCE, options=("-std=c++17", f"-I{KERNELS}"), name_expressions=None)
    flush = cp.empty(256 << 20, dtype=cp.uint8)
    x = cp.random.randint(0, 2**31, size=(132 * 1024 * 8 * 4,), dtype=cp.uint32)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    results = []
    for vecs in (1, 8):
        for ctas in (16, 128, 132):
            for mode, name in MODES.items():
                if ctas % CLUSTER.get(name, 1):
                    continue
                kernel = module.get_function(f"load_v{vecs}_m{mode}")
                kernel.max_dynamic_shared_size_bytes = 140 * 1024
                if name == "cluster16":
                    allow_large_clusters(kernel)
                cycles = cp.zeros(ctas, dtype=cp.uint64)
                sink = cp.zeros(ctas, dtype=cp.uint32)
                med, worst, us = [], [], []
                for _ in range(args.calls):
                    flush.fill(1)
                    start.record()
                    kernel((ctas,), (1024,), (x, cycles, sink), shared_mem=140 * 1024)
                    stop.record()
                    stop.synchronize()
                    c = cycles.get()
                    med.append(float(statistics.median(c)))
                    worst.append(float(c.max()))
                    us.append(cp.cuda.get_elapsed_time(start, stop) * 1000)
                row = {"vectors": vecs, "ctas": ctas, "way": name, "kib_per_cta": vecs * 16,
                       "cycles_median": statistics.median(med), "cycles_slowest": statistics.median(worst),
                       "us": statistics.median(us)}
                results.append(row)
    print(f"{'KiB/CTA':>8} {'CTAs':>5} {'way':>9} {'cycles med':>11} {'slowest':>9} {'us':>7}")
    for r in results:
        print(f"{r['kib_per_cta']:>8} {r['ctas']:>5} {r['way']:>9} {r['cycles_median']:>11.0f} "
              f"{r['cycles_slowest']:>9.0f} {r['us']:>7.1f}")
    clusters = {size: max_active_clusters(module.get_function("load_v8_m0"), size) for size in range(8, 17)}
    if args.json:
        args.json.write_text(json.dumps({"loads": results, "max_active_clusters": clusters}, indent=1))
    print("clusters of 1024-thread CTAs (one an SM) resident at once:",
          ", ".join(f"{size}: {count}" for size, count in clusters.items()))


if __name__ == "__main__":
    main()
