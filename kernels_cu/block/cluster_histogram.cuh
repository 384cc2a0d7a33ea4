// The histogram merge of a radix select run by every CTA of a cluster (radix_digits' Hist):
// each CTA counts its own elements, and every CTA sums all of them from distributed shared
// memory, so all pick the same digit.
#pragma once
#include "block/cluster.cuh"
#include "block/radix_select.cuh"

// Most CTAs a cluster can have (the non-portable size; deepselect_rt/cuda/plan.py MAX_SPLIT).
constexpr u32 MAX_CLUSTER = 16;

template <int NT>
struct ClusterHistogram {
    u32 (*own)[256];  // this CTA's histograms, by pass parity, read by the whole cluster
    u32 size;         // CTAs in the cluster
    u32 passes = 0;   // passes merged so far, over every select run with this object

    // Two buffers need one cluster barrier per pass: a CTA zeroes a buffer again two passes
    // later, after the next barrier, which no CTA passes before it has read this pass's sums.
    // The parity runs on across selects, so one that stops after a pass cannot race the next.
    __device__ __forceinline__ u32* local(SelectScratch&) { return own[passes & 1]; }

    __device__ __forceinline__ void merge(SelectScratch& s) {
        // NT / 256 neighbouring lanes share a bin, each loading its share of the CTAs at once and
        // adding the shares with shuffles: one remote load after another cost a DSMEM round trip
        // each, and all 16 in one thread cost registers the row needs.
        static_assert(NT % 256 == 0 && NT / 256 <= MAX_CLUSTER, "whole bins per warp");
        constexpr u32 G = NT / 256, PER = MAX_CLUSTER / G;
        cluster_sync();
        const u32 b = threadIdx.x / G, c0 = threadIdx.x % G * PER;
        u32 v[PER];
#pragma unroll
        for (u32 c = 0; c < PER; ++c) v[c] = c0 + c < size ? cluster_load_u32(cluster_map(&own[passes & 1][b], c0 + c)) : 0;
        u32 sum = 0;
#pragma unroll
        for (u32 c = 0; c < PER; ++c) sum += v[c];
#pragma unroll
        for (u32 o = 1; o < G; o <<= 1) sum += __shfl_xor_sync(DS_FULL_MASK, sum, o);
        if (threadIdx.x % G == 0) s.hist[b] = sum;
        ++passes;
        __syncthreads();
    }
};
