"""Benchmarks as docs/performance.md prescribes: CUDA events, cold L2 before every call, median of
at least 30 calls, torch.topk on the same inputs in the same run, effective bandwidth; CUDA-graph
replay for short shapes; host overhead per call apart.

Measuring needs torch with CUDA (the timing harness and the reference peer); jax.lax.top_k joins
as a peer where JAX has a GPU backend. CuPy is no peer: it has no top-k and no bfloat16, and an
argpartition + sort emulation would time CuPy's sort, not a top-k. Saved results (``save_json`` /
``load_json``) need neither. Used by ``deepselect-rt bench`` (bench_cli.py) and
tools/device_check.sh.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from .dtypes import INDEX_DTYPES, INPUT_DTYPES, ITEMSIZE
from .errors import BackendUnavailableError

INDEXER_ROWS = (1, 6, 64, 256, 512, 4096)
INDEXER_WIDTHS = (16384, 65536, 131072, 262144, 1048576)
INDEXER_KS = (512, 1024, 2048)
SAMPLER_ROWS = (1, 6, 64, 256, 1024, 4096)
SAMPLER_WIDTH = 129280
SAMPLER_KS = (512, 4096)
# Batch sizes the shipped real rows are tiled to by ``real_grid``.
REAL_INDEXER_ROWS = (1, 64, 512)
REAL_SAMPLER_ROWS = (1, 64, 1024)
MAX_INPUT_BYTES = 8 << 30
FLUSH_BYTES = 512 << 20
ITERS = 30
# Below this GPU time (us) launch gaps matter: also time under CUDA-graph replay.
GRAPH_BELOW_US = 50.0
HOST_CALLS = 10_000
OURS = "deepselect-rt"
TORCH = "torch.topk"
JAX = "jax.lax.top_k"


def require_gpu(who: str, without: str = "") -> None:
    """Raises BackendUnavailableError, naming ``who`` (the command or tool) and ending with
    ``without`` (what works without a GPU, if anything), unless a CUDA GPU and torch with CUDA
    are there: timing uses torch's CUDA events, and torch.topk is the reference peer."""
    from .cuda import module

    devices, why_not = module.probe()
    if not devices:
        raise BackendUnavailableError(f"{who} needs an NVIDIA GPU, and none is usable here "
                                      f"({why_not or 'no CUDA device visible'}).{without}")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise BackendUnavailableError(f"{who} times with torch's CUDA events: install torch with CUDA")


@dataclass(frozen=True)
class Case:
    """One benchmark shape.

    dtype: input dtype ("bfloat16", "float16", "float32"); index: "int32" or "int64"; values:
    values returned; sorted: ``sorted=True``; dist: a ``distributions.NAMES`` entry or "real"
    (the shipped rows of ``sample_data``, tiled to ``rows``, indexer rows with their causal
    ``end``); elements: elements inside ``[begin, end)`` over all rows, None when rows are whole.
    """

    scenario: str
    dtype: str
    rows: int
    width: int
    k: int
    index: str
    values: bool
    sorted: bool
    dist: str = "normal"
    elements: int | None = None

    def bytes_moved(self) -> int:
        """Bytes by performance.md's formula: the input range read, the outputs written."""
        read = self.rows * self.width if self.elements is None else self.elements
        n = read * ITEMSIZE[self.dtype] + self.rows * self.k * ITEMSIZE[self.index]
        return n + (self.rows * self.k * ITEMSIZE[self.dtype] if self.values else 0)

    def flavour(self) -> str:
        """What is asked of the inputs, short: "bf16 indices", "fp32 +values sorted", ..."""
        short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[self.dtype]
        text = f"{short} {'+values' if self.values else 'indices'}" + (" sorted" if self.sorted else "")
        return text + ("" if self.dist == "normal" else f" {self.dist}")

    def label(self) -> str:
        flags = ("vals" if self.values else "novals") + (",sorted" if self.sorted else "")
        return f"{self.dtype} {self.rows}x{self.width} k={self.k} {flags} {self.dist}"


