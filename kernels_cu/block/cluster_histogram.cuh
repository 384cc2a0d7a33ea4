// The histogram merge of a radix select run by every CTA of a cluster (radix_digits' Hist):
// each CTA counts its own elements, and every CTA sums all of them through distributed shared
// memory, so all pick the same digit.
#pragma once
#include "block/cluster.cuh"
#include "block/radix_select.cuh"

template <int NT>
struct ClusterHistogram {
    u32 (*own)[256];  // this CTA's histograms, by pass parity, read by the whole cluster
    u32 size;         // CTAs in the cluster

    __device__ __forceinline__ u32* local(int pass, SelectScratch&) { return own[pass & 1]; }

    // Two buffers need one cluster barrier per pass: a CTA zeroes a buffer again two passes
    // later, after the next barrier, which no CTA passes before it has read this pass's sums.
    __device__ __forceinline__ void merge(int pass, SelectScratch& s) {
        cluster_sync();
        for (u32 b = threadIdx.x; b < 256; b += NT) {
            u32 sum = 0;
            for (u32 c = 0; c < size; ++c) sum += cluster_load_u32(cluster_map(&own[pass & 1][b], c));
            s.hist[b] = sum;
        }
        __syncthreads();
    }
};
