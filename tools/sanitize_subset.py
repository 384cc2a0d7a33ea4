"""A small, representative set of top-k calls for compute-sanitizer (memcheck / racecheck):
every kernel family, every dtype, unaligned rows, short rows, begin/end, NaN, rows mostly -inf,
caller buffers, rows split over a cluster (streaming and radix) and over a workspace, batches of
more rows than SMs (one streaming CTA a row) whose survivors overflow the candidate buffer's
bounded room or come from one warp's share of each block, whose sampled estimates are too high,
or whose columns fill the finish's column bitmap.
--radix / --batch: only the cluster radix select's / the batches' calls (racecheck of the whole
set outlasts a few minutes: 1024-thread CTAs)."""

import gpu_tool

parser = gpu_tool.parser(__doc__)
# Both at once would select no call at all, and a sanitizer run would check nothing.
only = parser.add_mutually_exclusive_group()
only.add_argument("--radix", action="store_true", help="only the cluster radix select's calls")
only.add_argument("--batch", action="store_true", help="only the batches of more rows than SMs")
ARGS = gpu_tool.start("tools/sanitize_subset.py", parser)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt.cuda import backend  # noqa: E402

ONLY = ARGS.radix or ARGS.batch
for dt in () if ONLY else (torch.float32, torch.float16, torch.bfloat16):
    x = torch.randn(3, 20011, device="cuda").to(dt)
    x[1, 77] = float("nan")
    end = torch.tensor([20011, 300, 0], dtype=torch.int32, device="cuda")
    for k in (1, 512, 2048, 5000):
        deepselect_rt.topk(x, k, end=end, nan_policy="sentinel")
        deepselect_rt.topk(x[:, 1:], k, sorted=True, nan_policy="propagate", indices_type="int32")
        buf = torch.zeros(3, k + 3, dtype=torch.int64, device="cuda")
        deepselect_rt.topk(x, k, output_idx=buf[:, :k], return_value=False, nan_policy="sentinel")
for how in () if ARGS.batch else ("radix",) if ARGS.radix else ("radix", "cluster", "workspace"):
    # float32 too for the radix select: its tiers of one and two vectors a thread hold keys.
    for dt in (torch.bfloat16, torch.float32) if how == "radix" else (torch.bfloat16,):
        # One CTA a row (the radix select's cluster of one) only where the row fits one CTA.
        for split, width in ((1, 30001), (3, 70001), (16, 70001)):
            with backend.forced_split(split, how):
                # Row 2 is -inf but for 1,000 columns: at k = 2048 its K is -inf.
                x = torch.randn(3, width, device="cuda").to(dt)
                x[1, 5] = float("nan")
                x[2, 1000:] = float("-inf")
                end = torch.tensor([width, 900, width], dtype=torch.int32, device="cuda")
                for k in (7, 2048):
                    deepselect_rt.topk(x[:, 1:], k, end=end, sorted=True, nan_policy="propagate")
                    deepselect_rt.topk(x[:, 1:], k, end=end, nan_policy="sentinel")
if not ARGS.batch:
    # The prefiltered tier in clusters of two, on rows whose largest values fill the later CTA's
    # slice: there that CTA clears its vectors below a bound of its own (raise_bound).
    with backend.forced_split(2, "radix"):
        x = torch.randn(2, 131072, device="cuda").to(torch.bfloat16)
        x[0, 65536:] += 50
        x[1] = torch.linspace(-1, 1, 131072, device="cuda")
        for k in (512, 1024):
            deepselect_rt.topk(x, k, nan_policy="sentinel")
            deepselect_rt.topk(x, k, sorted=True, nan_policy="sentinel")
for dt in () if ARGS.radix else (torch.bfloat16, torch.float32):
    # Rows of one value whose sampled vectors (one a thread, t * vectors // 256, give or take
    # one as the rows start unaligned) hold a lower one pass every other element: more than the
    # bounded room. All-equal rows take the sample's tie column. In every fourth row one warp's
    # share of each block (256 threads) climbs: that warp appends and holds while the others
    # stream ahead.
    x = torch.randn(133, 16411, device="cuda").to(dt)
    x[::2] = 0.5
    vec = 16 // x.element_size()
    x[::4, torch.as_tensor(gpu_tool.sampled_columns(16411, vec, 256, pad=1), device="cuda")] = -1.0
    cols = torch.arange(16411, device="cuda")
    one_warp = cols // (16 // x.element_size()) % 256 // 32 == 0
    x[1::4, one_warp] = (8 + cols[one_warp] / 256).to(dt)
    for k in (512, 2048):
        deepselect_rt.topk(x, k, nan_policy="sentinel")
        deepselect_rt.topk(x, k, sorted=True, nan_policy="sentinel", indices_type="int32")
    # Rows whose sampled vectors (t * vectors // 256) hold 10-20, the rest normal values but for
    # k / 2 of 100-200 elsewhere: too few reach the first estimate and the second, so each row
    # streams three times (stream_range.cuh's retry_rank, then from 0).
    rows = torch.cuda.get_device_properties(0).multi_processor_count + 1
    x = torch.randn(rows, 16384, device="cuda")
    sampled = torch.as_tensor(gpu_tool.sampled_columns(16384, vec, 256), device="cuda")
    x[:, sampled] = 10 + 10 * torch.rand(rows, sampled.numel(), device="cuda")
    others = torch.ones(16384, dtype=torch.bool, device="cuda")
    others[sampled] = False
    others = others.nonzero().ravel()
    for row in range(rows):
        huge = others[torch.randperm(others.numel(), device="cuda")[:256]]
        x[row, huge] = 100 + 100 * torch.rand(256, device="cuda")
    deepselect_rt.topk(x.to(dt), 512, nan_policy="sentinel", indices_type="int32")
    # Rows the finish's column bitmap barely holds (k = 4096's 135,040 columns: chunks of
    # several words) and 128K rows (one word a chunk), written by column.
    for width, k in ((135040, 4000), (131072, 2048)):
        x = torch.randn(133, width, device="cuda").to(dt)
        deepselect_rt.topk(x, k, nan_policy="sentinel", indices_type="int32", return_value=False)
torch.cuda.synchronize()
print("sanitize subset done", np.__version__)
