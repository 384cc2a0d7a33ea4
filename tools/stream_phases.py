"""Where a row's time goes in the streaming kernel (issue 4), one CTA a row:

    python tools/stream_phases.py                                  # the default shapes
    python tools/stream_phases.py --shapes bfloat16:4096:16384:512 --dist ascending
    python tools/stream_phases.py --tree /tmp/base --json base.json   # another tree, to compare

Times a copy of the kernels carrying clock64 marks (tools/phase_marks.py: a __syncthreads and
thread 0's clock64 at each) at the row's start, after the sampled threshold, after streaming,
after the k-th best's select, after the bitmap's counts and ranks, and at the end; and counts
each CTA's selects while streaming, its passes streamed again, and its candidates at the end.
A step's cycles are the median over calls of the median CTA's (and of the slowest CTA's).
"CTA span" is the median CTA's start-to-end in us (%globaltimer), "kernel" the first start to
the last end; "events" the call's CUDA-event time (cold L2, with the marks' barriers).

Only batches the plan gives one CTA a row of the streaming kernel, value-unsorted (the sorted
output's sort is not marked). int32 indices, no values, nan_policy="sentinel". GPU only; prints
a table."""

import json
from pathlib import Path

import gpu_tool
import phase_marks
from shape_arg import shape

CHECKOUT = Path(__file__).resolve().parents[1]
SHAPES = [("bfloat16", 4096, 16384, 512), ("bfloat16", 4096, 16384, 2048), ("bfloat16", 512, 65536, 512),
          ("bfloat16", 256, 65536, 512), ("bfloat16", 4096, 131072, 512), ("bfloat16", 512, 131072, 2048),
          ("float32", 4096, 129280, 512)]
CALLS = 9
# Slots: marks 0-5 (below); counts at 40 (selects while streaming) and 41 (passes streamed
# again), the candidate count at the end of streaming at 42.
SELECTS, RETRIES, CANDIDATES = 40, 41, 42
EDITS = {
    "kernels_cu/topk_stream.cu": [
        ('#include "common/params.cuh"\n', phase_marks.MARK_HOOK + '#include "common/params.cuh"\n'),
        ("    const u32 split = DS_SPLIT ? (u32)p.split : 1;\n",
         "    DS_MARK(0);\n    const u32 split = DS_SPLIT ? (u32)p.split : 1;\n"),
        ("    const u32 m = stream_range(sh, vq, ring, xrow, (u32)lo, (u32)(hi - lo), k, thr);\n",
         "    const u32 m = stream_range(sh, vq, ring, xrow, (u32)lo, (u32)(hi - lo), k, thr);\n"
         f"    DS_MARK(2);\n    DS_VALUE({CANDIDATES}, m);\n"),
        ("    finish_row(p, sh, m, k, thr, row, xrow, (u32)lo, (u32)(hi - lo), bm);\n#elif",
         "    finish_row(p, sh, m, k, thr, row, xrow, (u32)lo, (u32)(hi - lo), bm);\n    DS_MARK(5);\n#elif"),
    ],
    "kernels_cu/stream/stream_range.cuh": [
        ("#pragma once\n", "#pragma once\n" + phase_marks.NO_MARKS),
        ("    u32 ahead = start();  // the first blocks load while the sample is selected\n",
         "    u32 ahead = start();  // the first blocks load while the sample is selected\n    DS_MARK(6);\n"),
        # A row streamed again samples again: marks 7 and 8 keep the first sample's.
        ("    to_keys(v);\n    const u32 slack = r / 4;\n",
         "    to_keys(v);\n    DS_MARK_FIRST(7);\n    const u32 slack = r / 4;\n"),
        ("    const Digits d = key_digits<NT, DS_VEC>(key, r, slack, sh.sel);\n",
         "    const Digits d = key_digits<NT, DS_VEC>(key, r, slack, sh.sel);\n    DS_MARK_FIRST(8);\n"),
        ("    u64 seed = rank ? sampled_threshold(sh, vrow, body, nvec, rank) : 0;\n",
         "    u64 seed = rank ? sampled_threshold(sh, vrow, body, nvec, rank) : 0;\n    DS_MARK(1);\n"),
        ("            const u32 kept = select_buffer(",
         f"            DS_COUNT({SELECTS});\n            const u32 kept = select_buffer("),
        ("        rank = retried ? 0 : retry_rank(rank, m, k);\n",
         f"        DS_COUNT({RETRIES});\n        rank = retried ? 0 : retry_rank(rank, m, k);\n"),
    ],
    "kernels_cu/row/finish.cuh": [
        ("#pragma once\n", "#pragma once\n" + phase_marks.NO_MARKS),
        ("        const u64 t = m > k ? kth_best(sh, m, k) : 1;  // 1: every candidate\n",
         "        const u64 t = m > k ? kth_best(sh, m, k) : 1;  // 1: every candidate\n        DS_MARK(3);\n"),
    ],
    "kernels_cu/row/column_output.cuh": [
        ("#pragma once\n", "#pragma once\n" + phase_marks.NO_MARKS),
        ("    bases[threadIdx.x] = before[0];\n", "    bases[threadIdx.x] = before[0];\n    DS_MARK(4);\n"),
    ],
}
# (step, the slot that ends it); steps whose mark some CTA did not reach (rows too short to
# sample) are left out, their time counted in the next step.
STEPS = [("setup, first loads", 6), ("sample's load", 7), ("sample's select", 8), ("sample's ties", 1),
         ("stream", 2), ("k-th best", 3), ("bitmap, ranks", 4), ("writes", 5)]

