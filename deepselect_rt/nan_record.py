"""The NaN record: how nan_policy="raise" reports NaN rows without blocking the host.

A launch under "raise" writes the NaN sentinel into every NaN row, as "sentinel" does, and also
appends one entry per NaN row to its device's record: a ring of ``CAPACITY`` entries of four
32-bit words ``(seq, call, row_lo, row_hi)``, where ``seq`` is the entry's position in the
ring's history plus one and is written last. For the CUDA backend the ring lives in pinned host
memory mapped into the device (the kernels publish each entry with ``__threadfence_system``) and
its position counter in device memory; the CPU backend appends to a NumPy ring the same way.

The host never waits: every call into the library on a device first reads the record's next
entry (one word of host memory); once the GPU has run a call that met a NaN, that word holds the
expected ``seq``, and the call raises ``NaNInputError`` naming the earlier call and its rows,
before launching anything. ``deepselect_rt.check_nan`` synchronises first, then does the same.
Under CUDA-graph replay the captured launch writes the same record again, so a replayed NaN is
reported the same way. More than ``CAPACITY`` NaN rows between two checks: the oldest are lost,
and the error says how many.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .errors import NaNInputError

CAPACITY = 1024          # entries in a ring; kernels_cu/row/nan_record.cuh DS_NAN_RECORD_CAP
WORDS = 4                # (seq, call, row_lo, row_hi)
_DESCRIPTIONS = 1 << 16  # call descriptions kept (graph-captured calls replay long after)


class NanRecord:
    """One device's ring (``entries``: a writable (CAPACITY, 4) uint32 array, zeroed) and the
    host's side of it: where reading stands and what each call id was."""

    def __init__(self, entries: np.ndarray):
        if entries.shape != (CAPACITY, WORDS) or entries.dtype != np.uint32:
            raise ValueError(f"a NaN record is a ({CAPACITY}, {WORDS}) uint32 array, got {entries.shape} "
                             f"{entries.dtype}")
        self.entries = entries
        self._seq = entries[:, 0]
        self.read = 0            # entries consumed so far (the next expected seq is read + 1)
        self.written = 0         # host writers only (the CPU backend): entries appended so far
        self._next_call = 0
        self._calls: OrderedDict[int, str] = OrderedDict()
        self._lock = threading.Lock()

    def new_call(self, description: str) -> int:
        """A fresh call id (1 .. 2**32 - 1, wrapping) for a launch described by ``description``."""
        with self._lock:
            self._next_call = self._next_call % 0xFFFFFFFF + 1
            self._calls[self._next_call] = description
            if len(self._calls) > _DESCRIPTIONS:
                self._calls.popitem(last=False)
            return self._next_call

    def pending(self) -> bool:
        """Whether an entry is waiting to be reported (one read of host memory, no lock)."""
        return int(self._seq[self.read % CAPACITY]) > self.read

    def append(self, call: int, rows) -> None:
        """Record NaN ``rows`` of ``call`` as a kernel would (the CPU backend's writer)."""
        with self._lock:
            for row in rows:
                slot = self.entries[self.written % CAPACITY]
                slot[1], slot[2], slot[3] = call, int(row) & 0xFFFFFFFF, int(row) >> 32
                slot[0] = (self.written + 1) & 0xFFFFFFFF
                self.written += 1

    def take(self) -> tuple[dict[int, list[int]], int]:
        """The entries written since the last take, as {call id: rows}, and how many were lost
        to the ring wrapping around."""
        found: dict[int, list[int]] = {}
        lost = 0
        with self._lock:
            while True:
                seq = int(self._seq[self.read % CAPACITY])
                if seq <= self.read:
                    break                    # not yet written (or not yet visible)
                if seq > self.read + 1:      # a later lap overwrote it: the ring holds [seq - CAPACITY, seq)
                    start = max(seq - CAPACITY, self.read + 1)
                    lost += start - self.read
                    self.read = start
                    continue
                _, call, lo, hi = (int(w) for w in self.entries[self.read % CAPACITY])
                found.setdefault(call, []).append(lo | hi << 32)
                self.read += 1
        return found, lost

    def raise_pending(self) -> None:
        """Raise NaNInputError for what ``take`` finds, naming the earliest call; no-op if none."""
        if not self.pending():
            return
        found, lost = self.take()
        if not found and not lost:
            return
        call = min(found, default=0)
        rows = sorted(set(found.get(call, [])))
        others = sorted(set(found) - {call})
        with self._lock:
            description = self._calls.get(call, f"call {call}")
        raise NaNInputError(rows, call=description, other_calls=len(others), lost=lost)


_records: dict[tuple[str, int], NanRecord] = {}
_records_lock = threading.Lock()


def record_for(device: tuple[str, int], make) -> NanRecord:
    """The record of ``device`` ((device type, ordinal)), made by ``make()`` (a zeroed entries
    array) on first use."""
    record = _records.get(device)
    if record is None:
        with _records_lock:
            record = _records.get(device)
            if record is None:
                record = _records[device] = NanRecord(make())
    return record


def raise_pending(device: tuple[str, int]) -> None:
    """Raise NaNInputError for NaN rows that earlier calls on ``device`` met and the GPU has
    finished writing; a no-op for a device with nothing pending (the per-call check)."""
    record = _records.get(device)
    if record is not None and record.pending():
        record.raise_pending()


def has_devices(device_type: str) -> bool:
    """Whether any device of ``device_type`` ("cuda", "cpu") has a record."""
    return any(kind == device_type for kind, _ in list(_records))


def raise_all_pending() -> None:
    """``raise_pending`` for every device with a record."""
    for device in list(_records):
        raise_pending(device)


__all__ = ["CAPACITY", "NanRecord", "record_for", "raise_pending", "has_devices", "raise_all_pending"]
