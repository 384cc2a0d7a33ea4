// Streaming a column range of a row through the threshold filter into the candidate buffer.
//
// The range is read once in blocks of DS_LOADS x DS_THREADS 16-byte vectors, visited in a fixed
// pseudo-random order (so no data order makes it slow), DS_STAGES - 1 blocks ahead through a
// ring in shared memory (stream/vector_ring.cuh). Each element is tested against the
// running threshold T (a composite: key, then lower column): a vector whose packed maximum
// may reach T is queued (stream/vector_queue.cuh), and the queue's vectors, 32 at a time, have
// each element tested; survivors are appended to the buffer. Warps run their own vectors of
// each block without waiting for one another; they meet for a radix select, which raises T,
// once the buffer passes its trigger, at the end, and before a pass's blocks.
#pragma once
#include "block/scan.cuh"
#include "row/candidates.cuh"
#include "stream/vector_filter.cuh"
#include "stream/vector_queue.cuh"
#include "stream/vector_ring.cuh"

// A stride in [1, n) coprime with n (n > 1) that spreads consecutive visits across the range.
__device__ __forceinline__ u32 visit_stride(u32 n) {
    u32 s = (n * 5u) / 8u | 1u;
    for (;;) {
        u32 a = s, b = n;
        while (b) { u32 t = a % b; a = b; b = t; }
        if (a == 1) return s % n;
        s += 2;
    }
}

// The rank in the sample (sampled_threshold) of the first estimate: the sample's expected share
// of the k best plus four standard deviations and 4, so the range almost always holds at least
// k elements at or above the estimate; the caller checks that and streams again otherwise.
// Fewer deviations would stream more rows twice, and such a row sets the time of its whole wave.
// 0 (no estimate) for ranges too short to sample or where r reaches k (a block's own k-th best,
// a valid bound, is as good). Few more than k candidates from the start means few selects.
constexpr u32 SAMPLE = NT * DS_VEC;

__device__ __forceinline__ u32 sample_rank(u32 nvec, u32 n, u32 k) {
    if (nvec < NT || n <= k) return 0;
    const float expect = (float)k * SAMPLE / n;
    const u32 r = (u32)(expect + 4.f * sqrtf(expect)) + 4;
    return r >= k || r > SAMPLE / 2 ? 0 : r;
}

// The rank of a second estimate once the one of rank r left m < k elements of the range at or
// above it, or 0 as above: the range's own ratio, m for rank r, puts this rank at 1.5 k (at
// 1.2-1.5 k, as the first estimate may hold up to r / 4 more sampled elements than r). Real
// scores cluster by position, and an evenly spaced sample then varies more than the binomial
// margin assumes: some real indexer rows miss the first estimate, and streaming them again
// from T = 0 costs far more than from a second estimate.
__device__ __forceinline__ u32 retry_rank(u32 r, u32 m, u32 k) {
    if (!m) return 0;
    const u32 r2 = (u32)(1.5f * r * k / m) + 4;
    return r2 >= k || r2 > SAMPLE / 2 ? 0 : r2;
}

// A threshold estimated from a sample of the range: one 16-byte vector per thread, spread evenly
// (so a sorted row is sampled like any other), and its element of rank r (sample_rank). Where
// the sample's r-th key is shared by more than the slack (few distinct values), the estimate
// is the r-th sampled composite, its column that of the r-th such tie in column order: a key
// alone would let every tie through until the selects bound the column, and in the visits'
// pseudo-random order the ties would be appended many times over.
__device__ __forceinline__ u64 sampled_threshold(Shared& sh, const uint4* vrow, u32 body, u32 nvec, u32 r) {
    const u32 vi = (u32)((u64)threadIdx.x * nvec / NT);
    Vec v;
    v.v = vrow[vi];
    to_keys(v);
    const u32 slack = r / 4;
    const auto key = [&](int e, bool& valid) {
        valid = true;
        return (u32)v.b[e];
    };
    const Digits d = key_digits<NT, DS_VEC>(key, r, slack, sh.sel);
    if (d.within(slack)) return d.prefix << 32;
    // The ties (d.prefix is the whole key): the sample's column order is the threads', then
    // their elements'. sel.hist serves as the warps' totals: the last pick has read it.
    u32 ties = 0;
#pragma unroll
    for (int e = 0; e < DS_VEC; ++e) ties += (u32)v.b[e] == (u32)d.prefix;
    const u32 incl = warp_inclusive_sum(ties);
    u32 before[1] = {incl - ties};
    warp_offsets<NT, 1>(__shfl_sync(DS_FULL_MASK, incl, 31), before, sh.sel.hist);
    if (before[0] < d.remaining && d.remaining <= before[0] + ties) {
        u32 seen = before[0];
#pragma unroll
        for (int e = 0; e < DS_VEC; ++e) {
            seen += (u32)v.b[e] == (u32)d.prefix;
            if ((u32)v.b[e] == (u32)d.prefix && seen == d.remaining) sh.sel.digit = body + vi * DS_VEC + e;
        }
    }
    __syncthreads();
    return make_comp((u32)d.prefix, sh.sel.digit);
}

