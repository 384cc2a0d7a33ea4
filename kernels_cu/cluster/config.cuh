// The cluster radix select's compile-time shape (topk_cluster.cu): threads and vectors a thread,
// and which of its steps a tier runs.
//
// Compile-time parameters: DS_DTYPE, DS_THREADS, DS_VECS, DS_SMALL_CLUSTER (optional).
#pragma once
#include "common/keys.cuh"

constexpr int NT = DS_THREADS;
constexpr int V = DS_VECS;
// The largest k deepselect_rt/cuda/plan.py sends here (its streaming kernel's largest bucket).
constexpr int KMAX = 4096;
static_assert(V * DS_VEC <= 64, "one 64-bit mask per thread marks its elements");

// Step 3's packing of a count of elements above K (fewer than k <= KMAX in a CTA) over one of
// ties (at most 1024 x 64 elements).
constexpr u32 TIE_BITS = 20, TIE_MASK = (1u << TIE_BITS) - 1;
static_assert(KMAX <= (1u << (32 - TIE_BITS)) && NT * V * DS_VEC <= TIE_MASK, "counts fit their fields");

// A count of vector slots as a type (stage_winners' template argument).
template <int N>
struct Slots {
    static constexpr int value = N;
};

// Elements a thread holds from which a first select over the threads' maxima pays for its
// cluster passes: every later pass then skips almost every element (at 64 a thread the
// histograms of all elements cost most of the kernel's time). (deepselect_rt/cuda/variants.py's
// RADIX_COMPACT_ELEMS: these tiers need the candidates' shared memory of cluster/shared.cuh.)
constexpr int PREFILTER_ELEMS = 32;
constexpr bool PREFILTERED = V * DS_VEC >= PREFILTER_ELEMS;
// The variant for clusters of two at k >= 2048 where the prefilter runs (deepselect_rt/cuda/
// variants.py small_cluster) prefilters with up to four groups' maxima a thread and a key t_k at
// or below k of them (prefilter). A variant of its own: built into every plan, that code spilled
// registers of the 1024 x 8 tier where it did not even run, and at k <= 1024 its cost outweighed
// what the tighter bound saved.
#ifndef DS_SMALL_CLUSTER
#define DS_SMALL_CLUSTER 0
#endif
constexpr bool SMALL_CLUSTER = PREFILTERED && DS_SMALL_CLUSTER;
static_assert(!SMALL_CLUSTER || V >= 4, "the small-cluster prefilter folds quarters of a thread's vectors");

// Tiers of at most two vectors a thread turn their elements into keys once, after the load
// (two at a time for the 16-bit dtypes), the prefiltered ones when they compact (the prefilter
// reads raw values). The float32 four-vector tier recomputes them (held as keys, they spill).
// (deepselect_rt/cuda/plan.py's RADIX_KEYED_VECTORS.)
constexpr bool KEYS_AT_LOAD = V <= 2;
// The loops over slots after the compaction run over `rounds` slots, not unrolled: unrolled over
// all 8 x 8 elements of the 1M-element tier, the kernel's code outgrew the instruction cache.
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
