"""CuPy as a caller framework: its current stream and output allocation.

Imported only once a CuPy array has been passed in (or CuPy must allocate for another
producer), so importing deepselect_rt never imports CuPy.
"""

from __future__ import annotations

from contextlib import nullcontext

import cupy

from ..dtypes import numpy_dtype


def current_stream(device_id: int) -> int:
    """CuPy's current stream handle on CUDA device ``device_id``."""
    with cupy.cuda.Device(device_id):
        return cupy.cuda.get_current_stream().ptr


class _StreamHandle:
    """A raw ``cudaStream_t`` in the CUDA stream protocol, which ``Stream.from_external`` reads."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.handle


# CuPy >= 14 wraps a foreign stream with Stream.from_external and deprecates ExternalStream.
_FROM_EXTERNAL = getattr(cupy.cuda.Stream, "from_external", None)


def _stream(handle: int, device_id: int):
    """A CuPy stream object for the CUDA stream ``handle`` on ``device_id``, the current device."""
    if _FROM_EXTERNAL is not None:
        return _FROM_EXTERNAL(_StreamHandle(handle))
    return cupy.cuda.ExternalStream(handle, device_id)


def empty(shape, dtype: str, device_id: int, stream: int | None = None):
    """An uninitialised contiguous CuPy array of canonical ``dtype`` on ``device_id``, allocated
    with ``stream`` current (None: CuPy's current stream), so CuPy's memory pool hands it out again
    only after that stream's work. Raises TypeError for a dtype this CuPy build lacks."""
    with cupy.cuda.Device(device_id), (nullcontext() if stream is None else _stream(stream, device_id)):
        try:
            return cupy.empty(shape, dtype=numpy_dtype(dtype))
        except (TypeError, ValueError) as exc:  # CuPy builds without bfloat16
            raise TypeError(f"CuPy cannot allocate a {dtype} output ({exc}); pass output_val= "
                            "or return_value=False") from exc