parser = gpu_tool.parser(__doc__)
parser.add_argument("--shapes", nargs="+", type=shape, metavar="dtype:rows:width:k", help="shapes instead of SHAPES")
parser.add_argument("--dist", default="normal", help="the rows' distribution (deepselect_rt.distributions)")
parser.add_argument("--tree", type=Path, default=CHECKOUT, help="source tree to time (default: this checkout)")
parser.add_argument("--warm", action="store_true",
                    help="no L2 flush before each call: the row and the kernel's code may be in L2")
parser.add_argument("--json", type=Path, help="write the results here")
ARGS = parser.parse_args()
if any(rows > phase_marks.MARK_CTAS for _, rows, _, _ in ARGS.shapes or ()):
    parser.error(f"--shapes: at most {phase_marks.MARK_CTAS} rows (the marks keep that many CTAs)")
# The marks go in before the GPU check, so that a kernel edit that removed an anchor shows anywhere.
MARKED = phase_marks.marked_copy(ARGS.tree.resolve(), EDITS, "tools/stream_phases.py")
gpu_tool.start("tools/stream_phases.py", parser)

import sys  # noqa: E402

sys.path.insert(0, str(MARKED))
for name in [m for m in sys.modules if m == "deepselect_rt" or m.startswith("deepselect_rt.")]:
    del sys.modules[name]  # gpu_tool imported this checkout's; the marked copy's serves from here

import numpy as np  # noqa: E402
import torch  # noqa: E402
from cuda.bindings import driver  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, distributions  # noqa: E402
from deepselect_rt.cuda import backend, module  # noqa: E402
from deepselect_rt.cuda.plan import choose_split, few_rows_tuning, make_plan, row_vectors  # noqa: E402
from deepselect_rt.cuda.variants import stream_bucket  # noqa: E402

# --warm keeps a 16-byte "flush", which evicts nothing.
flush = torch.empty((16 if ARGS.warm else bench.FLUSH_BYTES) // 4, dtype=torch.int32, device="cuda")
console = Console()
results = {"tree": str(ARGS.tree), "dist": ARGS.dist, "warm": ARGS.warm, "shapes": {}}
for dtype, rows, width, k in ARGS.shapes or SHAPES:
    label = f"{dtype} {rows}x{width} k={k}"
    limits = backend.device_limits(0)
    split, how = choose_split(rows, width, row_vectors(dtype, width), k, dtype, limits)
    if split != 1 or how or stream_bucket(k) is None:
        console.print(f"{label}: the plan takes {how or 'the streaming kernel'} at {split} CTAs a row; skipped")
        continue
    variant = make_plan(dtype, k, few_rows_tuning(rows, width, dtype, k, limits), limits).variant
    x = torch.from_numpy(distributions.make(ARGS.dist, rows, width, "float32", seed=1)).cuda().to(getattr(torch, dtype))
    idx = torch.empty(rows, k, dtype=torch.int32, device="cuda")

    def call():
        deepselect_rt.topk(x, k, output_idx=idx, indices_type="int32", return_value=False, nan_policy="sentinel")

    call()
    phase_marks.read_marks(module, driver, torch, variant, rows)  # zeroes the warm-up's counts
    runs = []
    for _ in range(CALLS):
        flush.zero_()
        call()
        runs.append(phase_marks.read_marks(module, driver, torch, variant, rows))
    marks = np.stack(runs)
    steps = phase_marks.step_cycles(marks, [(name, slot) for name, slot in STEPS if (marks[:, :, slot] != 0).all()],
                                    0, 5)
    start, end = marks[:, :, 64], marks[:, :, 64 + 5]  # %globaltimer, ns
    kernel_us = float(np.median(end.max(axis=1) - start.min(axis=1))) / 1e3
    span_us = float(np.median(np.median(end - start, axis=1))) / 1e3
    events = bench._time(torch, call, flush, 20)
    counts = {name: float(np.mean(marks[:, :, slot])) for name, slot in
              (("selects", SELECTS), ("again", RETRIES), ("candidates", CANDIDATES))}
    results["shapes"][label] = {"variant": variant.entry, "events_us": events, "kernel_us": kernel_us,
                                "cta_span_us": span_us, "steps": steps, **counts}

summary = Table("shape", "variant", "events us", "kernel us", "CTA span us", "cycles a CTA", "selects", "again",
                "candidates", title=f"streaming kernel, {ARGS.dist} rows, {'warm' if ARGS.warm else 'cold'} L2 (marked build)")
steps_table = Table("step", *results["shapes"], title="cycles a step: median CTA (slowest CTA)")
for label, r in results["shapes"].items():
    summary.add_row(label, r["variant"].removeprefix("ds_topk_stream_"), f"{r['events_us']:.1f}", f"{r['kernel_us']:.1f}",
                    f"{r['cta_span_us']:.2f}", f"{r['steps']['total'][0]:.0f}", f"{r['selects']:.2f}",
                    f"{r['again']:.3f}", f"{r['candidates']:.0f}")
for name in [name for name, _ in STEPS] + ["total"]:
    steps_table.add_row(name, *[f"{r['steps'][name][0]:.0f} ({r['steps'][name][1]:.0f})" if name in r["steps"] else "-"
                                for r in results["shapes"].values()])
console.print(summary)
console.print(steps_table)
if ARGS.json:
    ARGS.json.write_text(json.dumps(results, indent=1))
