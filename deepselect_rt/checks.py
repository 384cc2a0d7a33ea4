"""The contract's argument rules (docs/contract.md), on TensorViews and plain values.

Every rule is a plain ``if ... raise`` (it must survive ``python -O``) and runs before any
launch: TypeError for a wrong type or dtype, ValueError for a wrong shape, range or combination,
each naming the argument and what is accepted.
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
from typing import NamedTuple

import numpy as np

from . import dtypes
from .interop.views import INDEX_DTYPES_TEXT, VALUE_DTYPES_TEXT, TensorView, host_array, restrided, view_of
from .request import NAN_POLICIES

INT32_MAX = 2**31 - 1
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}



def _flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def _real(value, name: str) -> float:
    # An ml_dtypes bfloat16 scalar is a NumPy scalar but not registered as numbers.Real.
    real = isinstance(value, numbers.Real) or (isinstance(value, np.generic) and value.dtype.name == "bfloat16")
    if isinstance(value, (bool, np.bool_)) or not real:
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # beyond every float (a huge int): the infinity a cast would give
        return math.inf if value > 0 else -math.inf


def _as_int(value) -> int | None:
    """``value`` as an int when it is an integer (Python or NumPy, or a 0-d integer array of any
    framework; a bool is not), else None."""
    if type(value) is int:  # the common case, without an attribute lookup that fails
        return value
    if isinstance(value, (bool, np.bool_)):
        return None
    shape = getattr(value, "shape", None)
    if shape is not None and (len(shape) != 0 or "bool" in str(getattr(value, "dtype", ""))):
        return None  # torch's __index__ takes any one-element tensor, bool ones too
    try:
        return operator.index(value)
    except TypeError:
        return None


def _integer(value, name: str) -> int:
    number = _as_int(value)
    if number is None:
        kind = type(value).__name__
        jax = sys.modules.get("jax")
        if jax is not None and isinstance(value, jax.core.Tracer):  # its value is unknown while tracing
            raise TypeError(f"{name} must be a Python integer known while tracing, got a traced JAX value; "
                            f"pass it as a static argument (jax.jit(f, static_argnums=...)) or close over it")
        dtype = getattr(value, "dtype", None)
        shape = getattr(value, "shape", None)
        if dtype is not None and shape is not None:
            kind += f" of dtype {dtype} and shape {tuple(shape)}"
        raise TypeError(f"{name} must be an integer (a Python or NumPy int, or a 0-d integer array), got {kind}")
    return number


_INDEX_DTYPE_NAMES: dict = {}


def _index_dtype(value) -> str:
    try:
        return _INDEX_DTYPE_NAMES[value]  # memoised: dtype objects and strings repeat every call
    except (KeyError, TypeError):
        pass
    try:
        name = dtypes.canonical(value)
    except TypeError:
        name = None
    if name not in dtypes.INDEX_DTYPES:
        raise TypeError(f"indices_type must be int32 or int64 (a string, NumPy or framework dtype), got {value!r}")
    try:
        _INDEX_DTYPE_NAMES[value] = name
    except TypeError:  # unhashable but valid (some framework dtype wrappers): just not memoised
        pass
    return name


def _nan_policy(nan_policy, abort_when_nan_found) -> str:
    abort = _flag(abort_when_nan_found, "abort_when_nan_found")
    if nan_policy is None:
        return "raise" if abort else "sentinel"
    if not isinstance(nan_policy, str):
        raise TypeError(f"nan_policy must be a string or None, got {type(nan_policy).__name__}")
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {', '.join(map(repr, NAN_POLICIES))} or None, got {nan_policy!r}")
    return nan_policy


def check_input(x: TensorView) -> None:
    if len(x.shape) != 2:
        raise ValueError(f"input must be 2-D (rows, width), got shape {x.shape}")
    if x.dtype not in dtypes.INPUT_DTYPES:
        raise TypeError(f"input must have dtype {VALUE_DTYPES_TEXT}, got {x.dtype}")
    rows, width = x.shape
    if width > 1 and rows > 0 and x.strides[1] != 1:
        raise ValueError(f"input's last dimension must have stride 1, got strides {x.strides}")
    if width > INT32_MAX:
        raise ValueError(f"input width must be at most 2**31 - 1, got {width}")
    _check_aligned(x, "input")


def _check_aligned(view: TensorView, name: str) -> None:
    # The kernels read and write whole elements: a misaligned device address faults, and the
    # fault leaves the CUDA context unusable. One rule for every backend (contract.md).
    if view.ptr % view.itemsize:
        raise ValueError(f"{name} data pointer {view.ptr:#x} is not aligned to its {view.itemsize}-byte elements")


def _same_device(view: TensorView, x: TensorView, name: str) -> None:
    if (view.device_type, view.device_id) != (x.device_type, x.device_id):
        raise ValueError(f"{name} is on {view.device_type}:{view.device_id} but input is on "
                         f"{x.device_type}:{x.device_id}; they must be on the same device")


def row_vector(obj, name: str, x: TensorView, stream: int | None) -> TensorView | None:
    if obj is None:
        return None
    view = view_of(obj, name=name, stream=stream, takes=INDEX_DTYPES_TEXT)
    check_row_vector(view, name, x)
    _same_device(view, x, name)
    return view


def check_row_vector(view: TensorView, name: str, x: TensorView) -> None:
    """A ``(rows,)`` int32/int64 vector's rules, device aside (``row_vector`` adds it; under
    jax.jit the views are abstract)."""
    if view.dtype not in dtypes.INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype {INDEX_DTYPES_TEXT}, got {view.dtype}")
    if view.shape != (x.shape[0],):
        raise ValueError(f"{name} must have shape (rows,) = ({x.shape[0]},), got {view.shape}")
    if x.shape[0] > 1 and view.strides[0] != 1:
        raise ValueError(f"{name} must be contiguous (stride 1), got stride {view.strides[0]}")
    _check_aligned(view, name)


def host_values(view: TensorView | None) -> np.ndarray | None:
    """A row vector's values when they can be read without a sync (host memory), else None."""
    return host_array(view) if view is not None and view.device_type == "cpu" else None


