"""Which kernels, how many CTAs per row and how much shared memory serve a top-k (the dispatch
rule of the CUDA backend).

A plan depends only on (dtype, k, whether the batch takes the few-rows tuning
(``few_rows_tuning``), the split factor, the radix tier, device limits), so the backend caches
it. A batch of few rows may split each row over ``split`` CTAs: where the GPU has clusters
(sm_90+) and the row fits the registers of a cluster (or of one CTA), a cluster radix select
(``radix_split``); else the streaming kernel's slices (``split_factor``) meet in a thread-block
cluster per row, or (before sm_90) in a workspace read by a merge launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..dtypes import ITEMSIZE
from ..jit.spec import KernelSpec
from .variants import (RADIX_TIERS, SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE, STREAM_KMAX,
                       large_variant, merge_variant, radix_prefiltered, radix_variant, small_cluster,
                       stream_bucket, stream_variant)

# Bytes of SelectScratch, the step counters and the shared count beside the candidate buffer in
# kernels_cu/row/candidates.cuh's Shared struct (256 + 4 u32, 3 u32, alignment), rounded up.
_STREAM_SCRATCH_BYTES = 1088
# kernels_cu/stream/vector_queue.cuh: 64 x (16-byte vector + 4-byte index) per warp of 32 threads.
_QUEUE_BYTES_PER_THREAD = 40
# kernels_cu/row/candidates.cuh's CAP is 2 * kmax + ROOM less these entries (so that three CTAs
# of 256 x 2 with a 3-block ring fit an H200 SM); ROOM is one block, or, with DS_BOUNDED_ROOM,
# _BOUNDED_ROOM_PER_THREAD entries a thread.
_BUFFER_SHORT = 64
_BOUNDED_ROOM_PER_THREAD = 2
# Columns past which a row at k > 512 keeps its bucket's tuning in a batch of more rows than SMs
# (few_rows_tuning).
_FEW_ROWS_LONGEST = 1 << 19

# Bytes of kernels_cu/cluster/shared.cuh's Shared struct at 1024 threads (its COLS_OFFSET), rounded
# up; the compacting tiers' candidates and the gather buffer follow (radix_smem_bytes).
_RADIX_SCRATCH_BYTES = 41984
# Vectors a thread up to which topk_cluster.cu turns a CTA's elements into keys once, at the load
# (its KEYS_AT_LOAD).
RADIX_KEYED_VECTORS = 2

# The most CTAs a row is split over: the largest (non-portable) cluster of the H100/H200.
MAX_SPLIT = 16
# Elements each CTA of a split row gets at least: max(MIN_SLICE, SLICE_PER_K * k). Below that
# the merge costs more than the split saves (the crossover measured on an H200).
MIN_SLICE = 8192
SLICE_PER_K = 8
# Rows only the radix select's largest tier (64 elements a thread) holds at a cluster of the
# half-SM rule take this split while it fits one CTA an SM: there the cluster radix select
# measured faster than the streaming kernel on an H200 (1-8 rows of 1M), even where not every
# cluster of 16 is resident at once.
LARGEST_TIER_SPLIT = MAX_SPLIT


@dataclass(frozen=True)
class DeviceLimits:
    sm_count: int
    max_smem_per_block: int  # opt-in maximum of dynamic shared memory per CTA, bytes
    clusters: bool = False   # thread-block cluster launch (sm_90+)


@dataclass(frozen=True)
class Plan:
    variant: KernelSpec
    threads: int    # threads per CTA
    smem: int       # dynamic shared memory per CTA, bytes
    split: int = 1  # CTAs per row
    how: str = ""   # SPLIT_CLUSTER or SPLIT_WORKSPACE when split > 1
    merge: KernelSpec | None = None  # the second launch of SPLIT_WORKSPACE
    merge_smem: int = 0             # its dynamic shared memory, bytes


def stream_smem_bytes(variant: KernelSpec) -> int:
    """Shared memory of topk_stream.cu / topk_merge.cu: a buffer of 2 * kmax - 64 composites (8
    bytes each) plus ROOM (one block of threads x loads 16-byte vectors, or two a thread with
    DS_BOUNDED_ROOM), the select scratch, the warps' vector queues (64 vectors and their indices
    a warp: 40 bytes a thread) and the ring of ``stages`` blocks that loads ahead
    (kernels_cu/stream/vector_ring.cuh; none for topk_merge.cu)."""
    extra = dict(variant.extra)
    vectors = variant.threads * extra["DS_LOADS"]
    ring = 16 * vectors * extra.get("DS_STAGES", 0)
    room = (_BOUNDED_ROOM_PER_THREAD * variant.threads if extra.get("DS_BOUNDED_ROOM")
            else vectors * (16 // ITEMSIZE[variant.dtype]))
    return (8 * (2 * variant.kmax - _BUFFER_SHORT + room) + _STREAM_SCRATCH_BYTES
            + _QUEUE_BYTES_PER_THREAD * variant.threads + ring)


def stream_ctas_per_sm(variant: KernelSpec, limits: DeviceLimits) -> int:
    """CTAs of a one-CTA-a-row streaming variant an SM holds at once: as many as its register
    budget allows (DS_MIN_CTAS), fewer where their shared memory outgrows the SM's (taken as
    max_smem_per_block)."""
    smem = stream_smem_bytes(variant)
    return max(1, min(dict(variant.extra)["DS_MIN_CTAS"], limits.max_smem_per_block // smem))


@lru_cache(maxsize=None)
def _wave_rows(dtype: str, kmax: int, limits: DeviceLimits) -> tuple[int, int]:
    """Rows a wave of CTAs takes at the few-rows tuning and at the bucket's."""
    return tuple(stream_ctas_per_sm(stream_variant(dtype, kmax, few), limits) * limits.sm_count
                 for few in (True, False))


