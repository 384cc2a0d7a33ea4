"""Making the input's device current for a launch, without disturbing the caller's device.

The kernel must run on the input's device, not on whatever device is current (contract.md). The
primary context of that device is pushed only when another one is current, and popped after, so
torch's or CuPy's notion of the current device is left as it was.
"""

from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager

from . import module
from .entry_points import driver_function
from .module import check

_lock = threading.Lock()
_primary: dict[int, object] = {}
_primary_handle: dict[int, int] = {}
_CTX_GET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))


def primary_context(device: int):
    """The retained primary context of ``device`` (retained once per process)."""
    ctx = _primary.get(device)
    if ctx is None:
        from cuda.bindings import driver

        with _lock:
            ctx = _primary.get(device)
            if ctx is None:
                module.init()
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
    if driver_function("cuCtxGetCurrent", _CTX_GET_CURRENT)(ctypes.byref(current)):
        return False  # let the checked path below report the driver's error
    return current.value == handle


@contextmanager
def on_device(device: int):
    """Run the body with ``device``'s primary context current."""
    if is_current(device):
        yield
        return
    from cuda.bindings import driver

    check(driver.cuCtxPushCurrent(primary_context(device)), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")
