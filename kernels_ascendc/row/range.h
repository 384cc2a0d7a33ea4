// Per-row scalars read from GM: the column range and the index offset.
#pragma once
#include "kernel_operator.h"
#include "common/params.h"

// Element i of a (rows,) int32 or int64 GM vector, widened to int64.
__aicore__ inline int64_t load_index(uint64_t addr, bool wide, int64_t i) {
    if (wide) {
        AscendC::GlobalTensor<int64_t> g;
        g.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(addr));
        return g.GetValue(i);
    }
    AscendC::GlobalTensor<int32_t> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(addr));
    return g.GetValue(i);
}

// The row's column range [lo, hi), clamped into 0 <= lo <= hi <= width (contract: device values
// that could not be checked on the host are clamped, never read out of bounds).
__aicore__ inline void row_range(const DsParams& p, int64_t row, int64_t& lo, int64_t& hi) {
    hi = p.end ? load_index(p.end, p.flags & DS_F_END64, row) : p.width;
    hi = hi < 0 ? 0 : (hi > p.width ? p.width : hi);
    lo = p.begin ? load_index(p.begin, p.flags & DS_F_BEGIN64, row) : 0;
    lo = lo < 0 ? 0 : (lo > hi ? hi : lo);
}

__aicore__ inline int64_t row_offset(const DsParams& p, int64_t row) {
    return p.offsets ? load_index(p.offsets, p.flags & DS_F_OFF64, row) : 0;
}
