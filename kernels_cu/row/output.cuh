// Writes one output slot of a row: a selected element, a fill, or the NaN sentinel
// (contract.md: fills are never offset; the sentinel is 0x3F3F3F3F / NaN in every slot), with
// the serving options: per-row k, row-relative indices, the page-table lookup, raw indices.
#pragma once
#include "common/keys.cuh"
#include "common/params.cuh"
#include "row/nan_record.cuh"

#define DS_NAN_SENTINEL_INDEX 0x3F3F3F3F

struct RowOut {
    i64 row;
    i64 offset;        // added to valid indices in the output index type (less begin: DS_F_RELATIVE)
    i64 kcap;          // slots at and past it are fills (k_per_row[row] clamped to [0, k])
    const int* pages;  // the row's page-table row, or null (no table, or row_to_batch out of range)
    bool paged;        // a page table was given
    int page_shift;    // log2(page_size) when it is a power of two, else -1
    bool sentinel;     // the row held NaN and the policy is "sentinel"
    const bits_t* x;   // the row's input, for NaN payloads
};

__device__ __forceinline__ void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr)); }

// Called by the first warp of each CTA of a row at the kernel's start: warms L2 with what the
// output write reads of the serving options after the selection (the row's k_per_row and
// row_to_batch entries; its page-table row when rows map to table rows one to one, shared out
// over the row's ``parts`` CTAs), so that those dependent loads do not wait on DRAM. Prefetches
// only: no thread waits for them.
__device__ __forceinline__ void prefetch_serving(const Params& p, i64 row, u32 part, u32 parts) {
    const u32 lane = threadIdx.x;
    if (lane >= 32) return;
    if (lane == 0 && part == 0) {
        if (p.k_per_row) prefetch_l2((const char*)p.k_per_row + row * ((p.flags & DS_F_KROW64) ? 8 : 4));
        if (p.row_to_batch) prefetch_l2((const char*)p.row_to_batch + row * ((p.flags & DS_F_R2B64) ? 8 : 4));
    }
    if (p.page_table && !p.row_to_batch && row < p.batch) {
        const char* table = (const char*)(p.page_table + row * p.page_row_stride);
        const i64 lines = (p.max_pages * 4 + 127) / 128;
        for (i64 line = part + (i64)parts * lane; line < lines; line += (i64)parts * 32) prefetch_l2(table + line * 128);
    }
}

__device__ __forceinline__ RowOut row_out(const Params& p, i64 row, const bits_t* xrow, bool has_nan) {
    RowOut r;
    r.row = row;
    r.offset = p.offsets ? load_i64(p.offsets, p.flags & DS_F_OFF64, row) : 0;
    if (p.flags & DS_F_RELATIVE) {
        i64 lo, hi;
        row_range(p, row, lo, hi);
        r.offset -= lo;
    }
    r.kcap = p.k;
    if (p.k_per_row) {
        const i64 kr = load_i64(p.k_per_row, p.flags & DS_F_KROW64, row);
        r.kcap = kr < 0 ? 0 : (kr > p.k ? p.k : kr);
    }
    r.paged = p.page_table != nullptr;
    r.pages = nullptr;
    r.page_shift = (p.page_size > 0 && (p.page_size & (p.page_size - 1)) == 0) ? __ffsll(p.page_size) - 1 : -1;
    if (r.paged) {
        const i64 b = p.row_to_batch ? load_i64(p.row_to_batch, p.flags & DS_F_R2B64, row) : row;
        if (b >= 0 && b < p.batch) r.pages = p.page_table + b * p.page_row_stride;
    }
    r.sentinel = has_nan && (p.flags & DS_F_NAN_SENTINEL);
    r.x = xrow;
    return r;
}

__device__ __forceinline__ void write_slot(const Params& p, const RowOut& r, i64 slot, bool valid, u32 col, u32 key) {
    const bool wide = p.flags & DS_F_IDX64;
    valid = valid && slot < r.kcap;
    i64 raw = 0, idx = 0;
    if (valid) raw = wide ? (i64)col + r.offset : (i64)(int)((u32)col + (u32)r.offset);
    if (valid && r.paged) {
        // The raw index is the logical position; one outside the row's table is a fill (never
        // a read past the table).
        if (r.pages && raw >= 0 && raw < p.max_pages * p.page_size) {
            // A 64-bit division by a runtime value costs as much as the rest of the slot's write:
            // a shift for a power-of-two page size, 32-bit division while the position fits.
            i64 at, within;
            if (r.page_shift >= 0) {
                at = raw >> r.page_shift;
                within = raw & (p.page_size - 1);
            } else if ((u64)raw <= 0xFFFFFFFFull) {
                const u32 q = (u32)raw / (u32)p.page_size;
                at = q;
                within = (u32)raw - q * (u32)p.page_size;
            } else {
                at = raw / p.page_size;
                within = raw % p.page_size;
            }
            const i64 page = r.pages[at];
            idx = wide ? page * p.page_size + within : (i64)(int)((u32)page * (u32)p.page_size + (u32)within);
        } else {
            valid = false;
        }
    } else {
        idx = raw;
    }
    if (r.sentinel) raw = idx = DS_NAN_SENTINEL_INDEX;
    else if (!valid) raw = idx = p.idx_fill;
    if (wide) ((i64*)p.out_idx)[r.row * p.idx_row_stride + slot] = idx;
    else ((int*)p.out_idx)[r.row * p.idx_row_stride + slot] = (int)idx;
    if (p.out_raw) {
        if (wide) ((i64*)p.out_raw)[r.row * p.raw_row_stride + slot] = raw;
        else ((int*)p.out_raw)[r.row * p.raw_row_stride + slot] = (int)raw;
    }
    if (p.flags & DS_F_VALUES) {
        bits_t v;
        if (r.sentinel) v = (bits_t)DS_CANONICAL_NAN;
        else if (!valid) v = (bits_t)p.val_fill_bits;
        else v = key == DS_KEY_NAN ? r.x[col] : bits_of_key(key);
        ((bits_t*)p.out_val)[r.row * p.val_row_stride + slot] = v;
    }
}
