"""Issue 4's throughput goal and skewed rows: effective TB/s of bf16 batches (rows >= 256, widths
of 64K-1M, k in 512/1024/2048), and the time of skewed rows against normal rows of the same shape
(1024 x 128K), including rows whose only large values sit at the vectors the streaming kernel
samples for its first threshold (so that pass repeats), and the real fixtures' rows (DSA
indexer scores, sampler logits; ../shared/fixtures or --fixtures) repeated to a batch against
normal rows of the same shape and dtype. CUDA events, cold L2, int32 indices, no values. GPU
only; prints three tables (the third without fixtures says where it looked)."""

import argparse
import os
from pathlib import Path

import gpu_tool

def fixtures_dir(text: str) -> Path:
    """argparse type: a folder that exists (a default that does not is reported in the table)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such folder (give the real-data fixtures' folder)")
    return path


parser = gpu_tool.parser(__doc__)
parser.add_argument("--fixtures", type=fixtures_dir,
                    default=Path(os.environ.get("DEEPSELECT_RT_FIXTURES",
                                                Path(__file__).resolve().parents[2] / "shared" / "fixtures")),
                    help="the real-data fixtures folder (default: $DEEPSELECT_RT_FIXTURES, else ../shared/fixtures)")
ARGS = gpu_tool.start("tools/throughput_skew.py", parser)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, cli, distributions  # noqa: E402

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
    ones a 256- or 512-thread CTA samples (kernels_cu/stream/stream_range.cuh)."""
    a = distributions.make("normal", rows, width, "float32", seed=1)
    cols = gpu_tool.sampled_columns(width, 8, 512)  # bf16: 8 elements a vector
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

# (file, batch rows, dtype, ks): each fixture row repeated to fill the batch.
FIXTURES = [("indexer_scores_bf16.npy", 1024, torch.bfloat16, (512, 2048)),
            ("indexer_scores_fp32.npy", 1024, torch.float32, (512, 2048)),
            ("sampler_logits_fp32.npy", 4096, torch.float32, (512, 4096))]
real = Table(title="real fixtures repeated to a batch: us (x normal rows of that shape)")
for name in ("fixture", "shape", "k", "normal", "fixture rows"):
    real.add_column(name, justify="left" if name == "fixture" else "right")
for file, rows, dtype, ks in FIXTURES:
    path = ARGS.fixtures / file
    if not path.is_file():
        real.add_row(file, "-", "-", "-", f"not found at {path}")
        continue
    a = np.load(path)
    # The bf16 fixture holds the bits (uint16): reinterpreted, not converted.
    t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16 else torch.from_numpy(a)
    x = t.cuda().repeat(-(-rows // a.shape[0]), 1)[:rows].contiguous()
    normal = torch.randn(x.shape, device="cuda").to(dtype)
    for k in ks:
        base, us = timed(normal, k), timed(x, k)
        real.add_row(file, f"{rows} x {a.shape[1]}", str(k), f"{base:.1f}", f"{us:.1f} ({us / base:.2f}x)")

console = cli.console()
console.print(throughput)
console.print(skew)
console.print(real)
