"""Compiled kernels loaded on devices: ``get_kernel(device, spec)`` turns a kernel spec into a
launchable ``CUkernel`` once per (device ordinal, spec).

The device's compute capability picks the arch, the kernel cache gives the cubin (compiling it
with NVRTC on a miss), ``cuLibraryLoadData`` loads it and ``cuLibraryGetKernel`` finds the
entry. Libraries stay loaded for the life of the process.
"""

from __future__ import annotations

import threading

from ..jit.cache import default_cache
from ..jit.spec import KernelSpec
from .nvrtc import NVRTC_COMPILER
from .arch import run_arch
from .driver import bindings, check

_lock = threading.Lock()
# (device ordinal, spec) -> (CUlibrary, CUkernel, cubin). The library is kept so it is never
# unloaded, the cubin because lazy loading may read the image after cuLibraryLoadData returns.
_kernels: dict[tuple[int, KernelSpec], tuple] = {}


def get_kernel(device_ordinal: int, variant: KernelSpec, cache=None):
    """The ``CUkernel`` of ``variant`` for device ``device_ordinal``, loaded once per process.

    cache: a ``KernelCache`` (default: the process-wide NVRTC cache). Raises CompileError when the
    kernel does not compile, BackendUnavailableError without a driver or for an unsupported GPU,
    RuntimeError (with the driver's error name) when loading fails.
    """
    key = (device_ordinal, variant)
    with _lock:
        found = _kernels.get(key)
    if found is not None:
        return found[1]
    arch = run_arch(device_ordinal)
    if cache is None:
        cache = default_cache(NVRTC_COMPILER)
    cubin = cache.get_or_build(variant, arch)
    driver = bindings()
    with _lock:
        found = _kernels.get(key)  # another thread may have loaded it meanwhile
        if found is not None:
            return found[1]
        library = check(driver.cuLibraryLoadData(cubin, None, None, 0, None, None, 0),
                        f"cuLibraryLoadData({variant.entry}, {arch})")
        try:
            kernel = check(driver.cuLibraryGetKernel(library, variant.entry.encode()),
                           f"cuLibraryGetKernel({variant.entry})")
        except RuntimeError:
            driver.cuLibraryUnload(library)
            raise
        _kernels[key] = (library, kernel, cubin)
        return kernel
