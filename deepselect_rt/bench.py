"""Benchmarks as docs/performance.md prescribes: CUDA events, cold L2 before every call, median of
at least 30 calls, torch.topk on the same inputs in the same run, effective bandwidth.

Needs torch with CUDA (the timing harness and the peer). Used by ``deepselect-rt bench`` and
tools/device_check.sh.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from .dtypes import ITEMSIZE

INDEXER_ROWS = (1, 6, 64, 256, 512, 4096)
INDEXER_WIDTHS = (16384, 65536, 131072, 262144, 1048576)
INDEXER_KS = (512, 1024, 2048)
SAMPLER_ROWS = (1, 6, 64, 256, 1024, 4096)
SAMPLER_WIDTH = 129280
SAMPLER_KS = (512, 4096)
MAX_INPUT_BYTES = 8 << 30
FLUSH_BYTES = 512 << 20


@dataclass(frozen=True)
class Case:
    scenario: str
    dtype: str
    rows: int
    width: int
    k: int
    index: str
    values: bool
    sorted: bool
    dist: str = "normal"

    def bytes_moved(self) -> int:
        n = self.rows * self.width * ITEMSIZE[self.dtype] + self.rows * self.k * ITEMSIZE[self.index]
        return n + (self.rows * self.k * ITEMSIZE[self.dtype] if self.values else 0)

    def label(self) -> str:
        flags = ("vals" if self.values else "novals") + (",sorted" if self.sorted else "")
        return f"{self.dtype} {self.rows}x{self.width} k={self.k} {flags} {self.dist}"


@dataclass
class Result:
    case: Case
    ours_us: float
    torch_us: float
    ours_tbs: float = field(init=False)
    speedup: float = field(init=False)

    def __post_init__(self):
        self.ours_tbs = self.case.bytes_moved() / (self.ours_us * 1e-6) / 1e12
        self.speedup = self.torch_us / self.ours_us

    def as_dict(self) -> dict:
        d = asdict(self.case)
        d.update(ours_us=self.ours_us, torch_us=self.torch_us, ours_tbs=self.ours_tbs, speedup=self.speedup)
        return d


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


def _time(torch, fn, flush, iters: int) -> float:
    """Median GPU time of fn in microseconds, L2 flushed before each call."""
    fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def _input(torch, case: Case):
    from . import distributions

    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[case.dtype]
    if case.dist == "normal":
        return torch.randn(case.rows, case.width, device="cuda", dtype=torch.float32).to(dt)
    host = distributions.make(case.dist, case.rows, case.width, "float32")
    return torch.from_numpy(host).cuda().to(dt)


def run_case(case: Case, iters: int = 30) -> Result:
    import torch

    import deepselect_rt

    x = _input(torch, case)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    kw = dict(indices_type=case.index, return_value=case.values, sorted=case.sorted, nan_policy="sentinel")
    idx = torch.empty(case.rows, case.k, dtype=getattr(torch, case.index), device="cuda")
    val = torch.empty(case.rows, case.k, dtype=x.dtype, device="cuda") if case.values else None
    ours = _time(torch, lambda: deepselect_rt.topk(x, case.k, output_idx=idx, output_val=val, **kw), flush, iters)
    ref = _time(torch, lambda: torch.topk(x, case.k, dim=1, sorted=case.sorted), flush, iters)
    return Result(case, ours, ref)
