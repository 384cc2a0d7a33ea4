"""The kernel argument block (kernels_cu/common/params.cuh) and the driver launch call."""

from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from ..dtypes import numpy_dtype
from ..request import TopkRequest

F_SORTED, F_IDX64, F_BEGIN64, F_END64, F_OFF64, F_VALUES, F_NAN_SENTINEL = 1, 2, 4, 8, 16, 32, 64

_FIELDS = ("x", "row_stride", "rows", "width", "k", "begin", "end", "offsets", "out_idx",
           "idx_row_stride", "out_val", "val_row_stride", "flags", "idx_fill", "val_fill_bits",
           "nan_flags")


class Params(ctypes.Structure):
    """Mirror of ``struct Params``: sixteen 8-byte fields, no padding."""

    _fields_ = [(name, ctypes.c_uint64) for name in _FIELDS]


def _u64(value: int) -> int:
    return value & 0xFFFFFFFFFFFFFFFF


@lru_cache(maxsize=64)
def _fill_bits(value: float, dtype: str) -> int:
    """Bit pattern of the fill value in the input dtype (memoised: the launch path is hot)."""
    arr = np.array([value], dtype=numpy_dtype(dtype))
    return int(arr.view(np.uint16 if arr.itemsize == 2 else np.uint32)[0])


def pack(req: TopkRequest, nan_flags_ptr: int = 0) -> Params:
    """The argument block for ``req`` (pointers and strides from its views)."""
    flags = F_SORTED * req.sorted | F_IDX64 * (req.index_dtype == "int64")
    flags |= F_VALUES * req.return_value | F_NAN_SENTINEL * (req.nan_policy == "sentinel")
    for view, bit in ((req.begin, F_BEGIN64), (req.end, F_END64), (req.offsets, F_OFF64)):
        if view is not None and view.dtype == "int64":
            flags |= bit
    opt = lambda v: 0 if v is None else v.ptr  # noqa: E731
    rows, width = req.x.shape
    # Positional, in _FIELDS order: keyword construction of a ctypes Structure costs ~10 us.
    return Params(
        req.x.ptr, _u64(req.x.strides[0]), rows, width, req.k, opt(req.begin), opt(req.end), opt(req.offsets),
        req.out_idx.ptr, _u64(req.out_idx.strides[0]), opt(req.out_val),
        0 if req.out_val is None else _u64(req.out_val.strides[0]), flags, _u64(req.idx_fill),
        _fill_bits(req.val_fill, req.x.dtype), nan_flags_ptr,
    )


def launch(kernel, grid: int, threads: int, smem: int, stream: int, params: Params) -> None:
    """cuLaunchKernel with the one-struct argument list; raises RuntimeError on a driver error."""
    from cuda.bindings import driver

    argv = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    (err,) = driver.cuLaunchKernel(kernel, grid, 1, 1, threads, 1, 1, smem, stream, ctypes.addressof(argv), 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel failed: {driver.cuGetErrorName(err)[1].decode()}")
