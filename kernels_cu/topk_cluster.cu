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
#include "block/scan.cuh"
#include "cluster/bounds.cuh"
#include "cluster/compact.cuh"
#include "cluster/prefilter.cuh"
#include "row/sorted_output.cuh"

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
    prefetch_serving(p, row, rank, split);
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
    // latency it then overlaps (alone it is a visible share of a CTA's time).
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
    // Unsorted, the CTAs meet once more before they exit: then none exits while a copy to it
    // may be in flight. Sorted, they meet at CTA 0's gather.
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
            // ran in nearly every warp, most lanes idle. A slot with no element above K and none
            // of the ties taken writes nothing: with heavy ties at K (all equal, mostly -inf) that
            // is every slot but the first ties', where this step was otherwise a large share of
            // the row's time.
            if (!(counts[u] >> TIE_BITS) && (!(counts[u] & TIE_MASK) || t >= take)) continue;
            const Vec v = slot(u);
            // The masks again, not kept from step 3: held across slot_ranks they spilled more.
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
