// One-pass streaming top-k, one CTA per row (design.md, "The algorithm").
//
// The row is read once in blocks of DS_LOADS x DS_THREADS 16-byte vectors, visited in a fixed
// pseudo-random order (so no data order makes it slow). Each element is tested against the
// running threshold T (a composite: key, then lower column); survivors are appended to a shared
// candidate buffer. When the buffer could overflow on the next substep, a radix select keeps the
// k best and raises T. At the end the k best are sorted (by value, or by column) and written.
//
// Compile-time parameters: DS_DTYPE, DS_KMAX (largest k served), DS_THREADS, DS_ENTRY, and
// DS_LOADS (vector loads in flight per thread).
#include "common/keys.cuh"
#include "common/params.cuh"
#include "block/append.cuh"
#include "block/radix_select.cuh"
#include "block/bitonic.cuh"
#include "row/output.cuh"
#include "row/vector_filter.cuh"

#ifndef DS_LOADS
#define DS_LOADS 4
#endif
// CTAs per SM the register budget must allow (latency hiding across CTAs).
#ifndef DS_MIN_CTAS
#define DS_MIN_CTAS 2
#endif

constexpr int NT = DS_THREADS;
constexpr int BLOCK = NT * DS_VEC * DS_LOADS;  // elements of one block, appended at most per step
// Candidate buffer entries: k kept after a select, at least DS_KMAX free before the next one,
// and room for a whole block (deepselect_rt/cuda/plan.py mirrors this size). A larger buffer
// measured slower on the H200 (4096 more entries: 13% at 4096 x 1M, k = 512).
constexpr int CAP = 2 * DS_KMAX + BLOCK;

struct Shared {
    u64 buf[CAP];
    SelectScratch sel;
    u32 steps[3];
};

// A stride in [1, n) coprime with n (n > 1) that spreads consecutive visits across the row.
__device__ __forceinline__ u32 visit_stride(u32 n) {
    u32 s = (n * 5u) / 8u | 1u;
    for (;;) {
        u32 a = s, b = n;
        while (b) { u32 t = a % b; a = b; b = t; }
        if (a == 1) return s % n;
        s += 2;
    }
}

// While streaming, a select may keep up to DS_KMAX / 2 extra candidates: a looser threshold
// costs a few more appends but saves the radix passes over the column bits.
constexpr u32 STREAM_SLACK = DS_KMAX / 2;

// Keeps the best of the buffer when the next block could overflow it; updates T and its floor.
__device__ __forceinline__ void maybe_select(Shared& sh, StepCounter& cnt, u32 k, u64& thr, float& floor) {
    if (cnt.base <= (u32)(CAP - BLOCK)) return;
    thr = radix_select<NT>(sh.buf, cnt.base, k, STREAM_SLACK, sh.sel);
    cnt.base = compact_at_least<NT, 4>(sh.buf, cnt.base, thr, sh.sel);
    floor = threshold_floor(thr);
}

__device__ __forceinline__ void load_block(Vec (&v)[DS_LOADS], const uint4* vrow, u32 v0, u32 nvec) {
#pragma unroll
    for (int u = 0; u < DS_LOADS; ++u) {
        const u32 vi = v0 + u * NT + threadIdx.x;
        if (vi < nvec) v[u].v = __ldcs(vrow + vi);
    }
}

