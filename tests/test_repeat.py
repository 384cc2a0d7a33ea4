"""What the fast path of repeated calls (deepselect_rt/interop/repeat.py) refuses to remember, on
the CPU; tests/test_gpu_repeat.py covers remembered calls on the GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt.interop import repeat as fast_path


def _key(x, **kw):
    args = dict(k=4, sorted=False, begin=None, end=None, indices_type="int64", sorted_index=False,
                output_idx=None, output_val=None, offsets=None, idx_fill=2**31 - 1, val_fill=-math.inf,
                return_value=True, abort_when_nan_found=True, nan_policy=None, stream=None)
    args.update(kw)
    return fast_path.key(x, *args.values())


def test_numpy_and_cpu_torch_inputs_are_not_remembered():
    assert _key(np.zeros((2, 8), np.float32)) is None
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, 8)
    assert _key(x) is None
    deepselect_rt.topk(x, 4)
    deepselect_rt.topk(x, 4)
    assert not fast_path._entries


def test_a_tensors_key_changes_with_requires_grad():
    """A buffer that came to require grad since a remembered call must take the whole path, whose
    checks refuse it."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("keys are made for CUDA tensors")
    t = torch.zeros(2, 4, device="cuda")
    before = _key(t)
    assert before is not None and _key(t.requires_grad_()) != before
