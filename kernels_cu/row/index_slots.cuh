// The row's output index slots as the any-k kernel's scratch (topk_large.cu): columns are
// written there in column order, sorted there by value, and rewritten as indices at the end.
#pragma once
#include "common/keys.cuh"
#include "common/params.cuh"

__device__ __forceinline__ u64 comp_at(const bits_t* xrow, u32 col) { return make_comp(key_of(xrow[col]), col); }

// Column stored in slot i while the row is being assembled (before offsets are applied).
__device__ __forceinline__ u32 slot_col(const Params& p, i64 row, u64 i) {
    return (p.flags & DS_F_IDX64) ? (u32)((const i64*)p.out_idx)[row * p.idx_row_stride + i]
                                  : (u32)((const int*)p.out_idx)[row * p.idx_row_stride + i];
}

__device__ __forceinline__ void set_slot_col(const Params& p, i64 row, u64 i, u32 col) {
    if (p.flags & DS_F_IDX64) ((i64*)p.out_idx)[row * p.idx_row_stride + i] = col;
    else ((int*)p.out_idx)[row * p.idx_row_stride + i] = (int)col;
}

// Bitonic sort of slots [0, m) by composite, descending, for any m: every compare puts the larger
// first and the first compare of each merge mirrors the block, so the virtual padding (smaller
// than everything, at positions >= m) never moves and its compares can be skipped.
__device__ void sort_slots(const Params& p, i64 row, const bits_t* xrow, u32 m) {
    u32 size = 1;
    while (size < m) size <<= 1;
    for (u32 blk = 2; blk <= size; blk <<= 1) {
        for (u32 stride = blk >> 1; stride > 0; stride >>= 1) {
            for (u32 t = threadIdx.x; t < size / 2; t += DS_THREADS) {
                const u32 lo = 2 * t - (t & (stride - 1));
                const u32 hi = stride == blk / 2 ? (lo | (blk - 1)) - (lo & (blk - 1)) : lo + stride;
                if (hi >= m) continue;
                const u32 a = slot_col(p, row, lo), b = slot_col(p, row, hi);
                if (comp_at(xrow, a) < comp_at(xrow, b)) {
                    set_slot_col(p, row, lo, b);
                    set_slot_col(p, row, hi, a);
                }
            }
            __syncthreads();
        }
    }
}
