"""A small, representative set of top-k calls for compute-sanitizer (memcheck / racecheck):
every kernel family, every dtype, unaligned rows, short rows, begin/end, NaN, caller buffers,
rows split over a cluster (streaming and radix) and over a workspace. --radix: only the cluster
radix select's calls (racecheck of the whole set outlasts a few minutes: 1024-thread CTAs)."""

import gpu_tool

parser = gpu_tool.parser(__doc__)
parser.add_argument("--radix", action="store_true", help="only the cluster radix select's calls")
ARGS = gpu_tool.start("tools/sanitize_subset.py", parser)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt.cuda import backend  # noqa: E402

for dt in () if ARGS.radix else (torch.float32, torch.float16, torch.bfloat16):
    x = torch.randn(3, 20011, device="cuda").to(dt)
    x[1, 77] = float("nan")
    end = torch.tensor([20011, 300, 0], dtype=torch.int32, device="cuda")
    for k in (1, 512, 2048, 5000):
        deepselect_rt.topk(x, k, end=end, nan_policy="sentinel")
        deepselect_rt.topk(x[:, 1:], k, sorted=True, nan_policy="propagate", indices_type="int32")
        buf = torch.zeros(3, k + 3, dtype=torch.int64, device="cuda")
        deepselect_rt.topk(x, k, output_idx=buf[:, :k], return_value=False, nan_policy="sentinel")
for how in ("radix",) if ARGS.radix else ("radix", "cluster", "workspace"):
    # float32 too for the radix select: its tiers of one and two vectors a thread hold keys.
    for dt in (torch.bfloat16, torch.float32) if how == "radix" else (torch.bfloat16,):
        for split in (3, 16):
            with backend.forced_split(split, how):
                x = torch.randn(2, 70001, device="cuda").to(dt)
                x[1, 5] = float("nan")
                end = torch.tensor([70001, 900], dtype=torch.int32, device="cuda")
                for k in (7, 2048):
                    deepselect_rt.topk(x[:, 1:], k, end=end, sorted=True, nan_policy="propagate")
                    deepselect_rt.topk(x[:, 1:], k, end=end, nan_policy="sentinel")
torch.cuda.synchronize()
print("sanitize subset done", np.__version__)
