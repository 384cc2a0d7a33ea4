"""A top-k that XLA runs through deepselect-rt's own FFI handler (``interop/jax_ffi.py`` registers
it, ``interop/xla_ffi_handler.py`` decodes its frames): the eager path's plan and launch
(``backend.run``), on XLA's stream, into XLA's buffers. Framework-neutral: buffers arrive as
device addresses.

It serves the calls whose eager plan XLA's kernel-call launcher (``xla_call.py``) cannot carry:
thread-block clusters of more than 8 CTAs (the radix select of 16 CTAs a row for few long rows,
1-8 rows of 1M on an H100), which that launcher never opts in to.
Those run the very kernel an eager call runs. The price is host time: each execution enters
Python (the handler takes the GIL) and launches through the driver as an eager repeat call does.
"""

from __future__ import annotations

import json

from ..dtypes import double_bits, from_double_bits
from ..interop.views import TensorView
from ..request import TopkRequest
from . import backend
from .driver import on_device, stream_device
from .xla_call import launcher_carries, xla_row_vectors

# The jit call's row vectors (interop/jax.py VECTORS) -> the argument block's fields.
_FIELDS = {"begin": "begin", "end": "end", "output_idx_offset": "offsets"}


def needs_own_launch(device: int, dtype: str, rows: int, width: int, k: int, begin: bool) -> bool:
    """Whether a ``(rows, width)`` top-k on CUDA device ``device`` needs this module's launch:
    its eager plan is beyond XLA's kernel-call launcher (``xla_call.launcher_carries``)."""
    with on_device(device):
        limits = backend.device_limits(device)
    return not launcher_carries(rows, width, k, dtype, limits, begin)


def prepare(device: int, dtype: str, rows: int, width: int, k: int, begin: bool) -> None:
    """Compile and load, while the computation is lowered, the plan ``execute`` will launch for
    rows on XLA's 16-byte boundaries (``xla_call.xla_row_vectors``), so that a kernel that does not
    compile fails the lowering (CompileError), not a running computation, and the first
    execution does not wait for NVRTC."""
    with on_device(device):
        backend.ready(device, dtype, rows, width, k, xla_row_vectors(dtype, width, begin))


def spec(dtype: str, rows: int, width: int, k: int, vectors: dict, *, index_dtype: str, sorted: bool,
         return_value: bool, nan_policy: str, idx_fill: int, val_fill: float) -> str:
    """The call as text, the custom call's attribute: everything ``execute`` needs but the device
    (its stream's), so that an executable from JAX's compilation cache runs in another process
    too, and one program runs on each of several GPUs. ``vectors``: the row vectors given, name
    -> dtype, in operand order. The fill value goes as its float64 bits (a NaN keeps its sign and
    payload)."""
    return json.dumps(dict(dtype=dtype, rows=rows, width=width, k=k, vectors=list(vectors.items()),
                           index_dtype=index_dtype, sorted=sorted, return_value=return_value,
                           nan_policy=nan_policy, idx_fill=idx_fill,
                           val_fill_bits=double_bits(val_fill)))


_calls: dict[str, dict] = {}
_launches: dict[tuple[str, int, int], object] = {}


def execute(text: str, stream: int, args: list[int], rets: list[int], shapes) -> None:
    """Launch the call ``text`` (``spec``) on ``stream``: ``args`` the operands' device addresses
    (input, then the row vectors given), ``rets`` the results' (values when returned, then
    indices); ``shapes(which)``: the operands' ("args") or results' ("rets") dimensions. The
    first execution on a device checks those against the call, plans and launches through
    ``backend.run``; later ones repeat that launch with the new addresses, while the input sits
    at the same address modulo 16 bytes (the plan depends on it). Raises ValueError when XLA's
    buffers are not the call's (nothing is launched)."""
    device = stream_device(stream)
    key = (text, device, args[0] % 16)
    call = _calls.get(text)
    if call is None:
        call = _calls[text] = json.loads(text)
        call["fields"] = ("x",) + tuple(_FIELDS[name] for name, _ in call["vectors"])  # the operands' fields
    out_val = rets[0] if call["return_value"] else 0
    inputs = tuple(zip(call["fields"], args))
    again = _launches.get(key)
    if again is not None and again(stream, rets[-1], out_val, 0, inputs):
        return
    _check_buffers(call, shapes)
    again = backend.run(_request(call, device, stream, args, rets))
    if again is not None:
        _launches[key] = again


def _check_buffers(call: dict, shapes) -> None:
    rows, k = call["rows"], call["k"]
    want_args = [(rows, call["width"])] + [(rows,)] * len(call["vectors"])
    want_rets = [(rows, k)] * (2 if call["return_value"] else 1)
    got_args, got_rets = shapes("args"), shapes("rets")
    if got_args != want_args or got_rets != want_rets:
        raise ValueError(f"XLA passed buffers of shapes {got_args} -> {got_rets} to a top-k planned for "
                         f"{want_args} -> {want_rets}")


def _request(call: dict, device: int, stream: int, args: list[int], rets: list[int]) -> TopkRequest:
    dtype, rows, width, k = (call[name] for name in ("dtype", "rows", "width", "k"))

    def view(ptr: int, shape: tuple, dt: str) -> TensorView:
        strides = (shape[1], 1) if len(shape) == 2 else (1,)
        return TensorView(ptr, shape, strides, dt, "cuda", device, "jax", None)

    vectors = {name: view(ptr, (rows,), dt) for (name, dt), ptr in zip(call["vectors"], args[1:])}
    val_fill = from_double_bits(call["val_fill_bits"])
    return TopkRequest(
        x=view(args[0], (rows, width), dtype), k=k, begin=vectors.get("begin"), end=vectors.get("end"),
        offsets=vectors.get("output_idx_offset"), index_dtype=call["index_dtype"], sorted=call["sorted"],
        sorted_index=False, return_value=call["return_value"], nan_policy=call["nan_policy"],
        idx_fill=call["idx_fill"], val_fill=val_fill, out_idx=view(rets[-1], (rows, k), call["index_dtype"]),
        out_val=view(rets[0], (rows, k), dtype) if call["return_value"] else None, stream=stream)