@dataclass
class Result:
    """Timings of one case in microseconds.

    ours_us, torch_us: median GPU time from CUDA events, cold L2. peers: further implementations
    by name (``JAX``: wall time, see ``_time_wall``). ours_graph_us, torch_graph_us: GPU time
    under CUDA-graph replay, measured when either event time is under ``GRAPH_BELOW_US``, else
    None. peer_errors: why a peer has no time. ours_tbs and speedup (torch / ours) are derived.
    """

    case: Case
    ours_us: float
    torch_us: float
    peers: dict = field(default_factory=dict)
    ours_graph_us: float | None = None
    torch_graph_us: float | None = None
    peer_errors: dict = field(default_factory=dict)
    ours_tbs: float = field(init=False)
    speedup: float = field(init=False)

    def __post_init__(self):
        self.ours_tbs = self.tbs(self.ours_us)
        self.speedup = self.torch_us / self.ours_us

    def tbs(self, us: float) -> float:
        """Effective bandwidth in TB/s of a time in us on this case (same bytes for every
        implementation, so the numbers compare)."""
        return self.case.bytes_moved() / (us * 1e-6) / 1e12

    def times(self) -> dict:
        """Event/wall times (us) by implementation name: ours, torch.topk, then the peers."""
        return {OURS: self.ours_us, TORCH: self.torch_us, **self.peers}

    def as_dict(self) -> dict:
        d = asdict(self.case)
        d.update(ours_us=self.ours_us, torch_us=self.torch_us, ours_tbs=self.ours_tbs, speedup=self.speedup,
                 peers=dict(self.peers), ours_graph_us=self.ours_graph_us, torch_graph_us=self.torch_graph_us,
                 peer_errors=dict(self.peer_errors))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        """Inverse of ``as_dict``; also reads the older files without peers or graph times.
        Raises KeyError/TypeError/ValueError for a dict that is not a valid result."""
        case = Case(**{f.name: d[f.name] for f in fields(Case) if f.name in d})
        if case.dtype not in INPUT_DTYPES or case.index not in INDEX_DTYPES:
            raise ValueError(f"unknown dtypes {case.dtype!r}, {case.index!r}")
        times = [float(d["ours_us"]), float(d["torch_us"])]
        peers = {str(name): float(t) for name, t in dict(d.get("peers") or {}).items()}
        if min(times + list(peers.values())) <= 0:
            raise ValueError("times must be positive")
        return cls(case, times[0], times[1], peers, d.get("ours_graph_us"), d.get("torch_graph_us"),
                   dict(d.get("peer_errors") or {}))


@dataclass(frozen=True)
class HostOverhead:
    """Wall time per call (us) over ``calls`` back-to-back calls on a tiny input with preallocated
    outputs, GPU not the bottleneck: what the Python layer costs."""

    shape: str
    calls: int
    ours_us: float
    torch_us: float


# -- the cases ----------------------------------------------------------------------------------

def standard_grid(quick: bool = False) -> list[Case]:
    """The grid of performance.md (``quick``: a handful of representative shapes)."""
    cases = []
    for rows in INDEXER_ROWS:
        for width in INDEXER_WIDTHS:
            for k in INDEXER_KS:
                for values in (False, True):
                    c = Case("indexer", "bfloat16", rows, width, k, "int32", values, False)
                    if rows * width * 2 <= MAX_INPUT_BYTES:
                        cases.append(c)
    for rows in SAMPLER_ROWS:
        for k in SAMPLER_KS:
            for sorted_ in (False, True):
                cases.append(Case("sampler", "float32", rows, SAMPLER_WIDTH, k, "int64", True, sorted_))
    if quick:
        keep = {("bfloat16", 4096, 1048576, 512), ("bfloat16", 512, 131072, 2048), ("bfloat16", 1, 131072, 512),
                ("bfloat16", 64, 65536, 1024), ("float32", 4096, SAMPLER_WIDTH, 512), ("float32", 1, SAMPLER_WIDTH, 512)}
        cases = [c for c in cases if (c.dtype, c.rows, c.width, c.k) in keep]
    return cases


def real_grid() -> list[Case]:
    """The shipped real rows (``sample_data``) tiled to a few batch sizes: indexer bf16 with its
    causal ends (int32 indices, no values), sampler fp32 logits (int64, values, sorted)."""
    import numpy as np

    from . import sample_data

    scores, end = sample_data.indexer_rows()
    logits = sample_data.sampler_rows()
    cases = []
    for rows in REAL_INDEXER_ROWS:
        elements = int(np.resize(end, rows).astype(np.int64).sum())
        cases += [Case("indexer", "bfloat16", rows, scores.shape[1], k, "int32", False, False, "real", elements)
                  for k in INDEXER_KS]
    for rows in REAL_SAMPLER_ROWS:
        cases += [Case("sampler", "float32", rows, logits.shape[1], k, "int64", True, True, "real")
                  for k in SAMPLER_KS]
    return cases


