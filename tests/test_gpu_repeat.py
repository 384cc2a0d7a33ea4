"""The fast path of repeated torch calls (deepselect_rt/interop/repeat.py) on the GPU:
remembered calls stay exact, allocate fresh outputs, keep every argument check, follow torch's
current stream and the plan changes of forced_split. Run with ``pytest -m gpu``."""

from __future__ import annotations

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt.interop import repeat as fast_path
from deepselect_rt.cuda import arch as module
from deepselect_rt.cuda import backend, launch
from deepselect_rt.cuda.variants import SPLIT_CLUSTER
from gpu_helpers import cupy_cuda, to_host, torch_cuda

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def empty_memo():
    fast_path.clear()
    yield
    fast_path.clear()


def _want(t, k, **kw):
    return deepselect_rt.topk(to_host(t), k, **kw)


def test_repeated_calls_are_remembered_and_exact():
    torch = torch_cuda()
    x = torch.randn(5, 30000, device="cuda", dtype=torch.float16)
    kw = dict(sorted=True, nan_policy="sentinel")
    first = deepselect_rt.topk(x, 300, **kw)
    assert len(fast_path._entries) == 1
    for _ in range(3):
        x.copy_(torch.randn_like(x))  # same pointer, new data: the remembered launch reads it
        vals, idx = deepselect_rt.topk(x, 300, **kw)
        want = _want(x, 300, **kw)
        np.testing.assert_array_equal(to_host(idx), want[1])
        np.testing.assert_array_equal(to_host(vals), want[0])
        assert idx.data_ptr() != first[1].data_ptr() and vals.data_ptr() != first[0].data_ptr()
    assert len(fast_path._entries) == 1


def test_caller_buffers_and_no_values():
    torch = torch_cuda()
    x = torch.randn(3, 9000, device="cuda")
    idx = torch.full((3, 64), -1, dtype=torch.int32, device="cuda")
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        vals, out = deepselect_rt.topk(x, 64, indices_type="int32", output_idx=idx, return_value=False,
                                       nan_policy="sentinel")
        assert vals is None and out is idx
        np.testing.assert_array_equal(to_host(idx), _want(x, 64, indices_type="int32", return_value=False)[1])


def test_checks_still_apply_to_a_remembered_call():
    torch = torch_cuda()
    x = torch.randn(2, 5000, device="cuda")
    deepselect_rt.topk(x, 10, sorted=True, nan_policy="sentinel")
    with pytest.raises(TypeError, match="sorted"):
        deepselect_rt.topk(x, 10, sorted=1, nan_policy="sentinel")
    with pytest.raises(TypeError):
        deepselect_rt.topk(x, 10.0, sorted=True, nan_policy="sentinel")
    x[1, 7] = float("nan")
    deepselect_rt.topk(x, 10, sorted=True)  # the default "raise", remembered: reported later
    with pytest.raises(deepselect_rt.NaNInputError) as info:
        deepselect_rt.check_nan()
    assert info.value.rows == [1]


def test_follows_the_current_stream():
    torch = torch_cuda()
    x = torch.randn(4, 20000, device="cuda", dtype=torch.bfloat16)
    deepselect_rt.topk(x, 128, nan_policy="sentinel")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.randn(4, 20000, device="cuda", dtype=torch.bfloat16)
        x.copy_(y)  # queued on the side stream: the top-k must run after it, on it
        _, idx = deepselect_rt.topk(x, 128, nan_policy="sentinel")
    side.synchronize()
    np.testing.assert_array_equal(to_host(idx), _want(x, 128)[1])


