// Radix select, 8 bits per pass, and the helpers around it: thresholds over composites (unique,
// so the answer is unique) or keys, for one CTA or (through the histogram merge) a cluster, and
// compaction of a shared buffer to the composites at or above a threshold.
#pragma once
#include "common/keys.cuh"
#include "warp/scan.cuh"

struct SelectScratch {
    u32 hist[256];
    u32 digit, above, bucket, compacted;
};

// Warp 0 finds the digit holding the remaining-th largest element, scanning bins from the top.
__device__ __forceinline__ void pick_digit(SelectScratch& s, u32 remaining) {
    const u32 lane = threadIdx.x & 31;
    u32 sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += s.hist[255 - 8 * lane - j];
    const u32 incl = warp_inclusive_sum(sum);
    const u32 excl = incl - sum;
    if (excl < remaining && remaining <= incl) {
        u32 cum = excl;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const u32 b = 255 - 8 * lane - j;
            const u32 h = s.hist[b];
            if (cum + h >= remaining) {
                s.digit = b;
                s.above = cum;
                s.bucket = h;
                break;
            }
            cum += h;
        }
    }
}

// Adds 1 to hist[bin] if `active`: one shared atomic a lane. Grouping a warp's lanes by bin first
// (match_any, or a ballot for a warp-wide bin) measured slower than the atomics' serialisation,
// even on rows of few distinct values; so did one add for each of a warp's first four bins,
// found by ballots, in the cluster prefilter's top digit, where the threads' maxima share a few
// binades.
__device__ __forceinline__ void hist_add(u32* hist, u32 bin, bool active) {
    if (active) atomicAdd(&hist[bin], 1u);
}

// The digit a pass picks: the bin holding the remaining-th largest element, the elements in the
// bins above it, and its own count.
struct Pick {
    u32 digit, above, bucket;
};

// The digits found so far: the `bucket` elements whose bits under `mask` equal `prefix` hold
// the k-th largest, and `remaining` of them belong to the k largest.
struct Digits {
    u64 prefix, mask;
    u32 remaining, bucket;

    // Whether keeping the whole bucket keeps at most `slack` more than the k largest.
    __device__ __forceinline__ bool within(u32 slack) const { return bucket - remaining <= slack; }

    // The digit at `shift` a pass picked.
    __device__ __forceinline__ void add(const Pick& got, int shift) {
        remaining -= got.above;
        bucket = got.bucket;
        prefix |= (u64)got.digit << shift;
        mask |= (u64)255 << shift;
    }
};

// Histograms of one CTA: fill and pick in the same shared array.
template <int NT>
struct CtaHistogram {
    // A zeroed histogram for the next pass.
    __device__ __forceinline__ u32* begin(SelectScratch& s) {
        for (u32 i = threadIdx.x; i < 256; i += NT) s.hist[i] = 0;
        __syncthreads();
        return s.hist;
    }

    // The digit of the filled histogram, for every thread.
    __device__ __forceinline__ Pick pick(SelectScratch& s, u32 remaining) {
        __syncthreads();
        if (threadIdx.x < 32) pick_digit(s, remaining);
        __syncthreads();
        return {s.digit, s.above, s.bucket};
    }
};

// Every warp's own pick from a histogram of 256 bins in shared memory: lane l holds the bins
// 8 (31 - l) .. 8 (31 - l) + 7 (two 16-byte loads), the lanes' sums are scanned from the top,
// and the lane whose run reaches `remaining` walks its bins in registers. Needs remaining <=
// the histogram's total.
__device__ __forceinline__ Pick warp_pick(const u32* hist, u32 remaining) {
    const u32 lane = threadIdx.x & 31;
    const uint4 a = reinterpret_cast<const uint4*>(hist)[2 * (31 - lane)];
    const uint4 b = reinterpret_cast<const uint4*>(hist)[2 * (31 - lane) + 1];
    const u32 h[8] = {b.w, b.z, b.y, b.x, a.w, a.z, a.y, a.x};  // from the top
    const u32 sum = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
    const u32 incl = warp_inclusive_sum(sum);
    const u32 at = __ffs(__ballot_sync(DS_FULL_MASK, incl >= remaining)) - 1;
    u32 cum = incl - sum, j = 8, above = 0, bucket = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (j == 8 && cum + h[i] >= remaining) {
            j = i;
            above = cum;
            bucket = h[i];
        }
        cum += h[i];
    }
    return {__shfl_sync(DS_FULL_MASK, 8 * (31 - lane) + 7 - j, at), __shfl_sync(DS_FULL_MASK, above, at),
            __shfl_sync(DS_FULL_MASK, bucket, at)};
}

