// Writing a row's winners by ascending column without sorting them: a winner's slot is the
// number of winners at lower columns, counted in a bitmap of the row's columns kept in shared
// memory that streaming no longer needs (the ring and the queues). The bitonic sort by column it
// replaces took 9.7K of 111K cycles of a 4096 x 128K bf16 row at k = 512 and 25.9K of 159K at
// k = 2048 (clock64 phases, docs/benchmarks.md).
#pragma once
#include "block/scan.cuh"
#include "row/output.cuh"

// Shared memory lent to the bitmap: NT per-thread counts, then the bitmap's words.
struct ColumnBitmap {
    u32* counts;
    u32* words;
    u32 capacity;  // columns the bitmap can hold

    __device__ __forceinline__ bool fits(u32 n) const { return words && n <= capacity; }
};

// A bitmap in `bytes` bytes at `mem` (4-byte aligned).
template <int NT>
__device__ __forceinline__ ColumnBitmap column_bitmap(unsigned char* mem, u32 bytes) {
    ColumnBitmap b;
    b.counts = reinterpret_cast<u32*>(mem);
    b.words = b.counts + NT;
    b.capacity = bytes > 4 * NT ? (bytes - 4 * NT) / 4 * 32 : 0;
    return b;
}

// Writes the composites >= t of buf[0, count) (at most k of them, of columns in [lo, lo + n),
// bm.fits(n)) to the row's first slots by ascending column, then fills up to k. The
// caller's last barrier must follow every other use of the bitmap's memory. Every thread of the
// CTA must call it.
template <int NT>
__device__ void write_by_column(const Params& p, const u64* buf, u32 count, u64 t, u32 k, i64 row,
                                const bits_t* xrow, u32 lo, u32 n, const ColumnBitmap& bm) {
    const u32 nwords = (n + 31) / 32;
    const u32 span = (nwords + NT - 1) / NT;  // words counted by each thread
    for (u32 w = threadIdx.x; w < nwords; w += NT) bm.words[w] = 0;
    __syncthreads();
    // NaN ranks above everything, so the row holds NaN iff a NaN key was selected.
    bool nan_here = false;
    for (u32 i = threadIdx.x; i < count; i += NT) {
        const u64 c = buf[i];
        if (c < t) continue;
        const u32 x = comp_col(c) - lo;
        atomicOr(&bm.words[x >> 5], 1u << (x & 31));
        nan_here |= comp_key(c) == DS_KEY_NAN;
    }
    const bool has_nan = __syncthreads_or(nan_here);
    u32 mine[1] = {0}, before[1];
    const u32 first = threadIdx.x * span, last = min(first + span, nwords);
    for (u32 w = first; w < last; ++w) mine[0] += __popc(bm.words[w]);
    const u32 m = slot_ranks<NT, 1>(mine, before, bm.counts);
    bm.counts[threadIdx.x] = before[0];

    if (has_nan && p.nan_flags && threadIdx.x == 0) p.nan_flags[row] = 1;
    const RowOut out = row_out(p, row, xrow, has_nan);
    __syncthreads();
    for (u32 i = threadIdx.x; i < count; i += NT) {
        const u64 c = buf[i];
        if (c < t) continue;
        const u32 x = comp_col(c) - lo, w = x >> 5, g = w / span;
        u32 slot = bm.counts[g] + __popc(bm.words[w] & ((1u << (x & 31)) - 1));
        for (u32 v = g * span; v < w; ++v) slot += __popc(bm.words[v]);
        write_slot(p, out, slot, true, comp_col(c), comp_key(c));
    }
    for (u32 i = m + threadIdx.x; i < k; i += NT) write_slot(p, out, i, false, 0, 0);
}
