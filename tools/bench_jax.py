"""jax.jit(deepselect_rt.topk) on the GPU, against the torch path and jax.jit(jax.lax.top_k):

- time per call inside jit: one jitted function making 2N calls minus one making N, over N
  (wall time of blocking calls, median of alternating pairs; dispatch cancels out, but where
  each execution's launch takes longer than its kernel, the launches set the pace). Each call
  reads the same input with its own ``end`` vector, so XLA can neither merge nor hoist them.
  Against a CUDA graph of the same calls through the torch path, timed the same way with CUDA
  events (bf16 rows, int32 indices, no values, nan_policy="sentinel");
- kernel time: the mean duration of our kernels in those N calls as CUPTI records them
  (torch.profiler), under jit and through the torch path: the GPU's own time; measured after
  everything else, since CUPTI, once attached, slows every launch;
- wall time of one blocking call, cold L2, against jax.jit(jax.lax.top_k);
- host time per call of a jitted call (bursts without a sync inside), against
  jax.jit(jax.lax.top_k), on a 4 x 4096 bf16 input, k = 16 (jaxlib's kernel call), and on
  1 x 16K, k = 16 (deepselect-rt's own FFI handler on an H100); measured before anything is
  profiled.

    python tools/bench_jax.py [--n 16] [--json FILE] [--host-only]
"""

import json
import os
import statistics
import time

import gpu_tool

parser = gpu_tool.parser(__doc__)
parser.add_argument("--n", type=int, default=16, help="calls in the shorter jitted function (default 16)")
parser.add_argument("--json", metavar="FILE", help="write every figure")
parser.add_argument("--host-only", action="store_true", help="only the host times")
ARGS = gpu_tool.start("tools/bench_jax.py", parser)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import torch  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt.bench import grid, timing  # noqa: E402
from deepselect_rt.cuda import xla_call, xla_launch  # noqa: E402
from deepselect_rt.cli.console import console  # noqa: E402

if not timing.jax_available():
    raise SystemExit("tools/bench_jax.py needs JAX with a GPU backend")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

