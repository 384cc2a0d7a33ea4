"""JAX as a caller framework: outputs made by another allocator and handed to JAX without a copy.

Imported only once a JAX array has been passed in, so importing deepselect_rt never imports JAX.
"""

from __future__ import annotations

import jax
import numpy as np

from ..dtypes import ITEMSIZE
from .views import TensorView, numpy_view, view_of


def check_output_dtype(dtype: str) -> None:
    """Raises TypeError for a 64-bit output while JAX has x64 disabled (JAX would silently
    truncate it)."""
    if ITEMSIZE[dtype] == 8 and not jax.config.jax_enable_x64:
        raise TypeError(f"cannot return {dtype} to JAX: 64-bit types are disabled "
                        "(jax_enable_x64=False) and JAX would truncate them; pass "
                        "indices_type='int32' or enable jax_enable_x64")


def output_of(like: TensorView, buffer) -> tuple[TensorView, object]:
    """(view to write, function turning the written buffer into a jax.Array) for ``buffer``, a
    64-byte aligned NumPy array (CPU) or a torch/CuPy CUDA array on ``like``'s device."""
    if isinstance(buffer, np.ndarray):
        device = next(iter(like.obj.devices()))
        # device_put of 64-byte aligned host memory aliases it on XLA's CPU client (and
        # handles bfloat16, which NumPy's DLPack export cannot).
        return numpy_view(buffer, "output"), lambda out: jax.device_put(out, device)
    return view_of(buffer, name="output"), jax.dlpack.from_dlpack
