"""The NumPy reference (``deepselect_rt.reference.topk``) against an independent brute force.

The brute force below is deliberately naive and shares no code with the reference: it ranks
elements with Python floats and ``math`` (not bit patterns), sorts each row with ``sorted`` and
applies the contract's rules (docs/contract.md) one by one in plain Python.
"""

from __future__ import annotations

import json
import math
import struct
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepselect_rt.errors import NaNInputError
from deepselect_rt.reference import sort_keys, topk

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BF16)
INF = float("inf")
NAN = float("nan")
SENTINEL = 0x3F3F3F3F


# --- bit-level facts about the three formats, written out independently of the reference ---

class Fmt(NamedTuple):
    utype: type
    exponent: int  # exponent field mask
    mantissa: int  # mantissa field mask
    sign: int


FMT = {
    np.dtype(np.float32): Fmt(np.uint32, 0x7F80_0000, 0x007F_FFFF, 0x8000_0000),
    np.dtype(np.float16): Fmt(np.uint16, 0x7C00, 0x03FF, 0x8000),
    BF16: Fmt(np.uint16, 0x7F80, 0x007F, 0x8000),
}


def bits_of(a: np.ndarray) -> np.ndarray:
    return a.view(FMT[a.dtype].utype)


def is_nan_bits(b: int, dtype) -> bool:
    f = FMT[dtype]
    return (b & f.exponent) == f.exponent and (b & f.mantissa) != 0


def float_bits(v: float, dtype) -> int:
    """Bit pattern of a Python float exactly representable in ``dtype`` (struct, not NumPy)."""
    if dtype == np.float16:
        return struct.unpack("<H", struct.pack("<e", v))[0]
    f32 = struct.unpack("<I", struct.pack("<f", v))[0]
    return f32 >> 16 if dtype == BF16 else f32


def wrap(v: int, nbits: int) -> int:
    """Two's-complement wrap-around of a Python int into a signed ``nbits`` integer."""
    return (v + 2 ** (nbits - 1)) % 2**nbits - 2 ** (nbits - 1)


# --- the brute force ---

def brute_key(v: float):
    """Total order of the contract: -inf < neg < -0.0 < +0.0 < pos < +inf < NaN (all NaNs equal)."""
    if math.isnan(v):
        return (1, 0.0, 0)
    return (0, v, 1 if math.copysign(1.0, v) > 0 else 0)


class Expected(NamedTuple):
    idx: list  # rows x k Python ints
    val_bits: list  # rows x k Python ints; None for a sentinel row (any NaN accepted)
    nan_rows: list  # rows holding NaN in [begin, end)


def brute_topk(x, k, *, begin=None, end=None, offsets=None, index_dtype="int64", by_value=False,
               nan_policy="propagate", idx_fill=2**31 - 1, val_fill=-INF) -> Expected:
    rows, width = x.shape
    nbits = 32 if index_dtype == "int32" else 64
    with np.errstate(invalid="ignore"):  # ml_dtypes warns when widening a bfloat16 NaN
        floats = x.astype(np.float64).tolist()  # exact widening of all three dtypes
    raw = bits_of(x).tolist()
    fill_bits = float_bits(val_fill, x.dtype)
    exp = Expected([], [], [])
    for r in range(rows):
        e = width if end is None else min(max(int(end[r]), 0), width)
        b = 0 if begin is None else min(max(int(begin[r]), 0), e)
        row = floats[r]
        if nan_policy != "propagate" and any(math.isnan(row[c]) for c in range(b, e)):
            exp.nan_rows.append(r)
            exp.idx.append([SENTINEL] * k)
            exp.val_bits.append(None)
            continue
        best = sorted(((brute_key(row[c]), c) for c in range(b, e)),
                      key=lambda t: (tuple(-part for part in t[0]), t[1]))
        chosen = [c for _, c in best[:k]]
        if not by_value:
            chosen.sort()
        off = 0 if offsets is None else int(offsets[r])
        pad = k - len(chosen)
        exp.idx.append([wrap(c + off, nbits) for c in chosen] + [wrap(idx_fill, nbits)] * pad)
        exp.val_bits.append([raw[r][c] for c in chosen] + [fill_bits] * pad)
    return exp


