"""``deepselect-rt check``: the self-test a new user runs first.

With a usable GPU: build (or load) the default kernel variants for the visible GPUs' archs into
the user's kernel cache, exactly what ``warmup`` does and what ``topk`` would do on first use;
then run ``deepselect_rt.topk`` on CUDA tensors (torch when it has CUDA, else CuPy) over the
shipped real inputs and a sweep of the contract's edge cases, and compare each output with the
NumPy reference bit for bit.

Without one: run the shipped real inputs through the NumPy reference backend (NumPy arrays
through ``deepselect_rt.topk``) against an independent brute force (a stable argsort), and
cross-compile the default variants (``--arch``, default sm_90a) to show that NVRTC works. The
cross-compile goes to a temporary folder that is deleted afterwards, never the user's cache: a
self-test must not leave files behind unasked, and compiling afresh is what tests the toolchain
(a cache hit would test nothing). ``deepselect-rt warmup --arch ...`` keeps cubins on purpose.

Exit code 0 only when every check passed; 1 otherwise, with a summary (cli/main.py's codes).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailableError, NaNInputError

DEFAULT_CROSS_ARCH = "sm_90a"
# Canary fill of the caller buffers' extra columns: must survive the call untouched.
CANARY_INDEX, CANARY_VALUE = -7, 3.0
CANARY_COLUMNS = 4


@dataclass(frozen=True)
class Case:
    """One ``topk`` call to check.

    x: host input ``(rows, width + shift)``; kwargs: ``topk`` keyword arguments, arrays as NumPy
    (moved to the device with the input). shift: the rows start ``shift`` elements into ``x``'s
    rows (unaligned row starts on the device). buffers: pass caller output buffers whose extra
    columns hold canaries. real: a shipped real input (also checked without a GPU).
    """

    name: str
    x: np.ndarray
    k: int
    kwargs: dict = field(default_factory=dict)
    shift: int = 0
    buffers: bool = False
    real: bool = False

    @property
    def host_input(self) -> np.ndarray:
        return self.x[:, self.shift:]

    def shape(self) -> str:
        rows, width = self.host_input.shape
        return f"{self.x.dtype} {rows}x{width} k={self.k}"


@dataclass(frozen=True)
class Outcome:
    """ok: True passed, False failed, None skipped (e.g. bfloat16 under CuPy); seconds: wall
    time of the checked call (of the whole compile for builds)."""

    name: str
    shape: str
    ok: bool | None
    detail: str
    seconds: float


# -- the cases ----------------------------------------------------------------------------------

def real_cases() -> list[Case]:
    """The shipped real rows (``bench.samples``): indexer bf16 with causal ends, sampler fp32."""
    from ..bench import samples

    scores, end = samples.indexer_rows()
    logits = samples.sampler_rows()
    indexer = dict(end=end, indices_type="int32", return_value=False, nan_policy="sentinel")
    cases = [Case(f"real indexer scores, causal end, k={k}", scores, k, indexer, real=True)
             for k in (512, 1024, 2048)]
    cases.append(Case("real indexer scores, sorted values", scores, 2048, dict(end=end, sorted=True), real=True))
    cases += [Case(f"real sampler logits, sorted, k={k}", logits, k, dict(sorted=True), real=True)
              for k in (1, 50, 512, 4096)]
    cases.append(Case("real sampler logits, unsorted", logits, 512, {}, real=True))
    return cases


def edge_cases() -> list[Case]:
    """A quick sweep of the contract's edge cases (docs/contract.md), small enough for seconds."""
    from ..bench.distributions import make

    ranged = make("normal", 9, 5000, "bfloat16", seed=1)
    begin = np.array([0, 0, 10, 4990, 0, 100, 2500, 7, 0], np.int32)
    end = np.array([5000, 0, 10, 5000, 600, 4000, 2600, 4999, 513], np.int32)
    nan = make("normal", 6, 9000, "float32", seed=2)
    nan[1, 17] = np.nan
    nan[4, 8000] = -np.float32(np.nan)
    nan[5, 8999] = np.nan  # past row 5's end below: must be ignored
    nan_end = np.full(6, 8990, np.int32)
    orders = make("normal", 7, 20000, "bfloat16", seed=3)
    cases = [
        Case("short rows (k > width)", make("normal", 3, 100, "float32"), 512, dict(sorted=True)),
        Case("begin/end: empty, short and whole ranges", ranged, 512, dict(begin=begin, end=end, indices_type="int32")),
        Case("begin/end int64, offsets, custom fills", ranged, 512,
             dict(begin=begin.astype(np.int64), end=end.astype(np.int64), sorted=True,
                  output_idx_offset=np.arange(9, dtype=np.int64) * 10**10, idx_oob_fill_value=-1,
                  value_oob_fill_value=0.0)),
        Case("NaN policy sentinel", nan, 512, dict(end=nan_end, nan_policy="sentinel")),
        Case("NaN policy propagate", nan, 512, dict(end=nan_end, nan_policy="propagate", sorted=True)),
        Case("NaN policy raise (reported by check_nan)", nan, 512, dict(end=nan_end)),
        Case("NaN policy raise_sync", nan, 512, dict(end=nan_end, nan_policy="raise_sync")),
        Case("ties: few distinct values", make("few_distinct", 4, 70001, "float16", seed=4), 2048, dict(sorted=True)),
        Case("ties: all equal", make("all_equal", 4, 20000, "bfloat16"), 512, {}),
        Case("-0.0 and +0.0", make("signed_zeros", 4, 30000, "float32", seed=5), 1024, dict(sorted=True)),
        Case("mostly -inf", make("few_finite", 4, 70001, "bfloat16", seed=6), 512, dict(sorted=True)),
        Case("+inf clusters", make("pos_inf_clusters", 4, 70001, "float32", seed=7), 512, {}),
        *(Case(f"unaligned rows ({dtype}, +3 elements)", make("normal", 5, 30004, dtype, seed=8), 700,
               dict(sorted=True), shift=3) for dtype in ("bfloat16", "float16")),
        Case("caller buffers", make("normal", 9, 40000, "float16", seed=9), 300, dict(sorted=True), buffers=True),
        Case("caller buffers, indices only", make("normal", 9, 40000, "float32", seed=10), 300,
             dict(return_value=False, indices_type="int32"), buffers=True),
        *(Case(f"{index} indices, {order}", orders, 513, {"indices_type": index, order: True})
          for index in ("int32", "int64") for order in ("sorted", "sorted_index")),
        Case("int32 indices, unsorted", orders, 513, dict(indices_type="int32")),
        Case("k > 4096 (k=5000)", make("normal", 4, 70001, "float32", seed=11), 5000, dict(sorted=True)),
        Case("k > 4096 (k=8192), unsorted", make("normal", 3, 100000, "bfloat16", seed=12), 8192, {}),
        Case("one 1M-wide row", make("normal", 1, 1 << 20, "bfloat16", seed=13), 2048,
             dict(indices_type="int32", return_value=False, nan_policy="sentinel")),
    ]
    return cases


