// Bitonic sort of a CTA's shared buffer, descending by sort_key, mostly in registers.
// by_value: by composite (value descending, ties by ascending column); otherwise by the low
// 32 bits (~column), i.e. ascending column.
//
// Each warp holds a run of 32 x E elements (element j x 32 + lane of the run in slot j of that
// lane), so strides below 32 go through shuffles, strides below the run within a thread, and
// only longer strides through shared memory, one barrier each. Sorting in shared memory alone
// took a barrier per stride, a large share of a row's time at large k.
#pragma once
#include "common/types.cuh"

__device__ __forceinline__ u64 sort_key(u64 c, bool by_value) { return by_value ? c : (u64)(u32)c; }

// Orders the pair (a, b), descending when `desc`, else ascending; returns whether it swapped.
__device__ __forceinline__ bool order_pair(u64& a, u64& b, bool desc, bool by_value) {
    if ((sort_key(a, by_value) < sort_key(b, by_value)) != desc) return false;
    const u64 t = a;
    a = b;
    b = t;
    return true;
}

// The bitonic merge steps of `size` with strides below the run (32 x E), on the registers of
// this thread, whose slot j is element base + j x 32 + lane.
template <int E>
__device__ __forceinline__ void merge_in_run(u64 (&x)[E], u32 size, u32 base, bool by_value) {
    const u32 lane = threadIdx.x & 31;
#pragma unroll
    for (int d = E / 2; d >= 1; d /= 2) {
        if ((u32)d * 32 >= size) continue;
#pragma unroll
        for (int j = 0; j < E; ++j)
            if (!(j & d)) order_pair(x[j], x[j + d], ((base + j * 32) & size) == 0, by_value);
    }
#pragma unroll
    for (u32 stride = 16; stride >= 1; stride /= 2) {
        if (stride >= size) continue;
        const bool lower = !(lane & stride);
#pragma unroll
        for (int j = 0; j < E; ++j) {
            const u64 y = __shfl_xor_sync(DS_FULL_MASK, x[j], stride);
            const bool desc = ((base + j * 32 + lane) & size) == 0;
            // The lower position keeps the larger when descending; the partner keeps the other.
            const bool take = (sort_key(y, by_value) > sort_key(x[j], by_value)) == (lower == desc);
            if (take) x[j] = y;
        }
    }
}

// Sorts buf[0, m) descending by sort_key, m <= NMAX (a power of two); buf has room up to m
// rounded up to a power of two. Starts after a barrier that published buf; ends with one.
// Every thread of the CTA must call it.
template <int NT, int NMAX>
__device__ void bitonic_sort_desc(u64* buf, u32 m, bool by_value) {
    constexpr int E = NMAX > NT ? NMAX / NT : 1;  // slots a thread holds
    constexpr u32 RUN = 32 * E;
    u32 n = 1;
    while (n < m) n <<= 1;
    const u32 lane = threadIdx.x & 31;
    const u32 base = (threadIdx.x >> 5) * RUN;
    const bool holds = base < n;  // warp-uniform: this warp holds part of [0, n)
    u64 x[E];
#pragma unroll
    for (int j = 0; j < E; ++j) {
        const u32 i = base + j * 32 + lane;
        x[j] = holds && i < m ? buf[i] : 0;  // 0 sorts last in both orders
    }
    const auto store = [&] {
        if (holds)
#pragma unroll
            for (int j = 0; j < E; ++j)
                if (base + j * 32 + lane < n) buf[base + j * 32 + lane] = x[j];
    };
    for (u32 size = 2; size <= n; size <<= 1) {
        if (size > RUN) {
            store();
            __syncthreads();
            for (u32 stride = size >> 1; stride >= RUN; stride >>= 1) {
                for (u32 t = threadIdx.x; t < n / 2; t += NT) {
                    const u32 lo = 2 * t - (t & (stride - 1));
                    u64 a = buf[lo], b = buf[lo + stride];
                    if (order_pair(a, b, (lo & size) == 0, by_value)) {
                        buf[lo] = a;
                        buf[lo + stride] = b;
                    }
                }
                __syncthreads();
            }
            if (holds)
#pragma unroll
                for (int j = 0; j < E; ++j) x[j] = buf[base + j * 32 + lane];
        }
        if (holds) merge_in_run<E>(x, size, base, by_value);
    }
    store();  // each thread read these positions itself since the last barrier
    __syncthreads();
}
