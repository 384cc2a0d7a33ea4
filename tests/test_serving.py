"""The serving options on the CPU (contract.md, "Serving"): the page-table lookup, row_to_batch,
raw indices, per-row k and ragged rows, checked against a brute force written here (Python
loops over sorted lists, independent of reference.py), the reference against the API (NumPy and
torch CPU tensors), and every bad argument's error before any work. The kernel side's mirrors
(Params fields, flag bits) are checked against the headers."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import deepselect_rt
from deepselect_rt import reference
from deepselect_rt.errors import BackendUnavailableError
from deepselect_rt.interop.views import view_of
from deepselect_rt.jit.spec import FLAGS, SERVING_FLAGS, F_KROW64, F_R2B64, F_RELATIVE, F_SORTED, flags_of
from deepselect_rt.request import TopkRequest

KERNELS = Path(__file__).resolve().parents[1] / "kernels_cu"
FILL = 2**31 - 1
SENTINEL = reference.NAN_SENTINEL_INDEX


# --- the brute force ----------------------------------------------------------------------------

def brute(x, k, *, begin=None, end=None, offsets=None, sorted=False, k_per_row=None, relative=False,
          page_table=None, page_size=None, row_to_batch=None, index_dtype="int64", idx_fill=FILL,
          val_fill=-np.inf, nan_sentinel=False):
    """(values, indices, raw) of each row by the contract's words, one slot at a time."""
    rows, width = x.shape
    wrap = (lambda v: int(np.array(v, np.int64).astype(np.int32))) if index_dtype == "int32" else int
    vals = np.full((rows, k), val_fill, x.dtype)
    idx = np.full((rows, k), idx_fill, np.int64)
    raw = np.full((rows, k), idx_fill, np.int64)
    for i in range(rows):
        b = 0 if begin is None else int(begin[i])
        e = width if end is None else int(end[i])
        row = [float(v) for v in x[i].astype(np.float64)]
        if nan_sentinel and any(np.isnan(row[c]) for c in range(b, e)):
            idx[i], raw[i], vals[i] = SENTINEL, SENTINEL, np.nan
            continue
        best = builtins_sorted(range(b, e), key=lambda c: (-row[c], c))[:k]
        if k_per_row is not None:
            best = best[:int(k_per_row[i])]
        elif not sorted:
            best = builtins_sorted(best)
        for slot, c in enumerate(best):
            r = wrap(c - (b if relative else 0) + (0 if offsets is None else int(offsets[i])))
            index = r
            if page_table is not None:
                t = i if row_to_batch is None else int(row_to_batch[i])
                if not (0 <= t < page_table.shape[0] and 0 <= r < page_table.shape[1] * page_size):
                    continue  # no page: the slot stays a fill
                index = wrap(int(page_table[t, r // page_size]) * page_size + r % page_size)
            idx[i, slot], raw[i, slot], vals[i, slot] = index, r, x[i, c]
    return vals, idx.astype(index_dtype), raw.astype(index_dtype)


builtins_sorted = sorted


def scores(rows, width, seed, dtype=np.float32, ties=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, width))
    if ties:
        x = np.round(x * 4) / 4 + 0.01  # many equal values, never a signed zero
    return x.astype(dtype)


def table(batch, max_pages, seed, pool=1000):
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(pool)[:max_pages] for _ in range(batch)]).astype(np.int32)


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f" or g.dtype == ml_dtypes.bfloat16:
            np.testing.assert_array_equal(g.view(np.uint16 if g.itemsize == 2 else np.uint32),
                                          w.view(np.uint16 if w.itemsize == 2 else np.uint32))
        else:
            np.testing.assert_array_equal(g, w)


# --- page table -----------------------------------------------------------------------------------

