"""``deepselect_rt::topk`` and ``deepselect_rt::topk_out`` as torch custom ops, so
torch.compile(fullgraph=True) captures a call as one graph node (with a fake implementation giving
output shapes) instead of tracing into the driver calls. ``api.topk`` routes here only
while torch.compile traces; eager calls never do.

The non-tensor arguments are checked at trace time by the same code as eager calls
(``checks.scalar_arguments``); the tensor arguments, including caller buffers, are checked when the
op runs, by the eager path itself. Imported lazily: importing deepselect_rt never imports torch.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import checks, eager


@torch.library.custom_op("deepselect_rt::topk", mutates_args=())
def _topk_op(input: torch.Tensor, k: int, sorted: bool, begin: Optional[torch.Tensor],
             end: Optional[torch.Tensor], indices_type: torch.dtype, sorted_index: bool,
             offsets: Optional[torch.Tensor], idx_fill: int, val_fill: float, return_value: bool,
             nan_policy: str) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = eager.topk(input, k, sorted=sorted, begin=begin, end=end, indices_type=indices_type,
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


@torch.library.custom_op("deepselect_rt::topk_out", mutates_args=("out_idx", "out_val"))
def _topk_out_op(input: torch.Tensor, k: int, sorted: bool, begin: Optional[torch.Tensor],
                 end: Optional[torch.Tensor], indices_type: torch.dtype, sorted_index: bool,
                 offsets: Optional[torch.Tensor], idx_fill: int, val_fill: float, return_value: bool,
                 nan_policy: str, out_idx: Optional[torch.Tensor], out_val: Optional[torch.Tensor]) -> None:
    eager.topk(input, k, sorted=sorted, begin=begin, end=end, indices_type=indices_type,
                   sorted_index=sorted_index, output_idx=out_idx, output_val=out_val, output_idx_offset=offsets,
                   idx_oob_fill_value=idx_fill, value_oob_fill_value=val_fill, return_value=return_value,
                   nan_policy=nan_policy)


@_topk_out_op.register_fake
def _topk_out_fake(input, k, sorted, begin, end, indices_type, sorted_index, offsets, idx_fill, val_fill,
                   return_value, nan_policy, out_idx, out_val):
    return None


def topk(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx, output_val, output_idx_offset,
         idx_oob_fill_value, value_oob_fill_value, return_value, abort_when_nan_found, nan_policy, stream):
    """``api.topk``'s arguments, in its order, through the custom ops.

    Raises ValueError for ``stream`` (under torch.compile the call runs on the current stream:
    use ``torch.cuda.stream(...)``), and whatever ``checks.scalar_arguments`` raises.
    """
    sc = checks.scalar_arguments(topk, sorted, sorted_index, return_value, indices_type, nan_policy,
                              abort_when_nan_found, idx_oob_fill_value, value_oob_fill_value, output_val)
    if stream is not None:
        raise ValueError("stream cannot be passed under torch.compile; use a torch.cuda.stream(...) context")
    args = (input, sc.k, sc.sorted, begin, end, getattr(torch, sc.index_dtype), sc.sorted_index,
            output_idx_offset, sc.idx_fill, sc.val_fill, sc.return_value, sc.nan_policy)
    if output_idx is None and output_val is None:
        values, indices = _topk_op(*args)
        return (values if sc.return_value else None), indices
    if output_idx is None:
        output_idx = input.new_empty((input.shape[0], sc.k), dtype=getattr(torch, sc.index_dtype))
    if sc.return_value and output_val is None:
        output_val = input.new_empty((input.shape[0], sc.k))
    _topk_out_op(*args, output_idx, output_val)
    return (output_val if sc.return_value else None), output_idx
