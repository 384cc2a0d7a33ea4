"""DeepSeek DeepSelect's module surface: ``import deepselect_rt.compat as deep_select``.

The implementation is ``interop/compat.py``; this is its public import path.
"""

from .interop.compat import get_stride_requirement, topk

__all__ = ["topk", "get_stride_requirement"]