@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("sorted_", [False, True])
@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_page_table_against_brute_force(index_dtype, sorted_, page_size):
    rows, width, k = 6, 64, 9
    x = scores(rows, width, page_size)
    pages = -(-width // page_size)
    pt = table(rows + 2, pages + 1, seed=3)
    r2b = np.array([7, 0, 3, 3, 1, 6], np.int32)
    end = np.array([64, 5, 0, 40, 9, 64], np.int32)
    got = deepselect_rt.topk(x, k, sorted=sorted_, end=end, indices_type=index_dtype, page_table=pt,
                             page_size=page_size, row_to_batch=r2b, return_raw_indices=True)
    want = brute(x, k, end=end, sorted=sorted_, page_table=pt, page_size=page_size, row_to_batch=r2b,
                 index_dtype=index_dtype)
    assert_same(got, want)


def test_page_table_default_rows_and_offsets_apply_before_the_lookup():
    x = scores(3, 40, 1)
    pt = table(5, 10, seed=2)  # batch 5 >= rows 3
    offsets = np.array([0, 3, 7], np.int64)
    end = np.array([40, 36, 33], np.int32)
    got = deepselect_rt.topk(x, 6, end=end, output_idx_offset=offsets, page_table=pt, page_size=4,
                             return_raw_indices=True)
    want = brute(x, 6, end=end, offsets=offsets, page_table=pt, page_size=4)
    assert_same(got, want)
    # The raw indices are what topk returns without a table.
    np.testing.assert_array_equal(got[2], deepselect_rt.topk(x, 6, end=end, output_idx_offset=offsets)[1])


def test_page_table_int32_output_wraps_like_offsets():
    x = scores(2, 8, 4)
    pt = np.array([[2**30, 5], [7, 2**29]], np.int32)
    got = deepselect_rt.topk(x, 8, indices_type="int32", page_table=pt, page_size=4)
    want = brute(x, 8, page_table=pt, page_size=4, index_dtype="int32")
    assert_same(got, want[:2])
    assert_same(deepselect_rt.topk(x, 8, page_table=pt, page_size=4), brute(x, 8, page_table=pt, page_size=4)[:2])


def test_page_table_keeps_fills_and_the_nan_sentinel():
    x = scores(3, 16, 5)
    x[1, 3] = np.nan
    pt = table(3, 4, seed=6)
    end = np.array([2, 16, 16], np.int32)
    got = deepselect_rt.topk(x, 4, end=end, page_table=pt, page_size=4, nan_policy="sentinel",
                             idx_oob_fill_value=-1, value_oob_fill_value=0.5, return_raw_indices=True)
    want = brute(x, 4, end=end, page_table=pt, page_size=4, nan_sentinel=True, idx_fill=-1, val_fill=0.5)
    assert_same(got, want)
    assert (got[1][1] == SENTINEL).all() and (got[2][1] == SENTINEL).all()
    assert (got[1][0, 2:] == -1).all() and (got[0][0, 2:] == 0.5).all()


def test_page_table_row_of_strided_table_and_torch_cpu():
    torch = pytest.importorskip("torch")
    x = scores(4, 32, 7)
    big = table(8, 12, seed=8)
    pt = big[::2, :8]  # row stride 24, a slice of a larger table
    got = deepselect_rt.topk(torch.from_numpy(x), 5, sorted=True, page_table=torch.from_numpy(big)[::2, :8],
                             page_size=4)
    want = brute(x, 5, sorted=True, page_table=pt, page_size=4)
    assert_same([g.numpy() for g in got], want[:2])


def test_positions_without_a_page_become_fills_in_the_reference():
    # What the kernel does with device values the host cannot check: a row_to_batch outside the
    # table, an end past the table's positions.
    x = scores(3, 32, 9)
    pt = table(2, 4, seed=1)  # 16 positions
    got = reference.topk(x, 6, sorted=True, page_table=pt, page_size=4, row_to_batch=np.array([0, 2, -1]),
                         return_raw=True)
    want = brute(x, 6, sorted=True, page_table=pt, page_size=4, row_to_batch=np.array([0, 2, -1]))
    assert_same(got, want)
    assert (got[1][1:] == FILL).all() and (got[0][1:] == -np.inf).all()
    # Row 0's positions past the table's 16 are fills in all three outputs.
    assert ((got[2][0] < 16) | ((got[1][0] == FILL) & (got[2][0] == FILL))).all()


def test_caller_raw_buffer_is_written_and_returned():
    x = scores(3, 20, 10)
    pt = table(3, 5, seed=4)
    raw = np.full((3, 4), -7, np.int32)
    got = deepselect_rt.topk(x, 4, indices_type="int32", page_table=pt, page_size=4, return_raw_indices=True,
                             output_raw_idx=raw)
    assert got[2] is raw
    np.testing.assert_array_equal(raw, deepselect_rt.topk(x, 4, indices_type="int32")[1])


def test_raw_indices_without_a_table_equal_the_indices():
    x = scores(2, 30, 11)
    v, i, r = deepselect_rt.topk(x, 5, return_raw_indices=True)
    np.testing.assert_array_equal(i, r)


# --- per-row k ------------------------------------------------------------------------------------

@pytest.mark.parametrize("sorted_", [False, True])
@pytest.mark.parametrize("kind", ["int32", "int64"])
def test_k_per_row_against_brute_force(sorted_, kind):
    x = scores(6, 50, 12)
    ks = np.array([0, 1, 7, 7, 3, 5], kind)
    end = np.array([50, 50, 4, 50, 0, 50], np.int32)
    got = deepselect_rt.topk(x, 7, sorted=sorted_, end=end, k_per_row=ks, return_raw_indices=True)
    want = brute(x, 7, end=end, sorted=sorted_, k_per_row=ks)
    assert_same(got, want)


def test_k_per_row_equal_to_k_is_the_sorted_result():
    x = scores(4, 64, 13)
    ks = np.full(4, 10, np.int32)
    assert_same(deepselect_rt.topk(x, 10, k_per_row=ks), deepselect_rt.topk(x, 10, sorted=True))


def test_k_per_row_nan_rows_keep_the_sentinel_in_every_slot():
    x = scores(3, 16, 14)
    x[2, 5] = np.nan
    ks = np.array([2, 3, 1], np.int32)
    got = deepselect_rt.topk(x, 4, k_per_row=ks, nan_policy="sentinel")
    want = brute(x, 4, k_per_row=ks, nan_sentinel=True)
    assert_same(got, want[:2])
    assert (got[1][2] == SENTINEL).all()
    # propagate: NaN ranks first, within the row's k.
    v, i = deepselect_rt.topk(x, 4, k_per_row=ks, nan_policy="propagate")
    assert i[2, 0] == 5 and (i[2, 1:] == FILL).all()


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_all_options_api_equals_reference(dtype):
    x = scores(8, 300, 15, dtype, ties=False)
    rng = np.random.default_rng(1)
    ks = rng.integers(0, 33, 8).astype(np.int32)
    end = rng.integers(100, 301, 8).astype(np.int64)
    begin = (end * rng.random(8)).astype(np.int64)
    pt = table(4, 20, seed=5)
    r2b = rng.integers(0, 4, 8).astype(np.int64)
    got = deepselect_rt.topk(x, 32, begin=begin, end=end, k_per_row=ks, page_table=pt, page_size=16,
                             row_to_batch=r2b, indices_type="int32", return_raw_indices=True, nan_policy="sentinel")
    want = reference.topk(x, 32, begin=begin, end=end, k_per_row=ks, page_table=pt, page_size=16,
                          row_to_batch=r2b, index_dtype="int32", return_raw=True, nan_policy="sentinel")
    assert_same(got, want)
    assert_same(want, brute(x, 32, begin=begin, end=end, k_per_row=ks, page_table=pt, page_size=16,
                            row_to_batch=r2b, index_dtype="int32"))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_option_together_against_brute_force(data):
    """Random shapes, ranges, tables, per-row k, offsets, ties, NaN rows and both orders: the API
    (CPU backend) equals the brute force slot for slot."""
    draw = data.draw
    rows, width = draw(st.integers(0, 6)), draw(st.integers(1, 40))
    k = draw(st.integers(0, width + 3))
    dtype = draw(st.sampled_from([np.float16, ml_dtypes.bfloat16, np.float32]))
    x = scores(rows, width, draw(st.integers(0, 2**16)), dtype, ties=draw(st.booleans()))
    if rows and draw(st.booleans()):
        x[draw(st.integers(0, rows - 1)), draw(st.integers(0, width - 1))] = np.nan
    end = np.array(draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows)), np.int64)
    begin = np.array([draw(st.integers(0, int(e))) for e in end], np.int64)
    index_dtype = draw(st.sampled_from(["int32", "int64"]))
    kw = dict(begin=begin, end=end)
    if draw(st.booleans()):
        kw["output_idx_offset"] = np.array(draw(st.lists(st.integers(-3, 50), min_size=rows, max_size=rows)),
                                           np.int64)
    if draw(st.booleans()):
        kw["k_per_row"] = np.array(draw(st.lists(st.integers(0, k), min_size=rows, max_size=rows)), np.int32)
    sorted_ = "k_per_row" not in kw and draw(st.booleans())
    page_size = None
    if draw(st.booleans()):
        page_size = draw(st.integers(1, 8))
        batch = draw(st.integers(1, 4))
        pages = -(-(width + 50) // page_size) - draw(st.integers(0, 2))  # now and then too few for a position
        kw.update(page_table=table(batch, max(1, pages), draw(st.integers(0, 99))), page_size=page_size,
                  row_to_batch=np.array(draw(st.lists(st.integers(0, batch - 1), min_size=rows, max_size=rows)),
                                        np.int32))
    try:
        got = deepselect_rt.topk(x, k, sorted=sorted_, indices_type=index_dtype, nan_policy="sentinel",
                                 return_raw_indices=True, **kw)
    except ValueError as exc:  # a position past the table that the host can see: refused, not filled
        assert page_size is not None and "page" in str(exc)
        event("refused: a position past the table")
        return
    brute_kw = {("offsets" if name == "output_idx_offset" else name): v for name, v in kw.items()}
    assert_same(got, brute(x, k, sorted=sorted_, index_dtype=index_dtype, nan_sentinel=True, **brute_kw))


# --- ragged rows ------------------------------------------------------------------------------------

def _ragged(rows_lengths, seed, dtype=np.float32):
    cu = np.concatenate([[0], np.cumsum(rows_lengths)]).astype(np.int32)
    flat = scores(1, int(cu[-1]), seed, dtype)[0]
    return flat, cu


def _ragged_brute(flat, cu, k, **kw):
    """Each row in its own place of a (rows, total) matrix, with relative columns."""
    rows = len(cu) - 1
    x = np.broadcast_to(flat, (rows, len(flat)))
    return brute(np.ascontiguousarray(x), k, begin=cu[:-1], end=cu[1:], relative=True, **kw)


@pytest.mark.parametrize("sorted_", [False, True])
def test_ragged_against_brute_force_and_the_loop_reference(sorted_):
    flat, cu = _ragged([5, 0, 17, 1, 40, 9], 16)
    got = deepselect_rt.ragged_topk(flat, cu, 8, sorted=sorted_, return_raw_indices=True)
    assert_same(got, _ragged_brute(flat, cu, 8, sorted=sorted_))
    assert_same(got[:2], reference.ragged_topk(flat, cu, 8, sorted=sorted_))


def test_ragged_with_page_table_k_per_row_and_offsets():
    flat, cu = _ragged([12, 30, 3, 25], 17)
    pt = table(6, 10, seed=9)
    r2b = np.array([5, 0, 2, 2], np.int32)
    ks = np.array([4, 6, 6, 0], np.int64)
    off = np.array([0, 2, 1, 5], np.int32)
    kw = dict(page_table=pt, page_size=4, row_to_batch=r2b, k_per_row=ks)
    got = deepselect_rt.ragged_topk(flat, cu.astype(np.int64), 6, output_idx_offset=off, return_raw_indices=True, **kw)
    assert_same(got, _ragged_brute(flat, cu, 6, offsets=off, **kw))
    assert_same(got, reference.ragged_topk(flat, cu, 6, offsets=off, return_raw=True, **kw))


def test_ragged_rows_starting_past_zero_and_empty_batches():
    flat, _ = _ragged([50], 18)
    cu = np.array([3, 10, 10, 44], np.int32)
    got = deepselect_rt.ragged_topk(flat, cu, 5)
    assert_same(got, _ragged_brute(flat, cu, 5)[:2])
    v, i = deepselect_rt.ragged_topk(flat, np.array([7], np.int32), 5)
    assert v.shape == (0, 5) and i.shape == (0, 5)
    v, i = deepselect_rt.ragged_topk(flat[:0], np.array([0, 0], np.int32), 3)
    assert (i == FILL).all() and i.shape == (1, 3)


def test_ragged_torch_cpu_and_bf16():
    torch = pytest.importorskip("torch")
    flat, cu = _ragged([9, 31, 2], 19, ml_dtypes.bfloat16)
    bits = torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16)
    v, i = deepselect_rt.ragged_topk(bits, torch.from_numpy(cu), 4, sorted=True)
    want = reference.ragged_topk(flat, cu, 4, sorted=True)
    np.testing.assert_array_equal(i.numpy(), want[1])
    np.testing.assert_array_equal(v.view(torch.int16).numpy(), want[0].view(np.int16))


