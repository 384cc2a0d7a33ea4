// The end of a row: the exact k best of the candidate buffer, sorted (by value or by column),
// written to the row's outputs with fills, offsets and the NaN policy.
#pragma once
#include "row/candidates.cuh"
#include "row/sorted_output.cuh"

__device__ __forceinline__ void finish_row(const Params& p, Shared& sh, u32 m, u32 k, u64 thr, i64 row,
                                           const bits_t* xrow) {
    m = select_exact(sh, m, k, thr);
    // NaN ranks above everything, so the row holds NaN iff a NaN key was selected.
    bool nan_here = false;
    for (u32 i = threadIdx.x; i < m; i += NT) nan_here |= comp_key(sh.buf[i]) == DS_KEY_NAN;
    const bool has_nan = __syncthreads_or(nan_here);
    sort_and_write<NT, DS_KMAX>(p, sh.buf, m, k, row, xrow, has_nan);
}
