"""Rows split over several CTAs: the cluster radix select and the streaming kernel's
thread-block clusters (sm_90+), and the workspace + merge launch (every GPU), forced through
``backend.forced_split`` and compared bit for bit with the NumPy reference, plus the automatic
rule around its switch points.

Run on a GPU machine: ``pytest -m gpu``. Skips without CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt.bench import distributions
from deepselect_rt.cuda import arch as module
from deepselect_rt.cuda import backend
from deepselect_rt.cuda.plan import radix_split, radix_tier, row_vectors, split_factor
from deepselect_rt.cuda.variants import RADIX_TIERS, SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE
from deepselect_rt.dtypes import ITEMSIZE, numpy_dtype
from gpu_helpers import NaNInputError, bits, check, random_ranges, to_device, to_host, torch_cuda

pytestmark = pytest.mark.gpu
NO_CLUSTERS = "the kernels that run here have no thread-block clusters (before sm_90, or DEEPSELECT_RT_ARCH=compute_8x)"


def _has_clusters() -> bool:
    """Whether the kernels that run here may use clusters (not under DEEPSELECT_RT_ARCH=compute_80)."""
    torch_cuda()
    return backend.device_limits(0).clusters


def _radix_plans(small_cluster_only: bool = False) -> set:
    """(split, tier) of every cluster radix plan the backend has prepared (or only those with the
    small-cluster variant, DS_SMALL_CLUSTER)."""
    return {(plan.split, dict(plan.variant.extra)["DS_VECS"]) for plan in backend.prepared_plans()
            if plan.how == SPLIT_RADIX
            and (not small_cluster_only or dict(plan.variant.extra).get("DS_SMALL_CLUSTER"))}


def _radix_tier(dtype: str, tier: int) -> tuple:
    """(threads, vectors) of the cluster radix select's tier; skips without clusters."""
    if not _has_clusters():
        pytest.skip(NO_CLUSTERS)
    return RADIX_TIERS[dtype][tier]


def _radix_width(dtype: str, tier: int, split: int = 16, ragged: int = 0) -> int:
    """Columns a tier holds at ``split`` CTAs a row; with ``ragged`` > 0, a vector and ``ragged``
    columns fewer: rows of a width off the vector whose stride then leaves the 16-byte boundary,
    so that a row may span one vector more (plan.row_vectors), and the tier still holds them."""
    threads, vectors = _radix_tier(dtype, tier)
    vec = 16 // ITEMSIZE[dtype]
    width = threads * vectors * split * vec - (vec + ragged if ragged else 0)
    assert radix_tier(dtype, row_vectors(dtype, width, row_stride=width), split) == (threads, vectors)
    return width


@pytest.fixture(autouse=True)
def _no_earlier_plans():
    # _radix_plans then holds the plans of the running test alone.
    backend.forget_plans()


@pytest.fixture(params=[SPLIT_RADIX, SPLIT_CLUSTER, SPLIT_WORKSPACE])
def how(request):
    if request.param != SPLIT_WORKSPACE and not _has_clusters():
        pytest.skip(NO_CLUSTERS)
    return request.param


@pytest.mark.parametrize("split", [2, 3, 8, 16])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("k", [1, 100, 512, 2048, 4096])
def test_split_matches_reference(how, split, dtype, k):
    x = distributions.make("normal", 3, 40000 + split, dtype, seed=split * k)
    with backend.forced_split(split, how):
        check(x, k, sorted=bool(k % 2), indices_type="int64")
        check(x, k, return_value=False, nan_policy="sentinel", indices_type="int32")