def test_ragged_reference_raises_for_every_nan_row():
    flat, cu = _ragged([4, 6, 5, 3], 23)
    flat[[5, 12]] = np.nan  # rows 1 and 2
    with pytest.raises(deepselect_rt.NaNInputError) as err:
        reference.ragged_topk(flat, cu, 3, nan_policy="raise")
    assert list(err.value.rows) == [1, 2]


def test_ragged_nan_rows_raise_at_the_next_call():
    flat, cu = _ragged([4, 6, 5], 20)
    flat[6] = np.nan  # row 1
    v, i = deepselect_rt.ragged_topk(flat, cu, 3)
    assert (i[1] == SENTINEL).all() and (i[0] != SENTINEL).all()
    with pytest.raises(deepselect_rt.NaNInputError) as err:
        deepselect_rt.check_nan()
    assert list(err.value.rows) == [1]


# --- errors ---------------------------------------------------------------------------------------

X = scores(3, 32, 0)
PT = table(3, 8, seed=0)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(page_table=PT.astype(np.int64), page_size=4), TypeError, "page_table must have dtype int32"),
    (dict(page_table=PT.astype(np.float32), page_size=4), TypeError, "page_table"),
    (dict(page_table=PT[0], page_size=4), ValueError, "2-D"),
    (dict(page_table=np.asfortranarray(table(3, 8, 1)), page_size=4), ValueError, "stride 1"),
    (dict(page_table=PT), ValueError, "needs page_size"),
    (dict(page_table=PT, page_size=0), ValueError, "page_size must be in"),
    (dict(page_table=PT, page_size=4.0), TypeError, "page_size must be an integer"),
    (dict(page_table=PT, page_size=True), TypeError, "page_size must be an integer"),
    (dict(page_size=4), ValueError, "without page_table"),
    (dict(row_to_batch=np.zeros(3, np.int32)), ValueError, "without page_table"),
    (dict(page_table=PT[:2], page_size=4), ValueError, "pass row_to_batch"),
    (dict(page_table=PT, page_size=4, row_to_batch=np.array([0, 3, 1], np.int32)), ValueError, "row 1 has 3"),
    (dict(page_table=PT, page_size=4, row_to_batch=np.array([0, -1, 1], np.int32)), ValueError, "row_to_batch"),
    (dict(page_table=PT, page_size=4, row_to_batch=np.zeros(3, np.int16)), TypeError, "row_to_batch"),
    (dict(page_table=PT, page_size=4, row_to_batch=np.zeros(2, np.int32)), ValueError, "row_to_batch must have shape"),
    (dict(page_table=PT, page_size=2), ValueError, "page table's"),  # 32 columns, 16 positions
    (dict(page_table=PT, page_size=4, output_idx_offset=np.array([0, 1, 0], np.int32)), ValueError,
     "row 1's.*pass end"),
    (dict(page_table=PT, page_size=4, begin=np.array([0, 0, 0], np.int32),
          output_idx_offset=np.array([0, -1, 0], np.int32)), ValueError, "row 1's.*non-negative output_idx_offset"),
    (dict(k_per_row=np.array([1, 6, 0], np.int32)), ValueError, "k_per_row must lie in"),
    (dict(k_per_row=np.array([1, -1, 0], np.int32)), ValueError, "row 1 has -1"),
    (dict(k_per_row=np.zeros(3, np.float32)), TypeError, "k_per_row"),
    (dict(k_per_row=np.zeros(4, np.int32)), ValueError, "k_per_row must have shape"),
    (dict(k_per_row=np.zeros(3, np.int32), sorted_index=True), ValueError, "sorted_index"),
    (dict(output_raw_idx=np.zeros((3, 5), np.int64)), ValueError, "return_raw_indices=True"),
    (dict(return_raw_indices=1), TypeError, "return_raw_indices must be a bool"),
    (dict(return_raw_indices=True, output_raw_idx=np.zeros((3, 5), np.int32)), TypeError, "output_raw_idx"),
    (dict(return_raw_indices=True, output_raw_idx=np.zeros((3, 4), np.int64)), ValueError, "output_raw_idx"),
])
def test_bad_serving_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        deepselect_rt.topk(X, 5, **kwargs)