# -- comparing ----------------------------------------------------------------------------------

def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@dataclass(frozen=True)
class NaNRaised:
    """A call that raised NaNInputError naming ``rows``."""

    rows: tuple


def compare(got, want) -> str | None:
    """None when ``got`` equals ``want`` bit for bit, else what differs.

    Each is ``(values or None, indices)`` as NumPy, or a NaNRaised.
    """
    if isinstance(got, NaNRaised) or isinstance(want, NaNRaised):
        if isinstance(got, NaNRaised) and isinstance(want, NaNRaised):
            return None if got.rows == want.rows else f"NaN rows {list(got.rows)}, expected {list(want.rows)}"
        return "raised NaNInputError, the reference did not" if isinstance(got, NaNRaised) \
            else "did not raise NaNInputError, the reference did"
    (got_v, got_i), (want_v, want_i) = got, want
    if got_i.shape != want_i.shape or got_i.dtype != want_i.dtype:
        return f"indices {got_i.dtype}{got_i.shape}, expected {want_i.dtype}{want_i.shape}"
    diff = np.argwhere(got_i != want_i)
    if len(diff):
        r, c = diff[0]
        return f"indices differ in {len(diff)} slot(s), first [{r}, {c}]: {got_i[r, c]} vs {want_i[r, c]}"
    if (got_v is None) != (want_v is None):
        return "values returned" if got_v is not None else "values missing"
    if want_v is not None:
        diff = np.argwhere(_bits(got_v) != _bits(want_v))
        if len(diff):
            r, c = diff[0]
            return f"value bits differ in {len(diff)} slot(s), first [{r}, {c}]: {got_v[r, c]} vs {want_v[r, c]}"
    return None


