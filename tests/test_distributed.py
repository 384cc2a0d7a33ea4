"""deepselect_rt.distributed.topk against deepselect_rt.topk of the whole rows.

Gloo groups of 2 and 4 CPU processes run every case group of tests/dist_worker.py once per group
size (starting the processes is the slow part); each test below reads one case group's results.
The example runs under torchrun with 2 processes, and a GPU test runs the NCCL path in a group of
one.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import dist_worker  # noqa: E402  (tests/ is on sys.path, and so on the spawned processes')

ROOT = Path(__file__).resolve().parents[1]
SPAWN_TIMEOUT_S = 150
PRELOAD = ["torch", "torch.distributed", "deepselect_rt", "deepselect_rt.host", "deepselect_rt.distributed",
           "dist_worker"]

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"world{n}")
def group_results(request, tmp_path_factory):
    """Run every case group in a gloo group of ``world`` processes; returns ``{group: [per-rank
    results]}``."""
    world = request.param
    tmp = tmp_path_factory.mktemp(f"gloo{world}")
    # A fork server that imported torch and the library once: each process of each group is a
    # fork of it (importing them takes a 2-core machine about 5 s a process).
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    context = torch.multiprocessing.start_processes(dist_worker.worker, args=(world, str(tmp / "init"), str(tmp)),
                                                    nprocs=world, join=False, start_method="forkserver")
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"the gloo group of {world} did not finish in {SPAWN_TIMEOUT_S} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    per_rank = [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]
    return {name: [results.get(name) for results in per_rank] for name in dist_worker.GROUPS}


@pytest.mark.parametrize("name", list(dist_worker.GROUPS))
def test_case_group(group_results, name):
    ranks = group_results[name]
    assert all(r is not None for r in ranks), f"{name} did not run on every rank (an earlier group broke off)"
    failures = [f for r in ranks for f in r["failures"]]
    assert not failures, "\n\n".join(failures[:5]) + (f"\n... {len(failures) - 5} more" if len(failures) > 5 else "")
    assert sum(r["checked"] for r in ranks) > 0


def test_import_deepselect_rt_loads_neither_torch_nor_distributed():
    code = ("import sys, deepselect_rt; "
            "print([m for m in ('torch', 'deepselect_rt.distributed') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_not_initialised_is_a_runtime_error():
    from deepselect_rt import distributed

    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        distributed.topk(torch.zeros(2, 3), 1)


def test_example_under_torchrun():
    """examples/vocab_parallel_sampling.py, as its docstring runs it, on the CPU (gloo): it checks
    its own top-k and tokens against the gathered logits and exits non-zero on a difference."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(ROOT / "examples" / "vocab_parallel_sampling.py")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "matches the gathered computation" in out.stdout


@pytest.mark.gpu
def test_nccl_group_of_one():
    """The NCCL path end to end in a group of one GPU: the width exchange, the local top-k with
    global offsets, the exchange, the merge; against deepselect_rt.topk on the same tensor."""
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        pytest.skip("needs CUDA and NCCL")
    import deepselect_rt
    from deepselect_rt import distributed

    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=device)
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        for dtype, width, k in ((torch.float32, 129280, 50), (torch.bfloat16, 65536, 2048), (torch.float16, 1000, 1200)):
            x = torch.randn(6, width, device=device, generator=gen).to(dtype)
            x[1, 7] = math.nan
            x[2, :] = -math.inf
            end = torch.tensor([width, width, width // 2, 0, 10, width - 1], device=device, dtype=torch.int32)
            begin = torch.tensor([0, 1, 0, 0, 5, width // 3], device=device)
            for kw in (dict(), dict(sorted=True), dict(begin=begin, end=end, indices_type="int32"),
                       dict(begin=begin, end=end, sorted=True, nan_policy="propagate"),
                       dict(end=end, return_value=False, nan_policy="sentinel")):
                policy = kw.get("nan_policy", "sentinel")
                want = deepselect_rt.topk(x, k, **{**kw, "nan_policy": policy})
                for extra in (dict(), dict(width_offsets=[0, width]), dict(dst=0)):
                    got = distributed.topk(x, k, **{**kw, "nan_policy": policy}, **extra)
                    for g, w in zip(got, want):
                        assert (g is None) == (w is None)
                        if g is not None:
                            assert g.dtype == w.dtype and g.device == x.device
                            bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
                            assert torch.equal(g.view(bits), w.view(bits)), (dtype, k, kw, extra)
        x = torch.randn(2, 300, device=device)
        x[1, 3] = math.nan
        distributed.topk(x, 4)  # the default policy: the NaN row is recorded
        with pytest.raises(deepselect_rt.NaNInputError, match="row 1"):
            deepselect_rt.check_nan()
    finally:
        dist.destroy_process_group()