// Histograms of one CTA with one barrier a pass, where CtaHistogram has three: every warp
// picks the digit itself (warp_pick), and three arrays rotate, pass p filling hist[p % 3]: pass
// p's pick zeroes hist[(p + 2) % 3], whose last reads, pass p - 1's picks, every warp made
// before pass p's barrier, and pass p + 1's barrier orders the zeroes before pass p + 2's
// fill. (Over few keys, as the cluster prefilter's select, warp 0's pick and the barriers around
// it held the other warps for much of a pass.)
template <int NT>
struct OneBarrierHistogram {
    u32 (&hist)[3][256];
    u32 passes = 0;

    // Zeroes the first two passes' arrays; a barrier must follow before the first fill.
    __device__ static __forceinline__ void init(u32 (&hist)[3][256]) {
        for (u32 i = threadIdx.x; i < 2 * 256; i += NT) hist[i / 256][i % 256] = 0;
    }

    __device__ __forceinline__ u32* begin(SelectScratch&) { return hist[passes % 3]; }

    __device__ __forceinline__ Pick pick(SelectScratch&, u32 remaining) {
        __syncthreads();
        for (u32 i = threadIdx.x; i < 256; i += NT) hist[(passes + 2) % 3][i] = 0;
        return warp_pick(hist[passes++ % 3], remaining);
    }
};

// Radix select, 8 bits per pass, refining d by the digits at shifts top, top - 8, ... down to
// `bottom`: fill(hist, shift, digits) adds the elements of the current bucket to hist by their
// digit at `shift`; Hist gives each pass a zeroed histogram and picks the digit from it (a
// CTA's own, or a cluster's sum). Stops once d.within(slack) (slack = 0: the exact k-th's
// bucket). Every thread of the CTA must call it; every participant computes the same digits.
template <class Fill, class Hist>
__device__ __forceinline__ void refine_digits(Digits& d, int top, int bottom, u32 slack, SelectScratch& s, Hist& hist,
                                              Fill fill) {
    for (int shift = top; shift >= bottom; shift -= 8) {
        fill(hist.begin(s), shift, d);
        d.add(hist.pick(s, d.remaining), shift);
        if (d.within(slack)) break;
    }
}

// The digits of the k-th largest from bit `top` down (see refine_digits).
template <class Fill, class Hist>
__device__ __forceinline__ Digits radix_digits(int top, u32 k, u32 slack, SelectScratch& s, Hist& hist, Fill fill) {
    Digits d{0, 0, k, 0};
    refine_digits(d, top, 0, slack, s, hist, fill);
    return d;
}

// Most ties at the k-th key that tied_column ranks directly (s.hist holds them).
constexpr u32 TIE_LIST = 256;

// Of the d.bucket <= TIE_LIST composites comp(0 .. count) sharing the key d.prefix (d.mask
// covers the key), the low 32 bits (~column) of the one with the d.remaining-th lowest column:
// the ties are gathered and each counts the lower columns. For bfloat16 the k-th key is shared
// by tens of elements, and the radix passes over the column bytes cost two to four passes.
template <int NT, class Comp>
__device__ u32 tied_column(u32 count, const Digits& d, SelectScratch& s, Comp comp) {
    static_assert(NT >= TIE_LIST, "one tie a thread");
    if (threadIdx.x == 0) s.compacted = 0;
    __syncthreads();
    for (u32 i = threadIdx.x; i < count; i += NT) {
        const u64 c = comp(i);
        if ((c & d.mask) == d.prefix) s.hist[atomicAdd(&s.compacted, 1u)] = (u32)c;
    }
    __syncthreads();
    if (threadIdx.x < d.bucket) {
        const u32 mine = s.hist[threadIdx.x];
        u32 lower = 0;  // ties with a lower column (a larger ~column)
#pragma unroll 4
        for (u32 j = 0; j < d.bucket; ++j) lower += s.hist[j] > mine;
        if (lower == d.remaining - 1) s.digit = mine;
    }
    __syncthreads();
    return s.digit;
}