// Filters columns [lo, lo + n) of xrow into sh.buf and returns how many entries it holds; on
// return T (thr) is a valid lower bound of the range's k-th best.
__device__ __forceinline__ u32 stream_range(Shared& sh, VectorQueue& vq, VectorRing& ring, const bits_t* xrow,
                                            u32 lo, u32 n, u32 k, u64& thr) {
    // Split [lo, lo + n) into an unaligned head, 16-byte vectors, and a tail.
    const u32 mis = (u32)(((u64)(xrow + lo) & 15) / DS_ELEM_BYTES);
    const u32 head = mis ? min(n, (u32)DS_VEC - mis) : 0;
    const u32 nvec = (n - head) / DS_VEC;
    const u32 body = lo + head;
    const u32 tail = n - head - nvec * DS_VEC;
    const uint4* vrow = (const uint4*)(xrow + body);
    const u32 per_block = DS_LOADS * NT;
    const u32 nblocks = (nvec + per_block - 1) / per_block;
    const u32 stride = nblocks > 1 ? visit_stride(nblocks) : 0;
    Floor floor;
    const auto advance = [&](u32 blk) { return blk + stride >= nblocks ? blk + stride - nblocks : blk + stride; };
    WarpQueue q;
    q.init(vq);
    // Warps stream their own vectors of each block without waiting for one another: appends
    // claim buffer entries with one shared atomic a warp, and the CTA meets only when a select
    // is due (sh.claimed past CAP - ROOM), when a warp's survivors did not fit, at the end, and
    // around a pass's edge elements, before its blocks.
    // A barrier a block would hold warps for the slowest one's loads (the largest stall), and
    // meeting every few blocks as well measures no faster. Between the crossing claim and its next check a
    // warp appends at most one block's share (<= 32 x DS_LOADS vectors), so the whole-block room
    // always fits.
    const auto claimed = [&] { return __shfl_sync(DS_FULL_MASK, *(volatile u32*)&sh.claimed, 0); };
    // A warp whose survivors do not fit holds the indices of the vectors it popped, one a lane,
    // until a select has made room. While holding it pops no more: its queue then takes at most
    // one more load (QUEUE_CAP).
    static_assert(!BOUNDED_ROOM || DS_LOADS <= 2, "a holding warp's queue overflows past two loads a block");
    constexpr u32 NO_VECTOR = ~0u;
    u32 held = NO_VECTOR;
    bool holding = false;
    // Tests the elements of a queued vector against the current T and appends the survivors. No
    // winner is lost: every T of a pass that stands is at most the range's k-th best (a select
    // with slack may even lower T, stopping at the key's digits).
    const auto test = [&](bool valid, const Vec& v, u32 vi) {
        const u32 col0 = body + vi * DS_VEC;
        Vec keys = v;
        to_keys(keys);
        const u32 pass = valid ? keys_reaching(keys, col0, thr) : 0;
        holding = warp_append<DS_VEC, BOUNDED_ROOM>([&](int e) { return make_comp(keys.b[e], col0 + e); }, pass,
                                                    sh.buf, 0, &sh.claimed, CAP) == APPEND_MISSED;
        if (holding) held = valid ? vi : NO_VECTOR;
    };
    // A warp's meeting with the CTA: it places what it owes while it fits (what it holds, read
    // again from the row after a select; 32 queued vectors past one load's room; at the end the
    // rest), then, when a select is due or its range is done, waits for the other warps and
    // selects with them if one is due. A warp waiting for a select holds up the others only
    // until their next check: the count it passed (or the claim it missed, which also passed
    // CAP) makes them due too. The warp whose claim came last reads the final count before it
    // arrives, so the barrier's OR tells every warp alike whether a select is due. Returns
    // false once every warp's range is done.
    const auto meet = [&](bool finished) {
        bool retry = false;
        for (;;) {
            for (;;) {
                Vec v;
                v.v = make_uint4(0, 0, 0, 0);
                u32 vi = NO_VECTOR;
                if (holding) {
                    if (!retry) break;
                    retry = false;
                    vi = held;
                    if (vi != NO_VECTOR) v.v = vrow[vi];
                } else if (q.count >= 32 || (finished && q.count)) {
                    q.pop(min(q.count, 32u), [&](bool valid, const Vec& w, u32 wi) {
                        v = w;
                        vi = valid ? wi : NO_VECTOR;
                    });
                } else {
                    break;
                }
                test(vi != NO_VECTOR, v, vi);
            }
            const bool due = holding || claimed() > (u32)(CAP - ROOM);
            if (!finished && !due) return true;
            if (!__syncthreads_or(due)) return !__syncthreads_and(finished);
            const u32 kept = select_buffer(sh, min(claimed(), (u32)CAP), k, thr, floor);
            if (threadIdx.x == 0) sh.claimed = kept;
            __syncthreads();
            retry = holding;
        }
    };
    // Per block: a warp tests at most DS_LOADS x 32 queued vectors (its queue holds < 32 before
    // a load unless it holds survivors).
    const auto process = [&](const Vec (&v)[DS_LOADS], u32 blk) {
        const float f = floor.from(body + blk * per_block * DS_VEC);  // one test for the whole block
#pragma unroll
        for (int u = 0; u < DS_LOADS; ++u) {
            const u32 vi = blk * per_block + u * NT + threadIdx.x;
            q.push(vi < nvec && vector_may_pass(v[u], f), v[u], vi);
            if (!holding && q.count >= 32) q.pop(32, test);
        }
    };

    // The first DS_STAGES - 1 blocks of a pass start loading; returns the next block to fetch.
    const auto start = [&] {
        u32 blk = 0;
        for (u32 s = 0; s + 1 < DS_STAGES; ++s) {
            ring.fetch(s, vrow, s < nblocks ? blk : nblocks, per_block, nvec);
            blk = advance(blk);
        }
        return blk;
    };

    // A pass from T = seed: valid when the buffer ends with at least k entries (every element
    // at or above the seed was kept, and a select only ever keeps k or more), else the range
    // holds m < k elements at or above the estimate (no select ran: m is their count) and is
    // streamed again, from a second estimate (retry_rank) and after that from 0.
    u32 ahead = start();  // the first blocks load while the sample is selected
    u32 rank = sample_rank(nvec, n, k);
    u64 seed = rank ? sampled_threshold(sh, vrow, body, nvec, rank) : 0;
    for (bool retried = false;; retried = true) {
        if (threadIdx.x == 0) sh.claimed = 0;
        __syncthreads();
        thr = seed;
        floor = threshold_floor(thr);
        // Edge elements first (at most 2 * (DS_VEC - 1)), one per thread, and a barrier before
        // the blocks. Without it a late edge claim, which is unbounded, could follow the other
        // warps' bounded claims past CAP (claims count even when they miss) and write past the
        // buffer, losing the edges and leaving a composite in a queue slot that reads as a NaN
        // vector (a false NaN flag).
        {
            const u32 t = threadIdx.x;
            bits_t e = 0;
            u32 col = 0, pass = 0;
            if (t < head + tail) {
                col = t < head ? lo + t : body + nvec * DS_VEC + (t - head);
                e = xrow[col];
                pass = make_comp(key_of(e), col) >= thr;
            }
            warp_append<1>([&](int) { return make_comp(key_of(e), col); }, pass, sh.buf, 0, &sh.claimed);
        }
        __syncthreads();
        u32 blk = 0;
        for (u32 j = 0;; ++j) {
            const bool finished = j >= nblocks;
            if (!finished) {
                Vec v[DS_LOADS];
                ring.take(v, j % DS_STAGES);
                // The stage read last step is free again (its vectors were filtered from registers).
                ring.fetch((j + DS_STAGES - 1) % DS_STAGES, vrow, j + DS_STAGES - 1 < nblocks ? ahead : nblocks,
                           per_block, nvec);
                ahead = advance(ahead);
                if (j == 0 && !seed && min(per_block, nvec) * DS_VEC >= k) {
                    // Seed T from the first block's keys: appending the whole first block at T = 0
                    // and selecting from it cost a large share of a short row's time. Any subset's
                    // k-th best is a valid lower bound of the row's.
                    const auto key = [&](int i, bool& valid) {
                        valid = (u32)(i / DS_VEC) * NT + threadIdx.x < nvec;
                        return key_of(v[i / DS_VEC].b[i % DS_VEC]);
                    };
                    thr = key_threshold<NT, DS_LOADS * DS_VEC>(key, k, STREAM_SLACK, sh.sel);
                    floor = threshold_floor(thr);
                }
                process(v, blk);
                blk = advance(blk);
            }
            if ((finished || holding || claimed() > (u32)(CAP - ROOM)) && !meet(finished)) break;
        }
        ring.drain();
        const u32 m = claimed();
        if (!seed || m >= k) return m;
        rank = retried ? 0 : retry_rank(rank, m, k);
        __syncthreads();  // every thread has read the count before the next pass zeroes it
        ahead = start();
        seed = rank ? sampled_threshold(sh, vrow, body, nvec, rank) : 0;
    }
}
