// Second launch of a split row on GPUs without clusters (topk_stream.cu, DS_SPLIT 2): one CTA
// per row merges the p.split slices' k best from p.workspace and writes the row's outputs.
//
// Compile-time parameters: DS_DTYPE, DS_KMAX, DS_THREADS, DS_ENTRY, DS_LOADS.
#include "common/params.cuh"
#include "row/finish.cuh"

extern "C" __global__ void __launch_bounds__(DS_THREADS) DS_ENTRY(DS_PARAMS) {
    DS_BIND_PARAMS
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    const i64 row = blockIdx.x;
    const u32 k = (u32)p.k;
    const u32 count = (u32)p.split * k;
    const u64* ws = (const u64*)p.workspace + (u64)row * count;
    prefetch_serving(p, row, 0, 1);

    if (threadIdx.x < 3) sh.steps[threadIdx.x] = 0;
    __syncthreads();
    StepCounter cnt;
    cnt.init(sh.steps);
    u64 thr = 0;
    Floor floor = threshold_floor(thr);
    merge_candidates(sh, cnt, k, thr, floor, count, [&](u32 i) { return __ldcs(ws + i); });
    // Its shared memory is the candidate buffer alone: no room for a column bitmap.
    const ColumnBitmap none{nullptr, 0};
    finish_row(p, sh, cnt.base, k, thr, row, (const bits_t*)p.x + row * p.row_stride, 0, 0, none);
}
