"""``deepselect_rt::topk`` as a torch custom op, so torch.compile(fullgraph=True) captures a call
as one graph node (with a fake implementation giving output shapes) instead of tracing into the
driver calls. ``api.topk`` routes here only while torch.compile traces; eager calls never do.

Imported lazily: importing deepselect_rt never imports torch.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import api, dtypes


@torch.library.custom_op("deepselect_rt::topk", mutates_args=())
def _topk_op(input: torch.Tensor, k: int, sorted: bool, begin: Optional[torch.Tensor],
             end: Optional[torch.Tensor], indices_type: torch.dtype, sorted_index: bool,
             offsets: Optional[torch.Tensor], idx_fill: int, val_fill: float, return_value: bool,
             nan_policy: str) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = api.eager_topk(input, k, sorted=sorted, begin=begin, end=end, indices_type=indices_type,
                                     sorted_index=sorted_index, output_idx_offset=offsets,
                                     idx_oob_fill_value=idx_fill, value_oob_fill_value=val_fill,
                                     return_value=return_value, nan_policy=nan_policy)
    # A custom op returns a fixed number of tensors: no values is an empty one.
    return (values if values is not None else input.new_empty((0,))), indices


@_topk_op.register_fake
def _topk_fake(input, k, sorted, begin, end, indices_type, sorted_index, offsets, idx_fill, val_fill,
               return_value, nan_policy):
    rows = input.shape[0]
    values = input.new_empty((rows, k)) if return_value else input.new_empty((0,))
    return values, input.new_empty((rows, k), dtype=indices_type)


def topk(input, k, *, sorted, begin, end, indices_type, sorted_index, output_idx, output_val,
         output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value, nan_policy):
    """``api.topk``'s arguments through the custom op; caller buffers are filled with copy_."""
    index_dtype = getattr(torch, dtypes.canonical(indices_type))
    values, indices = _topk_op(input, int(k), bool(sorted), begin, end, index_dtype, bool(sorted_index),
                               output_idx_offset, int(idx_oob_fill_value), float(value_oob_fill_value),
                               bool(return_value), nan_policy)
    if output_idx is not None:
        indices = output_idx.copy_(indices)
    if not return_value:
        return None, indices
    if output_val is not None:
        values = output_val.copy_(values)
    return values, indices
