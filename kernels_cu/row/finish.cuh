// The end of a row: the exact k best of the candidate buffer, sorted (by value or by column),
// written to the row's outputs with fills, offsets and the NaN policy.
#pragma once
#include "row/candidates.cuh"
#include "row/column_output.cuh"
#include "row/sorted_output.cuh"

// buf[0, m) holds the candidates of the row's columns [lo, lo + n). Column order (sorted=False)
// goes through the bitmap when the range fits it, value order through a sort.
__device__ __forceinline__ void finish_row(const Params& p, Shared& sh, u32 m, u32 k, u64 thr, i64 row,
                                           const bits_t* xrow, u32 lo, u32 n, const ColumnBitmap& bm) {
    if (!(p.flags & DS_F_SORTED) && bm.layout<NT>(n).fits) {
        const u64 t = m > k ? kth_best(sh, m, k) : 1;  // 1: every candidate
        write_by_column<NT>(p, sh.buf, m, t, k, row, xrow, lo, n, bm);
        return;
    }
    m = select_exact(sh, m, k, thr);
    // NaN ranks above everything, so the row holds NaN iff a NaN key was selected.
    bool nan_here = false;
    for (u32 i = threadIdx.x; i < m; i += NT) nan_here |= comp_key(sh.buf[i]) == DS_KEY_NAN;
    const bool has_nan = __syncthreads_or(nan_here);
    sort_and_write<NT, DS_KMAX>(p, sh.buf, m, k, row, xrow, has_nan);
}