extern "C" __global__ void __launch_bounds__(DS_THREADS, DS_MIN_CTAS) DS_ENTRY(const Params p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    const i64 row = blockIdx.x;
    const u32 k = (u32)p.k;
    const bits_t* xrow = (const bits_t*)p.x + row * p.row_stride;
    i64 lo, hi;
    row_range(p, row, lo, hi);
    const u32 n = (u32)(hi - lo);

    if (threadIdx.x < 3) sh.steps[threadIdx.x] = 0;
    __syncthreads();
    StepCounter cnt;
    cnt.init(sh.steps);
    u64 thr = 0;

    // Split [lo, hi) into an unaligned head, 16-byte vectors, and a tail.
    const u32 mis = (u32)(((u64)(xrow + lo) & 15) / DS_ELEM_BYTES);
    const u32 head = mis ? min(n, (u32)DS_VEC - mis) : 0;
    const u32 nvec = (n - head) / DS_VEC;
    const u32 body = (u32)lo + head;
    const u32 tail = n - head - nvec * DS_VEC;

    // Edge elements first (at most 2 * (DS_VEC - 1)), one per thread: all pass while T is 0.
    {
        const u32 t = threadIdx.x;
        bits_t b[1] = {0};
        u32 col = 0, pass = 0;
        if (t < head + tail) {
            col = t < head ? (u32)lo + t : body + nvec * DS_VEC + (t - head);
            b[0] = xrow[col];
            pass = 1;
        }
        cnt.prepare();
        warp_append<1>(b, col, pass, sh.buf, cnt.base, cnt.current());
        __syncthreads();
        cnt.finish();
    }

    const uint4* vrow = (const uint4*)(xrow + body);
    const u32 per_block = DS_LOADS * NT;
    const u32 nblocks = (nvec + per_block - 1) / per_block;
    const u32 stride = nblocks > 1 ? visit_stride(nblocks) : 0;
    float floor = threshold_floor(thr);
    // Blocks alternate between two register sets, so the next block's loads are in flight while
    // this one is filtered, with no copy between the sets (a copy made the compiler wait for the
    // loads right where they were issued).
    Vec a[DS_LOADS], b[DS_LOADS];
    const auto advance = [&](u32 blk) { return blk + stride >= nblocks ? blk + stride - nblocks : blk + stride; };
    // One barrier per block: the buffer always has room for a whole block's survivors.
    const auto process = [&](const Vec (&v)[DS_LOADS], u32 blk) {
        cnt.prepare();
#pragma unroll
        for (int u = 0; u < DS_LOADS; ++u) {
            const u32 vi = blk * per_block + u * NT + threadIdx.x;
            const u32 col0 = body + vi * DS_VEC;
            const u32 pass = vi < nvec ? filter(v[u], col0, thr, floor) : 0;
            warp_append<DS_VEC>(v[u].b, col0, pass, sh.buf, cnt.base, cnt.current());
        }
        __syncthreads();
        cnt.finish();
        maybe_select(sh, cnt, k, thr, floor);
    };
    u32 blk = 0;
    if (nblocks) load_block(a, vrow, 0, nvec);
    for (u32 j = 0; j < nblocks; j += 2) {
        const u32 blk_b = advance(blk);
        if (j + 1 < nblocks) load_block(b, vrow, blk_b * per_block, nvec);
        process(a, blk);
        if (j + 1 == nblocks) break;
        const u32 blk_a = advance(blk_b);
        if (j + 2 < nblocks) load_block(a, vrow, blk_a * per_block, nvec);
        process(b, blk_b);
        blk = blk_a;
    }

    u32 m = cnt.base;
    if (m > k) {
        const u64 t = radix_select<NT>(sh.buf, m, k, 0, sh.sel);
        m = compact_at_least<NT, 4>(sh.buf, m, t, sh.sel);
    }
    // NaN ranks above everything, so the row holds NaN iff a NaN key was selected.
    bool nan_here = false;
    for (u32 i = threadIdx.x; i < m; i += NT) nan_here |= comp_key(sh.buf[i]) == DS_KEY_NAN;
    u32 sorted_n = 1;
    while (sorted_n < m) sorted_n <<= 1;
    for (u32 i = m + threadIdx.x; i < sorted_n; i += NT) sh.buf[i] = 0;
    const bool has_nan = __syncthreads_or(nan_here);
    bitonic_sort_desc<NT>(sh.buf, sorted_n, p.flags & DS_F_SORTED);

    if (has_nan && p.nan_flags && threadIdx.x == 0) p.nan_flags[row] = 1;
    const RowOut out = row_out(p, row, xrow, has_nan);
    for (u32 i = threadIdx.x; i < k; i += NT) {
        const bool valid = i < m;
        const u64 c = valid ? sh.buf[i] : 0;
        write_slot(p, out, i, valid, comp_col(c), comp_key(c));
    }
}
