"""Where the host time of one top-k call goes (issue 6): host time per call (bench.per_call_us)
of the whole call, of torch.topk, and of the parts of the full path and of the fast path, over
many calls on a tiny input; and a cProfile of the whole call. GPU only; prints a table, writes the
profile to the path given (default host_profile.txt)."""

import cProfile
import io
import pstats
from pathlib import Path

import gpu_tool

parser = gpu_tool.parser(__doc__)
parser.add_argument("profile", nargs="?", type=Path, default=Path("host_profile.txt"),
                    help="where to write the cProfile text")
ARGS = gpu_tool.start("tools/host_profile.py", parser)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, cli, fast_path, tensors  # noqa: E402
from deepselect_rt.cuda import backend, launch  # noqa: E402
from deepselect_rt.cuda.context import on_device  # noqa: E402

CALLS = 10000
x = torch.randn(1, 1024, device="cuda")
idx = torch.empty(1, 8, dtype=torch.int64, device="cuda")
val = torch.empty(1, 8, device="cuda")
captured = []  # (request, the repeat launch run returned) of the first, whole-path call
real_run = backend.run
backend.run = lambda req: captured.append((req, real_run(req))) or captured[-1][1]
deepselect_rt.topk(x, 8, output_idx=idx, output_val=val, nan_policy="sentinel")
backend.run = real_run
req, again = captured[0]
ready = next(iter(backend._ready.values()))
params = launch.pack(req)

key_args = (x, 8, False, None, None, "int64", False, idx, val, None, 2**31 - 1, float("-inf"), True, True,
            "sentinel", None)


def on_device_only():
    with on_device(0):
        pass


parts = {
    "topk, preallocated outputs": lambda: deepselect_rt.topk(x, 8, output_idx=idx, output_val=val,
                                                             nan_policy="sentinel"),
    "topk, allocated outputs": lambda: deepselect_rt.topk(x, 8, nan_policy="sentinel"),
    "torch.topk, out=": lambda: torch.topk(x, 8, dim=1, sorted=False, out=(val, idx)),
    "torch.topk": lambda: torch.topk(x, 8, dim=1, sorted=False),
    "  fast path: key": lambda: fast_path.key(*key_args),
    "  fast path: current stream + context check + launch": lambda: again(tensors.torch_current_stream(0)),
    "  view_of(x)": lambda: tensors.view_of(x, name="input"),
    "  current_stream": lambda: tensors.current_stream(req.x),
    "  on_device": on_device_only,
    "  backend.run": lambda: backend.run(req),
    "  launch.pack": lambda: launch.pack(req),
    "  launch.launch": lambda: launch.launch(ready.kernel, 1, ready.plan.threads, ready.plan.smem, req.stream, params),
}
try:  # CuPy and JAX inputs take the whole path (the fast path serves torch tensors)
    import cupy

    cx = cupy.random.standard_normal((1, 1024), dtype=cupy.float32)
    parts["CuPy input, allocated outputs"] = lambda: deepselect_rt.topk(cx, 8, nan_policy="sentinel")
except Exception as exc:  # not installed or no device: that row is left out
    print("CuPy row left out:", exc)
if bench.jax_available():
    import jax

    jx = jax.device_put(np.random.default_rng(0).standard_normal((1, 1024), np.float32), jax.devices("gpu")[0])
    parts["JAX input, allocated outputs"] = lambda: deepselect_rt.topk(jx, 8, indices_type="int32",
                                                                       nan_policy="sentinel")
table = Table("what", "host us per call", title=f"{CALLS} calls, float32 1x1024 k=8")
for name, fn in parts.items():
    table.add_row(name, f"{bench.per_call_us(fn, CALLS):.2f}")
# Bursts long enough to fill the launch queue: a kernel slower than the host shows here.
table.add_row("  launch.launch, bursts of 200", f"{bench.per_call_us(parts['  launch.launch'], CALLS, 200):.2f}")
cli.console().print(table)

prof = cProfile.Profile()
prof.enable()
for _ in range(CALLS):
    deepselect_rt.topk(x, 8, output_idx=idx, output_val=val, nan_policy="sentinel")
prof.disable()
text = io.StringIO()
pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
ARGS.profile.write_text(text.getvalue())
