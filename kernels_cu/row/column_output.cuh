// Writing a row's winners by ascending column without sorting them: a winner's slot is the
// number of winners at lower columns, counted in a bitmap of the row's columns kept in shared
// memory that streaming no longer needs (the ring and the queues). The bitonic sort by column it
// replaces took 9.7K of 111K cycles of a 4096 x 128K bf16 row at k = 512 and 25.9K of 159K at
// k = 2048 (clock64 phases, docs/benchmarks.md).
#pragma once
#include "block/scan.cuh"
#include "row/output.cuh"

// Shared memory lent to the bitmap: NT / 32 warp totals, the bitmap's words, then one count a
// chunk of `chunk` words, the winners at lower columns than the chunk. One word a chunk where
// that fits (128K columns at k <= 2048): a winner's rank is then its chunk's count and one
// popcount. Per-thread counts of 16 words each, which a winner walked from its thread's first
// word, were 9% of the instructions of 4096 x 128K bf16 at k = 2048 (Nsight Compute, H200).
struct ColumnBitmap {
    u32* mem;
    u32 room;  // 4-byte words lent

    static constexpr u32 MAX_CHUNK = 64;  // bounds a winner's walk over its chunk's words

    // Words a chunk holds for a range of n columns: the smallest power of two whose counts fit
    // beside the bitmap, or 0 when the bitmap does not fit.
    template <int NT>
    __device__ __forceinline__ u32 chunk(u32 n) const {
        const u32 nwords = (n + 31) / 32;
        if (!mem || room < NT / 32 + nwords) return 0;
        const u32 left = room - NT / 32 - nwords;
        for (u32 c = 1; c <= MAX_CHUNK; c <<= 1)
            if ((nwords + c - 1) / c <= left) return c;
        return 0;
    }
};

// A bitmap in `bytes` bytes at `mem` (4-byte aligned).
__device__ __forceinline__ ColumnBitmap column_bitmap(unsigned char* mem, u32 bytes) {
    return {reinterpret_cast<u32*>(mem), bytes / 4};
}

// Writes the composites >= t of buf[0, count) (at most k of them, of columns in [lo, lo + n),
// bm.chunk<NT>(n) > 0) to the row's first slots by ascending column, then fills up to k. The
// caller's last barrier must follow every other use of the bitmap's memory. Every thread of the
// CTA must call it.
template <int NT>
__device__ void write_by_column(const Params& p, const u64* buf, u32 count, u64 t, u32 k, i64 row,
                                const bits_t* xrow, u32 lo, u32 n, const ColumnBitmap& bm) {
    const u32 nwords = (n + 31) / 32, c = bm.chunk<NT>(n);
    const u32 shift = __ffs(c) - 1, nchunks = (nwords + c - 1) >> shift;
    u32* words = bm.mem + NT / 32;
    u32* counts = words + nwords;
    for (u32 w = threadIdx.x; w < nwords; w += NT) words[w] = 0;
    __syncthreads();
    // NaN ranks above everything, so the row holds NaN iff a NaN key was selected.
    bool nan_here = false;
    for (u32 i = threadIdx.x; i < count; i += NT) {
        const u64 e = buf[i];
        if (e < t) continue;
        const u32 x = comp_col(e) - lo;
        atomicOr(&words[x >> 5], 1u << (x & 31));
        nan_here |= comp_key(e) == DS_KEY_NAN;
    }
    const bool has_nan = __syncthreads_or(nan_here);
    // Each thread counts a run of chunks, the CTA scans the runs, and each chunk's count
    // becomes the number of winners before it.
    const u32 per = (nchunks + NT - 1) / NT;
    const u32 first = min(threadIdx.x * per, nchunks), last = min(first + per, nchunks);
    u32 mine[1] = {0}, before[1];
    for (u32 j = first; j < last; ++j) {
        u32 in = 0;
        for (u32 w = j << shift; w < min((j + 1) << shift, nwords); ++w) in += __popc(words[w]);
        counts[j] = mine[0];
        mine[0] += in;
    }
    const u32 m = slot_ranks<NT, 1>(mine, before, bm.mem);
    for (u32 j = first; j < last; ++j) counts[j] += before[0];

    if (has_nan && p.nan_flags && threadIdx.x == 0) p.nan_flags[row] = 1;
    const RowOut out = row_out(p, row, xrow, has_nan);
    __syncthreads();
    for (u32 i = threadIdx.x; i < count; i += NT) {
        const u64 e = buf[i];
        if (e < t) continue;
        const u32 x = comp_col(e) - lo, w = x >> 5, j = w >> shift;
        u32 slot = counts[j] + __popc(words[w] & ((1u << (x & 31)) - 1));
        for (u32 v = j << shift; v < w; ++v) slot += __popc(words[v]);
        write_slot(p, out, slot, true, comp_col(e), comp_key(e));
    }
    for (u32 i = m + threadIdx.x; i < k; i += NT) write_slot(p, out, i, false, 0, 0);
}
