"""Making the input's device current for a launch, without disturbing the caller's device.

The kernel must run on the input's device, not on whatever device is current (contract.md). The
primary context of that device is pushed only when another one is current, and popped after, so
torch's or CuPy's notion of the current device is left as it was.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from . import module
from .module import check

_lock = threading.Lock()
_primary: dict[int, object] = {}


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
                _primary[device] = ctx
    return ctx


@contextmanager
def on_device(device: int):
    """Run the body with ``device``'s primary context current."""
    from cuda.bindings import driver

    ctx = primary_context(device)
    current = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(current) == int(ctx):
        yield
        return
    check(driver.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")
