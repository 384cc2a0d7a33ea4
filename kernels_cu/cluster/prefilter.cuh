// Dropping whole vectors no winner can come from, before the cluster's digit passes: the
// prefilter's bound T0 from the threads' maxima, and a CTA's own bound where T0 keeps too many.
#pragma once
#include "cluster/bounds.cuh"
#include "cluster/elements.cuh"

// The packed maxima of the quarters of a thread's vectors (V >= 4 in the prefiltered tiers, which
// alone call it), at compile-time indices: faster than a select of the quarter for each vector.
__device__ __forceinline__ void fold_quarters(const Vec (&x)[V], u32 (&q)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = DS_NEG_INF_WORD;
#pragma unroll
    for (int u = 0; u < V; ++u) q[u * 4 / V] = max2_nan(q[u * 4 / V], vec_max(x[u]));
}

// Clears from `valid` the vectors whose largest key is below t.
__device__ __forceinline__ void clear_below(const Vec (&x)[V], u64& valid, u32 t) {
#pragma unroll
    for (int u = 0; u < V; ++u)
        if (vec_top_key(x[u]) < t) valid &= ~((u64)((1u << DS_VEC) - 1) << (u * DS_VEC));
}

// A key at or below `rank` of the CTA's keys, those each_key(f) hands f in every thread: a radix
// select in the CTA, a quarter of the rank as slack (the prefilter's t_c and t_k, raise_bound's).
template <class EachKey>
__device__ __forceinline__ u32 cta_bound(EachKey each_key, u32 rank, OneBarrierHistogram<NT>& local, Shared& sh) {
    const auto fill = [&](u32* h, int shift, const Digits& d) {
        each_key([&](u32 key) { hist_add(h, (key >> shift) & 255, (key & (u32)d.mask) == (u32)d.prefix); });
    };
    return (u32)radix_digits(DS_ELEM_BITS - 8, rank, rank / 4, sh.sel, local, fill).prefix;
}

