"""The CUDA backend: plan, kernel, argument block, launch on the caller's stream.

No host synchronisation and no allocation besides the outputs, so a call can be captured in a
CUDA graph; the exception is nan_policy="raise", which needs a per-row flag buffer and a sync.
"""

from __future__ import annotations

import numpy as np

from ..errors import NaNInputError
from ..request import TopkRequest
from ..tensors import allocate
from . import launch, module
from .context import on_device
from .module import check
from .plan import DeviceLimits, Plan, make_plan

_plans: dict[tuple, Plan] = {}
_smem_ready: set[tuple] = set()
_STATIC_SMEM_LIMIT = 48 * 1024


def _limits(device: int) -> DeviceLimits:
    info = module.device_info(device)
    return DeviceLimits(sm_count=info.sm_count, max_smem_per_block=info.max_shared_memory_per_block_optin)


def _plan(device: int, dtype: str, rows: int, k: int) -> Plan:
    key = (device, dtype, rows, k)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = make_plan(dtype, rows, k, _limits(device))
    return plan


def _allow_smem(kernel, device: int, plan: Plan) -> None:
    """Opt the kernel into more than 48 KiB of dynamic shared memory on this device, once."""
    key = (device, plan.variant, plan.smem)
    if plan.smem <= _STATIC_SMEM_LIMIT or key in _smem_ready:
        return
    from cuda.bindings import driver

    dev = check(driver.cuDeviceGet(device), "cuDeviceGet")
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    check(driver.cuKernelSetAttribute(attr, plan.smem, kernel, dev), "cuKernelSetAttribute")
    _smem_ready.add(key)


def _raise_on_nan(req: TopkRequest, plan: Plan, kernel) -> None:
    """nan_policy="raise": launch with a flag per row, synchronise, raise naming the rows."""
    from cuda.bindings import driver

    status = check(driver.cuStreamIsCapturing(req.stream), "cuStreamIsCapturing")
    if status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
        raise ValueError("nan_policy='raise' must synchronise and cannot run under CUDA-graph capture; "
                         "pass nan_policy='sentinel' or 'propagate'")
    flags = allocate(req.x, (req.rows,), "int32")
    check(driver.cuMemsetD32Async(flags.view.ptr, 0, req.rows, req.stream), "cuMemsetD32Async")
    launch.launch(kernel, plan.grid, plan.threads, plan.smem, req.stream, launch.pack(req, flags.view.ptr))
    host = np.empty(req.rows, np.int32)
    check(driver.cuStreamSynchronize(req.stream), "cuStreamSynchronize")
    check(driver.cuMemcpyDtoH(host.ctypes.data, flags.view.ptr, host.nbytes), "cuMemcpyDtoH")
    if host.any():
        raise NaNInputError(np.flatnonzero(host).tolist())


def run(req: TopkRequest) -> None:
    """Launch top-k for ``req`` on its stream, on the input's device."""
    device = req.x.device_id
    plan = _plan(device, req.x.dtype, req.rows, req.k)
    with on_device(device):
        kernel = module.get_kernel(device, plan.variant)
        _allow_smem(kernel, device, plan)
        if req.nan_policy == "raise":
            _raise_on_nan(req, plan, kernel)
        else:
            launch.launch(kernel, plan.grid, plan.threads, plan.smem, req.stream, launch.pack(req))