def _call(fn):
    """``fn()``'s ``(values, indices)``, or a NaNRaised when it raised NaNInputError."""
    try:
        return fn()
    except NaNInputError as exc:
        return NaNRaised(tuple(exc.rows))


def reference_result(case: Case):
    """``topk`` of the case on NumPy arrays: the reference backend."""
    import deepselect_rt

    def run():
        out = deepselect_rt.topk(case.host_input, case.k, **case.kwargs)
        deepselect_rt.check_nan()  # the default "raise" reports NaN rows here
        return out

    return _call(run)


def brute_force_topk(x: np.ndarray, k: int, *, end=None, sorted=False, indices_type="int64",
                     return_value=True, nan_policy=None):
    """The contract's top-k by a stable descending argsort of each row, independent of reference.py.

    x: ``(rows, width)`` float32/float16/bfloat16 without NaN and without -0.0 (ValueError
    otherwise): there a stable argsort of ``-x`` (widened to float32, exact) orders exactly as
    the contract's keys, ties by lower index. end: optional ``(rows,)`` causal ends. Short rows
    get the default fills (2**31 - 1, -inf). nan_policy is accepted so a case's keyword
    arguments pass through; it cannot matter without NaN. Returns ``(values or None, indices)``.
    """
    wide = x.astype(np.float32)
    if np.isnan(wide).any() or (np.signbit(wide) & (wide == 0)).any():
        raise ValueError("brute_force_topk orders by float value: the input must hold no NaN and no -0.0")
    rows, width = x.shape
    ends = np.full(rows, width) if end is None else np.asarray(end)
    indices = np.full((rows, k), 2**31 - 1, np.dtype(indices_type))
    values = np.full((rows, k), -np.inf, np.float32).astype(x.dtype)
    for r in range(rows):
        chosen = np.argsort(-wide[r, :ends[r]], kind="stable")[:k]
        if not sorted:
            chosen = np.sort(chosen)
        indices[r, :len(chosen)] = chosen
        values[r, :len(chosen)] = x[r, chosen]
    return (values if return_value else None), indices


# -- devices ------------------------------------------------------------------------------------

class Unsupported(Exception):
    """The tensor framework cannot express this case (CuPy has no bfloat16): skipped, not failed."""


