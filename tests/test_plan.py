"""The CUDA dispatch rule (deepselect_rt/cuda/plan.py) and the per-arch variant set, on the CPU."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deepselect_rt.cuda import plan as P
from deepselect_rt.cuda.variants import (SPLIT_CLUSTER, SPLIT_WORKSPACE, STREAM_KMAX, default_variants,
                                         merge_variant)

H200 = P.DeviceLimits(sm_count=132, max_smem_per_block=227 * 1024, clusters=True)
A100 = P.DeviceLimits(sm_count=108, max_smem_per_block=163 * 1024, clusters=False)
SMALL_SMEM = P.DeviceLimits(sm_count=84, max_smem_per_block=99 * 1024, clusters=True)


def _slice(k: int) -> int:
    return max(P.MIN_SLICE, P.SLICE_PER_K * k)


@given(rows=st.integers(1, 300), width=st.integers(1, 1 << 22), k=st.integers(1, 6000),
       sms=st.integers(1, 200))
def test_split_factor_is_the_largest_allowed_power_of_two(rows, width, k, sms):
    s = P.split_factor(rows, width, k, sms)
    def allowed(n):
        fits = 2 * rows * n <= sms or (n == 2 and 2 * rows <= sms)
        return n <= P.MAX_SPLIT and fits and width // n >= _slice(k)

    if 2 * rows > sms or k > STREAM_KMAX[-1]:
        assert s == 1
        return
    assert s & (s - 1) == 0
    if s > 1:
        assert allowed(s)
    assert not allowed(2 * s)


def test_split_factor_on_the_measured_h200_crossover():
    # The best split of tools/tune_split.py on the H200 (docs/benchmarks.md).
    assert P.split_factor(1, 1 << 20, 2048, 132) == 16
    assert P.split_factor(8, 1 << 20, 512, 132) == 8
    assert P.split_factor(16, 131072, 512, 132) == 4
    assert P.split_factor(64, 131072, 512, 132) == 2
    assert P.split_factor(1, 16384, 2048, 132) == 1
    assert P.split_factor(67, 1 << 20, 2048, 132) == 1
    assert P.split_factor(1, 1 << 20, 5000, 132) == 1


def test_make_plan_uses_clusters_where_the_gpu_has_them():
    p = P.make_plan("bfloat16", 512, True, H200, 8)
    assert (p.split, p.how, p.merge) == (8, SPLIT_CLUSTER, None)
    assert p.variant.min_sm == 90 and dict(p.variant.extra)["DS_SPLIT"] == 1
    assert p.smem == P.stream_smem_bytes(p.variant) <= H200.max_smem_per_block


def test_make_plan_uses_a_workspace_and_a_merge_launch_without_clusters():
    p = P.make_plan("float16", 512, True, A100, 4)
    assert (p.split, p.how) == (4, SPLIT_WORKSPACE)
    assert p.merge == merge_variant("float16", 512)
    # The merge kernel's buffer must be the size the split kernel's plan allocates.
    assert P.stream_smem_bytes(p.merge) == p.smem
    assert p.variant.min_sm == 0


def test_make_plan_forced_workspace_on_a_cluster_gpu():
    assert P.make_plan("float32", 100, True, H200, 2, SPLIT_WORKSPACE).how == SPLIT_WORKSPACE


def test_make_plan_falls_back_when_the_split_buffer_does_not_fit():
    p = P.make_plan("bfloat16", 4096, True, SMALL_SMEM, 16)
    assert p.split == 1 and p.how == "" and p.smem <= SMALL_SMEM.max_smem_per_block


def test_make_plan_never_splits_large_k():
    p = P.make_plan("float32", 5000, True, H200, 16)
    assert p.variant.family == "topk_large" and p.split == 1


def test_every_split_plan_variant_is_in_the_arch_default_set():
    for arch, limits in (("sm_90a", H200), ("sm_80", A100)):
        have = set(default_variants(arch))
        for dtype in ("float32", "float16", "bfloat16"):
            for k in (1, 512, 4096):
                p = P.make_plan(dtype, k, True, limits, 4)
                assert p.variant in have and (p.merge is None or p.merge in have)


def test_default_variants_per_arch():
    sm80, sm90 = default_variants("sm_80"), default_variants("sm_90a")
    assert not any(dict(v.extra).get("DS_SPLIT") == 1 for v in sm80)
    assert not any(v.family == "topk_merge" for v in sm90)
    assert all(v.builds_for("sm_80") for v in sm80)
    assert all(v.builds_for("sm_90a") for v in sm90)
    assert not any(v.builds_for("sm_86") for v in sm90 if v.min_sm == 90)
    assert set(sm80) | set(sm90) == set(default_variants())