def select(cases: list[Case], *, dtypes=None, rows=None, widths=None, ks=None, dists=None) -> list[Case]:
    """The cases matching every filter given (each a collection of allowed values; None: any).
    ``dists`` re-labels every case with each distribution (real cases keep theirs)."""
    out = [c for c in cases if (not dtypes or c.dtype in dtypes) and (not rows or c.rows in rows)
           and (not widths or c.width in widths) and (not ks or c.k in ks)]
    if dists:
        out = [c if c.dist == "real" else Case(**{**asdict(c), "dist": d}) for c in out for d in dists]
        out = list(dict.fromkeys(out))
    return out


# -- timing -------------------------------------------------------------------------------------

def _event_us(torch, fn) -> float:
    """GPU time (us) of one call of fn on torch's current stream, from CUDA events."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3


def _time(torch, fn, flush, iters: int) -> float:
    """Median GPU time of fn in microseconds from CUDA events, L2 flushed before each call."""
    fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        times.append(_event_us(torch, fn))
    return statistics.median(times)


def _time_graph(torch, fn, flush, iters: int) -> float | None:
    """GPU time of fn (us) under CUDA-graph replay: graph [flush; fn] minus graph [flush], so that
    host launch gaps do not count. None when fn cannot be captured.

    The two graphs replay in alternation, either first by turns, and the result is the median of
    each pair's difference: the flush (512 MiB written, ~130 us on an H200) dwarfs a few-row
    top-k (~8 us), so a drift of the flush's time between two separate medians would show as
    a top-k's time several times over."""
    try:
        fn()  # kernels loaded and outputs allocated outside the capture
        torch.cuda.synchronize()
        both, flush_only = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(both):
            flush.zero_()
            fn()
        with torch.cuda.graph(flush_only):
            flush.zero_()
    except Exception:  # a capture failure costs this column only, not the benchmark
        torch.cuda.synchronize()
        return None
    both.replay()
    flush_only.replay()
    graphs = (both, flush_only)
    differences = []
    for i in range(iters):
        us = [0.0, 0.0]
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            us[j] = _event_us(torch, graphs[j].replay)
        differences.append(us[0] - us[1])
    return max(0.0, statistics.median(differences))


def _time_wall(torch, fn, flush, iters: int) -> float:
    """Median wall time (us) of fn, which must block until its GPU work is done, L2 flushed and
    the device idle before each call. For peers on their own streams (JAX), which CUDA events on
    torch's stream do not see; includes the peer's dispatch overhead."""
    fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def _torch_dtype(torch, name: str):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def _to_cuda(torch, host):
    """A CUDA tensor with the bits of a NumPy array (bfloat16 moved as int16, which torch reads)."""
    import ml_dtypes

    if host.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(host.view("int16")).cuda().view(torch.bfloat16)
    return torch.from_numpy(host).cuda()


def _input(torch, case: Case):
    """``(x, end)`` on the GPU for ``case``; end is None unless the case has causal rows."""
    import numpy as np

    from . import distributions, sample_data

    dt = _torch_dtype(torch, case.dtype)
    if case.dist == "real":
        if case.scenario == "indexer":
            scores, end = sample_data.indexer_rows()
            x = np.resize(scores, (case.rows, case.width))
            return _to_cuda(torch, x), _to_cuda(torch, np.resize(end, case.rows))
        return _to_cuda(torch, np.resize(sample_data.sampler_rows(), (case.rows, case.width))), None
    if case.dist == "normal":
        return torch.randn(case.rows, case.width, device="cuda", dtype=torch.float32).to(dt), None
    host = distributions.make(case.dist, case.rows, case.width, "float32")
    return torch.from_numpy(host).cuda().to(dt), None


