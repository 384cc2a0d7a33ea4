"""The developer scripts in tools/ that do work without a GPU: the read roof's kernel compiles,
bad arguments and missing inputs stop with one line, the GPU ones stop with one line without a
GPU."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deepselect_rt.cuda import arch

TOOLS = Path(__file__).resolve().parents[1] / "tools"
GPU_TOOLS = [["read_roof.py"], ["sanitize_subset.py"], ["profile_case.py", "1", "1000", "8"], ["bench_jax.py"],
             ["bench_serving.py"], ["tune_split.py"]]


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TOOLS.parent), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", GPU_TOOLS, ids=str)
def test_without_gpu_one_line(args):
    if arch.probe()[0]:
        pytest.skip("a GPU is visible")
    name, *rest = args
    result = run(str(TOOLS / name), *rest)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "needs an NVIDIA GPU" in result.stderr


def test_device_check_script():
    script = str(TOOLS / "device_check.sh")
    result = subprocess.run(["bash", script, "bogus"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage:" in result.stderr
    if not shutil.which("nvidia-smi"):
        for mode in ([], ["middle"]):
            result = subprocess.run(["bash", script, *mode], capture_output=True, text=True, timeout=60)
            assert result.returncode == 1 and "needs an NVIDIA GPU" in result.stderr


@pytest.mark.parametrize("args", [["make_samples.py", "/nonexistent"], ["inspect_wheel.py", "/nonexistent.whl"]],
                         ids=str)
def test_missing_inputs_one_line(args):
    name, *rest = args
    result = run(str(TOOLS / name), *rest)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and name in result.stderr


@pytest.mark.parametrize("args", [["read_roof.py", "--arch", "sm_75"],
                                  ["read_roof.py", "--rows", "8192", "--widths", "1048576"],
                                  ["profile_case.py", "1", "1000", "8", "--dist", "bogus"],
                                  ["sanitize_subset.py", "--radix", "--batch"],
                                  ["dist_bytes.py", "--rows", "8"],
                                  ["tune_split.py", "--ways", "cluster,bogus"],
                                  ["tune_split.py", "--widths", "16Q"]], ids=str)
def test_bad_arguments_rejected_before_the_gpu(args):
    """Arguments the GPU tools check before looking for a GPU: a usage error, never a traceback."""
    name, *rest = args
    result = run(str(TOOLS / name), *rest)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"{name}: error: ")


def test_read_roof_compiles_its_kernel():
    """tools/read_roof.cu, outside kernels_cu/ but on its headers, compiles with NVRTC (no GPU
    needed) for sm_90a and sm_80, for bf16 and, with DeepSelect's shapes, float32."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="needs the cu13 extra (cuda-bindings, NVRTC)")
    result = run(str(TOOLS / "read_roof.py"), "--arch", "sm_90a,sm_80", "--deepselect")
    assert result.returncode == 0, result.stderr
    for name in ("sm_90a", "sm_80"):
        for dtype in ("bfloat16", "float32"):
            assert f"ds_read_roof_{dtype}_k0_t256_ds_unroll4 {name}: " in result.stdout


def test_dist_bytes_tables_are_the_docs():
    """docs/performance.md's byte counts of the distributed top-k are what tools/dist_bytes.py prints."""
    result = run(str(TOOLS / "dist_bytes.py"))
    assert result.returncode == 0, result.stderr
    doc = (TOOLS.parent / "docs" / "performance.md").read_text()
    missing = [line for line in result.stdout.splitlines() if line and line not in doc]
    assert not missing, "docs/performance.md lacks:\n" + "\n".join(missing)


def _project_imports(path: Path):
    """(module, name) of each ``from deepselect_rt... import name`` in a script, wherever it sits
    (the GPU tools import most of theirs after the GPU check, which a machine without one never
    passes)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "deepselect_rt":
            yield from ((node.module, alias.name) for alias in node.names)


@pytest.mark.parametrize("path", sorted(TOOLS.glob("*.py")), ids=lambda p: p.name)
def test_project_names_the_tools_import_exist(path):
    for module, name in _project_imports(path):
        imported = importlib.import_module(module)
        assert hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}") is not None, (
            f"{path.name} imports {name} from {module}, which has no such name")


def test_size_lists_take_k_and_m():
    """The tools' --rows, --widths and --ks take what their help shows and bench takes (16K, 1M)."""
    sys.path.insert(0, str(TOOLS))
    try:
        import gpu_tool
    finally:
        sys.path.remove(str(TOOLS))
    assert gpu_tool.int_list("16K,64k, 1M,512") == [16384, 65536, 1 << 20, 512]
    for bad in ("0", "16Q", "-5", "", "16K,,1M"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated positive integers"):
            gpu_tool.int_list(bad)
