"""The serving options timed against what they replace, by the method of
docs/performance.md (CUDA events, cold L2, median; graph replay under 50 us), on one GPU:

- page table: top-k with the fused page-table transform, against plain top-k, and against plain
  top-k followed by the transform in torch (bf16 indexer rows, int32 indices, no values);
- per-row k: k_per_row against a fixed k (fp32 sampler rows, values, sorted).

With ``--flashinfer DIR`` (the FlashInfer peer kit's folder, ../shared/peers/flashinfer, whose
run_fi.py sets FlashInfer up offline), FlashInfer's fused ``top_k_page_table_transform``
(deterministic, ties to the lower index) is timed beside ours, and its slots checked against
ours. tools/bench_jax.py times the JAX route.

    python tools/bench_serving.py [--json FILE] [--flashinfer DIR]
"""

import json
import sys

import gpu_tool

parser = gpu_tool.parser(__doc__)
parser.add_argument("--json", metavar="FILE", help="write every figure")
parser.add_argument("--flashinfer", metavar="DIR", help="the FlashInfer peer kit's folder: time its fused transform too")
ARGS = gpu_tool.start("tools/bench_serving.py", parser)

import torch  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt.bench import grid, timing  # noqa: E402
from deepselect_rt.cli.console import console  # noqa: E402

flush = torch.empty(grid.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
flashinfer = None
if ARGS.flashinfer:
    sys.path.insert(0, ARGS.flashinfer)
    import run_fi  # noqa: E402  (the peer kit's own set-up: unpacks it, sets FlashInfer's environment)

    run_fi.setup_env(torch.cuda.get_device_capability())
    import flashinfer  # noqa: E402


def timed(fn):
    us = timing.time_events(torch, fn, flush, grid.ITERS)
    graph = timing.time_graph(torch, fn, flush, grid.ITERS) if us < grid.GRAPH_BELOW_US else None
    return graph if graph is not None else us


rows_out, records = [], []
PAGE = 64
for rows, width, k in [(1, 131072, 2048), (8, 131072, 2048), (64, 131072, 2048), (1, 1048576, 2048),
                       (64, 1048576, 2048), (512, 131072, 2048)]:
    x = torch.randn(rows, width, device="cuda").to(torch.bfloat16)
    pages = width // PAGE
    table = torch.randperm(rows * pages, device="cuda", dtype=torch.int32).view(rows, pages)
    idx = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    kw = dict(indices_type="int32", return_value=False, nan_policy="sentinel", output_idx=idx)

    def plain():
        deepselect_rt.topk(x, k, **kw)

    def fused():
        deepselect_rt.topk(x, k, page_table=table, page_size=PAGE, **kw)

    def unfused():
        deepselect_rt.topk(x, k, **kw)
        torch.gather(table, 1, (idx // PAGE).long()) * PAGE + idx % PAGE

    cases = [("plain", plain), ("fused", fused), ("unfused", unfused)]
    note = ""
    if flashinfer is not None:
        lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")

        def peer():
            return flashinfer.top_k_page_table_transform(x, table, lengths, k, page_size=PAGE, deterministic=True,
                                                         tie_break=1)

        fused()
        try:
            same = torch.equal(peer().sort(1).values, idx.sort(1).values)
            cases.append(("flashinfer", peer))
        except Exception as exc:  # a peer that cannot run costs its column only
            note = f"; FlashInfer failed: {type(exc).__name__}: {exc}"[:200]
    t = {name: timed(fn) for name, fn in cases}
    if "flashinfer" in t:
        note = f"; FlashInfer's fused {t['flashinfer']:.1f} us ({'same slots' if same else 'OTHER SLOTS'})"
    records.append(dict(kind="page_table", rows=rows, width=width, k=k, **t))
    rows_out.append((f"page table bf16 {rows}x{width} k={k}", t["plain"], t["fused"], t["fused"] / t["plain"],
                     f"{t['unfused'] / t['fused']:.2f}x faster than top-k + torch transform{note}"))

for rows in (1, 64, 1024):
    width, k = 129280, 512
    x = torch.randn(rows, width, device="cuda")
    per_row = torch.randint(1, k + 1, (rows,), device="cuda", dtype=torch.int32)
    idx = torch.empty(rows, k, dtype=torch.int64, device="cuda")
    val = torch.empty(rows, k, device="cuda")
    kw = dict(sorted=True, nan_policy="sentinel", output_idx=idx, output_val=val)
    fixed = timed(lambda: deepselect_rt.topk(x, k, **kw))
    own = timed(lambda: deepselect_rt.topk(x, k, k_per_row=per_row, **kw))
    records.append(dict(kind="k_per_row", rows=rows, width=width, k=k, fixed=fixed, per_row=own))
    rows_out.append((f"k_per_row fp32 {rows}x{width} k<={k}", fixed, own, own / fixed, ""))

table = Table("case", "baseline us", "ours us", "ours / baseline", "note",
              title=f"serving options ({torch.cuda.get_device_name()})")
for case, base, ours, ratio, note in rows_out:
    table.add_row(case, f"{base:.1f}", f"{ours:.1f}", f"{ratio:.3f}", note)
console().print(table)
if ARGS.json:
    with open(ARGS.json, "w") as f:
        json.dump({"meta": grid.run_meta(), "results": records}, f, indent=1)
