"""The scripts in tools/: each prints its help, and the GPU ones, run without a GPU, exit with a
one-line error instead of a traceback (fresh-user findings)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deepselect_rt.cuda import module

TOOLS = Path(__file__).resolve().parents[1] / "tools"
SCRIPTS = sorted(p.name for p in TOOLS.glob("*.py") if p.name != "gpu_tool.py")
# Tools that time or launch kernels (tools/gpu_tool.py, or their own check for ab_shapes).
GPU_TOOLS = ["ab_shapes.py", "cluster_phases.py", "host_profile.py", "latency_floor.py", "sanitize_subset.py",
             "throughput_skew.py", "tune_split.py", "tune_stream.py"]


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TOOLS.parent), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    result = run(str(TOOLS / script), "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage:") and "Traceback" not in result.stderr


# cluster_phases.py --phases puts its marks in a copy of the kernels before it looks for a GPU:
# an anchor that a kernel edit removed stops it with a different message.
@pytest.mark.parametrize("script", GPU_TOOLS + [["profile_case.py", "1", "1000", "8"], ["cluster_phases.py", "--phases"]],
                         ids=str)
def test_without_gpu_one_line(script):
    if module.probe()[0]:
        pytest.skip("a GPU is visible")
    name, *args = [script] if isinstance(script, str) else script
    result = run(str(TOOLS / name), *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "needs an NVIDIA GPU" in result.stderr


def test_device_check_script():
    script = str(TOOLS / "device_check.sh")
    result = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("usage:")
    result = subprocess.run(["bash", script, "bogus"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage:" in result.stderr
    if not shutil.which("nvidia-smi"):
        result = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60)
        assert result.returncode == 1 and "needs an NVIDIA GPU" in result.stderr



@pytest.mark.parametrize("args", [["make_samples.py", "/nonexistent"], ["inspect_wheel.py", "/nonexistent.whl"],
                                  ["gpu_tool.py"]], ids=str)
def test_missing_inputs_one_line(args):
    name, *rest = args
    result = run(str(TOOLS / name), *rest)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and name in result.stderr