def test_the_end_bounds_the_table_check():
    # 32 columns, 16 positions: fine once end keeps every row inside the table.
    end = np.array([16, 3, 0], np.int32)
    v, i = deepselect_rt.topk(X, 5, end=end, page_table=PT, page_size=2)
    assert_same((v, i), brute(X, 5, end=end, page_table=PT, page_size=2)[:2])


def test_raw_buffer_must_not_alias_the_other_outputs():
    idx = np.zeros((3, 5), np.int64)
    with pytest.raises(ValueError, match="output_raw_idx must not alias output_idx"):
        deepselect_rt.topk(X, 5, output_idx=idx, return_raw_indices=True, output_raw_idx=idx)
    pt = np.zeros((3, 8), np.int32)
    with pytest.raises(ValueError, match="output_idx must not alias page_table"):
        deepselect_rt.topk(X, 2, indices_type="int32", output_idx=pt[:, :2], page_table=pt, page_size=4)


@pytest.mark.parametrize("scores_,cu,error,match", [
    (X, np.array([0, 3], np.int32), ValueError, "must be 1-D"),
    (X[0], np.array([[0, 3]], np.int32), ValueError, r"cu_seqlens must have shape \(rows \+ 1,\)"),
    (X[0], np.array([], np.int32), ValueError, "at least one offset"),
    (X[0], np.array([0, 3.0]), TypeError, "cu_seqlens"),
    (X[0], np.array([0, 5, 3], np.int32), ValueError, "must rise"),
    (X[0], np.array([0, 5, 33], np.int32), ValueError, "must rise"),
    (X[0], np.array([-1, 5], np.int32), ValueError, "must rise"),
    (X[0, ::2], np.array([0, 5], np.int32), ValueError, "contiguous"),
    (X[0].astype(np.float64), np.array([0, 5], np.int32), TypeError, "dtype"),
    (X[0], None, TypeError, "needs cu_seqlens"),
])
def test_bad_ragged_arguments(scores_, cu, error, match):
    with pytest.raises(error, match=match):
        deepselect_rt.ragged_topk(scores_, cu, 3)


