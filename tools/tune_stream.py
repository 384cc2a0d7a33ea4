"""Times the streaming kernel under several (threads, vectors a thread per block, CTAs per SM,
ring stages) choices, to pick the variants' tuning (deepselect_rt/cuda/variants.py): every k
bucket and the few-rows tuning take each choice in turn. CUDA events, cold L2, int32 indices, no
values. GPU only; prints a table. ``--shapes`` times other shapes than SHAPES."""

import argparse

import gpu_tool
from shape_arg import shape

import deepselect_rt  # noqa: E402
from deepselect_rt import bench  # noqa: E402
from deepselect_rt.cuda import backend, variants  # noqa: E402

DEFAULT = [(256, 2, 3, 3), (256, 2, 3, 2), (256, 1, 3, 8), (512, 1, 2, 4)]
SHAPES = [("bfloat16", 4096, 1 << 20, 512), ("bfloat16", 4096, 131072, 512), ("bfloat16", 4096, 131072, 2048),
          ("bfloat16", 512, 131072, 2048), ("float32", 4096, 129280, 512), ("bfloat16", 1024, 1 << 20, 2048),
          ("bfloat16", 256, 65536, 512)]


def config(text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected threads,loads,ctas,stages (four positive integers)")
    return tuple(int(p) for p in parts)


parser = gpu_tool.parser(__doc__)
parser.add_argument("--shapes", nargs="+", type=shape, metavar="dtype:rows:width:k",
                    help="shapes to time instead of SHAPES")
parser.add_argument("configs", nargs="*", type=config, metavar="threads,loads,ctas,stages",
                    help=f"choices to time (default: {' '.join(','.join(map(str, c)) for c in DEFAULT)})")
ARGS = gpu_tool.start("tools/tune_stream.py", parser)
CONFIGS = ARGS.configs or DEFAULT
SHAPES = ARGS.shapes or SHAPES
import torch  # noqa: E402

flush = torch.empty(bench.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
rows_out = []
for config in CONFIGS:
    variants.STREAM_TUNING = {kmax: config for kmax in variants.STREAM_KMAX}
    variants.FEW_ROWS_TUNING = config
    backend.forget_plans()
    line = ["t{} l{} m{} s{}".format(*config)]
    for dtype, rows, width, k in SHAPES:
        x = torch.randn(rows, width, device="cuda").to(getattr(torch, dtype))
        fn = lambda: deepselect_rt.topk(x, k, indices_type="int32", return_value=False, nan_policy="sentinel")  # noqa: E731
        us = bench._time(torch, fn, flush, 20)
        tbs = rows * width * x.element_size() / (us * 1e-6) / 1e12
        line.append(f"{us:8.1f}us {tbs:4.2f}TB/s")
    rows_out.append(line)
    print(" | ".join(line), flush=True)
print("shapes:", SHAPES)
