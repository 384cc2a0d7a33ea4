// Bitonic sort of buf[0, n) in shared memory, descending by sort_key, n a power of two.
// by_value: by composite (value descending, ties by ascending column); otherwise by the low
// 32 bits (~column), i.e. ascending column.
#pragma once
#include "common/types.cuh"

__device__ __forceinline__ u64 sort_key(u64 c, bool by_value) { return by_value ? c : (u64)(u32)c; }

template <int NT>
__device__ void bitonic_sort_desc(u64* buf, u32 n, bool by_value) {
    for (u32 size = 2; size <= n; size <<= 1) {
        for (u32 stride = size >> 1; stride > 0; stride >>= 1) {
            for (u32 t = threadIdx.x; t < n / 2; t += NT) {
                const u32 lo = 2 * t - (t & (stride - 1));
                const u32 hi = lo + stride;
                const bool desc = (lo & size) == 0;
                const u64 a = buf[lo], b = buf[hi];
                if ((sort_key(a, by_value) < sort_key(b, by_value)) == desc) {
                    buf[lo] = b;
                    buf[hi] = a;
                }
            }
            __syncthreads();
        }
    }
}
