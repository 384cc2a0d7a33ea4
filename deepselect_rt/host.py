"""The CPU backend: runs the NumPy reference on host tensors, writing into the outputs in place."""

from __future__ import annotations

from . import reference
from .request import TopkRequest
from .interop.views import host_array


def _opt(view):
    return None if view is None else host_array(view)


def run(req: TopkRequest) -> None:
    """Compute ``req`` on the host; raises NaNInputError for nan_policy="raise"."""
    reference.topk(
        host_array(req.x), req.k, begin=_opt(req.begin), end=_opt(req.end), offsets=_opt(req.offsets),
        index_dtype=req.index_dtype, sorted=req.sorted, sorted_index=req.sorted_index,
        return_value=req.return_value, nan_policy=req.nan_policy, idx_fill=req.idx_fill,
        val_fill=req.val_fill, out_idx=host_array(req.out_idx), out_val=_opt(req.out_val),
    )