class _TorchTensors:
    name = "torch"

    def __init__(self, torch):
        self.torch = torch

    def to_device(self, a: np.ndarray):
        import ml_dtypes

        a = np.ascontiguousarray(a)
        if a.dtype == ml_dtypes.bfloat16:  # torch has no NumPy bfloat16: move the bits as int16
            return self.torch.from_numpy(a.view(np.int16)).cuda().view(self.torch.bfloat16)
        return self.torch.from_numpy(a).cuda()

    def to_host(self, t) -> np.ndarray:
        import ml_dtypes

        if t.dtype == self.torch.bfloat16:
            return t.view(self.torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
        return t.cpu().numpy()

    def full(self, shape, dtype: str, value):
        return self.torch.full(shape, value, dtype=getattr(self.torch, dtype), device="cuda")

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


class _CupyTensors:
    name = "cupy"

    def __init__(self, cupy):
        self.cupy = cupy

    def to_device(self, a: np.ndarray):
        if a.dtype.name == "bfloat16":
            raise Unsupported("CuPy has no bfloat16; install torch with CUDA to check it")
        return self.cupy.asarray(a)

    def to_host(self, t) -> np.ndarray:
        return self.cupy.asnumpy(t)

    def full(self, shape, dtype: str, value):
        if dtype == "bfloat16":
            raise Unsupported("CuPy has no bfloat16")
        return self.cupy.full(shape, value, dtype=dtype)

    def synchronize(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()


def gpu_tensors():
    """torch when it has CUDA, else CuPy. Raises BackendUnavailableError when neither is there."""
    try:
        import torch

        if torch.cuda.is_available():
            return _TorchTensors(torch)
    except ImportError:
        pass
    try:
        import cupy
    except ImportError:
        raise BackendUnavailableError("a GPU is visible but neither torch with CUDA nor CuPy is installed; "
                                      "pip install 'deepselect-rt[cu13]' brings CuPy") from None
    return _CupyTensors(cupy)


def device_result(tensors, case: Case):
    """``topk`` of the case on the device: ``(result as NumPy, seconds, problem or None)``.

    problem names a broken caller-buffer promise (other object returned, canary overwritten).
    Raises Unsupported when the framework cannot hold the case's dtypes.
    """
    import deepselect_rt

    x = tensors.to_device(case.x)[:, case.shift:]
    kw = {name: tensors.to_device(v) if isinstance(v, np.ndarray) else v for name, v in case.kwargs.items()}
    rows, k = x.shape[0], case.k
    index = np.dtype(kw.get("indices_type", "int64")).name
    buffers = {}
    if case.buffers:
        buffers["output_idx"] = tensors.full((rows, k + CANARY_COLUMNS), index, CANARY_INDEX)
        if kw.get("return_value", True):
            buffers["output_val"] = tensors.full((rows, k + CANARY_COLUMNS), case.x.dtype.name, CANARY_VALUE)
        kw.update({name: buf[:, :k] for name, buf in buffers.items()})
    tensors.synchronize()
    start = time.perf_counter()

    def run():
        out = deepselect_rt.topk(x, k, **kw)
        tensors.synchronize()
        deepselect_rt.check_nan()  # the default "raise" reports NaN rows here, without blocking the call
        return out

    raw = _call(run)
    seconds = time.perf_counter() - start
    if isinstance(raw, NaNRaised):
        return raw, seconds, None
    vals, idx = raw
    problem = None
    if case.buffers and (idx is not kw["output_idx"] or ("output_val" in kw and vals is not kw["output_val"])):
        problem = "topk did not return the caller's buffers"
    for name, buf in buffers.items():
        canary = tensors.to_host(buf)[:, k:]
        if not (canary == (CANARY_INDEX if name == "output_idx" else CANARY_VALUE)).all():
            problem = f"{name}: columns past k were written"
    result = (None if vals is None else tensors.to_host(vals), tensors.to_host(idx))
    return result, seconds, problem


# -- the command --------------------------------------------------------------------------------

def register(subparsers) -> None:
    p = subparsers.add_parser(
        "check", help="self-test: kernels against the NumPy reference on real and edge-case inputs",
        description="With a GPU: build the default kernels for it, run topk on the shipped real "
                    "inputs and the contract's edge cases, compare with the NumPy reference bit "
                    "for bit. Without one: check the reference on the real inputs against a brute "
                    "force and cross-compile the kernels (into a temporary folder) to test NVRTC. "
                    "Exit 0 only when everything matched.")
    p.add_argument("--arch", default=None,
                   help=f"archs to cross-compile for when no GPU is visible (default {DEFAULT_CROSS_ARCH}); "
                        "with a GPU its own arch is always used")
    p.set_defaults(handler=_check)


def _check(args, out, err) -> int:
    from ..cuda.arch import probe, resolve_archs

    devices, why_not = probe()
    if devices:
        tensors = gpu_tensors()
        archs = resolve_archs(None)
        names = ", ".join(f"{d.name} ({d.arch or 'unsupported'})" for d in devices)
        out.print(f"GPU: {names}; tensors: {tensors.name}", markup=False)
        outcomes = _build(archs, None, err, "build default kernels")
        outcomes += [_check_on_device(tensors, c) for c in real_cases() + edge_cases()]
        title = f"deepselect-rt check on {devices[0].name} ({tensors.name} tensors vs the NumPy reference)"
    else:
        archs = resolve_archs(DEFAULT_CROSS_ARCH if args.arch is None else args.arch)
        out.print(f"No usable GPU here ({why_not or 'no CUDA device visible'}). Checking the NumPy "
                  f"reference backend on the shipped real inputs against a brute-force sort, and "
                  f"cross-compiling the default kernels for {', '.join(archs)} into a temporary folder "
                  f"to show that the NVRTC toolchain works. Run `deepselect-rt check` on a GPU machine "
                  f"to check the kernels themselves.", markup=False)
        outcomes = [_check_on_host(c) for c in real_cases()]
        with tempfile.TemporaryDirectory(prefix="deepselect-rt-check-") as tmp:
            outcomes += _build(archs, Path(tmp), err, "cross-compile default kernels")
        title = "deepselect-rt check without a GPU (reference vs brute force; cross-compile)"
    return _summarise(out, err, outcomes, title)


def _check_on_device(tensors, case: Case) -> Outcome:
    try:
        got, seconds, problem = device_result(tensors, case)
    except Unsupported as exc:
        return Outcome(case.name, case.shape(), None, f"skipped: {exc}", 0.0)
    except Exception as exc:  # reported as this case's failure; the sweep goes on
        return Outcome(case.name, case.shape(), False, f"error: {type(exc).__name__}: {exc}", 0.0)
    problem = compare(got, reference_result(case)) or problem
    return Outcome(case.name, case.shape(), problem is None, problem or "ok", seconds)


def _check_on_host(case: Case) -> Outcome:
    start = time.perf_counter()
    got = reference_result(case)
    seconds = time.perf_counter() - start
    problem = compare(got, brute_force_topk(case.host_input, case.k, **case.kwargs))
    return Outcome(case.name, case.shape(), problem is None, problem or "ok", seconds)


def _build(archs: list[str], into: Path | None, err, what: str) -> list[Outcome]:
    """Compile (or find cached) the default variants for ``archs``, with a progress bar; one
    Outcome per arch. ``into``: a cache root to fill alone (None: the user's cache)."""
    from ..jit import warmup
    from .console import compile_progress
    from .warmup import cuda_tasks

    tasks = cuda_tasks(archs)
    start = time.perf_counter()
    try:
        with compile_progress(err) as progress:
            bar = progress.add_task(what, total=len(tasks))
            results = warmup.run(tasks, into=into, on_done=lambda o: progress.update(
                bar, advance=1, description=f"{o.task.arch} {o.task.variant.entry}"))
    except (BackendUnavailableError, OSError) as exc:  # no NVRTC, unwritable cache
        return [Outcome(f"{what} for {arch}", "-", False, f"error: {exc}", 0.0) for arch in archs]
    seconds = time.perf_counter() - start
    outcomes = []
    for arch in archs:
        mine = [r for r in results if r.task.arch == arch]
        failed = [r for r in mine if r.failed]
        compiled = sum(r.origin == "compiled" for r in mine)
        detail = (f"FAILED {len(failed)}: " + "; ".join(f"{r.task.variant.entry}: {r.error}" for r in failed)
                  if failed else f"ok: {compiled} compiled, {len(mine) - compiled} cached")
        outcomes.append(Outcome(f"{what} for {arch}", f"{len(mine)} variants", not failed, detail, seconds))
    return outcomes


def _summarise(out, err, outcomes: list[Outcome], title: str) -> int:
    from rich.markup import escape
    from rich.table import Table

    table = Table("case", "shape", "result", "time", title=title)
    table.columns[2].overflow = "fold"
    for o in outcomes:
        colour = {True: "green", False: "red", None: "yellow"}[o.ok]
        when = f"{o.seconds:.1f} s" if o.seconds >= 1 else f"{o.seconds * 1e3:.1f} ms"
        table.add_row(escape(o.name), o.shape, f"[{colour}]{escape(o.detail)}[/]", when)
    out.print(table)
    failed = [o for o in outcomes if o.ok is False]
    skipped = sum(o.ok is None for o in outcomes)
    note = f" ({skipped} skipped)" if skipped else ""
    if failed:
        err.print(f"[red]check failed[/]: {len(failed)} of {len(outcomes)} checks{note}: "
                  + escape(", ".join(o.name for o in failed)), highlight=False)
        return 1
    out.print(f"all {len(outcomes) - skipped} checks passed{note}")
    return 0


__all__ = ["Case", "Outcome", "NaNRaised", "real_cases", "edge_cases", "compare", "reference_result",
           "brute_force_topk", "gpu_tensors", "device_result", "register", "Unsupported"]