// Returns a threshold t such that the composites >= t, of comp(0 .. count), are the k largest
// plus at most `slack` more (k < count). slack = 0 selects exactly k; a streaming pass may stop
// a digit early because it only needs a valid, not the tightest, threshold.
template <int NT, class Comp>
__device__ u64 radix_select(u32 count, u32 k, u32 slack, SelectScratch& s, Comp comp) {
    CtaHistogram<NT> cta;
    const auto fill = [&](u32* h, int shift, const Digits& d) {
        for (u32 i = threadIdx.x; i < count; i += NT) {
            const u64 c = comp(i);
            hist_add(h, (u32)(c >> shift) & 255, (c & d.mask) == d.prefix);
        }
    };
    Digits d{0, 0, k, 0};
    refine_digits(d, DS_COMP_BITS - 8, 32, slack, s, cta, fill);  // the key's digits
    if (d.within(slack)) return d.prefix;
    if (d.bucket <= TIE_LIST) return d.prefix | tied_column<NT>(count, d, s, comp);
    refine_digits(d, 24, 0, slack, s, cta, fill);  // many ties: the column's digits
    return d.prefix;
}

// The digits of the k-th largest of keys held in registers: key(j, valid) gives this thread's
// j-th key (j < N) and whether it exists; at least k must exist. Stops once the bucket holds at
// most k + slack keys (unless ties forbid it: then d.mask covers the whole key). Every thread
// of the CTA must call it.
template <int NT, int N, class Key>
__device__ __forceinline__ Digits key_digits(Key key, u32 k, u32 slack, SelectScratch& s) {
    CtaHistogram<NT> cta;
    return radix_digits(DS_ELEM_BITS - 8, k, slack, s, cta, [&](u32* h, int shift, const Digits& d) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            bool valid;
            const u32 kj = key(j, valid);
            hist_add(h, (kj >> shift) & 255, valid && (kj & (u32)d.mask) == (u32)d.prefix);
        }
    });
}

// A threshold t = (key prefix) << 32 from key_digits: the keys >= the prefix number at least k
// and, unless ties forbid it, at most k + slack.
template <int NT, int N, class Key>
__device__ u64 key_threshold(Key key, u32 k, u32 slack, SelectScratch& s) {
    return key_digits<NT, N>(key, k, slack, s).prefix << 32;
}

// Moves the composites >= t of buf[0, count) to buf[0, ...), in place. Chunk c writes below
// (c + 1) * R * NT and reads at or above it, so one barrier per chunk suffices.
template <int NT, int R>
__device__ u32 compact_at_least(u64* buf, u32 count, u64 t, SelectScratch& s) {
    if (threadIdx.x == 0) s.compacted = 0;
    __syncthreads();
    for (u32 base = 0; base < count; base += NT * R) {
        u64 r[R];
        u32 keep = 0;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const u32 i = base + j * NT + threadIdx.x;
            r[j] = i < count ? buf[i] : 0;
            if (i < count && r[j] >= t) keep |= 1u << j;
        }
        __syncthreads();
        const u32 n = __popc(keep);
        if (__any_sync(DS_FULL_MASK, n)) {
            const u32 incl = warp_inclusive_sum(n);
            u32 start = 0;
            if ((threadIdx.x & 31) == 31) start = atomicAdd(&s.compacted, incl);
            start = __shfl_sync(DS_FULL_MASK, start, 31);
            u32 pos = start + incl - n;
#pragma unroll
            for (int j = 0; j < R; ++j)
                if (keep >> j & 1) buf[pos++] = r[j];
        }
    }
    __syncthreads();
    return s.compacted;
}
