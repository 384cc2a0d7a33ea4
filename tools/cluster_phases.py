"""Where the time of the cluster radix select goes (issue 5), for the few-row shapes that take it:

    python tools/cluster_phases.py                 # GPU us under graph replay, cold L2
    python tools/cluster_phases.py --phases        # and cycles per step, from clock64 marks
    python tools/cluster_phases.py --dists         # skewed rows against normal ones
    python tools/cluster_phases.py --phases --dist all_equal   # the steps on one skewed distribution
    python tools/cluster_phases.py --tree /tmp/base --json base.json   # another tree, to compare
    python tools/cluster_phases.py --phases --warm  # cycles with L2 not flushed: what the cold code and row cost
    python tools/cluster_phases.py --phases --shapes bfloat16:64:131072:2048   # other shapes (clusters of two)

--phases times a copy of the kernels (in a temporary folder) that carries marks: at each one
every thread meets a __syncthreads, then thread 0 of each CTA stores clock64 and %globaltimer to
a __device__ array, read back after the call. A step's cycles are the median over calls of the
median over CTAs (and the median of the slowest CTA); the marks' barriers add ~100 cycles a step
and make the graph times of that run a little longer, and warp 0's fence.proxy.async before its
bulk copies waits for the previous mark's global stores (~1,000 cycles more in "push"). The marks go in by text replacement at
anchors in kernels_cu/topk_cluster.cu, kernels_cu/cluster/prefilter.cuh and kernels_cu/cluster/histogram.cuh:
an edit that removes an anchor stops the tool with the anchor's text.

bf16 unless said, int32 indices, no values, nan_policy="sentinel", sorted=False. GPU only;
prints tables."""

import argparse
import json
import sys
from pathlib import Path

import phase_marks
from shape_arg import shape

CHECKOUT = Path(__file__).resolve().parents[1]
parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--tree", type=Path, default=CHECKOUT,
                    help="source tree whose deepselect_rt to time (default: this checkout)")
parser.add_argument("--phases", action="store_true", help="also report the cycles of each step")
parser.add_argument("--dists", action="store_true", help="time skewed distributions against normal rows")
parser.add_argument("--dist", default="normal",
                    help="distribution of the rows of the first table and --phases (deepselect_rt.distributions)")
parser.add_argument("--warm", action="store_true",
                    help="no L2 flush before each call: the row and the kernel's code may be in L2")
parser.add_argument("--json", type=Path, help="write the results here")
parser.add_argument("--replays", type=int, default=50,
                    help="graph replays a median of the first table (default 50: pairs of [flush; top-k] and [flush])")
parser.add_argument("--shapes", nargs="+", type=shape, metavar="dtype:rows:width:k",
                    help="these shapes instead of issue 5's few-row ones")
args = parser.parse_args()
if args.warm and (args.dists or not args.phases):
    parser.error("--warm reports clock64 cycles only (its graph times undercount): use it with --phases, without --dists")

