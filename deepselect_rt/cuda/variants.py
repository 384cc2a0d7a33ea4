"""The CUDA registry of what can be compiled: one ``KernelSpec``, one source, one cubin, one entry.

Runtime flags (sorted, return_value, index type, NaN policy) are kernel arguments, not
variants, so the set stays small enough to warm up in seconds. The tunings below were chosen by
timing each candidate on an H200 (docs/performance.md says how to re-measure).
"""

from __future__ import annotations

from dataclasses import replace

from ..dtypes import INPUT_DTYPES, ITEMSIZE
from ..jit.spec import DTYPE_CODE, KernelSpec, arch_number

PROBE = KernelSpec("probe")

# k buckets of the streaming kernel: each variant sizes its shared buffer for its bucket's top.
STREAM_KMAX = (256, 512, 1024, 2048, 4096)
# (threads, 16-byte vectors per thread in a block, CTAs per SM for the register budget, blocks in
# the shared-memory ring that loads ahead) by k bucket, for every dtype. With the bounded room
# (BOUNDED_ROOM_KMAX) 256 x 2 with a 3-block ring fits four CTAs per SM up to k = 1024 and three
# at k = 2048, which measured faster than fewer CTAs with deeper rings. k = 4096 keeps its
# buffer, queues and ring within GPUs of 99 KiB of shared memory per CTA.
STREAM_TUNING = {256: (256, 2, 4, 3), 512: (256, 2, 4, 3), 1024: (256, 2, 4, 3), 2048: (256, 2, 3, 3),
                 4096: (256, 1, 2, 2)}
# Buckets whose one-CTA-a-row variants bound the candidate buffer's room past the select trigger
# to two entries a thread (kernels_cu/row/candidates.cuh, DS_BOUNDED_ROOM): the shared memory
# saved fits more CTAs per SM. k = 4096 gains no CTA; the split variants keep the whole block.
BOUNDED_ROOM_KMAX = (256, 512, 1024, 2048)
# Batches of few rows (deepselect_rt/cuda/plan.py few_rows_tuning: those that run in no more
# waves of CTAs at this tuning than at their bucket's): one CTA's own bandwidth bounds the time,
# and 512 threads read a row faster; the ring's depth changed little there. With the bounded
# room these fit two CTAs an SM up to k = 2048.
FEW_ROWS_TUNING = (512, 2, 2, 2)
LARGE_THREADS = 512

# How a split row's slices meet (kernels_cu/topk_stream.cu, DS_SPLIT): in a thread-block
# cluster through distributed shared memory (sm_90+), or through a global workspace and a
# second launch (kernels_cu/topk_merge.cu).
SPLIT_CLUSTER, SPLIT_WORKSPACE = "cluster", "workspace"
_SPLIT_CODE = {"": 0, SPLIT_CLUSTER: 1, SPLIT_WORKSPACE: 2}
# A third way for few long rows (kernels_cu/topk_cluster.cu, sm_90+): a cluster per row holds
# the row in registers and runs one radix select with cluster-wide histograms.
SPLIT_RADIX = "radix"
# (threads, 16-byte vectors per thread) of topk_cluster.cu by how much of a row each CTA holds,
# smallest first. At most 64 elements per thread (one mask word); 1024 x 8 float32 vectors
# spilled, so float32's largest tier is 512 x 16.
RADIX_TIERS = {"float32": ((1024, 1), (1024, 2), (1024, 4), (512, 16)),
               "float16": ((1024, 1), (1024, 2), (1024, 4), (1024, 8)),
               "bfloat16": ((1024, 1), (1024, 2), (1024, 4), (1024, 8))}
# Elements a thread from which topk_cluster.cu prefilters and compacts its candidates through
# shared memory (its PREFILTER_ELEMS).
RADIX_COMPACT_ELEMS = 32


def stream_bucket(k: int) -> int | None:
    """The smallest STREAM_KMAX bucket holding k, or None past the streaming kernel."""
    return next((b for b in STREAM_KMAX if k <= b), None)


def stream_variant(dtype: str, kmax: int, few_rows: bool = False, split: str = "") -> KernelSpec:
    """The one-pass streaming kernel (kernels_cu/topk_stream.cu) for k <= kmax, tuned for
    batches of few rows (plan.py's few_rows_tuning) when ``few_rows`` or ``split``
    (SPLIT_CLUSTER or SPLIT_WORKSPACE: each CTA streams one slice of a row)."""
    few_rows = few_rows or bool(split)
    threads, loads, min_ctas, stages = FEW_ROWS_TUNING if few_rows else STREAM_TUNING[kmax]
    extra = (("DS_LOADS", loads), ("DS_MIN_CTAS", min_ctas), ("DS_STAGES", stages))
    if not split and kmax in BOUNDED_ROOM_KMAX and loads <= 2:
        extra += (("DS_BOUNDED_ROOM", 1),)
    if split:
        extra += (("DS_SPLIT", _SPLIT_CODE[split]),)
    return KernelSpec("topk_stream", dtype, kmax, threads, extra, 90 if split == SPLIT_CLUSTER else 0)


def merge_variant(dtype: str, kmax: int) -> KernelSpec:
    """The second launch of a SPLIT_WORKSPACE row (kernels_cu/topk_merge.cu); its candidate
    buffer matches the split variant's."""
    threads, loads, _, _ = FEW_ROWS_TUNING
    return KernelSpec("topk_merge", dtype, kmax, threads, (("DS_LOADS", loads),))


