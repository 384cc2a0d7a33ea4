"""Which kernels, how many CTAs per row and how much shared memory serve a top-k (the dispatch
rule of the CUDA backend).

A plan depends only on (dtype, k, whether the batch has fewer rows than SMs, the split factor,
device limits), so the backend caches it. A batch of fewer rows than SMs may split each row over
``split`` CTAs (``split_factor``): a thread-block cluster per row where the GPU has clusters
(sm_90+), else a slice per CTA plus a merge launch through a workspace.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import ITEMSIZE
from .variants import (SPLIT_CLUSTER, SPLIT_WORKSPACE, STREAM_KMAX, Variant, large_variant, merge_variant,
                       stream_variant)

# Bytes of SelectScratch, the step counters and the shared count beside the candidate buffer in
# kernels_cu/row/candidates.cuh's Shared struct (256 + 4 u32, 3 u32, alignment), rounded up.
_STREAM_SCRATCH_BYTES = 1088

# The most CTAs a row is split over: the largest (non-portable) cluster of the H100/H200.
MAX_SPLIT = 16
# Elements each CTA of a split row gets at least: max(MIN_SLICE, SLICE_PER_K * k). The H200
# crossover (docs/benchmarks.md, tools/tune_split.py): below that the merge costs more than the
# split saves.
MIN_SLICE = 8192
SLICE_PER_K = 8


@dataclass(frozen=True)
class DeviceLimits:
    sm_count: int
    max_smem_per_block: int  # opt-in maximum of dynamic shared memory per CTA, bytes
    clusters: bool = False   # thread-block cluster launch (sm_90+)


@dataclass(frozen=True)
class Plan:
    variant: Variant
    threads: int    # threads per CTA
    smem: int       # dynamic shared memory per CTA, bytes
    split: int = 1  # CTAs per row
    how: str = ""   # SPLIT_CLUSTER or SPLIT_WORKSPACE when split > 1
    merge: Variant | None = None  # the second launch of SPLIT_WORKSPACE


def stream_smem_bytes(variant: Variant) -> int:
    """Shared memory of topk_stream.cu / topk_merge.cu: a buffer of 2 * kmax composites (8 bytes
    each) plus one block (threads x loads x 16-byte vectors), and the select scratch."""
    block = variant.threads * dict(variant.extra)["DS_LOADS"] * (16 // ITEMSIZE[variant.dtype])
    return 8 * (2 * variant.kmax + block) + _STREAM_SCRATCH_BYTES


def split_factor(rows: int, width: int, k: int, sm_count: int) -> int:
    """CTAs per row: 1 for batches of at least half a row per SM or k beyond the streaming
    kernel; else the largest power of two <= MAX_SPLIT that keeps rows x split within half the
    SMs (2 is allowed up to all of them) and gives each CTA at least max(MIN_SLICE,
    SLICE_PER_K x k) elements. On the H200 a row split wider than that measured slower: the
    clusters no longer fit at once, and the merge grows."""
    if 2 * rows > sm_count or k > STREAM_KMAX[-1]:
        return 1
    most = min(MAX_SPLIT, max(sm_count // (2 * rows), 2), width // max(MIN_SLICE, SLICE_PER_K * k))
    return 1 << (most.bit_length() - 1) if most >= 2 else 1


def make_plan(dtype: str, k: int, few_rows: bool, limits: DeviceLimits, split: int = 1, how: str = "") -> Plan:
    """The streaming kernel for the smallest k bucket holding k whose buffer fits the device
    (tuned for few rows when the batch has fewer rows than SMs; split over ``split`` CTAs per
    row through ``how``, by default clusters where the device has them), otherwise the any-k
    kernel (never split)."""
    kmax = next((b for b in STREAM_KMAX if k <= b), None)
    if kmax is None:
        v = large_variant(dtype)
        return Plan(v, v.threads, 0)
    if split > 1:
        how = how or (SPLIT_CLUSTER if limits.clusters else SPLIT_WORKSPACE)
        v = stream_variant(dtype, kmax, split=how)
        smem = stream_smem_bytes(v)
        if smem <= limits.max_smem_per_block:
            return Plan(v, v.threads, smem, split, how, merge_variant(dtype, kmax) if how == SPLIT_WORKSPACE else None)
    for v in {stream_variant(dtype, kmax, few_rows): None, stream_variant(dtype, kmax): None}:
        smem = stream_smem_bytes(v)
        if smem <= limits.max_smem_per_block:
            return Plan(v, v.threads, smem)
    v = large_variant(dtype)
    return Plan(v, v.threads, 0)
