"""Times the streaming kernel under several (threads, loads in flight, CTAs per SM) choices, to
pick the variants' tuning (deepselect_rt/cuda/variants.py). GPU only; prints a table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench  # noqa: E402
from deepselect_rt.cuda import backend, variants  # noqa: E402

CONFIGS = [(256, 2, 3), (512, 1, 2), (256, 1, 2), (256, 2, 2), (512, 2, 2)]
SHAPES = [("bfloat16", 4096, 1 << 20, 512), ("bfloat16", 512, 131072, 2048), ("float32", 4096, 129280, 512),
          ("bfloat16", 1, 131072, 512)]

flush = torch.empty(bench.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
rows_out = []
for threads, loads, min_ctas in CONFIGS:
    variants.STREAM_TUNING = {kmax: (threads, loads, min_ctas) for kmax in variants.STREAM_KMAX}
    variants.FEW_ROWS_TUNING = (threads, loads, min_ctas)
    backend.forget_plans()
    line = [f"t{threads} l{loads} m{min_ctas}"]
    for dtype, rows, width, k in SHAPES:
        x = torch.randn(rows, width, device="cuda").to(getattr(torch, dtype))
        fn = lambda: deepselect_rt.topk(x, k, indices_type="int32", return_value=False, nan_policy="sentinel")  # noqa: E731
        us = bench._time(torch, fn, flush, 20)
        tbs = rows * width * x.element_size() / (us * 1e-6) / 1e12
        line.append(f"{us:8.1f}us {tbs:4.2f}TB/s")
    rows_out.append(line)
    print(" | ".join(line), flush=True)
print("shapes:", SHAPES)
