// The end of a row: the exact k best of the candidate buffer, sorted (by value or by column),
// written to the row's outputs with fills, offsets and the NaN policy.
#pragma once
#include "block/bitonic.cuh"
#include "row/candidates.cuh"
#include "row/output.cuh"

__device__ __forceinline__ void finish_row(const Params& p, Shared& sh, u32 m, u32 k, u64 thr, i64 row,
                                           const bits_t* xrow) {
    m = select_exact(sh, m, k, thr);
    // NaN ranks above everything, so the row holds NaN iff a NaN key was selected.
    bool nan_here = false;
    for (u32 i = threadIdx.x; i < m; i += NT) nan_here |= comp_key(sh.buf[i]) == DS_KEY_NAN;
    u32 sorted_n = 1;
    while (sorted_n < m) sorted_n <<= 1;
    for (u32 i = m + threadIdx.x; i < sorted_n; i += NT) sh.buf[i] = 0;
    const bool has_nan = __syncthreads_or(nan_here);
    bitonic_sort_desc<NT>(sh.buf, sorted_n, p.flags & DS_F_SORTED);

    if (has_nan && p.nan_flags && threadIdx.x == 0) p.nan_flags[row] = 1;
    const RowOut out = row_out(p, row, xrow, has_nan);
    for (u32 i = threadIdx.x; i < k; i += NT) {
        const bool valid = i < m;
        const u64 c = valid ? sh.buf[i] : 0;
        write_slot(p, out, i, valid, comp_col(c), comp_key(c));
    }
}
