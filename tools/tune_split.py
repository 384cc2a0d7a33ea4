"""Split-row crossover (issue 5): GPU time under CUDA-graph replay with a cold L2 of each shape
through the streaming kernel at split_factor's split (1 = one CTA per row) and through the
cluster radix select at every split it fits (one CTA a row in any number of waves, clusters
within one wave, or in several with --any-waves); then the issue's goal shapes with the
automatic rule, each way, and torch.topk. GPU only; prints tables, writes JSON to the path
given (default split.json). ``--goals``: the goal table only."""

import json
from pathlib import Path

import gpu_tool

parser = gpu_tool.parser(__doc__)
parser.add_argument("json", nargs="?", type=Path, default=Path("split.json"), help="where to write the results")
which = parser.add_mutually_exclusive_group()
which.add_argument("--goals", action="store_true", help="time the goal shapes only")
which.add_argument("--no-goals", action="store_true", help="time the crossover grid only")
parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"), help="the grid's dtype")
parser.add_argument("--rows", type=gpu_tool.int_list, default=[1, 4, 8, 16, 32], help="the grid's row counts")
parser.add_argument("--widths", type=gpu_tool.int_list, default=[32768, 131072, 1 << 20], help="the grid's widths")
parser.add_argument("--ks", type=gpu_tool.int_list, default=[512, 2048], help="the grid's k values")
parser.add_argument("--any-waves", action="store_true", help="time clusters of the radix select in several waves too")
ARGS = gpu_tool.start("tools/tune_split.py", parser)

import torch  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, cli  # noqa: E402
from deepselect_rt.cuda import backend, module  # noqa: E402
from deepselect_rt.cuda.plan import choose_split, radix_tier, row_vectors, split_factor  # noqa: E402
from deepselect_rt.cuda.variants import SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE  # noqa: E402

SPLITS = (1, 2, 4, 8, 16)
GOALS = [("bfloat16", 1, 131072, 512, 8), ("bfloat16", 1, 1 << 20, 2048, 12), ("bfloat16", 8, 131072, 2048, 10),
         ("bfloat16", 8, 1 << 20, 2048, 18), ("float32", 1, 129280, 512, 10)]
GRID = [(ARGS.dtype, r, w, k) for k in ARGS.ks for w in ARGS.widths for r in ARGS.rows]
ITERS = 30

flush = torch.empty(bench.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
sms = module.device_info(0).sm_count
console = cli.console()


def timed(dtype, rows, width, k, split=None, how="", sorted=False):
    x = torch.randn(rows, width, device="cuda").to(getattr(torch, dtype))
    idx = torch.empty(rows, k, dtype=torch.int32, device="cuda")

    def ours():
        deepselect_rt.topk(x, k, output_idx=idx, indices_type="int32", return_value=False, nan_policy="sentinel",
                           sorted=sorted)

    if split is None:
        return bench._time_graph(torch, ours, flush, ITERS)
    with backend.forced_split(split, how):
        return bench._time_graph(torch, ours, flush, ITERS)


def torch_time(dtype, rows, width, k):
    x = torch.randn(rows, width, device="cuda").to(getattr(torch, dtype))
    return bench._time_graph(torch, lambda: torch.topk(x, k, dim=1, sorted=False), flush, ITERS)


def rule(dtype, rows, width, k):
    """What the backend picks for contiguous rows: ("radix", split) or ("stream", split)."""
    split, how = choose_split(rows, width, row_vectors(dtype, width), k, dtype, backend.device_limits(0))
    return how or "stream", split


def fmt(t):
    return "-" if t is None else f"{t:.1f}"


out = {"sm_count": sms, "grid": [], "goals": []}
if not ARGS.goals:
    table = Table("dtype", "rows", "width", "k", "stream", *[f"radix {s}" for s in SPLITS],
                  "best", "rule", title=f"split crossover, us, graph replay, cold L2 ({torch.cuda.get_device_name()})")
    for dtype, rows, width, k in GRID:
        stream_split = split_factor(rows, width, k, sms)
        times = {f"stream {stream_split}": timed(dtype, rows, width, k, stream_split)}
        for s in SPLITS:
            # One CTA a row in as many waves as it takes; clusters within one wave unless --any-waves.
            fits = (s == 1 or rows * s <= sms or ARGS.any_waves) and radix_tier(dtype, row_vectors(dtype, width), s)
            times[f"radix {s}"] = timed(dtype, rows, width, k, s, SPLIT_RADIX) if fits else None
        best = min((t, name) for name, t in times.items() if t is not None)[1]
        how, split = rule(dtype, rows, width, k)
        out["grid"].append(dict(dtype=dtype, rows=rows, width=width, k=k, times=times, rule=[how, split]))
        table.add_row(dtype, str(rows), str(width), str(k), *[fmt(t) for t in times.values()], best, f"{how} {split}")
    console.print(table)

if not ARGS.no_goals:
    goal_table = Table("shape", "k", "torch us", "ours (rule) us", "sorted=True us", "rule", "stream cluster us",
                       "workspace us", "goal us",
                       title="issue 5 goals, graph replay, cold L2 (stream ways at split_factor's split)")
    for dtype, rows, width, k, goal in GOALS:
        how, split = rule(dtype, rows, width, k)
        stream_split = split_factor(rows, width, k, sms)
        row = dict(dtype=dtype, rows=rows, width=width, k=k, goal=goal, rule=[how, split],
                   torch=torch_time(dtype, rows, width, k), ours=timed(dtype, rows, width, k),
                   ours_sorted=timed(dtype, rows, width, k, sorted=True),
                   cluster=timed(dtype, rows, width, k, stream_split, SPLIT_CLUSTER),
                   workspace=timed(dtype, rows, width, k, stream_split, SPLIT_WORKSPACE))
        out["goals"].append(row)
        goal_table.add_row(f"{dtype} {rows}x{width}", str(k), fmt(row["torch"]), fmt(row["ours"]),
                           fmt(row["ours_sorted"]), f"{how} {split}", fmt(row["cluster"]), fmt(row["workspace"]),
                           str(goal))
    console.print(goal_table)
ARGS.json.write_text(json.dumps(out, indent=1))
