"""Caller tensors out: outputs allocated in the caller's framework on the caller's device, and
the CUDA stream the caller expects the kernel on.

torch allocates for torch tensors (and, when loaded, for other producers: it has bfloat16),
CuPy for CuPy arrays, NumPy for host arrays; JAX outputs are made by torch or CuPy and handed to
JAX without a copy (``jax.py``). Frameworks are imported only once the caller's objects come
from them.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from functools import lru_cache
from math import prod

import numpy as np

from ..dtypes import numpy_dtype
from ..errors import BackendUnavailableError
from .views import TensorView, framework_stream, numpy_view, torch_view, view_of

# XLA's CPU client aliases host memory (no copy) only when it is 64-byte aligned.
_HOST_ALIGN = 64

class Allocated:
    """An output being produced for the caller: write through ``view``, return ``result()``."""

    __slots__ = ("view", "_finish")

    def __init__(self, view: TensorView, finish=None):
        self.view = view
        self._finish = finish  # turns the buffer into the caller's type once it is written

    def result(self) -> object:
        """The caller-framework object holding the output (call after the kernel wrote it)."""
        return self.view.obj if self._finish is None else self._finish(self.view.obj)


def allocate(like: TensorView, shape: tuple[int, ...], dtype: str, stream: int | None = None) -> Allocated:
    """A contiguous, uninitialised ``shape`` array of canonical ``dtype`` like ``like``.

    Same framework and device as ``like``: torch -> ``torch.empty`` on its device (caching
    allocator), NumPy -> ``numpy.empty``, CuPy -> ``cupy.empty`` under its device, JAX -> a
    NumPy (CPU) or torch/CuPy (GPU) buffer that ``result()`` hands to JAX without a copy, other
    DLPack producers -> NumPy on CPU, torch/CuPy on CUDA. ``stream``: for CUDA buffers, the
    stream the kernel writes them on (None: ``like``'s framework's, ``current_stream``); torch's
    and CuPy's caching allocators then hand the memory out again, once freed, only after that
    stream's work rather than after their current stream's. Raises TypeError for 64-bit
    outputs when JAX has x64 disabled (JAX would silently truncate them),
    BackendUnavailableError when nothing can allocate on ``like``'s device.
    """
    shape = tuple(int(s) for s in shape)
    if like.framework == "torch":
        if like.is_cuda:
            return Allocated(torch_view(_torch_cuda_empty(shape, dtype, like.device_id, stream), "output"))
        torch = sys.modules["torch"]
        return Allocated(torch_view(torch.empty(shape, dtype=getattr(torch, dtype), device=like.obj.device), "output"))
    if like.framework == "numpy":
        return Allocated(numpy_view(np.empty(shape, numpy_dtype(dtype)), "output"))
    if like.framework == "cupy":
        from . import cupy

        return Allocated(view_of(cupy.empty(shape, dtype, like.device_id, stream), name="output"))
    # torch or CuPy allocates for the others, and its current stream need not be theirs.
    stream = current_stream(like) if stream is None else stream
    if like.framework == "jax":
        from . import jax

        jax.check_output_dtype(dtype)
        buffer = _buffer_on(like, shape, dtype, stream)
        return Allocated(*jax.output_of(like, buffer))
    return Allocated(view_of(_buffer_on(like, shape, dtype, stream), name="output"))


def workspace(like: TensorView, nbytes: int, stream: int) -> Allocated:
    """Uninitialised device scratch of at least ``nbytes`` on ``like``'s CUDA device, for kernels
    on ``stream``: allocated by torch (or CuPy) with ``stream`` current, so their stream-ordered
    caching allocators hand it out again only after that stream's work (and from a graph's
    private pool under capture). Raises BackendUnavailableError when neither is installed."""
    return Allocated(view_of(_cuda_buffer(like, (-(-nbytes // 4),), "int32", stream), name="workspace"))


def current_stream(view: TensorView) -> int:
    """The CUDA stream handle the caller expects work on ``view`` to run on.

    torch: ``torch.cuda.current_stream(device)``; CuPy: its current stream on the view's device;
    JAX and other producers: 0, the legacy default stream (JAX exposes no current stream; the
    DLPack export was negotiated for that stream, so ordering holds). Non-CUDA views: 0.
    """
    if not view.is_cuda:
        return 0
    if view.framework == "torch":
        return torch_current_stream(view.device_id)
    return framework_stream(view.framework, view.device_id)


@lru_cache(maxsize=1)
def torch_stream_getter():
    """torch's current stream handle by CUDA device index, as a function (torch must be
    imported; looked up once): the raw getter where torch has it, ~20x cheaper than a Stream
    object."""
    torch = sys.modules["torch"]
    return getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
        lambda index: torch.cuda.current_stream(index).cuda_stream)


def torch_current_stream(device_index: int) -> int:
    """torch's current stream handle on CUDA device ``device_index`` (torch must be imported)."""
    return torch_stream_getter()(device_index)


