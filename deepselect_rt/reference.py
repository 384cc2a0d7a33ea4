"""NumPy implementation of the whole ``topk`` contract: the oracle and the CPU backend.

Every rule implemented here is stated in ``docs/contract.md`` (its sections are named in
quotes below); the GPU kernels must reproduce this module's output bit for bit.

How the selection is made exact and unique:

* Each float is mapped to an unsigned integer ``sort_keys`` whose order is the contract's total
  order (``-inf < negative finite < -0.0 < +0.0 < positive finite < +inf < NaN``, all NaNs
  equal under ``"propagate"``) (contract: "Which elements are selected", "NaN").
* A row's elements are then ranked by one uint64 per element, ``(~key << 32) | column``: smaller
  is better, so the best key comes first and among equal keys the lower column index wins, which
  is the stable descending sort the contract defines. The ranks are unique, so
  ``np.partition(rank, k - 1)`` has exactly one answer, and the column can be read back from the
  low 32 bits (``width <= 2**31 - 1``, contract: "Limits").
* Columns outside ``[begin, end)`` get the rank ``2**64 - 1``, above every real rank (no real
  key is 0, so the high half ``~key`` of a real rank is never all ones): a short row selects its
  own elements first and out-of-range ones after them, and those slots become fills
  (contract: "Short rows").
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from deepselect_rt.errors import NaNInputError

#: Per input dtype: (unsigned type of the same width, sign bit, bits of +inf). A value is NaN
#: iff its magnitude bits exceed those of +inf (exponent all ones, mantissa non-zero).
_FORMATS = {
    np.dtype(np.float32): (np.dtype(np.uint32), 0x8000_0000, 0x7F80_0000),
    np.dtype(np.float16): (np.dtype(np.uint16), 0x8000, 0x7C00),
    np.dtype(ml_dtypes.bfloat16): (np.dtype(np.uint16), 0x8000, 0x7F80),
}

#: Index slots of a row holding NaN under ``nan_policy="sentinel"`` (contract: "NaN").
NAN_SENTINEL_INDEX = 0x3F3F3F3F

_NO_RANK = np.uint64(2**64 - 1)
_COLUMN_BITS = np.uint64(0xFFFF_FFFF)

#: Rows are processed in blocks of about this many elements, which bounds the temporaries
#: (uint64 ranks, keys, masks: ~20 bytes an element) whatever the batch size.
_BLOCK_ELEMENTS = 1 << 22

_NAN_POLICIES = ("propagate", "sentinel", "raise")


def _format(dtype: np.dtype):
    try:
        return _FORMATS[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"input dtype must be float32, float16 or bfloat16, got {dtype}") from None


def nan_mask(x: np.ndarray) -> np.ndarray:
    """Boolean array of ``x``'s shape: True where the element is a NaN (either sign, any payload).

    Works on the bit pattern, so it needs no float arithmetic in the input dtype.
    """
    utype, sign, inf = _format(x.dtype)
    bits = x.view(utype)
    return (bits & utype.type(sign - 1)) > utype.type(inf)


def sort_keys(x: np.ndarray) -> np.ndarray:
    """Order-preserving unsigned keys of ``x`` (any shape and strides).

    Returns an array of ``x``'s shape, uint32 for float32 input and uint16 for float16 and
    bfloat16, such that ``key(a) < key(b)`` exactly when ``a`` ranks below ``b`` in the
    contract's total order; every NaN gets the largest key, so all NaNs are equal and rank above
    +inf (the ``"propagate"`` rule). Built from the bit pattern: a negative float's magnitude
    order is reversed by inverting all its bits; a non-negative one is moved above all negatives
    by setting the sign bit. This puts -0.0 (0x80..0 -> 0x7F..F) just below +0.0 (0 -> 0x80..0).
    """
    utype, sign, _ = _format(x.dtype)
    bits = x.view(utype)
    sign = utype.type(sign)
    keys = np.where((bits & sign) != 0, ~bits, bits | sign)
    keys[nan_mask(x)] = np.iinfo(utype).max
    return keys


def _select_block(x: np.ndarray, inside: np.ndarray, kk: int, by_value: bool) -> np.ndarray:
    """Selected columns of a block of rows, in output order.

    ``x``: ``(r, width)``; ``inside``: ``(r, width)`` bool, True on each row's ``[begin, end)``;
    ``kk``: ``min(k, width)`` (0 only when ``width`` is 0). Returns ``(r, kk)`` uint64: the
    columns of the ``kk`` best elements of each row's range by descending key (``by_value``) or
    by ascending column, followed, when the range holds fewer than ``kk`` elements, by
    ``0xFFFFFFFF`` placeholders.
    """
    rank = (~sort_keys(x)).astype(np.uint64) << np.uint64(32)
    rank |= np.arange(x.shape[1], dtype=np.uint64)
    rank[~inside] = _NO_RANK
    if kk < x.shape[1]:
        rank = np.partition(rank, kk - 1, axis=1)[:, :kk]
    if by_value:
        rank.sort(axis=1)
    selected = rank & _COLUMN_BITS
    if not by_value:
        # Placeholders (0xFFFFFFFF) exceed every real column (< 2**31), so they stay last.
        selected.sort(axis=1)
    return selected


def _clamped_ranges(begin, end, rows: int, width: int):
    """``begin``/``end`` as int64 ``(rows,)`` clamped so that ``0 <= begin <= end <= width``.

    The API rejects bad host values before calling; clamping keeps this oracle total and mirrors
    what the device does with unchecked device arrays (contract: "Inputs").
    """
    end = np.full(rows, width, np.int64) if end is None else np.asarray(end, np.int64)
    end = np.clip(end, 0, width)
    begin = np.zeros(rows, np.int64) if begin is None else np.asarray(begin, np.int64)
    return np.clip(begin, 0, end), end


def _output(buffer, shape, dtype):
    if buffer is None:
        return np.empty(shape, dtype)
    if buffer.shape != shape or buffer.dtype != dtype:
        raise ValueError(f"output buffer must be {dtype} of shape {shape}, "
                         f"got {buffer.dtype} of shape {buffer.shape}")
    return buffer


def nan_rows(x: np.ndarray, begin=None, end=None) -> np.ndarray:
    """The rows of 2-D ``x`` holding a NaN in ``[begin, end)`` (clamped as ``topk`` clamps), as
    ascending row numbers."""
    rows, width = x.shape
    begin, end = _clamped_ranges(begin, end, rows, width)
    columns = np.arange(width)
    inside = (columns >= begin[:, None]) & (columns < end[:, None])
    return np.flatnonzero((nan_mask(x) & inside).any(axis=1))


def topk(x: np.ndarray, k: int, *, begin=None, end=None, offsets=None, index_dtype="int64",
         sorted=False, sorted_index=False, return_value=True, nan_policy="propagate",
         idx_fill=2**31 - 1, val_fill=float("-inf"), out_idx=None, out_val=None,
         k_per_row=None, relative=False, page_table=None, page_size=None, row_to_batch=None,
         return_raw=False, out_raw=None):
    """Exact top-k of each row of ``x``; returns ``(values or None, indices)``, and the raw
    indices third when ``return_raw`` (contract: "Serving").

    Arguments (already validated by ``eager.py``; only cheap sanity checks here):

    - ``x``: ``(rows, width)`` float32, float16 or ``ml_dtypes.bfloat16``, any strides.
    - ``k``: ``>= 0``; ``k > width`` is allowed (every row short).
    - ``begin``, ``end``: ``None`` or ``(rows,)`` integer arrays, defaults 0 and ``width``;
      clamped to ``0 <= begin <= end <= width``. Row ``i`` selects from ``[begin[i], end[i])``.
    - ``offsets``: ``None`` or ``(rows,)`` int32/int64, added to every selected (non-fill) index
      in ``index_dtype`` arithmetic: int64 never overflows for int32 offsets, int32 wraps.
    - ``index_dtype``: ``"int32"`` or ``"int64"``.
    - ``sorted``: output by descending key, ties by ascending index. Otherwise (``sorted_index``
      or neither flag) by ascending index: the project defines the free "any order" of the
      contract as ascending index so that every backend agrees bit for bit. ``sorted_index`` is
      therefore accepted but changes nothing here; the API rejects both flags together.
    - ``return_value``: when False, values are neither computed nor written; ``None`` is returned.
    - ``nan_policy``: ``"propagate"`` (NaN ranks above +inf, all NaNs equal), ``"sentinel"``
      (a row with a NaN in ``[begin, end)`` gets ``NAN_SENTINEL_INDEX`` in every index slot, no
      offset, and a quiet NaN of the input dtype in every value slot) or ``"raise"``
      (``NaNInputError`` listing every such row, raised before any output is written).
    - ``idx_fill``, ``val_fill``: fill of the slots past a short row's elements, cast to the
      index dtype (wrapping) and to the input dtype; never offset.
    - ``out_idx``, ``out_val``: optional ``(rows, k)`` buffers of ``index_dtype`` / ``x.dtype``,
      any row stride; exactly their ``rows x k`` elements are written and the same objects are
      returned. Otherwise new C-contiguous arrays are returned.

    The serving options (contract: "Serving"), all off by default:

    - ``k_per_row``: ``None`` or ``(rows,)`` integers, clamped to ``[0, k]``: row ``i`` keeps its
      best ``k_per_row[i]`` elements in its first slots, by descending key whatever ``sorted``
      says, and its later slots are fills.
    - ``relative``: indices count from each row's ``begin`` (the column less ``begin[i]``), before
      ``offsets`` are added (``ragged_topk``).
    - ``page_table``: ``None`` or ``(batch, max_pages)`` int32, with ``page_size`` > 0 and
      ``row_to_batch`` (``None``: row ``i`` uses table row ``i``). The index computed above (the
      raw index, a logical position) becomes ``page_table[b, raw // page_size] * page_size +
      raw % page_size`` in ``index_dtype`` arithmetic (int32 wraps), ``b = row_to_batch[i]``. A
      raw index outside ``[0, max_pages * page_size)``, or a row whose ``b`` lies outside
      ``[0, batch)``, makes the slot a fill (index, raw index and value).
    - ``return_raw``, ``out_raw``: also return the raw indices (before the page lookup; fills and
      the sentinel as in the indices), in ``out_raw`` when given.

    Values are the selected elements' own bit patterns (-0.0 stays -0.0, NaN payloads are kept).
    """
    if x.ndim != 2:
        raise ValueError(f"input must be 2-D, got shape {x.shape}")
    if nan_policy not in _NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {_NAN_POLICIES}, got {nan_policy!r}")
    utype = _format(x.dtype)[0]
    rows, width = x.shape
    idx_dtype = np.dtype(index_dtype)
    indices = _output(out_idx, (rows, k), idx_dtype)
    values = _output(out_val, (rows, k), x.dtype) if return_value else None
    return_raw = return_raw or out_raw is not None
    raw = _output(out_raw, (rows, k), idx_dtype) if return_raw else None
    done = (values, indices, raw) if return_raw else (values, indices)
    if k == 0 or rows == 0:
        return done

    begin, end = _clamped_ranges(begin, end, rows, width)
    kk = min(k, width)
    selected = np.empty((rows, kk), np.uint64)
    has_nan = np.zeros(rows, bool)
    block = max(1, _BLOCK_ELEMENTS // max(width, 1))
    columns = np.arange(width)
    for r0 in range(0, rows, block):
        part = slice(r0, r0 + block)
        inside = (columns >= begin[part, None]) & (columns < end[part, None])
        # A row's own k takes its first slots, which then must be its best: value order.
        selected[part] = _select_block(x[part], inside, kk, sorted or k_per_row is not None)
        if nan_policy != "propagate":
            has_nan[part] = (nan_mask(x[part]) & inside).any(axis=1)
    if nan_policy == "raise" and has_nan.any():
        raise NaNInputError(np.flatnonzero(has_nan))

    # Slot j of row i holds a selected element iff j < min(k, end - begin) (contract: "Short rows"),
    # and j < k_per_row[i] when given.
    kept = np.minimum(end - begin, k)
    if k_per_row is not None:
        kept = np.minimum(kept, np.clip(np.asarray(k_per_row, np.int64), 0, k))
    filled = np.arange(kk) >= kept[:, None]
    # Fill slots gather column 0 (always readable when kk > 0); the gathered value is discarded.
    gather = np.where(filled, 0, selected).astype(np.int64)

    idx_fill = np.array(idx_fill, np.int64).astype(idx_dtype)
    with np.errstate(over="ignore"):
        # Every operand in the output type: int32 output wraps, int64 output never overflows.
        picked = gather.astype(idx_dtype)
        if relative:
            picked -= begin.astype(idx_dtype)[:, None]
        if offsets is not None:
            picked += np.asarray(offsets).astype(idx_dtype)[:, None]
        raw_idx = picked.copy()
        if page_table is not None:
            picked, unpaged = _page_lookup(picked, page_table, page_size, row_to_batch, idx_dtype)
            filled |= unpaged
    result_idx = _with_fills(picked, filled, idx_fill, k, has_nan)
    if raw is not None:
        raw[...] = _with_fills(raw_idx, filled, idx_fill, k, has_nan)

    if values is not None:
        # Gather and assemble on the bit patterns so that every value is copied bit-exactly.
        bits = x.view(utype)
        with np.errstate(over="ignore"):  # a fill beyond the dtype becomes its infinity (contract.md)
            val_fill = np.array(val_fill).astype(x.dtype).view(utype)
        result_val = np.empty((rows, k), utype)
        result_val[:, :kk] = np.where(filled, val_fill, np.take_along_axis(bits, gather, axis=1))
        result_val[:, kk:] = val_fill
        result_val[has_nan] = np.array(np.nan, x.dtype).view(utype)
        values.view(utype)[...] = result_val

    indices[...] = result_idx
    return done


def _with_fills(picked, filled, idx_fill, k: int, has_nan) -> np.ndarray:
    """``(rows, k)`` indices: ``picked`` where not ``filled``, fills elsewhere and past ``kk``, the
    sentinel in NaN rows."""
    rows, kk = picked.shape
    out = np.empty((rows, k), picked.dtype)
    out[:, :kk] = np.where(filled, idx_fill, picked)
    out[:, kk:] = idx_fill
    out[has_nan] = NAN_SENTINEL_INDEX
    return out


def _page_lookup(raw, page_table, page_size: int, row_to_batch, idx_dtype):
    """Each raw index (a logical position) through its row's page-table row: ``(indices,
    unpaged)``, where ``unpaged`` marks the positions with no page (outside the table, or the
    row's table row outside ``[0, batch)``), which become fills."""
    table = np.asarray(page_table)
    batch, max_pages = table.shape
    rows = raw.shape[0]
    b = np.arange(rows) if row_to_batch is None else np.asarray(row_to_batch, np.int64)
    position = raw.astype(np.int64)
    unpaged = (position < 0) | (position >= max_pages * page_size) | ((b < 0) | (b >= batch))[:, None]
    page = np.where(unpaged, 0, position // page_size)
    entry = table[np.clip(b, 0, max(batch - 1, 0))[:, None], page] if batch and max_pages else np.zeros_like(page)
    size = np.array(page_size).astype(idx_dtype)
    indices = entry.astype(idx_dtype) * size + (np.where(unpaged, 0, position) % page_size).astype(idx_dtype)
    return indices, unpaged


def ragged_topk(scores: np.ndarray, cu_seqlens, k: int, *, offsets=None, k_per_row=None, row_to_batch=None,
                **options):
    """``topk`` of rows packed back to back in 1-D ``scores``: row ``i`` is
    ``scores[cu_seqlens[i]:cu_seqlens[i + 1]]`` (clamped into ``[0, len(scores)]``, and the end
    to at least the start), its indices counted from its start (contract: "Serving").

    One row at a time, through ``topk`` on that row alone: the oracle of the strided,
    row-relative way ``deepselect_rt.ragged_topk`` runs. Same options and results as ``topk``."""
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {scores.shape}")
    cu = np.clip(np.asarray(cu_seqlens, np.int64), 0, len(scores))
    rows = len(cu) - 1
    if options.get("nan_policy") == "raise":  # every NaN row of the batch, before any output
        nan = nan_mask(scores)
        held = [i for i in range(rows) if nan[cu[i]:max(cu[i + 1], cu[i])].any()]
        if held:
            raise NaNInputError(np.array(held))
    picked = lambda a, i: None if a is None else np.asarray(a)[i:i + 1]  # noqa: E731
    parts = []
    for i in range(rows):
        start = cu[i]
        stop = max(cu[i + 1], start)
        b = np.array([i]) if row_to_batch is None else picked(row_to_batch, i)
        parts.append(topk(scores[None, start:stop], k, offsets=picked(offsets, i), k_per_row=picked(k_per_row, i),
                          row_to_batch=b if options.get("page_table") is not None else None, **options))
    if not parts:
        empty = topk(scores[None, :0][:0], k, **options)
        return empty
    return tuple(None if p[0] is None else np.concatenate(p) for p in zip(*parts))
