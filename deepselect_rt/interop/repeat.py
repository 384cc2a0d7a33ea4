"""Repeated calls on CUDA arrays skip the checks and the plan, for torch tensors and CuPy arrays.

A call's key holds everything its checks, plan and argument block depend on: each array's
(data pointer, shape, strides, dtype, device, and for torch lazy negation and requires_grad)
and every other argument with its type, the serving options' (page table, per-row k, raw
indices) included. The first call with a key takes the whole path (eager.topk); once that
succeeded, its launch is remembered, and a later call with the same key only allocates the
outputs the caller did not give (in the caller's framework), reads that framework's current
stream and launches. Device arrays' values are never checked on the host (the kernels clamp
them), so a new page table or per-row k written into the same tensor needs no new check. Not
remembered: host-side index arrays (their values
are checked), explicit streams, nan_policy="raise_sync" (it synchronises), rows split through a
workspace (allocated per call), arrays of other frameworks (JAX: its arrays are immutable and
its pending work is ordered by the DLPack export), and mixed frameworks. A remembered call
still reports NaN rows that earlier calls met.
"""

from __future__ import annotations

import sys

from .. import nan_record
from .outputs import torch_stream_getter

_MAX_ENTRIES = 1024
_entries: dict = {}


class _Torch:
    """torch tensors on CUDA: keyed by their attributes, outputs from torch's caching allocator."""

    def __init__(self, torch):
        self.torch = torch
        self.stream_on = torch_stream_getter()  # looked up once: it runs every call

    def key(self, t):
        if type(t) is not self.torch.Tensor or not t.is_cuda:
            return None
        return t.data_ptr(), t.shape, t.stride(), t.dtype, t.get_device(), t.is_neg(), t.requires_grad

    @staticmethod
    def device(t):
        return t.device

    def empty(self, shape, dtype, device):
        out = self.torch.empty(shape, dtype=dtype, device=device)
        return out, out.data_ptr()

    def stream(self, device) -> int:
        return self.stream_on(device.index)

    @staticmethod
    def ordinal(device) -> int:
        return device.index


class _Cupy:
    """CuPy arrays: keyed by their attributes, outputs from CuPy's memory pool."""

    def __init__(self, cupy):
        self.cupy = cupy

    def key(self, a):
        if type(a) is not self.cupy.ndarray:
            return None
        return a.data.ptr, a.shape, a.strides, a.dtype, a.device.id

    @staticmethod
    def device(a):
        return a.device

    def empty(self, shape, dtype, device):
        with device:
            out = self.cupy.empty(shape, dtype)
        return out, out.data.ptr

    def stream(self, device) -> int:
        with device:
            return self.cupy.cuda.get_current_stream().ptr

    @staticmethod
    def ordinal(device) -> int:
        return device.id


_frameworks: dict = {}  # module name -> its adapter
_adapters: dict = {}    # type of an argument -> its framework's adapter (one dict lookup a call)


def _adapter(obj):
    """The adapter of ``obj``'s framework when it is one the memo serves, else None."""
    kind = type(obj)
    adapter = _adapters.get(kind)
    if adapter is not None:
        return adapter
    name = kind.__module__.partition(".")[0]
    if name not in ("torch", "cupy") or name not in sys.modules:
        return None
    adapter = _frameworks.get(name)
    if adapter is None:
        adapter = _frameworks[name] = (_Torch if name == "torch" else _Cupy)(sys.modules[name])
    _adapters[kind] = adapter
    return adapter


class _Entry:
    __slots__ = ("again", "adapter", "shape", "device", "idx_dtype", "val_dtype", "raw", "raw_dtype", "nan_device")

    def __init__(self, again, adapter, shape, device, idx_dtype, val_dtype, raw, raw_dtype):
        self.again = again              # what the backend's run returned
        self.adapter = adapter          # the input's framework
        self.shape = shape              # (rows, k) of the outputs
        self.device = device            # the framework's device object of the input
        self.idx_dtype = idx_dtype      # framework dtype to allocate indices in, or None (caller's)
        self.val_dtype = val_dtype      # framework dtype to allocate values in, or None (caller's, or none)
        self.raw = raw                  # whether the call returns raw indices, a third output
        self.raw_dtype = raw_dtype      # framework dtype to allocate them in, or None (caller's, or none)
        self.nan_device = ("cuda", adapter.ordinal(device))  # the NaN record's key


