"""The Ascend kernel's parameter block and its launch through AscendCL (``acl``).

``Params`` mirrors ``kernels_ascendc/common/params.h`` ``DsParams``: twenty 8-byte fields, 160
bytes, no padding; the kernel takes it by value, appended to the launch as one argument
(``kernel_args_init`` / ``kernel_args_append`` / ``kernel_args_finalize``), then
``acl.rt.launch_kernel_with_config`` on the given stream. tests/test_ascend.py checks this
layout against the header's text, field by field. The caller makes the tensor's device current
first (``backend.py``).
"""

from __future__ import annotations

import ctypes

from ..dtypes import fill_bits
from ..jit.spec import flags_of
from ..request import TopkRequest
from .plan import Tiling

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


def check(ret: int, what: str) -> None:
    """Raise RuntimeError naming the AscendCL call and its error code when ``ret`` != 0."""
    if ret != 0:
        raise RuntimeError(f"{what} failed: aclError {ret}")


def launch(func: int, block_dim: int, stream: int, params: Params) -> None:
    """Launch ``func`` on ``block_dim`` vector cores on ``stream`` with ``params``.

    Asynchronous. Raises RuntimeError naming the failing AscendCL call.
    """
    import acl

    args, ret = acl.rt.kernel_args_init(func)
    check(ret, "acl.rt.kernel_args_init")
    _, ret = acl.rt.kernel_args_append(args, ctypes.addressof(params), ctypes.sizeof(params))
    check(ret, "acl.rt.kernel_args_append")
    check(acl.rt.kernel_args_finalize(args), "acl.rt.kernel_args_finalize")
    check(acl.rt.launch_kernel_with_config(func, block_dim, stream, [], args, 0),
          "acl.rt.launch_kernel_with_config")


__all__ = ["Params", "pack", "check", "launch"]
