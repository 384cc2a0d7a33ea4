"""Driver functions on the per-call path as ctypes callables, from ``cuGetProcAddress``.

cuda.bindings wraps every driver call in Python objects (a CUresult enum, handle objects); the
few calls made on every top-k (launch, current context) go through these plain function
pointers instead: one foreign call, integers in and out.
"""

from __future__ import annotations

import ctypes
import threading

_found: dict[bytes, object] = {}
_lock = threading.Lock()
# The CUDA version whose function signatures the prototypes below follow.
_API_VERSION = 12000


def driver_function(name: str, prototype):
    """The driver's ``name`` as a ``prototype`` (a ctypes.CFUNCTYPE) callable, looked up once.
    Call after ``module.init()``. Raises RuntimeError when the driver lacks it."""
    key = name.encode()
    fn = _found.get(key)
    if fn is None:
        from cuda.bindings import driver

        from .module import check

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
    from cuda.bindings import driver

    return driver.cuGetErrorName(driver.CUresult(err))[1].decode()


CTX_GET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