def test_ragged_offsets_checked_from_the_row_start():
    flat, cu = _ragged([10, 10], 21)
    off = np.array([0, 2**31 - 9], np.int32)
    with pytest.raises(ValueError, match="output_idx_offset"):
        deepselect_rt.ragged_topk(flat, cu, 3, indices_type="int32", output_idx_offset=off)
    off[1] = 2**31 - 10  # the row's last relative index 9 just fits
    deepselect_rt.ragged_topk(flat, cu, 3, indices_type="int32", output_idx_offset=off)


def test_ragged_rows_longer_than_the_table():
    flat, cu = _ragged([10, 20], 22)
    pt = table(2, 4, seed=2)
    with pytest.raises(ValueError, match=r"row 1's positions .* pass shorter rows in cu_seqlens \(or a larger table\)"):
        deepselect_rt.ragged_topk(flat, cu, 3, page_table=pt, page_size=4)
    deepselect_rt.ragged_topk(flat, cu, 3, page_table=pt, page_size=5)


def test_ascend_refuses_the_serving_options():
    from deepselect_rt.ascend import backend

    x = view_of(X)
    out = view_of(np.zeros((3, 2), np.int64))
    base = dict(x=x, k=2, begin=None, end=None, offsets=None, index_dtype="int64", sorted=False, sorted_index=False,
                return_value=False, nan_policy="sentinel", idx_fill=0, val_fill=0.0, out_idx=out, out_val=None,
                stream=0)
    for extra, name in ((dict(page_table=view_of(PT), page_size=4), "page_table"),
                        (dict(k_per_row=view_of(np.ones(3, np.int32))), "k_per_row"),
                        (dict(out_raw=out), "return_raw_indices"), (dict(relative=True), "ragged_topk")):
        with pytest.raises(BackendUnavailableError, match=f"{name}.*not implemented on Ascend"):
            backend.run(TopkRequest(**base, **extra))


