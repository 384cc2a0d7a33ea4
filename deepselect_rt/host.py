"""The CPU backend: runs the NumPy reference on host tensors, writing into the outputs in place.

Under nan_policy="raise" NaN rows get the sentinel and go to the CPU's NaN record
(``nan_record.py``), reported by the next call or ``check_nan`` as on a GPU; "raise_sync"
raises at once.
"""

from __future__ import annotations

import numpy as np

from . import nan_record, reference
from .interop.views import host_array
from .request import TopkRequest

CPU = ("cpu", 0)


def _opt(view):
    return None if view is None else host_array(view)


def _new_record() -> np.ndarray:
    return np.zeros((nan_record.CAPACITY, nan_record.WORDS), np.uint32)


def run(req: TopkRequest) -> None:
    """Compute ``req`` on the host; raises NaNInputError for nan_policy="raise_sync"."""
    x, begin, end = host_array(req.x), _opt(req.begin), _opt(req.end)
    policy = "sentinel" if req.nan_policy == "raise" else req.nan_policy.removesuffix("_sync")
    reference.topk(
        x, req.k, begin=begin, end=end, offsets=_opt(req.offsets),
        index_dtype=req.index_dtype, sorted=req.sorted, sorted_index=req.sorted_index,
        return_value=req.return_value, nan_policy=policy, idx_fill=req.idx_fill,
        val_fill=req.val_fill, out_idx=host_array(req.out_idx), out_val=_opt(req.out_val),
        k_per_row=_opt(req.k_per_row), relative=req.relative, page_table=_opt(req.page_table),
        page_size=req.page_size, row_to_batch=_opt(req.row_to_batch), out_raw=_opt(req.out_raw),
    )
    if req.nan_policy == "raise":
        rows = reference.nan_rows(x, begin, end)
        if len(rows):
            record = nan_record.record_for(CPU, _new_record)
            record.append(record.new_call(f"{req.x.dtype} {x.shape[0]}x{x.shape[1]}, k={req.k}, on the CPU"), rows)
