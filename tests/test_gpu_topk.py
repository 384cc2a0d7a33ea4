"""The CUDA kernels against the NumPy reference, bit for bit, on a sample of shapes, k, dtypes,
flags and row distributions.

Run on a GPU machine: ``pytest -m gpu``. Skips without CUDA.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt.bench import distributions
from deepselect_rt.cuda import backend, variants
from gpu_helpers import (DTYPES, NaNInputError, assert_same, batch_rows, batch_variant, bits, check, random_ranges,
                         sampled_columns, stream_variants, to_device, to_host, torch_cuda)

pytestmark = pytest.mark.gpu

FLAGS = [dict(sorted=False), dict(sorted=True), dict(sorted_index=True)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("flags", FLAGS, ids=["unsorted", "sorted", "sorted_index"])
@pytest.mark.parametrize("return_value", [True, False])
@pytest.mark.parametrize("k", [100, 513, 5000])
def test_flag_grid(dtype, index, flags, return_value, k):
    x = distributions.make("normal", 7, 20000, dtype, seed=k)
    check(x, k, indices_type=index, return_value=return_value, **flags)


def _shape_grid():
    rows = [1, 7, 131, 132, 133, 512, 4096]
    ks = [1, 2, 100, 512, 513, 1024, 2048, 4096, 5000]
    rng = np.random.default_rng(7)
    out = []
    for r, k in itertools.product(rows, ks):
        widths = [1, 2, max(k - 1, 1), k, k + 1, 1000, 16385, 129280, 131072, 1048576, 3000017]
        w = widths[rng.integers(len(widths))]
        if r * w > 40_000_000:  # keep the oracle's time bounded
            w = max(1, 40_000_000 // r)
        out.append((r, w, k))
    return out


@pytest.mark.parametrize("rows,width,k", _shape_grid())
def test_shape_grid(rows, width, k):
    dtype = ["bfloat16", "float32", "float16"][(rows + k) % 3]
    x = distributions.make("normal", rows, width, dtype, seed=rows * 31 + k)
    check(x, k, sorted=bool(k % 2), indices_type="int32")


@pytest.mark.parametrize("width", [1, 2, 511, 512, 513, 1000, 16385, 131072, 1048576, 3000017])
@pytest.mark.parametrize("k", [512, 2048])
def test_widths_bf16(width, k):
    x = distributions.make("normal", 3, width, "bfloat16", seed=width)
    check(x, k, indices_type="int32", return_value=False, nan_policy="sentinel")


def _bitmap_columns(threads: int, loads: int, stages: int) -> int:
    """Columns the finish's bitmap holds (kernels_cu/row/column_output.cuh): the queues' 40 bytes
    a thread and the ring hold a count a thread, the bitmap's words and a count a chunk of words,
    a chunk being a power of two no longer than a thread's run (a power of two of words)."""
    room = (40 + 16 * loads * stages) * threads // 4

    def fits(words: int) -> bool:
        per = -(-words // threads)
        span = (per - 1).bit_length() if per > 1 else 0
        return any(threads + words + -(-words // (1 << c)) <= room for c in range(span + 1))

    return 32 * max(w for w in range(1, room) if fits(w))


@pytest.mark.parametrize("kmax", sorted(variants.STREAM_TUNING))
@pytest.mark.parametrize("flags", [dict(sorted=False), dict(sorted_index=True)], ids=["unsorted", "sorted_index"])
def test_column_bitmap_edges(kmax, flags):
    """Rows whose range just fits the column bitmap of the k bucket's tuning, just does not, and
    fits from a begin > 0: the finish writes by column through the bitmap or falls back to the
    sort. In a batch that runs that tuning (the few-rows tuning's bitmap holds more columns)."""
    backend.forget_plans()
    threads, loads, _, stages = variants.STREAM_TUNING[kmax]
    cap = _bitmap_columns(threads, loads, stages)
    k, width = kmax - 3, cap + 9
    rows = batch_rows(width, "float32", k)
    x = distributions.make("normal", rows, width, "float32", seed=kmax)
    begin = np.full(rows, 9, np.int32)
    end = np.full(rows, width, np.int32)
    begin[: rows // 3], end[: rows // 3] = 0, cap
    end[rows // 3 : 2 * rows // 3] = cap + 1
    begin[rows // 3 : 2 * rows // 3] = 0
    check(x, k, begin=begin, end=end, indices_type="int32", **flags)
    assert stream_variants() == {batch_variant("float32", k)}


@pytest.mark.parametrize("name", distributions.NAMES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("k", [1, 512, 2048, 4096])
def test_distributions(name, dtype, k):
    x = distributions.make(name, 4, 70001, dtype, seed=3)
    check(x, k, sorted=True)
    check(x, k)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("k", [600, 1024, 4096])
def test_sampled_threshold_too_high(dtype, k):
    """The streaming kernel estimates its first threshold from one 16-byte vector a thread
    spread evenly over the row. Here those vectors, for 256 and for 512 threads, hold the row's
    only large values, fewer than k of them reach the estimate, and the row is streamed again:
    from a second estimate (retry_rank, kernels_cu/stream/stream_range.cuh) where its rank stays
    below k and half the sample (bf16 and float16 at k = 600 and 1024, float32 at 600), else
    from 0."""
    rows, width = 256, 131072
    x = distributions.make("normal", rows, width, dtype, seed=11)
    cols = sampled_columns(width, 16 // x.dtype.itemsize, 512)  # both CTA sizes: 512 holds 256's
    rng = np.random.default_rng(k)
    x[:, cols] = (100 + 1000 * rng.random((rows, cols.size))).astype(x.dtype)
    check(x, k, indices_type="int32")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("k", [512, 2048])
def test_sampled_estimate_retried(dtype, k):
    """When a row holds fewer than k elements at or above the sampled estimate, the streaming
    kernel streams it again from a second estimate whose rank follows the row's own count
    (retry_rank, kernels_cu/stream/stream_range.cuh), and once more from 0 if that one is too high
    as well. In a batch that runs one CTA a row of the k bucket's tuning (256 threads; on an
    H200 265 rows, where 264 would take the 512-thread few-rows tuning), its sampled vectors
    hold values of 10-20 and the rest of the row normal ones, but for h huge values (100-200)
    at columns it does not sample. The first estimate (rank r, with at most r / 4 more sampled
    elements at or above it) then leaves fewer than k; with h = k - r - r // 4 - 2 the second
    estimate holds, with h = k / 2 it does not."""
    backend.forget_plans()
    width = 131072
    rows = batch_rows(width, dtype, k)
    item = np.dtype(DTYPES[dtype]).itemsize
    threads = batch_variant(dtype, k).threads
    x = distributions.make("normal", rows, width, "float32", seed=12)
    rng = np.random.default_rng(k)
    sampled = sampled_columns(width, 16 // item, threads)
    x[:, sampled] = 10 + 10 * rng.random((rows, sampled.size))
    others = np.setdiff1d(np.arange(width), sampled)
    expect = k * threads * (16 // item) / width
    r = int(expect + 4 * np.sqrt(expect)) + 4
    for row in range(rows):
        h = k - r - r // 4 - 2 if row % 2 else k // 2
        x[row, rng.choice(others, h, replace=False)] = 100 + 100 * rng.random(h)
    x = x.astype(DTYPES[dtype])
    for flags in FLAGS:
        check(x, k, indices_type="int32", **flags)
    assert stream_variants() == {batch_variant(dtype, k)}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("k", [512, 2048])
def test_sampled_threshold_of_ties(dtype, k):
    """Where the sample's estimate falls on a key shared by many sampled elements, the estimate
    bounds the column too: the r-th such tie in column order (kernels_cu/stream/stream_range.cuh).
    Four kinds of rows, in a batch that runs one CTA a row of the k bucket's tuning, at whose
    sampled vectors the values lie: few distinct values and all equal (ties spread evenly); one
    value only at the sampled vectors, a lower one elsewhere (the estimate's column is too low,
    and the row is streamed again); and rows whose sampled vectors hold -1, their first half -2
    and the rest 1, so the winning key is in no sampled vector while the estimate is a tie of
    -1."""
    backend.forget_plans()
    width = 131072
    group = -(-batch_rows(width, dtype, k) // 4)
    threads = batch_variant(dtype, k).threads
    x = np.concatenate([distributions.make(n, group, width, dtype, seed=6) for n in ("few_distinct", "all_equal")] +
                       [np.full((2 * group, width), 1.0, DTYPES[dtype])])
    cols = sampled_columns(width, 16 // x.dtype.itemsize, threads)
    tied, unseen = slice(2 * group, 3 * group), slice(3 * group, None)
    x[tied] = -1.0
    x[tied, cols] = 1.0
    x[unseen, cols] = -1.0
    x[unseen, : width // 2] = -2.0
    for flags in FLAGS:
        check(x, k, indices_type="int32", **flags)
    assert stream_variants() == {batch_variant(dtype, k)}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("k", [512, 2048])
def test_stream_appends_past_the_buffer_room(dtype, k):
    """The streaming kernel's one-CTA-a-row variants up to k = 2048, of every dtype, keep two
    candidate-buffer entries a thread past the select trigger (variants.BOUNDED_ROOM_KMAX,
    kernels_cu/row/candidates.cuh's DS_BOUNDED_ROOM), not a whole block: a warp whose survivors
    do not fit holds them and appends them after a select. Here the k bucket's tuning (256
    threads: a room of 512 entries, a quarter of a float32 block of 2 vectors a thread, an
    eighth of a bfloat16 one), in a batch that runs it one CTA a row. In rows of one value whose
    sampled vectors hold a lower one, every other element passes the sample's estimate; in
    few-distinct, ascending and late-large rows many blocks pass more than the room."""
    backend.forget_plans()
    names = ["all_equal", "few_distinct", "ascending", "late_large", "normal"]
    width = 65536 + 37
    rows = len(names) * -(-batch_rows(width, dtype, k) // len(names))
    threads = batch_variant(dtype, k).threads
    x = np.concatenate([distributions.make(n, rows // len(names), width, dtype, seed=2) for n in names])
    x[: rows // len(names), sampled_columns(width, 16 // x.dtype.itemsize, threads, pad=1)] = -1.0
    for flags in FLAGS:
        check(x, k, indices_type="int32", **flags)
    assert stream_variants() == {batch_variant(dtype, k)}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("k", [512, 2048])
def test_stream_warps_append_unevenly(dtype, k):
    """The streaming kernel's warps run their share of each block without waiting for one
    another and meet only for a select or at the end (kernels_cu/stream/stream_range.cuh). Here
    the large values lie in one warp's share of every block (ascending, so T keeps rising and
    that warp appends, fills the buffer and holds survivors while the others stream ahead):
    warp 0's share in half the rows, the last warp's in the other half, the warps being those
    of the k bucket's tuning (256 threads) in a batch that runs it one CTA a row; an odd width,
    so most rows start unaligned."""
    backend.forget_plans()
    width = 65536 + 37
    rows = batch_rows(width, dtype, k)
    threads = batch_variant(dtype, k).threads
    warp = np.arange(width) // (16 // np.dtype(DTYPES[dtype]).itemsize) % threads // 32
    x = distributions.make("normal", rows, width, "float32", seed=4)
    ramp = 8.0 + 64.0 * np.arange(width) / width
    for half, w in ((slice(0, rows // 2), 0), (slice(rows // 2, rows), threads // 32 - 1)):
        x[half, warp == w] = ramp[warp == w]
    x = x.astype(DTYPES[dtype])
    for flags in FLAGS:
        check(x, k, indices_type="int32", **flags)
    assert stream_variants() == {batch_variant(dtype, k)}


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_begin_end_and_offsets(dtype):
    rows, width, k = 133, 50000, 512
    x = distributions.make("normal", rows, width, dtype, seed=5)
    begin, end, offsets = random_ranges(11, rows, width, k)
    for index in ("int32", "int64"):
        check(x, k, begin=begin, end=end, output_idx_offset=offsets, indices_type=index)
        check(x, k, begin=begin.astype(np.int64), end=end.astype(np.int64), sorted=True,
              output_idx_offset=offsets.astype(np.int64), indices_type=index, idx_oob_fill_value=-1,
              value_oob_fill_value=0.0)


def test_int64_offset_no_overflow():
    x = distributions.make("normal", 2, 3000, "float32")
    offsets = np.array([2**31 - 1, 2**40], np.int64)
    check(x, 10, output_idx_offset=offsets, indices_type="int64")


def test_device_begin_end_out_of_range_clamped():
    torch_cuda()
    x = distributions.make("normal", 3, 1000, "float32")
    begin = np.array([-5, 10, 990], np.int64)
    end = np.array([2000, 5, 1000], np.int64)
    vals, idx = deepselect_rt.topk(to_device(x), 16, begin=to_device(begin), end=to_device(end))
    want = deepselect_rt.topk(x, 16, begin=np.array([0, 5, 990]), end=np.array([1000, 5, 1000]))
    np.testing.assert_array_equal(to_host(idx), want[1])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("where", ["first", "last", "random", "past_end"])
def test_nan_policies(dtype, where):
    rows, width, k = 6, 9000, 512
    x = distributions.make("normal", rows, width, dtype, seed=1)
    end = np.full(rows, width - 10, np.int32)
    pos = {"first": 0, "last": width - 11, "random": 4321, "past_end": width - 5}[where]
    x[1, pos] = np.nan
    x[4, pos] = -np.float32(np.nan)
    for policy in ("sentinel", "propagate"):
        check(x, k, end=end, nan_policy=policy)
        check(x, k, end=end, nan_policy=policy, sorted=True, indices_type="int32")
    if where == "past_end":
        check(x, k, end=end, nan_policy="raise")
    else:
        with pytest.raises(NaNInputError) as info:
            deepselect_rt.topk(to_device(x), k, end=to_device(end), nan_policy="raise_sync")
        assert info.value.rows == [1, 4]
        deepselect_rt.topk(to_device(x), k, end=to_device(end))  # the default: reported later
        with pytest.raises(NaNInputError) as info:
            deepselect_rt.check_nan()
        assert info.value.rows == [1, 4] and "k=" in info.value.call


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_heavy_ties_column_bound(dtype):
    """The streaming filter skips vectors whose maximum equals T's value at columns past T's
    (kernels_cu/common/keys.cuh, Floor). Rows where that must not drop a winner: -0.0 ties with
    +0.0 (equal floats, different keys) scattered late, NaN late among ties, ties of -inf and of
    one finite value with a larger value at the last column."""
    width, k = 100_003, 2048
    rng = np.random.default_rng(5)
    x = np.full((4, width), -0.0, np.float32)
    x[0, rng.random(width) < 0.01] = 0.0  # about 1000 +0.0 win, then the lowest -0.0 columns
    x[1] = 1.0
    x[1, width - 1] = np.nan
    x[2] = -np.inf
    x[2, rng.random(width) < 0.005] = 1.0
    x[3] = 0.5
    x[3, width - 2] = 0.75
    # More rows than the H200's SMs: one streaming CTA a row (few rows take the cluster radix
    # select, which has no such filter).
    x = np.resize(x, (133, width)).astype(DTYPES[dtype])
    for flags in FLAGS:
        check(x, k, nan_policy="propagate", **flags)


def test_nan_payloads_propagate():
    x = distributions.make("normal", 2, 5000, "float32")
    payloads = np.array([0x7FC00001, 0xFFC00123, 0x7F800001], np.uint32).view(np.float32)
    x[0, [10, 20, 30]] = payloads
    check(x, 8, nan_policy="propagate")
    check(x, 8, nan_policy="propagate", sorted=True)


def test_deterministic_and_batch_independent():
    x = distributions.make("few_distinct", 64, 100000, "bfloat16", seed=2)
    dev = to_device(x)
    a = [to_host(t) for t in deepselect_rt.topk(dev, 2048)]
    b = [to_host(t) for t in deepselect_rt.topk(dev, 2048)]
    np.testing.assert_array_equal(bits(a[0]), bits(b[0]))
    np.testing.assert_array_equal(a[1], b[1])
    for r in (0, 17, 63):
        single = [to_host(t) for t in deepselect_rt.topk(dev[r:r + 1], 2048)]
        np.testing.assert_array_equal(single[1][0], a[1][r])


@pytest.mark.parametrize("return_value", [True, False])
def test_caller_buffers_canaries(return_value):
    torch = torch_cuda()
    rows, k = 9, 300
    x = distributions.make("normal", rows, 40000, "float16", seed=4)
    idx_buf = torch.full((rows, k + 5), -7, dtype=torch.int64, device="cuda")
    val_buf = torch.full((rows, k + 5), 3.0, dtype=torch.float16, device="cuda")
    vals, idx = deepselect_rt.topk(to_device(x), k, sorted=True, output_idx=idx_buf[:, :k],
                                   output_val=val_buf[:, :k] if return_value else None,
                                   return_value=return_value)
    want = deepselect_rt.topk(x, k, sorted=True, return_value=return_value)
    np.testing.assert_array_equal(to_host(idx_buf[:, :k]), want[1])
    assert (to_host(idx_buf[:, k:]) == -7).all()
    if return_value:
        np.testing.assert_array_equal(to_host(val_buf[:, :k]), want[0])
    assert (to_host(val_buf[:, k:]) == 3.0).all()


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_unaligned_rows(dtype):
    torch_cuda()
    x = distributions.make("normal", 5, 30001, dtype, seed=8)
    dev = to_device(x)
    for shift in (1, 3, 7):
        view = dev[:, shift:]
        got = deepselect_rt.topk(view, 700, sorted=True)
        want = deepselect_rt.topk(np.ascontiguousarray(x[:, shift:]), 700, sorted=True)
        assert_same([to_host(t) for t in got], want, f"shift {shift}")


def test_more_than_2_31_elements():
    torch = torch_cuda()
    rows, width, k = 2050, 1 << 20, 512
    dev = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    vals, idx = deepselect_rt.topk(dev, k, sorted=True)
    for r in (0, rows - 2, rows - 1):
        host = to_host(dev[r:r + 1])
        want = deepselect_rt.topk(host, k, sorted=True)
        np.testing.assert_array_equal(to_host(idx[r:r + 1]), want[1])


def test_real_fixtures(fixtures_dir):
    import json

    import ml_dtypes

    meta = json.loads((fixtures_dir / "indexer_scores.json").read_text())
    bf = np.load(fixtures_dir / "indexer_scores_bf16.npy").view(ml_dtypes.bfloat16)
    fp = np.load(fixtures_dir / "indexer_scores_fp32.npy")
    end = np.array([r["end"] for r in meta["rows"]], np.int32)
    for x in (bf, fp):
        for k in (512, 1024, 2048):
            check(x, k, end=end, indices_type="int32", return_value=False, nan_policy="sentinel")
            check(x, k, end=end, sorted=True)
    logits = np.load(fixtures_dir / "sampler_logits_fp32.npy")
    for k in (1, 50, 512, 4096):
        check(logits, k, sorted=True)
        check(logits, k)