@pytest.mark.parametrize("width", [1, 7, 15, 16, 17, 100, 511, 512, 513, 2047, 2049, 8191, 8193])
def test_short_rows_and_slice_edges(how, width):
    # Widths around split x vector multiples and k: empty slices, slices shorter than k, fills.
    x = distributions.make("normal", 2, width, "bfloat16", seed=width)
    with backend.forced_split(8, how):
        check(x, 512, sorted=True, idx_oob_fill_value=-1, value_oob_fill_value=0.0)
        check(x, 512, indices_type="int32")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_begin_end_offsets(how, dtype):
    rows, width, k = 9, 70000, 1024
    x = distributions.make("normal", rows, width, dtype, seed=9)
    begin, end, offsets = random_ranges(3, rows, width, k)
    with backend.forced_split(4, how):
        check(x, k, begin=begin, end=end, output_idx_offset=offsets, indices_type="int32", sorted=True)
        check(x, k, begin=begin.astype(np.int64), end=end.astype(np.int64))


@pytest.mark.parametrize("name", distributions.NAMES)
def test_distributions_across_slices(how, name):
    x = distributions.make(name, 4, 65536, "bfloat16", seed=5)
    with backend.forced_split(16, how):
        check(x, 2048, sorted=True)
        check(x, 2048)


@pytest.mark.parametrize("where", [0, 4999, 5000, 39999, "past_end"])
def test_nan_in_any_slice(how, where):
    rows, width, k = 5, 40000, 512
    x = distributions.make("normal", rows, width, "float16", seed=2)
    end = np.full(rows, width - 8, np.int32)
    pos = width - 4 if where == "past_end" else min(where, width - 9)
    x[1, pos] = np.nan
    x[3, pos] = -np.float16(np.nan)
    with backend.forced_split(8, how):
        for policy in ("sentinel", "propagate"):
            check(x, k, end=end, nan_policy=policy, sorted=True)
        if where == "past_end":
            check(x, k, end=end, nan_policy="raise")
        else:
            deepselect_rt.topk(to_device(x), k, end=to_device(end))
            with pytest.raises(NaNInputError) as info:
                deepselect_rt.check_nan()
            assert info.value.rows == [1, 3]


def test_bit_identical_to_one_cta_per_row(how):
    x = to_device(distributions.make("few_distinct", 6, 300000, "bfloat16", seed=4))
    with backend.forced_split(1):
        want = [to_host(t) for t in deepselect_rt.topk(x, 2048, sorted=True)]
    for split in (2, 5, 16):
        with backend.forced_split(split, how):
            got = [to_host(t) for t in deepselect_rt.topk(x, 2048, sorted=True)]
        np.testing.assert_array_equal(bits(got[0]), bits(want[0]))
        np.testing.assert_array_equal(got[1], want[1])


