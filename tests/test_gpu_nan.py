"""nan_policy="raise" on the GPU without a host synchronisation: NaN rows carry the sentinel and
are reported by the next call or check_nan, under CUDA-graph replay, from several streams and
threads, and from rows split over CTAs and clusters. Run with ``pytest -m gpu``."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt.cuda import backend
from deepselect_rt.cuda.variants import SPLIT_CLUSTER, SPLIT_RADIX
from deepselect_rt.errors import NaNInputError
from gpu_helpers import torch_cuda

pytestmark = pytest.mark.gpu
SENTINEL = 0x3F3F3F3F


@pytest.fixture(autouse=True)
def drained():
    torch_cuda().cuda.synchronize()
    try:
        deepselect_rt.check_nan()
    except NaNInputError:
        pass
    yield


def _reported() -> list[int]:
    try:
        deepselect_rt.check_nan()
    except NaNInputError as exc:
        return exc.rows
    return []


def _x(rows, width, nan_rows, dtype="float32", seed=0):
    torch = torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, width, device="cuda", generator=gen).to(getattr(torch, dtype))
    cols = torch.randint(0, width, (len(nan_rows),), device="cuda", generator=gen)
    if nan_rows:
        x[torch.as_tensor(nan_rows, device="cuda"), cols] = float("nan")
    return x


def test_default_call_does_not_block_and_reports_at_the_next_call():
    torch = torch_cuda()
    x = _x(8, 4096, [2, 5])
    deepselect_rt.topk(x, 16, nan_policy="sentinel")  # kernels compiled and loaded beforehand
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # keep the stream busy: the call must return before the GPU runs it
    _, idx = deepselect_rt.topk(x, 16)
    assert not deepselect_rt.nan_record.raise_pending(("cuda", 0))  # nothing visible yet, and no wait
    torch.cuda.synchronize()
    with pytest.raises(NaNInputError) as info:
        deepselect_rt.topk(x[:1], 4)  # the first call after the GPU finished reports it
    assert info.value.rows == [2, 5]
    assert (idx[[2, 5]] == SENTINEL).all().item() and not (idx[[0, 1, 3, 4, 6, 7]] == SENTINEL).any().item()


def test_graph_capture_and_replay_report_each_replay():
    torch = torch_cuda()
    x = _x(4, 3000, [])
    idx = torch.empty(4, 10, dtype=torch.int64, device="cuda")
    deepselect_rt.topk(x, 10, output_idx=idx, return_value=False)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deepselect_rt.topk(x, 10, output_idx=idx, return_value=False)
    for round_ in range(3):
        x[1, 17 + round_] = float("nan")
        graph.replay()
        assert _reported() == [1]
        assert (idx[1] == SENTINEL).all().item()
        x[1].fill_(0.5)
        graph.replay()
        assert _reported() == []


def test_two_streams_and_two_threads():
    torch = torch_cuda()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    xs = [_x(6, 5000, [1], seed=1), _x(6, 5000, [4], seed=2)]
    errors = []

    def work(i):
        try:
            with torch.cuda.stream(streams[i]):
                for _ in range(20):
                    deepselect_rt.topk(xs[i], 32, nan_policy="sentinel")
                deepselect_rt.topk(xs[i], 32)
        except NaNInputError:
            pass  # the other thread's NaN may be reported here: the rows are what we check
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    torch.cuda.synchronize()
    seen = set()
    while True:
        rows = _reported()
        if not rows:
            break
        seen.update(rows)
    assert seen <= {1, 4}


@pytest.mark.parametrize("how", ["", SPLIT_CLUSTER, SPLIT_RADIX])
def test_split_rows_report_once_per_row(how):
    """Rows split over CTAs, clusters where the kernels may use them, else a workspace."""
    x = _x(3, 1 << 18, [0, 2], dtype="bfloat16")
    with backend.forced_split(8, how):
        _, idx = deepselect_rt.topk(x, 512)
        assert _reported() == [0, 2]
    assert (idx[[0, 2]] == SENTINEL).all().item() and not (idx[1] == SENTINEL).any().item()


def test_random_injection_always_reported():
    """NaN at random rows, columns and streams, 40 trials: check_nan reports exactly those rows,
    and no NaN row returns a valid-looking index."""
    torch = torch_cuda()
    rng = np.random.default_rng(7)
    streams = [torch.cuda.current_stream(), torch.cuda.Stream()]
    for trial in range(40):
        rows, width = int(rng.integers(1, 300)), int(rng.integers(64, 200_000))
        nan_rows = sorted(set(rng.integers(0, rows, int(rng.integers(1, 5))).tolist()))
        x = _x(rows, width, nan_rows, dtype=str(rng.choice(["float32", "bfloat16", "float16"])), seed=trial)
        with torch.cuda.stream(streams[trial % 2]):
            _, idx = deepselect_rt.topk(x, int(rng.integers(1, 2049)))
        assert _reported() == nan_rows, f"trial {trial}: {rows}x{width}"
        assert (idx[nan_rows] == SENTINEL).all().item()


def test_compat_default_does_not_block():
    torch = torch_cuda()
    import deepselect_rt.compat as deep_select

    x = _x(4, 2048, [3])
    deep_select.topk(x, 8, abort_when_nan_found=False)
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)
    deep_select.topk(x, 8)  # abort_when_nan_found=True: returns before the GPU has run it
    assert not deepselect_rt.nan_record.raise_pending(("cuda", 0))
    assert _reported() == [3]