# Marks: (file, anchor, text that replaces it). Mark i is written at slot i; pass p of a select
# writes 16 + 4p (fill done), 17 + 4p (pushed), 18 + 4p (all arrived), 19 + 4p (picked).
EDITS = {
    "kernels_cu/topk_cluster.cu": [
        ('#include "common/params.cuh"\n', phase_marks.MARK_HOOK + '#include "common/params.cuh"\n'),
        ("    u64* gathered = reinterpret_cast<u64*>(smem_raw + GATHER_OFFSET);\n",
         "    u64* gathered = reinterpret_cast<u64*>(smem_raw + GATHER_OFFSET);\n    DS_MARK(0);\n"),
        ("    cluster_arrive_relaxed();\n    if (KEYS_AT_LOAD)\n",
         "    cluster_arrive_relaxed();\n    DS_MARK(1);\n    if (KEYS_AT_LOAD)\n"),
        ("    __syncthreads();\n    cluster_wait();", "    __syncthreads();\n    DS_MARK(2);\n    cluster_wait();"),
        ("        rounds = compact(x, valid, t0, k, candidate_keys, cols, sh, cta_v, first, last);\n",
         "        rounds = compact(x, valid, t0, k, candidate_keys, cols, sh, cta_v, first, last);\n"
         "        DS_MARK(12);\n"),
        ("        u32* h = hist.begin(sh.sel);\n        u32 below = 0, neg_inf = 0;\n",
         "        DS_MARK(14);\n        u32* h = hist.begin(sh.sel);\n        u32 below = 0, neg_inf = 0;\n"),
        ("    const u32 prefix = (u32)d.prefix, mask = (u32)d.mask;\n",
         "    const u32 prefix = (u32)d.prefix, mask = (u32)d.mask;\n    DS_MARK(3);\n"),
        ("        const u32 cta = slot_ranks<NT, S>(counts, ranks, sh.warp_totals);",
         "        const u32 cta = slot_ranks<NT, S>(counts, ranks, sh.warp_totals);\n        DS_MARK(10);\n"),
        ("    if (by_value) {\n", "    DS_MARK(6);\n    if (by_value) {\n"),
        ("p.nan_flags[row] = 1;\n    cluster_wait();\n}", "p.nan_flags[row] = 1;\n    cluster_wait();\n    DS_MARK(8);\n}"),
    ],
    "kernels_cu/cluster/prefilter.cuh": [
        ("#pragma once\n", "#pragma once\n" + phase_marks.NO_MARKS),
        ("    const u32 kc = (k + split - 1) / split;\n",
         "    DS_MARK(13);\n    const u32 kc = (k + split - 1) / split;\n"),
        ("    const u32 t0 = sh.t0;\n", "    const u32 t0 = sh.t0;\n    DS_MARK(11);\n"),
        # The prefilter's steps: the groups' maxima, the least of them, the selects of t_c (and
        # t_k), the push of the bounds, the bound T0 (mark 11).
        ("    const auto each_group = [=](auto f) {\n", "    DS_MARK(4);\n    const auto each_group = [=](auto f) {\n"),
        ("    OneBarrierHistogram<NT> local{sh.prefilter_hist};\n    const u32 tc",
         "    DS_MARK(5);\n    OneBarrierHistogram<NT> local{sh.prefilter_hist};\n    const u32 tc"),
        ("    push_to_cluster(sh.bounds, &sh.bounds_arrived,\n", "    DS_MARK(7);\n    push_to_cluster(sh.bounds, &sh.bounds_arrived,\n"),
        ("                    split, rank);\n    if (threadIdx.x < 32) {\n        mbar_wait(&sh.bounds_arrived, 0);\n",
         "                    split, rank);\n    DS_MARK(9);\n    if (threadIdx.x < 32) {\n        mbar_wait(&sh.bounds_arrived, 0);\n"),
    ],
    "kernels_cu/cluster/histogram.cuh": [
        ("#pragma once\n", "#pragma once\n" + phase_marks.NO_MARKS),
        ("        __syncthreads();  // this CTA's histogram is complete\n",
         "        __syncthreads();  // this CTA's histogram is complete\n        DS_MARK(16 + 4 * passes);\n"),
        ("        if (threadIdx.x < 32) {\n            mbar_wait(&sh.arrived[q], (passes >> 1) & 1);\n",
         "        DS_MARK(17 + 4 * passes);\n        if (threadIdx.x < 32) mbar_wait(&sh.arrived[q], (passes >> 1) & 1);\n"
         "        DS_MARK(18 + 4 * passes);\n        if (threadIdx.x < 32) {\n"
         "            mbar_wait(&sh.arrived[q], (passes >> 1) & 1);\n"),
        ("        ++passes;\n        __syncthreads();\n",
         "        ++passes;\n        __syncthreads();\n        DS_MARK(19 + 4 * (passes - 1));\n"),
    ],
}


tree = (phase_marks.marked_copy(args.tree.resolve(), EDITS, "tools/cluster_phases.py") if args.phases
        else args.tree.resolve())
sys.path.insert(0, str(tree))

try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    sys.exit("tools/cluster_phases.py needs an NVIDIA GPU and torch with CUDA (it times with CUDA events)")

import numpy as np  # noqa: E402
from cuda.bindings import driver  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, distributions  # noqa: E402
from deepselect_rt.cuda import backend, module  # noqa: E402
from deepselect_rt.cuda.plan import choose_split, make_plan, radix_tier, row_vectors  # noqa: E402
from deepselect_rt.cuda.variants import SPLIT_RADIX  # noqa: E402

SHAPES = args.shapes or [("bfloat16", 1, 131072, 512), ("bfloat16", 1, 131072, 2048), ("bfloat16", 8, 131072, 2048),
                        ("bfloat16", 1, 1 << 20, 2048), ("float32", 1, 129280, 512)]
