// The kernel argument block, shared by every top-k family and packed by
// deepselect_rt/cuda/launch.py. Every field is 8 bytes so the layout has no padding.
#pragma once
#include "common/types.cuh"

struct Params {
    const void* x;          // input, element [0, 0]
    i64 row_stride;         // input row stride, elements
    i64 rows;
    i64 width;
    i64 k;
    const void* begin;      // (rows,) int32/int64 or null (0)
    const void* end;        // (rows,) int32/int64 or null (width)
    const void* offsets;    // (rows,) int32/int64 or null
    void* out_idx;          // (rows, k), int32/int64
    i64 idx_row_stride;     // elements
    void* out_val;          // (rows, k) input dtype, or null when values are not returned
    i64 val_row_stride;     // elements
    i64 flags;              // DS_F_* below
    i64 idx_fill;
    u64 val_fill_bits;      // the fill value's bit pattern in the input dtype
    u32* nan_head;          // device counter of the NaN record (row/nan_record.cuh), or null
    u32* nan_entries;       // its ring of entries, in mapped pinned host memory
    i64 nan_call;           // the call id written with each entry
    i64 split;              // CTAs per row (split rows), else 1
    void* workspace;        // (rows, split, k) composites between split launches, or null
    // Serving options (row/output.cuh), zero when unused.
    const int* page_table;  // (batch, max_pages) int32: a row's logical positions -> pages, or null
    i64 page_row_stride;    // elements
    i64 page_size;          // > 0 with page_table
    i64 max_pages;
    i64 batch;
    const void* row_to_batch;  // (rows,) int32/int64: a row's page-table row, or null (row i -> i)
    const void* k_per_row;  // (rows,) int32/int64: slots at and past k_per_row[i] are fills, or null
    void* out_raw;          // (rows, k) indices before the page lookup, index dtype, or null
    i64 raw_row_stride;     // elements
};

// The entry's parameters. By default one by-value Params (one pointer in cuLaunchKernel's
// argument list). With DS_FIELD_ARGS=1, the launcher of XLA's kernel-call target (under jax.jit:
// deepselect_rt/cuda/xla_call.py) passes each buffer and scalar as its own parameter, so the
// entry takes Params' 8-byte fields one by one, in Params' order, and rebuilds the struct.
#ifndef DS_FIELD_ARGS
#define DS_FIELD_ARGS 0
#endif
#if DS_FIELD_ARGS
#define DS_PARAMS                                                                              \
    const void *f_x, i64 f_row_stride, i64 f_rows, i64 f_width, i64 f_k, const void *f_begin, \
        const void *f_end, const void *f_offsets, void *f_out_idx, i64 f_idx_row_stride,       \
        void *f_out_val, i64 f_val_row_stride, i64 f_flags, i64 f_idx_fill, u64 f_val_fill_bits, \
        u32 *f_nan_head, u32 *f_nan_entries, i64 f_nan_call, i64 f_split, void *f_workspace,   \
        const int *f_page_table, i64 f_page_row_stride, i64 f_page_size, i64 f_max_pages,      \
        i64 f_batch, const void *f_row_to_batch, const void *f_k_per_row, void *f_out_raw,     \
        i64 f_raw_row_stride
#define DS_BIND_PARAMS                                                                         \
    const Params p{f_x, f_row_stride, f_rows, f_width, f_k, f_begin, f_end, f_offsets,          \
                   f_out_idx, f_idx_row_stride, f_out_val, f_val_row_stride, f_flags,           \
                   f_idx_fill, f_val_fill_bits, f_nan_head, f_nan_entries, f_nan_call, f_split, \
                   f_workspace, f_page_table, f_page_row_stride, f_page_size, f_max_pages,      \
                   f_batch, f_row_to_batch, f_k_per_row, f_out_raw, f_raw_row_stride};
#else
#define DS_PARAMS const Params p
#define DS_BIND_PARAMS
#endif

#define DS_F_SORTED 1
#define DS_F_IDX64 2
#define DS_F_BEGIN64 4
#define DS_F_END64 8
#define DS_F_OFF64 16
#define DS_F_VALUES 32
#define DS_F_NAN_SENTINEL 64
#define DS_F_R2B64 128     // row_to_batch is int64
#define DS_F_KROW64 256    // k_per_row is int64
#define DS_F_RELATIVE 512  // indices count from the row's begin (ragged rows)

__device__ __forceinline__ i64 load_i64(const void* p, bool wide, i64 i) {
    return wide ? ((const i64*)p)[i] : (i64)((const int*)p)[i];
}

// The row's column range [lo, hi), clamped into 0 <= lo <= hi <= width (contract: values that
// could not be checked on the host are clamped, never read out of bounds).
__device__ __forceinline__ void row_range(const Params& p, i64 row, i64& lo, i64& hi) {
    hi = p.end ? load_i64(p.end, p.flags & DS_F_END64, row) : p.width;
    hi = hi < 0 ? 0 : (hi > p.width ? p.width : hi);
    lo = p.begin ? load_i64(p.begin, p.flags & DS_F_BEGIN64, row) : 0;
    lo = lo < 0 ? 0 : (lo > hi ? hi : lo);
}
