"""Caller tensors in: ``view_of`` turns a torch tensor, a NumPy array or any DLPack producer
into a ``TensorView`` (pointer, shape, element strides, canonical dtype, device) without copying;
``host_array`` gives a NumPy view of CPU memory. Outputs and streams are ``outputs.py``'s.

Frameworks are imported lazily and only for objects that come from them: a torch tensor can
only exist once torch is in ``sys.modules``, so ``import deepselect_rt`` imports none of them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from math import prod

import numpy as np

from . import dlpack
from ..dtypes import INDEX_DTYPES, INPUT_DTYPES, ITEMSIZE, canonical, numpy_dtype

# The dtypes any topk argument can have (values and indices); each argument's narrower rule is
# the API's to check.
ACCEPTED_DTYPES = INPUT_DTYPES + INDEX_DTYPES


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
        return torch_view(obj, name, takes, output)
    if isinstance(obj, np.ndarray):
        return numpy_view(obj, name, takes)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_view(obj, name, stream, takes)
    raise TypeError(f"{name} must be a torch/JAX/CuPy tensor (DLPack) or a NumPy array, "
                    f"got {type(obj).__module__}.{type(obj).__qualname__}")


def abstract_view(shape, dtype, name: str, takes: str = VALUE_DTYPES_TEXT) -> TensorView:
    """A TensorView of an array known only by shape and dtype (a JAX tracer inside jax.jit): no
    memory (``ptr`` 0), contiguous strides, device type "traced". The same dtype rule and
    TypeError as ``view_of``, so checks on it raise what an eager call would."""
    dtype_name = _dtype_name(np.dtype(dtype))
    if dtype_name is None:
        raise _dtype_error(name, np.dtype(dtype), takes)
    shape = tuple(int(s) for s in shape)
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return TensorView(0, shape, tuple(reversed(strides)), dtype_name, "traced", 0, "jax", None)


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


def restrided(view: TensorView, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> TensorView:
    """The same memory seen ``offset`` elements on with another shape and element strides (which
    the caller keeps inside the memory ``view`` spans): ``ragged_topk``'s rows of stride 0 and its
    two slices of ``cu_seqlens``. A NumPy view's ``obj`` becomes the matching NumPy view, which
    ``host_array`` returns."""
    obj = view.obj
    if view.framework == "numpy":
        base = np.asarray(obj).reshape(-1)[offset:] if offset else np.asarray(obj)
        obj = np.lib.stride_tricks.as_strided(base, shape, tuple(s * base.itemsize for s in strides),
                                              writeable=False)
    return TensorView(view.ptr + offset * view.itemsize, tuple(shape), tuple(strides), view.dtype, view.device_type,
                      view.device_id, view.framework, obj, view.keepalive, view.writable)


# --- ingest ------------------------------------------------------------------------------

def torch_view(t, name: str, takes: str = VALUE_DTYPES_TEXT, output: bool = False) -> TensorView:
    # The per-call hot path: attribute reads only, no capsule, no NumPy.
    dtype = _dtype_name(t.dtype)
    if dtype is None:
        raise _dtype_error(name, t.dtype, takes)
    if t.is_nested:
        raise TypeError(f"{name} is a nested tensor: pad its rows to one width and pass each row's end, or pass "
                        "the rows back to back to deepselect_rt.ragged_topk")
    if t.layout is not sys.modules["torch"].strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}; pass {name}.to_dense()")
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
    try:
        ptr = t.data_ptr()
    except RuntimeError as exc:  # no storage: a functorch batched tensor, a subclass without data
        raise TypeError(f"{name} is a torch tensor without storage ({exc}), as inside torch.vmap: pass the batch "
                        "as rows of one call instead") from exc
    return TensorView(ptr, tuple(t.shape), t.stride(), dtype, device_type, device_id, "torch", t)


def numpy_view(a: np.ndarray, name: str, takes: str = VALUE_DTYPES_TEXT) -> TensorView:
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
    if framework == "jax":
        _check_one_device(obj, name)
    try:
        device_code, device_id = (int(x) for x in obj.__dlpack_device__())
        if stream is None and dlpack.takes_stream(device_code):
            stream = framework_stream(framework, device_id)
        capsule = dlpack.export(obj, dlpack.stream_argument(device_code, stream))
    except BufferError as exc:  # the producer cannot export this tensor (dtype, layout, sharding, ...)
        raise TypeError(f"{name}: {type(obj).__qualname__} refused a DLPack export: {exc}") from exc
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


def _check_one_device(array, name: str) -> None:
    """A jax.Array spread over several devices has no one buffer to export: ValueError saying
    what works instead."""
    devices = getattr(getattr(array, "sharding", None), "device_set", ())
    if len(devices) > 1:
        raise ValueError(f"{name} is a jax.Array on {len(devices)} devices ({array.sharding}), which DLPack cannot "
                         "export outside jax.jit: call deepselect_rt.topk inside jax.jit, under shard_map for each "
                         "device's own rows, or on one device's array (jax.device_put(x, device))")


def _framework_of(obj) -> str:
    # Only frameworks whose objects need special handling later get a name; torch and NumPy
    # objects reaching DLPack are not tensors/ndarrays, so "dlpack" is right for them.
    top = type(obj).__module__.partition(".")[0]
    return {"cupy": "cupy", "jax": "jax", "jaxlib": "jax"}.get(top, "dlpack")


def framework_stream(framework: str, device_id: int) -> int:
    """The current CUDA stream of ``framework`` on ``device_id`` for a DLPack producer: CuPy's
    own; JAX and others 0, the legacy default stream (they expose no current stream, and their
    DLPack export is negotiated for the stream the consumer names)."""
    if framework == "cupy":
        from . import cupy

        return cupy.current_stream(device_id)
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
