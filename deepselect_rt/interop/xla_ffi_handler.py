"""XLA FFI handlers written in Python: the stable C ABI of ``xla/ffi/api/c_api.h`` through ctypes,
for ``jax.ffi.register_ffi_target``. Framework-neutral below the capsule: a handler sees a
``Frame`` (buffer addresses and dimensions, string attributes, the stream) and nothing of XLA.

Why a Python handler: XLA's own kernel-call target (``jax_ffi.py``'s route) launches what its
descriptor says, within limits that some plans exceed (clusters of more than 8 CTAs); a handler
launches our kernels exactly as an eager call does, on XLA's stream, into XLA's buffers. Each
execution runs the handler on the host (it takes the GIL), so it costs more host time than the
kernel-call target and is kept for the calls that target cannot carry.

Only the parts of the ABI used here are mirrored. Every struct starts with its size, and XLA only
appends fields, so these prefixes stay valid across versions.
"""

from __future__ import annotations

import ctypes
from typing import Callable

# The FFI API version these handlers are written for (XLA_FFI_API_MAJOR/MINOR of the first
# release with the typed call frame that jax.ffi registers); XLA accepts an older minor version.
API_VERSION = (0, 1)
_METADATA_EXTENSION = 1  # XLA_FFI_Extension_Metadata
_BUFFER = 1              # XLA_FFI_ArgType_BUFFER and XLA_FFI_RetType_BUFFER
_STRING = 4              # XLA_FFI_AttrType_STRING
_INTERNAL = 13           # XLA_FFI_Error_Code_INTERNAL
_SIZE = ctypes.c_size_t
_PTR = ctypes.c_void_p


class _Extension(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("type", ctypes.c_int), ("next", _PTR)]


class _Version(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("major", ctypes.c_int), ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("api_version", _Version), ("traits", ctypes.c_uint32)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("base", _Extension), ("metadata", ctypes.POINTER(_Metadata))]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("dtype", ctypes.c_int), ("data", _PTR),
                ("rank", ctypes.c_int64), ("dims", ctypes.POINTER(ctypes.c_int64))]


class _Values(ctypes.Structure):
    """XLA_FFI_Args and XLA_FFI_Rets: the same layout."""

    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("items", ctypes.POINTER(_PTR))]


class _ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", _PTR), ("len", _SIZE)]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("names", ctypes.POINTER(ctypes.POINTER(_ByteSpan))),
                ("attrs", ctypes.POINTER(_PTR))]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("message", ctypes.c_char_p),
                ("errc", ctypes.c_int)]


class _StreamGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("ctx", _PTR), ("stream", _PTR)]


class _ErrorArgs(ctypes.Structure):
    """XLA_FFI_Error_GetMessage_Args (``message`` is its out field); XLA_FFI_Error_Destroy_Args
    is its prefix."""

    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("error", _PTR), ("message", ctypes.c_char_p)]


_ERROR_CREATE = ctypes.CFUNCTYPE(_PTR, ctypes.POINTER(_ErrorCreateArgs))
_ERROR_USE = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorArgs))
_STREAM_GET = ctypes.CFUNCTYPE(_PTR, ctypes.POINTER(_StreamGetArgs))


class _Api(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", _PTR), ("api_version", _Version),
                ("internal_api", _PTR), ("error_create", _ERROR_CREATE), ("error_get_message", _ERROR_USE),
                ("error_destroy", _ERROR_USE), ("handler_register", _PTR), ("stream_get", _STREAM_GET)]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", _SIZE), ("extension_start", ctypes.POINTER(_Extension)),
                ("api", ctypes.POINTER(_Api)), ("ctx", _PTR), ("stage", ctypes.c_int), ("args", _Values),
                ("rets", _Values), ("attrs", _Attrs), ("future", _PTR)]


_HANDLER = ctypes.CFUNCTYPE(_PTR, ctypes.POINTER(_CallFrame))


