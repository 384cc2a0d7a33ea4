// Radix select over the composites in shared memory: find the k largest of buf[0, count) and
// compact them into buf[0, k). Composites are unique, so the answer is unique.
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

// Adds 1 to hist[bin] for every lane with `active`; lanes sharing a bin add once together, which
// keeps the shared atomics uncontended when values cluster (ties, narrow dtypes).
__device__ __forceinline__ void warp_hist_add(u32* hist, u32 bin, bool active) {
    const u32 lanes = __ballot_sync(DS_FULL_MASK, active);
    if (!active) return;
    const u32 peers = __match_any_sync(lanes, bin);
    if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], (u32)__popc(peers));
}

// Returns a threshold t such that the composites >= t are the k largest plus at most `slack`
// more (k < count). slack = 0 selects exactly k; a streaming pass may stop a digit early
// because it only needs a valid, not the tightest, threshold.
template <int NT>
__device__ u64 radix_select(const u64* buf, u32 count, u32 k, u32 slack, SelectScratch& s) {
    u64 prefix = 0, mask = 0;
    u32 remaining = k;
    for (int shift = DS_COMP_BITS - 8; shift >= 0; shift -= 8) {
        for (u32 i = threadIdx.x; i < 256; i += NT) s.hist[i] = 0;
        __syncthreads();
        const u32 padded = (count + 31) & ~31u;  // whole warps for the warp-level adds
        for (u32 i = threadIdx.x; i < padded; i += NT) {
            const u64 c = i < count ? buf[i] : 0;
            warp_hist_add(s.hist, (u32)(c >> shift) & 255, i < count && (c & mask) == prefix);
        }
        __syncthreads();
        if (threadIdx.x < 32) pick_digit(s, remaining);
        __syncthreads();
        remaining -= s.above;
        prefix |= (u64)s.digit << shift;
        mask |= (u64)255 << shift;
        // Keeping the whole bucket keeps k + (bucket - remaining) elements.
        if (s.bucket - remaining <= slack) break;
    }
    return prefix;
}

// A threshold t for keys held in registers: key(j, valid) gives this thread's j-th key (j < N)
// and whether it exists; at least k must exist. Returns t = (key prefix) << 32 such that the
// keys >= the prefix number at least k and, unless ties forbid it, at most k + slack. Every
// thread of the CTA must call it.
template <int NT, int N, class Key>
__device__ u64 key_threshold(Key key, u32 k, u32 slack, SelectScratch& s) {
    u32 prefix = 0, mask = 0;
    u32 remaining = k;
    for (int shift = DS_ELEM_BITS - 8; shift >= 0; shift -= 8) {
        for (u32 i = threadIdx.x; i < 256; i += NT) s.hist[i] = 0;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < N; ++j) {
            bool valid;
            const u32 kj = key(j, valid);
            warp_hist_add(s.hist, (kj >> shift) & 255, valid && (kj & mask) == prefix);
        }
        __syncthreads();
        if (threadIdx.x < 32) pick_digit(s, remaining);
        __syncthreads();
        remaining -= s.above;
        prefix |= (u32)s.digit << shift;
        mask |= 255u << shift;
        if (s.bucket - remaining <= slack) break;
    }
    return (u64)prefix << 32;
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
