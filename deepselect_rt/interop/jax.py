"""JAX as a caller framework, eager and traced.

Concrete ``jax.Array`` inputs on the GPU run the primitive below through a cached ``jax.jit``
where they can (``jax_eager.py``); the others take the eager path like every other framework:
views through DLPack, outputs made by another allocator and handed to JAX without a copy
(``output_of``).

Traced inputs (inside ``jax.jit``, ``jax.vmap``, ``jax.grad``, ...) take ``topk`` below, which
``api.topk`` routes to when an array argument is a JAX tracer. A call there is one JAX primitive,
``deepselect_rt_topk``, wrapped in ``jax.custom_vjp``:

- lowering: on every platform a ``jax.pure_callback`` into the CPU backend (``host.py``, the
  NumPy reference), the always-available route; on CUDA, where jaxlib's kernel-call target is
  usable, our NVRTC kernel launched by XLA on its stream into XLA's buffers (``jax_ffi.py``).
- batching (``jax.vmap``): the batch axis is folded into rows, one call for the whole batch.
- differentiation (``jax.grad``): the cotangent of the values goes back to the selected columns
  of the input; fill and sentinel slots, and the integer arguments, get none.
- no jit (``jax.vmap``/``jax.grad`` alone on concrete arrays): the eager call.

Imported only once a JAX array has been passed in, so importing deepselect_rt never imports JAX.
Every use of JAX's private API is in ``jax_ffi.py``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from .. import checks, eager, host, nan_record
from ..dtypes import ITEMSIZE, double_bits, from_double_bits
from ..request import TopkRequest
from . import jax_ffi
from .views import INDEX_DTYPES_TEXT, VALUE_DTYPES_TEXT, TensorView, abstract_view, numpy_view, view_of


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


# --- traced calls ------------------------------------------------------------------------

#: The row-vector arguments, in the primitive's operand order after the input.
VECTORS = ("begin", "end", "output_idx_offset")


def given_vectors(begin, end, output_idx_offset) -> dict:
    """The row vectors passed, by name, in VECTORS' order."""
    return {name: obj for name, obj in zip(VECTORS, (begin, end, output_idx_offset)) if obj is not None}


class Call(NamedTuple):
    """The static part of a traced call: the primitive's one parameter (hashable, so jit caches
    on it). ``vectors`` names the row vectors passed, in operand order after the input."""

    k: int
    width: int
    sorted: bool
    return_value: bool
    index_dtype: str           # "int32" | "int64"
    nan_policy: str            # "raise", "sentinel" or "propagate"
    idx_fill: int
    val_fill_bits: int         # the fill as a float64 bit pattern: a NaN fill still compares equal
    vectors: tuple[str, ...]

    @property
    def val_fill(self) -> float:
        return from_double_bits(self.val_fill_bits)