def check_ranges(b: np.ndarray | None, e: np.ndarray | None, x: TensorView) -> None:
    """begin and end's host values (``host_values``) are checked (no sync needed); device ones
    (None here) are clamped by the kernel."""
    width = x.shape[1]
    if e is not None and len(e) and (e.min() < 0 or e.max() > width):
        raise ValueError(f"end must lie in [0, width={width}], got values in [{e.min()}, {e.max()}]")
    if b is not None and len(b) and b.min() < 0:
        raise ValueError(f"begin must be >= 0, got minimum {b.min()}")
    if b is not None and len(b):
        upper = e if e is not None else width
        bad = np.nonzero(b > upper)[0]
        if len(bad):
            row = int(bad[0])
            limit = f"end {int(e[row])}" if e is not None else f"width {width}"
            raise ValueError(f"begin must be <= end in every row (and <= width): row {row} has begin "
                             f"{int(b[row])} > {limit}")


def check_offsets(offsets, b: np.ndarray | None, e: np.ndarray | None, index_dtype: str, x: TensorView,
                  relative: bool = False) -> None:
    """Host offsets must keep every valid index of row i, ``[begin[i], end[i]) + offsets[i]``, in
    the index type (int64 never wraps either); rows with no element take no offset.

    Runs after ``check_ranges`` (0 <= begin, end <= width keeps the int64 arithmetic exact).
    Host offsets mean a host input, so ``b`` and ``e``, begin and end's host values, are known
    where those were given (every row vector lies on the input's device) and each row's own
    range is checked; ``relative`` (ragged_topk) counts each row's columns from its begin."""
    o = host_values(offsets)
    if o is None:
        return
    o, first, stop = (a.astype(np.int64) for a in np.broadcast_arrays(
        o, 0 if b is None else b, x.shape[1] if e is None else e))
    if relative:
        first, stop = np.zeros_like(first), stop - first
    rows = np.flatnonzero(stop > first)
    o, first, last = o[rows], first[rows], stop[rows] - 1
    low, high = _INT_RANGE[index_dtype]
    bad = o > high - last
    if index_dtype == "int32":  # an int64 offset plus a column >= 0 cannot fall below int64
        bad |= o < low - first
    if bad.any():
        i = int(np.argmax(bad))
        row, off, lo, hi = int(rows[i]), int(o[i]), int(first[i]), int(last[i])
        hint = "; pass indices_type='int64'" if index_dtype == "int32" else ""
        raise ValueError(f"output_idx_offset[{row}] = {off} takes row {row}'s indices [{lo}, {hi}] to "
                         f"[{lo + off}, {hi + off}], outside {index_dtype}'s [{low}, {high}]{hint}")