// Clears from `valid` the vectors whose elements are all below T0, a key at or below the row's
// k-th largest. Each thread offers its largest key (the small-cluster variant: the maxima of g =
// 1, 2 or 4 groups of its vectors), and each CTA finds, by a radix select over them (slack a
// quarter), a key t_c at or below kc = ceil(k / split) of them, and the least of them, m_c (at
// or below all NT x g); the variant also a key t_k at or below k of them. The CTAs push these to
// one another; any key t for which the CTAs' maxima known to be at or above it (per CTA the most
// of NT x g where m_c >= t, k where t_k >= t, kc where t_c >= t) number at least k is such a
// bound, as they are distinct elements, and T0 is the largest t among the pushed keys. The
// least t_c always qualifies; m_c serves rows whose largest values lie in a few CTAs' slices
// (ascending rows: there the least t_c kept nearly every vector of the other CTAs, slower than
// no prefilter at all); t_k does where one CTA of two holds most of them (the real indexer rows,
// whose late columns score high: there the least t_c kept several times t_k's vectors). g makes
// the ranks about a quarter of the groups holding an element: in clusters of two a CTA's share
// of k = 2048 is its thread count, where the threads' maxima kept most vectors of normal rows
// and four groups few; causal rows fill half their tier's threads. (Groups without an element
// offer -inf, counted only when t, and so T0, is at or below -inf's key, the least key of an
// element, and then nothing is cleared.) The selects stay in each CTA and the cluster exchanges
// a uint4 a CTA: the same select over the cluster's summed histograms took two slow exchanges.
// The select that follows sees every element at or above T0, so it finds the same K; whole
// vectors are cleared, and the elements below T0 left in a kept vector are selected over like
// any other. per: the vectors of the CTA's slice.
__device__ __forceinline__ u32 prefilter(const Vec (&x)[V], u64& valid, u32 top_key, u32 k, u32 split, u32 rank,
                                         u32 per, Shared& sh) {
    const u32 kc = (k + split - 1) / split;
    // t_k's rank k needs k maxima: groups < 4 already offer 4 x k of them (per <= NT x V).
    const bool by_k = SMALL_CLUSTER && 4 * NT >= k;
    const u32 want = (4 * (by_k ? k : kc) * V + per - 1) / per;  // groups a thread for 4 x the rank
    u32 groups = 1;  // 1, 2 or 4
    if (SMALL_CLUSTER)
        while (groups < 4 && groups < want) groups <<= 1;
    // The groups' maxima as keys: the thread's largest key where it is one group (every plan but
    // the small-cluster variant's); else the packed maxima of the quarters of its vectors (V >= 4
    // in the variant's tiers), paired for two groups. (Made from every vector's key they added
    // many instructions a thread and slowed the prefilter of the 1M-element rows' clusters of
    // 16 by more than half.)
    u32 ga = top_key, gb = 0, gc = 0, gd = 0;
    if (SMALL_CLUSTER && groups > 1) {
        u32 q[4];
        fold_quarters(x, q);
        if (groups == 2) {
            q[0] = max2_nan(q[0], q[1]);
            q[1] = max2_nan(q[2], q[3]);
        }
        ga = word_top_key(q[0]);
        gb = word_top_key(q[1]);
        gc = word_top_key(q[2]);
        gd = word_top_key(q[3]);
    }
    const auto each_group = [=](auto f) {
        f(ga);
        if (groups > 1) f(gb);
        if (groups > 2) {
            f(gc);
            f(gd);
        }
    };
    u32 least = ~0u;
    each_group([&](u32 key) { least = min(least, key); });
    least = __reduce_min_sync(DS_FULL_MASK, least);
    if ((threadIdx.x & 31) == 0) atomicMin(&sh.least_max, least);  // the select's barriers order it
    OneBarrierHistogram<NT> local{sh.prefilter_hist};
    const u32 tc = cta_bound(each_group, kc, local, sh);
    const u32 tk = by_k ? cta_bound(each_group, k, local, sh) : 0;
    push_to_cluster(sh.bounds, &sh.bounds_arrived,
                    make_uint4(tc, sh.least_max, threadIdx.x < split ? cta_top(sh) : 0, tk),
                    split, rank);
    if (threadIdx.x < 32) {
        mbar_wait(&sh.bounds_arrived, 0);
        __syncwarp();  // this CTA's own bounds, stored by lane `rank`
        // Lane c holds t_c (and t_k), lane 16 + c m_c: each counts the maxima known at or above
        // them, from the others' by shuffles (a loop of 16-byte loads of sh.bounds was slower at
        // large splits).
        const u32 lane = threadIdx.x, c = lane & 15, all = NT * groups;
        const u32 t = c < split ? (lane < 16 ? sh.bounds[c].x : sh.bounds[c].y) : 0;
        const u32 t2 = SMALL_CLUSTER && lane < 16 && c < split ? sh.bounds[c].w : 0;
        u32 known = 0, known2 = 0;
        for (u32 j = 0; j < split; ++j) {
            const u32 tj = __shfl_sync(DS_FULL_MASK, t, j), mj = __shfl_sync(DS_FULL_MASK, t, 16 + j);
            const u32 kj = SMALL_CLUSTER ? __shfl_sync(DS_FULL_MASK, t2, j) : 0;
            // The maxima of CTA j known at or above `key`: the most of its three bounds'.
            const auto known_at = [&](u32 key) { return mj >= key ? all : max(SMALL_CLUSTER && kj >= key ? k : 0, tj >= key ? kc : 0); };
            known += known_at(t);
            if (SMALL_CLUSTER) known2 += known_at(t2);
        }
        const u32 best = __reduce_max_sync(DS_FULL_MASK, c < split ? max(known >= k ? t : 0, known2 >= k ? t2 : 0) : 0);
        if (lane == 0) sh.t0 = best;
        store_row_top(split, sh);
    }
    __syncthreads();
    const u32 t0 = sh.t0;
    clear_below(x, valid, t0);
    return t0;
}

// Where T0 keeps more vectors of this CTA than it has threads, though its keys are not all equal:
// clears the vectors below a key t at or below k of the CTA's quarters' maxima (distinct
// elements, so t is at or below the row's k-th largest, like T0). This CTA's bound, not the
// cluster's: only the vectors it keeps change, T0 (the window pass's start) does not. For rows
// whose largest values lie mostly in one CTA's slice, where the cluster's bound comes from the
// others' (the real indexer rows in clusters of two, ascending rows): there T0 kept several
// times the vectors this bound keeps in that CTA, and such rows ran markedly faster with it.
// Normal rows keep fewer vectors than threads and never run it. The prefilter's arrays are free
// again: its last picks came before the barrier that published T0.
__device__ __forceinline__ void raise_bound(const Vec (&x)[V], u64& valid, u32 k, Shared& sh) {
    OneBarrierHistogram<NT>::init(sh.prefilter_hist);
    u32 q[4];
    fold_quarters(x, q);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = word_top_key(q[i]);
    const auto each_quarter = [&](auto f) {
        f(q[0]);
        f(q[1]);
        f(q[2]);
        f(q[3]);
    };
    __syncthreads();
    OneBarrierHistogram<NT> local{sh.prefilter_hist};
    clear_below(x, valid, cta_bound(each_quarter, k, local, sh));
}
