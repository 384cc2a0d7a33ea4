// The row's best candidates: a binary min-heap of composites in UB, run by the scalar unit.
//
// The root is the threshold T: the worst of the k best seen so far. An element enters only if
// its composite beats T, so the heap always holds the exact top-k of what was offered.
#pragma once
#include "kernel_operator.h"

__aicore__ inline void heap_sift_down(const AscendC::LocalTensor<uint64_t>& h, uint32_t n, uint32_t i) {
    const uint64_t v = h.GetValue(i);
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n) break;
        uint64_t cv = h.GetValue(c);
        if (c + 1 < n) {
            const uint64_t rv = h.GetValue(c + 1);
            if (rv < cv) { ++c; cv = rv; }
        }
        if (cv >= v) break;
        h.SetValue(i, cv);
        i = c;
    }
    h.SetValue(i, v);
}

__aicore__ inline void heap_sift_up(const AscendC::LocalTensor<uint64_t>& h, uint32_t i) {
    const uint64_t v = h.GetValue(i);
    while (i > 0) {
        const uint32_t parent = (i - 1) / 2;
        const uint64_t pv = h.GetValue(parent);
        if (pv <= v) break;
        h.SetValue(i, pv);
        i = parent;
    }
    h.SetValue(i, v);
}

// Sorts h[0, n) descending in place (heapify, then move the minimum to the back n - 1 times).
__aicore__ inline void heap_sort_desc(const AscendC::LocalTensor<uint64_t>& h, uint32_t n) {
    for (uint32_t i = n / 2; i-- > 0;) heap_sift_down(h, n, i);
    for (uint32_t end = n; end-- > 1;) {
        const uint64_t top = h.GetValue(0);
        h.SetValue(0, h.GetValue(end));
        h.SetValue(end, top);
        heap_sift_down(h, end, 0);
    }
}

struct TopHeap {
    AscendC::LocalTensor<uint64_t> h;
    uint32_t n;     // entries held
    uint32_t cap;   // k

    __aicore__ inline void reset(uint32_t k) { n = 0; cap = k; }
    __aicore__ inline bool full() const { return n == cap; }
    __aicore__ inline uint64_t threshold() const { return h.GetValue(0); }

    __aicore__ inline void offer(uint64_t c) {
        if (n < cap) {
            h.SetValue(n, c);
            heap_sift_up(h, n++);
        } else if (c > h.GetValue(0)) {
            h.SetValue(0, c);
            heap_sift_down(h, n, 0);
        }
    }
};
