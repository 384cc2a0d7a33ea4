"""The read roof: GPU time of a plain read of each shape's input under the grid's method
(CUDA events, cold L2, median of grid.ITERS; graph replay too under grid.GRAPH_BELOW_US), a lower
bound on any top-k's time there, since a top-k reads every element:

    python tools/read_roof.py                        # bf16 at 256, 512, 4096 rows x 64K-1M
    python tools/read_roof.py --deepselect --ours    # also performance.md's DeepSelect shapes; our top-k
    python tools/read_roof.py --arch sm_90a,sm_80    # only compile the read kernel (no GPU needed)

The kernel (tools/read_roof.cu) reads every element with 16-byte loads, four in flight a thread,
and writes each CTA's maximum, checked against torch's before any timing. Two layouts, 256
threads a CTA: "free", each CTA a contiguous chunk of a row, the fastest of several chunk sizes
(16-128 KiB a CTA: thousands of CTAs, as many an SM as fit); "row", one CTA a row at the
streaming top-k kernel's four CTAs an SM (shared memory reserved to hold it there), what that
layout alone costs at few rows. Roof TB/s at k: performance.md's bytes (int32 indices, no values)
over the free read's event time, the most effective TB/s a top-k can
reach at that shape. --ours times deepselect_rt.topk the same way (int32 indices,
return_value=False, nan_policy="sentinel") at k = 512, 1024, 2048. GPU only but for --arch; prints
a table last, --json writes every figure."""

import argparse
import ctypes
import functools
import json
import sys
from pathlib import Path

import gpu_tool

from deepselect_rt.bench import grid, timing
from deepselect_rt.cuda import nvrtc, variants
from deepselect_rt.jit import env
from deepselect_rt.jit.spec import KernelSpec
from deepselect_rt.dtypes import ITEMSIZE

TOOLS = Path(__file__).resolve().parent
THREADS, UNROLL = 256, 4
# The free layout's chunk sizes, 16-byte vectors a CTA (16-128 KiB); fewer where a row is shorter.
CHUNKS = (1024, 2048, 4096, 8192)
# The streaming kernel's CTAs an SM at k <= 1024 (three at 2048), which the row layout keeps.
ROW_CTAS = variants.STREAM_TUNING[512][2]
ROWS, WIDTHS = [256, 512, 4096], [65536, 131072, 262144, 1 << 20]
DEEPSELECT = [("bfloat16", 4096, 16384), ("bfloat16", 512, 65536), ("bfloat16", 4096, 131072),
              ("bfloat16", 4096, 262144), ("bfloat16", 512, 1 << 20), ("bfloat16", 4096, 1 << 20),
              ("float32", 4096, 129280)]
ROOF_KS, OUR_KS = (512, 2048), (512, 1024, 2048)