def topk(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx, output_val, output_idx_offset,
         idx_oob_fill_value, value_oob_fill_value, return_value, abort_when_nan_found, nan_policy, stream):
    """``api.topk`` when an array argument is a JAX tracer (inside ``jax.jit``, ``jax.vmap``,
    ``jax.grad`` or another transformation): same arguments in the same order, same results.

    ``input``: ``(rows, width)`` bfloat16, float16 or float32, a traced or concrete jax.Array or
    a NumPy array; ``begin``, ``end``, ``output_idx_offset``: None or ``(rows,)`` int32/int64, the
    same kinds. Returns ``(values or None, indices)`` as traced jax.Arrays: values ``(rows,
    topk)`` of the input dtype, indices ``(rows, topk)`` of ``indices_type``. Traced ``begin`` and
    ``end`` are clamped into ``[0, width]`` (as device arrays are); NumPy ones are checked.

    ``nan_policy="raise"`` (the default) gives NaN rows the sentinel and records them as the
    eager call does; the record is read by the next eager call on the device that ran it, or by
    ``deepselect_rt.check_nan()`` (a jitted call cannot raise while it runs).

    Raises, while tracing, what the eager call raises for the same arguments (same messages),
    and: TypeError for ``output_idx``/``output_val`` (JAX arrays are immutable) and for 64-bit
    indices without ``jax_enable_x64``; ValueError for ``stream`` (XLA picks the stream) and for
    ``nan_policy="raise_sync"`` (it would have to raise while the computation runs);
    BackendUnavailableError for a JAX older than ``jax_ffi.MIN_JAX``.
    """
    jax_ffi.check_version()
    checks.stream_handle(stream)  # its type errors, as an eager call raises them
    x = _view(input, "input", VALUE_DTYPES_TEXT)
    checks.check_input(x)
    sc = checks.scalar_arguments(topk, sorted, sorted_index, return_value, indices_type, nan_policy,
                                 abort_when_nan_found, idx_oob_fill_value, value_oob_fill_value, output_val)
    given = given_vectors(begin, end, output_idx_offset)
    views = {name: _view(obj, name, INDEX_DTYPES_TEXT) for name, obj in given.items()}
    for name, view in views.items():
        checks.check_row_vector(view, name, x)
    b, e = (checks.host_values(views.get(name)) for name in ("begin", "end"))
    checks.check_ranges(b, e, x)
    if all(views[name].device_type == "cpu" for name in ("begin", "end") if name in views):
        checks.check_offsets(views.get("output_idx_offset"), b, e, sc.index_dtype, x)
    for name, buffer in (("output_idx", output_idx), ("output_val", output_val)):
        if buffer is not None:
            raise TypeError(f"{name} cannot be written inside a JAX transformation (JAX arrays are immutable); "
                            f"leave {name}=None and use the returned array")
    if stream is not None:
        raise ValueError("stream cannot be passed inside a JAX transformation: XLA runs the call on its own stream")
    if sc.nan_policy == "raise_sync":
        raise ValueError("nan_policy='raise_sync' cannot raise while a JAX computation runs; pass 'raise' "
                         "(NaN rows get the sentinel and deepselect_rt.check_nan() reports them), 'sentinel' "
                         "or 'propagate'")
    check_output_dtype(sc.index_dtype)

    rows, width = x.shape
    xs = jnp.asarray(input)
    index_dtype = jnp.dtype(sc.index_dtype)
    if rows == 0 or sc.k == 0:  # no launch, and nothing to differentiate
        values = jnp.zeros((rows, sc.k), xs.dtype) if sc.return_value else None
        return values, jnp.zeros((rows, sc.k), index_dtype)
    call = Call(sc.k, width, sc.sorted, sc.return_value, sc.index_dtype, sc.nan_policy, sc.idx_fill,
                double_bits(sc.val_fill), tuple(given))
    outs = _differentiable_topk(call, xs, tuple(jnp.asarray(obj) for obj in given.values()))
    return (outs[0], outs[1]) if sc.return_value else (None, outs[0])


def _view(obj, name: str, takes: str) -> TensorView:
    """An abstract view of a jax.Array (traced or not), a NumPy view of a NumPy array (its host
    values then take the eager checks); TypeError otherwise."""
    if isinstance(obj, (jax.Array, jax.core.Tracer)):
        return abstract_view(obj.shape, obj.dtype, name, takes)
    if isinstance(obj, np.ndarray):
        return numpy_view(obj, name, takes)
    raise TypeError(f"{name} must be a JAX or NumPy array when topk runs inside a JAX transformation, got "
                    f"{type(obj).__module__}.{type(obj).__qualname__}")


# --- the primitive ---------------------------------------------------------------------------

topk_p = Primitive("deepselect_rt_topk")
topk_p.multiple_results = True


def _out_types(rows: int, dtype, call: Call) -> list[tuple[tuple[int, int], np.dtype]]:
    shapes = [((rows, call.k), np.dtype(call.index_dtype))]
    return [((rows, call.k), np.dtype(dtype))] + shapes if call.return_value else shapes


@topk_p.def_abstract_eval
def _abstract_eval(x, *vectors, call: Call):
    return [jax.core.ShapedArray(shape, dtype) for shape, dtype in _out_types(x.shape[0], x.dtype, call)]


@functools.cache
def gpu_route_ordinal() -> int | None:
    """The CUDA ordinal of the process's GPU where concrete GPU arrays can run the primitive
    through jax.jit on the kernel route: JAX sees exactly one GPU (under "raise" the device's NaN
    record is compiled into the call) and jaxlib's kernel-call target can be used. Else None."""
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:  # a jaxlib without a GPU backend
        return None
    if len(gpus) != 1 or jax_ffi.kernel_call_route()[0] is None:
        return None
    return jax_ffi.target_device("sentinel")


def on_gpu(array) -> bool:
    """Whether ``array`` is a concrete jax.Array on a GPU."""
    return isinstance(array, jax.Array) and next(iter(array.devices())).platform == "gpu"


@functools.lru_cache(maxsize=256)
def _jitted_bind(call: Call):
    return jax.jit(functools.partial(topk_p.bind, call=call))


