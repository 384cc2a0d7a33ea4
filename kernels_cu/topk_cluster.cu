// Top-k of a few long rows: a thread-block cluster per row (sm_90+), the row held in registers
// across the cluster, and a radix select whose histograms the cluster sums. No merge: the
// latency is one exchange of histograms between the CTAs per 8-bit digit of the key.
//
//   1. Each CTA loads its slice of the row once: DS_VECS 16-byte vectors per thread, each warp
//      a contiguous run of the row (so columns follow (warp, vector, lane, element)).
//   2. Threads holding 32 or more elements first select over their maxima (each CTA over its
//      own, then the least of the CTAs' bounds) for a bound T0 and drop the vectors entirely
//      below it (prefilter); the vectors left, as keys, move through shared memory to the first
//      threads (compact), so the passes below skip most warps.
//      Per digit: each CTA histograms its elements still in the bucket, the cluster sums the
//      histograms through distributed shared memory, every CTA picks the same digit. The end is
//      the key K of the k-th largest (or a prefix of it that no other element shares). bfloat16
//      and float32 rows first try one pass over a window of 253 keys (of their top 16 bits, for
//      float32): up from T0 in the prefiltered tiers, down from the row's largest key (one more
//      exchange) in the others. Where K lies in the window (normal rows) that pass settles the
//      top 16 bits, which the digits from the top take two passes for; -inf (masked rows) has
//      a bin of its own below it.
//   3. The row's winners are the keys above K and, among those equal to K, the lowest columns.
//      Every pass's copies tell every CTA how many of each every CTA has, so each knows how
//      many ties it takes and where its winners start in the row's output (CTA rank is column
//      order) without another exchange.
//   4. sorted=False: every CTA stages its winners in its shared memory and writes them, in
//      ascending column order. Otherwise they go to CTA 0's shared memory, which sorts and
//      writes the row.
//
// Compile-time parameters: DS_DTYPE, DS_THREADS, DS_VECS, DS_SMALL_CLUSTER (optional), DS_ENTRY.
// The grid is rows x p.split CTAs in clusters of p.split; a CTA holds at most DS_THREADS x
// DS_VECS vectors of its row (deepselect_rt/cuda/plan.py picks DS_VECS so the row fits).
#include "common/params.cuh"
#include "block/cluster_histogram.cuh"
#include "block/scan.cuh"
#include "row/sorted_output.cuh"

constexpr int NT = DS_THREADS;
constexpr int V = DS_VECS;
// The largest k deepselect_rt/cuda/plan.py sends here (its streaming kernel's largest bucket).
constexpr int KMAX = 4096;
static_assert(V * DS_VEC <= 64, "one 64-bit mask per thread marks its elements");

struct Shared {
    ClusterHistograms hist;
    SelectScratch sel;  // the digit each pass picks (its histogram is unused: the cluster's are in hist)
    u32 warp_totals[NT / 32];
    u32 warp_tops[NT / 32];  // each warp's largest key (the tiers without the prefilter)
    alignas(16) u32 prefilter_hist[3][256];  // the prefilter's select in the CTA (OneBarrierHistogram)
    // Every CTA's largest key (.z), and its prefilter bounds t_c (.x), m_c (.y) and t_k (.w)
    // where it runs, pushed by it: the one exchange before the digit passes.
    uint4 bounds[MAX_CLUSTER];
    u64 bounds_arrived;  // the mbarrier of the pushed bounds
    u32 least_max;     // the least of the maxima this CTA's threads offer the prefilter (m_c)
    u32 cta_max;       // this CTA's largest key (the prefiltered tiers)
    u32 t0;            // the prefilter's bound, from every CTA's bounds
    u32 top;           // the row's largest key, from every CTA's
};
// Step 3's packing of a count of elements above K (fewer than k <= KMAX in a CTA) over one of
// ties (at most 1024 x 64 elements).
constexpr u32 TIE_BITS = 20, TIE_MASK = (1u << TIE_BITS) - 1;
static_assert(KMAX <= (1u << (32 - TIE_BITS)) && NT * V * DS_VEC <= TIE_MASK, "counts fit their fields");

