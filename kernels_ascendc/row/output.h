// Writes one row's k output slots through UB staging tiles of p.out_tile slots.
//
// Slot s gets entry s (index + offset, value) while s < count, then the fills; a sentinel row
// gets 0x3F3F3F3F and the dtype's quiet NaN everywhere. Exactly k slots are written per row.
#pragma once
#include "kernel_operator.h"
#include "common/keys.h"
#include "common/params.h"
#include "common/sync.h"

#define DS_SENTINEL_INDEX 0x3F3F3F3F

struct RowWriter {
    AscendC::LocalTensor<uint32_t> idx;   // staging: out_tile slots x 1 or 2 words (int32/int64)
    AscendC::LocalTensor<ds_bits_t> val;  // staging: out_tile slots
    AscendC::GlobalTensor<uint32_t> gidx; // out_idx viewed as 32-bit words
    AscendC::GlobalTensor<ds_bits_t> gval;
    AscendC::GlobalTensor<ds_bits_t> gx;  // the input, to re-read NaN values (keys drop payloads)
};

// What the row selected. Entries are composites (value order) or, when by_col, (~column << 32 |
// key) pairs (column order); both sorted descending.
struct RowResult {
    int64_t row;
    int64_t x_row;      // element offset of the row's column 0 in the input
    uint32_t count;     // entries selected (< k for short rows)
    bool by_col;
    bool sentinel;
    int64_t offset;     // output_idx_offset of the row
};

__aicore__ inline void write_row(const DsParams& p, const RowWriter& w,
                                 const AscendC::LocalTensor<uint64_t>& entries, const RowResult& r) {
    const bool wide = p.flags & DS_F_IDX64;
    const bool values = p.out_val != 0;
    const uint32_t words = wide ? 2 : 1;
    for (int64_t s0 = 0; s0 < p.k; s0 += p.out_tile) {
        const uint32_t m = static_cast<uint32_t>(p.k - s0 < p.out_tile ? p.k - s0 : p.out_tile);
        for (uint32_t j = 0; j < m; ++j) {
            const int64_t s = s0 + j;
            int64_t index = p.idx_fill;
            uint32_t bits = static_cast<uint32_t>(p.val_fill_bits);
            if (r.sentinel) {
                index = DS_SENTINEL_INDEX;
                bits = DS_QNAN_BITS;
            } else if (s < r.count) {
                const uint64_t e = entries.GetValue(s);
                const uint32_t col = r.by_col ? ~static_cast<uint32_t>(e >> 32) : comp_col(e);
                const uint32_t key = r.by_col ? static_cast<uint32_t>(e) : comp_key(e);
                // Summed in 64 bits; the int32 store below keeps the low word: int32 wrap-around.
                index = static_cast<int64_t>(col) + r.offset;
                bits = key == DS_KEY_NAN ? static_cast<uint32_t>(w.gx.GetValue(r.x_row + col))
                                         : bits_of_key(key);
            }
            w.idx.SetValue(j * words, static_cast<uint32_t>(index));
            if (wide) w.idx.SetValue(j * words + 1, static_cast<uint32_t>(static_cast<uint64_t>(index) >> 32));
            if (values) w.val.SetValue(j, static_cast<ds_bits_t>(bits));
        }
        wait_for<AscendC::HardEvent::S_MTE3>();
        const AscendC::DataCopyExtParams idx_copy{1, m * words * 4, 0, 0, 0};
        AscendC::DataCopyPad(w.gidx[(r.row * p.idx_row_stride + s0) * words], w.idx, idx_copy);
        if (values) {
            const AscendC::DataCopyExtParams val_copy{1, m * static_cast<uint32_t>(sizeof(ds_bits_t)), 0, 0, 0};
            AscendC::DataCopyPad(w.gval[r.row * p.val_row_stride + s0], w.val, val_copy);
        }
        // The next tile rewrites the staging buffers.
        wait_for<AscendC::HardEvent::MTE3_S>();
    }
}
