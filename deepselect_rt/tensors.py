"""Caller tensors in, caller tensors out: the only module that knows torch, JAX and CuPy.

``view_of`` turns a torch tensor, a NumPy array or any DLPack producer into a ``TensorView``
(pointer, shape, element strides, canonical dtype, device) without copying; ``allocate`` makes an
output in the caller's framework on the caller's device; ``current_stream`` says which CUDA
stream the caller expects the kernel on; ``host_array`` gives a NumPy view of CPU memory.

Frameworks are imported lazily and only for objects that come from them: a torch tensor can
only exist once torch is in ``sys.modules``, so ``import deepselect_rt`` imports none of them.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from dataclasses import dataclass
from math import prod

import numpy as np

from . import dlpack
from .dtypes import INDEX_DTYPES, INPUT_DTYPES, ITEMSIZE, canonical, numpy_dtype
from .errors import BackendUnavailableError

# The dtypes any topk argument can have (values and indices); each argument's narrower rule is
# the API's to check.
ACCEPTED_DTYPES = INPUT_DTYPES + INDEX_DTYPES

# XLA's CPU client aliases host memory (no copy) only when it is 64-byte aligned.
_JAX_HOST_ALIGN = 64


# eq=False: comparing views would compare the caller objects (torch's == is elementwise).
# Not frozen: a frozen dataclass takes ~3 us to build against ~0.4 us, and three views are built
# per call on the launch path. Treat views as immutable all the same.
@dataclass(slots=True, eq=False)
class TensorView:
    """A framework-neutral description of a strided tensor (plain values; only ``obj`` and
    ``keepalive`` hold framework objects, opaque to everything below the API).

    ``ptr`` is the byte address of element ``[0, 0, ...]`` (data + byte offset); ``strides``
    are in elements (may be zero or negative); ``dtype`` is a name from ``ACCEPTED_DTYPES``;
    ``device_type`` is "cpu", "cuda", "npu", ... (torch's device type, or a ``dlpack.DEVICE_NAMES``
    name); ``framework`` is "torch", "numpy", "jax", "cupy" or "dlpack" (any other producer);
    ``obj`` is the caller's object; ``keepalive`` is the DLPack capsule, whose destructor frees
    the export when the view dies; ``writable`` is False for read-only or copied exports.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device_type: str
    device_id: int
    framework: str
    obj: object
    keepalive: object = None
    writable: bool = True

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return ITEMSIZE[self.dtype]

    @property
    def is_cuda(self) -> bool:
        """Whether CUDA kernels can address this memory (device or managed memory)."""
        return self.device_type in ("cuda", "cuda_managed")


# What topk takes, for the dtype errors of view_of.
VALUE_DTYPES_TEXT = "bfloat16, float16 or float32"
INDEX_DTYPES_TEXT = "int32 or int64"