// A count of vector slots as a type (stage_winners' template argument).
template <int N>
struct Slots {
    static constexpr int value = N;
};

__device__ __forceinline__ bool bit(u64 mask, int i) { return (mask >> i) & 1; }
// The valid bits of this thread's vector u.
__device__ __forceinline__ u32 vec_bits(u64 valid, int u) { return (u32)(valid >> (u * DS_VEC)) & ((1u << DS_VEC) - 1); }

// Elements a thread holds from which a first select over the threads' maxima pays for its
// cluster passes: every later pass then skips almost every element (1 x 1M bf16, k = 2048,
// 64 a thread: the histograms of all elements cost most of the kernel's time).
// (deepselect_rt/cuda/plan.py's RADIX_COMPACT_ELEMS: these tiers need the shared memory below.)
constexpr int PREFILTER_ELEMS = 32;
constexpr bool PREFILTERED = V * DS_VEC >= PREFILTER_ELEMS;
// The variant for clusters of two at k >= 2048 where the prefilter runs (deepselect_rt/cuda/
// variants.py small_cluster) prefilters with up to four groups' maxima a thread and a key t_k at
// or below k of them (prefilter). A variant of its own: built into every plan, that code spilled
// registers of the 1024 x 8 tier where it did not even run (its own 1024 x 8 build spills 8 / 24
// bytes, the other none; ptxas sm_90a), and its cost (~3 us a row) lost at k <= 1024 what the
// tighter bound saved (docs/benchmarks.md, session 24).
#ifndef DS_SMALL_CLUSTER
#define DS_SMALL_CLUSTER 0
#endif
constexpr bool SMALL_CLUSTER = PREFILTERED && DS_SMALL_CLUSTER;
static_assert(!SMALL_CLUSTER || V >= 4, "the small-cluster prefilter folds quarters of a thread's vectors");

// Shared memory after Shared: the prefiltered tiers' candidates (their vector offsets in the
// CTA's slice, then their keys), then the gather buffer (k composites, rounded up to a power of
// two: CTA 0's winners when sorting by value).
constexpr u32 CANDIDATES = PREFILTERED ? NT * V : 0;
constexpr u32 COLS_OFFSET = (sizeof(Shared) + 15) / 16 * 16;
constexpr u32 KEYS_OFFSET = COLS_OFFSET + (CANDIDATES * (u32)sizeof(u16) + 15) / 16 * 16;
constexpr u32 GATHER_OFFSET = KEYS_OFFSET + CANDIDATES * (u32)sizeof(uint4);
static_assert(COLS_OFFSET <= 41984, "deepselect_rt/cuda/plan.py's _RADIX_SCRATCH_BYTES covers Shared");

// The key of a packed maximum w of elements (the larger of the two halves' keys for the 16-bit
// dtypes): a key at or above each of them, and one of theirs. Not keys of the elements: those the
// compiler keeps live across the later passes, and they spill.
__device__ __forceinline__ u32 word_top_key(u32 w) {
#if DS_DTYPE == 0
    return key_of(w);
#else
    return max(key_of((bits_t)w), key_of((bits_t)(w >> 16)));
#endif
}
__device__ __forceinline__ u32 vec_top_key(const Vec& v) { return word_top_key(vec_max(v)); }

