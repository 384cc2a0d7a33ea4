"""Repeated torch calls on CUDA skip the checks and the plan.

A call's key holds everything its checks, plan and argument block depend on: each tensor's
(data pointer, shape, strides, dtype, device, lazy negation, requires_grad) and every other
argument with its type. The first call with a key takes the whole path (eager.topk); once
that succeeded, its launch is remembered, and a later call with the same key only allocates the
outputs the caller did not give, reads torch's current stream and launches. Not remembered:
host-side index arrays (their values are checked), explicit streams, nan_policy="raise_sync"
(it synchronises), rows split through a workspace (allocated per call), and anything but plain
torch.Tensor objects. A remembered call still reports NaN rows that earlier calls met.
"""

from __future__ import annotations

import sys

from .. import nan_record
from .outputs import torch_current_stream

_MAX_ENTRIES = 1024
_entries: dict = {}


class _Entry:
    __slots__ = ("again", "shape", "device", "idx_dtype", "val_dtype")

    def __init__(self, again, shape, device, idx_dtype, val_dtype):
        self.again = again              # what the backend's run returned
        self.shape = shape              # (rows, k) of the outputs
        self.device = device            # torch.device of the input
        self.idx_dtype = idx_dtype      # torch dtype to allocate indices in, or None (caller's)
        self.val_dtype = val_dtype      # torch dtype to allocate values in, or None (caller's, or none)


def _tensor_key(t):
    return t.data_ptr(), t.shape, t.stride(), t.dtype, t.get_device(), t.is_neg(), t.requires_grad


def key(input, k, sorted, begin, end, indices_type, sorted_index, output_idx, output_val, offsets,
        idx_fill, val_fill, return_value, abort_when_nan_found, nan_policy, stream):
    """The memo key of a call, or None when the call is not one the memo serves."""
    torch = sys.modules.get("torch")
    if torch is None or stream is not None or type(input) is not torch.Tensor or not input.is_cuda:
        return None
    tensors = [_tensor_key(input)]
    for t in (begin, end, offsets, output_idx, output_val):
        if t is None:
            tensors.append(None)
        elif type(t) is torch.Tensor and t.is_cuda:
            tensors.append(_tensor_key(t))
        else:
            return None
    scalars = (k, sorted, indices_type, sorted_index, idx_fill, val_fill, return_value, abort_when_nan_found,
               nan_policy)
    return (*tensors, scalars, tuple(map(type, scalars)))


def run(call_key, output_idx, output_val):
    """``(values, indices)`` of a remembered call, launched now; None when ``call_key`` is not
    remembered (or no longer valid), and the caller takes the whole path."""
    try:
        entry = _entries.get(call_key)
    except TypeError:  # an unhashable argument: never remembered
        return None
    if entry is None:
        return None
    nan_record.raise_pending(("cuda", entry.device.index))
    torch = sys.modules["torch"]
    idx, val = output_idx, output_val
    idx_ptr = val_ptr = 0
    if entry.idx_dtype is not None:
        idx = torch.empty(entry.shape, dtype=entry.idx_dtype, device=entry.device)
        idx_ptr = idx.data_ptr()
    if entry.val_dtype is not None:
        val = torch.empty(entry.shape, dtype=entry.val_dtype, device=entry.device)
        val_ptr = val.data_ptr()
    if not entry.again(torch_current_stream(entry.device.index), idx_ptr, val_ptr):
        del _entries[call_key]
        return None
    return val, idx  # val is None without values: output_val must then be None too


def remember(call_key, again, x, out_idx, out_val, allocated_idx: bool, allocated_val: bool) -> None:
    """Remember a call that took the whole path and launched with ``again`` (the CUDA backend's
    ``run`` result); ``allocated_*``: whether its outputs were allocated by us."""
    if len(_entries) >= _MAX_ENTRIES:
        _entries.clear()
    try:
        _entries[call_key] = _Entry(again, tuple(out_idx.shape), x.device, out_idx.dtype if allocated_idx else None,
                                    out_val.dtype if allocated_val else None)
    except TypeError:  # an unhashable argument
        pass


def clear() -> None:
    """Forget every remembered call."""
    _entries.clear()
