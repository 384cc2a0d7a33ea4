"""The CUDA dispatch rule (deepselect_rt/cuda/plan.py) and the per-arch variant set, on the CPU."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deepselect_rt.jit import env as resources
from deepselect_rt.cuda import plan as P
from deepselect_rt.cuda.variants import (RADIX_COMPACT_ELEMS, RADIX_TIERS, SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE,
                                         STREAM_KMAX, default_variants, merge_variant, stream_bucket,
                                         stream_variant)
from deepselect_rt.dtypes import ITEMSIZE

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
    # The splits that measured fastest on an H200 (132 SMs) for these shapes.
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
    # The merge launch gets its own kernel's shared memory (no ring of blocks), within the GPU's.
    assert p.merge_smem == P.stream_smem_bytes(p.merge) < p.smem <= A100.max_smem_per_block
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


@given(rows=st.integers(1, 300), width=st.integers(1, 1 << 22), k=st.integers(1, 6000),
       sms=st.integers(1, 200), dtype=st.sampled_from(["float32", "float16", "bfloat16"]))
def test_radix_split_fits_the_sms_and_a_tier(rows, width, k, sms, dtype):
    span = P.row_vectors(dtype, width, begin=True)
    s = P.radix_split(rows, span, k, dtype, sms)
    if s == 0:
        return
    assert k <= STREAM_KMAX[-1] and s & (s - 1) == 0 and 1 <= s <= P.MAX_SPLIT
    if s == 1:  # one CTA a row, one wave
        assert rows <= sms and P.one_cta_radix(dtype, span, k) and P.radix_tier(dtype, span, 1) is not None
        return
    assert span >= 2 * RADIX_TIERS[dtype][0][0]
    threads, vectors = P.radix_tier(dtype, span, s)
    assert threads * vectors * s >= span
    if s == 2 and 2 * rows * s > sms:
        assert rows * s <= sms  # clusters of two past the half-SM rule: one wave
    elif (threads, vectors) == RADIX_TIERS[dtype][-1]:
        # The largest tier: at LARGEST_TIER_SPLIT CTAs a row, up to one CTA an SM, or at two.
        assert (s == P.LARGEST_TIER_SPLIT or s == 2) and rows * s <= sms
    else:
        assert 2 * rows * s <= sms  # the other tiers: within half the SMs
        assert 2 * s > P.MAX_SPLIT or 2 * rows * 2 * s > sms  # the largest allowed


def test_row_vectors_counts_the_partial_end_vectors():
    assert P.row_vectors("bfloat16", 16) == 2
    assert P.row_vectors("bfloat16", 16, ptr=2) == 3  # one element into a vector
    assert P.row_vectors("bfloat16", 16, ptr=0, row_stride=17) == 3  # rows off the boundary
    assert P.row_vectors("bfloat16", 16, ptr=0, row_stride=24) == 2
    assert P.row_vectors("float32", 9, begin=True) == 4
    assert P.row_vectors("float32", 8, ptr=12, row_stride=4) == 3


def test_radix_split_for_the_decode_shapes():
    # The plans that measured fastest on an H200 (132 SMs) for these decode shapes.
    bf = lambda width: P.row_vectors("bfloat16", width)  # noqa: E731  (aligned rows)
    assert P.radix_split(1, bf(131072), 512, "bfloat16", 132) == 16
    assert P.radix_tier("bfloat16", bf(131072), 16) == (1024, 1)
    assert P.radix_tier("bfloat16", bf(131072) + 1, 16) == (1024, 2)  # a row off the boundary
    assert P.radix_split(8, bf(131072), 2048, "bfloat16", 132) == 8
    assert P.radix_split(16, bf(131072), 512, "bfloat16", 132) == 4
    # Past half the SMs, one wave of clusters of two (the largest tier at 128K).
    assert P.radix_split(32, bf(131072), 512, "bfloat16", 132) == 2
    assert P.radix_split(32, bf(131072), 2048, "bfloat16", 132) == 2
    assert P.radix_tier("bfloat16", bf(131072), 2) == (1024, 8)
    assert P.radix_split(64, bf(65536), 512, "bfloat16", 132) == 2
    assert P.radix_split(66, bf(131072), 2048, "bfloat16", 132) == 2
    # Past those, one CTA a row while rows <= SMs, where one_cta_radix says it wins.
    assert P.radix_split(67, bf(16384), 512, "bfloat16", 132) == 1
    assert P.radix_split(132, bf(16384), 4096, "bfloat16", 132) == 1
    assert P.radix_split(133, bf(16384), 512, "bfloat16", 132) == 0  # two waves
    assert P.radix_split(100, bf(8192), 2048, "bfloat16", 132) == 1
    assert P.radix_split(100, bf(65536), 512, "bfloat16", 132) == 1
    assert P.radix_split(100, bf(65536), 1024, "bfloat16", 132) == 0  # the prefilter bounds little
    assert P.radix_split(100, P.row_vectors("float32", 8192), 2048, "float32", 132) == 1
    assert P.radix_split(100, P.row_vectors("float32", 16384), 512, "float32", 132) == 0  # level
    assert P.radix_split(100, P.row_vectors("float32", 32768), 256, "float32", 132) == 1
    assert P.radix_split(100, P.row_vectors("float32", 32768), 512, "float32", 132) == 0
    assert P.radix_split(100, bf(4096), 512, "bfloat16", 132) == 0  # narrower than a CTA: unmeasured
    assert P.radix_split(64, bf(1 << 18), 512, "bfloat16", 132) == 0  # no tier holds half a row
    assert P.radix_split(64, P.row_vectors("float32", 65536), 512, "float32", 132) == 2
    assert P.radix_split(1, bf(32768), 512, "bfloat16", 132) == 16
    assert P.radix_split(1, bf(1 << 20), 2048, "bfloat16", 132) == 16
    assert P.radix_split(1, bf(1 << 20), 512, "bfloat16", 132) == 16
    # Rows only the largest tier holds: 16 CTAs a row while rows x 16 <= SMs, past half the SMs.
    assert P.radix_split(8, bf(1 << 20), 2048, "bfloat16", 132) == 16
    assert P.radix_split(9, bf(1 << 20), 2048, "bfloat16", 132) == 0
    assert P.radix_split(8, P.row_vectors("float32", 1 << 19), 512, "float32", 132) == 16
    assert P.radix_split(8, bf(1 << 19), 512, "bfloat16", 132) == 0  # 16 CTAs of 4 vectors: unmeasured
    assert P.radix_tier("bfloat16", bf(1 << 20), 16) == (1024, 8)
    assert P.radix_split(1, P.row_vectors("float32", 129280), 512, "float32", 132) == 16
    assert P.radix_split(1, bf(2047 * 8), 512, "bfloat16", 132) == 1  # one CTA: no cluster of 1024 x 1
    assert P.radix_split(1, bf(1 << 20), 4097, "bfloat16", 132) == 0


def test_make_plan_radix_and_its_fallbacks():
    p = P.make_plan("bfloat16", 512, True, H200, 16, SPLIT_RADIX, (1024, 2))
    assert (p.variant.family, p.threads, p.split, p.how) == ("topk_cluster", 1024, 16, SPLIT_RADIX)
    assert dict(p.variant.extra)["DS_VECS"] == 2 and p.variant.min_sm == 90
    assert p.smem == P.radix_smem_bytes(512, "bfloat16", (1024, 2)) == P._RADIX_SCRATCH_BYTES + 8 * 512
    assert P.radix_smem_bytes(513, "bfloat16", (1024, 2)) == P._RADIX_SCRATCH_BYTES + 8 * 1024
    # The compacting tiers add a 2-byte offset and 16 bytes of keys a vector.
    assert P.radix_smem_bytes(512, "bfloat16", (1024, 8)) == P._RADIX_SCRATCH_BYTES + 18 * 8192 + 8 * 512
    assert P.radix_smem_bytes(512, "float32", (1024, 4)) == P._RADIX_SCRATCH_BYTES + 8 * 512  # 16 elements
    assert P.radix_smem_bytes(4096, "float32", (512, 16)) <= H200.max_smem_per_block
    # No tier (the row does not fit), no clusters, or k past 4096: the streaming kernel's ways.
    assert P.make_plan("bfloat16", 512, True, H200, 16, SPLIT_RADIX, None).how == SPLIT_CLUSTER
    assert P.make_plan("bfloat16", 512, True, A100, 4, SPLIT_RADIX, (1024, 1)).how == SPLIT_WORKSPACE
    assert P.make_plan("bfloat16", 5000, True, H200, 4, SPLIT_RADIX, (1024, 1)).variant.family == "topk_large"


def test_radix_variants_only_where_clusters_exist():
    families = lambda arch: {v.family for v in default_variants(arch)}  # noqa: E731
    assert "topk_cluster" in families("sm_90a") and "topk_cluster" in families("sm_120")
    assert "topk_cluster" not in families("sm_80") and "topk_cluster" not in families("sm_89")


def test_small_cluster_variants():
    # The tiers of 32 or more elements a thread (the prefilter's) in clusters of at most two CTAs
    # at 2048 <= k <= split x threads (where topk_cluster.cu prefilters) take DS_SMALL_CLUSTER, no
    # other plan; warmup builds exactly those variants. 64 rows of 128K bf16 run as clusters of
    # two: at k = 2048 the small-cluster variant, at k = 512 and 4096 the other.
    wanted = set()
    for dtype in ("float32", "float16", "bfloat16"):
        for threads, vectors in RADIX_TIERS[dtype]:
            prefiltered = vectors * 16 // ITEMSIZE[dtype] >= 32
            for split in (1, 2, 3, 4, 8, 16):
                for k in (512, 1024, 2047, 2048, 4096):
                    p = P.make_plan(dtype, k, True, H200, split, SPLIT_RADIX, (threads, vectors))
                    small = prefiltered and split <= 2 and 2048 <= k <= split * threads
                    assert dict(p.variant.extra).get("DS_SMALL_CLUSTER") == (1 if small else None)
                    assert p.variant in default_variants("sm_90a")
                    if small:
                        wanted.add(p.variant)
    built = {v for v in default_variants() if dict(v.extra).get("DS_SMALL_CLUSTER")}
    assert built == wanted and len(built) == 4  # bf16 and fp16, 1024 x 4 and 1024 x 8
    vectors = P.row_vectors("bfloat16", 131072)
    assert P.radix_split(64, vectors, 2048, "bfloat16", H200.sm_count) == 2


def test_radix_constants_match_the_kernel():
    # plan.py and variants.py size topk_cluster.cu's shared memory and pick its variants from two
    # of its constants.
    kernels = resources.cuda_source_dir() / "cluster"
    assert f"constexpr int PREFILTER_ELEMS = {RADIX_COMPACT_ELEMS};" in (kernels / "config.cuh").read_text()
    assert f"static_assert(COLS_OFFSET <= {P._RADIX_SCRATCH_BYTES}," in (kernels / "shared.cuh").read_text()


def test_few_rows_tuning_where_it_takes_no_more_waves():
    # H200: the bucket's tuning holds 4 CTAs an SM up to k = 1024, 3 at 2048, 2 at 4096; the
    # few-rows tuning (512 threads) 2, and 1 at k = 4096 (the whole-block room).
    batch = lambda k: P.stream_ctas_per_sm(stream_variant("bfloat16", stream_bucket(k)), H200)  # noqa: E731
    few = lambda k: P.stream_ctas_per_sm(stream_variant("bfloat16", stream_bucket(k), True), H200)  # noqa: E731
    assert [batch(k) for k in (256, 512, 1024, 2048, 4096)] == [4, 4, 4, 3, 2]
    assert [few(k) for k in (256, 512, 1024, 2048, 4096)] == [2, 2, 2, 2, 1]
    rows = lambda k, width=1 << 17: [r for r in (1, 131, 132, 133, 264, 265, 396, 397, 528, 529, 4096)  # noqa: E731
                                     if P.few_rows_tuning(r, width, "bfloat16", k, H200)]
    assert rows(512) == [1, 131, 132, 133, 264]  # one wave of each
    assert rows(2048) == [1, 131, 132, 133, 264, 397, 528]  # and two of each
    assert rows(4096) == [1, 131, 132]
    assert not P.few_rows_tuning(1, 1 << 17, "bfloat16", 4097, H200)  # the any-k kernel
    # Rows past 512K columns at k > 512 keep the bucket's tuning once an SM holds two CTAs.
    for k in (1024, 2048):
        assert rows(k, (1 << 19) + 1) == rows(k, 1 << 20) == [1, 131, 132]
        assert rows(k, 1 << 19) == rows(k)
    assert rows(512, 1 << 20) == rows(512)
    # Without the SM's shared memory for the register budget's CTAs, fewer count.
    assert P.stream_ctas_per_sm(stream_variant("float32", 2048), A100) == 2


def test_one_cta_rows_take_the_bounded_room_but_split_rows_the_whole_block():
    for few in (False, True):
        assert dict(stream_variant("bfloat16", 2048, few).extra).get("DS_BOUNDED_ROOM") == 1
    assert "DS_BOUNDED_ROOM" not in dict(stream_variant("bfloat16", 4096, True).extra)
    assert "DS_BOUNDED_ROOM" not in dict(stream_variant("bfloat16", 512, split=SPLIT_CLUSTER).extra)