def _buffer_on(like: TensorView, shape, dtype: str, stream: int | None):
    """A contiguous buffer on ``like``'s device from whichever allocator is available (CUDA: with
    ``stream`` current, as ``_cuda_buffer``)."""
    if like.device_type == "cpu":
        return _aligned_empty(shape, numpy_dtype(dtype), _HOST_ALIGN)
    if like.is_cuda:
        return _cuda_buffer(like, shape, dtype, stream)
    raise BackendUnavailableError(
        f"cannot allocate outputs on {like.device_type} for a {like.framework} tensor; pass "
        "output_idx= and output_val=")


def _cuda_buffer(like: TensorView, shape, dtype: str, stream: int | None = None):
    """A contiguous buffer on ``like``'s CUDA device, allocated with ``stream`` current (None:
    the allocator's current stream)."""
    # Prefer a framework that is already loaded; torch first otherwise, as it has bfloat16.
    for module in sorted(("torch", "cupy"), key=lambda m: m not in sys.modules):
        try:
            return _CUDA_ALLOCATORS[module](shape, dtype, like.device_id, stream)
        except ImportError:
            continue
    raise BackendUnavailableError(
        f"cannot allocate CUDA memory for a {like.framework} tensor: install torch or cupy (for "
        "outputs, passing output_idx= and output_val= also works)")


def _torch_cuda_empty(shape, dtype: str, device_id: int, stream: int | None = None):
    import torch

    device = torch.device("cuda", device_id)
    on_stream = (nullcontext() if stream is None or torch_current_stream(device_id) == stream
                 else torch.cuda.stream(_torch_stream(torch, stream, device)))
    with on_stream:
        return torch.empty(shape, dtype=getattr(torch, dtype), device=device)


def _torch_stream(torch, handle: int, device):
    """A torch stream object for the CUDA stream ``handle`` on ``device``. Not
    ``torch.cuda.ExternalStream``: given 0, the NULL stream, it returns a new pooled stream
    instead (pytorch/pytorch#182960); ``torch.cuda.get_stream_from_external`` (torch >= 2.7)
    wraps 0 faithfully. Older torch: its default stream for 0."""
    wrap = getattr(torch.cuda, "get_stream_from_external", None)
    if wrap is not None:
        return wrap(handle, device)
    return torch.cuda.default_stream(device) if handle == 0 else torch.cuda.ExternalStream(handle, device=device)


def _cupy_empty(shape, dtype: str, device_id: int, stream: int | None = None):
    from . import cupy

    return cupy.empty(shape, dtype, device_id, stream)


_CUDA_ALLOCATORS = {"torch": _torch_cuda_empty, "cupy": _cupy_empty}


def _aligned_empty(shape, dtype: np.dtype, align: int) -> np.ndarray:
    nbytes = prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)