flush = torch.empty(grid.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
N, PAIRS = ARGS.n, 25
KW = dict(indices_type="int32", return_value=False, nan_policy="sentinel")


def paired_median(short, long) -> float:
    """Median over PAIRS of (long - short) in us, the two run in alternating order."""
    differences = []
    for i in range(PAIRS):
        us = {}
        for name, fn in ((("short", short), ("long", long)) if i % 2 == 0 else (("long", long), ("short", short))):
            us[name] = fn()
        differences.append(us["long"] - us["short"])
    return statistics.median(differences)


def jax_gpu_us(xj, k, width):
    """(us per call in a jitted loop, the N-call function for kernel_us)."""
    ends = [jnp.full((xj.shape[0],), width, jnp.int32) for _ in range(2 * N)]  # one buffer each

    def calls(count):
        fn = jax.jit(lambda a, *es: [deepselect_rt.topk(a, k, end=e, **KW)[1] for e in es[:count]])
        jax.block_until_ready(fn(xj, *ends))

        def wall():
            torch.cuda.synchronize()
            start = time.perf_counter()
            jax.block_until_ready(fn(xj, *ends))
            return (time.perf_counter() - start) * 1e6
        return wall

    short = calls(N)
    return paired_median(short, calls(2 * N)) / N, short


def kernel_us(fn, calls: int) -> float:
    """GPU time (us) of our kernels (entries named ds_*) per top-k, over the ``calls`` top-k
    calls that one call of ``fn`` makes, from CUPTI's kernel records (torch.profiler records
    the kernels XLA launches too)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    spans = [e.time_range.elapsed_us() for e in prof.events() if e.name.startswith("ds_")]
    if not spans:
        raise SystemExit("the profile holds none of deepselect-rt's kernels")
    return sum(spans) / calls


def torch_gpu_us(xt, k, width):
    """(us per call in a CUDA graph, the N-call replay for kernel_us)."""
    ends = [torch.full((xt.shape[0],), width, dtype=torch.int32, device="cuda") for _ in range(2 * N)]
    outs = [torch.empty(xt.shape[0], k, dtype=torch.int32, device="cuda") for _ in range(2 * N)]

    def calls(count):
        for e, o in zip(ends[:count], outs):
            deepselect_rt.topk(xt, k, end=e, output_idx=o, **KW)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for e, o in zip(ends[:count], outs):
                deepselect_rt.topk(xt, k, end=e, output_idx=o, **KW)
        graph.replay()
        return lambda: timing.event_us(torch, graph.replay)

    short = calls(N)
    return paired_median(short, calls(2 * N)) / N, short


# Host times first: once torch.profiler has run, CUPTI stays attached and slows every launch.
x_small = jax.dlpack.from_dlpack(torch.randn(4, 4096, device="cuda").to(torch.bfloat16))
ours_small = jax.jit(lambda a: deepselect_rt.topk(a, 16, indices_type="int32"))
peer_small = jax.jit(lambda a: jax.lax.top_k(a, 16))
host = {"jax.jit(deepselect_rt.topk), 4 x 4096 k=16 (defaults, int32 indices)":
            timing.per_call_us(lambda: ours_small(x_small), 5000),
        "jax.jit(jax.lax.top_k), 4 x 4096 k=16": timing.per_call_us(lambda: peer_small(x_small), 5000),
        "deepselect_rt.topk(jax_array), 4 x 4096 k=16 (defaults, int32 indices)":
            timing.per_call_us(lambda: deepselect_rt.topk(x_small, 16, indices_type="int32"), 5000)}
# The own handler's host time, at the smallest shape it takes on an H100 (GPU time a few us).
x_own = jax.dlpack.from_dlpack(torch.randn(1, 16384, device="cuda").to(torch.bfloat16))
ours_own = jax.jit(lambda a: deepselect_rt.topk(a, 16, indices_type="int32"))
peer_own = jax.jit(lambda a: jax.lax.top_k(a, 16))
host["jax.jit(deepselect_rt.topk), 1 x 16K k=16 (own handler)"] = timing.per_call_us(lambda: ours_own(x_own), 5000)
host["jax.jit(jax.lax.top_k), 1 x 16K k=16"] = timing.per_call_us(lambda: peer_own(x_own), 5000)


rows_out, records, profiles = [], [], []
SHAPES = [(1, 131072, 512), (1, 1048576, 2048), (8, 1048576, 2048), (64, 131072, 2048), (512, 131072, 2048),
          (64, 65536, 64)]
for rows, width, k in [] if ARGS.host_only else SHAPES:
    xt = torch.randn(rows, width, device="cuda").to(torch.bfloat16)
    xj = jax.dlpack.from_dlpack(xt)
    ours = jax.jit(lambda a: deepselect_rt.topk(a, k, **KW)[1])
    peer = jax.jit(lambda a: jax.lax.top_k(a, k)[1])
    got = ours(xj)
    want = deepselect_rt.topk(xt, k, **KW)[1]
    exact = bool(torch.equal(torch.from_dlpack(got), want))
    jax.block_until_ready(peer(xj))
    wall_ours = timing.time_wall(torch, lambda: jax.block_until_ready(ours(xj)), flush, grid.ITERS)
    wall_peer = timing.time_wall(torch, lambda: jax.block_until_ready(peer(xj)), flush, grid.ITERS)
    (gpu_jax, short_jax), (gpu_torch, short_torch) = jax_gpu_us(xj, k, width), torch_gpu_us(xt, k, width)
    if xla_launch.needs_own_launch(0, "bfloat16", rows, width, k, False):
        route = "own handler"  # the eager plan, launched by deepselect-rt's FFI handler
    else:  # what the GPU-time calls lowered to
        launch = xla_call.kernel_call(0, "bfloat16", rows, width, k, {"end": "int32"}, index_dtype="int32",
                                      sorted=False, return_value=False, nan_policy="sentinel", idx_fill=2**31 - 1,
                                      val_fill=float("-inf"))
        route = f"kernel call, {launch.cluster} CTAs a row"
    records.append(dict(rows=rows, width=width, k=k, gpu_us_jit=gpu_jax, gpu_us_torch_path=gpu_torch,
                        wall_us_jit=wall_ours, wall_us_lax_top_k=wall_peer, exact=exact, jit_route=route))
    profiles.append((short_jax, short_torch))

# Kernel times last, for the same reason as the host times first.
for r, (short_jax, short_torch) in zip(records, profiles):
    r.update(kernel_us_jit=kernel_us(short_jax, N), kernel_us_torch_path=kernel_us(short_torch, N))
    rows_out.append((f"bf16 {r['rows']}x{r['width']} k={r['k']}", r["kernel_us_torch_path"], r["kernel_us_jit"],
                     r["kernel_us_jit"] / r["kernel_us_torch_path"], r["gpu_us_torch_path"], r["gpu_us_jit"],
                     r["gpu_us_jit"] / r["gpu_us_torch_path"], r["wall_us_lax_top_k"], r["wall_us_jit"],
                     r["jit_route"], "yes" if r["exact"] else "NO"))

gpu = torch.cuda.get_device_name()
table = Table("case", "torch path kernel us", "jit kernel us", "jit / torch", "torch path GPU us", "jit GPU us",
              "jit / torch", "lax.top_k wall us", "jit wall us",
              "jit route", "exact", title=f"jax.jit(deepselect_rt.topk), N={N} ({gpu})")
for case, *figures, route, exact in rows_out:
    table.add_row(case, *(f"{v:.3f}" if i in (2, 5) else f"{v:.1f}" for i, v in enumerate(figures)), route, exact)
console().print(table)
host_table = Table("call, bf16", "host us per call", title=f"host time ({gpu})")
for label, us in host.items():
    host_table.add_row(label, f"{us:.1f}")
console().print(host_table)
if ARGS.json:
    with open(ARGS.json, "w") as f:
        json.dump({"meta": grid.run_meta(), "n": N, "results": records, "host_us": host}, f, indent=1)
