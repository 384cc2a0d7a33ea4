"""Runs one top-k shape a few times, for Nsight Compute:
python tools/profile_case.py ROWS WIDTH K [dtype [split[:how] [sorted]]] (split: CTAs per row
forced, default the plan's; how: radix, cluster or workspace, default the streaming kernel's way;
sorted: 1 for value-sorted output). E.g. ``ncu --set full python tools/profile_case.py 1 1048576
2048 bfloat16 16:radix``."""

import sys
from contextlib import nullcontext

import torch

import deepselect_rt
from deepselect_rt.cuda import backend

rows, width, k = (int(a) for a in sys.argv[1:4])
dtype = getattr(torch, sys.argv[4]) if len(sys.argv) > 4 else torch.bfloat16
split, _, how = (sys.argv[5] if len(sys.argv) > 5 else "0").partition(":")
split = int(split)
by_value = len(sys.argv) > 6 and sys.argv[6] == "1"
x = torch.randn(rows, width, device="cuda").to(dtype)
with backend.forced_split(split, how) if split else nullcontext():
    for _ in range(3):
        deepselect_rt.topk(x, k, indices_type="int32", return_value=False, nan_policy="sentinel", sorted=by_value)
torch.cuda.synchronize()