def test_forced_split_changes_a_remembered_plan(monkeypatch):
    torch = torch_cuda()
    if not module.device_info(0).cluster_launch:
        pytest.skip("this GPU has no thread-block clusters")
    x = torch.randn(2, 200000, device="cuda", dtype=torch.bfloat16)
    with backend.forced_split(1):
        deepselect_rt.topk(x, 512, nan_policy="sentinel")
        deepselect_rt.topk(x, 512, nan_policy="sentinel")
    clusters = []
    real = launch.launch
    monkeypatch.setattr(launch, "launch", lambda *a, **kw: (clusters.append(a[6] if len(a) > 6 else 1),
                                                            real(*a, **kw))[1])
    with backend.forced_split(4, SPLIT_CLUSTER):
        _, idx = deepselect_rt.topk(x, 512, nan_policy="sentinel")
        _, idx = deepselect_rt.topk(x, 512, nan_policy="sentinel")
    assert clusters == [4, 4]
    np.testing.assert_array_equal(to_host(idx), _want(x, 512)[1])


def test_cupy_calls_are_remembered_and_exact():
    """CuPy arrays take the same fast path: fresh CuPy outputs, CuPy's current stream, exact
    results, and a new array at the same address with another shape takes the whole path."""
    cupy = cupy_cuda()
    x = cupy.random.standard_normal((64, 5000), dtype=cupy.float32)
    want = deepselect_rt.topk(cupy.asnumpy(x), 32, nan_policy="sentinel")[1]
    first = deepselect_rt.topk(x, 32, nan_policy="sentinel")[1]
    assert len(fast_path._entries) == 1
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        again = deepselect_rt.topk(x, 32, nan_policy="sentinel")[1]
    stream.synchronize()
    assert type(again) is cupy.ndarray and again.data.ptr != first.data.ptr
    np.testing.assert_array_equal(cupy.asnumpy(first), want)
    np.testing.assert_array_equal(cupy.asnumpy(again), want)
    ptr = x.data.ptr
    del x, first, again
    y = cupy.random.standard_normal((32, 5000), dtype=cupy.float32)
    if y.data.ptr == ptr:  # the pool handed the same memory out again: a different key
        np.testing.assert_array_equal(cupy.asnumpy(deepselect_rt.topk(y, 32, nan_policy="sentinel")[1]),
                                      deepselect_rt.topk(cupy.asnumpy(y), 32, nan_policy="sentinel")[1])


@pytest.mark.parametrize("caller_raw", [False, True])
def test_serving_calls_are_remembered_and_exact(caller_raw):
    """A decode loop's call: page table, row_to_batch, per-row k and raw indices, repeated with
    new scores, a new page table and new per-row k written into the same tensors."""
    torch = torch_cuda()
    rows, width, k, page = 6, 40000, 256, 64
    pages = width // page
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    table = torch.empty(3, pages, dtype=torch.int32, device="cuda")
    r2b = torch.tensor([0, 1, 2, 2, 1, 0], dtype=torch.int32, device="cuda")
    ks = torch.empty(rows, dtype=torch.int32, device="cuda")
    raw_out = torch.empty(rows, k, dtype=torch.int32, device="cuda") if caller_raw else None
    kw = dict(indices_type="int32", nan_policy="sentinel", page_table=table, page_size=page, row_to_batch=r2b,
              k_per_row=ks, return_raw_indices=True, output_raw_idx=raw_out)
    for step in range(4):
        x.copy_(torch.randn_like(x))
        table.copy_(torch.randperm(3 * pages, device="cuda", dtype=torch.int32).view(3, pages))
        ks.copy_(torch.randint(0, k + 1, (rows,), device="cuda", dtype=torch.int32))
        vals, idx, raw = deepselect_rt.topk(x, k, **kw)
        want = deepselect_rt.topk(to_host(x), k, **{**kw, "page_table": to_host(table), "row_to_batch": to_host(r2b),
                                                    "k_per_row": to_host(ks), "output_raw_idx": None})
        np.testing.assert_array_equal(to_host(idx), want[1])
        np.testing.assert_array_equal(to_host(raw), want[2])
        np.testing.assert_array_equal(to_host(vals).view(np.uint16), want[0].view(np.uint16))
        if caller_raw:
            assert raw is raw_out
        assert len(fast_path._entries) == 1  # remembered by the first call, served from then on
