"""Issue 4's throughput goal and skewed rows: effective TB/s of bf16 batches (rows >= 256, widths
of 64K-1M, k in 512/1024/2048), and the time of skewed rows against normal rows of the same shape
(1024 x 128K), including rows whose only large values sit at the vectors the streaming kernel
samples for its first threshold (so that pass repeats). CUDA events, cold L2, int32 indices, no
values. GPU only; prints two tables."""

import gpu_tool

gpu_tool.start("tools/throughput_skew.py", gpu_tool.parser(__doc__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, distributions  # noqa: E402

SHAPES = [(256, 65536), (4096, 131072), (1024, 1 << 20)]
KS = (512, 1024, 2048)
SKEWED = ("normal", "ascending", "descending", "few_distinct", "late_large", "few_finite", "all_equal")
SKEW_ROWS, SKEW_WIDTH = 1024, 131072
ITERS = 15

flush = torch.empty(bench.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")


def timed(x, k):
    fn = lambda: deepselect_rt.topk(x, k, indices_type="int32", return_value=False, nan_policy="sentinel")  # noqa: E731
    return bench._time(torch, fn, flush, ITERS)


def sampled_high(rows, width):
    """Normal rows whose only large values fill the vectors t * vectors // 512 (t < 512): the
    ones a 256- or 512-thread CTA samples (kernels_cu/row/stream_range.cuh)."""
    a = distributions.make("normal", rows, width, "float32", seed=1)
    vec = 8  # bf16 elements per 16-byte vector
    cols = ((np.arange(512) * (width // vec) // 512)[:, None] * vec + np.arange(vec)).ravel()
    a[:, cols] = 100 + 1000 * np.random.default_rng(0).random((rows, cols.size))
    return a


throughput = Table(title="bf16 throughput, us (TB/s)")
throughput.add_column("shape")
for k in KS:
    throughput.add_column(f"k={k}", justify="right")
for rows, width in SHAPES:
    x = torch.randn(rows, width, device="cuda").to(torch.bfloat16)
    cells = []
    for k in KS:
        us = timed(x, k)
        cells.append(f"{us:.1f} ({rows * width * 2 / us / 1e6:.2f})")
    throughput.add_row(f"{rows} x {width}", *cells)

skew = Table(title=f"skewed bf16 {SKEW_ROWS} x {SKEW_WIDTH}: us (x normal)")
skew.add_column("k")
for name in SKEWED + ("sampled_high",):
    skew.add_column(name, justify="right")
for k in (512, 2048):
    cells, base = [], None
    for name in SKEWED + ("sampled_high",):
        a = (sampled_high(SKEW_ROWS, SKEW_WIDTH) if name == "sampled_high"
             else distributions.make(name, SKEW_ROWS, SKEW_WIDTH, "float32", seed=1))
        us = timed(torch.from_numpy(a).cuda().to(torch.bfloat16), k)
        base = base or us
        cells.append(f"{us:.1f} ({us / base:.2f}x)")
    skew.add_row(str(k), *cells)

console = Console()
console.print(throughput)
console.print(skew)
