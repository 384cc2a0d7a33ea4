"""The Ascend backend: ``run(req)`` for NPU (torch_npu) tensors.

Checks the stack (``driver``), then on the tensor's device: arch and cores (``arch``), tiling,
the kernel binary from the cache (compiled on a miss), the parameter block, and one launch on
the caller's stream. No host synchronisation except for nan_policy="raise", which reads a
per-row flag buffer after a stream sync.
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import BackendUnavailableError, NaNInputError
from ..request import TopkRequest
from ..interop.outputs import allocate
from . import arch, driver, launch, plan
from .loader import ascend_cache, get_function
from .variants import stream_variant


def _stream(req: TopkRequest) -> int:
    # eager.py resolves no default stream for NPU tensors (it passes 0): torch_npu's current stream
    # on the tensor's device is the one the caller's pending work is on.
    if req.stream:
        return req.stream
    torch_npu = sys.modules["torch_npu"]
    return torch_npu.npu.current_stream(req.x.device_id).npu_stream


def _launch(req: TopkRequest, nan_flags_ptr: int, stream: int) -> None:
    info = arch.info(req.x.device_id)
    tile = plan.make_tiling(req.rows, req.width, req.k, req.x.dtype, info.arch, info.vector_cores)
    variant = stream_variant(req.x.dtype)
    resolved = ascend_cache().resolve(variant, info.arch)
    func = get_function(req.x.device_id, resolved.key, variant.entry, resolved.cubin)
    launch.launch(func, tile.block_dim, stream, launch.pack(req, tile, nan_flags_ptr))


def _refuse_serving_options(req: TopkRequest) -> None:
    """The serving options (contract.md, "Serving") are not implemented by the Ascend kernels."""
    named = [name for name, used in (("page_table", req.page_table is not None), ("k_per_row", req.k_per_row is not None),
                                     ("return_raw_indices", req.out_raw is not None), ("ragged_topk", req.relative))
             if used]
    if named:
        raise BackendUnavailableError(f"{', '.join(named)} not implemented on Ascend NPUs yet; run these calls on a "
                                      "CUDA GPU or the CPU")


def run(req: TopkRequest) -> None:
    """Launch top-k for ``req`` on the input's NPU, on the caller's stream.

    Raises BackendUnavailableError naming what is missing (NPU node, CANN, compiler, acl,
    torch_npu) or when k exceeds the kernel's UB capacity; CompileError when the kernel does not
    compile; NaNInputError under nan_policy="raise"; RuntimeError for an AscendCL failure.
    """
    _refuse_serving_options(req)
    driver.require_runtime()
    import acl

    torch_npu = sys.modules["torch_npu"]
    with torch_npu.npu.device(req.x.device_id):
        stream = _stream(req)
        if req.nan_policy not in ("raise", "raise_sync"):  # both synchronise here
            _launch(req, 0, stream)
            return
        flags = allocate(req.x, (req.rows,), "int32")
        flags.view.obj.zero_()  # NPU tensors only come from torch_npu
        _launch(req, flags.view.ptr, stream)
        launch.check(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream")
        host = np.asarray(flags.view.obj.cpu())
        if host.any():
            raise NaNInputError(np.flatnonzero(host).tolist())


__all__ = ["run"]
