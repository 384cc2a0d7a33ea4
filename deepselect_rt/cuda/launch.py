"""The kernel argument block (kernels_cu/common/params.cuh) and the driver launch calls.

The argument block is one packed struct, so a launch passes a single pointer: ``cuLaunchKernel``
through cuda.bindings, ``cuLaunchKernelEx`` (clusters) through a ctypes function pointer
(driver.py) with a ctypes ``CUlaunchConfig``.
"""

from __future__ import annotations

import ctypes

from ..dtypes import fill_bits
from ..jit.spec import flags_of
from ..request import TopkRequest
from .driver import bindings, driver_function, error_name

_FIELDS = ("x", "row_stride", "rows", "width", "k", "begin", "end", "offsets", "out_idx",
           "idx_row_stride", "out_val", "val_row_stride", "flags", "idx_fill", "val_fill_bits",
           "nan_head", "nan_entries", "nan_call", "split", "workspace", "page_table", "page_row_stride",
           "page_size", "max_pages", "batch", "row_to_batch", "k_per_row", "out_raw", "raw_row_stride")


class Params(ctypes.Structure):
    """Mirror of ``struct Params``: twenty-nine 8-byte fields, no padding."""

    _fields_ = [(name, ctypes.c_uint64) for name in _FIELDS]


def _u64(value: int) -> int:
    return value & 0xFFFFFFFFFFFFFFFF


def pack(req: TopkRequest, nan: tuple[int, int, int] = (0, 0, 0), split: int = 1, workspace: int = 0) -> Params:
    """The argument block for ``req`` (pointers and strides from its views); ``nan``: the NaN
    record's (device counter, device address of its entries, call id), zeros for none; ``split``
    CTAs per row meeting through ``workspace`` (a device pointer, 0 for none)."""
    flags = flags_of(req)
    opt = lambda v: 0 if v is None else v.ptr  # noqa: E731
    rows, width = req.x.shape
    table, raw = req.page_table, req.out_raw
    pages = (0, 0, 0, 0) if table is None else (_u64(table.strides[0]), req.page_size, table.shape[1], table.shape[0])
    # Positional, in _FIELDS order: keyword construction of a ctypes Structure costs ~10 us.
    return Params(
        req.x.ptr, _u64(req.x.strides[0]), rows, width, req.k, opt(req.begin), opt(req.end), opt(req.offsets),
        req.out_idx.ptr, _u64(req.out_idx.strides[0]), opt(req.out_val),
        0 if req.out_val is None else _u64(req.out_val.strides[0]), flags, _u64(req.idx_fill),
        fill_bits(req.val_fill, req.x.dtype), *nan, split, workspace, opt(table), *pages,
        opt(req.row_to_batch), opt(req.k_per_row), opt(raw), 0 if raw is None else _u64(raw.strides[0]),
    )


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id, padding to 8 bytes, a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("num_attrs", ctypes.c_uint)]


_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p)
_cluster_attrs: dict = {}  # cluster size -> its launch attribute, never freed (configs point at it)
_configs: dict = {}        # (grid, threads, smem, cluster) -> a config without its stream
_MAX_CONFIGS = 256
# Looked up on the first launch, not on every one: an import statement, or a lookup by name,
# costs on every launch.
_driver = None             # cuda.bindings.driver
_launch_ex = None          # cuLaunchKernelEx as _LAUNCH_EX


def _cluster_config(grid: int, threads: int, smem: int, cluster: int) -> _LaunchConfig:
    """A fresh ``CUlaunchConfig`` for a cluster launch, copied from one built once per shape:
    building one costs a few us, a copy a fraction of that."""
    template = _configs.get((grid, threads, smem, cluster))
    if template is None:
        attr = _cluster_attrs.get(cluster)
        if attr is None:
            attr = _cluster_attrs.setdefault(cluster, _LaunchAttribute(_CLUSTER_DIMENSION))
            attr.value[0], attr.value[1], attr.value[2] = cluster, 1, 1
        if len(_configs) >= _MAX_CONFIGS:
            _configs.clear()
        template = _configs[grid, threads, smem, cluster] = _LaunchConfig(
            (grid, 1, 1), (threads, 1, 1), smem, None, ctypes.pointer(attr), 1)
    return _LaunchConfig.from_buffer_copy(template)


def launch(kernel, grid: int, threads: int, smem: int, stream: int, params: Params, cluster: int = 1) -> None:
    """Launch ``kernel`` (a CUkernel) with the one-struct argument list on ``stream``; ``cluster``
    > 1 groups consecutive CTAs into thread-block clusters of that size. Raises RuntimeError with
    the driver's error name."""
    global _driver, _launch_ex
    argv = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    if cluster == 1:
        # cuda.bindings' own call measured 2-3 us cheaper than a ctypes one with 11 arguments.
        if _driver is None:
            _driver = bindings()
        (err,) = _driver.cuLaunchKernel(kernel, grid, 1, 1, threads, 1, 1, smem, stream, ctypes.addressof(argv), 0)
        if err:
            raise RuntimeError(f"cuLaunchKernel failed: {error_name(int(err))}")
        return
    # cuLaunchKernelEx through cuda.bindings needs a CUlaunchConfig object built per call.
    config = _cluster_config(grid, threads, smem, cluster)
    config.stream = stream
    if _launch_ex is None:
        _launch_ex = driver_function("cuLaunchKernelEx", _LAUNCH_EX)
    err = _launch_ex(config, int(kernel), argv, None)
    if err:
        raise RuntimeError(f"cuLaunchKernelEx failed: {error_name(err)}")
