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
    u32 base;  // entries in the buffer before this substep (uniform across the CTA)

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

// warp_append's answer for a bounded claim that did not fit.
constexpr u32 APPEND_MISSED = ~0u;

// Appends the entries flagged in `pass` (bit e for entry e, whose composite is comp(e)) at
// buf[base + the counter's claim] and returns the claim's end (0 when the warp had none).
// Bounded: only if they all end at or below `cap`; else the warp zeroes its claim's part below
// `cap` (0 is no element: never selected, nothing stale left) and returns APPEND_MISSED. Claims
// are handed out in order, so the ones that fit are a prefix. Every lane of the warp calls it.
// Every lane learns the claim's total by a second shuffle: letting lane 31 alone decide the miss
// (a bit of the shuffled claim) measured slower for float32.
template <int N, bool Bounded = false, class Comp>
__device__ __forceinline__ u32 warp_append(Comp comp, u32 pass, u64* buf, u32 base, u32* counter, u32 cap = 0) {
    const u32 n = __popc(pass);
    if (!__any_sync(DS_FULL_MASK, n)) return 0;
    const u32 incl = warp_inclusive_sum(n);
    u32 claim = 0;
    if ((threadIdx.x & 31) == 31) claim = base + atomicAdd(counter, incl);
    claim = __shfl_sync(DS_FULL_MASK, claim, 31);
    const u32 total = __shfl_sync(DS_FULL_MASK, incl, 31);
    if (Bounded && total > cap - min(claim, cap)) {
        for (u32 i = claim + (threadIdx.x & 31); i < cap; i += 32) buf[i] = 0;
        return APPEND_MISSED;
    }
    u32 pos = claim + incl - n;
#pragma unroll
    for (int e = 0; e < N; ++e)
        if (pass >> e & 1) buf[pos++] = comp(e);
    return claim + total;
}
