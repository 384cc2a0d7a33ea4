"""The Ascend kernel on an NPU, bit for bit against deepselect_rt.reference (marker ``npu``).

Skipped unless an Ascend device, CANN with aclrtc or bisheng, acl and torch_npu are all present
(``deepselect_rt.ascend.driver.detect``). Run with ``python -m pytest -m npu tests/test_ascend_npu.py``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt import reference
from deepselect_rt.ascend import driver as probe

pytestmark = pytest.mark.npu

_missing = probe.detect().missing_for_run()
if _missing:
    pytest.skip("no usable Ascend stack: " + "; ".join(_missing), allow_module_level=True)

import ml_dtypes  # noqa: E402
import torch  # noqa: E402
import torch_npu  # noqa: E402,F401

DTYPES = {"bfloat16": (torch.bfloat16, ml_dtypes.bfloat16), "float16": (torch.float16, np.float16),
          "float32": (torch.float32, np.float32)}
ORDERS = [dict(sorted=True), dict(sorted_index=True), dict()]


def _data(dtype: str, rows: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-20, 20, size=(rows, width)).astype(np.float32) / 4  # many ties
    x[0, : min(width, 3)] = [-0.0, 0.0, np.inf][: min(width, 3)]
    return x.astype(DTYPES[dtype][1])


def _to_npu(a: np.ndarray, dtype: str):
    bits = a.view(np.uint16) if a.dtype.itemsize == 2 else a.view(np.int32)
    t = torch.from_numpy(bits.astype(np.int16 if a.dtype.itemsize == 2 else np.int32))
    return t.view(DTYPES[dtype][0]).to("npu")


def _host(t, dtype=None):
    t = t.cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _bits(a):
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a.view(np.uint32)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("rows, width, k", [(1, 1, 1), (3, 100, 7), (5, 4096, 64), (2, 70000, 512),
                                            (4, 50, 80), (64, 2048, 2048)])
@pytest.mark.parametrize("order", range(len(ORDERS)))
@pytest.mark.parametrize("index", ["int32", "int64"])
def test_matches_reference(dtype, rows, width, k, order, index):
    x = _data(dtype, rows, width, seed=rows * width + k)
    kw = dict(ORDERS[order], indices_type=index, nan_policy="propagate")
    vals, idx = deepselect_rt.topk(_to_npu(x, dtype), k, **kw)
    ref_v, ref_i = reference.topk(x, k, index_dtype=index, nan_policy="propagate",
                                  sorted=kw.get("sorted", False), sorted_index=kw.get("sorted_index", False))
    np.testing.assert_array_equal(_host(idx), ref_i)
    np.testing.assert_array_equal(_bits(_host(vals)), _bits(ref_v))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("policy", ["propagate", "sentinel", "raise"])
def test_ranges_offsets_fills_and_nan(dtype, policy):
    rows, width, k = 6, 300, 20
    x = _data(dtype, rows, width, seed=7)
    x[2, 150] = np.nan
    begin = np.array([0, 10, 100, 290, 5, 0], np.int32)
    end = np.array([300, 25, 200, 300, 5, 300], np.int64)
    off = np.array([0, 1, 2**31 - 1, -5, 0, 3], np.int64)
    args = dict(begin=torch.from_numpy(begin).to("npu"), end=torch.from_numpy(end).to("npu"),
                output_idx_offset=torch.from_numpy(off).to("npu"), nan_policy=policy,
                idx_oob_fill_value=-1, value_oob_fill_value=0.5)
    ref = dict(begin=begin, end=end, offsets=off, nan_policy=policy, idx_fill=-1, val_fill=0.5)
    if policy == "raise":
        with pytest.raises(deepselect_rt.NaNInputError) as err:
            deepselect_rt.topk(_to_npu(x, dtype), k, **args)
        assert err.value.rows == [2]
        return
    vals, idx = deepselect_rt.topk(_to_npu(x, dtype), k, **args)
    ref_v, ref_i = reference.topk(x, k, **ref)
    np.testing.assert_array_equal(_host(idx), ref_i)
    np.testing.assert_array_equal(_bits(_host(vals)), _bits(ref_v))


def test_deterministic_across_batch_sizes():
    x = _data("bfloat16", 97, 8192, seed=3)
    whole = _host(deepselect_rt.topk(_to_npu(x, "bfloat16"), 256, return_value=False)[1])
    for lo, hi in itertools.pairwise([0, 1, 40, 97]):
        part = _host(deepselect_rt.topk(_to_npu(x[lo:hi], "bfloat16"), 256, return_value=False)[1])
        np.testing.assert_array_equal(part, whole[lo:hi])
