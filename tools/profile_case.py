"""Runs one top-k shape a few times, for Nsight Compute: python tools/profile_case.py ROWS WIDTH K [dtype]."""

import sys

import torch

import deepselect_rt

rows, width, k = (int(a) for a in sys.argv[1:4])
dtype = getattr(torch, sys.argv[4]) if len(sys.argv) > 4 else torch.bfloat16
x = torch.randn(rows, width, device="cuda").to(dtype)
for _ in range(3):
    deepselect_rt.topk(x, k, indices_type="int32", return_value=False, nan_policy="sentinel")
torch.cuda.synchronize()
