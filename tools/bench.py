"""Benchmark deepselect_rt.topk against torch.topk on the GPU (docs/performance.md's method).

Usage: python tools/bench.py [--quick|--full] [--json FILE]. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from deepselect_rt import bench  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    cases = bench.standard_grid(quick=not args.full)
    results = []
    for c in cases:
        try:
            results.append(bench.run_case(c))
        except Exception as exc:  # a failed case is reported, the run goes on
            print(f"FAILED {c.label()}: {exc}", flush=True)
            continue
        r = results[-1]
        print(f"{c.label():55s} ours {r.ours_us:9.1f} us {r.ours_tbs:5.2f} TB/s  torch {r.torch_us:9.1f} us  x{r.speedup:5.1f}",
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_dict() for r in results], indent=1))
    table = Table(title="deepselect_rt.topk vs torch.topk (H200, cold L2, median of 30)")
    for col in ("case", "ours us", "TB/s", "torch us", "speedup"):
        table.add_column(col)
    for r in results:
        table.add_row(r.case.label(), f"{r.ours_us:.1f}", f"{r.ours_tbs:.2f}", f"{r.torch_us:.1f}", f"{r.speedup:.1f}x")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
