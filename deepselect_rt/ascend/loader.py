"""Ascend binaries loaded on NPUs: the kernel cache with the Ascend compiler, and
``get_function``, which loads a binary once per (device, cache key) with
``acl.rt.binary_load_from_data`` and finds its entry with ``acl.rt.binary_get_function``.
Binaries stay loaded for the life of the process.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

from ..jit.cache import KernelCache, default_cache
from .compiler import AscendCompiler
from .launch import check

ASCEND_COMPILER = AscendCompiler()

_lock = threading.Lock()
# (device, cache key) -> (bin handle, func handle, host copy of the binary). The host copy is
# kept because the runtime may read it after binary_load_from_data returns.
_loaded: dict[tuple[int, str], tuple] = {}


def get_function(device: int, key: str, entry: str, binary: bytes) -> int:
    """The function handle of ``entry`` in ``binary`` on ``device`` (loaded once per key)."""
    with _lock:
        found = _loaded.get((device, key))
        if found is not None:
            return found[1]
        import acl

        data = ctypes.create_string_buffer(binary, len(binary))
        bin_handle, ret = acl.rt.binary_load_from_data(ctypes.addressof(data), len(binary), [])
        check(ret, "acl.rt.binary_load_from_data")
        func, ret = acl.rt.binary_get_function(bin_handle, entry)
        check(ret, f"acl.rt.binary_get_function({entry!r})")
        _loaded[(device, key)] = (bin_handle, func, data)
        return func


def ascend_cache(into: Path | None = None) -> KernelCache:
    """The process-wide Ascend kernel cache for the current environment, or one that fills
    exactly the root ``into`` (``warmup --into``: nothing else is searched)."""
    if into is not None:
        return KernelCache(ASCEND_COMPILER, into, read_only=[])
    return default_cache(ASCEND_COMPILER)


__all__ = ["ASCEND_COMPILER", "ascend_cache", "get_function"]