// Tiers of at most two vectors a thread turn their elements into keys once, after the load
// (two at a time for the 16-bit dtypes), the prefiltered ones when they compact (the prefilter
// reads raw values). The float32 four-vector tier recomputes them (held as keys, they spill).
// (deepselect_rt/cuda/plan.py's RADIX_KEYED_VECTORS.)
constexpr bool KEYS_AT_LOAD = V <= 2;
// The loops over slots after the compaction run over `rounds` slots, not unrolled: unrolled over
// all 8 x 8 elements of the 1M-element tier, the kernel's code outgrew the instruction cache
// (ncu: 31% of the stall samples waiting for instructions).
constexpr int SLOT_UNROLL = PREFILTERED ? 1 : V;
constexpr bool KEYED = KEYS_AT_LOAD || PREFILTERED;
// The window pass's keys drop their low WINDOW_SHIFT bits, keeping the sign, 8 exponent and 7
// mantissa bits (bfloat16's whole key, float32's top 16): its 253 keys then span two octaves,
// which hold the k-th largest of normal rows from the row's largest key or from T0 down or
// up. Not float16, which keeps 10 mantissa bits: at 7 the pass leaves one over 3 bits still to
// run, two passes as without it.
constexpr bool KEY_WINDOW = DS_DTYPE != 1;
constexpr int WINDOW_SHIFT = DS_ELEM_BITS - 16;
constexpr u32 WINDOW = 253, WINDOW_MASK = DS_KEY_MASK >> WINDOW_SHIFT << WINDOW_SHIFT;
__device__ __forceinline__ u32 elem_key(const Vec& v, int e) { return KEYED ? (u32)v.b[e] : key_of(v.b[e]); }
// elem_key at a run-time e, by selects: v.b[e] would move v to local memory.
__device__ __forceinline__ u32 elem_key_at(const Vec& v, u32 e) {
#if DS_DTYPE == 0
    const u32 w = e & 2 ? (e & 1 ? v.v.w : v.v.z) : (e & 1 ? v.v.y : v.v.x);
    return KEYED ? w : key_of(w);
#else
    const u32 w = e & 4 ? (e & 2 ? v.v.w : v.v.z) : (e & 2 ? v.v.y : v.v.x);
    const bits_t b = (bits_t)(e & 1 ? w >> 16 : w);
    return KEYED ? (u32)b : key_of(b);
#endif
}

// Stores `mine` at slots[rank] of every CTA of the cluster, from threads 0 .. split - 1: the
// others' by st.async, which their mbarrier `arrived` counts; this CTA's own by a plain store
// (visible to warp 0 after a __syncwarp). Thread 0 first arms this CTA's `arrived` for the other
// CTAs' stores. Warp 0 reads the slots after mbar_wait(arrived).
__device__ __forceinline__ void push_to_cluster(uint4* slots, u64* arrived, uint4 mine, u32 split, u32 rank) {
    if (threadIdx.x == 0) mbar_arrive_expect(arrived, (split - 1) * (u32)sizeof(uint4));
    if (threadIdx.x < split) {
        if (threadIdx.x == rank) slots[rank] = mine;
        else cluster_store_async(cluster_map(&slots[rank], threadIdx.x), mine, cluster_map(arrived, threadIdx.x));
    }
}

// This CTA's largest key, in threads 0 .. split - 1 (after a barrier that follows the warps'):
// the prefiltered tiers' atomic maximum, the others' largest of the warps'.
__device__ __forceinline__ u32 cta_top(const Shared& sh) {
    if (PREFILTERED) return sh.cta_max;
    u32 top = 0;
#pragma unroll 8
    for (u32 w = 0; w < NT / 32; ++w) top = max(top, sh.warp_tops[w]);
    return top;
}

// Warp 0, after the wait for every CTA's bounds: the row's largest key (NaN's when it has one)
// to sh.top.
__device__ __forceinline__ void store_row_top(u32 split, Shared& sh) {
    const u32 top = __reduce_max_sync(DS_FULL_MASK, threadIdx.x < split ? sh.bounds[threadIdx.x].z : 0);
    if (threadIdx.x == 0) sh.top = top;
}

// The row's largest key to sh.top, for every thread: each CTA's pushed to every CTA.
__device__ __forceinline__ void row_top(u32 split, u32 rank, Shared& sh) {
    push_to_cluster(sh.bounds, &sh.bounds_arrived, make_uint4(0, 0, threadIdx.x < split ? cta_top(sh) : 0, 0), split, rank);
    if (threadIdx.x < 32) {
        mbar_wait(&sh.bounds_arrived, 0);
        __syncwarp();  // this CTA's own, stored by lane `rank`
        store_row_top(split, sh);
    }
    __syncthreads();
}

