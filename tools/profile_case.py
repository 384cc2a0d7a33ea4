"""Runs one top-k shape a few times, for Nsight Compute:
python tools/profile_case.py ROWS WIDTH K [dtype [split[:how] [sorted]]] (split: CTAs per row
forced, default the plan's; how: radix, cluster or workspace, default the streaming kernel's way;
sorted: 1 for value-sorted output; --dist: the rows' distribution, default randn). E.g. ``ncu
--set full python tools/profile_case.py 1 1048576 2048 bfloat16 16:radix`` or ``... 1024 131072
2048 --dist few_distinct``."""

from contextlib import nullcontext

import gpu_tool
from deepselect_rt.bench import distributions

parser = gpu_tool.parser(__doc__)
parser.add_argument("rows", type=int)
parser.add_argument("width", type=int)
parser.add_argument("k", type=int)
parser.add_argument("dtype", nargs="?", default="bfloat16", choices=("bfloat16", "float16", "float32"))
parser.add_argument("split", nargs="?", default="0", help="CTAs per row forced, with an optional :how")
parser.add_argument("sorted", nargs="?", default="0", choices=("0", "1"), help="1: value-sorted output")
parser.add_argument("--dist", default="normal", choices=distributions.NAMES,
                    help="the rows' distribution (deepselect_rt.bench.distributions; normal: torch.randn on the GPU)")
ARGS = gpu_tool.start("tools/profile_case.py", parser)

import torch  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt.cuda import backend  # noqa: E402

rows, width, k = ARGS.rows, ARGS.width, ARGS.k
dtype = getattr(torch, ARGS.dtype)
split, _, how = ARGS.split.partition(":")
split = int(split)
by_value = ARGS.sorted == "1"
if ARGS.dist == "normal":
    x = torch.randn(rows, width, device="cuda").to(dtype)
else:
    x = torch.from_numpy(distributions.make(ARGS.dist, rows, width, "float32", seed=1)).cuda().to(dtype)
with backend.forced_split(split, how) if split else nullcontext():
    for _ in range(3):
        deepselect_rt.topk(x, k, indices_type="int32", return_value=False, nan_policy="sentinel", sorted=by_value)
torch.cuda.synchronize()