def check(x, k, values, indices, exp: Expected, index_dtype="int64", return_value=True):
    rows = x.shape[0]
    assert indices.shape == (rows, k) and indices.dtype == np.dtype(index_dtype)
    assert indices.tolist() == exp.idx
    if not return_value:
        assert values is None
        return
    assert values.shape == (rows, k) and values.dtype == x.dtype
    got = bits_of(values).tolist()
    for r in range(rows):
        if exp.val_bits[r] is None:
            assert all(is_nan_bits(b, x.dtype) for b in got[r]), r
        else:
            assert got[r] == exp.val_bits[r], r


# --- random inputs ---

SPECIAL = [0.0, -0.0, INF, -INF, 1.0, -1.0, 0.5, -2.0, 65504.0, -65504.0, 2.0**-24, -(2.0**-24)]


def make_bits(pattern: str, rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Bit patterns (in the unsigned type of ``dtype``) following a named value pattern."""
    f = FMT[dtype]
    n = int(np.prod(shape))

    def from_floats(v):
        return np.asarray(v, np.float64).astype(dtype).view(f.utype).reshape(shape)

    def random_bits(mask):
        return (rng.integers(0, 2**32, n, dtype=np.uint64) & mask).astype(f.utype).reshape(shape)

    def random_nans():
        mant = random_bits(f.mantissa)
        mant[mant == 0] = 1
        signs = rng.integers(0, 2, shape).astype(f.utype) * f.utype(f.sign)
        return signs | f.utype(f.exponent) | mant

    if pattern == "equal":
        return from_floats(np.full(shape, rng.choice([-1.5, 0.0, 2.0, -INF, INF])))
    if pattern == "few":
        return from_floats(rng.choice([-2.0, -0.5, 0.0, 1.0, 3.0], shape))
    if pattern == "ascending":
        return from_floats(np.arange(n, dtype=np.float64).reshape(shape) - n / 2)
    if pattern == "descending":
        return from_floats(n / 2 - np.arange(n, dtype=np.float64).reshape(shape))
    if pattern == "zeros":
        return from_floats(rng.choice([0.0, -0.0], shape))
    if pattern == "infs":
        return from_floats(rng.choice([INF, -INF, 0.0, -0.0, 1.0], shape))
    if pattern == "all_neg_inf":
        return from_floats(np.full(shape, -INF))
    if pattern == "special":
        return from_floats(rng.choice(SPECIAL, shape))
    if pattern == "nan":
        values = from_floats(rng.choice([1.0, -1.0, 0.0, INF, -INF], shape))
        return np.where(rng.random(shape) < 0.3, random_nans(), values)
    if pattern == "subnormal":
        signs = rng.integers(0, 2, shape).astype(f.utype) * f.utype(f.sign)
        return signs | random_bits(f.mantissa)
    assert pattern == "random_bits"
    return random_bits(f.sign | f.exponent | f.mantissa)


PATTERNS = ("equal", "few", "ascending", "descending", "zeros", "infs", "all_neg_inf", "special",
            "nan", "subnormal", "random_bits")
LAYOUTS = ("contiguous", "padded_rows", "element_offset", "byte_offset", "reversed_rows")


def lay_out(bits: np.ndarray, dtype, layout: str) -> np.ndarray:
    """The same values as ``bits.view(dtype)`` in a given memory layout."""
    rows, width = bits.shape
    if layout == "contiguous":
        return bits.view(dtype)
    if layout == "padded_rows":  # row stride width + 7, row starts not 16-byte aligned
        base = np.zeros((rows, width + 7), bits.dtype)
        base[:, 3:3 + width] = bits
        return base[:, 3:3 + width].view(dtype)
    if layout == "element_offset":  # np.empty(n + 1)[1:]
        flat = np.zeros(rows * width + 1, bits.dtype)[1:]
        flat[:] = bits.ravel()
        return flat.reshape(rows, width).view(dtype)
    if layout == "byte_offset":  # not even aligned to the element size
        raw = np.zeros(bits.nbytes + 1, np.uint8)[1:]
        raw[:] = bits.view(np.uint8).ravel()
        return raw.view(bits.dtype).reshape(rows, width).view(dtype)
    assert layout == "reversed_rows"  # negative row stride
    return np.ascontiguousarray(bits[::-1])[::-1].view(dtype)


OFFSET_VALUES = {
    "int32": [0, 1, -5, 1000, 2**31 - 1, -(2**31)],
    "int64": [0, 1, -5, 2**31 - 1, 2**31, -(2**40), 2**63 - 1, -(2**63)],
}
IDX_FILLS = [2**31 - 1, -1, 0, 7]
VAL_FILLS = [-INF, INF, 0.0, -0.0, -1.5, NAN]


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    rows = draw(st.integers(0, 5))
    width = draw(st.integers(0, 70))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    bits = make_bits(draw(st.sampled_from(PATTERNS)), rng, (rows, width), dtype)
    x = lay_out(bits, dtype, draw(st.sampled_from(LAYOUTS)))
    ranges = draw(st.sampled_from(["none", "valid", "wild"]))
    begin = end = None
    if ranges != "none":
        lo, hi = (0, width) if ranges == "valid" else (-3, width + 3)
        a = draw(st.lists(st.integers(lo, hi), min_size=rows, max_size=rows))
        b = draw(st.lists(st.integers(lo, hi), min_size=rows, max_size=rows))
        range_dtype = draw(st.sampled_from([np.int32, np.int64]))
        begin = np.array([min(p, q) for p, q in zip(a, b)], range_dtype)
        end = np.array([max(p, q) for p, q in zip(a, b)], range_dtype)
        drop = draw(st.sampled_from(["neither", "begin", "end"]))
        begin = None if drop == "begin" else begin
        end = None if drop == "end" else end
    offsets = None
    if draw(st.booleans()):
        off_dtype = draw(st.sampled_from(["int32", "int64"]))
        offsets = np.array(draw(st.lists(st.sampled_from(OFFSET_VALUES[off_dtype]),
                                         min_size=rows, max_size=rows)), off_dtype)
    by_value = draw(st.booleans())
    kwargs = dict(
        begin=begin, end=end, offsets=offsets, sorted=by_value,
        sorted_index=False if by_value else draw(st.booleans()),
        index_dtype=draw(st.sampled_from(["int32", "int64"])),
        return_value=draw(st.booleans()),
        nan_policy=draw(st.sampled_from(["propagate", "sentinel", "raise"])),
        idx_fill=draw(st.sampled_from(IDX_FILLS)), val_fill=draw(st.sampled_from(VAL_FILLS)))
    return x, draw(st.integers(0, width + 3)), kwargs, draw(st.booleans())


def canary_buffers(rows, k, idx_dtype, val_dtype, pad=5):
    """Caller output buffers of row stride ``k + pad``, every element pre-set to a canary."""
    idx_base = np.full((rows, k + pad), -0x1234567, idx_dtype)
    val_base = np.full((rows, k + pad), 0x5A5A, FMT[val_dtype].utype).view(val_dtype)
    return idx_base, val_base


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_matches_brute_force(case):
    x, k, kw, use_out = case
    exp = brute_topk(x, k, begin=kw["begin"], end=kw["end"], offsets=kw["offsets"],
                     index_dtype=kw["index_dtype"], by_value=kw["sorted"],
                     nan_policy=kw["nan_policy"], idx_fill=kw["idx_fill"],
                     val_fill=kw["val_fill"])
    rows = x.shape[0]
    out = {}
    if use_out:
        idx_base, val_base = canary_buffers(rows, k, kw["index_dtype"], x.dtype)
        idx_before, val_before = idx_base.copy(), bits_of(val_base).copy()
        out = dict(out_idx=idx_base[:, :k], out_val=val_base[:, :k])
    x_before = bits_of(x).copy()

    if kw["nan_policy"] == "raise" and exp.nan_rows and k > 0:  # k == 0: no work, no check
        with pytest.raises(NaNInputError) as err:
            topk(x, k, **kw, **out)
        assert err.value.rows == exp.nan_rows
        if use_out:
            np.testing.assert_array_equal(idx_base, idx_before)
            np.testing.assert_array_equal(bits_of(val_base), val_before)
        return

    values, indices = topk(x, k, **kw, **out)
    np.testing.assert_array_equal(bits_of(x), x_before)  # the input is never written
    check(x, k, values, indices, exp, kw["index_dtype"], kw["return_value"])
    if use_out:
        assert indices is out["out_idx"]
        np.testing.assert_array_equal(idx_base[:, k:], idx_before[:, k:])
        if kw["return_value"]:
            assert values is out["out_val"]
            np.testing.assert_array_equal(bits_of(val_base)[:, k:], val_before[:, k:])
        else:
            np.testing.assert_array_equal(bits_of(val_base), val_before)


# --- the key order, exhaustively for the 16-bit formats ---

@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_sort_keys_exhaustive_16bit(dtype):
    x = np.arange(2**16, dtype=np.uint64).astype(np.uint16).view(dtype)
    keys = sort_keys(x).tolist()
    with np.errstate(invalid="ignore"):
        floats = x.astype(np.float64).tolist()
    order = sorted(range(2**16), key=lambda i: brute_key(floats[i]))
    for lo, hi in zip(order, order[1:]):
        if brute_key(floats[lo]) == brute_key(floats[hi]):  # only NaNs are equal
            assert keys[lo] == keys[hi]
        else:
            assert keys[lo] < keys[hi], (hex(lo), hex(hi))


def test_sort_keys_float32_landmarks():
    values = [-INF, -3.4e38, -1.0, -1e-45, -0.0, 0.0, 1e-45, 1.0, 3.4e38, INF]
    keys = sort_keys(np.array(values, np.float32)).tolist()
    assert keys == sorted(set(keys))  # strictly increasing
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    assert set(sort_keys(nans).tolist()) == {2**32 - 1}


# --- classic cases with exact expectations ---

def test_k_zero_and_rows_zero():
    x = np.ones((3, 10), np.float32)
    values, indices = topk(x, 0)
    assert values.shape == (3, 0) and indices.shape == (3, 0) and indices.dtype == np.int64
    values, indices = topk(np.ones((0, 10), np.float16), 4, index_dtype="int32")
    assert values.shape == (0, 4) and values.dtype == np.float16
    assert indices.shape == (0, 4) and indices.dtype == np.int32
    # No work for k == 0: not even the NaN check.
    values, indices = topk(np.full((2, 3), NAN, np.float32), 0, nan_policy="raise")
    assert indices.shape == (2, 0)


def test_k_larger_than_width():
    x = np.array([[3.0, 1.0, 2.0]], np.float32)
    values, indices = topk(x, 5)
    assert indices.tolist() == [[0, 1, 2, 2**31 - 1, 2**31 - 1]]
    assert values.tolist() == [[3.0, 1.0, 2.0, -INF, -INF]]
    values, indices = topk(x, 5, sorted=True, idx_fill=-1, val_fill=0.0)
    assert indices.tolist() == [[0, 2, 1, -1, -1]]
    assert values.tolist() == [[3.0, 2.0, 1.0, 0.0, 0.0]]


def test_empty_rows_give_fills_only():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    values, indices = topk(x, 3, end=np.array([0, 6], np.int32))
    assert indices.tolist() == [[2**31 - 1] * 3, [3, 4, 5]]
    assert values.tolist() == [[-INF] * 3, [9.0, 10.0, 11.0]]
    values, indices = topk(x, 2, begin=np.array([4, 0]), end=np.array([4, 0]))
    assert indices.tolist() == [[2**31 - 1] * 2] * 2


@pytest.mark.parametrize("short", [0, 1], ids=["end==k", "end==k+1"])
def test_end_at_k_and_k_plus_one(short):
    k = 4
    x = np.array([[5.0, 1.0, 4.0, 2.0, 3.0, 9.0]], np.float32)
    end = np.array([k + short])
    values, indices = topk(x, k, end=end)
    assert indices.tolist() == ([[0, 1, 2, 3]] if short == 0 else [[0, 2, 3, 4]])
    values, indices = topk(x, k, end=end, sorted=True)
    assert indices.tolist() == ([[0, 2, 3, 1]] if short == 0 else [[0, 2, 4, 3]])


def test_int64_offset_never_overflows():
    x = np.array([[0.0, 1.0]], np.float32)
    _, indices = topk(x, 1, offsets=np.array([2**31 - 1], np.int32))
    assert indices.dtype == np.int64 and indices.tolist() == [[2**31]]


def test_int32_offset_wraps_around():
    x = np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)
    _, indices = topk(x, 1, offsets=np.array([2**31 - 1, -(2**31)], np.int64),
                      index_dtype="int32")
    assert indices.dtype == np.int32 and indices.tolist() == [[-(2**31)], [-(2**31)]]


def test_fills_are_never_offset():
    x = np.array([[1.0, 2.0]], np.float16)
    _, indices = topk(x, 4, offsets=np.array([100]), idx_fill=-7)
    assert indices.tolist() == [[100, 101, -7, -7]]


def test_caller_buffers_with_padded_rows_keep_their_canaries():
    rows, k = 3, 4
    x = np.random.default_rng(1).standard_normal((rows, 50)).astype(np.float32)
    idx_base = np.full((rows, k + 5), -99, np.int32)
    val_base = np.full((rows, k + 5), 12345.0, np.float32)
    out_idx, out_val = idx_base[:, :k], val_base[:, :k]
    values, indices = topk(x, k, index_dtype="int32", out_idx=out_idx, out_val=out_val)
    assert values is out_val and indices is out_idx
    assert (idx_base[:, k:] == -99).all() and (val_base[:, k:] == 12345.0).all()
    exp_values, exp_indices = topk(x, k, index_dtype="int32")
    np.testing.assert_array_equal(out_idx, exp_indices)
    np.testing.assert_array_equal(out_val, exp_values)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unaligned_row_start_matches_aligned_copy(dtype):
    rows, width = 4, 1000
    src = np.random.default_rng(2).standard_normal((rows, width)).astype(dtype)
    unaligned = np.empty(rows * width + 1, dtype)[1:].reshape(rows, width)
    unaligned[...] = src
    assert unaligned.ctypes.data % 16 != 0
    for kw in ({}, {"sorted": True}):
        v1, i1 = topk(unaligned, 64, **kw)
        v2, i2 = topk(np.ascontiguousarray(src), 64, **kw)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(bits_of(v1), bits_of(v2))


def test_width_one_with_non_unit_column_stride():
    base = np.array([[1.0, 9.0], [NAN, 9.0], [-0.0, 9.0]], np.float32)
    x = base[:, ::2]  # shape (3, 1), column stride 8 bytes
    values, indices = topk(x, 2, nan_policy="propagate")
    assert indices.tolist() == [[0, 2**31 - 1]] * 3
    assert bits_of(values)[:, 0].tolist() == bits_of(base[:, 0]).tolist()


def test_out_of_range_begin_end_are_clamped():
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    _, indices = topk(x, 3, begin=np.array([-4]), end=np.array([99]), sorted=True)
    assert indices.tolist() == [[5, 4, 3]]
    _, indices = topk(x, 2, begin=np.array([5]), end=np.array([3]))  # begin clamped to end
    assert indices.tolist() == [[2**31 - 1] * 2]


def test_sentinel_rows():
    x = np.array([[1.0, NAN, 2.0], [1.0, 3.0, 2.0], [-NAN, 0.0, 0.0]], np.float32)
    values, indices = topk(x, 4, nan_policy="sentinel", offsets=np.array([10, 10, 10]))
    assert indices.tolist() == [[SENTINEL] * 4, [10, 11, 12, 2**31 - 1], [SENTINEL] * 4]
    assert np.isnan(values[[0, 2]]).all()
    assert values[1].tolist() == [1.0, 3.0, 2.0, -INF]


def test_raise_names_all_rows_and_writes_nothing():
    x = np.zeros((5, 4), BF16)
    x[1, 3] = NAN
    x[4, 0] = -NAN
    x[2, 3] = NAN  # past end: ignored
    x[3, 0] = NAN  # before begin: ignored
    end = np.array([4, 4, 3, 4, 4])
    begin = np.array([0, 0, 0, 1, 0])
    idx_base, val_base = canary_buffers(5, 2, np.int64, BF16)
    idx_before, val_before = idx_base.copy(), bits_of(val_base).copy()
    with pytest.raises(NaNInputError) as err:
        topk(x, 2, begin=begin, end=end, nan_policy="raise",
             out_idx=idx_base[:, :2], out_val=val_base[:, :2])
    assert err.value.rows == [1, 4]
    # The way out it names holds whether or not the caller passed abort_when_nan_found.
    assert "nan_policy='sentinel' or 'propagate'" in str(err.value)
    assert "with nan_policy=None, abort_when_nan_found=False gives 'sentinel'" in str(err.value)
    np.testing.assert_array_equal(idx_base, idx_before)
    np.testing.assert_array_equal(bits_of(val_base), val_before)


def test_nan_outside_range_is_ignored():
    x = np.array([[1.0, 2.0, NAN], [NAN, 2.0, 1.0]], np.float16)
    for policy in ("raise", "sentinel"):
        _, indices = topk(x, 2, begin=np.array([0, 1]), end=np.array([2, 3]), nan_policy=policy)
        assert indices.tolist() == [[0, 1], [1, 2]]


def test_negative_zero_ranks_below_positive_zero():
    x = np.array([[-0.0, 0.0, -0.0]], np.float32)
    values, indices = topk(x, 1)
    assert indices.tolist() == [[1]]
    values, indices = topk(x, 3, sorted=True)
    assert indices.tolist() == [[1, 0, 2]]
    assert [math.copysign(1.0, v) for v in values[0].tolist()] == [1.0, -1.0, -1.0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ties_go_to_the_lower_index(dtype):
    x = np.array([[1.0, 2.0, 2.0, 0.0, 2.0, 2.0]], dtype)
    _, indices = topk(x, 3)
    assert indices.tolist() == [[1, 2, 4]]
    _, indices = topk(x, 5, sorted=True)
    assert indices.tolist() == [[1, 2, 4, 5, 0]]


def test_sorted_and_index_orders():
    x = np.array([[0.5, -1.0, 7.0, 3.0, -INF, 7.0, 2.0]], np.float32)
    values, indices = topk(x, 4, sorted=True)
    assert indices.tolist() == [[2, 5, 3, 6]] and values.tolist() == [[7.0, 7.0, 3.0, 2.0]]
    for kw in ({}, {"sorted_index": True}):
        values, indices = topk(x, 4, **kw)
        assert indices.tolist() == [[2, 3, 5, 6]] and values.tolist() == [[7.0, 3.0, 7.0, 2.0]]
    values, indices = topk(x, 4, sorted=True, return_value=False)
    assert values is None and indices.tolist() == [[2, 5, 3, 6]]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_propagate_ranks_every_nan_above_inf_and_keeps_payloads(dtype):
    f = FMT[dtype]
    nan_a = f.exponent | 1  # positive signalling-style NaN, payload 1
    nan_b = f.sign | f.exponent | f.mantissa  # negative NaN, all-ones payload
    raw = [float_bits(INF, dtype), nan_a, float_bits(1.0, dtype), nan_b, float_bits(-INF, dtype)]
    x = np.array([raw], f.utype).view(dtype)
    values, indices = topk(x, 3, sorted=True)
    assert indices.tolist() == [[1, 3, 0]]
    assert bits_of(values).tolist() == [[nan_a, nan_b, float_bits(INF, dtype)]]


def test_return_value_false_leaves_out_val_untouched():
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    out_val = np.full((1, 2), 42.0, np.float32)
    values, indices = topk(x, 2, return_value=False, out_val=out_val)
    assert values is None and indices.tolist() == [[1, 2]]
    assert out_val.tolist() == [[42.0, 42.0]]


# --- real-model fixtures ---

@pytest.fixture(scope="module")
def indexer(fixtures_dir):
    bits = np.load(fixtures_dir / "indexer_scores_bf16.npy")
    meta = json.loads((fixtures_dir / "indexer_scores.json").read_text())
    rows = meta["rows"]
    end = np.array([r["end"] for r in sorted(rows, key=lambda r: r["row"])], np.int32)
    return bits.view(ml_dtypes.bfloat16), end


@pytest.mark.parametrize("k", [512, 2048])
@pytest.mark.parametrize("by_value", [False, True], ids=["index_order", "sorted"])
def test_indexer_bf16_fixture(indexer, k, by_value):
    x, end = indexer
    values, indices = topk(x, k, end=end, sorted=by_value, index_dtype="int32")
    checked = [0, 5, 7]  # a short -inf tail, a mid one, and no tail (end == N)
    exp = brute_topk(x[checked], k, end=end[checked], by_value=by_value, index_dtype="int32")
    check(x[checked], k, values[checked], indices[checked], exp, "int32")
    # -inf tail past `end` is never selected; all of [0, end) is finite and non-negative.
    assert (indices < end[:, None]).all()


def test_sampler_logits_fixture(fixtures_dir):
    x = np.load(fixtures_dir / "sampler_logits_fp32.npy")
    values, indices = topk(x, 512, sorted=True)
    checked = [0, 27, 44, 63]
    exp = brute_topk(x[checked], 512, by_value=True)
    check(x[checked], 512, values[checked], indices[checked], exp)


def test_large_float32_batch():
    rows, width, k = 64, 1 << 20, 2048
    x = np.random.default_rng(3).standard_normal((rows, width), dtype=np.float32)
    values, indices = topk(x, k, sorted=True)
    _, by_index = topk(x, k)
    for r in (0, 41):
        expect = np.argsort(-x[r], kind="stable")[:k]  # descending, ties by lower index
        np.testing.assert_array_equal(indices[r], expect)
        np.testing.assert_array_equal(values[r], x[r, expect])
        np.testing.assert_array_equal(by_index[r], np.sort(expect))