def key(input, k, sorted, begin, end, indices_type, sorted_index, output_idx, output_val, offsets,
        idx_fill, val_fill, return_value, abort_when_nan_found, nan_policy, stream, serving=None):
    """The memo key of a call, or None when the call is not one the memo serves. ``serving``:
    None, or the serving options ``(page_table, page_size, row_to_batch, k_per_row,
    return_raw_indices, output_raw_idx)``."""
    if stream is not None:
        return None
    adapter = _adapter(input)
    if adapter is None:
        return None
    tensors = (input, begin, end, offsets, output_idx, output_val)
    scalars = (k, sorted, indices_type, sorted_index, idx_fill, val_fill, return_value, abort_when_nan_found,
               nan_policy)
    if serving is not None:
        page_table, page_size, row_to_batch, k_per_row, return_raw, output_raw = serving
        tensors += (page_table, row_to_batch, k_per_row, output_raw)
        scalars += (page_size, return_raw)
    array_key = adapter.key
    arrays = []
    for t in tensors:
        if t is None:
            arrays.append(None)
        else:
            t_key = array_key(t)
            if t_key is None:
                return None
            arrays.append(t_key)
    arrays.append(scalars)
    arrays.append(tuple(map(type, scalars)))
    return tuple(arrays)


def run(call_key, output_idx, output_val, output_raw=None):
    """``(values, indices)`` (and the raw indices, for a call that returns them) of a remembered
    call, launched now; None when ``call_key`` is not remembered (or no longer valid), and the
    caller takes the whole path."""
    try:
        entry = _entries.get(call_key)
    except TypeError:  # an unhashable argument: never remembered
        return None
    if entry is None:
        return None
    nan_record.raise_pending(entry.nan_device)
    adapter, device = entry.adapter, entry.device
    idx, val, raw = output_idx, output_val, output_raw
    idx_ptr = val_ptr = raw_ptr = 0
    if entry.idx_dtype is not None:
        idx, idx_ptr = adapter.empty(entry.shape, entry.idx_dtype, device)
    if entry.val_dtype is not None:
        val, val_ptr = adapter.empty(entry.shape, entry.val_dtype, device)
    if entry.raw_dtype is not None:
        raw, raw_ptr = adapter.empty(entry.shape, entry.raw_dtype, device)
    if not entry.again(adapter.stream(device), idx_ptr, val_ptr, raw_ptr):
        del _entries[call_key]
        return None
    # val is None without values: output_val must then be None too
    return (val, idx, raw) if entry.raw else (val, idx)


def remember(call_key, again, x, out_idx, out_val, out_raw, allocated_idx: bool, allocated_val: bool,
             allocated_raw: bool) -> None:
    """Remember a call that took the whole path and launched with ``again`` (the CUDA backend's
    ``run`` result); ``out_raw``: its raw indices, or None when it returns none; ``allocated_*``:
    whether its outputs were allocated by us."""
    adapter = _adapter(x)
    if adapter is None or (allocated_idx and _adapter(out_idx) is not adapter):
        return
    if len(_entries) >= _MAX_ENTRIES:
        _entries.clear()
    try:
        _entries[call_key] = _Entry(again, adapter, tuple(out_idx.shape), adapter.device(x),
                                    out_idx.dtype if allocated_idx else None,
                                    out_val.dtype if allocated_val else None,
                                    out_raw is not None, out_raw.dtype if allocated_raw else None)
    except TypeError:  # an unhashable argument
        pass


def clear() -> None:
    """Forget every remembered call."""
    _entries.clear()
