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
#include "row/output.cuh"

constexpr int NT = DS_THREADS;

struct Shared {
    SelectScratch sel;
    FlagScan<NT> scan;
};

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

// The k-th largest composite of the row's [lo, lo + n), k < n.
__device__ u64 select_global(const bits_t* xrow, u32 lo, u32 n, u32 k, Shared& sh) {
    u64 prefix = 0, mask = 0;
    u32 remaining = k;
    for (int shift = DS_COMP_BITS - 8; shift >= 0; shift -= 8) {
        for (u32 i = threadIdx.x; i < 256; i += NT) sh.sel.hist[i] = 0;
        __syncthreads();
        const u32 padded = (n + 31) & ~31u;
        for (u32 i = threadIdx.x; i < padded; i += NT) {
            const u64 c = i < n ? comp_at(xrow, lo + i) : 0;
            warp_hist_add(sh.sel.hist, (u32)(c >> shift) & 255, i < n && (c & mask) == prefix);
        }
        __syncthreads();
        if (threadIdx.x < 32) pick_digit(sh.sel, remaining);
        __syncthreads();
        remaining -= sh.sel.above;
        prefix |= (u64)sh.sel.digit << shift;
        mask |= (u64)255 << shift;
        if (sh.sel.bucket == remaining) break;  // the prefix alone separates the k
    }
    return prefix;
}

// Bitonic sort of slots [0, m) by composite, descending, for any m: every compare puts the larger
// first and the first compare of each merge mirrors the block, so the virtual padding (smaller
// than everything, at positions >= m) never moves and its compares can be skipped.
__device__ void sort_slots(const Params& p, i64 row, const bits_t* xrow, u32 m) {
    u32 size = 1;
    while (size < m) size <<= 1;
    for (u32 blk = 2; blk <= size; blk <<= 1) {
        for (u32 stride = blk >> 1; stride > 0; stride >>= 1) {
            for (u32 t = threadIdx.x; t < size / 2; t += NT) {
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

extern "C" __global__ void __launch_bounds__(DS_THREADS) DS_ENTRY(const Params p) {
    __shared__ Shared sh;
    const i64 row = blockIdx.x;
    const u32 k = (u32)p.k;
    const bits_t* xrow = (const bits_t*)p.x + row * p.row_stride;
    i64 lo64, hi64;
    row_range(p, row, lo64, hi64);
    const u32 lo = (u32)lo64, n = (u32)(hi64 - lo64);

    const u64 t = n > k ? select_global(xrow, lo, n, k, sh) : 0;

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
        u32 total;
        const u32 rank = cta_flag_rank<NT>(take, sh.scan, &total);
        if (take) set_slot_col(p, row, m + rank, lo + i);
        m += total;
    }
    const bool has_nan = __syncthreads_or(nan_here);
    if (p.flags & DS_F_SORTED) sort_slots(p, row, xrow, m);

    if (has_nan && p.nan_flags && threadIdx.x == 0) p.nan_flags[row] = 1;
    const RowOut out = row_out(p, row, xrow, has_nan);
    for (u32 i = threadIdx.x; i < k; i += NT) {
        const bool valid = i < m;
        const u32 col = valid ? slot_col(p, row, i) : 0;
        write_slot(p, out, i, valid, col, valid ? key_of(xrow[col]) : 0);
    }
}
