"""The memory of each CUDA device's NaN record (``nan_record.py``): its entries in pinned host
memory mapped into the device, its counter in device memory. Allocated once per device, on first
use, and kept for the life of the process (captured CUDA graphs hold the addresses)."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from .. import nan_record
from .driver import bindings, check, on_device

_lock = threading.Lock()
_memory: dict[int, tuple[nan_record.NanRecord, int, int]] = {}


def record(device: int) -> tuple[nan_record.NanRecord, int, int]:
    """(the record, its counter's device address, its entries' device address) for CUDA device
    ``device``. Raises RuntimeError (the driver's error) when pinned memory cannot be had."""
    found = _memory.get(device)
    if found is not None:
        return found
    with _lock:
        found = _memory.get(device)
        if found is None:
            found = _memory[device] = _allocate(device)
    return found


def _allocate(device: int) -> tuple[nan_record.NanRecord, int, int]:
    driver = bindings()
    nbytes = nan_record.CAPACITY * nan_record.WORDS * 4
    with on_device(device):
        flags = driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE
        host = int(check(driver.cuMemHostAlloc(nbytes, flags), "cuMemHostAlloc"))
        ctypes.memset(host, 0, nbytes)
        entries = int(check(driver.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
        head = int(check(driver.cuMemAlloc(4), "cuMemAlloc"))
        check(driver.cuMemsetD32(head, 0, 1), "cuMemsetD32")
    words = (ctypes.c_uint32 * (nbytes // 4)).from_address(host)
    array = np.frombuffer(words, np.uint32).reshape(nan_record.CAPACITY, nan_record.WORDS)
    record_ = nan_record.record_for(("cuda", device), lambda: array)
    return record_, head, entries


def synchronize(stream: int | None) -> None:
    """Wait for ``stream`` (a handle), or, for None, for every device that has a NaN record."""
    driver = bindings()
    if stream is not None:
        check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        return
    for device in list(_memory):
        with on_device(device):
            check(driver.cuCtxSynchronize(), "cuCtxSynchronize")


__all__ = ["record", "synchronize"]
