// Appends a row that holds NaN to the device's NaN record (deepselect_rt/nan_record.py): a ring of
// (seq, call, row_lo, row_hi) entries in pinned host memory that the host reads without a
// synchronisation. The position comes from a device-memory counter (device-scope atomics need no
// host atomics over PCIe); seq, written last after a system fence, publishes the entry.
#pragma once
#include "common/params.cuh"

#define DS_NAN_RECORD_CAP 1024

__device__ __forceinline__ void record_nan(const Params& p, i64 row) {
    if (!p.nan_head) return;
    const u32 i = atomicAdd(p.nan_head, 1u);
    volatile u32* e = p.nan_entries + 4 * (i % DS_NAN_RECORD_CAP);
    e[1] = (u32)p.nan_call;
    e[2] = (u32)(u64)row;
    e[3] = (u32)((u64)row >> 32);
    __threadfence_system();
    e[0] = i + 1;
}