def _span(v: TensorView) -> tuple[int, int]:
    """Byte range [start, stop) a view (any rank: matrices and row vectors) can touch, for any
    signed strides (plain arithmetic: this runs per call)."""
    first = last = 0
    for extent, stride in zip(v.shape, v.strides):
        if not extent:
            return v.ptr, v.ptr
        step = (extent - 1) * stride
        if step < 0:
            first += step
        else:
            last += step
    return v.ptr + first * v.itemsize, v.ptr + (last + 1) * v.itemsize


def _overlaps(a: TensorView, b: TensorView) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a.device_id == b.device_id and a0 < b1 and b0 < a1


def caller_output(obj, name: str, dtype: str, rows: int, k: int, x: TensorView,
                   others: dict[str, TensorView | None], stream: int | None) -> TensorView:
    """Check a caller buffer. ``others``: the call's other arrays by argument name (input, begin,
    end, output_idx_offset, the other output), which it must not overlap: on a GPU one CTA would
    write them while another reads them."""
    view = view_of(obj, name=name, stream=stream, takes=dtype, output=True)  # the one dtype written there
    if view.framework == "jax":
        raise TypeError(f"{name} is a JAX array, which is immutable; leave {name}=None and use the returned array")
    if not view.writable:
        raise ValueError(f"{name} is read-only")
    if view.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {view.dtype}")
    if view.shape != (rows, k):
        raise ValueError(f"{name} must have shape (rows, topk) = ({rows}, {k}), got {view.shape}")
    _same_device(view, x, name)
    # Empty arrays report any strides (NumPy: zeros).
    if rows > 0 and k > 1 and view.strides[1] != 1:
        raise ValueError(f"{name}'s last dimension must have stride 1, got strides {view.strides}")
    _check_aligned(view, name)
    if rows > 1 and k > 0 and abs(view.strides[0]) < k:
        raise ValueError(f"{name}'s rows overlap: |row stride| {abs(view.strides[0])} < topk {k}")
    for other, other_view in others.items():
        if other_view is not None and _overlaps(view, other_view):
            raise ValueError(f"{name} must not alias {other} (their memory overlaps)")
    return view


def stream_handle(stream) -> int | None:
    """The CUDA stream handle ``stream`` names (None for None: each view's framework's current
    stream), checked for every input, NumPy included, where it goes unused. Raises
    TypeError/ValueError naming it."""
    if stream is None:
        return None
    handle, source = _as_int(stream), "stream"
    if handle is None:
        handle, source = _stream_object_handle(stream)
    if not 0 <= handle < 2**64:
        raise ValueError(f"{source} must be a CUDA stream handle in [0, 2**64), got {handle}")
    return handle


def _stream_object_handle(stream) -> tuple[int, str]:
    """A stream object's handle, and where it came from (for the range error)."""
    if hasattr(stream, "__cuda_stream__"):
        protocol = stream.__cuda_stream__
        if not callable(protocol):
            raise TypeError(f"stream.__cuda_stream__ must be a method returning (version, handle), got a "
                            f"non-callable {type(protocol).__name__}")
        pair = protocol()
        version, handle = map(_as_int, pair) if isinstance(pair, tuple) and len(pair) == 2 else (None, None)
        if version is None or handle is None:
            raise TypeError(f"stream.__cuda_stream__() must return (version, handle), two integers, got {pair!r}")
        return handle, "stream.__cuda_stream__()[1]"
    for attr in ("cuda_stream", "ptr", "handle"):
        handle = _as_int(getattr(stream, attr, None))
        if handle is not None:
            return handle, f"stream.{attr}"
    raise TypeError("stream must be None, an integer handle, or a stream object with __cuda_stream__() "
                    "returning (version, handle) (the CUDA stream protocol) or an integer .cuda_stream, .ptr or "
                    f".handle (torch, CuPy); got {type(stream).__name__}")


class Scalars(NamedTuple):
    """The non-tensor arguments of a call, checked and normalised."""

    k: int
    sorted: bool
    sorted_index: bool
    return_value: bool
    index_dtype: str
    nan_policy: str
    idx_fill: int
    val_fill: float


