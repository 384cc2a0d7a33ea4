// One-pass streaming top-k (design.md, "The algorithm"): stream/stream_range.cuh filters the row
// into a shared candidate buffer, row/finish.cuh selects, sorts and writes the k best.
//
// DS_SPLIT chooses how a row maps to CTAs (p.split CTAs per row when split):
//   0  one CTA per row;
//   1  a thread-block cluster per row (sm_90+): each CTA streams one slice, keeps its k best,
//      and CTA 0 merges the others' through distributed shared memory and writes the row;
//   2  one slice per CTA, whose k best go to p.workspace (0 for "no element") for
//      topk_merge.cu, launched next on the same stream (GPUs without clusters).
//
// Compile-time parameters: DS_DTYPE, DS_KMAX, DS_THREADS, DS_ENTRY, DS_LOADS, DS_STAGES,
// DS_MIN_CTAS, DS_SPLIT.
#ifndef DS_SPLIT
#define DS_SPLIT 0
#endif
// CTAs per SM the register budget must allow (latency hiding across CTAs).
#ifndef DS_MIN_CTAS
#define DS_MIN_CTAS 2
#endif

#include "common/params.cuh"
#include "row/finish.cuh"
#include "stream/layout.cuh"
#include "stream/stream_range.cuh"
#if DS_SPLIT == 1
#include "cluster/primitives.cuh"
#endif

extern "C" __global__ void __launch_bounds__(DS_THREADS, DS_MIN_CTAS) DS_ENTRY(DS_PARAMS) {
    DS_BIND_PARAMS
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    VectorQueue& vq = *reinterpret_cast<VectorQueue*>(smem_raw + QUEUE_OFFSET);
    VectorRing& ring = *reinterpret_cast<VectorRing*>(smem_raw + RING_OFFSET);
    const u32 split = DS_SPLIT ? (u32)p.split : 1;
    const i64 row = blockIdx.x / split;
    const u32 slice = blockIdx.x % split;
    const u32 k = (u32)p.k;
    const bits_t* xrow = (const bits_t*)p.x + row * p.row_stride;
    i64 lo, hi;
    row_range(p, row, lo, hi);
    if (DS_SPLIT != 2 && slice == 0) prefetch_serving(p, row, 0, 1);  // the CTA that writes the row
    if (DS_SPLIT) slice_of(lo, hi, split, slice);

    u64 thr = 0;
    const u32 m = stream_range(sh, vq, ring, xrow, (u32)lo, (u32)(hi - lo), k, thr);
    // The queues and the ring are free now: the finish counts the winners' columns there.
    const ColumnBitmap bm = column_bitmap(smem_raw + QUEUE_OFFSET, sizeof(VectorQueue) + sizeof(VectorRing));

#if DS_SPLIT == 0
    finish_row(p, sh, m, k, thr, row, xrow, (u32)lo, (u32)(hi - lo), bm);
#elif DS_SPLIT == 1
    // Each CTA keeps its slice's k best, padded with 0 ("no element") to k entries; CTA 0 then
    // merges the others' in one pass (the global k best are among them, and composites are
    // unique, so the merge is exact).
    const u32 best = select_exact(sh, m, k, thr);
    for (u32 i = best + threadIdx.x; i < k; i += NT) sh.buf[i] = 0;
    if (threadIdx.x < 3) sh.steps[threadIdx.x] = 0;
    cluster_sync();
    StepCounter cnt;
    cnt.init(sh.steps);
    if (slice == 0) {
        cnt.base = best;
        Floor floor = threshold_floor(thr);
        merge_candidates(sh, cnt, k, thr, floor, (split - 1) * k,
                         [&](u32 i) { return cluster_load_u64(cluster_map(sh.buf + i % k, 1 + i / k)); });
    }
    cluster_sync();  // the others' buffers stay alive until CTA 0 has read them
    if (slice == 0) {
        row_range(p, row, lo, hi);  // the whole row's columns
        finish_row(p, sh, cnt.base, k, thr, row, xrow, (u32)lo, (u32)(hi - lo), bm);
    }
#else
    const u32 best = select_exact(sh, m, k, thr);
    u64* out = (u64*)p.workspace + (u64)blockIdx.x * k;
    for (u32 i = threadIdx.x; i < k; i += NT) out[i] = i < best ? sh.buf[i] : 0;
#endif
}