def radix_prefiltered(dtype: str, vectors: int) -> bool:
    """Whether topk_cluster.cu's tier of ``vectors`` 16-byte vectors a thread prefilters and
    compacts its candidates (RADIX_COMPACT_ELEMS or more elements a thread)."""
    return vectors * (16 // ITEMSIZE[dtype]) >= RADIX_COMPACT_ELEMS


# The cluster radix select's variant for clusters of two at large k (topk_cluster.cu's
# DS_SMALL_CLUSTER: each thread offers up to four groups' maxima to the prefilter, and each CTA
# also bounds T0 by a key at or below k of them). It pays at k = 2048 in clusters of two (about
# 1.1-1.9x faster on normal and real indexer rows, slower only on rows of a few distinct values)
# and costs a few microseconds at smaller k and in larger clusters, hence the bounds.
SMALL_CLUSTER, SMALL_CLUSTER_K = 2, 2048


def small_cluster(split: int, k: int, threads: int) -> bool:
    """Whether a row split over ``split`` CTAs of ``threads`` threads of the cluster radix select
    takes its small-cluster variant at this k: clusters of at most SMALL_CLUSTER CTAs, k at least
    SMALL_CLUSTER_K, and k at most split x threads, past which topk_cluster.cu runs no prefilter
    (there the variant would only spill more)."""
    return split <= SMALL_CLUSTER and SMALL_CLUSTER_K <= k <= split * threads


def radix_variant(dtype: str, threads: int, vectors: int, small: bool = False) -> KernelSpec:
    """The cluster radix select (kernels_cu/topk_cluster.cu) of one RADIX_TIERS tier; ``small``
    (where ``small_cluster`` says so): a prefiltered tier's variant for clusters of two
    (DS_SMALL_CLUSTER: the prefilter's groups and t_k)."""
    extra = (("DS_VECS", vectors),)
    if small and radix_prefiltered(dtype, vectors):
        extra += (("DS_SMALL_CLUSTER", 1),)
    return KernelSpec("topk_cluster", dtype, 0, threads, extra, 90)


def large_variant(dtype: str) -> KernelSpec:
    """The any-k kernel (kernels_cu/topk_large.cu), several reads of the row."""
    return KernelSpec("topk_large", dtype, 0, LARGE_THREADS)


def with_field_args(variant: KernelSpec) -> KernelSpec:
    """``variant`` whose entry takes the argument block's fields as separate parameters
    (DS_FIELD_ARGS, kernels_cu/common/params.cuh): what XLA's kernel-call launcher passes under
    jax.jit (cuda/xla_call.py). Compiled only when such a call is lowered; warmup skips it."""
    extra = dict(variant.extra)
    extra["DS_FIELD_ARGS"] = 1
    return replace(variant, extra=tuple(sorted(extra.items())))


def default_variants(arch: str | None = None) -> list[KernelSpec]:
    """What ``warmup`` builds: every variant the shipped dispatcher can pick on ``arch`` (on
    any arch when None): split rows use clusters (and the cluster radix select) from sm_90 on,
    a workspace before."""
    out = [PROBE]
    for dtype in INPUT_DTYPES:
        for kmax in STREAM_KMAX:
            out += [stream_variant(dtype, kmax, few) for few in (False, True)]
            cluster = stream_variant(dtype, kmax, split=SPLIT_CLUSTER)
            if arch is None or cluster.builds_for(arch):
                out.append(cluster)
            if arch is None or not cluster.builds_for(arch):
                out += [stream_variant(dtype, kmax, split=SPLIT_WORKSPACE), merge_variant(dtype, kmax)]
        radix = (radix_variant(dtype, t, v, small) for t, v in RADIX_TIERS[dtype]
                 for small in (False, small_cluster(SMALL_CLUSTER, SMALL_CLUSTER_K, t)))
        out += [v for v in radix if arch is None or v.builds_for(arch)]
        out.append(large_variant(dtype))
    return list(dict.fromkeys(out))  # the few-rows tuning may equal a bucket's own


def filter_variants(variants, *, dtypes=None, ks=None) -> list[KernelSpec]:
    """Keep the variants of the given input dtypes and those the plan picks for the given k
    values: of the streaming kernels, the smallest k bucket holding each k; the variants that do
    not depend on k (any-k, cluster radix select, probe) always."""
    buckets = {stream_bucket(k) for k in ks or ()}
    out = []
    for v in variants:
        if dtypes and v.dtype and v.dtype not in dtypes:
            continue
        if ks and v.kmax and v.kmax not in buckets:
            continue
        out.append(v)
    return out


__all__ = ["KernelSpec", "PROBE", "default_variants", "filter_variants",
           "DTYPE_CODE", "INPUT_DTYPES", "SPLIT_CLUSTER", "SPLIT_WORKSPACE", "SPLIT_RADIX", "RADIX_TIERS",
           "RADIX_COMPACT_ELEMS", "SMALL_CLUSTER", "SMALL_CLUSTER_K", "stream_bucket", "stream_variant",
           "merge_variant", "radix_prefiltered", "small_cluster", "radix_variant", "large_variant", "arch_number"]
