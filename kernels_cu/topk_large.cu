// Top-k for any k (the path for k beyond the streaming kernel's shared-memory buffer).
// One CTA per row, working in global memory and writing nothing but the row's outputs:
//   1. radix select over the row (one read per 8-bit digit) finds the k-th largest composite T;
//   2. one more read writes the columns of the composites >= T, in ascending column order, into
//      the row's index slots;
//   3. sorted=True: a bitonic sort of those slots by composite (re-read from the input);
//   4. the slots are rewritten in the output index type with offsets, and values gathered.
// Slower than topk_stream (several reads of the row), but exact for every k.
#include "common/keys.cuh"
#include "common/params.cuh"
#include "block/radix_select.cuh"
#include "block/scan.cuh"
#include "row/index_slots.cuh"
#include "row/output.cuh"

constexpr int NT = DS_THREADS;

struct Shared {
    SelectScratch sel;
    u32 warp_totals[NT / 32];
};

extern "C" __global__ void __launch_bounds__(DS_THREADS) DS_ENTRY(DS_PARAMS) {
    DS_BIND_PARAMS
    __shared__ Shared sh;
    const i64 row = blockIdx.x;
    const u32 k = (u32)p.k;
    const bits_t* xrow = (const bits_t*)p.x + row * p.row_stride;
    i64 lo64, hi64;
    row_range(p, row, lo64, hi64);
    prefetch_serving(p, row, 0, 1);
    const u32 lo = (u32)lo64, n = (u32)(hi64 - lo64);

    // The k-th largest composite of the row's [lo, lo + n).
    const u64 t = n > k ? radix_select<NT>(n, k, 0, sh.sel, [&](u32 i) { return comp_at(xrow, lo + i); }) : 0;

    // Collect in column order (flag scan per chunk), noting NaN on the way.
    u32 m = 0;
    bool nan_here = false;
    for (u32 base = 0; base < n; base += NT) {
        const u32 i = base + threadIdx.x;
        bool take = false;
        if (i < n) {
            const u64 c = comp_at(xrow, lo + i);
            take = c >= t;
            nan_here |= comp_key(c) == DS_KEY_NAN;
        }
        const u32 flagged[1] = {take};
        u32 rank[1];
        const u32 total = slot_ranks<NT, 1>(flagged, rank, sh.warp_totals);
        if (take) set_slot_col(p, row, m + rank[0], lo + i);
        m += total;
    }
    const bool has_nan = __syncthreads_or(nan_here);
    if (p.flags & DS_F_SORTED) sort_slots(p, row, xrow, m);

    if (has_nan && threadIdx.x == 0) record_nan(p, row);
    const RowOut out = row_out(p, row, xrow, has_nan);
    for (u32 i = threadIdx.x; i < k; i += NT) {
        const bool valid = i < m;
        const u32 col = valid ? slot_col(p, row, i) : 0;
        write_slot(p, out, i, valid, col, valid ? key_of(xrow[col]) : 0);
    }
}