@topk_p.def_impl
def _impl(x, *vectors, call: Call):
    """Concrete arrays (vmap or grad without jit): on the GPU through jax.jit where the kernel
    route serves (no DLPack exchange, XLA's buffers), else the eager call."""
    ordinal = gpu_route_ordinal() if on_gpu(x) else None
    if ordinal is not None:
        nan_record.raise_pending(("cuda", ordinal))  # as every call on the device does first
        return list(_jitted_bind(call)(x, *vectors))
    named = dict(zip(call.vectors, vectors))
    values, indices = eager.topk(x, call.k, sorted=call.sorted, begin=named.get("begin"), end=named.get("end"),
                                 indices_type=call.index_dtype, output_idx_offset=named.get("output_idx_offset"),
                                 idx_oob_fill_value=call.idx_fill, value_oob_fill_value=call.val_fill,
                                 return_value=call.return_value, nan_policy=call.nan_policy)
    return [values, indices] if call.return_value else [indices]


def host_topk(call: Call, x, *vectors) -> tuple[np.ndarray, ...]:
    """The callback: ``call`` on host arrays through the CPU backend (``host.run``), which under
    "raise" gives NaN rows the sentinel and records them in the CPU's NaN record. Returns
    ``(values, indices)`` or ``(indices,)``. Never raises for NaN (a callback must not)."""
    x = np.asarray(x)
    named = {name: numpy_view(np.asarray(v), name) for name, v in zip(call.vectors, vectors)}
    out = [np.empty(shape, dtype) for shape, dtype in _out_types(x.shape[0], x.dtype, call)]
    host.run(TopkRequest(
        x=numpy_view(x, "input"), k=call.k, begin=named.get("begin"), end=named.get("end"),
        offsets=named.get("output_idx_offset"), index_dtype=call.index_dtype, sorted=call.sorted,
        sorted_index=False, return_value=call.return_value, nan_policy=call.nan_policy, idx_fill=call.idx_fill,
        val_fill=call.val_fill, out_idx=numpy_view(out[-1], "output_idx"),
        out_val=numpy_view(out[0], "output_val") if call.return_value else None, stream=0))
    return tuple(out)


def _callback(x, *vectors, call: Call):
    shapes = tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in _out_types(x.shape[0], x.dtype, call))
    # The primitive's batching rule folds a vmapped batch into rows before lowering, so the
    # callback itself is never vmapped; "sequential" is the declared (unused) fallback.
    return jax.pure_callback(functools.partial(host_topk, call), shapes, x, *vectors, vmap_method="sequential")


callback_lowering = mlir.lower_fun(_callback, multiple_results=True)
mlir.register_lowering(topk_p, callback_lowering)
jax_ffi.register_gpu_lowering(topk_p, callback_lowering)


def _batch_rule(args, dims, *, call: Call):
    """vmap: the batch axis (of any argument) first, broadcast where unbatched, folded into rows."""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    x, *vectors = (jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
                   for a, d in zip(args, dims))
    rows = x.shape[1]
    outs = topk_p.bind(x.reshape(size * rows, x.shape[2]), *(v.reshape(size * rows) for v in vectors), call=call)
    return [out.reshape(size, rows, call.k) for out in outs], [0] * len(outs)


batching.primitive_batchers[topk_p] = _batch_rule


# --- differentiation -------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _differentiable_topk(call: Call, x, vectors):
    return tuple(topk_p.bind(x, *vectors, call=call))


def _forward(call: Call, x, vectors):
    outs = tuple(topk_p.bind(x, *vectors, call=call))
    return outs, (outs, vectors)


def _backward(call: Call, residuals, cotangents):
    """The values' cotangent added at each selected column of the input; nothing from fill slots
    (past ``min(k, end - begin)``), from sentinel rows, or for indices and the row vectors."""
    outs, vectors = residuals
    none = tuple(None for _ in vectors)
    if not call.return_value:
        return None, none
    (values, indices), g = outs, cotangents[0]
    rows, k = indices.shape
    named = dict(zip(call.vectors, vectors))
    end = jnp.clip(named["end"], 0, call.width).astype(jnp.int32) if "end" in named else jnp.full(rows, call.width, jnp.int32)
    begin = jnp.clip(named["begin"], 0, end).astype(jnp.int32) if "begin" in named else jnp.zeros(rows, jnp.int32)
    count = jnp.minimum(end - begin, k)[:, None]
    valid = jnp.arange(k) < count
    if call.nan_policy != "propagate":
        # A sentinel row: slot 0 holds NaN though the row has elements (elsewhere it never does).
        valid &= ~(jnp.isnan(values[:, :1]) & (count > 0))
    columns = indices
    if "output_idx_offset" in named:  # undone in the index type: int32 wraps back exactly
        columns = columns - named["output_idx_offset"].astype(indices.dtype)[:, None]
    columns = jnp.where(valid, columns, call.width)  # past the row: dropped
    g = jnp.where(valid, g, jnp.zeros((), g.dtype))
    grad = jnp.zeros((rows, call.width), g.dtype).at[jnp.arange(rows)[:, None], columns].add(g, mode="drop")
    return grad, none


_differentiable_topk.defvjp(_forward, _backward)

