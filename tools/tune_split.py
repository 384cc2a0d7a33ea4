"""Split-row crossover (issue 5): GPU time under CUDA-graph replay with a cold L2 of each shape
with every split factor forced (1 = one CTA per row), cluster vs workspace at the rule's pick,
and torch.topk. GPU only; prints tables, writes JSON to the path
given (default split.json)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench  # noqa: E402
from deepselect_rt.cuda import backend, module  # noqa: E402
from deepselect_rt.cuda.plan import split_factor  # noqa: E402
from deepselect_rt.cuda.variants import SPLIT_CLUSTER, SPLIT_WORKSPACE  # noqa: E402

SPLITS = (1, 2, 4, 8, 16)
GOALS = [("bfloat16", 1, 131072, 512, 8), ("bfloat16", 1, 1 << 20, 2048, 12), ("bfloat16", 8, 131072, 2048, 10),
         ("bfloat16", 8, 1 << 20, 2048, 18), ("float32", 1, 129280, 512, 10)]
GRID = [("bfloat16", r, w, k) for k in (512, 2048) for w in (16384, 65536, 131072, 1 << 20)
        for r in (1, 4, 8, 16, 32, 64)]
ITERS = 30

flush = torch.empty(bench.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
sms = module.device_info(0).sm_count
console = Console()


def timed(dtype, rows, width, k, split=None, how=""):
    x = torch.randn(rows, width, device="cuda").to(getattr(torch, dtype))
    idx = torch.empty(rows, k, dtype=torch.int32, device="cuda")

    def ours():
        deepselect_rt.topk(x, k, output_idx=idx, indices_type="int32", return_value=False, nan_policy="sentinel")

    if split is None:
        return bench._time_graph(torch, ours, flush, ITERS)
    with backend.forced_split(split, how):
        return bench._time_graph(torch, ours, flush, ITERS)


def torch_time(dtype, rows, width, k):
    x = torch.randn(rows, width, device="cuda").to(getattr(torch, dtype))
    return bench._time_graph(torch, lambda: torch.topk(x, k, dim=1, sorted=False), flush, ITERS)


out = {"sm_count": sms, "grid": [], "goals": []}
table = Table("dtype", "rows", "width", "k", *[f"split {s} us" for s in SPLITS], "best", "rule",
              title=f"split crossover, graph replay, cold L2 ({torch.cuda.get_device_name()})")
for dtype, rows, width, k in GRID:
    times = {s: timed(dtype, rows, width, k, s) for s in SPLITS}
    rule = split_factor(rows, width, k, sms)
    best = min(times, key=lambda s: times[s] if times[s] is not None else 1e30)
    out["grid"].append(dict(dtype=dtype, rows=rows, width=width, k=k, times=times, rule=rule))
    table.add_row(dtype, str(rows), str(width), str(k), *[f"{times[s]:.1f}" for s in SPLITS], str(best), str(rule))
console.print(table)

goal_table = Table("shape", "k", "torch us", "ours (rule) us", "split", "cluster@rule", "workspace@rule", "goal us",
                   title="issue 5 goals, graph replay, cold L2")
for dtype, rows, width, k, goal in GOALS:
    rule = split_factor(rows, width, k, sms)
    row = dict(dtype=dtype, rows=rows, width=width, k=k, goal=goal, split=rule,
               torch=torch_time(dtype, rows, width, k), ours=timed(dtype, rows, width, k),
               cluster=timed(dtype, rows, width, k, rule, SPLIT_CLUSTER),
               workspace=timed(dtype, rows, width, k, rule, SPLIT_WORKSPACE))
    out["goals"].append(row)
    goal_table.add_row(f"{dtype} {rows}x{width}", str(k), f"{row['torch']:.1f}", f"{row['ours']:.1f}", str(rule),
                       f"{row['cluster']:.1f}", f"{row['workspace']:.1f}", str(goal))
console.print(goal_table)
Path(sys.argv[1] if len(sys.argv) > 1 else "split.json").write_text(json.dumps(out, indent=1))
