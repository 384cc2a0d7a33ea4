"""DLPack import: ask a producer for a capsule and read its ``DLTensor`` with ctypes.

Structs follow ``dlpack.h`` (DLPack 1.x); the Python side follows the array API standard's
``__dlpack__`` / ``__dlpack_device__`` protocol. Nothing here imports torch, JAX or CuPy.

Ownership: the capsule is never renamed to ``used_dltensor``, so the producer's capsule
destructor still calls the tensor's deleter when the capsule dies. Callers keep the capsule
alive for as long as they use the pointer.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

# DLDeviceType codes -> the device names TensorView uses. Codes 5 and 6 are unassigned.
DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                9: "vpi", 10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed",
                14: "oneapi", 15: "webgpu", 16: "hexagon", 17: "maia"}
_CUDA_LIKE = (2, 13)  # kDLCUDA, kDLCUDAManaged: CUDA stream handles, 0 forbidden
_ROCM = 10            # kDLROCM: HIP stream handles, 0 is the default stream

# (DLDataTypeCode, bits) -> canonical dtype name; codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
_DTYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
           (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
           (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
           (4, 16): "bfloat16", (6, 8): "bool"}

_FLAG_READ_ONLY = 1 << 0  # DLPACK_FLAG_BITMASK_READ_ONLY
_FLAG_IS_COPIED = 1 << 1  # DLPACK_FLAG_BITMASK_IS_COPIED: writes would not reach the producer


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    """The legacy (pre-1.0) struct behind a ``"dltensor"`` capsule."""

    # The deleter is a function pointer we never call (the capsule destructor does).
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """The DLPack 1.x struct behind a ``"dltensor_versioned"`` capsule."""

    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


# Private prototypes rather than ctypes.pythonapi.X.argtypes = ...: that attribute is shared
# process-wide and other libraries set it to their own signatures.
_capsule_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


class Tensor(NamedTuple):
    """What a capsule describes. ``ptr`` already includes ``byte_offset``; strides in elements."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str | None      # canonical name, None when DLPack's dtype has no canonical name
    dtype_text: str        # the raw DLPack dtype, for error messages
    device_code: int
    device_id: int
    writable: bool


def device_name(code: int) -> str:
    """The TensorView device name of a ``DLDeviceType`` code ("cuda", "cpu", ...)."""
    return DEVICE_NAMES.get(code, f"dlpack_device_{code}")


def takes_stream(device_code: int) -> bool:
    """Whether ``__dlpack__`` takes a stream for this device (CUDA and ROCm only)."""
    return device_code in _CUDA_LIKE or device_code == _ROCM


def stream_argument(device_code: int, stream: int | None) -> int | None:
    """The ``stream=`` value to pass to ``__dlpack__`` for a consumer running on ``stream``.

    CPU and other non-stream devices: None. CUDA: the handle, except that the legacy default
    stream (handle 0) is spelled 1, because DLPack forbids 0 as ambiguous. ROCm: the handle
    (0 is its default stream). ``-1`` (no synchronisation) passes through.
    """
    if stream is None or not takes_stream(device_code):
        return None
    if device_code in _CUDA_LIKE and stream == 0:
        return 1
    return int(stream)


def export(obj, stream: int | None):
    """Call ``obj.__dlpack__``: versioned (``max_version=(1, 0)``) first, legacy on TypeError.

    A producer that predates DLPack 1.0 rejects ``max_version`` with a TypeError; one that
    knows the keyword but only speaks the legacy ABI returns a ``"dltensor"`` capsule, which
    ``read`` accepts too.
    """
    try:
        return obj.__dlpack__(max_version=(1, 0), stream=stream)
    except TypeError:
        # Old producers may not take ``stream`` either; it only matters on a stream device.
        return obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)


def read(capsule) -> Tensor:
    """Parse a ``"dltensor_versioned"`` or ``"dltensor"`` capsule without taking ownership.

    Raises TypeError for anything else (including an already consumed ``"used_dltensor"``),
    for a DLPack major version other than 1, or for vector dtypes (``lanes != 1``).
    """
    try:
        name = _capsule_get_name(capsule)
    except ValueError:  # not a capsule: CPython's "called with invalid PyCapsule object"
        name = None
    if name == b"dltensor_versioned":
        managed = DLManagedTensorVersioned.from_address(_capsule_get_pointer(capsule, name))
        if managed.version.major != 1:
            raise TypeError(f"DLPack version {managed.version.major}.{managed.version.minor} "
                            "is not supported (1.x is)")
        tensor = managed.dl_tensor
        writable = not managed.flags & (_FLAG_READ_ONLY | _FLAG_IS_COPIED)
    elif name == b"dltensor":
        tensor = DLManagedTensor.from_address(_capsule_get_pointer(capsule, name)).dl_tensor
        writable = True  # the legacy ABI cannot say otherwise
    else:
        raise TypeError(f"__dlpack__ returned {capsule!r}, not a DLPack tensor capsule")

    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(ndim))
    else:  # NULL strides: compact row-major
        strides, step = [], 1
        for extent in reversed(shape):
            strides.append(step)
            step *= extent
        strides = tuple(reversed(strides))
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    return Tensor(
        ptr=(tensor.data or 0) + tensor.byte_offset,
        shape=shape,
        strides=strides,
        dtype=_DTYPES.get((code, bits)) if lanes == 1 else None,
        dtype_text=f"DLPack dtype (code={code}, bits={bits}, lanes={lanes})",
        device_code=tensor.device.device_type,
        device_id=tensor.device.device_id,
        writable=writable,
    )
