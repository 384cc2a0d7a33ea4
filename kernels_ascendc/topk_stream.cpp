// One-pass streaming top-k for Ascend AI Cores (vector cores only), one row at a time per core.
//
// Rows are split over cores by the host tiling (deepselect_rt/ascend/tiling.py): core c takes
// rows_per_core rows, plus one if c < rows_extra, starting after those of cores 0..c-1. Each row
// is read once, in chunks of p.chunk elements (DataCopyPad: any alignment, never past `end`):
//   1. vector: a pre-filter keeps the lanes whose value is >= the floor of the threshold T, and
//      every NaN (row/filter.h);
//   2. scalar: each survivor's exact composite (key, ~column) is offered to a min-heap of the k
//      best (row/heap.h), whose root is T; a NaN under "raise"/"sentinel" ends the row.
// Then the heap is sorted (by value, or by column) and written with fills (row/output.h).
// The threshold is exact (ties go to the lower column), so the result is a pure function of the
// row: the same on every core count and batch size.
//
// Compile-time parameters: DS_DTYPE (common/dtype.h) and DS_ENTRY (the kernel's name).
#include "kernel_operator.h"
#include "common/params.h"
#include "common/dtype.h"
#include "common/keys.h"
#include "common/sync.h"
#include "row/range.h"
#include "row/heap.h"
#include "row/filter.h"
#include "row/output.h"

__aicore__ inline uint32_t round_up32(uint32_t bytes) { return (bytes + 31u) / 32u * 32u; }

class TopkStream {
public:
    __aicore__ inline void Init(const DsParams& p) {
        p_ = p;
        const uint32_t chunk = static_cast<uint32_t>(p.chunk);
        const uint32_t tile = static_cast<uint32_t>(p.out_tile);
        // Buffer sizes: deepselect_rt/ascend/tiling.py ub_bytes() mirrors this list.
        pipe_.InitBuffer(xbuf_, round_up32(chunk * sizeof(ds_elem_t)));
#if DS_DTYPE == DS_DTYPE_BF16
        pipe_.InitBuffer(widebuf_, round_up32(chunk * sizeof(float)));
        f_.wide = widebuf_.Get<float>();
#endif
        pipe_.InitBuffer(gebuf_, round_up32(chunk / 8));
        pipe_.InitBuffer(nanbuf_, round_up32(chunk / 8));
        pipe_.InitBuffer(iotabuf_, round_up32(chunk * 4));
        pipe_.InitBuffer(colsbuf_, round_up32(chunk * 4));
        pipe_.InitBuffer(heapbuf_, round_up32(static_cast<uint32_t>(p.k) * 8));
        pipe_.InitBuffer(idxbuf_, round_up32(tile * 8));
        pipe_.InitBuffer(valbuf_, round_up32(tile * sizeof(ds_bits_t)));
        pipe_.InitBuffer(flagbuf_, 32);

        x_ = xbuf_.Get<ds_elem_t>();
        f_.ge = gebuf_.Get<uint8_t>();
        f_.nan = nanbuf_.Get<uint8_t>();
        f_.iota = iotabuf_.Get<int32_t>();
        f_.cols = colsbuf_.Get<int32_t>();
        heap_.h = heapbuf_.Get<uint64_t>();
        w_.idx = idxbuf_.Get<uint32_t>();
        w_.val = valbuf_.Get<ds_bits_t>();
        flag_ = flagbuf_.Get<int32_t>();

        gx_.SetGlobalBuffer(reinterpret_cast<__gm__ ds_elem_t*>(p.x));
        w_.gx.SetGlobalBuffer(reinterpret_cast<__gm__ ds_bits_t*>(p.x));
        w_.gidx.SetGlobalBuffer(reinterpret_cast<__gm__ uint32_t*>(p.out_idx));
        w_.gval.SetGlobalBuffer(reinterpret_cast<__gm__ ds_bits_t*>(p.out_val));
        gflags_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(p.nan_flags));

        AscendC::CreateVecIndex(f_.iota, static_cast<int32_t>(0), chunk);
        wait_for<AscendC::HardEvent::V_S>();
    }

    __aicore__ inline void Process() {
        const int64_t core = AscendC::GetBlockIdx();
        const int64_t extra = core < p_.rows_extra ? core : p_.rows_extra;
        const int64_t first = core * p_.rows_per_core + extra;
        const int64_t count = p_.rows_per_core + (core < p_.rows_extra ? 1 : 0);
        for (int64_t r = first; r < first + count && r < p_.rows; ++r) DoRow(r);
    }