def arch_list(text: str) -> list[str]:
    """argparse type: comma-separated GPU archs ("sm_90a,sm_80"), normalised."""
    try:
        return [nvrtc.normalise_arch(part) for part in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def read_variant(dtype: str) -> KernelSpec:
    return KernelSpec("read_roof", dtype, 0, THREADS, (("DS_UNROLL", UNROLL),))


def build(variant: KernelSpec, arch: str) -> nvrtc.CompileResult:
    """tools/read_roof.cu compiled for ``arch``; its headers are kernels_cu/'s."""
    return nvrtc.compile_cubin(variant, arch, TOOLS, (f"--include-path={env.cuda_source_dir()}",))


class Compiler:
    """The one method of a kernel cache that ``loader.get_kernel`` calls, compiling on every run:
    the cache's keys hash kernels_cu/ alone, so a cubin of this tool's source would go stale."""

    @staticmethod
    def get_or_build(variant, arch: str) -> bytes:
        return build(variant, arch).cubin


parser = gpu_tool.parser(__doc__)
parser.add_argument("--rows", type=gpu_tool.int_list, default=ROWS, help="row counts (default 256,512,4096)")
parser.add_argument("--widths", type=gpu_tool.int_list, default=WIDTHS, help="widths (default 64K,128K,256K,1M)")
parser.add_argument("--dtype", default="bfloat16", choices=variants.INPUT_DTYPES, help="dtype of --rows x --widths")
parser.add_argument("--deepselect", action="store_true", help="also the shapes of performance.md's DeepSelect table")
parser.add_argument("--ours", action="store_true", help="also time deepselect_rt.topk at k = 512, 1024, 2048")
parser.add_argument("--json", type=Path, help="write every figure here")
parser.add_argument("--arch", type=arch_list,
                    help="only compile the read kernel for these archs (e.g. sm_90a,sm_80), no GPU needed")
ARGS = parser.parse_args()
if ARGS.json and not ARGS.json.parent.is_dir():
    parser.error(f"--json {ARGS.json}: no folder {ARGS.json.parent}")
SHAPES = [(ARGS.dtype, rows, width) for rows in ARGS.rows for width in ARGS.widths]
SHAPES = list(dict.fromkeys(SHAPES + (DEEPSELECT if ARGS.deepselect else [])))
TOO_LARGE = [s for s in SHAPES if s[1] * s[2] * ITEMSIZE[s[0]] > grid.MAX_INPUT_BYTES]
SHAPES = [s for s in SHAPES if s not in TOO_LARGE]
if not SHAPES:
    parser.error(f"every shape is over performance.md's {grid.MAX_INPUT_BYTES >> 30} GiB of input")
if ARGS.arch:
    for arch in ARGS.arch:
        for dtype in dict.fromkeys(dtype for dtype, _, _ in SHAPES):
            done = build(read_variant(dtype), arch)
            print(f"{read_variant(dtype).entry} {arch}: {len(done.cubin)} bytes in {done.seconds:.2f} s")
    sys.exit(0)
gpu_tool.start("tools/read_roof.py", parser)

import torch  # noqa: E402
from cuda.bindings import driver as cuda_driver  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt.cli.console import console as make_console  # noqa: E402
from deepselect_rt.cuda import arch, driver, launch, loader  # noqa: E402


class ReadParams(ctypes.Structure):
    """Mirror of ``struct ReadParams`` (tools/read_roof.cu): six 8-byte fields."""

    _fields_ = [(name, ctypes.c_uint64) for name in ("x", "row_stride", "width", "chunk", "chunks", "out")]


def ctas_per_sm(kernel, smem: int) -> int:
    function = driver.check(cuda_driver.cuKernelGetFunction(kernel), "cuKernelGetFunction")
    return driver.check(cuda_driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, THREADS, smem),
                        "cuOccupancyMaxActiveBlocksPerMultiprocessor")


def timed(call) -> tuple[float, float | None]:
    """(event us, graph-replay us or None), as timing.run_case times a case."""
    us = timing.time_events(torch, call, flush, grid.ITERS)
    return us, timing.time_graph(torch, call, flush, grid.ITERS) if us < grid.GRAPH_BELOW_US else None


def chunk_maxima(x, elems: int):
    """torch's maximum (float32) of each run of ``elems`` columns of each row of x, the last of a
    row shorter where ``elems`` does not divide the width: (rows, chunks)."""
    full = x.shape[1] // elems
    parts = [x[:, :full * elems].unflatten(1, (full, elems)).amax(2)] if full else []
    if full * elems < x.shape[1]:
        parts.append(x[:, full * elems:].amax(1, keepdim=True))
    return torch.cat(parts, 1).float()