DISTS = ("normal", "all_equal", "few_distinct", "ascending", "few_finite")
CALLS = 15
# --warm keeps a 16-byte "flush", which evicts nothing.
flush = torch.empty((16 if args.warm else bench.FLUSH_BYTES) // 4, dtype=torch.int32, device="cuda")
console = Console()
results = {"tree": str(args.tree), "dist": args.dist, "warm": args.warm, "graph_us": {}, "phases": {}, "dists": {}}


def label(dtype, rows, width, k):
    return f"{dtype} {rows}x{width} k={k}"


def topk_call(x, k):
    idx = torch.empty(x.shape[0], k, dtype=torch.int32, device="cuda")
    return lambda: deepselect_rt.topk(x, k, output_idx=idx, indices_type="int32", return_value=False,
                                      nan_policy="sentinel")


def step_cycles(dtype, rows, width, k, fn):
    """{step: (median cycles, slowest CTA's)} from the marks of CALLS cold calls."""
    limits = backend.device_limits(0)
    split, how = choose_split(rows, width, row_vectors(dtype, width), k, dtype, limits)
    if how != SPLIT_RADIX:
        return {}
    tier = radix_tier(dtype, row_vectors(dtype, width), split)
    variant = make_plan(dtype, k, True, limits, split, how, tier).variant  # the variant the call launches
    runs = []
    for _ in range(CALLS):
        flush.zero_()
        fn()
        runs.append(phase_marks.read_marks(module, driver, torch, variant, rows * split))
    marks = np.stack(runs)  # calls x CTAs x slots: clock64 at each mark
    passes = [p for p in range(12) if (marks[:, :, 19 + 4 * p] != 0).all()]
    # (A tree whose kernel has no mark 1, the loads' issue and the prologue, counts them in "load".)
    order = ([("issue, prologue", 1)] if (marks[:, :, 1] != 0).all() else []) + [("load", 2)]
    # The prefiltered tiers' steps before their first pass: the data in (the threads' maxima),
    # the prefilter's (groups, least, selects, push, bound), the compaction; the other tiers'
    # exchange of their largest keys.
    prefiltered = (("data in", 13), ("groups", 4), ("least", 5), ("selects", 7), ("push", 9), ("bound", 11),
                   ("compact", 12))
    order += [(name, slot) for name, slot in prefiltered if (marks[:, :, slot] != 0).all()]
    if (marks[:, :, 14] != 0).all():  # the window pass's start: the row's largest key (or T0)
        order.append(("top" if (marks[:, :, 12] == 0).all() else "window start", 14))
    for p in passes:
        order += [(f"pass {p + 1} fill", 16 + 4 * p), (f"pass {p + 1} push", 17 + 4 * p),
                  (f"pass {p + 1} wait", 18 + 4 * p), (f"pass {p + 1} pick", 19 + 4 * p)]
    order += [("counts, ranks", 10), ("winners to shared", 6), ("output", 8)]
    return phase_marks.step_cycles(marks, order, 0, 8)


graph_table = Table("shape", "rule", "graph us", title=f"cluster radix select, {args.dist} rows, {'warm' if args.warm else 'cold'} L2, deepselect_rt of {args.tree}"
                    + (" (with marks)" if args.phases else ""))
def rows_of(dist, dtype, rows, width):
    """A CUDA tensor of ``rows`` rows of distribution ``dist``."""
    x = distributions.make(dist, rows, width, "float32", seed=1)
    return torch.from_numpy(x).cuda().to(getattr(torch, dtype))


for dtype, rows, width, k in SHAPES:
    fn = topk_call(rows_of(args.dist, dtype, rows, width), k)
    # With --warm the graph of the 16-byte flush alone is bound by the graph launch, which the
    # call's graph overlaps: their difference undercounts the call (1 x 128K: 4.5 us against
    # ~9 us of clock64 marks, H200), so only the marks are reported.
    us = None if args.warm else bench._time_graph(torch, fn, flush, args.replays)
    split, how = choose_split(rows, width, row_vectors(dtype, width), k, dtype, backend.device_limits(0))
    results["graph_us"][label(dtype, rows, width, k)] = us
    graph_table.add_row(label(dtype, rows, width, k), f"{how or 'stream'} {split}", "-" if us is None else f"{us:.1f}")
    if args.phases:
        results["phases"][label(dtype, rows, width, k)] = step_cycles(dtype, rows, width, k, fn)
console.print(graph_table)

for shape, steps in results["phases"].items():
    table = Table("step", "cycles (median CTA)", "cycles (slowest CTA)", title=f"{shape}: clock64 per step")
    for step, (med, slowest) in steps.items():
        table.add_row(step, f"{med:.0f}", f"{slowest:.0f}")
    console.print(table)

if args.dists:
    table = Table("shape", *DISTS, title="graph us by distribution (cold L2)")
    for dtype, rows, width, k in SHAPES:
        row = {}
        for dist in DISTS:
            row[dist] = bench._time_graph(torch, topk_call(rows_of(dist, dtype, rows, width), k), flush, 30)
        results["dists"][label(dtype, rows, width, k)] = row
        table.add_row(label(dtype, rows, width, k), *[f"{row[d]:.1f}" for d in DISTS])
    console.print(table)

if args.json:
    args.json.write_text(json.dumps(results, indent=1))