private:
    __aicore__ inline void DoRow(int64_t row) {
        int64_t lo, hi;
        row_range(p_, row, lo, hi);
        const int64_t x_row = row * p_.row_stride;
        const uint32_t n = static_cast<uint32_t>(hi - lo);
        const uint32_t chunk = static_cast<uint32_t>(p_.chunk);
        // A short row keeps every element; the heap is then never "full" before the end.
        heap_.reset(n < p_.k ? n : static_cast<uint32_t>(p_.k));
        const bool stop_on_nan = (p_.flags & DS_F_NAN_SENTINEL) || p_.nan_flags;
        const AscendC::LocalTensor<ds_bits_t> bits = x_.ReinterpretCast<ds_bits_t>();
        bool nan = false;
        for (uint32_t c0 = 0; c0 < n && !nan; c0 += chunk) {
            const uint32_t len = n - c0 < chunk ? n - c0 : chunk;
            const AscendC::DataCopyExtParams copy{1, len * static_cast<uint32_t>(sizeof(ds_elem_t)), 0, 0, 0};
            AscendC::DataCopyPad(x_, gx_[x_row + lo + c0], copy, AscendC::DataCopyPadExtParams<ds_elem_t>{false, 0, 0, 0});
            wait_for<AscendC::HardEvent::MTE2_V>();
            const ds_cmp_t floor = heap_.full() ? floor_of(heap_.threshold()) : cmp_neg_inf();
            const uint32_t lanes = (len + DS_CHUNK_ALIGN - 1) / DS_CHUNK_ALIGN * DS_CHUNK_ALIGN;
            const uint32_t kept = filter_chunk(f_, x_, floor, lanes);
            wait_for<AscendC::HardEvent::V_S>();
            for (uint32_t i = 0; i < kept; ++i) {
                const uint32_t j = static_cast<uint32_t>(f_.cols.GetValue(i));
                if (j >= len) break;  // survivors ascend: the rest are stale lanes past the chunk
                const uint32_t b = bits.GetValue(j);
                if (stop_on_nan && is_nan_bits(b)) {
                    nan = true;
                    break;
                }
                heap_.offer(make_comp(key_of(b), static_cast<uint32_t>(lo + c0 + j)));
            }
            // The next chunk's copy-in and filter overwrite what the scalar loop just read.
            wait_for<AscendC::HardEvent::S_MTE2>();
            wait_for<AscendC::HardEvent::S_V>();
        }
        if (nan && p_.nan_flags) MarkNan(row);
        RowResult r{row, x_row, heap_.n, !(p_.flags & DS_F_SORTED), nan, row_offset(p_, row)};
        if (!nan) SortEntries(r);
        write_row(p_, w_, heap_.h, r);
    }

    // Value order: composites descending. Column order: re-key as (~column, key), sort again.
    __aicore__ inline void SortEntries(const RowResult& r) {
        heap_sort_desc(heap_.h, r.count);
        if (!r.by_col) return;
        for (uint32_t i = 0; i < r.count; ++i) {
            const uint64_t c = heap_.h.GetValue(i);
            heap_.h.SetValue(i, (static_cast<uint64_t>(static_cast<uint32_t>(c)) << 32) | comp_key(c));
        }
        heap_sort_desc(heap_.h, r.count);
    }

    // nan_policy="raise": the host reads this flag after a stream sync and raises.
    __aicore__ inline void MarkNan(int64_t row) {
        flag_.SetValue(0, 1);
        wait_for<AscendC::HardEvent::S_MTE3>();
        AscendC::DataCopyPad(gflags_[row], flag_, AscendC::DataCopyExtParams{1, 4, 0, 0, 0});
        wait_for<AscendC::HardEvent::MTE3_S>();
    }

    DsParams p_;
    AscendC::TPipe pipe_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> xbuf_, widebuf_, gebuf_, nanbuf_, iotabuf_, colsbuf_,
        heapbuf_, idxbuf_, valbuf_, flagbuf_;
    AscendC::LocalTensor<ds_elem_t> x_;
    AscendC::LocalTensor<int32_t> flag_;
    AscendC::GlobalTensor<ds_elem_t> gx_;
    AscendC::GlobalTensor<int32_t> gflags_;
    FilterBufs f_;
    TopHeap heap_;
    RowWriter w_;
};

extern "C" __global__ __aicore__ void DS_ENTRY(DsParams p) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    TopkStream op;
    op.Init(p);
    op.Process();
}