// The packed maxima of the quarters of a thread's vectors (V >= 4 in the prefiltered tiers, which
// alone call it), at compile-time indices: a select a quarter for each vector took the
// small-cluster variant's step 2,732 cycles a CTA, this 2,284 (64 x 128K bf16 k=2048, clock64
// marks, H200 session 25).
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
// (ascending rows: there the least t_c kept nearly every vector of the other CTAs, 1 x 1M bf16
// k = 2048 took 54.6 us where the select over the cluster's histograms took 41); t_k does where
// one CTA of two holds most of them (the real indexer rows, whose late columns score high: at
// k = 2048 the least t_c kept up to 7,500 vectors a CTA, t_k 1,900-3,000, NumPy model). g makes the
// ranks about a quarter of the groups holding an element: in clusters of two a CTA's share of
// k = 2048 is its thread count, where the threads' maxima kept ~5,200 of 8,192 vectors of
// normal rows and four groups ~1,100; causal rows fill half their tier's threads. (Groups
// without an element offer -inf, counted only when t, and so T0, is at or below -inf's key, the
// least key of an element, and then nothing is cleared.) The selects stay in each CTA and the
// cluster exchanges a uint4 a CTA: the same select over the cluster's summed histograms took two
// exchanges, ~4,600 cycles each (1 x 1M bf16, H200). The select that follows sees every element
// at or above T0, so it finds the same K; whole vectors are cleared, and the elements below T0
// left in a kept vector are selected over like any other. per: the vectors of the CTA's slice.
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
    // in the variant's tiers), paired for two groups. (Made from every vector's key in the
    // 1M-element rows' clusters of 16, they added ~170 instructions a thread, and the prefilter
    // step took 9,700 cycles a CTA where it had taken 5,800; folded with a select a group for
    // each vector, 2,700 cycles at 64 x 128K: clock64 marks, H200.)
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
        // them, from the others' by shuffles (a loop of 16-byte loads of sh.bounds took 0.5-1.6 us
        // more at split 16, 1 x 1M and 8 x 1M bf16, session 25).
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
// others' (the real indexer rows at 64 rows, clusters of two, k = 512: T0 kept 933-3,456 vectors
// in the late columns' CTA, this 541-578, NumPy model of the four rows; those 64 rows took 29.5 ->
// 24.9 us at k = 512, 33.3 -> 28.7 at 1024, ascending rows 38.7 -> 25.8, H200 session 26).
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

// The bits of vector vi's elements within the row's [first, last) (vectors counted as in step 1).
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
// the compaction, the passes and the counts then went over every vector (1 x 1M bf16 all equal,
// k = 2048: 68,300 cycles a CTA, 46,300 with this, against 29,600 for normal rows, H200). The
// ranks are slot_ranks' over counts packed 4 bits a vector (at most 8), the flags a bit a
// vector: slot_ranks itself, over arrays of counts and ranks, spilled in float32's 512 x 16 tier
// (0 -> 8 bytes), and counts made again from the raw values after the barrier spilled 300 bytes
// in the 1024 x 8 tiers (sm_90a).
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
// NT): slot_ranks' column order still holds, and the few vectors left (1M-element rows, k =
// 2048: ~2,500 of 131,072) fill a few warps a CTA, one slot each, where each later pass, the
// counts and the winners went over all 64 elements of every thread. There each thread turns
// its candidates into keys, with key 0 (a NaN's pattern, no element's key) for the elements
// outside the row or below t0 (below K: neither winners nor in K's bucket): done before the
// move, on every vector a thread holds (the stores are predicated), that cost ~2,800 issue
// cycles of each SM sub-partition (1 x 1M bf16, ncu). Where more vectors than threads are left,
// drop_late_ties or raise_bound first clears those no winner can come from. `valid` becomes the
// candidates' (nonzero keys). Returns rounds.
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
    // near the least thread maximum, before the small-cluster variant), with almost nothing to
    // drop. Elsewhere T0 is weak for this CTA's slice: a bound of its own (not where the
    // small-cluster variant's T0 already holds every CTA's t_k, and only while 4 x NT quarters
    // hold rank k).
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