def scalar_arguments(topk, sorted, sorted_index, return_value, indices_type, nan_policy, abort_when_nan_found,
                     idx_oob_fill_value, value_oob_fill_value, output_val) -> Scalars:
    """Check the non-tensor arguments (the eager path and the torch.compile path share this).

    Raises TypeError/ValueError naming the argument, as ``topk`` documents.
    """
    k = _integer(topk, "topk")
    if not 0 <= k <= INT32_MAX:
        raise ValueError(f"topk must be in [0, 2**31 - 1], got {k}")
    sorted_ = _flag(sorted, "sorted")
    sorted_index_ = _flag(sorted_index, "sorted_index")
    if sorted_ and sorted_index_:
        raise ValueError("sorted and sorted_index cannot both be True: choose value order or index order")
    return_value_ = _flag(return_value, "return_value")
    index_dtype = _index_dtype(indices_type)
    policy = _nan_policy(nan_policy, abort_when_nan_found)
    idx_fill = _integer(idx_oob_fill_value, "idx_oob_fill_value")
    lo, hi = _INT_RANGE[index_dtype]
    if not lo <= idx_fill <= hi:
        raise ValueError(f"idx_oob_fill_value {idx_fill} does not fit {index_dtype}")
    val_fill = _real(value_oob_fill_value, "value_oob_fill_value")
    if output_val is not None and not return_value_:
        raise ValueError("output_val was given but return_value=False: pass one or the other")
    return Scalars(k, sorted_, sorted_index_, return_value_, index_dtype, policy, idx_fill, val_fill)


# --- the serving options (contract.md, "Serving") ------------------------------------------------

class Serving(NamedTuple):
    """The serving options of a call, checked: views on the input's device, or None."""

    page_table: TensorView | None
    page_size: int
    row_to_batch: TensorView | None
    k_per_row: TensorView | None
    return_raw: bool


def serving_arguments(page_table, page_size, row_to_batch, k_per_row, return_raw_indices, output_raw_idx, k: int,
                      sorted_index: bool, x: TensorView, stream: int | None) -> Serving:
    """Check page_table, page_size, row_to_batch, k_per_row and return_raw_indices against the
    input ``x`` (rows, width) and ``k``; host values are checked, device ones are left to the
    kernel's clamps (contract.md). Raises TypeError/ValueError naming the argument."""
    return_raw = _flag(return_raw_indices, "return_raw_indices")
    if output_raw_idx is not None and not return_raw:
        raise ValueError("output_raw_idx was given but return_raw_indices=False: pass return_raw_indices=True")
    rows = x.shape[0]
    table = None
    size = 0
    if page_table is None:
        if page_size is not None:
            raise ValueError("page_size was given without page_table")
        if row_to_batch is not None:
            raise ValueError("row_to_batch was given without page_table")
    else:
        table = _page_table(page_table, x, stream)
        if page_size is None:
            raise ValueError("page_table needs page_size (the positions a page holds)")
        size = _integer(page_size, "page_size")
        if not 1 <= size <= INT32_MAX:
            raise ValueError(f"page_size must be in [1, 2**31 - 1], got {size}")
    batch = 0 if table is None else table.shape[0]
    r2b = row_vector(row_to_batch, "row_to_batch", x, stream)
    if table is not None and r2b is None and batch < rows:
        raise ValueError(f"page_table has {batch} rows (batch) but input has {rows}: pass row_to_batch, or a "
                         "table row for every input row")
    b = host_values(r2b)
    if b is not None and len(b) and (b.min() < 0 or b.max() >= batch):
        row = int(np.flatnonzero((b < 0) | (b >= batch))[0])
        raise ValueError(f"row_to_batch must lie in [0, batch={batch}): row {row} has {int(b[row])}")
    kpr = row_vector(k_per_row, "k_per_row", x, stream)
    if kpr is not None and sorted_index:
        raise ValueError("k_per_row returns each row's best k_i by value: sorted_index=True is not supported with it")
    ks = host_values(kpr)
    if ks is not None and len(ks) and (ks.min() < 0 or ks.max() > k):
        row = int(np.flatnonzero((ks < 0) | (ks > k))[0])
        raise ValueError(f"k_per_row must lie in [0, topk={k}]: row {row} has {int(ks[row])}")
    return Serving(table, size, r2b, kpr, return_raw)


def _page_table(obj, x: TensorView, stream: int | None) -> TensorView:
    view = view_of(obj, name="page_table", stream=stream, takes="int32")
    if view.dtype != "int32":
        raise TypeError(f"page_table must have dtype int32, got {view.dtype}")
    if len(view.shape) != 2:
        raise ValueError(f"page_table must be 2-D (batch, max_pages), got shape {view.shape}")
    batch, pages = view.shape
    if batch > 0 and pages > 1 and view.strides[1] != 1:
        raise ValueError(f"page_table's last dimension must have stride 1, got strides {view.strides}")
    _check_aligned(view, "page_table")
    _same_device(view, x, "page_table")
    return view