def forget_tuning() -> None:
    """For tuning: drops what few_rows_tuning remembered of the variants' tunings."""
    _wave_rows.cache_clear()


def few_rows_tuning(rows: int, width: int, dtype: str, k: int, limits: DeviceLimits) -> bool:
    """Whether a batch of ``rows`` rows of ``width`` columns at one CTA a row takes the few-rows
    tuning (variants.FEW_ROWS_TUNING, 512 threads) rather than its k bucket's (STREAM_TUNING,
    256): where that runs in no more waves of CTAs (``stream_ctas_per_sm`` of each), its CTAs
    read a row faster; where it would take more waves than the bucket's tuning, the bucket's
    tuning measured faster on an H200, and at many waves the two are level.

    Except rows longer than _FEW_ROWS_LONGEST at k > 512 once some SM holds two CTAs (rows >
    SMs): two 512-thread CTAs an SM read such rows little faster than one, two 256-thread CTAs
    nearly twice as fast. At one CTA an SM the few-rows tuning is the faster at k <= 512 up to
    256K columns and level at 512K (H200)."""
    kmax = stream_bucket(k)
    if kmax is None:
        return False
    if width > _FEW_ROWS_LONGEST and k > 512 and rows > limits.sm_count:
        return False
    few, batch = _wave_rows(dtype, kmax, limits)
    return -(-rows // few) <= -(-rows // batch)


def split_factor(rows: int, width: int, k: int, sm_count: int) -> int:
    """CTAs per row: 1 for batches of at least half a row per SM or k beyond the streaming
    kernel; else the largest power of two <= MAX_SPLIT that keeps rows x split within half the
    SMs (2 is allowed up to all of them) and gives each CTA at least max(MIN_SLICE,
    SLICE_PER_K x k) elements. On the H200 a row split wider than that measured slower: the
    clusters no longer fit at once, and the merge grows."""
    if 2 * rows > sm_count or k > STREAM_KMAX[-1]:
        return 1
    most = min(MAX_SPLIT, max(sm_count // (2 * rows), 2), width // max(MIN_SLICE, SLICE_PER_K * k))
    return _floor_pow2(most) if most >= 2 else 1


def _floor_pow2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def radix_smem_bytes(k: int, dtype: str, tier: tuple[int, int]) -> int:
    """Shared memory of topk_cluster.cu for a RADIX_TIERS ``tier`` (threads, vectors): its
    scratch; for tiers of RADIX_COMPACT_ELEMS or more elements a thread, a 2-byte offset and a
    16-byte vector of keys a vector; then k rounded up to a power of two composites (8 bytes
    each), where CTA 0 sorts the row when sorted=True."""
    threads, vectors = tier
    gather = 8 * (1 << max(k - 1, 0).bit_length())
    if not radix_prefiltered(dtype, vectors):
        return _RADIX_SCRATCH_BYTES + gather
    return _RADIX_SCRATCH_BYTES + 18 * threads * vectors + gather


def row_vectors(dtype: str, width: int, ptr: int = 0, row_stride: int = 0, begin: bool = False) -> int:
    """The most 16-byte vectors a row of ``width`` elements spans: rows starting at ``ptr`` plus
    multiples of ``row_stride`` elements, or anywhere (one vector more) when the stride leaves
    16-byte boundaries or per-row ``begin`` columns move the start."""
    item = ITEMSIZE[dtype]
    vec = 16 // item
    if begin or (row_stride * item) % 16:
        return -(-width // vec) + 1
    return -(-(width + (ptr % 16) // item) // vec)


def radix_tier(dtype: str, vectors: int, split: int) -> tuple[int, int] | None:
    """(threads, vectors per thread) of the smallest RADIX_TIERS tier whose ``split`` CTAs hold a
    row spanning ``vectors`` 16-byte vectors (``row_vectors``), or None."""
    per_cta = -(-vectors // split)
    return next(((t, v) for t, v in RADIX_TIERS[dtype] if t * v >= per_cta), None)


def radix_split(rows: int, vectors: int, k: int, dtype: str, sm_count: int) -> int:
    """CTAs a row of the cluster radix select for rows spanning ``vectors`` 16-byte vectors, or
    0 where it does not serve. Each rule is a crossover measured on an H200: the largest power
    of two <= MAX_SPLIT keeping rows x split within half the SMs (more clusters than that did
    not all run at once, and the time doubled), for rows of at least two of the smallest tier's
    CTAs (narrower ones are unmeasured) that a tier below the largest holds; rows only the
    largest tier (64 elements a thread) holds take LARGEST_TIER_SPLIT CTAs while rows x
    LARGEST_TIER_SPLIT <= sm_count; past those, clusters of two while rows x 2 <= sm_count (one
    wave), faster there than the streaming kernel; past those, one CTA a row
    (``one_cta_radix``) while rows <= sm_count. k beyond the streaming kernel takes the any-k
    kernel."""
    if k > STREAM_KMAX[-1] or vectors < RADIX_TIERS[dtype][0][0]:
        return 0
    if vectors >= 2 * RADIX_TIERS[dtype][0][0]:
        split = _cluster_split(rows, vectors, dtype, sm_count)
        if split:
            return split
    return 1 if rows <= sm_count and one_cta_radix(dtype, vectors, k) else 0


def _cluster_split(rows: int, vectors: int, dtype: str, sm_count: int) -> int:
    """radix_split's clusters of 2-16 CTAs (its docstring's rules), or 0."""
    largest = RADIX_TIERS[dtype][-1]
    most = min(MAX_SPLIT, sm_count // 2 // rows)
    if most >= 2:
        split = _floor_pow2(most)
        tier = radix_tier(dtype, vectors, split)
        if tier is not None and tier != largest:
            return split
    if rows * LARGEST_TIER_SPLIT <= sm_count and radix_tier(dtype, vectors, LARGEST_TIER_SPLIT) == largest:
        return LARGEST_TIER_SPLIT
    if rows * 2 <= sm_count and radix_tier(dtype, vectors, 2) is not None:
        return 2
    return 0


def one_cta_radix(dtype: str, vectors: int, k: int) -> bool:
    """Whether one CTA of the radix select (a cluster of one, one wave of rows) beats the
    streaming kernel for a row spanning ``vectors`` 16-byte vectors: where a tier of at most
    RADIX_KEYED_VECTORS vectors a thread holds it, at every k; where a prefiltered tier holds
    it, while k <= threads / 2 (the prefilter's select over the threads' maxima bounds little
    past that). Both bounds measured on an H200 at 100-132 rows of 8K-64K columns; the float32
    tier of four vectors a thread (neither keyed nor prefiltered) was level, so it keeps the
    streaming kernel."""
    tier = radix_tier(dtype, vectors, 1)
    if tier is None:
        return False
    threads, per_thread = tier
    if per_thread <= RADIX_KEYED_VECTORS:
        return True
    return radix_prefiltered(dtype, per_thread) and 2 * k <= threads


def choose_split(rows: int, width: int, vectors: int, k: int, dtype: str, limits: DeviceLimits) -> tuple[int, str]:
    """(CTAs per row, how): the cluster radix select where the device has clusters and
    ``radix_split`` takes the batch, else ``split_factor``'s split the streaming kernel's way
    (""). ``vectors``: ``row_vectors`` of the rows."""
    if limits.clusters:
        split = radix_split(rows, vectors, k, dtype, limits.sm_count)
        if split:
            return split, SPLIT_RADIX
    return split_factor(rows, width, k, limits.sm_count), ""


def make_plan(dtype: str, k: int, few_rows: bool, limits: DeviceLimits, split: int = 1, how: str = "",
              tier: tuple[int, int] | None = None) -> Plan:
    """The cluster radix select when ``how`` is SPLIT_RADIX and the device has clusters (its
    ``tier`` from ``radix_tier``); else the streaming kernel for the smallest k bucket holding k
    whose buffer fits the device (the few-rows tuning where ``few_rows_tuning`` says so;
    split over ``split`` CTAs per row through ``how``, by default and in place of clusters the
    device lacks clusters where it has them, else a workspace), otherwise the any-k kernel (never
    split)."""
    if how == SPLIT_RADIX:
        smem = radix_smem_bytes(k, dtype, tier) if tier else 0
        if tier and limits.clusters and k <= STREAM_KMAX[-1] and smem <= limits.max_smem_per_block:
            v = radix_variant(dtype, *tier, small_cluster(split, k, tier[0]))
            return Plan(v, v.threads, smem, split, how)
        how = ""
    kmax = stream_bucket(k)
    if kmax is None:
        v = large_variant(dtype)
        return Plan(v, v.threads, 0)
    if split > 1:
        if not how or (how == SPLIT_CLUSTER and not limits.clusters):
            how = SPLIT_CLUSTER if limits.clusters else SPLIT_WORKSPACE
        v = stream_variant(dtype, kmax, split=how)
        smem = stream_smem_bytes(v)
        merge = merge_variant(dtype, kmax) if how == SPLIT_WORKSPACE else None
        if smem <= limits.max_smem_per_block:
            return Plan(v, v.threads, smem, split, how, merge, stream_smem_bytes(merge) if merge else 0)
    for v in {stream_variant(dtype, kmax, few_rows): None, stream_variant(dtype, kmax): None}:
        smem = stream_smem_bytes(v)
        if smem <= limits.max_smem_per_block:
            return Plan(v, v.threads, smem)
    v = large_variant(dtype)
    return Plan(v, v.threads, 0)