def view_of(obj, *, name: str = "input", stream: int | None = None, takes: str = VALUE_DTYPES_TEXT,
            output: bool = False) -> TensorView:
    """Describe ``obj`` as a TensorView, zero-copy.

    torch tensors take an attribute fast path (no capsule), NumPy arrays (ml_dtypes bfloat16
    included) their array interface, anything else with ``__dlpack__``/``__dlpack_device__``
    the DLPack protocol. ``stream`` is the CUDA stream the consumer will use the tensor on; it
    is passed to the producer so it can order its pending work before it. None means "the
    stream ``current_stream`` gives for this view". torch and NumPy ignore it (torch's pending
    work is on its current stream, which ``current_stream`` returns). ``output``: the caller's
    buffer that topk will write.

    Raises TypeError naming ``name`` for other objects, NumPy masked arrays, and dtypes outside
    ``ACCEPTED_DTYPES`` (saying it ``takes`` those dtypes); ValueError for NumPy strides that are
    not whole elements, and for an ``output`` torch tensor that requires grad.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _torch_view(obj, name, takes, output)
    if isinstance(obj, np.ndarray):
        return _numpy_view(obj, name, takes)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_view(obj, name, stream, takes)
    if type(obj).__module__.startswith("jax") and "Tracer" in type(obj).__name__:
        raise TypeError(f"{name} is a JAX tracer: deepselect_rt.topk cannot run inside jax.jit or other JAX "
                        "transformations yet; call it on concrete jax.Arrays, outside the traced function")
    raise TypeError(f"{name} must be a torch/JAX/CuPy tensor (DLPack) or a NumPy array, "
                    f"got {type(obj).__module__}.{type(obj).__qualname__}")


def host_array(view: TensorView) -> np.ndarray:
    """A NumPy array over a CPU view's memory: same shape and strides, no copy.

    bfloat16 comes out as ``ml_dtypes.bfloat16``. Writable when ``view.writable``; the array
    keeps the view (and so the caller's object and capsule) alive. Raises ValueError for a
    non-CPU view.
    """
    if view.device_type != "cpu":
        raise ValueError(f"host_array needs a CPU tensor, got a {view.device_type}:"
                         f"{view.device_id} one")
    if view.framework == "numpy":
        return np.asarray(view.obj)
    dtype = numpy_dtype(view.dtype)
    if prod(view.shape) == 0:
        # Nothing to share, and the producer's pointer may be NULL, which NumPy refuses.
        return np.empty(view.shape, dtype)
    # NumPy has no typestr for bfloat16: import the bits as uint16, then reinterpret.
    typestr = "<u2" if view.dtype == "bfloat16" else dtype.str
    array = np.asarray(_HostMemory(view, typestr))
    return array.view(dtype) if view.dtype == "bfloat16" else array


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
            return Allocated(_torch_view(_torch_cuda_empty(shape, dtype, like.device_id, stream), "output"))
        torch = sys.modules["torch"]
        return Allocated(_torch_view(torch.empty(shape, dtype=getattr(torch, dtype), device=like.obj.device), "output"))
    if like.framework == "numpy":
        return Allocated(_numpy_view(np.empty(shape, numpy_dtype(dtype)), "output"))
    if like.framework == "cupy":
        return Allocated(view_of(_cupy_empty(shape, dtype, like.device_id, stream), name="output"))
    # torch or CuPy allocates for the others, and its current stream need not be theirs.
    stream = current_stream(like) if stream is None else stream
    if like.framework == "jax":
        return _allocate_jax(like, shape, dtype, stream)
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
    return _framework_stream(view.framework, view.device_id)


_torch_stream_getter = None


def torch_current_stream(device_index: int) -> int:
    """torch's current stream handle on CUDA device ``device_index`` (torch must be imported)."""
    global _torch_stream_getter
    if _torch_stream_getter is None:  # looked up once: this runs on every call
        torch = sys.modules["torch"]
        _torch_stream_getter = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (  # ~20x cheaper
            lambda index: torch.cuda.current_stream(index).cuda_stream)
    return _torch_stream_getter(device_index)


# --- ingest ------------------------------------------------------------------------------

def _torch_view(t, name: str, takes: str = VALUE_DTYPES_TEXT, output: bool = False) -> TensorView:
    # The per-call hot path: attribute reads only, no capsule, no NumPy.
    dtype = _dtype_name(t.dtype)
    if dtype is None:
        raise _dtype_error(name, t.dtype, takes)
    if t.layout is not sys.modules["torch"].strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if t.is_neg():
        # A lazily negated view (e.g. ``x.conj().imag``): data_ptr holds the un-negated values.
        raise TypeError(f"{name} is a lazily negated torch view; pass {name}.resolve_neg()")
    # In any grad mode (torch.topk(out=) refuses these in grad mode only): the kernel's write
    # bypasses autograd and the tensor's version counter alike.
    if output and t.requires_grad:
        raise ValueError(f"{name} requires grad: topk writes it through its data pointer, a write autograd "
                         "would not see; pass a buffer that does not require grad")
    # is_cuda/get_device are cheap; building a torch.device and reading .type is not.
    if t.is_cuda:
        device_type, device_id = "cuda", t.get_device()
    else:
        device = t.device
        device_type, device_id = device.type, device.index or 0
    return TensorView(t.data_ptr(), tuple(t.shape), t.stride(), dtype, device_type, device_id,
                      "torch", t)


def _numpy_view(a: np.ndarray, name: str, takes: str = VALUE_DTYPES_TEXT) -> TensorView:
    if isinstance(a, np.ma.MaskedArray):
        raise TypeError(f"{name} is a NumPy masked array, whose mask top-k would ignore; pass "
                        "numpy.ma.filled(a, -numpy.inf) to leave masked elements out, or a.data")
    dtype = _dtype_name(a.dtype) if a.dtype.isnative else None
    if dtype is None:
        raise _dtype_error(name, a.dtype, takes)
    itemsize = a.itemsize
    if any(s % itemsize for s in a.strides):
        raise ValueError(f"{name} has strides {a.strides} bytes, not whole {itemsize}-byte "
                         "elements; pass a copy (numpy.ascontiguousarray)")
    return TensorView(a.__array_interface__["data"][0], a.shape,
                      tuple(s // itemsize for s in a.strides), dtype, "cpu", 0, "numpy", a,
                      writable=a.flags.writeable)


def _dlpack_view(obj, name: str, stream: int | None, takes: str) -> TensorView:
    framework = _framework_of(obj)
    device_code, device_id = (int(x) for x in obj.__dlpack_device__())
    if stream is None and dlpack.takes_stream(device_code):
        stream = _framework_stream(framework, device_id)
    try:
        capsule = dlpack.export(obj, dlpack.stream_argument(device_code, stream))
    except BufferError as exc:  # the producer cannot export this tensor (dtype, layout, ...)
        raise TypeError(f"{name}: {type(obj).__qualname__} refused a DLPack export: {exc}") \
            from exc
    t = dlpack.read(capsule)
    if t.dtype not in ACCEPTED_DTYPES:
        raise _dtype_error(name, t.dtype_text if t.dtype is None else t.dtype, takes)
    return TensorView(t.ptr, t.shape, t.strides, t.dtype, dlpack.device_name(t.device_code),
                      t.device_id, framework, obj, capsule, t.writable)


_DTYPE_NAMES: dict = {}  # torch / NumPy dtype object -> accepted canonical name or None


def _dtype_name(dtype) -> str | None:
    """The canonical name of a torch or NumPy dtype if topk takes it, else None (memoised:
    ``canonical`` costs microseconds and this runs on every call)."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        pass
    try:
        name = canonical(dtype)
    except TypeError:
        name = None
    _DTYPE_NAMES[dtype] = name = name if name in ACCEPTED_DTYPES else None
    return name


def _dtype_error(name: str, dtype, takes: str) -> TypeError:
    swapped = " (big-endian: convert to native byte order first)" if getattr(dtype, "byteorder", "") == ">" else ""
    # "float64", not "torch.float64": the same name whichever framework the input comes from.
    shown = str(dtype).removeprefix("torch.")
    return TypeError(f"{name} must have dtype {takes}, got {shown}{swapped}")


def _framework_of(obj) -> str:
    # Only frameworks whose objects need special handling later get a name; torch and NumPy
    # objects reaching DLPack are not tensors/ndarrays, so "dlpack" is right for them.
    top = type(obj).__module__.partition(".")[0]
    return {"cupy": "cupy", "jax": "jax", "jaxlib": "jax"}.get(top, "dlpack")


def _framework_stream(framework: str, device_id: int) -> int:
    if framework == "cupy":
        import cupy

        with cupy.cuda.Device(device_id):
            return cupy.cuda.get_current_stream().ptr
    return 0


class _HostMemory:
    """Exposes a CPU view through NumPy's array interface; NumPy keeps it as the array base."""

    def __init__(self, view: TensorView, typestr: str):
        itemsize = view.itemsize
        self.view = view  # keeps the caller's object and the capsule alive
        self.__array_interface__ = {
            "version": 3, "shape": view.shape, "typestr": typestr,
            "data": (view.ptr, not view.writable),
            "strides": tuple(s * itemsize for s in view.strides),
        }


# --- allocation --------------------------------------------------------------------------

def _allocate_jax(like: TensorView, shape, dtype: str, stream: int | None) -> Allocated:
    import jax

    if ITEMSIZE[dtype] == 8 and not jax.config.jax_enable_x64:
        raise TypeError(f"cannot return {dtype} to JAX: 64-bit types are disabled "
                        "(jax_enable_x64=False) and JAX would truncate them; pass "
                        "indices_type='int32' or enable jax_enable_x64")
    buffer = _buffer_on(like, shape, dtype, stream)
    if isinstance(buffer, np.ndarray):
        device = next(iter(like.obj.devices()))
        # device_put of 64-byte aligned host memory aliases it on XLA's CPU client (and
        # handles bfloat16, which NumPy's DLPack export cannot).
        return Allocated(_numpy_view(buffer, "output"),
                         lambda out: jax.device_put(out, device))
    return Allocated(view_of(buffer, name="output"), jax.dlpack.from_dlpack)


def _buffer_on(like: TensorView, shape, dtype: str, stream: int | None):
    """A contiguous buffer on ``like``'s device from whichever allocator is available (CUDA: with
    ``stream`` current, as ``_cuda_buffer``)."""
    if like.device_type == "cpu":
        return _aligned_empty(shape, numpy_dtype(dtype), _JAX_HOST_ALIGN)
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
    import cupy

    on_stream = nullcontext() if stream is None else cupy.cuda.ExternalStream(stream, device_id)
    with cupy.cuda.Device(device_id), on_stream:
        try:
            return cupy.empty(shape, dtype=numpy_dtype(dtype))
        except (TypeError, ValueError) as exc:  # CuPy builds without bfloat16
            raise TypeError(f"CuPy cannot allocate a {dtype} output ({exc}); pass output_val= "
                            "or return_value=False") from exc


_CUDA_ALLOCATORS = {"torch": _torch_cuda_empty, "cupy": _cupy_empty}


def _aligned_empty(shape, dtype: np.dtype, align: int) -> np.ndarray:
    nbytes = prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)
