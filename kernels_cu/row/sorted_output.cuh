// Writing a row from its selected composites gathered in shared memory: sorted by value or by
// column (as p.flags says), then fills, with offsets and the NaN policy.
#pragma once
#include "block/bitonic.cuh"
#include "row/output.cuh"

// buf[0, m) holds the row's m <= k <= KMAX winners (KMAX a power of two), published by a
// barrier, and has room up to m rounded up to a power of two. Every thread of the CTA must call it.
template <int NT, int KMAX>
__device__ __forceinline__ void sort_and_write(const Params& p, u64* buf, u32 m, u32 k, i64 row, const bits_t* xrow,
                                               bool has_nan) {
    bitonic_sort_desc<NT, KMAX>(buf, m, p.flags & DS_F_SORTED);

    if (has_nan && threadIdx.x == 0) record_nan(p, row);
    const RowOut out = row_out(p, row, xrow, has_nan);
    for (u32 i = threadIdx.x; i < k; i += NT) {
        const bool valid = i < m;
        const u64 c = valid ? buf[i] : 0;
        write_slot(p, out, i, valid, comp_col(c), comp_key(c));
    }
}
