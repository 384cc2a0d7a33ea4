// Moving the vectors the prefilter kept to shared memory, so that the later passes run over a
// few warps' slots instead of every thread's.
#pragma once
#include "block/scan.cuh"
#include "cluster/prefilter.cuh"

// Key 0 for the keys of kv below t0 and for its elements whose bit in `bits` is clear, a word
// at a time.
__device__ __forceinline__ void clear_keys(Vec& kv, u32 t0, u32 bits) {
    u32* w = reinterpret_cast<u32*>(&kv.v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#if DS_DTYPE == 0
        w[i] &= (bits >> i & 1) && w[i] >= t0 ? ~0u : 0u;
#else
        w[i] &= __vcmpgeu2(w[i], t0 * 0x10001u) & ((bits >> 2 * i & 1) * 0xffffu | (bits >> (2 * i + 1) & 1) * 0xffff0000u);
#endif
    }
}

// The bits of vector vi's elements within the row's [first, last) (vectors counted as in
// topk_cluster.cu's step 1).
__device__ __forceinline__ u32 row_bits(u32 vi, u32 first, u32 last) {
    const u32 base = vi * DS_VEC;
    const u32 lo = first > base ? min(first - base, (u32)DS_VEC) : 0;
    const u32 hi = last > base ? min(last - base, (u32)DS_VEC) : 0;
    return ((1u << hi) - 1) & ~((1u << lo) - 1);
}

// This thread's elements of vector `raw` at or above t0 among those in `bits`, and in `above`
// whether one of them is above t0.
__device__ __forceinline__ u32 at_or_above(const Vec& raw, u32 bits, u32 t0, bool& above) {
    Vec kv = raw;
    to_keys(kv);
    clear_keys(kv, t0, bits);
    u32 n = 0;
    above = false;
#pragma unroll
    for (int e = 0; e < DS_VEC; ++e) {
        n += kv.b[e] != 0;
        above |= (u32)kv.b[e] > t0;
    }
    return n;
}

// Clears from `valid` the vectors that hold no element above t0 and come after k of this CTA's
// elements at or above t0 in column order: each of their elements then has k before it that
// rank higher (a larger key, or the same key and a lower column), so none is a winner, and
// the elements above K are all kept. For rows where most vectors reach T0 because many elements
// share its key (all equal, few distinct values, mostly -inf), which the prefilter keeps whole:
// the compaction, the passes and the counts then went over every vector, and such rows took over
// twice normal rows' time. The ranks are slot_ranks' over counts packed 4 bits a vector (at most
// 8), the flags a bit a vector: slot_ranks itself, over arrays of counts and ranks, spilled in
// float32's 512 x 16 tier, and counts made again from the raw values after the barrier spilled
// heavily in the 1024 x 8 tiers.
__device__ __forceinline__ void drop_late_ties(const Vec (&x)[V], u64& valid, u32 t0, u32 k, u32* warp_totals) {
    static_assert(V <= 16 && DS_VEC <= 8, "a count of 0..8 a vector in 4 bits of a u64");
    u64 counts = 0;
    u32 above = 0, run = 0;
#pragma unroll
    for (int u = 0; u < V; ++u) {
        bool a;
        const u32 n = at_or_above(x[u], vec_bits(valid, u), t0, a);
        counts |= (u64)n << (4 * u);
        above |= (u32)a << u;
        run += n;
    }
    u32 seen[1] = {0};  // this CTA's elements at or above t0 in the columns before this thread's slot
    warp_offsets<NT, 1>(__reduce_add_sync(DS_FULL_MASK, run), seen, warp_totals);
#pragma unroll
    for (int u = 0; u < V; ++u) {
        const u32 n = (u32)(counts >> (4 * u)) & 15;
        const u32 incl = warp_inclusive_sum(n);
        if (seen[0] + incl - n >= k && !(above >> u & 1)) valid &= ~((u64)((1u << DS_VEC) - 1) << (u * DS_VEC));
        seen[0] += __shfl_sync(DS_FULL_MASK, incl, 31);
    }
}

