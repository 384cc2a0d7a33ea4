"""nan_policy="raise" without blocking, on the CPU backend: the record's semantics (the same code
the GPU backends read) against the reference's NaN rows."""

from __future__ import annotations

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt import nan_record, reference
from deepselect_rt.errors import NaNInputError


@pytest.fixture(autouse=True)
def drained():
    """Every test starts and ends with nothing pending."""
    try:
        deepselect_rt.check_nan()
    except NaNInputError:
        pass
    yield
    try:
        deepselect_rt.check_nan()
    except NaNInputError:
        pass


def _with_nan(rows=6, width=50, nan_rows=(1, 4), seed=0):
    x = np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float32)
    for r in nan_rows:
        x[r, (7 * r) % width] = np.nan
    return x


def test_default_call_returns_sentinel_rows_and_the_next_call_raises():
    x = _with_nan()
    values, indices = deepselect_rt.topk(x, 5)
    want_v, want_i = reference.topk(x, 5, nan_policy="sentinel")
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(values.view(np.uint32), want_v.view(np.uint32))
    assert (indices[[1, 4]] == 0x3F3F3F3F).all()
    clean = np.ones((2, 8), np.float32)
    with pytest.raises(NaNInputError) as info:
        deepselect_rt.topk(clean, 3)
    assert info.value.rows == [1, 4] and "float32 6x50, k=5" in info.value.call
    deepselect_rt.topk(clean, 3)  # reported once
    deepselect_rt.check_nan()


def test_check_nan_reports_and_clears():
    deepselect_rt.topk(_with_nan(nan_rows=(0,)), 3)
    with pytest.raises(NaNInputError) as info:
        deepselect_rt.check_nan()
    assert info.value.rows == [0]
    deepselect_rt.check_nan()


def test_nan_outside_the_range_is_not_reported():
    x = _with_nan(nan_rows=(2,))
    begin = np.zeros(6, np.int32)
    end = np.full(6, 10, np.int32)  # row 2's NaN is at column 14
    deepselect_rt.topk(x, 3, begin=begin, end=end)
    deepselect_rt.check_nan()


def test_the_next_call_raises_before_launching():
    """A CPU call is done when it returns, so the very next call reports it, and is not run."""
    deepselect_rt.topk(_with_nan(nan_rows=(3,)), 2)
    out = np.full((1, 2), -1, np.int64)
    with pytest.raises(NaNInputError) as info:
        deepselect_rt.topk(np.ones((1, 8), np.float32), 2, output_idx=out)
    assert info.value.rows == [3] and (out == -1).all()


def test_several_calls_report_the_earliest_and_count_the_others():
    entries = np.zeros((nan_record.CAPACITY, nan_record.WORDS), np.uint32)
    record = nan_record.NanRecord(entries)
    first, second = record.new_call("first"), record.new_call("second")
    record.append(second, [0, 5])
    record.append(first, [3])
    with pytest.raises(NaNInputError) as info:
        record.raise_pending()
    assert info.value.rows == [3] and info.value.call == "first" and info.value.other_calls == 1


@pytest.mark.parametrize("policy", ["sentinel", "propagate"])
def test_other_policies_record_nothing(policy):
    deepselect_rt.topk(_with_nan(), 3, nan_policy=policy)
    deepselect_rt.check_nan()


def test_raise_sync_raises_at_once_and_records_nothing():
    with pytest.raises(NaNInputError) as info:
        deepselect_rt.topk(_with_nan(), 3, nan_policy="raise_sync")
    assert info.value.rows == [1, 4] and info.value.call is None
    deepselect_rt.check_nan()


def test_abort_when_nan_found_false_is_sentinel():
    deepselect_rt.topk(_with_nan(), 3, abort_when_nan_found=False)
    deepselect_rt.check_nan()


def test_ring_wrapping_counts_lost_rows():
    """More NaN rows than the ring holds between two checks: the newest are kept, the rest
    counted."""
    rows = nan_record.CAPACITY + 10
    x = np.zeros((rows, 4), np.float32)
    x[:, 1] = np.nan
    deepselect_rt.topk(x, 2)
    with pytest.raises(NaNInputError) as info:
        deepselect_rt.check_nan()
    assert info.value.lost == 10 and info.value.rows == list(range(10, rows))


def test_record_reads_only_published_entries():
    """An entry whose seq is not yet written (a kernel still running) is not read; once it is,
    it is."""
    entries = np.zeros((nan_record.CAPACITY, nan_record.WORDS), np.uint32)
    record = nan_record.NanRecord(entries)
    call = record.new_call("test call")
    entries[0, 1:] = (call, 5, 0)  # written, seq not yet published
    assert not record.pending() and record.take() == ({}, 0)
    entries[0, 0] = 1
    assert record.pending()
    with pytest.raises(NaNInputError) as info:
        record.raise_pending()
    assert info.value.rows == [5] and info.value.call == "test call"
    assert not record.pending()


def test_rows_past_32_bits_survive():
    entries = np.zeros((nan_record.CAPACITY, nan_record.WORDS), np.uint32)
    record = nan_record.NanRecord(entries)
    record.append(record.new_call("big"), [2**33 + 7])
    assert record.take() == ({1: [2**33 + 7]}, 0)