@pytest.mark.parametrize("fullgraph", [False, True])
def test_torch_compile_refuses_the_serving_options(fullgraph):
    """Refused while tracing with a ValueError; under fullgraph=True torch wraps it in its own
    Unsupported error, which carries the message."""
    torch = pytest.importorskip("torch")
    refused = torch._dynamo.exc.Unsupported if fullgraph else ValueError
    k = torch.ones(2, dtype=torch.int32)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    calls = ((lambda x: deepselect_rt.topk(x, 2, k_per_row=k), "k_per_row"),
             (lambda x: deepselect_rt.ragged_topk(x[0], cu, 2), "ragged_topk"))
    for f, name in calls:
        torch._dynamo.reset()
        with pytest.raises(refused, match=f"{name}: not supported under torch.compile"):
            torch.compile(f, fullgraph=fullgraph, backend="eager")(torch.zeros(2, 4))


# --- the kernel side's mirrors ----------------------------------------------------------------------

def test_params_fields_and_flags_mirror_the_header():
    from deepselect_rt.cuda import launch

    text = (KERNELS / "common" / "params.cuh").read_text()
    body = re.search(r"struct Params \{(.*?)\};", text, re.S).group(1)
    names = re.findall(r"(\w+);", re.sub(r"//[^\n]*", "", body))
    assert tuple(names) == launch._FIELDS
    header = {name: int(v) for name, v in re.findall(r"#define (DS_F_\w+) (\d+)", text)}
    assert header == {**FLAGS, **SERVING_FLAGS}