extern "C" __global__ void __launch_bounds__(DS_THREADS, 1) DS_ENTRY(DS_PARAMS) {
    DS_BIND_PARAMS
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    u64* gathered = reinterpret_cast<u64*>(smem_raw + GATHER_OFFSET);
    uint4* candidate_keys = reinterpret_cast<uint4*>(smem_raw + KEYS_OFFSET);
    u16* cols = reinterpret_cast<u16*>(smem_raw + COLS_OFFSET);
    const u32 split = (u32)p.split;
    const i64 row = blockIdx.x / split;
    const u32 rank = blockIdx.x % split;
    const u32 k = (u32)p.k;
    const bits_t* xrow = (const bits_t*)p.x + row * p.row_stride;
    i64 lo, hi;
    row_range(p, row, lo, hi);
    const u32 n = (u32)(hi - lo);
    const u32 m = n < k ? n : k;

    // 1. Vectors counted from the 16-byte boundary at or below xrow: element j is column j - mis.
    // The row's elements are j in [first, last); its partial end vectors are read element-wise.
    const u32 mis = (u32)(((u64)xrow & 15) / DS_ELEM_BYTES);
    const uint4* vbase = (const uint4*)(xrow - mis);
    const u32 first = (u32)lo + mis, last = (u32)hi + mis;
    const u32 v0 = first / DS_VEC, v1 = (last + DS_VEC - 1) / DS_VEC;
    const u32 per = (v1 - v0 + split - 1) / split;
    const u32 cta_v = v0 + rank * per, cta_end = min(v1, cta_v + per);
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const auto vec_at = [&](int u) { return cta_v + ((warp * V + u) << 5) + lane; };

    Vec x[V];
    u64 valid = 0;
#pragma unroll
    for (int u = 0; u < V; ++u) {
        const u32 vi = vec_at(u);
        x[u].v = make_uint4(DS_NEG_INF_WORD, DS_NEG_INF_WORD, DS_NEG_INF_WORD, DS_NEG_INF_WORD);
        if (vi >= cta_end) continue;
        if (vi * DS_VEC >= first && (vi + 1) * DS_VEC <= last) {
            x[u].v = __ldcs(vbase + vi);
            valid |= (((u64)1 << DS_VEC) - 1) << (u * DS_VEC);
        } else {
#pragma unroll
            for (int e = 0; e < DS_VEC; ++e) {
                const u32 j = vi * DS_VEC + e;
                if (j >= first && j < last) {
                    x[u].b[e] = xrow[j - mis];
                    valid |= (u64)1 << (u * DS_VEC + e);
                }
            }
        }
    }
    // The mbarriers of the pushes, before the cluster barrier whose wait (below) lets the pushes
    // begin: then every CTA has started and initialised them. After the loads are issued, whose
    // latency it then overlaps: before them it took ~1,300 cycles, and the CTAs' totals fell
    // 680-1,260 cycles with it here (clock64 marks, H200, five shapes).
    if (threadIdx.x == 0) mbar_init(&sh.bounds_arrived, 1);
    ClusterHistogram<NT>::init(sh.hist);
    cluster_arrive_relaxed();
    if (KEYS_AT_LOAD)
#pragma unroll
        for (int u = 0; u < V; ++u) to_keys(x[u]);
    if (threadIdx.x == 0) {
        sh.least_max = ~0u;
        sh.cta_max = 0;
    }
    if (PREFILTERED) OneBarrierHistogram<NT>::init(sh.prefilter_hist);
    // This thread's largest key (the slots without an element hold -inf, at or below every
    // element) and its warp's, at warp_tops: the window pass's start and, as the row's largest,
    // whether the row holds NaN. The prefiltered tiers make theirs from the raw values after the
    // entry barrier, which then overlaps their loads, into sh.cta_max.
    const auto warp_top = [&](u32 top) {
        top = __reduce_max_sync(DS_FULL_MASK, top);
        if (lane == 0) {
            if (PREFILTERED) atomicMax(&sh.cta_max, top);
            else sh.warp_tops[warp] = top;
        }
    };
    u32 top = 0;
    if (!PREFILTERED) {
#pragma unroll
        for (int u = 0; u < V; ++u)
#pragma unroll
            for (int e = 0; e < DS_VEC; ++e) top = max(top, elem_key(x[u], e));
        warp_top(top);
    }
    __syncthreads();
    cluster_wait();  // every CTA of the cluster has started: stores to its shared memory may begin

    // 2. The digits of K (none when the row has at most k elements: all are taken). First the
    // row's largest key, sh.top, from the one exchange before them: the prefilter's, or the
    // CTAs' largest keys.
    u32 rounds = V;  // slots holding candidates (the prefiltered tiers' compact)
    u32 t0 = 0;      // the prefilter's bound (0: none)
    if (PREFILTERED) {
        u32 word = DS_NEG_INF_WORD;
#pragma unroll
        for (int u = 0; u < V; ++u) word = max2_nan(word, vec_max(x[u]));
        top = word_top_key(word);
        warp_top(top);
        if (n > k && split * NT >= k) {
            t0 = prefilter(x, valid, top, k, split, rank, per, sh);
        } else {
            __syncthreads();
            row_top(split, rank, sh);
        }
        rounds = compact(x, valid, t0, k, candidate_keys, cols, sh, cta_v, first, last);
    } else {
        row_top(split, rank, sh);
    }
    ClusterHistogram<NT> hist{sh.hist, split, rank};
    // Slot u: its elements (keys but for the float32 four-vector tier), and its vector of the row.
    // The prefiltered tiers read theirs from shared memory: held in registers through the
    // passes, they spilled.
    const auto slot = [&](int u) {
        if (!PREFILTERED) return x[u];
        Vec v;
        v.v = candidate_keys[(warp * rounds + u) * 32 + lane];
        return v;
    };
    const auto slot_vec = [&](int u) { return PREFILTERED ? cta_v + cols[(warp * rounds + u) * 32 + lane] : vec_at(u); };
    const int slots = PREFILTERED ? (int)rounds : V;
    // f(key, i) for each of this thread's candidates (bit i of valid).
    const auto each_candidate = [&](auto f) {
#pragma unroll SLOT_UNROLL
        for (int u = 0; u < slots; ++u) {
            // A warp none of whose lanes has an element left in vector u skips it.
            if (!__any_sync(DS_FULL_MASK, vec_bits(valid, u))) continue;
            const Vec v = slot(u);
#pragma unroll
            for (int e = 0; e < DS_VEC; ++e)
                if (bit(valid, u * DS_VEC + e)) f(elem_key(v, e), u * DS_VEC + e);
        }
    };
    Digits d{0, 0, m};
    bool settled = n <= k;  // then every element is taken
    const auto fill = [&](u32* h, int shift, const Digits& dd) {
        each_candidate([&](u32 key, int i) {
            const u32 high = key & (u32)dd.mask;
            hist_add(h, (key >> shift) & 255, high == (u32)dd.prefix);
            // Below the bucket: neither in a later bucket nor a winner, so the later passes and
            // steps 3 and 4 skip it (the prefilter has dropped most such vectors of its tiers
            // already; there the test measured slower).
            if (!PREFILTERED && high < (u32)dd.prefix) valid &= ~((u64)1 << i);
        });
    };
    constexpr bool FROM_TOP = KEY_WINDOW && !PREFILTERED;
    bool windowed = false;
    if (KEY_WINDOW && !settled && (FROM_TOP || t0)) {
        // Keys as w = key >> WINDOW_SHIFT: bins 2 .. WINDOW + 1 count w = lo .. lo + WINDOW - 1,
        // bin 255 those above, bin 1 those below but -inf, bin 0 -inf below lo (every element
        // is in a bin, as the pick needs). Every candidate is at or above T0; none is above the
        // row's largest key. Where the k-th largest lands in the window the pass has found w of
        // K; in bin 0, K itself (-inf: masked rows, mostly -inf, found no slower than by the
        // passes from the top, which it would add to).
        const u32 top_w = FROM_TOP ? sh.top >> WINDOW_SHIFT : 0;  // the row's largest w
        const u32 lo = FROM_TOP ? (top_w >= WINDOW - 1 ? top_w - (WINDOW - 1) : 0) : t0 >> WINDOW_SHIFT;
        const u32 neg_inf_key = key_of((bits_t)DS_NEG_INF_WORD);
        u32* h = hist.begin(sh.sel);
        u32 below = 0, neg_inf = 0;
        each_candidate([&](u32 key, int) {
            const u32 w = key >> WINDOW_SHIFT;
            if (w >= lo) atomicAdd(&h[min(w - lo + 2, 255u)], 1u);
            else if (key == neg_inf_key) ++neg_inf;
            else ++below;
        });
        if (FROM_TOP) {
            below = __reduce_add_sync(DS_FULL_MASK, below);
            neg_inf = __reduce_add_sync(DS_FULL_MASK, neg_inf);
            if (lane == 0 && below) atomicAdd(&h[1], below);
            if (lane == 0 && neg_inf) atomicAdd(&h[0], neg_inf);
        }
        const Pick got = hist.pick(sh.sel, k);
        windowed = (got.digit >= 2 && got.digit <= WINDOW + 1) || got.digit == 0;
        if (got.digit == 0) d = Digits{neg_inf_key, DS_KEY_MASK, k - got.above, got.bucket};
        else if (windowed) d = Digits{(u64)(lo + got.digit - 2) << WINDOW_SHIFT, WINDOW_MASK, k - got.above, got.bucket};
        if (windowed && got.digit && WINDOW_SHIFT > 0 && !d.within(0)) refine_digits(d, WINDOW_SHIFT - 8, 0, 0, sh.sel, hist, fill);
    }
    if (!settled && !windowed) {
        hist.restart();  // a window pass that K fell outside is no part of this select
        d = radix_digits(DS_ELEM_BITS - 8, k, 0, sh.sel, hist, fill);
    }
    const u32 prefix = (u32)d.prefix, mask = (u32)d.mask;
    if (!settled && hist.counting()) hist.place(sh.sel, d.remaining);
    const bool by_value = p.flags & DS_F_SORTED;
    // Unsorted, the CTAs meet once more before they exit: then none has a copy to another in
    // flight (the exchanges of counts once did that). Sorted, they meet at CTA 0's gather.
    if (!by_value) cluster_arrive_relaxed();

    // The row's output slot of this CTA's first winner: a row of at most k elements takes every
    // element, those of the CTAs before this one first.
    const auto cta_start = [&] { return settled ? min(last, max(first, cta_v * DS_VEC)) - first : hist.start(); };
    // The elements of slot u (its vector v) above K, as bits in column order, and those equal to
    // K, in the high half.
    const auto slot_hits = [&](const Vec& v, int u) {
        static_assert(DS_VEC <= 16, "a slot's two masks share a word");
        u32 above = 0, ties = 0;
#pragma unroll
        for (int e = 0; e < DS_VEC; ++e) {
            const u32 key = elem_key(v, e) & mask;
            above |= (u32)(key > prefix) << e;
            ties |= (u32)(key == prefix) << e;
        }
        const u32 in_row = vec_bits(valid, u);
        return (above & in_row) | (ties & in_row) << 16;
    };
    // Steps 3 and 4 with S vector slots a thread in registers: all V, or for the prefiltered
    // tiers one where the compaction left at most one a thread (normal rows). Over V slots
    // those tiers' loops are not unrolled (SLOT_UNROLL), and counts[] and ranks[] live in
    // local memory. Returns this CTA's winners.
    const auto stage_winners = [&](auto slot_count) {
        constexpr int S = decltype(slot_count)::value;
        constexpr int UNROLL = S < V ? S : SLOT_UNROLL;
        // 3. Per vector slot, the elements above K and those equal to K, packed as
        // above << TIE_BITS | ties, and their ranks in column order.
        u32 counts[S] = {}, ranks[S];
#pragma unroll UNROLL
        for (int u = 0; u < S; ++u) {
            if (u >= slots) break;
            if (!vec_bits(valid, u)) continue;
            const u32 h = slot_hits(slot(u), u);
            counts[u] = (u32)__popc(h & 0xffffu) << TIE_BITS | (u32)__popc(h >> 16);
        }
        const u32 cta = slot_ranks<NT, S>(counts, ranks, sh.warp_totals);  // its barriers publish place()'s results

        // 4. Winners by column order: the CTA's start, then the elements above K before this one
        // and the ties before it, at most `take` of them (a row of at most k elements: all).
        const u32 take = settled ? cta & TIE_MASK : hist.take();
        const u32 start = cta_start();
        // The winners go to shared memory first: CTA 0's, to be sorted by value, or this CTA's own
        // from its first slot on. One store a winner keeps this unrolled loop small; writing the
        // outputs from it made the 64-element tier's code outgrow the instruction cache.
        const u32 dst = by_value ? cluster_map(gathered, 0) : cluster_map(gathered, rank) - start * (u32)sizeof(u64);
#pragma unroll UNROLL
        for (int u = 0; u < S; ++u) {
            if (u >= slots) break;
            u32 a = start + (ranks[u] >> TIE_BITS), t = ranks[u] & TIE_MASK;
            // Only the slot's winners, in column order, by their bits: a loop over every element
            // ran in nearly every warp, most lanes idle (8 x 128K bf16, k = 2048: ~20% of the
            // kernel's instructions, ncu). A slot with no element above K and none of the ties
            // taken writes nothing: with heavy ties at K (all equal, mostly -inf) that is every
            // slot but the first ties' (1 x 1M bf16 all equal, k = 2048: this step was 15,600 of
            // 100,800 cycles, H200).
            if (!(counts[u] >> TIE_BITS) && (!(counts[u] & TIE_MASK) || t >= take)) continue;
            const Vec v = slot(u);
            // The masks again, not kept from step 3: held across slot_ranks they spilled more
            // (float32's 512 x 16 tier 23 -> 28 LDL/STL, bf16's 1024 x 8 20 -> 23).
            const u32 h = slot_hits(v, u), above = h & 0xffffu;
            u32 left = above | (t < take ? h >> 16 : 0);
            const u32 col = slot_vec(u) * DS_VEC - mis;
            while (left) {
                const u32 e = __ffs(left) - 1;
                left &= left - 1;
                const u32 is_above = above >> e & 1;
                cluster_store_u64(dst + (a + min(t, take)) * (u32)sizeof(u64), make_comp(elem_key_at(v, e), col + e));
                a += is_above;
                t += is_above ^ 1;
                if (t >= take) left &= above;  // no later tie of the slot is taken
            }
        }
        return (cta >> TIE_BITS) + min(cta & TIE_MASK, take);
    };
    u32 cta_wins;
    if constexpr (PREFILTERED) cta_wins = rounds <= 1 ? stage_winners(Slots<1>{}) : stage_winners(Slots<V>{});
    else cta_wins = stage_winners(Slots<V>{});
    const u32 start = cta_start();
    const bool has_nan = sh.top == DS_KEY_NAN;  // the row's largest key
    if (by_value) {
        cluster_sync();  // the winners have reached CTA 0
        if (rank == 0) sort_and_write<NT, KMAX>(p, gathered, m, k, row, xrow, has_nan);
        return;
    }
    __syncthreads();
    const RowOut out = row_out(p, row, xrow, has_nan);
    if (!out.sentinel)
        for (u32 i = threadIdx.x; i < cta_wins; i += NT) write_slot(p, out, start + i, true, comp_col(gathered[i]), comp_key(gathered[i]));
    // Fills (every slot under the NaN sentinel), spread over the cluster.
    for (u32 i = (out.sentinel ? 0 : m) + rank * NT + threadIdx.x; i < k; i += split * NT)
        write_slot(p, out, i, false, 0, 0);
    if (has_nan && rank == 0 && threadIdx.x == 0) record_nan(p, row);
    cluster_wait();
}
