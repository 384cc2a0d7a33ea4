"""Times a fixed set of top-k shapes (issue 4's batches, issue 5's few rows under graph replay),
or the shapes given, with the deepselect_rt of a given source tree, so that two trees can be
compared in one session:

    git archive BASE deepselect_rt kernels_cu | tar -x -C /tmp/base
    python tools/ab_shapes.py --tree /tmp/base --json base.json
    python tools/ab_shapes.py --json new.json --against base.json
    python tools/ab_shapes.py --shapes bfloat16:256:1048576:1024 float32:512:129280:2048   # others
    python tools/ab_shapes.py --data all_equal --only 4096x16384   # a skewed distribution

bf16 unless said, int32 indices, no values, nan_policy="sentinel"; CUDA events with a cold L2
(median of 15), or CUDA-graph replay (median of 50, --replays) for the few-row shapes; --shapes
times the shapes given instead, unsorted, with CUDA events. The
trees can share a kernel cache: its keys hash the kernel sources. GPU only; prints a table."""

import argparse
import functools
import json
import sys
from pathlib import Path

from shape_arg import shape

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="source tree whose deepselect_rt to time (default: this checkout)")
parser.add_argument("--only", default="",
                    help="time only shapes whose name (after the dtype) starts with one of these, comma-separated")
parser.add_argument("--json", type=Path, help="write {shape: us} here")
parser.add_argument("--against", type=Path, help="a JSON of an earlier run to compare with")
parser.add_argument("--replays", type=int, default=50, help="graph replays a median of the few-row shapes (default 50)")
parser.add_argument("--data", default="normal",
                    help="the rows' distribution, one of deepselect_rt.distributions.NAMES (default normal); "
                         "made in float32 on the host, then converted")
parser.add_argument("--shapes", nargs="+", type=shape, metavar="dtype:rows:width:k",
                    help="time these shapes (unsorted, CUDA events) instead of SHAPES")
args = parser.parse_args()
# A tree without the package would silently time whichever deepselect_rt is installed.
if not (args.tree / "deepselect_rt" / "__init__.py").is_file():
    parser.error(f"--tree {args.tree}: no deepselect_rt/__init__.py there (give a source tree, e.g. a git archive)")
if args.against and not args.against.is_file():
    parser.error(f"--against {args.against}: no such file (give the --json of an earlier run)")
sys.path.insert(0, str(args.tree.resolve()))

from deepselect_rt import distributions  # noqa: E402

if args.data not in distributions.NAMES:
    parser.error(f"--data {args.data}: not a distribution; one of {', '.join(distributions.NAMES)}")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

# Checked with torch alone: an older tree's deepselect_rt may lack bench.require_gpu.
try:
    import torch  # noqa: E402
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    sys.exit("tools/ab_shapes.py needs an NVIDIA GPU and torch with CUDA (it times with CUDA events)")

import deepselect_rt  # noqa: E402
from deepselect_rt import bench  # noqa: E402

B, F, H = "bfloat16", "float32", "float16"
# (rows, width, k, dtype, sorted, graph)
SHAPES = [(4096, 131072, 512, B, False, False), (4096, 131072, 1024, B, False, False),
          (4096, 131072, 2048, B, False, False), (4096, 131072, 2048, B, True, False),
          (1024, 1 << 20, 512, B, False, False), (1024, 1 << 20, 2048, B, False, False),
          (256, 65536, 512, B, False, False), (256, 65536, 2048, B, False, False),
          (512, 131072, 2048, B, False, False), (256, 131072, 2048, B, False, False),
          (256, 131072, 1024, B, False, False), (100, 65536, 2048, B, False, False),
          (128, 65536, 512, B, False, False), (512, 129280, 2048, F, False, False),
          (4096, 16384, 512, B, False, False),
          (4096, 16384, 2048, B, False, False), (512, 65536, 512, B, False, False),
          (4096, 129280, 512, F, False, False),
          (4096, 129280, 512, F, True, False), (4096, 129280, 1024, F, False, False),
          (4096, 129280, 2048, F, False, False), (4096, 129280, 4096, F, False, False),
          # The 512-thread few-rows tuning on long rows, alone and split over clusters of two,
          # where session 30's grid read 1.1-1.4x slower than session 23's and the shapes above missed it.
          (256, 1 << 20, 512, B, False, False), (64, 1 << 20, 2048, B, False, False),
          (512, 262144, 2048, B, False, False),
          (1, 131072, 512, B, False, True), (1, 1 << 20, 2048, B, False, True),
          (8, 131072, 2048, B, False, True), (8, 1 << 20, 2048, B, False, True),
          (1, 129280, 512, F, False, True), (1, 129280, 512, F, True, True),
          # The cluster radix select's tiers (1, 2, 4 and 8 vectors a thread; float32's 512 x 16)
          # at one CTA a row and at clusters of 16, and the few-row shapes around them.
          (1, 131072, 512, B, True, True), (132, 8192, 512, B, False, True), (132, 16384, 2048, B, False, True),
          (100, 32768, 256, B, False, True), (100, 65536, 256, B, False, True), (64, 65536, 512, B, False, True),
          (100, 8192, 512, F, False, True), (100, 16384, 512, F, False, True), (132, 16384, 2048, F, False, True),
          (100, 32768, 256, F, False, True), (4, 262144, 2048, F, False, True), (100, 16384, 512, H, False, True)]

CHOSEN = ([(rows, width, k, dtype, False, False) for dtype, rows, width, k in args.shapes] if args.shapes
          else SHAPES)


def name(rows, width, k, dtype, by_value, graph):
    return f"{dtype} {rows}x{width} k={k}" + (" sorted" if by_value else "") + (" graph" if graph else "")


@functools.lru_cache(maxsize=1)
def rows_of(rows, width, dtype):
    """The input, kept while the next shape has the same rows (the host generator takes seconds
    at 4096 x 128K); torch's generator for normal rows."""
    x = (torch.randn(rows, width, device="cuda") if args.data == "normal" else
         torch.from_numpy(distributions.make(args.data, rows, width, "float32", seed=1)).cuda())
    return x.to(getattr(torch, dtype))


flush = torch.empty(bench.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
before = json.loads(args.against.read_text()) if args.against else {}
times = {}
console = Console()
with console.status("timing") as status:
    for rows, width, k, dtype, by_value, graph in CHOSEN:
        label = name(rows, width, k, dtype, by_value, graph)
        if not label.split(" ", 1)[1].startswith(tuple(args.only.split(","))):
            continue
        status.update(label)
        x = rows_of(rows, width, dtype)

        def fn():
            return deepselect_rt.topk(x, k, sorted=by_value, indices_type="int32", return_value=False,
                                      nan_policy="sentinel")

        times[label] = bench._time_graph(torch, fn, flush, args.replays) if graph else bench._time(torch, fn, flush, 15)

table = Table(title=f"GPU us, {args.data} rows, deepselect_rt of {args.tree}")
table.add_column("shape")
table.add_column("us", justify="right")
if before:
    table.add_column(f"{args.against.name} us", justify="right")
    table.add_column("speedup", justify="right")
def fmt(us):
    return "-" if us is None else f"{us:.1f}"


for label, us in times.items():
    old = before.get(label)
    cells = [label, fmt(us)]
    if before:
        cells += [fmt(old), f"{old / us:.2f}x" if old and us else "-"]
    table.add_row(*cells)
console.print(table)
if args.json:
    args.json.write_text(json.dumps(times, indent=1))