def check_page_positions(serving: Serving, b: np.ndarray | None, e: np.ndarray | None, offsets: TensorView | None,
                         begin_given: bool, end_given: bool, relative: bool, x: TensorView) -> None:
    """Every row's raw indices (its logical positions) must lie in its page table, ``[0,
    max_pages * page_size)``, where that is known on the host: ``b``, ``e`` are begin and end's
    host values (None: not given, or on the device), ``relative`` counts from begin (ragged).
    Device values are not read; the kernel writes a fill for a position past the table."""
    if serving.page_table is None:
        return
    width = x.shape[1]
    capacity = serving.page_table.shape[1] * serving.page_size
    o = host_values(offsets)
    if (end_given and e is None) or (offsets is not None and o is None) or (relative and begin_given and b is None):
        return  # some bound lives on the device: the kernel's fills guard the table
    rows = x.shape[0]
    first = np.zeros(rows, np.int64) if b is None else b.astype(np.int64)
    stop = np.full(rows, width, np.int64) if e is None else e.astype(np.int64)
    off = np.zeros(rows, np.int64) if o is None else o.astype(np.int64)
    if relative:
        first, stop = np.zeros(rows, np.int64), stop - first
    held = np.flatnonzero(stop > first)
    low, high = first[held] + off[held], stop[held] - 1 + off[held]
    bad = (low < 0) | (high >= capacity)
    if bad.any():
        i = int(np.argmax(bad))
        row = int(held[i])
        shorter = "shorter rows in cu_seqlens" if relative else "end"
        fix = "a non-negative output_idx_offset" if low[i] < 0 else f"{shorter} (or a larger table)"
        raise ValueError(f"row {row}'s positions [{int(low[i])}, {int(high[i])}] (its column range"
                         f"{' from begin' if relative else ''}{' plus output_idx_offset' if o is not None else ''}) "
                         f"do not fit its page table's [0, max_pages * page_size = {capacity}); pass {fix}")


def ragged_views(flat: TensorView, cu_seqlens, stream: int | None) -> tuple[TensorView, TensorView, TensorView]:
    """``(x, begin, end)`` of ``ragged_topk``: the 1-D ``flat`` as ``(rows, total)`` rows of stride 0,
    and ``cu_seqlens[:-1]``, ``cu_seqlens[1:]`` as views. Host offsets must rise from >= 0 to at most
    ``total``; device ones are clamped by the kernel."""
    if len(flat.shape) != 1:
        raise ValueError(f"ragged_topk's input must be 1-D (total,), the rows back to back; got shape {flat.shape}")
    if flat.dtype not in dtypes.INPUT_DTYPES:
        raise TypeError(f"input must have dtype {VALUE_DTYPES_TEXT}, got {flat.dtype}")
    total = flat.shape[0]
    if total > 1 and flat.strides[0] != 1:
        raise ValueError(f"ragged_topk's input must be contiguous (stride 1), got stride {flat.strides[0]}")
    if cu_seqlens is None:
        raise TypeError("ragged_topk needs cu_seqlens, the (rows + 1,) offsets of the rows")
    cu = view_of(cu_seqlens, name="cu_seqlens", stream=stream, takes=INDEX_DTYPES_TEXT)
    if cu.dtype not in dtypes.INDEX_DTYPES:
        raise TypeError(f"cu_seqlens must have dtype {INDEX_DTYPES_TEXT}, got {cu.dtype}")
    if len(cu.shape) != 1 or cu.shape[0] < 1:
        raise ValueError(f"cu_seqlens must have shape (rows + 1,), at least one offset; got {cu.shape}")
    if cu.shape[0] > 1 and cu.strides[0] != 1:
        raise ValueError(f"cu_seqlens must be contiguous (stride 1), got stride {cu.strides[0]}")
    _check_aligned(cu, "cu_seqlens")
    _same_device(cu, flat, "cu_seqlens")
    offsets = host_values(cu)
    if offsets is not None and len(offsets):
        steps = np.diff(offsets.astype(np.int64))
        if offsets[0] < 0 or offsets[-1] > total or (steps < 0).any():
            raise ValueError(f"cu_seqlens must rise from >= 0 to <= len(input) = {total}, got {offsets.tolist()[:8]}"
                             f"{' ...' if len(offsets) > 8 else ''}")
    rows = cu.shape[0] - 1
    x = restrided(flat, (rows, total), (0, 1))
    return x, restrided(cu, (rows,), (1,)), restrided(cu, (rows,), (1,), offset=1)
