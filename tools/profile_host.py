"""Where the host time of a repeated call goes: cProfile of ``--calls`` calls of
``deepselect_rt.topk`` on a 4 x 4096 bfloat16 input, k = 16, from torch, CuPy or JAX, printed
as the functions with the most own time. GPU only.

    python tools/profile_host.py --framework torch [--calls 5000] [--top 25]
"""

import cProfile
import pstats

import gpu_tool

parser = gpu_tool.parser(__doc__)
parser.add_argument("--framework", choices=("torch", "cupy", "jax"), default="torch")
parser.add_argument("--calls", type=int, default=5000)
parser.add_argument("--top", type=int, default=25)
parser.add_argument("--buffers", action="store_true", help="pass preallocated outputs (torch, CuPy)")
ARGS = gpu_tool.start("tools/profile_host.py", parser)

import torch  # noqa: E402

import deepselect_rt  # noqa: E402

x = torch.randn(4, 4096, device="cuda").to(torch.bfloat16)
kw = {}
if ARGS.framework == "cupy":
    import cupy

    x = cupy.from_dlpack(x)
elif ARGS.framework == "jax":
    import jax

    x = jax.dlpack.from_dlpack(x)
    kw["indices_type"] = "int32"
if ARGS.buffers and ARGS.framework != "jax":
    idx = deepselect_rt.topk(x, 16, **kw)[1]
    val = deepselect_rt.topk(x, 16, **kw)[0]
    kw.update(output_idx=idx, output_val=val)
for _ in range(200):
    deepselect_rt.topk(x, 16, **kw)
profile = cProfile.Profile()
profile.enable()
for _ in range(ARGS.calls):
    deepselect_rt.topk(x, 16, **kw)
profile.disable()
torch.cuda.synchronize()
pstats.Stats(profile).sort_stats("tottime").print_stats(ARGS.top)
