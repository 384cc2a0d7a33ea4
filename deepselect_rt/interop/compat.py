"""Drop-in for DeepSeek DeepSelect's module surface: ``import deepselect_rt.compat as deep_select``.

``topk`` and ``get_stride_requirement`` keep deep_select's names, argument order and defaults;
``indices_type`` defaults to ``torch.int64`` (any torch, NumPy or string dtype is accepted).
Everything else is ``deepselect_rt.topk`` (docs/contract.md).
"""

import math as _math
import sys as _sys

from ..api import get_stride_requirement
from ..api import topk as _topk


def topk(input, topk, sorted=False, begin=None, end=None, indices_type=None, sorted_index=False,
         output_idx=None, output_val=None, output_idx_offset=None, idx_oob_fill_value=2**31 - 1,
         value_oob_fill_value=-_math.inf, return_value=True, abort_when_nan_found=True, **extra):
    """deep_select.topk: the top-k of each row of ``input``.

    Args:
        input, topk, sorted, begin, end, sorted_index, output_idx, output_val,
        output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value,
        abort_when_nan_found: as ``deepselect_rt.topk`` takes them (same defaults; shapes
            ``(rows, width)`` in, ``(rows, topk)`` out, ``(rows,)`` row vectors).
        indices_type: None (default) means ``torch.int64`` (``"int64"`` when torch is not
            loaded); else int32/int64 as any dtype spelling.
        extra: deepselect-rt's own keyword arguments, passed through: ``nan_policy``,
            ``stream`` and the serving options (``page_table``, ``page_size``,
            ``row_to_batch``, ``k_per_row``, ``return_raw_indices``, ``output_raw_idx``).

    Returns:
        ``(values, indices)`` as ``deepselect_rt.topk`` returns them (``values`` None without
        ``return_value``; a third output, the raw indices, with ``return_raw_indices=True``).

    Raises:
        What ``deepselect_rt.topk`` raises; with ``abort_when_nan_found=True`` (the default) a
        NaN row is reported by a later call or ``deepselect_rt.check_nan``, without blocking.
    """
    if indices_type is None:
        torch = _sys.modules.get("torch")  # deep_select's default, without importing torch for NumPy callers
        indices_type = torch.int64 if torch is not None else "int64"
    return _topk(input, topk, sorted=sorted, begin=begin, end=end, indices_type=indices_type,
                 sorted_index=sorted_index, output_idx=output_idx, output_val=output_val,
                 output_idx_offset=output_idx_offset, idx_oob_fill_value=idx_oob_fill_value,
                 value_oob_fill_value=value_oob_fill_value, return_value=return_value,
                 abort_when_nan_found=abort_when_nan_found, **extra)


__all__ = ["topk", "get_stride_requirement"]
