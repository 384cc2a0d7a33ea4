// Appending a warp's surviving elements to the shared candidate buffer: one atomic per warp,
// positions from a warp prefix sum (no per-element shared atomics).
#pragma once
#include "common/keys.cuh"
#include "warp/scan.cuh"

// Rotating substep counters: substep j adds to counter j % 3, which thread 0 zeroed during
// substep j - 1, after every thread had read it (in substep j - 2). One barrier per substep.
struct StepCounter {
    u32* slots;  // 3 shared counters, zero at start
    u32 j;
    u32 base;    // entries in the buffer before this substep (uniform across the CTA)

    __device__ __forceinline__ void init(u32* s) { slots = s; j = 0; base = 0; }
    __device__ __forceinline__ u32* current() { return &slots[j % 3]; }
    __device__ __forceinline__ void prepare() {
        if (threadIdx.x == 0) slots[(j + 1) % 3] = 0;
    }
    // Call after the substep's barrier: folds its additions into base.
    __device__ __forceinline__ u32 finish() {
        base += slots[j % 3];
        ++j;
        return base;
    }
};

// Appends the entries flagged in `pass` (bit e for entry e, whose composite is comp(e)).
// Must be called by every lane of the warp.
template <int N, class Comp>
__device__ __forceinline__ void warp_append(Comp comp, u32 pass, u64* buf, u32 base, u32* counter) {
    const u32 n = __popc(pass);
    if (!__any_sync(DS_FULL_MASK, n)) return;
    const u32 incl = warp_inclusive_sum(n);
    u32 start = 0;
    if ((threadIdx.x & 31) == 31) start = atomicAdd(counter, incl);
    start = __shfl_sync(DS_FULL_MASK, start, 31);
    u32 pos = base + start + incl - n;
#pragma unroll
    for (int e = 0; e < N; ++e)
        if (pass >> e & 1) buf[pos++] = comp(e);
}