def checked_read(label: str, kernel, x, chunk: int, smem: int):
    """A call that reads x in CTAs of ``chunk`` vectors of a row, after one call whose CTA maxima
    matched torch's (exits naming the shape otherwise: the launch or the kernel is wrong)."""
    rows, width = x.shape
    elems = chunk * 16 // x.element_size()
    chunks = -(-width // elems)
    out = torch.full((rows * chunks,), float("nan"), device="cuda")  # NaN: a CTA that never wrote
    params = ReadParams(x.data_ptr(), x.stride(0), width, chunk, chunks, out.data_ptr())

    def call():
        launch.launch(kernel, rows * chunks, THREADS, smem, torch.cuda.current_stream().cuda_stream, params)
        return out  # which the launches write: it lives as long as the call

    wrong = int((call().view(rows, chunks) != chunk_maxima(x, elems)).sum())
    if wrong:
        sys.exit(f"tools/read_roof.py: {label}, chunks of {chunk} vectors: {wrong} of {rows * chunks} CTA maxima "
                 "differ from torch's (a wrong grid, offset or stride); nothing timed")
    return call


@functools.cache
def prepare(dtype: str) -> tuple:
    """(the read kernel for ``dtype``, {layout: CTAs an SM}), the row layout's shared memory
    allowed it; exits unless the row layout holds ROW_CTAS CTAs an SM."""
    kernel = loader.get_kernel(0, read_variant(dtype), Compiler())
    driver.set_kernel_attribute(0, kernel, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", row_smem)
    fits = {"free": ctas_per_sm(kernel, 0), "row": ctas_per_sm(kernel, row_smem)}
    if fits["row"] != ROW_CTAS:
        sys.exit(f"tools/read_roof.py: {row_smem} bytes of shared memory a CTA hold {fits['row']} CTAs an SM, "
                 f"not {ROW_CTAS}")
    return kernel, fits


def time_shape(dtype: str, rows: int, width: int) -> dict:
    """Every figure of one shape (see the JSON): both layouts' reads, the roof, ours with --ours."""
    label = f"{dtype} {rows}x{width}"
    kernel, fits = prepare(dtype)
    vec = 16 // ITEMSIZE[dtype]
    vectors = -(-width // vec)  # a row's 16-byte vectors, the last one partial
    # Rows padded to whole vectors, so that each starts 16-byte aligned; the padding is not read.
    x = torch.randn(rows, vectors * vec, device="cuda").to(timing.torch_dtype(torch, dtype))[:, :width]
    chunks = dict.fromkeys(min(c, vectors) for c in CHUNKS)
    free = {chunk: timed(checked_read(label, kernel, x, chunk, 0)) for chunk in chunks}
    best = min(free, key=lambda c: free[c][0])
    row = timed(checked_read(label, kernel, x, vectors, row_smem))
    cases = {k: grid.Case("roof", dtype, rows, width, k, "int32", False, False) for k in OUR_KS}
    roof = {k: case.bytes_moved() / free[best][0] / 1e6 for k, case in cases.items()}
    entry = dict(dtype=dtype, rows=rows, width=width, input_bytes=rows * width * ITEMSIZE[dtype], ctas_per_sm=fits,
                 free=dict(chunk_vectors=best, us=free[best][0], graph_us=free[best][1],
                           us_by_chunk={c: t[0] for c, t in free.items()}),
                 row=dict(us=row[0], graph_us=row[1]), roof_tbs=roof, ours={})
    for k in OUR_KS if ARGS.ours else ():
        idx = torch.empty(rows, k, dtype=torch.int32, device="cuda")
        us, graph = timed(lambda: deepselect_rt.topk(x, k, output_idx=idx, indices_type="int32", return_value=False,
                                                    nan_policy="sentinel"))
        tbs = cases[k].bytes_moved() / us / 1e6
        entry["ours"][k] = dict(us=us, graph_us=graph, tbs=tbs, of_roof=tbs / roof[k])
    return entry


flush = torch.empty(grid.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
console = make_console()
info = arch.device_info(0)
# Dynamic shared memory that keeps a (ROW_CTAS + 1)-th CTA off an SM: with what each CTA also
# takes (its static array, the 1 KiB the GPU reserves), that many would need more than the SM has.
row_smem = info.shared_memory_per_sm // (ROW_CTAS + 1)
results = {"meta": grid.run_meta(), "threads": THREADS, "unroll": UNROLL, "chunks": CHUNKS, "row_smem": row_smem,
           "shapes": []}
table = Table("shape", "free us", "chunk KiB", "read TB/s", "row us", "row / free",
              *[f"roof k={k}" for k in ROOF_KS], *([f"ours k={k}" for k in OUR_KS] if ARGS.ours else []),
              title=f"read roof: us, TB/s, CUDA events, cold L2 ({info.name})")
for dtype, rows, width in TOO_LARGE:
    console.print(f"{dtype} {rows}x{width}: over performance.md's {grid.MAX_INPUT_BYTES >> 30} GiB of input; skipped")
with driver.on_device(0):
    for shape in SHAPES:
        e = time_shape(*shape)
        results["shapes"].append(e)
        free_us = e["free"]["us"]
        table.add_row(f"{shape[0]} {shape[1]}x{shape[2]}", f"{free_us:.1f}", f"{e['free']['chunk_vectors'] / 64:.4g}",
                      f"{e['input_bytes'] / free_us / 1e6:.2f}", f"{e['row']['us']:.1f}",
                      f"{e['row']['us'] / free_us:.2f}",
                      *[f"{e['roof_tbs'][k]:.2f}" for k in ROOF_KS],
                      *[f"{o['tbs']:.2f} ({o['of_roof']:.0%})" for o in e["ours"].values()])
if ARGS.json:
    ARGS.json.write_text(json.dumps(results, indent=1) + "\n")
fits = results["shapes"][0]["ctas_per_sm"]
console.print(f"free: CTAs of a chunk of a row, {fits['free']} an SM; row: one CTA a row, {fits['row']} an SM "
              f"({row_smem >> 10} KiB of shared memory each); {THREADS} threads, {UNROLL} 16-byte loads in flight a "
              "thread. Roof: bytes at k over the free read's time; ours: TB/s (share of the roof at that k).")
console.print(table)
