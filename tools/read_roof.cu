// A plain read of a (rows, width) input for tools/read_roof.py: the least time any top-k of that
// input can take, since a top-k reads every element. Every element is read with 16-byte loads,
// DS_UNROLL in flight a thread, and folded into one maximum a CTA, which is written out so that
// no load can be dropped (and so that the tool can check each CTA's against torch's).
//
// CTA b reads columns [c * C, min((c + 1) * C, width)) of row b / chunks, c = b % chunks,
// C = chunk * DS_VEC: chunks = ceil(width / C) CTAs a row ("row" layout: one, C >= width).
// Rows start 16-byte aligned (row_stride a multiple of DS_VEC); the last chunk of a row also
// reads the width % DS_VEC elements past its last whole vector.
// Compile-time parameters: DS_DTYPE, DS_THREADS, DS_UNROLL, DS_ENTRY.
#include "common/dtype.cuh"

// Mirrored by ReadParams in tools/read_roof.py: six 8-byte fields, no padding.
struct ReadParams {
    const void* x;   // element [0, 0]
    i64 row_stride;  // elements
    i64 width;       // elements
    i64 chunk;       // 16-byte vectors a CTA
    i64 chunks;      // CTAs a row
    float* out;      // (rows * chunks,) each CTA's maximum
};

// A lone element in both halves of a word, for the packed maximum.
__device__ __forceinline__ u32 element_word(bits_t b) {
    return DS_ELEM_BITS == 16 ? (u32)b * 0x10001u : (u32)b;
}

// The larger element of a word of packed maxima, as a float (NaN kept).
__device__ __forceinline__ float word_max(u32 m) {
#if DS_ELEM_BITS == 16
    m = max2_nan(m, __funnelshift_l(m, m, 16));  // the halves swapped: both now hold the larger
#endif
    return to_float((bits_t)m);
}

extern "C" __global__ void __launch_bounds__(DS_THREADS) DS_ENTRY(const ReadParams p) {
    const u32 chunks = (u32)p.chunks, row = blockIdx.x / chunks, c = blockIdx.x - row * chunks;
    const bits_t* xrow = (const bits_t*)p.x + (i64)row * p.row_stride;  // 64-bit: inputs reach 8 GiB
    const uint4* vrow = (const uint4*)xrow;
    const u32 nvec = (u32)(p.width / DS_VEC), lo = c * (u32)p.chunk, hi = min(lo + (u32)p.chunk, nvec);
    u32 m = DS_NEG_INF_WORD;
    u32 i = lo + threadIdx.x;
    // Loads first, folds after: DS_UNROLL independent loads in flight a thread.
    for (; i + (DS_UNROLL - 1) * DS_THREADS < hi; i += DS_UNROLL * DS_THREADS) {
        Vec v[DS_UNROLL];
#pragma unroll
        for (int u = 0; u < DS_UNROLL; ++u) v[u].v = __ldg(vrow + i + u * DS_THREADS);
#pragma unroll
        for (int u = 0; u < DS_UNROLL; ++u) m = max2_nan(m, vec_max(v[u]));
    }
    for (; i < hi; i += DS_THREADS) {
        Vec v;
        v.v = __ldg(vrow + i);
        m = max2_nan(m, vec_max(v));
    }
    if (c == chunks - 1)
        for (i64 j = (i64)nvec * DS_VEC + threadIdx.x; j < p.width; j += DS_THREADS)
            m = max2_nan(m, element_word(xrow[j]));
    for (int o = 16; o; o >>= 1) m = max2_nan(m, __shfl_xor_sync(DS_FULL_MASK, m, o));
    __shared__ u32 warps[DS_THREADS / 32];
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < DS_THREADS / 32; ++w) m = max2_nan(m, warps[w]);
        p.out[blockIdx.x] = word_max(m);
    }
}