def jax_available() -> bool:
    """Whether JAX is installed with a GPU backend. Turns off JAX's grab of 75% of GPU memory
    (it would starve torch) before JAX's first import."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax

        return bool(jax.devices("gpu"))
    except Exception:  # not installed, or CPU-only jaxlib ("Unknown backend: 'gpu'")
        return False


def _time_jax(torch, x, case: Case, flush, iters: int) -> float:
    import jax

    xj = jax.dlpack.from_dlpack(x)  # zero-copy view of the torch tensor
    top_k = jax.jit(lambda a: jax.lax.top_k(a, case.k))
    return _time_wall(torch, lambda: jax.block_until_ready(top_k(xj)), flush, iters)


def run_case(case: Case, iters: int = ITERS, jax_peer: bool = False) -> Result:
    """Time ``case`` for ours and torch.topk (and jax.lax.top_k when ``jax_peer``).

    Ours runs with preallocated outputs and nan_policy="sentinel" (no sync), with the causal
    ``end`` of real indexer rows; the peers take the whole rows, whose tail is -inf there, as a
    masked indexer would pass them. Raises whatever ours or torch raise (out of memory, ...).
    """
    import torch

    import deepselect_rt

    x, end = _input(torch, case)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    kw = dict(indices_type=case.index, return_value=case.values, sorted=case.sorted, nan_policy="sentinel", end=end)
    idx = torch.empty(case.rows, case.k, dtype=getattr(torch, case.index), device="cuda")
    val = torch.empty(case.rows, case.k, dtype=x.dtype, device="cuda") if case.values else None

    def ours():
        deepselect_rt.topk(x, case.k, output_idx=idx, output_val=val, **kw)

    def peer():
        torch.topk(x, case.k, dim=1, sorted=case.sorted)

    result = Result(case, _time(torch, ours, flush, iters), _time(torch, peer, flush, iters))
    if min(result.ours_us, result.torch_us) < GRAPH_BELOW_US:
        result.ours_graph_us = _time_graph(torch, ours, flush, iters)
        result.torch_graph_us = _time_graph(torch, peer, flush, iters)
    if jax_peer:
        try:
            result.peers[JAX] = _time_jax(torch, x, case, flush, iters)
        except Exception as exc:  # a peer's failure (memory, dlpack) loses its column only
            result.peer_errors[JAX] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return result


def per_call_us(fn, calls: int, burst: int = 25) -> float:
    """Host time per call (us) of ``fn``: ``calls`` calls in bursts of ``burst``, each burst timed
    from an idle GPU to its last call returning (no sync inside), so that a kernel slower than
    the host does not hide the host's own time while the launch queue has room."""
    import torch

    for _ in range(100):
        fn()
    total = 0.0
    for start in range(0, calls, burst):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(min(burst, calls - start)):
            fn()
        total += time.perf_counter() - t0
    torch.cuda.synchronize()
    return total / calls * 1e6


def host_overhead(calls: int = HOST_CALLS) -> HostOverhead:
    """Host time per call (``per_call_us``) of ours and torch.topk over ``calls`` calls on a
    1 x 1024 float32 input, k = 8, outputs preallocated."""
    import torch

    import deepselect_rt

    rows, width, k = 1, 1024, 8
    x = torch.randn(rows, width, device="cuda")
    idx = torch.empty(rows, k, dtype=torch.int64, device="cuda")
    val = torch.empty(rows, k, device="cuda")

    ours = per_call_us(lambda: deepselect_rt.topk(x, k, output_idx=idx, output_val=val, nan_policy="sentinel"), calls)
    ref = per_call_us(lambda: torch.topk(x, k, dim=1, sorted=False, out=(val, idx)), calls)
    return HostOverhead(f"float32 {rows}x{width} k={k}", calls, ours, ref)


# -- records ------------------------------------------------------------------------------------

def run_meta() -> dict:
    """What performance.md asks every published number to carry: date (UTC), GPU, driver,
    library versions, commit, command."""
    import torch

    from .cache_key import package_version

    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "driver": _driver_version(), "torch": torch.__version__,
            "deepselect_rt": package_version(), "commit": _git_commit(), "command": shlex.join(sys.argv)}
    if "jax" in sys.modules:
        meta["jax"] = sys.modules["jax"].__version__
    return meta


def _driver_version() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
        return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout else None
    except (OSError, subprocess.SubprocessError):
        return None


def _git_commit() -> str | None:
    checkout = Path(__file__).resolve().parents[1]
    if not (checkout / ".git").exists():
        return None  # an installed wheel
    try:
        done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=20)
        return done.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def save_json(path, results: list[Result], host: HostOverhead | None = None, meta: dict | None = None) -> None:
    """Write ``{"meta": ..., "results": [Result.as_dict()...], "host": ...}`` to ``path``."""
    doc = {"meta": meta or {}, "results": [r.as_dict() for r in results],
           "host": asdict(host) if host is not None else None}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def load_json(path) -> tuple[list[Result], HostOverhead | None, dict]:
    """``(results, host, meta)`` from a ``save_json`` file, or from a bare list of result dicts
    (the older tools/bench.py format). Raises OSError when unreadable, ValueError when the file
    is not such a document."""
    try:
        doc = json.loads(Path(path).read_text())
        if isinstance(doc, list):
            doc = {"results": doc}
        results = [Result.from_dict(d) for d in doc["results"]]
        host = HostOverhead(**doc["host"]) if doc.get("host") else None
        return results, host, dict(doc.get("meta") or {})
    except (KeyError, TypeError, ValueError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a deepselect-rt bench JSON ({type(exc).__name__}: {exc})") from None


__all__ = ["Case", "Result", "HostOverhead", "standard_grid", "real_grid", "select", "run_case",
           "host_overhead", "jax_available", "run_meta", "save_json", "load_json", "OURS", "TORCH", "JAX"]
