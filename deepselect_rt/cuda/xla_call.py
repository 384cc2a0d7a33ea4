"""A top-k that another runtime launches into its own buffers: XLA, under jax.jit, through
jaxlib's kernel-call target (``interop/jax_ffi.py`` hands it over). Framework-neutral: this
module says what to launch (PTX, launch shape, parameters); it launches nothing.

What that launcher does (jaxlib/gpu/triton_kernels.cc, ``KernelCall::Launch`` and
``Kernel::Launch``), and what follows here:

- Every parameter is passed on its own: each buffer (the custom call's operands, then its
  results, in order) as a pointer, scalars by value; no struct. The entries are compiled with
  ``DS_FIELD_ARGS`` (``variants.with_field_args``), whose parameters are the argument block's
  fields in its order, so the buffers come in the order XLA passes them: input, the row vectors
  given (begin, end, offsets), indices, values. Absent ones are 0 scalars.
- Where jaxlib loads module images, the kernel goes as a cubin for the device's arch: the eager
  path's code built without line info (``NVRTC_BARE_COMPILER``, a third of the size, since
  jaxlib may copy and hash the whole call description, image included, when it runs the call).
  Elsewhere it goes as PTX that jaxlib assembles with ptxas for the device's compute capability
  (with the 'a' features from sm_90): NVRTC compiles the variant to PTX (``NVRTC_PTX_COMPILER``).
- A CTA has ``num_warps * 32`` threads; ``grid_0 * num_ctas`` CTAs go in clusters of
  ``num_ctas`` (cuLaunchKernelEx), with ``shared_mem_bytes`` of dynamic shared memory (opted in
  past 48 KiB). The non-portable cluster attribute is never set, so clusters stay within
  ``PORTABLE_CLUSTER`` CTAs here. (An entry that declares a cluster of 16 itself,
  ``__cluster_dims__``, does not get around that: on an H100 the driver's occupancy query
  refuses such a cluster without the attribute too.)
- XLA's buffers are aligned to 16 bytes, so rows without ``begin`` columns are planned as
  starting on a 16-byte boundary (as eager calls plan them from the pointer); the input's
  parameter then asks jaxlib to check that (``ptr_divisibility``), which fails the call rather
  than let a misaligned row overflow its CTAs' registers.
- One kernel per call: the workspace split (two launches and scratch, GPUs without clusters) is
  left out; such GPUs take one CTA a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from ..dtypes import ITEMSIZE, fill_bits
from ..jit.cache import default_cache
from ..jit.spec import flags_of
from . import backend, nan_memory
from .backend import PORTABLE_CLUSTER
from .arch import device_arch, device_info
from .driver import on_device
from .plan import DeviceLimits, Plan, choose_split, few_rows_tuning, radix_tier, row_vectors
from .nvrtc import NVRTC_BARE_COMPILER, NVRTC_PTX_COMPILER
from .variants import SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE


BUFFER = ("buffer", 0)  # a parameter that is the next XLA buffer
ALIGNMENT = 16  # bytes: XLA's buffer alignment that the plan of rows without begin columns takes


@dataclass(frozen=True)
class KernelCall:
    """One launch for XLA: ``entry`` for ``compute_capability`` (major * 10 + minor);
    ``threads`` a CTA, ``grid`` clusters of ``cluster`` CTAs (one cluster a row), ``smem`` bytes
    of dynamic shared memory; ``params``, one per kernel parameter: ``("buffer", d)`` (the next
    XLA buffer, whose address jaxlib checks is a multiple of ``d`` bytes where ``d`` > 0) or
    ``("i64" | "u64", value)``. XLA's buffers: the input, the row vectors given, then the
    results in the order indices, values. The code: ``image`` (a cubin for the device's arch, or
    PTX when that arch is a compute_XY one) or else ``ptx`` (text for the launcher to
    assemble)."""

    entry: str
    compute_capability: int
    threads: int
    grid: int
    cluster: int
    smem: int
    params: tuple
    ptx: str = ""
    image: bytes = b""


def rows_aligned(dtype: str, width: int, begin: bool) -> bool:
    """Whether every row starts on XLA's ALIGNMENT boundary: no ``begin`` columns move the
    starts, and a row is a whole number of ALIGNMENT bytes. ``split_for`` plans such rows one
    vector narrower, and ``parameters`` then asks jaxlib to check the input's alignment."""
    return not begin and width * ITEMSIZE[dtype] % ALIGNMENT == 0


def xla_row_vectors(dtype: str, width: int, begin: bool) -> int:
    """``row_vectors`` of rows in XLA's buffers: on 16-byte boundaries where ``rows_aligned``,
    else anywhere (one vector more)."""
    return row_vectors(dtype, width, begin=not rows_aligned(dtype, width, begin))


def launcher_carries(rows: int, width: int, k: int, dtype: str, limits: DeviceLimits, begin: bool) -> bool:
    """Whether this launcher can launch the eager dispatch's plan (``choose_split``) for rows
    planned as ``split_for`` plans them: no cluster of more than PORTABLE_CLUSTER CTAs. The
    others go to deepselect-rt's own FFI handler (``xla_launch.py``)."""
    split, _ = choose_split(rows, width, xla_row_vectors(dtype, width, begin), k, dtype, limits)
    return not limits.clusters or split <= PORTABLE_CLUSTER


