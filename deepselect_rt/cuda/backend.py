"""The CUDA backend: plan, kernels, argument block, launch on the caller's stream.

No host synchronisation, so a call can be captured in a CUDA graph (NaN rows under
nan_policy="raise" go to the device's NaN record, read later without a sync); the exception is
nan_policy="raise_sync", which waits for the stream. Nothing is allocated besides
the outputs, except the workspace of a row split on a GPU without clusters (from the caller's
framework, ordered on the launch stream).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace

from ..interop.outputs import workspace
from ..request import TopkRequest
from . import arch, launch, loader, nan_memory
from .driver import bindings, check, is_current, on_device, set_kernel_attribute
from .plan import (DeviceLimits, Plan, choose_split, few_rows_tuning, forget_tuning, make_plan, radix_tier,
                   row_vectors)
from .variants import SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE, with_field_args

_STATIC_SMEM_LIMIT = 48 * 1024
#: The largest cluster every sm_90+ GPU launches without the non-portable attribute.
PORTABLE_CLUSTER = 8


@dataclass(frozen=True)
class _Ready:
    """A plan with its kernels (CUkernel) loaded and configured on one device."""

    plan: Plan
    kernel: object
    merge: object = None


_ready: dict[tuple, _Ready] = {}
_limits: dict[int, DeviceLimits] = {}
# The dynamic shared memory each (device, variant)'s kernel is allowed so far, bytes (see _load).
_smem_allowed: dict[tuple, int] = {}
_smem_lock = threading.Lock()
_forced: tuple[int, str] | None = None
_epoch = 0  # changes whenever forced_split or forget_plans changes the plans; repeat launches check it


@contextmanager
def forced_split(split: int, how: str = ""):
    """For tests and tuning: in the body, every top-k with k <= 4096 splits each row over
    ``split`` CTAs (1: one CTA per row) through ``how`` (SPLIT_RADIX, SPLIT_CLUSTER,
    SPLIT_WORKSPACE, or "" for the streaming kernel's way on this device), whatever the plan's
    rules would pick. SPLIT_RADIX falls back to "" where the row does not fit ``split`` CTAs'
    registers or the device has no clusters. Not thread-safe."""
    global _forced, _epoch
    if how not in ("", SPLIT_RADIX, SPLIT_CLUSTER, SPLIT_WORKSPACE):
        raise ValueError(f"how must be '', {SPLIT_RADIX!r}, {SPLIT_CLUSTER!r} or {SPLIT_WORKSPACE!r}, "
                         f"got {how!r}")
    before, _forced = _forced, (split, how)
    _epoch += 1
    try:
        yield
    finally:
        _forced = before
        _epoch += 1


def forget_plans() -> None:
    """For tuning: drops every prepared plan and remembered launch, so a changed variant
    tuning (variants.STREAM_TUNING, FEW_ROWS_TUNING) takes effect on the next call."""
    global _epoch
    _ready.clear()
    forget_tuning()
    _epoch += 1


def prepared_plans() -> list[Plan]:
    """The plans prepared since the last forget_plans(), for tests and tools that check which
    variant and launch shape the rule picked."""
    return [ready.plan for ready in _ready.values()]


def device_limits(device: int) -> DeviceLimits:
    limits = _limits.get(device)
    if limits is None:
        smem, clusters = arch.run_limits(device)
        limits = _limits[device] = DeviceLimits(arch.device_info(device).sm_count, smem, clusters)
    return limits


def _load(device: int, variant, smem: int):
    kernel = loader.get_kernel(device, variant)
    # One variant serves plans of several sizes (the radix select's gather buffer grows with k),
    # and the attribute belongs to the kernel: it only ever rises, so that a smaller plan never
    # lowers it under a larger one prepared before (the launch then fails: invalid value).
    with _smem_lock:
        if smem > max(_STATIC_SMEM_LIMIT, _smem_allowed.get((device, variant), 0)):
            set_kernel_attribute(device, kernel, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", smem)
            _smem_allowed[(device, variant)] = smem
    return kernel


def _clusters_fit(kernel, plan: Plan) -> bool:
    """Whether at least one cluster of plan.split CTAs of ``kernel`` can be resident."""
    driver = bindings()
    config = driver.CUlaunchConfig()
    config.gridDimX, config.blockDimX, config.sharedMemBytes = plan.split, plan.threads, plan.smem
    config.gridDimY = config.gridDimZ = config.blockDimY = config.blockDimZ = 1
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = plan.split, 1, 1
    config.attrs, config.numAttrs = [attr], 1
    function = check(driver.cuKernelGetFunction(kernel), "cuKernelGetFunction")
    err, count = driver.cuOccupancyMaxActiveClusters(function, config)
    return int(err) == 0 and count > 0


def prepare(device: int, dtype: str, k: int, few_rows: bool, split: int, how: str, tier,
            field_args: bool = False) -> _Ready:
    """Plan, load and configure (once per key, through ``_ready_for``). A radix cluster the GPU
    cannot hold falls back to the streaming kernel's cluster, and a streaming cluster it cannot
    hold is halved. ``field_args``: the variants whose entry takes the argument block's fields
    one by one (``variants.with_field_args``, for cuda/xla_call.py)."""
    limits = device_limits(device)
    while True:
        plan = make_plan(dtype, k, few_rows, limits, split, how, tier)
        if field_args:
            plan = replace(plan, variant=with_field_args(plan.variant))
        kernel = _load(device, plan.variant, plan.smem)
        if plan.how not in (SPLIT_CLUSTER, SPLIT_RADIX):
            break
        if plan.split > PORTABLE_CLUSTER:
            set_kernel_attribute(device, kernel, "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
        if _clusters_fit(kernel, plan):
            break
        if plan.how == SPLIT_RADIX:
            how = SPLIT_CLUSTER
        else:
            split //= 2
    merge = _load(device, plan.merge, plan.merge_smem) if plan.merge else None
    return _Ready(plan, kernel, merge)


def _launch(req: TopkRequest, ready: _Ready, nan: tuple[int, int, int]):
    """Launch ``req``; returns ``again`` (see ``run``) or None for a workspace split."""
    plan = ready.plan
    if plan.how == SPLIT_WORKSPACE:
        ws = workspace(req.x, 8 * req.rows * plan.split * req.k, req.stream)
        params = launch.pack(req, nan, plan.split, ws.view.ptr)
        launch.launch(ready.kernel, req.rows * plan.split, plan.threads, plan.smem, req.stream, params)
        launch.launch(ready.merge, req.rows, plan.threads, plan.merge_smem, req.stream, params)
        return None
    device, kernel, grid = req.x.device_id, ready.kernel, req.rows * plan.split
    cluster = plan.split if plan.how in (SPLIT_CLUSTER, SPLIT_RADIX) else 1
    template, epoch = launch.pack(req, nan, plan.split), _epoch

    def again(stream: int, out_idx: int = 0, out_val: int = 0, out_raw: int = 0, inputs: tuple = ()) -> bool:
        if epoch != _epoch:
            return False
        params = template
        if out_idx or out_val or out_raw or inputs:
            params = launch.Params.from_buffer_copy(template)
            if out_idx:
                params.out_idx = out_idx
            if out_val:
                params.out_val = out_val
            if out_raw:
                params.out_raw = out_raw
            for field, ptr in inputs:
                setattr(params, field, ptr)
        # is_current first: entering on_device's generator costs more than the check.
        if is_current(device):
            launch.launch(kernel, grid, plan.threads, plan.smem, stream, params, cluster)
        else:
            with on_device(device):
                launch.launch(kernel, grid, plan.threads, plan.smem, stream, params, cluster)
        return True

    again(req.stream)
    return again


def _nan_args(req: TopkRequest) -> tuple[int, int, int]:
    """(device counter, entries' device address, call id) of the NaN record for ``req``."""
    record, head, entries = nan_memory.record(req.x.device_id)
    rows, width = req.x.shape
    call = record.new_call(f"{req.x.dtype} {rows}x{width}, k={req.k}, stream {req.stream:#x}")
    return head, entries, call


def _raise_now(req: TopkRequest) -> None:
    """nan_policy="raise_sync": wait for the stream, then report this launch's NaN rows."""
    driver = bindings()
    status = check(driver.cuStreamIsCapturing(req.stream), "cuStreamIsCapturing")
    if status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
        raise ValueError("nan_policy='raise_sync' synchronises and cannot run under CUDA-graph capture; "
                         "pass nan_policy='raise' (reported at the next call or by check_nan), 'sentinel' "
                         "or 'propagate'")
    check(driver.cuStreamSynchronize(req.stream), "cuStreamSynchronize")
    nan_memory.record(req.x.device_id)[0].raise_pending()


def ready(device: int, dtype: str, rows: int, width: int, k: int, vectors: int) -> _Ready:
    """The plan of a ``(rows, width)`` top-k on ``device`` whose rows span ``vectors`` 16-byte
    vectors (``row_vectors``), its kernels loaded (compiled first on a cache miss): prepared once
    per key and kept. Call with ``device``'s context current. Raises CompileError when a kernel
    does not compile."""
    limits = device_limits(device)
    split, how = _forced if _forced is not None else choose_split(rows, width, vectors, k, dtype, limits)
    # The radix kernel's tier depends on the width; keying on the tier, not the width, keeps one
    # plan for a row that grows a column per decoding step.
    tier = radix_tier(dtype, vectors, split) if how == SPLIT_RADIX else None
    key = (device, dtype, k, few_rows_tuning(rows, width, dtype, k, limits), split, how, tier)
    prepared = _ready.get(key)
    if prepared is None:
        prepared = _ready[key] = prepare(device, *key[1:])
    return prepared


def _ready_for(req: TopkRequest) -> _Ready:
    vectors = row_vectors(req.x.dtype, req.width, req.x.ptr, req.x.strides[0], req.begin is not None)
    return ready(req.x.device_id, req.x.dtype, req.rows, req.width, req.k, vectors)


def run(req: TopkRequest):
    """Launch top-k for ``req`` on its stream, on the input's device.

    Returns ``again(stream, out_idx=0, out_val=0, out_raw=0, inputs=()) -> bool``, the same launch
    repeated on ``stream`` with other output pointers when given and ``inputs``' (argument-block
    field, pointer) pairs (same shapes and strides, and inputs at the same address modulo 16
    bytes, which the plan depends on; False, launching nothing, once forced_split or forget_plans
    has changed the plans), for interop/repeat.py and cuda/xla_launch.py; or
    None when a call like ``req`` needs the whole path every time (nan_policy="raise_sync"
    synchronises, a workspace split allocates). Under nan_policy="raise" NaN rows are recorded
    (``nan_record.py``) and reported by a later call; "raise_sync" waits for the stream and
    raises NaNInputError now.
    """
    with on_device(req.x.device_id):
        ready = _ready_for(req)
        nan = _nan_args(req) if req.nan_policy in ("raise", "raise_sync") else (0, 0, 0)
        again = _launch(req, ready, nan)
        if req.nan_policy == "raise_sync":
            _raise_now(req)
            return None
        return again
