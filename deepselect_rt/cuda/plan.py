"""Which kernel and how much shared memory serve a top-k (the dispatch rule of the CUDA backend).

A plan depends only on (dtype, k, whether the batch has fewer rows than SMs, device limits), so
the backend caches it; the grid is one CTA per row.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import ITEMSIZE
from .variants import STREAM_KMAX, Variant, large_variant, stream_variant

# Bytes of SelectScratch and the step counters beside the candidate buffer in topk_stream.cu's
# Shared struct (256 + 4 u32, 3 u32, alignment), rounded up.
_STREAM_SCRATCH_BYTES = 1088


@dataclass(frozen=True)
class DeviceLimits:
    sm_count: int
    max_smem_per_block: int  # opt-in maximum of dynamic shared memory per CTA, bytes


@dataclass(frozen=True)
class Plan:
    variant: Variant
    threads: int    # threads per CTA
    smem: int       # dynamic shared memory per CTA, bytes


def stream_smem_bytes(variant: Variant) -> int:
    """Shared memory of topk_stream.cu: a buffer of 2 * kmax composites (8 bytes each) plus one
    block (threads x loads x 16-byte vectors), and the select scratch."""
    block = variant.threads * dict(variant.extra)["DS_LOADS"] * (16 // ITEMSIZE[variant.dtype])
    return 8 * (2 * variant.kmax + block) + _STREAM_SCRATCH_BYTES


def make_plan(dtype: str, k: int, few_rows: bool, limits: DeviceLimits) -> Plan:
    """The streaming kernel for the smallest k bucket holding k (tuned for few rows when the batch
    has fewer rows than SMs) whose buffer fits the device, otherwise the any-k kernel."""
    kmax = next((b for b in STREAM_KMAX if k <= b), None)
    if kmax is not None:
        for v in {stream_variant(dtype, kmax, few_rows): None, stream_variant(dtype, kmax): None}:
            smem = stream_smem_bytes(v)
            if smem <= limits.max_smem_per_block:
                return Plan(v, v.threads, smem)
    v = large_variant(dtype)
    return Plan(v, v.threads, 0)