def split_for(rows: int, width: int, k: int, dtype: str, limits: DeviceLimits, begin: bool) -> tuple[int, str, object]:
    """(CTAs a row, how, radix tier) as the eager dispatch chooses them (``choose_split``) for
    rows that start on XLA's 16-byte boundaries, or anywhere (one vector more) with ``begin``
    columns, within what the launcher can do: at most PORTABLE_CLUSTER CTAs a cluster (the
    radix tier chosen again for that many), no workspace split."""
    vectors = xla_row_vectors(dtype, width, begin)
    split, how = choose_split(rows, width, vectors, k, dtype, limits)
    if not limits.clusters:
        return 1, "", None
    split = min(split, PORTABLE_CLUSTER)
    return split, how, radix_tier(dtype, vectors, split) if how == SPLIT_RADIX else None


def parameters(plan: Plan, rows: int, width: int, k: int, vectors: dict, *, index_dtype: str, sorted: bool,
               return_value: bool, nan_policy: str, idx_fill: int, val_fill: float, dtype: str,
               nan: tuple[int, int, int] = (0, 0, 0)) -> tuple:
    """The kernel's parameters for ``plan`` (kernels_cu/common/params.cuh's fields, in order):
    XLA's buffers where the call has them, the rest by value. ``vectors``: the row vectors given,
    name ("begin", "end", "output_idx_offset") -> dtype (the input's buffer asks for ALIGNMENT
    where ``rows_aligned``); ``nan``: the NaN record's (device counter, entries, call id), zeros
    for none."""
    request = SimpleNamespace(
        sorted=sorted, index_dtype=index_dtype, return_value=return_value, nan_policy=nan_policy,
        relative=False, row_to_batch=None, k_per_row=None,  # the serving options are eager-only
        **{field: SimpleNamespace(dtype=vectors[name]) if name in vectors else None
           for field, name in (("begin", "begin"), ("end", "end"), ("offsets", "output_idx_offset"))})
    given = lambda name: BUFFER if name in vectors else ("u64", 0)  # noqa: E731
    head, entries, call = nan
    return (
        ("buffer", ALIGNMENT) if rows_aligned(dtype, width, "begin" in vectors) else BUFFER,
        ("i64", width), ("i64", rows), ("i64", width), ("i64", k),
        given("begin"), given("end"), given("output_idx_offset"),
        BUFFER, ("i64", k), BUFFER if return_value else ("u64", 0), ("i64", k if return_value else 0),
        ("i64", flags_of(request)), ("i64", idx_fill), ("u64", fill_bits(val_fill, dtype)),
        ("u64", head), ("u64", entries), ("i64", call), ("i64", plan.split), ("u64", 0),
        # page_table, page_row_stride, page_size, max_pages, batch, row_to_batch, k_per_row,
        # out_raw, raw_row_stride: unused under jit
        ("u64", 0), ("i64", 0), ("i64", 0), ("i64", 0), ("i64", 0), ("u64", 0), ("u64", 0), ("u64", 0), ("i64", 0),
    )


def kernel_call(device: int, dtype: str, rows: int, width: int, k: int, vectors: dict, *, index_dtype: str,
                sorted: bool, return_value: bool, nan_policy: str, idx_fill: int, val_fill: float,
                image: bool = True) -> KernelCall:
    """The launch of a ``(rows, width)`` top-k of ``dtype`` planned for CUDA device ``device``:
    the plan's variant loaded there (cluster occupancy checked, as eager calls do), as a cubin
    without line info (``image``) or else as PTX, both from the kernel cache (NVRTC on a
    miss). Under nan_policy="raise" the parameters carry the
    device's NaN record, so NaN rows are reported as an eager call's are (by the next eager
    call on the device, or check_nan). Raises BackendUnavailableError without a driver or NVRTC,
    CompileError when a kernel does not compile."""
    with on_device(device):
        limits = backend.device_limits(device)
        split, how, tier = split_for(rows, width, k, dtype, limits, "begin" in vectors)
        few = few_rows_tuning(rows, width, dtype, k, limits)
        plan = backend.prepare(device, dtype, k, few, split, how, tier, field_args=True).plan
        if plan.how == SPLIT_WORKSPACE:  # split_for never asks for it
            raise AssertionError("a workspace split cannot run under XLA's kernel-call launcher")
        nan = (0, 0, 0)
        if nan_policy == "raise":
            record, head, entries = nan_memory.record(device)
            nan = (head, entries, record.new_call(f"{dtype} {rows}x{width}, k={k}, in a jax.jit computation"))
    compiler = NVRTC_BARE_COMPILER if image else NVRTC_PTX_COMPILER
    code = default_cache(compiler).get_or_build(plan.variant, device_arch(device))
    major, minor = device_info(device).compute_capability
    cluster = plan.split if plan.how in (SPLIT_CLUSTER, SPLIT_RADIX) else 1
    params = parameters(plan, rows, width, k, vectors, index_dtype=index_dtype, sorted=sorted,
                        return_value=return_value, nan_policy=nan_policy, idx_fill=idx_fill, val_fill=val_fill,
                        dtype=dtype, nan=nan)
    return KernelCall(plan.variant.entry, major * 10 + minor, plan.threads, rows, cluster, plan.smem, params,
                      **({"image": code} if image else {"ptx": code.decode()}))
