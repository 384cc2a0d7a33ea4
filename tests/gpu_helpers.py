"""Shared pieces of the tests (mostly the GPU tests): device tensors from NumPy, the exact
comparison with the NumPy reference (the oracle), a foreign DLPack producer."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import deepselect_rt
from deepselect_rt import reference
from deepselect_rt.cuda import backend
from deepselect_rt.cuda.plan import few_rows_tuning, make_plan
from deepselect_rt.cuda.variants import stream_bucket, stream_variant
from deepselect_rt.jit.spec import KernelSpec
from deepselect_rt.errors import NaNInputError

# The tools' positions of the streaming kernel's sampled vectors (tools/gpu_tool.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from gpu_tool import sampled_columns  # noqa: E402

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


class Producer:
    """A foreign DLPack producer that delegates to a tensor (forces the DLPack path; framework
    "dlpack", whose kernels run on stream 0)."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def cupy_cuda():
    """CuPy with a usable CUDA device, or skip (no driver raises inside CuPy, not returns 0)."""
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() > 0:
            return cp
    except Exception:  # cudaErrorInsufficientDriver / NoDevice: CuPy installed, no GPU here
        pass
    pytest.skip("no CUDA device for CuPy")


def batch_rows(width: int, dtype: str, *ks: int) -> int:
    """The fewest rows, at least 140 and 8 more than the GPU's SMs (fewer take a split or the
    cluster radix select), of a batch of ``width`` columns that the plan runs at one streaming
    CTA a row of the k bucket's tuning (``batch_variant``) at each of ``ks``: past the batches
    the few-rows tuning takes (plan.few_rows_tuning; on an H200 up to 264 rows at k <= 2048).
    Skips where none of the next 16 rows an SM does: the few-rows tuning takes every batch where
    its CTAs an SM are as many as the bucket's, none past 12 rows an SM where fewer (of at most
    4, DS_MIN_CTAS)."""
    torch_cuda()
    limits = backend.device_limits(0)

    def batch_tuned(rows: int) -> bool:
        return all(make_plan(dtype, k, few_rows_tuning(rows, width, dtype, k, limits), limits).variant
                   == batch_variant(dtype, k) for k in ks)

    first = max(140, limits.sm_count + 8)
    rows = next((r for r in range(first, first + 16 * limits.sm_count) if batch_tuned(r)), None)
    if rows is None:
        pytest.skip(f"no batch of {width} {dtype} columns runs the k bucket's tuning at k = {ks} here")
    return rows


def batch_variant(dtype: str, k: int) -> KernelSpec:
    """The streaming kernel's variant of k's bucket at one CTA a row (variants.STREAM_TUNING)."""
    return stream_variant(dtype, stream_bucket(k))


def stream_variants() -> set:
    """The streaming kernel's variants of the plans the backend has prepared (since the last
    backend.forget_plans())."""
    return {plan.variant for plan in backend.prepared_plans() if plan.variant.family == "topk_stream"}


def to_device(arr: np.ndarray):
    """A CUDA torch tensor with the same bits as ``arr`` (bfloat16 moved as int16 bits)."""
    torch = torch_cuda()
    if arr.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(arr)).cuda()


def to_host(t) -> np.ndarray:
    torch = torch_cuda()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def random_ranges(seed: int, rows: int, width: int, k: int):
    """(begin, end, offsets) per row, int32: random ranges with the edge cases first (empty,
    whole row, exactly k, k + 1 from column 1), offsets that fit int32 with the width."""
    rng = np.random.default_rng(seed)
    end = rng.integers(0, width + 1, rows).astype(np.int32)
    end[:4] = [0, width, k, k + 1]
    begin = (rng.random(rows) * end).astype(np.int32)
    begin[:4] = [0, 0, 0, 1]
    offsets = rng.integers(-(2**31) + width, 2**31 - width, rows).astype(np.int32)
    return begin, end, offsets


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def assert_same(got, want, what: str) -> None:
    got_v, got_i = got
    want_v, want_i = want
    np.testing.assert_array_equal(got_i, want_i, err_msg=f"indices differ: {what}")
    if want_v is None:
        assert got_v is None, what
    else:
        np.testing.assert_array_equal(bits(got_v), bits(want_v), err_msg=f"values differ: {what}")


def run_both(x: np.ndarray, k: int, **kw):
    """topk on the GPU (torch tensors) and on the reference; returns (gpu, ref) as NumPy. Under
    the default policy ("raise", reported later) ``check_nan`` must then raise exactly for the
    reference's NaN rows; "raise_sync" is the reference's immediate "raise"."""
    dev_kw = {key: (to_device(v) if isinstance(v, np.ndarray) else v) for key, v in kw.items()}
    vals, idx = deepselect_rt.topk(to_device(x), k, **dev_kw)
    ref_kw = {key: v for key, v in kw.items() if key not in ("abort_when_nan_found",)}
    policy = ref_kw.pop("nan_policy", None) or ("raise" if kw.get("abort_when_nan_found", True) else "sentinel")
    if policy == "raise":
        want_rows = reference.nan_rows(x, kw.get("begin"), kw.get("end")).tolist()
        try:
            deepselect_rt.check_nan()
            got_rows = []
        except NaNInputError as exc:
            got_rows = exc.rows
        assert got_rows == want_rows, f"check_nan reported rows {got_rows}, the reference's NaN rows are {want_rows}"
        policy = "sentinel"
    policy = {"raise_sync": "raise"}.get(policy, policy)
    got = (None if vals is None else to_host(vals), to_host(idx))
    rename = {"output_idx_offset": "offsets", "indices_type": "index_dtype", "idx_oob_fill_value": "idx_fill",
              "value_oob_fill_value": "val_fill"}
    ref_kw = {rename.get(key, key): v for key, v in ref_kw.items()}
    want = reference.topk(x, k, nan_policy=policy, **ref_kw)
    return got, want


def check(x: np.ndarray, k: int, **kw) -> None:
    got, want = run_both(x, k, **kw)
    assert_same(got, want, f"shape={x.shape} dtype={x.dtype} k={k} {sorted(kw)}")


__all__ = ["DTYPES", "torch_cuda", "cupy_cuda", "batch_rows", "batch_variant", "stream_variants", "sampled_columns",
           "to_device", "to_host", "check", "run_both", "assert_same", "bits", "NaNInputError"]
