"""Loading Ascend binaries and launching kernels through AscendCL's Python bindings (``acl``).

``get_function`` loads a binary once per (device, cache key) with
``acl.rt.binary_load_from_data`` and finds its entry with ``acl.rt.binary_get_function``;
binaries stay loaded for the life of the process. ``launch`` builds the argument list (one
by-value DsParams: ``kernel_args_init`` / ``kernel_args_append`` / ``kernel_args_finalize``)
and calls ``acl.rt.launch_kernel_with_config`` on the given stream. The caller makes the
tensor's device current first (``backend.py``).
"""

from __future__ import annotations

import ctypes
import threading

from .args import Params

_lock = threading.Lock()
# (device, cache key) -> (bin handle, func handle, host copy of the binary). The host copy is
# kept because the runtime may read it after binary_load_from_data returns.
_loaded: dict[tuple[int, str], tuple] = {}


def check(ret: int, what: str) -> None:
    """Raise RuntimeError naming the AscendCL call and its error code when ``ret`` != 0."""
    if ret != 0:
        raise RuntimeError(f"{what} failed: aclError {ret}")


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


def launch(func: int, block_dim: int, stream: int, params: Params) -> None:
    """Launch ``func`` on ``block_dim`` vector cores on ``stream`` with ``params``.

    Asynchronous. Raises RuntimeError naming the failing AscendCL call.
    """
    import acl

    args, ret = acl.rt.kernel_args_init(func)
    check(ret, "acl.rt.kernel_args_init")
    _, ret = acl.rt.kernel_args_append(args, ctypes.addressof(params), ctypes.sizeof(params))
    check(ret, "acl.rt.kernel_args_append")
    check(acl.rt.kernel_args_finalize(args), "acl.rt.kernel_args_finalize")
    check(acl.rt.launch_kernel_with_config(func, block_dim, stream, [], args, 0),
          "acl.rt.launch_kernel_with_config")


__all__ = ["check", "get_function", "launch"]
