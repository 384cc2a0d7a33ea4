"""Driver functions on the per-call path as ctypes callables, from ``cuGetProcAddress``.

For driver calls whose cuda.bindings form costs more than the call: checking the current
context (a handle object per call) and cluster launches (a CUlaunchConfig object per call). A
plain cuLaunchKernel is cheaper through cuda.bindings (measured with tools/host_profile.py).
"""

from __future__ import annotations

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