class Frame:
    """One execution of the custom call: ``args`` and ``rets`` (the operands' and results'
    addresses, in the custom call's order), ``attrs`` (its string attributes by name),
    ``shapes(which)`` ("args" or "rets": their dimensions) and ``stream()`` (the CUstream XLA
    runs it on, as an int; GPU platforms only). Only what a launch needs is read eagerly: each
    ctypes access costs host time on every execution."""

    def __init__(self, frame: _CallFrame):
        self._frame = frame
        self.args = _pointers(frame.args, "operand")
        self.rets = _pointers(frame.rets, "result")
        self.attrs = _string_attrs(frame.attrs)

    def shapes(self, which: str) -> list[tuple[int, ...]]:
        values = getattr(self._frame, which)
        return [tuple(buf.dims[d] for d in range(buf.rank))
                for buf in (_Buffer.from_address(values.items[i]) for i in range(values.size))]

    def stream(self) -> int:
        api = self._frame.api.contents
        get = _StreamGetArgs(ctypes.sizeof(_StreamGetArgs), None, self._frame.ctx, None)
        error = api.stream_get(ctypes.byref(get))
        if error:
            args = _ErrorArgs(ctypes.sizeof(_ErrorArgs), None, error, None)
            api.error_get_message(ctypes.byref(args))
            why = (args.message or b"").decode(errors="replace")
            args.struct_size = _ErrorArgs.message.offset  # XLA_FFI_Error_Destroy_Args
            api.error_destroy(ctypes.byref(args))
            raise RuntimeError(f"XLA's FFI did not give the call's stream: {why}")
        return get.stream or 0


_DATA = _Buffer.data.offset


def _pointers(values: _Values, what: str) -> list[int]:
    types, items = values.types, values.items
    out = []
    for i in range(values.size):
        if types[i] != _BUFFER:
            raise TypeError(f"{what} {i} of the custom call is not a buffer")
        out.append(_PTR.from_address(items[i] + _DATA).value or 0)
    return out


def _string_attrs(attrs: _Attrs) -> dict[str, str]:
    types, names, values = attrs.types, attrs.names, attrs.attrs
    out = {}
    for i in range(attrs.size):
        if types[i] == _STRING:
            out[_text(names[i].contents)] = _text(_ByteSpan.from_address(values[i]))
    return out


def _text(span: _ByteSpan) -> str:
    return ctypes.string_at(span.ptr, span.len).decode()


def _metadata_query(frame: _CallFrame) -> bool:
    """Answers XLA's registration query (a frame carrying the metadata extension): the API
    version, no traits (never captured into a command buffer: each execution launches anew)."""
    ext = frame.extension_start
    while ext:
        if ext.contents.type == _METADATA_EXTENSION:
            metadata = ctypes.cast(ext, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
            metadata.api_version.major, metadata.api_version.minor = API_VERSION
            metadata.traits = 0
            return True
        ext = ctypes.cast(ext.contents.next, ctypes.POINTER(_Extension))
    return False


def capsule(execute: Callable[[Frame], None]):
    """A PyCapsule of an XLA FFI handler (for ``jax.ffi.register_ffi_target``) that calls
    ``execute(frame)`` on every execution. Any exception (KeyboardInterrupt included) becomes an
    XLA error carrying its text, and the computation fails with it: nothing may unwind through
    XLA's C frames (ctypes would return garbage as the error pointer). The handler lives as long
    as the process (it is kept here), since XLA keeps its address."""

    def handler(frame_ptr):
        try:
            frame = frame_ptr.contents
            if not _metadata_query(frame):
                execute(Frame(frame))
            return None
        except BaseException as exc:
            return _error(frame_ptr, exc)

    function = _HANDLER(handler)
    _alive.append(function)
    return _CAPSULE_NEW(ctypes.cast(function, _PTR), None, None)


def _error(frame_ptr, exc: BaseException) -> int | None:
    """XLA's error for ``exc``, made through the frame's API."""
    try:
        message = f"deepselect-rt: {type(exc).__name__}: {exc}".encode(errors="replace")
    except BaseException:  # a __str__ that fails still fails the computation, with less said
        message = f"deepselect-rt: {type(exc).__name__} (its message could not be formatted)".encode()
    api = frame_ptr.contents.api
    if not api:  # a metadata query without the API: XLA then rejects the unanswered query
        return None
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None, message, _INTERNAL)
    return api.contents.error_create(ctypes.byref(args))


# A private prototype: setting argtypes on ctypes.pythonapi.PyCapsule_New would change it for
# every user of ctypes in the process.
_CAPSULE_NEW = ctypes.PYFUNCTYPE(ctypes.py_object, _PTR, ctypes.c_char_p, _PTR)(("PyCapsule_New", ctypes.pythonapi))
_alive: list = []
