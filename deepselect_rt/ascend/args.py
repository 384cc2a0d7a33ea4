"""The kernel's parameter struct (kernels_ascendc/common/params.h ``DsParams``), packed.

Twenty 8-byte fields, 160 bytes, no padding; the kernel takes it by value, appended to the
launch as one argument (``launch.py``). tests/test_ascend.py checks this layout against the
header's text, field by field.
"""

from __future__ import annotations

import ctypes

from ..dtypes import fill_bits
from ..request import TopkRequest
from .tiling import Tiling

# DS_F_* of params.h.
F_SORTED, F_IDX64, F_BEGIN64, F_END64, F_OFF64, F_VALUES, F_NAN_SENTINEL = 1, 2, 4, 8, 16, 32, 64
FLAGS = {"DS_F_SORTED": F_SORTED, "DS_F_IDX64": F_IDX64, "DS_F_BEGIN64": F_BEGIN64,
         "DS_F_END64": F_END64, "DS_F_OFF64": F_OFF64, "DS_F_VALUES": F_VALUES,
         "DS_F_NAN_SENTINEL": F_NAN_SENTINEL}

_U, _I = ctypes.c_uint64, ctypes.c_int64


class Params(ctypes.Structure):
    """Mirror of ``struct DsParams`` (field order, types and offsets as in params.h)."""

    _fields_ = [
        ("x", _U), ("row_stride", _I), ("rows", _I), ("width", _I), ("k", _I),
        ("begin", _U), ("end", _U), ("offsets", _U), ("out_idx", _U), ("idx_row_stride", _I),
        ("out_val", _U), ("val_row_stride", _I), ("flags", _I), ("idx_fill", _I),
        ("val_fill_bits", _U), ("nan_flags", _U), ("rows_per_core", _I), ("rows_extra", _I),
        ("chunk", _I), ("out_tile", _I),
    ]


def flags_of(req: TopkRequest) -> int:
    """The DS_F_* bits for ``req``. "raise" sets none: the kernel sees a nan_flags pointer."""
    flags = F_SORTED * req.sorted | F_IDX64 * (req.index_dtype == "int64")
    flags |= F_VALUES * req.return_value | F_NAN_SENTINEL * (req.nan_policy == "sentinel")
    for view, bit in ((req.begin, F_BEGIN64), (req.end, F_END64), (req.offsets, F_OFF64)):
        if view is not None and view.dtype == "int64":
            flags |= bit
    return flags


def pack(req: TopkRequest, tiling: Tiling, nan_flags_ptr: int = 0) -> Params:
    """The parameter block for ``req`` under ``tiling``; nan_flags_ptr: device (rows,) int32
    zeroed flags for nan_policy="raise", else 0."""
    def ptr(view):
        return 0 if view is None else view.ptr

    rows, width = req.x.shape
    return Params(
        x=req.x.ptr, row_stride=req.x.strides[0], rows=rows, width=width, k=req.k,
        begin=ptr(req.begin), end=ptr(req.end), offsets=ptr(req.offsets),
        out_idx=req.out_idx.ptr, idx_row_stride=req.out_idx.strides[0],
        out_val=ptr(req.out_val), val_row_stride=0 if req.out_val is None else req.out_val.strides[0],
        flags=flags_of(req), idx_fill=req.idx_fill, val_fill_bits=fill_bits(req.val_fill, req.x.dtype),
        nan_flags=nan_flags_ptr, rows_per_core=tiling.rows_per_core, rows_extra=tiling.rows_extra,
        chunk=tiling.chunk, out_tile=tiling.out_tile,
    )


__all__ = ["Params", "FLAGS", "flags_of", "pack"]
