// Writing a row's winners by ascending column without sorting them: a winner's slot is the
// number of winners at lower columns, counted in a bitmap of the row's columns kept in shared
// memory that streaming no longer needs (the ring and the queues). Cheaper than a bitonic sort
// by column, which cost a noticeable share of a row's time.
#pragma once
#include "block/scan.cuh"
#include "row/output.cuh"

// Shared memory lent to the bitmap: a count a thread, the bitmap's words, then a count a chunk
// of words. Each thread counts a run of `span` words (a power of two); a chunk's count is the
// winners before it within its thread's run, and a thread's count the winners before its run.
// A winner's rank is then two counts, its word's popcount and those of its chunk's words
// before it (none when a chunk is one word, as at 128K columns up to k = 2048). Walking the
// popcounts from its thread's first word instead (up to 15 words) cost many more instructions.
struct ColumnBitmap {
    u32* mem;
    u32 room;  // 4-byte words lent

    struct Layout {
        u32 nwords, span_shift, chunk_shift;
        bool fits;
    };

    // The layout for a range of n columns: the smallest chunk (a power of two, at most a
    // thread's run) whose counts fit.
    template <int NT>
    __device__ __forceinline__ Layout layout(u32 n) const {
        const u32 nwords = (n + 31) / 32, per = (nwords + NT - 1) / NT;
        const u32 span_shift = per > 1 ? 32 - __clz(per - 1) : 0;
        for (u32 c = 0; c <= span_shift; ++c)
            if (mem && NT + nwords + ((nwords + (1u << c) - 1) >> c) <= room) return {nwords, span_shift, c, true};
        return {nwords, span_shift, 0, false};
    }
};

// A bitmap in `bytes` bytes at `mem` (4-byte aligned).
__device__ __forceinline__ ColumnBitmap column_bitmap(unsigned char* mem, u32 bytes) {
    return {reinterpret_cast<u32*>(mem), bytes / 4};
}

// Writes the composites >= t of buf[0, count) (at most k of them, of columns in [lo, lo + n),
// bm.layout<NT>(n).fits) to the row's first slots by ascending column, then fills up to k. The
// caller's last barrier must follow every other use of the bitmap's memory. Every thread of the
// CTA must call it.
template <int NT>
__device__ void write_by_column(const Params& p, const u64* buf, u32 count, u64 t, u32 k, i64 row,
                                const bits_t* xrow, u32 lo, u32 n, const ColumnBitmap& bm) {
    const ColumnBitmap::Layout at = bm.layout<NT>(n);
    const u32 nwords = at.nwords, chunk = 1u << at.chunk_shift;
    u32* bases = bm.mem;
    u32* words = bases + NT;
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
    const u32 first = min(threadIdx.x << at.span_shift, nwords), last = min(first + (1u << at.span_shift), nwords);
    u32 mine[1] = {0}, before[1];
    for (u32 w = first; w < last; ++w) {
        if (!(w & (chunk - 1))) counts[w >> at.chunk_shift] = mine[0];
        mine[0] += __popc(words[w]);
    }
    const u32 m = slot_ranks<NT, 1>(mine, before, bases);
    bases[threadIdx.x] = before[0];

    if (has_nan && threadIdx.x == 0) record_nan(p, row);
    const RowOut out = row_out(p, row, xrow, has_nan);
    __syncthreads();
    for (u32 i = threadIdx.x; i < count; i += NT) {
        const u64 e = buf[i];
        if (e < t) continue;
        const u32 x = comp_col(e) - lo, w = x >> 5;
        u32 slot = bases[w >> at.span_shift] + counts[w >> at.chunk_shift] + __popc(words[w] & ((1u << (x & 31)) - 1));
        for (u32 v = w & ~(chunk - 1); v < w; ++v) slot += __popc(words[v]);
        write_slot(p, out, slot, true, comp_col(e), comp_key(e));
    }
    for (u32 i = m + threadIdx.x; i < k; i += NT) write_slot(p, out, i, false, 0, 0);
}
