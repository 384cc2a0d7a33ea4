"""The benchmark's cases and records: the standard grid of docs/performance.md, the cases on
the shipped real rows, results with their effective bandwidth, and the JSON files they are kept in
(with date, GPU, driver, commit and command). Needs neither a GPU nor torch.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from ..dtypes import INDEX_DTYPES, INPUT_DTYPES, ITEMSIZE

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
JAX_OURS = "jax.jit(deepselect-rt)"


@dataclass(frozen=True)
class Case:
    """One benchmark shape.

    dtype: input dtype ("bfloat16", "float16", "float32"); index: "int32" or "int64"; values:
    values returned; sorted: ``sorted=True``; dist: a ``distributions.NAMES`` entry or "real"
    (the shipped rows of ``samples``, tiled to ``rows``, indexer rows with their causal
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
    by name (``JAX`` and ``JAX_OURS``, each under jax.jit: wall time, see ``timing.time_wall``).
    ours_graph_us, torch_graph_us: GPU time under CUDA-graph replay, measured when either event
    time is under ``GRAPH_BELOW_US``, else None. peer_errors: why a peer has no time. ours_tbs and
    speedup (torch / ours) are derived.
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
        missing = [f.name for f in fields(Case) if f.name not in d and f.default is MISSING] + [
            name for name in ("ours_us", "torch_us") if name not in d]
        if missing:
            raise ValueError(f"a result lacks {', '.join(missing)}")
        case = Case(**{f.name: d[f.name] for f in fields(Case) if f.name in d})
        if case.dtype not in INPUT_DTYPES or case.index not in INDEX_DTYPES:
            raise ValueError(f"unknown dtypes {case.dtype!r}, {case.index!r}")
        times = [float(d["ours_us"]), float(d["torch_us"])]
        peers = {str(name): float(t) for name, t in dict(d.get("peers") or {}).items()}
        graphs = [None if d.get(name) is None else float(d[name]) for name in ("ours_graph_us", "torch_graph_us")]
        if not all(0 < t < math.inf for t in times + list(peers.values()) + [g for g in graphs if g is not None]):
            raise ValueError("times must be positive and finite")
        return cls(case, times[0], times[1], peers, *graphs, dict(d.get("peer_errors") or {}))


@dataclass(frozen=True)
class HostOverhead:
    """Wall time per call (us) over ``calls`` back-to-back calls on a small input, GPU not the
    bottleneck: what the Python layer costs. ``ours_us`` and ``torch_us``: with preallocated
    outputs; ``by_call``: every call measured (label -> us), frameworks and defaults included."""

    shape: str
    calls: int
    ours_us: float
    torch_us: float
    by_call: dict = field(default_factory=dict)


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
    """The shipped real rows (``samples``) tiled to a few batch sizes: indexer bf16 with its
    causal ends (int32 indices, no values), sampler fp32 logits (int64, values, sorted)."""
    import numpy as np

    from . import samples

    scores, end = samples.indexer_rows()
    logits = samples.sampler_rows()
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

def run_meta() -> dict:
    """What performance.md asks every published number to carry: date (UTC), GPU, driver,
    library versions, commit, command."""
    import torch

    from ..jit.key import package_version

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
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / ".git").exists():
        return None  # an installed wheel
    try:
        # "-dirty" when the tree measured is not the commit named
        done = subprocess.run(["git", "-C", str(checkout), "describe", "--always", "--dirty", "--abbrev=7"],
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
    (an older format). Raises OSError when unreadable, ValueError when the file
    is not such a document."""
    try:
        doc = json.loads(Path(path).read_text())
        if isinstance(doc, list):
            doc = {"results": doc}
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            raise ValueError("no \"results\" list")
        results = [Result.from_dict(d) for d in doc["results"]]
        host = HostOverhead(**doc["host"]) if doc.get("host") else None
        if not results and host is None:
            raise ValueError("no results and no host times")
        return results, host, dict(doc.get("meta") or {})
    except (KeyError, TypeError, ValueError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a file written by deepselect-rt bench --json ({exc})") from None


__all__ = ["Case", "Result", "HostOverhead", "standard_grid", "real_grid", "select", "run_meta", "save_json",
           "load_json", "OURS", "TORCH", "JAX", "JAX_OURS"]
