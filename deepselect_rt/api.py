"""``topk`` and ``get_stride_requirement``: the public entry, routing only.

An eager call runs ``eager.topk``; while torch.compile traces a torch tensor, the call becomes
one torch custom op (``interop.torch_op``), whose implementation is the eager call again; a call
on JAX tracers (inside jax.jit, vmap, grad) becomes one JAX primitive (``interop.jax``), and a
call on concrete jax.Arrays on the GPU runs that primitive through a cached jax.jit where it can
(``interop.jax_eager``).
"""

from __future__ import annotations

import math
import sys

from . import checks, eager, nan_record

# Row-start alignment (bytes) at which input and outputs take the vectorised path.
INPUT_ROW_ALIGN = 16
OUTPUT_ROW_ALIGN = 16


def get_stride_requirement() -> tuple[int, int]:
    """Row-stride alignments, in bytes, at which the fast (16-byte vector) path is taken.

    Returns ``(input_row_stride_bytes, output_row_stride_bytes)``. This is advice, not a
    precondition: any row stride is accepted and gives the same, exact answer (contract.md).
    """
    return INPUT_ROW_ALIGN, OUTPUT_ROW_ALIGN


def topk(input, topk, sorted=False, begin=None, end=None, indices_type="int64", sorted_index=False,
         output_idx=None, output_val=None, output_idx_offset=None, idx_oob_fill_value=2**31 - 1,
         value_oob_fill_value=-math.inf, return_value=True, abort_when_nan_found=True,
         nan_policy=None, stream=None, *, page_table=None, page_size=None, row_to_batch=None, k_per_row=None,
         return_raw_indices=False, output_raw_idx=None):
    """Exact top-k of every row: the ``topk`` largest elements of ``input[i, begin[i]:end[i]]``.

    Argument names and defaults are DeepSeek DeepSelect's ``deep_select.topk``; ``begin``,
    ``output_val``, ``nan_policy`` and ``stream`` are deepselect-rt's. The full contract is in
    docs/contract.md.

    Args:
        input: ``(rows, width)`` bfloat16, float16 or float32; a torch, JAX or CuPy tensor (any
            ``__dlpack__`` producer) or a NumPy array (CPU reference). Last dimension stride 1;
            any row stride. JAX arrays may be traced (inside ``jax.jit``, ``jax.vmap``,
            ``jax.grad``): the call is then one JAX primitive (docs/contract.md says what
            changes there: clamped ranges, no caller buffers or ``stream``). ``width`` at most
            ``2**31 - 1``.
        topk: k, an integer in ``[0, 2**31 - 1]`` (Python, NumPy, or a 0-d integer array; not a
            bool); ``k > width`` is allowed (rows are then short).
        sorted: values descending (ties by ascending index). Otherwise the selected set comes by
            ascending index.
        begin, end: optional ``(rows,)`` int32/int64 on the input's device: row i selects from
            columns ``[begin[i], end[i])`` (defaults 0 and width). Host arrays must satisfy
            ``0 <= begin <= end <= width``; device arrays are clamped into range.
        indices_type: "int32" or "int64" (string, NumPy, torch, JAX or CuPy dtype); default
            "int64".
        sorted_index: the selected set by ascending index (the unsorted order too); ``sorted``
            and ``sorted_index`` together are an error.
        output_idx, output_val: optional caller buffers ``(rows, topk)`` of the index dtype and
            the input dtype, last-dimension stride 1, any non-overlapping row stride; exactly
            ``rows * topk`` elements are written. Returned as the same objects.
        output_idx_offset: optional ``(rows,)`` int32/int64 added to each valid index of row i
            (never to fills), computed in the output index type.
        idx_oob_fill_value, value_oob_fill_value: fills for the slots of short rows
            (``end - begin < topk``); defaults ``2**31 - 1`` and ``-inf``. The index fill must
            fit the index type.
        return_value: when False, values are neither computed nor returned (``None``), and
            ``output_val`` must be None.
        abort_when_nan_found: selects ``nan_policy`` when that is None: True gives "raise",
            False gives "sentinel".
        nan_policy: "raise" (a NaN row gets the sentinel, as under "sentinel", and is recorded:
            the next call on the device, or ``check_nan``, raises NaNInputError once the GPU
            has run this one; never blocks), "raise_sync" (waits for the GPU and raises from
            this call), "sentinel" (a NaN row gets 0x3F3F3F3F indices and NaN values),
            "propagate" (NaN ranks above +inf).
        stream: CUDA stream: an integer handle in ``[0, 2**64)`` (Python or NumPy; not a bool),
            or a stream object: its ``__cuda_stream__()`` returning ``(version, handle)`` (the
            CUDA stream protocol), else its integer ``.cuda_stream``, ``.ptr`` or ``.handle``
            (torch, CuPy); default the caller framework's current stream on the input's device.
            Arrays that come through DLPack (CuPy, JAX) are exported for this stream, so their
            framework orders its pending writes to them before it; torch tensors are not (as
            with torch's own side streams, order them yourself). NumPy inputs run on the CPU
            reference, before the call returns, and use no stream (one given is checked, then
            unused).

    Serving options (keyword-only; contract.md, "Serving"):
        page_table: optional ``(batch, max_pages)`` int32 on the input's device (last-dimension
            stride 1, any row stride). Each valid index c of row i (after ``output_idx_offset``:
            the raw index, a logical position) becomes ``page_table[b, c // page_size] *
            page_size + c % page_size``, ``b = row_to_batch[i]``, computed in the output index
            type; fills and the NaN sentinel are kept. A position outside ``[0, max_pages *
            page_size)`` is a ValueError when the host can tell, else that slot is a fill.
        page_size: positions a page holds, an integer in ``[1, 2**31 - 1]``; required with
            ``page_table``, refused without it.
        row_to_batch: optional ``(rows,)`` int32/int64: row i's table row (default i, and then
            the table needs ``batch >= rows``). Host values outside ``[0, batch)`` are a
            ValueError; a device one there makes the row's valid slots fills.
        k_per_row: optional ``(rows,)`` int32/int64, ``0 <= k_per_row[i] <= topk`` (host values
            checked, device ones clamped): row i keeps its best ``k_per_row[i]`` elements, by
            descending value (whatever ``sorted`` says), and fills the slots after them.
            ``sorted_index=True`` is refused with it.
        return_raw_indices: also return the raw indices (before the page lookup), as a third
            output; ``output_raw_idx`` is its optional caller buffer (needs
            ``return_raw_indices=True``).

    Returns:
        ``(values, indices)``: values ``(rows, topk)`` of the input dtype, or None when
        ``return_value`` is False; indices ``(rows, topk)`` of ``indices_type``. Outputs are
        objects of the caller's framework on the input's device. Values carry no autograd
        history (unlike torch.topk's): gather from the input by the indices for a gradient.
        ``(values, indices, raw_indices)`` with ``return_raw_indices=True``.

    Raises:
        TypeError: a wrong type or dtype. ValueError: a wrong shape, range or combination, or a
        serving option under ``torch.compile`` or inside a JAX transformation.
        NaNInputError: NaN in a row of this call under nan_policy="raise_sync", or of an earlier
        call on the device under "raise" (raised before this call launches anything).
        BackendUnavailableError: no backend for the input's device, or a JAX too old for its
        transformations (the message names what is missing). CompileError: a kernel that
        NVRTC cannot compile (first use of a variant). RuntimeError: a CUDA driver error
        (named) while loading or launching.
    """
    serving = (page_table, page_size, row_to_batch, k_per_row, return_raw_indices, output_raw_idx)
    # torch.compile first: its tracer cannot run jax.Array's isinstance check on a tensor.
    if _torch_compiling(input):
        _no_serving_under("torch.compile", "outside the compiled region (torch.compiler.disable)",
                          _serving_named(serving))
        from .interop import torch_op

        return torch_op.topk(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx, output_val,
                             output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value,
                             abort_when_nan_found, nan_policy, stream)
    if _jax_traced(input, begin, end, output_idx_offset, output_idx, output_val, page_table, row_to_batch, k_per_row,
                   output_raw_idx):
        _no_serving_under("jax.jit and other JAX transformations", "on concrete arrays", _serving_named(serving))
        from .interop import jax as jax_interop

        return jax_interop.topk(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx,
                                output_val, output_idx_offset, idx_oob_fill_value, value_oob_fill_value,
                                return_value, abort_when_nan_found, nan_policy, stream)
    if _jax_array(input) and not _serving_named(serving):
        from .interop import jax_eager

        out = jax_eager.topk(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx, output_val,
                             output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value,
                             abort_when_nan_found, nan_policy, stream)
        if out is not None:
            return out
    return eager.topk(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx, output_val,
                      output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value,
                      abort_when_nan_found, nan_policy, stream, page_table=page_table, page_size=page_size,
                      row_to_batch=row_to_batch, k_per_row=k_per_row, return_raw_indices=return_raw_indices,
                      output_raw_idx=output_raw_idx)


