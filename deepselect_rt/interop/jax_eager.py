"""Concrete ``jax.Array`` inputs on the GPU through a cached ``jax.jit`` of the traced call.

Why: the eager path exchanges a JAX call's arrays through DLPack three times (the input and
both outputs), about 300 us of host time per call; a jitted call costs one XLA dispatch, XLA
allocates the outputs, and it orders the launch after the caller's pending JAX work on its own.
The results are the traced call's, which are the eager call's (contract.md).

Taken when the input is a concrete jax.Array on a GPU of a process that sees one GPU (under
"raise" the device's NaN record is compiled into the call), the row vectors are jax.Arrays too
(NumPy ones have their host values checked, which a jitted call cannot do), no caller buffer
and no explicit stream are given, the policy is not "raise_sync", and jaxlib's kernel-call
target can be used (otherwise the jitted call would run through a host callback). Every other
call takes the eager path.
"""

from __future__ import annotations

import math

import jax

from .. import nan_record
from . import jax as jax_interop


def _scalar_key(value) -> tuple:
    """``value`` with its type (1, 1.0 and True are different arguments); NaN as a name, so that
    a NaN fill finds its function again."""
    if type(value) is float and math.isnan(value):
        return float, "nan"
    return type(value), value


_MAX_FUNCTIONS = 256
_functions: dict = {}


def _jitted(vectors: tuple[str, ...], scalars: tuple):
    """The jitted call for row vectors ``vectors`` (names, in operand order) and the scalar
    arguments ``scalars`` (api.topk's, in its order)."""
    k, sorted, indices_type, sorted_index, idx_fill, val_fill, return_value, abort, nan_policy = scalars

    def call(x, *given):
        named = dict(zip(vectors, given))
        return jax_interop.topk(x, k, sorted, named.get("begin"), named.get("end"), indices_type, sorted_index,
                                None, None, named.get("output_idx_offset"), idx_fill, val_fill, return_value,
                                abort, nan_policy, None)

    return jax.jit(call)


def topk(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx, output_val, output_idx_offset,
         idx_oob_fill_value, value_oob_fill_value, return_value, abort_when_nan_found, nan_policy, stream):
    """``api.topk`` on a concrete jax.Array, as ``(values, indices)`` jax.Arrays from the cached
    jitted call; None when the call is not one this route takes (module docstring). Raises what
    the traced call raises for the same arguments, and NaNInputError for NaN rows that earlier
    calls on the device met under "raise"."""
    if stream is not None or output_idx is not None or output_val is not None or nan_policy == "raise_sync":
        return None
    ordinal = jax_interop.gpu_route_ordinal()
    if ordinal is None or not jax_interop.on_gpu(input):
        return None
    given = jax_interop.given_vectors(begin, end, output_idx_offset)
    if not all(isinstance(obj, jax.Array) for obj in given.values()):
        return None
    scalars = (topk, sorted, indices_type, sorted_index, idx_oob_fill_value, value_oob_fill_value, return_value,
               abort_when_nan_found, nan_policy)
    key = (tuple(given), tuple(map(_scalar_key, scalars)))
    try:
        fn = _functions.get(key)
    except TypeError:  # an unhashable argument: the eager path says what is wrong with it
        return None
    if fn is None:
        if len(_functions) >= _MAX_FUNCTIONS:
            _functions.clear()
        fn = _functions[key] = _jitted(tuple(given), scalars)
    nan_record.raise_pending(("cuda", ordinal))
    return fn(input, *given.values())
