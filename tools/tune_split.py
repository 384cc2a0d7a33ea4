"""Which split serves each shape fastest: GPU time of deepselect_rt.topk under every forced plan
(backend.forced_split: one CTA a row, or 2-16 CTAs a row as a cluster radix select, a streaming
cluster or a workspace merge) beside the plan the dispatch rule picks, bf16 by default, int32
indices, no values, normal rows, CUDA events with cold L2 (median of grid.ITERS):

    python tools/tune_split.py                                   # 16-512 rows x 16K-1M, k 512, 2048
    python tools/tune_split.py --rows 16,64 --widths 262144 --ks 512 --ways cluster,radix --json t.json

Forced plans the device turns into another plan (a radix tier that does not hold the row, a
cluster that does not fit) are timed once, under the plan that runs. Before it is timed, each
plan's indices in the first, middle and last row are checked against the NumPy reference's, bit
for bit (unsorted: by ascending column on every path); a mismatch stops the tool naming the shape
and plan. GPU only; prints a table last
(rule's plan and time, the fastest plan and time, rule over fastest), --json writes every figure
(after each shape).
"""

import argparse
import json
import sys
from pathlib import Path

import gpu_tool

from deepselect_rt.bench import grid, timing
from deepselect_rt.cuda import variants
from deepselect_rt.dtypes import ITEMSIZE

WAYS = {"one": "", "radix": variants.SPLIT_RADIX, "cluster": variants.SPLIT_CLUSTER,
        "workspace": variants.SPLIT_WORKSPACE}
SPLITS = (2, 4, 8, 16)


def way_list(text: str) -> list[str]:
    """argparse type: comma-separated names of WAYS."""
    names = [part.strip() for part in text.split(",")]
    if not set(names) <= set(WAYS):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated subset of {', '.join(WAYS)}")
    return names

parser = gpu_tool.parser(__doc__)
parser.add_argument("--rows", type=gpu_tool.int_list, default=[16, 32, 64, 128, 256, 512],
                    help="row counts (default 16,32,64,128,256,512)")
parser.add_argument("--widths", type=gpu_tool.int_list, default=[16384, 65536, 262144, 1 << 20],
                    help="widths (default 16K,64K,256K,1M)")
parser.add_argument("--ks", type=gpu_tool.int_list, default=[512, 2048], help="k values (default 512,2048)")
parser.add_argument("--dtype", default="bfloat16", choices=variants.INPUT_DTYPES)
parser.add_argument("--ways", type=way_list, default=list(WAYS),
                    help="forced ways to split, of one, radix, cluster, workspace (default all)")
parser.add_argument("--json", type=Path, help="write every figure here")
ARGS = parser.parse_args()
if ARGS.json and not ARGS.json.parent.is_dir():
    parser.error(f"--json {ARGS.json}: no folder {ARGS.json.parent}")
gpu_tool.start("tools/tune_split.py", parser)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt.cli.console import console as make_console  # noqa: E402
from deepselect_rt.cuda import arch, backend, driver, plan as plans  # noqa: E402
from deepselect_rt import reference  # noqa: E402

KW = dict(indices_type="int32", return_value=False, nan_policy="sentinel")


def checked(rows: int) -> list[int]:
    """The rows checked against the reference (all of them would take the CPU minutes at 1M)."""
    return sorted({0, rows // 2, rows - 1})


def forced() -> list[tuple[int, str]]:
    """The (split, how) pairs to force, in --ways order."""
    out = []
    for way in ARGS.ways:
        out += [(1, "")] if way == "one" else [(s, WAYS[way]) for s in SPLITS]
    return out


def plan_name(plan) -> str:
    """What runs: "stream 1 (512 threads)", "large 1 (512 threads)", "cluster 8", "workspace 4",
    "radix 16 (1024x4)" (threads x vectors a thread)."""
    if plan.how == variants.SPLIT_RADIX:
        extra = dict(plan.variant.extra)
        return f"radix {plan.split} ({plan.threads}x{extra['DS_VECS']})"
    if plan.split > 1:
        return f"{plan.how} {plan.split}"
    return f"{plan.variant.family.removeprefix('topk_')} 1 ({plan.threads} threads)"


def the_plan(x, k: int):
    vectors = plans.row_vectors(ARGS.dtype, x.shape[1], x.data_ptr(), x.stride(0))
    return backend.ready(0, ARGS.dtype, *x.shape, k, vectors).plan


def time_shape(rows: int, width: int, k: int, x, want: np.ndarray) -> dict:
    """Every distinct plan's event time of one shape at k, the rule's first."""
    idx = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    call = lambda: deepselect_rt.topk(x, k, output_idx=idx, **KW)  # noqa: E731
    timed = {}

    def measure(name: str):
        if name in timed:
            return
        call()
        got = idx[checked(rows)].cpu().numpy()
        if not np.array_equal(got, want):
            sys.exit(f"tools/tune_split.py: {ARGS.dtype} {rows}x{width} k={k} under {name}: rows "
                     f"{checked(rows)} differ from the reference; --json holds the shapes before it")
        timed[name] = timing.time_events(torch, call, flush, grid.ITERS)

    rule = plan_name(the_plan(x, k))
    measure(rule)
    for split, how in forced():
        with backend.forced_split(split, how):
            measure(plan_name(the_plan(x, k)))
    return dict(rows=rows, width=width, k=k, rule=rule, us=timed)


flush = torch.empty(grid.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
console = make_console()
info = arch.device_info(0)
results = {"meta": grid.run_meta(), "dtype": ARGS.dtype, "shapes": []}
table = Table("shape", "k", "rule's plan", "us", "fastest plan", "us", "rule / fastest",
              title=f"forced splits: us, CUDA events, cold L2 ({info.name})")
with driver.on_device(0):
    for rows in ARGS.rows:
        for width in ARGS.widths:
            if rows * width * ITEMSIZE[ARGS.dtype] > grid.MAX_INPUT_BYTES:
                console.print(f"{rows}x{width}: over performance.md's input limit; skipped")
                continue
            torch.manual_seed(rows * width)
            x = torch.randn(rows, width, device="cuda").to(timing.torch_dtype(torch, ARGS.dtype))
            exact = x[checked(rows)].float().cpu().numpy()
            for k in ARGS.ks:
                want = reference.topk(exact, k, return_value=False)[1].astype(np.int32)
                e = time_shape(rows, width, k, x, want)
                results["shapes"].append(e)
                best = min(e["us"], key=e["us"].get)
                rule_us = e["us"][e["rule"]]
                table.add_row(f"{rows}x{width}", str(k), e["rule"], f"{rule_us:.1f}", best, f"{e['us'][best]:.1f}",
                              f"{rule_us / e['us'][best]:.2f}")
                console.print(f"{rows}x{width} k={k}: " + ", ".join(f"{n} {t:.1f}" for n, t in e["us"].items()))
                if ARGS.json:  # after every shape, so that a run stopped early keeps what it timed
                    ARGS.json.write_text(json.dumps(results, indent=1) + "\n")
            del x
console.print(table)
