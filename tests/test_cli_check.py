"""`deepselect-rt check` and the shipped real inputs (deepselect_rt/samples/, bench/samples.py).

CPU tests run everywhere; the GPU test (marker gpu) runs `check` end to end on a GPU machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from deepselect_rt.bench import samples as sample_data
from deepselect_rt.cli import check
from deepselect_rt.cli import main as cli
from deepselect_rt.cli.warmup import cuda_tasks
from deepselect_rt.jit import env as config
from deepselect_rt.jit import warmup
from deepselect_rt.cuda import arch as module
from deepselect_rt.errors import BackendUnavailableError

REPO = Path(__file__).resolve().parents[1]


def has_gpu() -> bool:
    return bool(module.probe()[0])


def run_cli(*args, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env[config.ENV_CACHE_DIR] = str(cache)
    env.pop(config.ENV_CACHE_PATH, None)
    return subprocess.run([sys.executable, "-m", "deepselect_rt.cli", *args], env=env,
                          capture_output=True, text=True, timeout=900)


# -- the shipped real inputs --------------------------------------------------------------------

def test_sample_data_loads_and_is_small():
    scores, end = sample_data.indexer_rows()
    logits = sample_data.sampler_rows()
    assert scores.dtype == ml_dtypes.bfloat16 and scores.shape == (4, 131072)
    assert end.dtype == np.int32 and end.shape == (4,) and end.max() == scores.shape[1]
    assert logits.dtype == np.float32 and logits.shape == (8, 30522) and np.isfinite(logits).all()
    wide = scores.astype(np.float32)
    for row, e in zip(wide, end):  # finite exactly on [0, end), -inf after
        assert np.isfinite(row[:e]).all() and (row[e:] == -np.inf).all()
    total = sum(len(f.read_bytes()) for f in sample_data.data_files())
    assert total < 2 * 1024 * 1024, total
    digests = sample_data.provenance()["sha256"]
    assert digests["indexer_bf16_bits"] == hashlib.sha256(scores.view(np.uint16).tobytes()).hexdigest()
    assert digests["indexer_end"] == hashlib.sha256(end.tobytes()).hexdigest()
    assert digests["sampler_fp32"] == hashlib.sha256(logits.tobytes()).hexdigest()


def test_sample_data_matches_the_fixture_rows_it_claims(fixtures_dir):
    prov = sample_data.provenance()
    for name in ("indexer_scores_bf16.npy", "sampler_logits_fp32.npy"):
        assert prov["sources"][name] == hashlib.sha256((fixtures_dir / name).read_bytes()).hexdigest()
    scores, end = sample_data.indexer_rows()
    arrays = prov["arrays"]
    rows = arrays["indexer_bf16_bits"]["source_rows"]
    fixture = np.load(fixtures_dir / "indexer_scores_bf16.npy")
    np.testing.assert_array_equal(scores.view(np.uint16), fixture[rows])
    meta = json.loads((fixtures_dir / "indexer_scores.json").read_text())
    assert end.tolist() == [meta["rows"][r]["end"] for r in rows]
    rows = arrays["sampler_fp32"]["source_rows"]
    np.testing.assert_array_equal(sample_data.sampler_rows(),
                                  np.load(fixtures_dir / "sampler_logits_fp32.npy")[rows])


def test_real_inputs_reference_matches_brute_force():
    for case in check.real_cases():
        want = check.brute_force_topk(case.host_input, case.k, **case.kwargs)
        assert check.compare(check.reference_result(case), want) is None, case.name


def test_brute_force_refuses_what_it_cannot_order():
    for bad in (np.array([[1.0, np.nan]], np.float32), np.array([[1.0, -0.0]], np.float32)):
        with pytest.raises(ValueError, match="no NaN and no -0.0"):
            check.brute_force_topk(bad, 1)


def test_compare_reports_differences():
    idx = np.arange(6, dtype=np.int64).reshape(2, 3)
    vals = np.ones((2, 3), np.float32)
    assert check.compare((vals, idx), (vals.copy(), idx.copy())) is None
    other = idx.copy()
    other[1, 2] = 9
    assert "indices differ in 1 slot(s), first [1, 2]" in check.compare((vals, other), (vals, idx))
    neg_zero = np.zeros((2, 3), np.float32)
    assert "value bits differ" in check.compare((-neg_zero, idx), (neg_zero, idx))
    assert "int32" in check.compare((vals, idx.astype(np.int32)), (vals, idx))
    assert check.compare(check.NaNRaised((1, 4)), check.NaNRaised((1, 4))) is None
    assert "did not raise" in check.compare((vals, idx), check.NaNRaised((1,)))


# -- the device path, driven by CPU torch tensors (the host backend answers) -------------------

class CpuTorchTensors(check._TorchTensors):
    """The GPU path's tensor plumbing with CPU tensors: checks shifts, buffers, canaries, NaN
    raising and the comparison without a GPU (topk then runs the reference)."""

    def to_device(self, a):
        a = np.ascontiguousarray(a)
        if a.dtype == ml_dtypes.bfloat16:
            return self.torch.from_numpy(a.view(np.int16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(a)

    def full(self, shape, dtype, value):
        return self.torch.full(shape, value, dtype=getattr(self.torch, dtype))

    def synchronize(self):
        pass


@pytest.fixture
def cpu_tensors():
    return CpuTorchTensors(pytest.importorskip("torch"))


def test_device_path_plumbing(cpu_tensors):
    outcomes = [check._check_on_device(cpu_tensors, c) for c in check.real_cases() + check.edge_cases()]
    assert [o.detail for o in outcomes if not o.ok] == []
    names = " ".join(o.name for o in outcomes)
    for topic in ("short rows", "begin/end", "NaN policy raise", "ties", "-0.0", "unaligned", "caller buffers",
                  "int32", "int64", "sorted_index", "k > 4096", "real indexer", "real sampler"):
        assert topic in names


def test_device_path_catches_wrong_results_and_canaries(cpu_tensors, monkeypatch):
    import deepselect_rt

    real_topk = deepselect_rt.topk

    def sloppy(x, k, **kw):
        vals, idx = real_topk(x, k, **kw)
        if isinstance(x, np.ndarray):  # the reference stays right
            return vals, idx
        if "output_idx" in kw:
            kw["output_idx"]._base[:, -1] = 0  # writes past k into the canaries
        else:
            idx[0, 0] += 1
        return vals, idx

    monkeypatch.setattr(deepselect_rt, "topk", sloppy)
    buffers = next(c for c in check.edge_cases() if c.buffers)
    assert "columns past k were written" in check._check_on_device(cpu_tensors, buffers).detail
    plain = check.real_cases()[0]
    outcome = check._check_on_device(cpu_tensors, plain)
    assert outcome.ok is False and "indices differ" in outcome.detail


# -- the command --------------------------------------------------------------------------------

def test_check_without_gpu(tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="the cross-compile needs NVRTC (the cu13 extra)")
    if has_gpu():
        pytest.skip("a GPU is visible: check takes the GPU path")
    cache = tmp_path / "user-cache"
    result = run_cli("check", cache=cache)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "No usable GPU" in out and "cross-compile default kernels for sm_90a" in out
    assert f"{len(cuda_tasks(['sm_90a']))} compiled" in out
    assert "real indexer" in out and "real sampler" in out and "checks passed" in out
    assert not cache.exists()  # the cross-compile went to a temporary folder


def _main(capsys, *args):
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_check_fails_with_a_summary(capsys, monkeypatch):
    if has_gpu():
        pytest.skip("a GPU is visible: check takes the GPU path")
    monkeypatch.setattr(check, "_build", lambda *a: [])
    right = check.brute_force_topk

    def wrong(x, k, **kw):
        vals, idx = right(x, k, **kw)
        idx[0, 0] += 1
        return vals, idx

    monkeypatch.setattr(check, "brute_force_topk", wrong)
    rc, out, err = _main(capsys, "check")
    assert rc == 1
    assert "check failed" in err and f"{len(check.real_cases())} of {len(check.real_cases())} checks" in err


def test_check_without_nvrtc_fails(capsys, monkeypatch):
    if has_gpu():
        pytest.skip("a GPU is visible: check takes the GPU path")

    def no_nvrtc(*a, **kw):
        raise BackendUnavailableError("NVRTC not found")

    monkeypatch.setattr(warmup, "run", no_nvrtc)
    rc, out, err = _main(capsys, "check", "--arch", "sm_100a")
    assert rc == 1
    assert "cross-compile default kernels for sm_100a" in out and "NVRTC not found" in out


@pytest.mark.parametrize("arch", ["hopper", ""])
def test_check_bad_arch_is_usage_error(capsys, arch):
    if has_gpu():
        pytest.skip("a GPU is visible: --arch is not used")
    rc, _, err = _main(capsys, "check", "--arch", arch)
    assert rc == 2 and repr(arch) in err


@pytest.mark.gpu
def test_check_on_gpu(tmp_path):
    if not has_gpu():
        pytest.skip("no CUDA device")
    result = run_cli("check", cache=tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "build default kernels for sm_" in result.stdout and "checks passed" in result.stdout
    assert "differ" not in result.stdout and "error:" not in result.stdout