def ragged_topk(input, cu_seqlens, topk, sorted=False, indices_type="int64", sorted_index=False, output_idx=None,
                output_val=None, output_idx_offset=None, idx_oob_fill_value=2**31 - 1,
                value_oob_fill_value=-math.inf, return_value=True, abort_when_nan_found=True, nan_policy=None,
                stream=None, *, page_table=None, page_size=None, row_to_batch=None, k_per_row=None,
                return_raw_indices=False, output_raw_idx=None):
    """``topk`` of ragged rows packed back to back in one 1-D buffer (contract.md, "Serving").

    Row i is ``input[cu_seqlens[i]:cu_seqlens[i + 1]]``, and its indices count from its own
    start (0 is the row's first element), before ``output_idx_offset`` and the page lookup. Every
    other argument is ``topk``'s, with the same rules and results; there is no ``begin``/``end``
    (``cu_seqlens`` gives them).

    Args:
        input: ``(total,)`` bfloat16, float16 or float32, contiguous.
        cu_seqlens: ``(rows + 1,)`` int32/int64 on the input's device, contiguous, rising from
            ``>= 0`` to ``<= total`` (host values checked; device ones clamped into range as
            ``begin``/``end`` are).
        topk: k for every row (``k_per_row`` for fewer in some rows).

    Returns:
        ``(values, indices)`` of shape ``(rows, topk)``, as ``topk`` returns (a third output with
        ``return_raw_indices=True``).

    Raises:
        As ``topk``; also TypeError for a missing or wrongly typed ``cu_seqlens``, ValueError
        for host ``cu_seqlens`` that do not rise within ``[0, total]``, and ValueError for any
        call under ``torch.compile`` or inside a JAX transformation.
    """
    if _torch_compiling(input):
        _no_serving_under("torch.compile", "outside the compiled region (torch.compiler.disable)",
                          ["ragged_topk"])
    if _jax_traced(input, cu_seqlens):
        _no_serving_under("jax.jit and other JAX transformations", "on concrete arrays", ["ragged_topk"])
    return eager.ragged_topk(input, cu_seqlens, topk, sorted, indices_type, sorted_index, output_idx, output_val,
                             output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value,
                             abort_when_nan_found, nan_policy, stream, page_table=page_table, page_size=page_size,
                             row_to_batch=row_to_batch, k_per_row=k_per_row, return_raw_indices=return_raw_indices,
                             output_raw_idx=output_raw_idx)