def test_real_fixtures(how, fixtures_dir):
    import json

    import ml_dtypes

    meta = json.loads((fixtures_dir / "indexer_scores.json").read_text())
    bf = np.load(fixtures_dir / "indexer_scores_bf16.npy").view(ml_dtypes.bfloat16)
    end = np.array([r["end"] for r in meta["rows"]], np.int32)
    with backend.forced_split(8, how):
        for k in (512, 2048):
            check(bf, k, end=end, indices_type="int32", return_value=False, nan_policy="sentinel")
        check(np.load(fixtures_dir / "sampler_logits_fp32.npy"), 512, sorted=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("tier", range(4))
def test_radix_rows_filling_each_tier(dtype, tier):
    # The widest row each tier holds at one CTA a row, split 2 and 3 (a CTA's last vector in
    # use), with the rows off the 16-byte boundary (a column of offset, begin) so both end
    # vectors are partial.
    threads, vectors = _radix_tier(dtype, tier)
    vec = 16 // ITEMSIZE[dtype]
    for split in (1, 2, 3):
        width = (threads * vectors * split - 1) * vec
        assert radix_tier(dtype, row_vectors(dtype, width, begin=True), split) == (threads, vectors)
        assert radix_tier(dtype, row_vectors(dtype, width + vec, begin=True), split) != (threads, vectors)
        wide = distributions.make("few_distinct", 3, width + 1, dtype, seed=tier + split)
        x = wide[:, 1:]
        begin = np.array([0, 3, 1], np.int32)
        with backend.forced_split(split, SPLIT_RADIX):
            check(x, 2048, begin=begin, indices_type="int32")
            check(x, 100, sorted=True)
        assert (split, vectors) in _radix_plans()


@pytest.mark.parametrize("dtype, tier", [("bfloat16", 2), ("bfloat16", 3), ("float16", 3), ("float32", 3)])
@pytest.mark.parametrize("name", ["all_equal", "few_distinct", "few_finite", "all_neg_inf", "signed_zeros", "many_zeros"])
def test_heavy_ties_in_the_prefiltered_tiers(dtype, tier, name):
    # Rows where most vectors reach the prefilter's bound T0 because many elements share its
    # key: where T0 is the row's largest key or -inf's, each CTA drops its vectors with nothing
    # above T0 that come after k of its elements at or above T0 (topk_cluster.cu,
    # drop_late_ties). Row 1's one larger value sits in the last column, row 2's just past the
    # middle (early in a later CTA's slice): both must win, whether the drop runs (T0 at -inf)
    # or not (T0 below them).
    width = _radix_width(dtype, tier)
    x = distributions.make(name, 3, width, dtype, seed=tier)
    x[1, -1] = 1000
    x[2, width // 2 + 1] = 1000
    with backend.forced_split(16, SPLIT_RADIX):
        for k in (100, 2048, 4096):
            check(x, k, indices_type="int32")
        check(x, 2048, sorted=True)
    assert (16, _radix_tier(dtype, tier)[1]) in _radix_plans()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_heavy_ties_with_ranges_and_nan(dtype):
    # drop_late_ties with begin and end off the 16-byte boundary (partial end vectors) and with
    # NaN as T0's key: row 0 all equal, row 1 -inf but for ~200 columns, row 2 NaN in every
    # 100th column among normal values (more than k NaNs: under "propagate" they are the
    # largest, their ties broken by column).
    tier = 3
    width = _radix_width(dtype, tier) - 64
    x = distributions.make("normal", 3, width, dtype, seed=11)
    x[0] = 0.5
    x[1] = -np.inf
    x[1, ::5000] = 1.0
    x[2, ::100] = np.nan
    begin = np.array([3, 0, 1], np.int32)
    end = np.array([width - 5, width - 9, width], np.int32)
    with backend.forced_split(16, SPLIT_RADIX):
        for policy in ("sentinel", "propagate"):
            check(x, 2048, begin=begin, end=end, nan_policy=policy)
            check(x, 2048, begin=begin, end=end, nan_policy=policy, sorted=True)
    assert (16, _radix_tier(dtype, tier)[1]) in _radix_plans()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("k", [1, 100, 512, 1024, 2048, 4096])
def test_radix_one_cta_a_row(dtype, k):
    # A cluster of one: no copies to other CTAs, and in the prefiltered tiers the bound from
    # this CTA's maxima alone (none where k passes the CTA's threads). Rows of every tier (the
    # first three of widths off the vector, so most rows start unaligned; float32's tier 0 holds
    # fewer than k = 4096); NaN and ties in some.
    vec = 16 // ITEMSIZE[dtype]
    widths = [_radix_width(dtype, tier, 1, ragged=5) for tier in (0, 1)] + [3000 * vec + 5, _radix_width(dtype, 3, 1)]
    for tier, width in enumerate(widths):
        x = distributions.make("normal", 5, width, dtype, seed=k + width)
        x[1, width // 3] = np.nan
        x[2, :] = 0.5
        x[3, ::7] = np.inf
        with backend.forced_split(1, SPLIT_RADIX):
            check(x, k, indices_type="int32", return_value=False, nan_policy="sentinel")
            check(x, k, sorted=True, nan_policy="propagate")
        assert (1, RADIX_TIERS[dtype][tier][1]) in _radix_plans()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("tier", range(4))
def test_radix_runs_of_equal_values(dtype, tier):
    # Runs of one value (0, 1.5, -2, +-inf) among random ones, at random lengths, in rows just
    # inside each tier at 16 CTAs: a warp's lanes hold vectors of one value, of a few, or a mix,
    # and the k-th key may be one a run shares with thousands of columns across CTAs.
    width = _radix_width(dtype, tier, ragged=5)
    rng = np.random.default_rng(tier)
    x = rng.standard_normal((2, width)).astype(np.float32)
    for row in x:
        starts = np.sort(rng.choice(width, 40, replace=False))
        for a, b in zip(starts[::2], starts[1::2]):
            row[a:b] = rng.choice([0.0, 1.5, -2.0, np.inf, -np.inf])
    x = x.astype(numpy_dtype(dtype))
    with backend.forced_split(16, SPLIT_RADIX):
        for k in (7, 2048):
            check(x, k, indices_type="int32")
    assert (16, _radix_tier(dtype, tier)[1]) in _radix_plans()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("tier", range(4))
def test_radix_key_window_settles_or_falls_back(dtype, tier):
    # bfloat16 and float32 rows find the top 16 bits of K in one pass over a window of 253 of
    # them, up from the prefilter's bound (the prefiltered tiers) or down from the row's largest
    # key, when K lies in it (normal rows); otherwise they run the passes from the top. Rows
    # ascending over 60 octaves put K far from both (k = 2048: the bound, about CTA 14's smallest
    # thread maximum, ~7 octaves below K). float16 has no window. Each must match NumPy.
    width = _radix_width(dtype, tier, ragged=3)
    normal = distributions.make("normal", 2, width, dtype, seed=tier)
    octaves = np.exp2(np.linspace(-30, 30, width, dtype=np.float32))[None, :].repeat(2, axis=0)
    octaves[1] = -octaves[1][::-1]
    for x in (normal, octaves.astype(numpy_dtype(dtype))):
        with backend.forced_split(16, SPLIT_RADIX):
            for k in (100, 2048):
                check(x, k, indices_type="int32")
            check(x, 512, sorted=True)
    assert (16, _radix_tier(dtype, tier)[1]) in _radix_plans()


def _window_edge_rows(dtype: str, width: int, k: int, seed: int) -> np.ndarray:
    """Two rows whose k-th largest has top 16 bits (bfloat16's bits) 1.0's, shared by 60 columns,
    and whose largest element's lie 252 (row 0: K in the lowest of the window's 253 keys) and
    253 (row 1: just below the window) above them; the k - 2 between them and the rest below at
    random columns. float32's low 16 bits are random."""
    rng = np.random.default_rng(seed)
    one = 0x3F80  # 1.0 in bfloat16
    rows = np.empty((2, width), np.uint32)
    for r, reach in enumerate((252, 253)):
        high = rng.integers(0x3000, one, width, dtype=np.uint32)  # below 1.0
        cols = rng.permutation(width)
        high[cols[0]] = one + reach
        high[cols[1 : k - 1]] = rng.integers(one + 1, one + reach, k - 2, dtype=np.uint32)
        high[cols[k - 1 : k + 59]] = one
        rows[r] = high
    if dtype == "bfloat16":
        return rows.astype(np.uint16).view(numpy_dtype("bfloat16"))
    return (rows << 16 | rng.integers(0, 1 << 16, rows.shape, dtype=np.uint32)).view(np.float32)


def _masked_rows(dtype: str, width: int, k: int, seed: int) -> np.ndarray:
    """Rows of -inf but for k - 1, k and k + 1 normal values over 40 octaves at random columns
    (rows 0-2), and k - 1 values near 1 and one 2^30 (row 3): K is -inf, then a finite key far
    below the row's largest."""
    rng = np.random.default_rng(seed)
    x = np.full((4, width), -np.inf, np.float32)
    for r, finite in enumerate((k - 1, k, k + 1, k)):
        cols = rng.choice(width, finite, replace=False)
        x[r, cols] = rng.standard_normal(finite) * np.exp2(rng.uniform(-20, 20, finite))
    x[3, cols] = 1 + rng.random(k) / 8
    x[3, cols[0]] = 2.0**30
    return x.astype(numpy_dtype(dtype))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("tier", [0, 1])
def test_radix_key_window_from_the_top_at_its_edge(dtype, tier):
    # The tiers without the prefilter count the window down from the row's largest key: K at
    # its lowest key settles there, one key lower falls back to the passes from the top. -inf
    # has a bin of its own below the window: rows of -inf with fewer than k others settle
    # there; with k or more, K is finite and may lie far below the window.
    width = _radix_width(dtype, tier, ragged=5)
    for k in (100, 2048):
        with backend.forced_split(16, SPLIT_RADIX):
            for x in (_window_edge_rows(dtype, width, k, seed=k + tier), _masked_rows(dtype, width, k, seed=k)):
                check(x, k, indices_type="int32")
                check(x, k, sorted=True)
    assert (16, _radix_tier(dtype, tier)[1]) in _radix_plans()


@pytest.mark.parametrize("dtype,tier", [("bfloat16", 2), ("bfloat16", 3), ("float32", 3)])
def test_radix_prefilter_bound_from_the_top_ctas(dtype, tier):
    # The prefilter's bound may come from the CTAs whose least thread maximum is high (m_c)
    # rather than from the least t_c: rows whose largest values fill the last CTAs' slices (an
    # ascending ramp; a normal row whose last eighth is raised by 50; the same raised eighth
    # first, behind -inf), and normal rows where it must not. Each must match NumPy.
    width = _radix_width(dtype, tier, ragged=5)
    rows = distributions.make("normal", 4, width, "float32", seed=tier)
    rows[0] = np.linspace(-1, 1, width, dtype=np.float32)
    rows[1, -width // 8:] += 50
    rows[2, : width // 2] = -np.inf
    rows[2, width // 2 : width // 2 + width // 8] += 50
    x = rows.astype(numpy_dtype(dtype))
    with backend.forced_split(16, SPLIT_RADIX):
        for k in (100, 2048, 4096):
            check(x, k, indices_type="int32")
        check(x, 1000, sorted=True)
    assert (16, _radix_tier(dtype, tier)[1]) in _radix_plans()


@pytest.mark.parametrize("dtype,tier", [("bfloat16", 2), ("bfloat16", 3), ("float16", 3), ("float32", 3)])
@pytest.mark.parametrize("split", [2, 4])
def test_radix_prefilter_in_small_clusters(dtype, tier, split):
    # Clusters of two at k = 2048 take the small-cluster variant (variants.small_cluster; k =
    # 4096 runs no prefilter there): the prefilter also bounds T0 by each CTA's key at or below k
    # of its maxima (t_k), and threads offer up to four groups' maxima; the other k and clusters
    # of four take the other variant.
    # Rows whose largest values sit in one CTA's slice (an ascending ramp, the last quarter
    # raised, the first eighth raised), a causal row (-inf past a third), a row ending early
    # (its `end`: the later threads hold nothing) and a normal row.
    threads, vectors = _radix_tier(dtype, tier)
    width = _radix_width(dtype, tier, split, ragged=3)
    rows = distributions.make("normal", 6, width, "float32", seed=split * 10 + tier)
    rows[0] = np.linspace(-1, 1, width, dtype=np.float32)
    rows[1, -width // 4:] += 50
    rows[2, : width // 8] += 50
    rows[3, width // 3:] = -np.inf
    end = np.array([width, width, width, width, width * 3 // 8, width], np.int32)
    x = rows.astype(numpy_dtype(dtype))
    with backend.forced_split(split, SPLIT_RADIX):
        for k in (100, 512, 1024, 2048, 4096):
            check(x, k, end=end, indices_type="int32")
        check(x, 2048, end=end, sorted=True)
    assert (split, vectors) in _radix_plans()
    assert ((split, vectors) in _radix_plans(small_cluster_only=True)) == (split == 2 and 2 * threads >= 2048)


@pytest.mark.parametrize("dtype,tier", [("bfloat16", 2), ("bfloat16", 3), ("float16", 3), ("float32", 3)])
@pytest.mark.parametrize("split", [2, 4, 16])
def test_radix_bound_of_a_cta_own(dtype, tier, split):
    # Where the cluster's bound T0 keeps more vectors of a CTA than it has threads, and its keys
    # are not all equal, that CTA clears its vectors below a bound of its own (raise_bound: a key
    # at or below k of its quarters' maxima). Rows whose largest values crowd one CTA's slice
    # (the last or the first), with ties at the k-th value there, NaN among them, -0.0 at the
    # k-th value among a few ones and +0.0s (the rest of the row below -1: there the bound must
    # not pass -0.0), and a row ending early, so that every CTA's later threads hold nothing;
    # k = 512 and 1024, where clusters of two take the variant without t_k.
    vectors = _radix_tier(dtype, tier)[1]
    width = _radix_width(dtype, tier, split, ragged=7)
    crowd = width // split
    rows = distributions.make("normal", 6, width, "float32", seed=split * 100 + tier)
    rows[0, -crowd:] += 50
    rows[1, :crowd] += 50
    rows[2, -crowd:] = 50 + np.round(rows[2, -crowd:] * 4) / 4  # runs of ties at the k-th value
    rows[3, -crowd:] += 50
    rows[3, -crowd // 3] = np.nan
    rows[4] = -np.abs(rows[4]) - 1
    rows[4, -crowd:] = -0.0
    rows[4, -crowd:: 97] = 1.0  # ones and +0.0s: fewer than k = 1024 (than 512 too in slices of 32K)
    rows[4, -crowd + 50:: 193] = 0.0
    rows[5, -crowd:] = np.abs(rows[5, -crowd:]) + 1
    x = rows.astype(numpy_dtype(dtype))
    end = np.full(6, width, np.int32)
    end[5] = width - crowd // 2
    with backend.forced_split(split, SPLIT_RADIX):
        for k in (512, 1024):
            for policy in ("sentinel", "propagate"):
                check(x, k, end=end, indices_type="int32", nan_policy=policy)
                check(x, k, end=end, sorted=True, nan_policy=policy)
    assert (split, vectors) in _radix_plans()


def test_real_fixtures_in_clusters_of_two(fixtures_dir):
    # The indexer rows as 32-66 rows of them run (radix_split: clusters of two), with their
    # causal ends: most of their top values lie in the later half, one CTA's slice.
    import json

    import ml_dtypes

    _radix_tier("bfloat16", 3)
    meta = json.loads((fixtures_dir / "indexer_scores.json").read_text())
    bf = np.load(fixtures_dir / "indexer_scores_bf16.npy").view(ml_dtypes.bfloat16)
    end = np.array([r["end"] for r in meta["rows"]], np.int32)
    with backend.forced_split(2, SPLIT_RADIX):
        for k in (512, 1024, 2048):
            check(bf, k, end=end, indices_type="int32", return_value=False, nan_policy="sentinel")
        check(bf, 2048, end=end, sorted=True)
    assert (2, RADIX_TIERS["bfloat16"][3][1]) in _radix_plans(small_cluster_only=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("tier", range(4))
def test_radix_nan_flag_in_every_tier(dtype, tier):
    # Every CTA learns whether the row holds NaN from the CTAs' largest keys, pushed with the
    # prefilter's bounds or on their own (rows of at most k elements, which run no pass; the
    # tiers without the prefilter). NaN only in the last CTA's slice (row 0), -NaN at column 0
    # (row 1), none (row 2); then the rows cut to k - 5 elements by `end` (row 0's NaN past
    # it). The sentinel needs the row's NaN in every CTA.
    width = _radix_width(dtype, tier, ragged=3)
    x = distributions.make("normal", 3, width, dtype, seed=tier)
    x[0, width - 2] = np.nan
    x[1, 0] = -x.dtype.type(np.nan)
    with backend.forced_split(16, SPLIT_RADIX):
        for k in (100, 2048):
            for end in (None, np.full(3, k - 5, np.int32)):
                for sort in (False, True):
                    check(x, k, end=end, nan_policy="sentinel", sorted=sort, indices_type="int32")
                check(x, k, end=end, nan_policy="propagate", sorted=True)
        with pytest.raises(NaNInputError) as info:
            deepselect_rt.topk(to_device(x), 100, nan_policy="raise_sync")
        assert info.value.rows == [0, 1]
    assert (16, _radix_tier(dtype, tier)[1]) in _radix_plans()


def test_radix_plans_of_several_shared_memory_sizes():
    # One radix variant serves every k, and with sorted=True its gather buffer grows with k past
    # the 48 KiB a kernel gets without opting in (k = 4096: 70 KiB). A smaller plan prepared
    # after a larger one once lowered the kernel's limit under it: the next launch of the
    # larger one failed with CUDA_ERROR_INVALID_VALUE.
    if not _has_clusters():
        pytest.skip(NO_CLUSTERS)
    backend.forget_plans()  # prepare them again, in this order
    x = distributions.make("normal", 4, 70001, "bfloat16", seed=5)
    for k in (4096, 2048, 4096, 512, 4096):
        check(x, k, sorted=True)
    assert len({tier for split, tier in _radix_plans() if split == 16}) == 1  # one variant, three plans


def test_radix_handles_ties_across_ctas():
    # Every element equal: the k winners are the k lowest columns, taken across CTAs.
    if not _has_clusters():
        pytest.skip(NO_CLUSTERS)
    x = np.zeros((2, 40000), np.float32)  # 2500 columns per CTA
    x[1, 37777] = 1.0
    with backend.forced_split(16, SPLIT_RADIX):
        for k in (1, 2500, 2501, 4096):
            check(x, k)
            check(x, k, sorted=True)
    assert any(split == 16 for split, _ in _radix_plans())


def test_automatic_rule_around_its_switch_points():
    # Rows around the switch points of plan.choose_split. Where the GPU has clusters (an H200),
    # rows up to sms / 2 take clusters of the radix select, rows of 32K up to sms at k = 512 one
    # CTA of it, the rest one streaming CTA a row: the streaming kernel's split (split_factor)
    # runs only without clusters, through the workspace.
    torch_cuda()
    sms = module.device_info(0).sm_count
    for rows in (1, sms // 16, sms // 16 + 1, sms // 2, sms // 2 + 1, sms - 1, sms, sms + 1):
        for width in (32767, 32768, 131072):
            for k in (512, 2048):
                x = distributions.make("normal", max(rows, 1), width, "bfloat16", seed=rows + width)
                check(x, k, indices_type="int32")
    assert split_factor(1, 131072, 512, sms) > 1  # the streaming kernel's switch, where it serves
    assert split_factor(sms, 131072, 512, sms) == 1
    if _has_clusters():
        assert radix_split(1, row_vectors("bfloat16", 131072), 512, "bfloat16", sms) > 1
        assert radix_split(sms // 2 + 1, row_vectors("bfloat16", 131072), 512, "bfloat16", sms) == 0
        assert radix_split(sms, row_vectors("bfloat16", 32768), 512, "bfloat16", sms) == 1  # one CTA a row
        assert radix_split(sms + 1, row_vectors("bfloat16", 32768), 512, "bfloat16", sms) == 0