// The prefiltered tiers' vectors left in `valid` move to shared memory in column order:
// keys[i] and cols[i] (its vector offset in the CTA's slice, from vector cta_v on). From then
// on slot u of lane l of warp w is candidate (w x rounds + u) x 32 + l, rounds = ceil(count /
// NT): slot_ranks' column order still holds, and the few vectors left (a few percent at
// 1M-element rows, k = 2048) fill a few warps a CTA, one slot each, where each later pass, the
// counts and the winners went over all 64 elements of every thread. There each thread turns
// its candidates into keys, with key 0 (a NaN's pattern, no element's key) for the elements
// outside the row or below t0 (below K: neither winners nor in K's bucket): done before the
// move, on every vector a thread holds (the stores are predicated), that cost many more issue
// cycles. Where more vectors than threads are left, drop_late_ties or raise_bound first clears
// those no winner can come from. `valid` becomes the candidates' (nonzero keys). Returns rounds.
__device__ __forceinline__ u32 compact(const Vec (&x)[V], u64& valid, u32 t0, u32 k, uint4* keys, u16* cols, Shared& sh,
                                       u32 cta_v, u32 first, u32 last) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Ranks in column order (slot_ranks' layout) from a ballot a slot, taken again for the
    // stores: an array of the ranks spilled.
    u32 kept, before[1];
    const auto rank_kept = [&] {
        kept = 0;
        u32 run = 0;
#pragma unroll
        for (int u = 0; u < V; ++u) {
            kept |= (u32)(vec_bits(valid, u) != 0) << u;
            run += __popc(__ballot_sync(DS_FULL_MASK, kept >> u & 1));
        }
        before[0] = 0;
        return warp_offsets<NT, 1>(run, before, sh.warp_totals);
    };
    u32 count = rank_kept();
    // Rows of many equal keys at T0 keep nearly every vector: T0 is then the row's largest key
    // (all equal, the top value more than k times) or -inf's (fewer than k finite). Normal rows
    // keep a few hundred a CTA (1M-element rows, k = 2048), but with one maximum a thread
    // thousands where a CTA's share of k is its thread count (clusters of two at k = 2048, T0
    // near the least thread maximum), with almost nothing to drop. Elsewhere T0 is weak for this
    // CTA's slice: a bound of its own (not where the small-cluster variant's T0 already holds
    // every CTA's t_k, and only while 4 x NT quarters hold rank k).
    if (count > NT && (t0 == sh.top || t0 == key_of((bits_t)DS_NEG_INF_WORD))) {
        drop_late_ties(x, valid, t0, k, sh.warp_totals);
        count = rank_kept();
    } else if (count > NT && t0 && !SMALL_CLUSTER && 4 * NT >= k) {
        raise_bound(x, valid, k, sh);
        count = rank_kept();
    }
    u32 pos = before[0];
#pragma unroll
    for (int u = 0; u < V; ++u) {
        const u32 b = __ballot_sync(DS_FULL_MASK, kept >> u & 1);
        if (kept >> u & 1) {
            const u32 i = pos + __popc(b & ((1u << lane) - 1));
            keys[i] = x[u].v;
            cols[i] = (u16)(((warp * V + u) << 5) + lane);
        }
        pos += __popc(b);
    }
    __syncthreads();
    const u32 rounds = (count + NT - 1) / NT;
    valid = 0;
    // Not unrolled: each thread has `rounds` slots (one for normal rows), and valid is no array.
    for (u32 u = 0; u < rounds; ++u) {
        const u32 i = (warp * rounds + u) * 32 + lane;
        if (i >= count) break;
        Vec kv;
        kv.v = keys[i];
        to_keys(kv);
        clear_keys(kv, t0, row_bits(cta_v + cols[i], first, last));
        keys[i] = kv.v;
#pragma unroll
        for (int e = 0; e < DS_VEC; ++e) valid |= (u64)(kv.b[e] != 0) << (u * DS_VEC + e);
    }
    return rounds;
}
