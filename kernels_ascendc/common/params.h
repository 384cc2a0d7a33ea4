// The kernel's one argument, passed by value, packed by deepselect_rt/ascend/args.py.
//
// Every field is 8 bytes and 8-byte aligned, so the struct has no padding: 20 fields, 160 bytes.
// The byte offset of each field is the number in its comment; tests/test_ascend.py parses this
// file and checks the offsets, sizes and flag values against the Python packer.
#pragma once
#include <cstdint>

struct DsParams {
    uint64_t x;               // 0    GM address of input element [0, 0]
    int64_t row_stride;       // 8    input row stride, elements
    int64_t rows;             // 16
    int64_t width;            // 24
    int64_t k;                // 32
    uint64_t begin;           // 40   GM (rows,) int32/int64, or 0 (every row starts at 0)
    uint64_t end;             // 48   GM (rows,) int32/int64, or 0 (every row ends at width)
    uint64_t offsets;         // 56   GM (rows,) int32/int64 added to valid indices, or 0
    uint64_t out_idx;         // 64   GM (rows, k) int32/int64
    int64_t idx_row_stride;   // 72   elements
    uint64_t out_val;         // 80   GM (rows, k) input dtype, or 0 when values are not returned
    int64_t val_row_stride;   // 88   elements
    int64_t flags;            // 96   DS_F_* below
    int64_t idx_fill;         // 104  index written to the empty slots of short rows
    uint64_t val_fill_bits;   // 112  the value fill's bit pattern in the input dtype
    uint64_t nan_flags;       // 120  GM (rows,) int32 set to 1 for rows holding NaN, or 0
    int64_t rows_per_core;    // 128  host tiling: every core takes this many rows ...
    int64_t rows_extra;       // 136  ... and cores [0, rows_extra) one more
    int64_t chunk;            // 144  elements read per step, a multiple of DS_CHUNK_ALIGN
    int64_t out_tile;         // 152  output slots staged in UB per copy-out
};

#define DS_F_SORTED 1
#define DS_F_IDX64 2
#define DS_F_BEGIN64 4
#define DS_F_END64 8
#define DS_F_OFF64 16
#define DS_F_VALUES 32
#define DS_F_NAN_SENTINEL 64

// Vector compares work on whole 256-byte repeats: 64 float32 lanes.
#define DS_CHUNK_ALIGN 64
