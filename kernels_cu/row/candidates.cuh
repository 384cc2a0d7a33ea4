// The candidate buffer of the streaming kernels: its size, the select that keeps it from
// overflowing, and merging composites produced elsewhere (another CTA's slice of the row).
//
// Compile-time parameters: DS_KMAX (largest k served), DS_THREADS, DS_LOADS (16-byte vector
// loads in flight per thread).
#pragma once
#include "common/keys.cuh"
#include "block/append.cuh"
#include "block/radix_select.cuh"

#ifndef DS_LOADS
#define DS_LOADS 4
#endif

#ifndef DS_BOUNDED_ROOM
#define DS_BOUNDED_ROOM 0
#endif

constexpr int NT = DS_THREADS;
// Candidate buffer entries: k (plus the select's slack) kept after a select, room for most of
// DS_KMAX more before the next one, and ROOM past that select trigger (deepselect_rt/cuda/plan.py
// mirrors this size): a whole block, so any step's survivors fit, or, with DS_BOUNDED_ROOM, two
// entries a thread: a warp whose survivors do not fit then holds them and appends them after a
// select (stream_range). A whole block is a large share of a CTA's shared memory; bounded, one
// more CTA fits an SM up to k = 2048, which is faster. k = 4096 and the split variants keep the
// whole block. The 64 entries short of 2 x DS_KMAX let 256 threads with a 3-block ring of 2
// vectors a thread fit three CTAs an SM.
constexpr bool BOUNDED_ROOM = DS_BOUNDED_ROOM;
constexpr int ROOM = BOUNDED_ROOM ? 2 * NT : NT * DS_VEC * DS_LOADS;
constexpr int CAP = 2 * DS_KMAX - 64 + ROOM;

struct Shared {
    u64 buf[CAP];
    SelectScratch sel;
    u32 steps[3];
    u32 claimed;  // entries claimed in buf while streaming (stream_range)
};

// While streaming, a select may keep up to DS_KMAX / 2 extra candidates: a looser threshold
// costs a few more appends but saves the radix passes over the column bits.
constexpr u32 STREAM_SLACK = DS_KMAX / 2;

// Keeps the best of buf[0, m) (m > k), raising T and its floor; returns how many remain: at
// most k + STREAM_SLACK <= CAP - ROOM - DS_KMAX / 2 + 64, so the room left takes any one warp's
// append (32 vectors).
__device__ __forceinline__ u32 select_buffer(Shared& sh, u32 m, u32 k, u64& thr, Floor& floor) {
    thr = radix_select<NT>(m, k, STREAM_SLACK, sh.sel, [&](u32 i) { return sh.buf[i]; });
    floor = threshold_floor(thr);
    return compact_at_least<NT, 4>(sh.buf, m, thr, sh.sel);
}

// A select when the buffer holds more than CAP - ROOM.
__device__ __forceinline__ void maybe_select(Shared& sh, StepCounter& cnt, u32 k, u64& thr, Floor& floor) {
    if (cnt.base > (u32)(CAP - ROOM)) cnt.base = select_buffer(sh, cnt.base, k, thr, floor);
}

// The k-th best composite of the buffer's m > k.
__device__ __forceinline__ u64 kth_best(Shared& sh, u32 m, u32 k) {
    return radix_select<NT>(m, k, 0, sh.sel, [&](u32 i) { return sh.buf[i]; });
}

// Keeps exactly the k best of the buffer's m (all when m <= k, leaving T as it is, else T
// becomes the k-th best); returns how many remain.
__device__ __forceinline__ u32 select_exact(Shared& sh, u32 m, u32 k, u64& thr) {
    if (m <= k) return m;
    thr = kth_best(sh, m, k);
    return compact_at_least<NT, 4>(sh.buf, m, thr, sh.sel);
}

// Appends the composites fetch(0 .. count) that reach T (0 means "no element" and never
// does), ROOM per step, selecting whenever the buffer could overflow.
template <class Fetch>
__device__ __forceinline__ void merge_candidates(Shared& sh, StepCounter& cnt, u32 k, u64& thr, Floor& floor,
                                                 u32 count, Fetch fetch) {
    constexpr int R = ROOM / NT < 8 ? ROOM / NT : 8;  // 8 composites per thread: no spills
    for (u32 base = 0; base < count; base += R * NT) {
        u64 c[R];
        u32 pass = 0;
        const u64 t = thr ? thr : 1;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const u32 i = base + j * NT + threadIdx.x;
            c[j] = i < count ? fetch(i) : 0;
            if (c[j] >= t) pass |= 1u << j;
        }
        cnt.prepare();
        warp_append<R>([&](int j) { return c[j]; }, pass, sh.buf, cnt.base, cnt.current());
        __syncthreads();
        cnt.finish();
        maybe_select(sh, cnt, k, thr, floor);
    }
}
