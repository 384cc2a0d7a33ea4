// The vector pre-filter of one chunk: the chunk-local columns whose value may still beat the
// threshold (value >= floor), and every NaN (value != value), in ascending order.
#pragma once
#include "kernel_operator.h"
#include "common/dtype.h"

struct FilterBufs {
    AscendC::LocalTensor<ds_cmp_t> wide;   // bfloat16 chunk widened to float32 (unused otherwise)
    AscendC::LocalTensor<uint8_t> ge;      // 1 bit per lane: value >= floor
    AscendC::LocalTensor<uint8_t> nan;     // 1 bit per lane: value is NaN
    AscendC::LocalTensor<int32_t> iota;    // 0, 1, ..., chunk - 1 (filled once)
    AscendC::LocalTensor<int32_t> cols;    // survivors' chunk-local columns
};

// lanes: a multiple of DS_CHUNK_ALIGN. Lanes at or past the chunk's valid length hold stale data
// and may survive: the caller stops at the first survivor column >= the valid length.
// Returns the survivor count; the caller must wait for the V pipe before reading `cols`.
__aicore__ inline uint32_t filter_chunk(const FilterBufs& b, const AscendC::LocalTensor<ds_elem_t>& x,
                                        ds_cmp_t floor, uint32_t lanes) {
#if DS_DTYPE == DS_DTYPE_BF16
    AscendC::Cast(b.wide, x, AscendC::RoundMode::CAST_NONE, lanes);
    AscendC::PipeBarrier<PIPE_V>();
    const AscendC::LocalTensor<ds_cmp_t>& v = b.wide;
#else
    const AscendC::LocalTensor<ds_cmp_t>& v = x;
#endif
    AscendC::CompareScalar(b.ge, v, floor, AscendC::CMPMODE::GE, lanes);
    AscendC::Compare(b.nan, v, v, AscendC::CMPMODE::NE, lanes);
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::LocalTensor<uint16_t> keep = b.ge.ReinterpretCast<uint16_t>();
    AscendC::Or(keep, keep, b.nan.ReinterpretCast<uint16_t>(), lanes / 16);
    AscendC::PipeBarrier<PIPE_V>();
    // Counter mode (reduceMode = true): `lanes` elements in one pass, the pattern read as bits.
    uint64_t kept = 0;
    AscendC::GatherMaskParams params{1, 1, 8, 8};
    AscendC::GatherMask(b.cols, b.iota, b.ge.ReinterpretCast<uint32_t>(), true, lanes, params, kept);
    return static_cast<uint32_t>(kept);
}
