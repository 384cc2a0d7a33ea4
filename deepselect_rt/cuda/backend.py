"""The CUDA backend: plan, kernel, argument block, launch on the caller's stream.

No host synchronisation and no allocation besides the outputs, so a call can be captured in a
CUDA graph; the exception is nan_policy="raise", which needs a per-row flag buffer and a sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import NaNInputError
from ..request import TopkRequest
from ..tensors import allocate
from . import launch, module
from .context import on_device
from .module import check
from .plan import DeviceLimits, Plan, make_plan

_STATIC_SMEM_LIMIT = 48 * 1024


@dataclass(frozen=True)
class _Ready:
    """A plan with its kernel loaded and its shared-memory limit raised on one device."""

    plan: Plan
    kernel: object


_ready: dict[tuple, _Ready] = {}


def _prepare(device: int, dtype: str, k: int, few_rows: bool) -> _Ready:
    """Plan, load and configure once per (device, dtype, k, few_rows); later calls look it up."""
    info = module.device_info(device)
    plan = make_plan(dtype, k, few_rows, DeviceLimits(info.sm_count, info.max_shared_memory_per_block_optin))
    kernel = module.get_kernel(device, plan.variant)
    if plan.smem > _STATIC_SMEM_LIMIT:
        from cuda.bindings import driver

        dev = check(driver.cuDeviceGet(device), "cuDeviceGet")
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuKernelSetAttribute(attr, plan.smem, kernel, dev), "cuKernelSetAttribute")
    return _Ready(plan, kernel)


def _launch(req: TopkRequest, ready: _Ready, nan_flags_ptr: int = 0) -> None:
    launch.launch(ready.kernel, req.rows, ready.plan.threads, ready.plan.smem, req.stream,
                  launch.pack(req, nan_flags_ptr))


def _raise_on_nan(req: TopkRequest, ready: _Ready) -> None:
    """nan_policy="raise": launch with a flag per row, synchronise, raise naming the rows."""
    from cuda.bindings import driver

    status = check(driver.cuStreamIsCapturing(req.stream), "cuStreamIsCapturing")
    if status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
        raise ValueError("nan_policy='raise' must synchronise and cannot run under CUDA-graph capture; "
                         "pass nan_policy='sentinel' or 'propagate'")
    flags = allocate(req.x, (req.rows,), "int32")
    check(driver.cuMemsetD32Async(flags.view.ptr, 0, req.rows, req.stream), "cuMemsetD32Async")
    _launch(req, ready, flags.view.ptr)
    host = np.empty(req.rows, np.int32)
    check(driver.cuStreamSynchronize(req.stream), "cuStreamSynchronize")
    check(driver.cuMemcpyDtoH(host.ctypes.data, flags.view.ptr, host.nbytes), "cuMemcpyDtoH")
    if host.any():
        raise NaNInputError(np.flatnonzero(host).tolist())


def run(req: TopkRequest) -> None:
    """Launch top-k for ``req`` on its stream, on the input's device."""
    device = req.x.device_id
    with on_device(device):
        few_rows = req.rows < module.device_info(device).sm_count
        key = (device, req.x.dtype, req.k, few_rows)
        ready = _ready.get(key)
        if ready is None:
            ready = _ready[key] = _prepare(device, req.x.dtype, req.k, few_rows)
        if req.nan_policy == "raise":
            _raise_on_nan(req, ready)
        else:
            _launch(req, ready)
