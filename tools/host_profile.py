"""Where the host time of one top-k call goes (issue 6): per-call wall time of the whole call
and of its parts, over many calls on a tiny input, and a cProfile of the whole call. GPU only;
prints a table, writes the profile to the path given (default host_profile.txt)."""

import cProfile
import io
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, tensors  # noqa: E402
from deepselect_rt.cuda import backend, launch  # noqa: E402
from deepselect_rt.cuda.context import on_device  # noqa: E402

CALLS = 10000
x = torch.randn(1, 1024, device="cuda")
idx = torch.empty(1, 8, dtype=torch.int64, device="cuda")
val = torch.empty(1, 8, device="cuda")
captured = []
real_run = backend.run
backend.run = lambda req: (captured.append(req), real_run(req))[1]
deepselect_rt.topk(x, 8, output_idx=idx, output_val=val, nan_policy="sentinel")
backend.run = real_run
req = captured[0]
ready = next(iter(backend._ready.values()))
params = launch.pack(req)


def on_device_only():
    with on_device(0):
        pass


parts = {
    "topk, preallocated outputs": lambda: deepselect_rt.topk(x, 8, output_idx=idx, output_val=val,
                                                             nan_policy="sentinel"),
    "topk, allocated outputs": lambda: deepselect_rt.topk(x, 8, nan_policy="sentinel"),
    "torch.topk, out=": lambda: torch.topk(x, 8, dim=1, sorted=False, out=(val, idx)),
    "torch.topk": lambda: torch.topk(x, 8, dim=1, sorted=False),
    "  view_of(x)": lambda: tensors.view_of(x, name="input"),
    "  current_stream": lambda: tensors.current_stream(req.x),
    "  on_device": on_device_only,
    "  backend.run": lambda: backend.run(req),
    "  launch.pack": lambda: launch.pack(req),
    "  launch.launch": lambda: launch.launch(ready.kernel, 1, ready.plan.threads, ready.plan.smem, req.stream, params),
}
table = Table("what", "us per call", title=f"host time per call, {CALLS} calls, float32 1x1024 k=8")
for name, fn in parts.items():
    table.add_row(name, f"{bench.per_call_us(fn, CALLS):.2f}")
Console().print(table)

prof = cProfile.Profile()
prof.enable()
for _ in range(CALLS):
    deepselect_rt.topk(x, 8, output_idx=idx, output_val=val, nan_policy="sentinel")
prof.disable()
text = io.StringIO()
pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
Path(sys.argv[1] if len(sys.argv) > 1 else "host_profile.txt").write_text(text.getvalue())
