// Writes one output slot of a row: a selected element, a fill, or the NaN sentinel
// (contract.md: fills are never offset; the sentinel is 0x3F3F3F3F / NaN in every slot).
#pragma once
#include "common/keys.cuh"
#include "common/params.cuh"
#include "row/nan_record.cuh"

#define DS_NAN_SENTINEL_INDEX 0x3F3F3F3F

struct RowOut {
    i64 row;
    i64 offset;       // added to valid indices in the output index type
    bool sentinel;    // the row held NaN and the policy is "sentinel"
    const bits_t* x;  // the row's input, for NaN payloads
};

__device__ __forceinline__ RowOut row_out(const Params& p, i64 row, const bits_t* xrow, bool has_nan) {
    RowOut r;
    r.row = row;
    r.offset = p.offsets ? load_i64(p.offsets, p.flags & DS_F_OFF64, row) : 0;
    r.sentinel = has_nan && (p.flags & DS_F_NAN_SENTINEL);
    r.x = xrow;
    return r;
}

__device__ __forceinline__ void write_slot(const Params& p, const RowOut& r, i64 slot, bool valid, u32 col, u32 key) {
    const bool wide = p.flags & DS_F_IDX64;
    i64 idx;
    if (r.sentinel) idx = DS_NAN_SENTINEL_INDEX;
    else if (valid) idx = wide ? (i64)col + r.offset : (i64)(int)((u32)col + (u32)r.offset);
    else idx = p.idx_fill;
    if (wide) ((i64*)p.out_idx)[r.row * p.idx_row_stride + slot] = idx;
    else ((int*)p.out_idx)[r.row * p.idx_row_stride + slot] = (int)idx;
    if (p.flags & DS_F_VALUES) {
        bits_t v;
        if (r.sentinel) v = (bits_t)DS_CANONICAL_NAN;
        else if (!valid) v = (bits_t)p.val_fill_bits;
        else v = key == DS_KEY_NAN ? r.x[col] : bits_of_key(key);
        ((bits_t*)p.out_val)[r.row * p.val_row_stride + slot] = v;
    }
}