def test_pack_carries_the_serving_options():
    from deepselect_rt.cuda import launch

    pt = np.zeros((4, 6), np.int32)
    big = np.zeros((4, 16), np.int32)
    x, raw = view_of(X), view_of(np.zeros((3, 2), np.int32))
    req = TopkRequest(x=x, k=2, begin=None, end=None, offsets=None, index_dtype="int32", sorted=False,
                      sorted_index=False, return_value=False, nan_policy="propagate", idx_fill=0, val_fill=0.0,
                      out_idx=view_of(np.zeros((3, 2), np.int32)), out_val=None, stream=0,
                      page_table=view_of(big[:, :6]), page_size=8, row_to_batch=view_of(np.zeros(3, np.int64)),
                      k_per_row=view_of(np.ones(3, np.int64)), out_raw=raw, relative=True)
    p = launch.pack(req)
    assert (p.page_table, p.page_row_stride, p.page_size, p.max_pages, p.batch) == (big.ctypes.data, 16, 8, 6, 4)
    assert p.row_to_batch == req.row_to_batch.ptr and p.k_per_row == req.k_per_row.ptr
    assert (p.out_raw, p.raw_row_stride) == (raw.ptr, 2)
    assert p.flags == flags_of(req) == F_SORTED | F_R2B64 | F_KROW64 | F_RELATIVE
    del pt
