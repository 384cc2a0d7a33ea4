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
    """deep_select.topk: the top-k of each row of ``input`` (see ``deepselect_rt.topk``).

    ``indices_type=None`` means ``torch.int64`` (``"int64"`` when torch is not loaded). ``extra``
    passes deepselect-rt's own arguments (``nan_policy``, ``stream``) through.
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
