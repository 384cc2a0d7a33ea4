"""The serving options on the GPU (contract.md, "Serving") against the NumPy reference, bit for
bit, on every kernel path: one CTA a row, rows split over 8 CTAs (the streaming kernel's own way,
thread-block clusters, the cluster radix select, a workspace and a merge launch), and k > 4096
(topk_large.cu); sorted and unsorted, int32 and int64 indices, and device values the host
cannot check (clamped or written as fills by the kernel).

Run on a GPU machine: ``pytest -m gpu tests/test_gpu_serving.py``. Skips without CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt import reference
from deepselect_rt.bench import distributions
from deepselect_rt.cuda import arch as cuda_arch
from deepselect_rt.cuda import backend
from deepselect_rt.cuda.variants import SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE
from gpu_helpers import bits, to_device, to_host, torch_cuda

pytestmark = pytest.mark.gpu

PATHS = [(1, ""), (8, ""), (8, SPLIT_CLUSTER), (8, SPLIT_RADIX), (8, SPLIT_WORKSPACE)]
RENAME = {"output_idx_offset": "offsets", "indices_type": "index_dtype", "return_raw_indices": "return_raw"}


@pytest.fixture(params=PATHS, ids=[f"{s}{how or 'stream'}" for s, how in PATHS])
def path(request):
    torch_cuda()
    split, how = request.param
    if how in (SPLIT_CLUSTER, SPLIT_RADIX) and not cuda_arch.device_info(0).cluster_launch:
        pytest.skip("this GPU has no thread-block clusters")
    backend.forget_plans()
    with backend.forced_split(split, how):
        yield request.param


def _compare(got, want, what):
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        if w is None:
            assert g is None, what
            continue
        g = to_host(g)
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=what)
        else:
            np.testing.assert_array_equal(bits(g), bits(w), err_msg=what)


def _device(kw):
    return {key: to_device(v) if isinstance(v, np.ndarray) else v for key, v in kw.items()}


def check(x, k, **kw):
    """topk on the GPU (torch tensors) against reference.topk with the same options."""
    got = deepselect_rt.topk(to_device(x), k, nan_policy="sentinel", **_device(kw))
    want = reference.topk(x, k, nan_policy="sentinel", **{RENAME.get(key, key): v for key, v in kw.items()})
    _compare(got, want, f"shape={x.shape} dtype={x.dtype} k={k} {sorted(kw)}")


def check_ragged(flat, cu, k, **kw):
    got = deepselect_rt.ragged_topk(to_device(flat), to_device(cu), k, nan_policy="sentinel", **_device(kw))
    ref_kw = {RENAME.get(key, key): v for key, v in kw.items()}
    want = reference.ragged_topk(flat, cu, k, nan_policy="sentinel", **ref_kw)
    _compare(got, want, f"ragged total={len(flat)} rows={len(cu) - 1} k={k} {sorted(kw)}")


def _pages(batch, max_pages, seed):
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(4 * max_pages)[:max_pages] for _ in range(batch)]).astype(np.int32)


@pytest.mark.parametrize("sorted_", [False, True])
@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("k", [100, 2048])
def test_page_table_on_every_path(path, sorted_, index, k):
    rows, width = 5, 30000
    page = 64 if sorted_ else 48  # a power of two (shifts) and not (32-bit division)
    x = distributions.make("normal", rows, width, "bfloat16", seed=k)
    pt = _pages(rows + 3, width // page + 2, seed=1)
    r2b = np.array([7, 0, 2, 2, 5], np.int32)
    end = np.array([width, 50, 0, 20000, width], np.int32)
    check(x, k, sorted=sorted_, indices_type=index, end=end, page_table=pt, page_size=page, row_to_batch=r2b,
          return_raw_indices=True)


@pytest.mark.parametrize("sorted_", [False, True])
@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("k", [100, 2048])
def test_k_per_row_on_every_path(path, sorted_, index, k):
    rows, width = 6, 30000
    x = distributions.make("normal", rows, width, "float32", seed=k + 1)
    ks = np.array([0, 1, k, k // 2, 7, k], np.int64)
    begin = np.array([0, 100, 0, 5, 0, 29000], np.int32)
    check(x, k, sorted=sorted_, indices_type=index, begin=begin, k_per_row=ks)


@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("k", [64, 2048])
def test_ragged_with_everything_on_every_path(path, index, k):
    lengths = [3000, 0, 17, 25000, 4100, 2048]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = distributions.make("normal", 1, int(cu[-1]), "float16", seed=k)[0]
    rows, page = len(lengths), 16
    pt = _pages(3, 25000 // page + 1, seed=2)
    kw = dict(indices_type=index, page_table=pt, page_size=page, row_to_batch=np.array([0, 1, 2, 2, 1, 0], np.int32),
              k_per_row=np.array([k, k, 5, k, k - 1, 0], np.int32), return_raw_indices=True)
    check_ragged(flat, cu, k, **kw)
    check_ragged(flat, cu.astype(np.int32), k, sorted=True, indices_type=index)
    check_ragged(flat, cu, k, indices_type=index, output_idx_offset=np.arange(rows, dtype=np.int32) * 1000)


@pytest.mark.parametrize("sorted_", [False, True])
@pytest.mark.parametrize("index", ["int32", "int64"])
def test_large_k(sorted_, index):
    torch_cuda()
    rows, width, k, page = 3, 40000, 5000, 32
    x = distributions.make("normal", rows, width, "bfloat16", seed=5)
    pt = _pages(rows, width // page + 1, seed=3)
    ks = np.array([5000, 4097, 0], np.int32)
    check(x, k, sorted=sorted_, indices_type=index, page_table=pt, page_size=page, return_raw_indices=True)
    check(x, k, indices_type=index, k_per_row=ks, page_table=pt, page_size=page)
    cu = np.array([0, 6000, 6000, 40000], np.int32)
    check_ragged(x[0].copy(), cu, k, indices_type=index, k_per_row=ks, return_raw_indices=True)


def test_nan_rows_keep_the_sentinel(path):
    x = distributions.make("normal", 4, 20000, "float32", seed=9)
    x[1, 12345] = np.nan
    pt = _pages(4, 20000 // 8 + 1, seed=4)
    check(x, 300, page_table=pt, page_size=8, k_per_row=np.array([300, 10, 0, 299], np.int32),
          return_raw_indices=True)


def test_device_values_the_host_cannot_check(path):
    """Out-of-range device values: k_per_row clamped into [0, k], a row_to_batch outside the
    table and positions past the table write fills, cu_seqlens clamped as begin/end are."""
    rows, width, page = 4, 20000, 64
    x = distributions.make("normal", rows, width, "float32", seed=10)
    pt = _pages(2, 100, seed=5)  # 6400 positions: most of each row has no page
    end = np.array([width, 6400, 6401, 100], np.int32)
    check(x, 500, end=end, page_table=pt, page_size=page, row_to_batch=np.array([0, 1, 2, -1], np.int32),
          k_per_row=np.array([-5, 10**6, 250, 500], np.int32), return_raw_indices=True)
    flat = x.reshape(-1)[:50000].copy()
    check_ragged(flat, np.array([0, 30000, 20000, 60000, 49000], np.int32), 200, sorted=True)
