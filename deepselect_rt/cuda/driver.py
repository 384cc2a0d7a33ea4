"""The CUDA driver API as the backend uses it: the bindings, error checks, per-call entry points
and the device's primary context.

Importing this module needs neither cuda-bindings nor a driver: both are looked up on first use,
and their absence is a BackendUnavailableError that says what to install. Driver functions on
the per-call path whose cuda.bindings form costs more than the call itself (checking the current
context builds a handle object per call, a cluster launch a CUlaunchConfig) are called through
ctypes function pointers from ``cuGetProcAddress``.
"""

from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager

from ..errors import BackendUnavailableError
from ..jit import env

_lock = threading.RLock()
_initialised = False
_found: dict[bytes, object] = {}
# The CUDA version whose function signatures the ctypes prototypes follow.
_API_VERSION = 12000
_primary: dict[int, object] = {}
_primary_handle: dict[int, int] = {}
_CTX_GET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))


def bindings():
    """The ``cuda.bindings.driver`` module. Raises BackendUnavailableError when not installed."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the CUDA backend needs cuda-bindings ({exc}); {env.NVRTC_INSTALL_HINT}") from None
    return driver


def check(result, what: str):
    """Unpack a driver call's (CUresult, *values) tuple.

    Returns None, the single value, or a tuple of values. Raises RuntimeError naming the call
    and the driver's error (e.g. "cuLibraryLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (...)").
    """
    err, *values = result
    if int(err) != 0:
        name = getattr(err, "name", str(int(err)))
        detail = ""
        try:
            status, text = bindings().cuGetErrorString(err)
            if int(status) == 0 and text:
                detail = f" ({text.decode(errors='replace')})"
        except Exception:  # the error text is a courtesy; the name already identifies it
            pass
        raise RuntimeError(f"{what} failed: {name}{detail}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def init() -> None:
    """Initialise the driver once. Raises BackendUnavailableError when there is none usable."""
    global _initialised
    with _lock:
        if _initialised:
            return
        driver = bindings()
        try:
            check(driver.cuInit(0), "cuInit")
        except RuntimeError as exc:  # also cuda.pathfinder's "libcuda not found"
            raise BackendUnavailableError(f"CUDA is not usable: {exc}") from None
        _initialised = True


def driver_function(name: str, prototype):
    """The driver's ``name`` as a ``prototype`` (a ctypes.CFUNCTYPE) callable, looked up once.
    Call after ``init()``. Raises RuntimeError when the driver lacks it."""
    key = name.encode()
    fn = _found.get(key)
    if fn is None:
        driver = bindings()
        with _lock:
            fn = _found.get(key)
            if fn is None:
                pfn, _ = check(driver.cuGetProcAddress(key, _API_VERSION, 0), f"cuGetProcAddress({name})")
                if not int(pfn):
                    raise RuntimeError(f"the CUDA driver has no {name}")
                fn = _found[key] = prototype(int(pfn))
    return fn


def error_name(err: int) -> str:
    """The driver's name for a CUresult value (e.g. "CUDA_ERROR_INVALID_VALUE")."""
    driver = bindings()
    return driver.cuGetErrorName(driver.CUresult(err))[1].decode()



def primary_context(device: int):
    """The retained primary context of ``device`` (retained once per process)."""
    ctx = _primary.get(device)
    if ctx is None:
        driver = bindings()
        with _lock:
            ctx = _primary.get(device)
            if ctx is None:
                init()
                dev = check(driver.cuDeviceGet(device), "cuDeviceGet")
                ctx = check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                _primary_handle[device] = int(ctx)
                _primary[device] = ctx
    return ctx


def is_current(device: int) -> bool:
    """Whether ``device``'s primary context is the calling thread's current context (one
    foreign call: this runs on every launch)."""
    handle = _primary_handle.get(device)
    if handle is None:
        primary_context(device)
        handle = _primary_handle[device]
    current = ctypes.c_void_p()
    if driver_function("cuCtxGetCurrent", _CTX_GET_CURRENT)(current):
        return False  # let the checked path below report the driver's error
    return current.value == handle


_STREAM_GET_CTX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))


def stream_device(stream: int) -> int:
    """The ordinal of the device whose primary context ``stream`` belongs to (a stream another
    runtime hands over, e.g. XLA's): one foreign call for a context seen before. Retains no
    other device's context. Raises RuntimeError for a stream of no device's primary context."""
    ctx = ctypes.c_void_p()
    err = driver_function("cuStreamGetCtx", _STREAM_GET_CTX)(stream, ctypes.byref(ctx))
    if err:
        raise RuntimeError(f"cuStreamGetCtx failed: {error_name(err)}")
    device = _context_device.get(ctx.value)
    if device is None:
        driver = bindings()
        check(driver.cuCtxPushCurrent(driver.CUcontext(ctx.value)), "cuCtxPushCurrent")
        try:
            device = int(check(driver.cuCtxGetDevice(), "cuCtxGetDevice"))
        finally:
            check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")
        primary_context(device)
        if _primary_handle[device] != ctx.value:
            raise RuntimeError(f"stream {stream:#x} belongs to a context of device {device} other than its "
                               "primary context")
        _context_device[ctx.value] = device
    return device


_context_device: dict[int, int] = {}


@contextmanager
def on_device(device: int):
    """Run the body with ``device``'s primary context current."""
    if is_current(device):
        yield
        return
    driver = bindings()
    check(driver.cuCtxPushCurrent(primary_context(device)), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")


def set_kernel_attribute(device: int, kernel, name: str, value: int) -> None:
    """Set ``kernel``'s function attribute ``name`` (a CUfunction_attribute name) on ``device``."""
    driver = bindings()
    dev = check(driver.cuDeviceGet(device), "cuDeviceGet")
    attr = getattr(driver.CUfunction_attribute, name)
    check(driver.cuKernelSetAttribute(attr, value, kernel, dev), f"cuKernelSetAttribute({name})")
