// The cluster radix select's shared memory: the Shared struct, then the prefiltered tiers'
// candidates and the gather buffer at the offsets below.
#pragma once
#include "cluster/config.cuh"
#include "cluster/histogram.cuh"

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

// Shared memory after Shared: the prefiltered tiers' candidates (their vector offsets in the
// CTA's slice, then their keys), then the gather buffer (k composites, rounded up to a power of
// two: CTA 0's winners when sorting by value).
constexpr u32 CANDIDATES = PREFILTERED ? NT * V : 0;
constexpr u32 COLS_OFFSET = (sizeof(Shared) + 15) / 16 * 16;
constexpr u32 KEYS_OFFSET = COLS_OFFSET + (CANDIDATES * (u32)sizeof(u16) + 15) / 16 * 16;
constexpr u32 GATHER_OFFSET = KEYS_OFFSET + CANDIDATES * (u32)sizeof(uint4);
static_assert(COLS_OFFSET <= 41984, "deepselect_rt/cuda/plan.py's _RADIX_SCRATCH_BYTES covers Shared");