_SERVING = ("page_table", "page_size", "row_to_batch", "k_per_row", "return_raw_indices", "output_raw_idx")


def _serving_named(options: tuple) -> list[str]:
    """The serving options given (names), from their values in ``_SERVING`` order."""
    return [name for name, value in zip(_SERVING, options) if value is not None and value is not False]


def _no_serving_under(where: str, instead: str, named: list[str]) -> None:
    if named:
        raise ValueError(f"{', '.join(named)}: not supported under {where} yet; call deepselect_rt {instead}")


def check_nan(stream=None) -> None:
    """Wait for the GPU, then raise what earlier calls under nan_policy="raise" met.

    The default policy never blocks: a call that meets NaN writes the sentinel into those rows
    and records them, and the next call on that device raises ``NaNInputError`` once the GPU has
    run it. ``check_nan`` is the explicit, synchronising check: it waits for ``stream`` (an
    integer handle or a stream object, as ``topk`` takes), or, when None, for every device that
    has run such a call, then raises for every NaN row recorded and not yet reported.

    Raises:
        NaNInputError: naming the earliest call that met NaN, its rows, and how many other calls
            did. TypeError/ValueError: a bad ``stream``. RuntimeError: the CUDA driver's error
            (named) while synchronising.
    """
    handle = checks.stream_handle(stream)
    if nan_record.has_devices("cuda"):
        from .cuda import nan_memory

        nan_memory.synchronize(handle)
    nan_record.raise_all_pending()


_jax_tracer = None


def _jax_traced(*objs) -> bool:
    """True when an array argument is a JAX tracer (inside jax.jit, vmap, grad, ...): then topk
    becomes one JAX primitive (interop/jax.py)."""
    global _jax_tracer
    if _jax_tracer is None:
        jax = sys.modules.get("jax")
        if jax is None:  # no JAX object can exist yet
            return False
        _jax_tracer = jax.core.Tracer
    for obj in objs:  # a loop, not any() over a generator: this runs on every call
        if isinstance(obj, _jax_tracer):
            return True
    return False


def _jax_array(obj) -> bool:
    """True for a concrete jax.Array (JAX must then be imported already)."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(obj, jax.Array)


def _torch_compiling(obj) -> bool:
    """True while torch.compile traces a call on a torch tensor (then topk becomes one custom op)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor) and torch.compiler.is_compiling()
