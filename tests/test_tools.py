"""The scripts in tools/: each prints its help, and the GPU ones, run without a GPU, exit with a
one-line error instead of a traceback (fresh-user findings)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deepselect_rt.cuda import module

TOOLS = Path(__file__).resolve().parents[1] / "tools"
# Modules the tools import, not tools.
HELPERS = ("gpu_tool.py", "phase_marks.py", "shape_arg.py")
SCRIPTS = sorted(p.name for p in TOOLS.glob("*.py") if p.name not in HELPERS)
# Tools that time or launch kernels (tools/gpu_tool.py, or their own check for ab_shapes).
GPU_TOOLS = ["ab_shapes.py", "cluster_phases.py", "host_profile.py", "latency_floor.py", "read_roof.py",
             "sanitize_subset.py", "slice_load.py", "stream_phases.py", "throughput_skew.py", "tune_split.py",
             "tune_stream.py"]


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TOOLS.parent), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    result = run(str(TOOLS / script), "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage:") and "Traceback" not in result.stderr


# cluster_phases.py --phases and stream_phases.py put their marks in a copy of the kernels before
# they look for a GPU: an anchor that a kernel edit removed stops them with a different message.
@pytest.mark.parametrize("script", GPU_TOOLS + [["profile_case.py", "1", "1000", "8"],
                                                ["profile_case.py", "1", "1000", "8", "--dist", "few_distinct"],
                                                ["cluster_phases.py", "--phases"]], ids=str)
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
                                  ["gpu_tool.py"], ["phase_marks.py"], ["shape_arg.py"],
                                  ["ncu_stalls.py", "/nonexistent.csv"]], ids=str)
def test_missing_inputs_one_line(args):
    name, *rest = args
    result = run(str(TOOLS / name), *rest)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and name in result.stderr


@pytest.mark.parametrize("args", [["ab_shapes.py", "--tree", "/nonexistent"],
                                  ["ab_shapes.py", "--against", "/nonexistent.json"],
                                  ["tune_split.py", "--goals", "--no-goals"], ["tune_split.py", "--rows", "32,0"],
                                  ["tune_split.py", "--widths", ""], ["ab_shapes.py", "--shapes", "bfloat16:1:2"],
                                  ["tune_stream.py", "--shapes", "float64:1:2:3"],
                                  ["stream_phases.py", "--shapes", "bfloat16:9000:16384:512"],
                                  ["ab_shapes.py", "--data", "uniformish"],
                                  ["ptxas_usage.py", "--tree", "/nonexistent"], ["ptxas_usage.py", "--jobs", "0"],
                                  ["ptxas_usage.py", "--json", "/nonexistent-ds-folder/usage.json"],
                                  ["read_roof.py", "--arch", "sm_75"],
                                  ["read_roof.py", "--rows", "8192", "--widths", "1048576"]],
                         ids=str)
def test_bad_arguments_rejected_before_the_gpu(args):
    """Arguments the GPU tools check before looking for a GPU: a usage error, with its reason,
    never a traceback (a missing --tree once fell back to the installed deepselect_rt)."""
    name, *rest = args
    result = run(str(TOOLS / name), *rest)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"{name}: error: ")


def test_ncu_stalls_groups_samples(tmp_path):
    # A made-up source page of three instructions (10 samples: 6, 3 and 1) and the disassembly
    # that puts the first two on line 7 of a.cu and the third on line 9: the shares follow by
    # hand, 90% and 10% by line; by executions per 100, the instructions run 100, 100 and 2
    # times fall in "0.5 - 1.5" (9 samples) and "< 0.05" (1); by execution count, the two run
    # 100 times form one group of 200 of the 202 warp instructions.
    header = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
              '"stall_barrier","stall_wait","stall_barrier (Not Issued)"')
    rows = ['"0x7f0000000100","LDS R1, [R2]","6","100","5","1","0"',
            '"0x7f0000000110","IADD R3, R1, 1","3","100","0","3","0"',
            '"0x7f0000000120","BAR.SYNC 0x0","1","2","1","0","0"']
    csv_path = tmp_path / "page.csv"
    csv_path.write_text('"Kernel Name","k",\n' + "\n".join([header, *rows]) + "\n")
    dis = tmp_path / "k.dis"
    dis.write_text('\t//## File "/src/a.cu", line 7\n        /*0000*/  LDS R1, [R2] ;\n'
                   '        /*0010*/  IADD R3, R1, 1 ;\n\t//## File "/src/a.cu", line 9\n'
                   '        /*0020*/  BAR.SYNC 0x0 ;\n')
    env_columns = dict(os.environ, COLUMNS="200")
    result = subprocess.run([sys.executable, str(TOOLS / "ncu_stalls.py"), str(csv_path), "--dis", str(dis),
                             "--per", "100", "--by-count"],
                            capture_output=True, text=True, timeout=120, env=env_columns)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()

    def cells(first):
        row = next(line for line in lines if line.startswith("│ " + first))
        return [c.strip() for c in row.strip("│").split("│")]

    assert cells("barrier")[1:3] == ["6", "60.0%"] and cells("wait")[1:3] == ["4", "40.0%"]
    assert cells("a.cu:7")[1:3] == ["9", "90.0%"] and cells("a.cu:9")[1:3] == ["1", "10.0%"]
    assert cells("0.5 - 1.5")[1:4] == ["9", "90.0%", "200"] and cells("< 0.05")[1:4] == ["1", "10.0%", "2"]
    assert cells("100 ")[1:] == ["2", "200", "99.0%", "9", "90.0%", "a.cu 2"]
    assert cells("2 ")[1:] == ["1", "2", "1.0%", "1", "10.0%", "a.cu 1"]


@pytest.mark.parametrize("case", ["folder", "binary", "not a count", "no line info", "--per 0", "--top -1"])
def test_ncu_stalls_rejects_bad_input_in_one_line(tmp_path, case):
    page = tmp_path / "page.csv"
    count = "abc" if case == "not a count" else "4"
    page.write_text('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
                    f'"stall_wait"\n"0x100","NOP","{count}","1","4"\n')
    (tmp_path / "blob").write_bytes(bytes([0, 255, 254, 253]))
    (tmp_path / "plain.dis").write_text("no line markers here\n")
    args = {"folder": [str(tmp_path)], "binary": [str(tmp_path / "blob")], "not a count": [str(page)],
            "no line info": [str(page), "--dis", str(tmp_path / "plain.dis")],
            "--per 0": [str(page), "--per", "0"], "--top -1": [str(page), "--top", "-1"]}[case]
    result = run(str(TOOLS / "ncu_stalls.py"), *args)
    assert "Traceback" not in result.stderr
    if case.startswith("--"):  # argparse's usage line, then its error
        assert result.returncode == 2 and "expected an integer >= 1" in result.stderr.splitlines()[-1]
    else:
        assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
        assert "ncu_stalls.py" in result.stderr


def test_profile_case_rejects_an_unknown_distribution():
    result = run(str(TOOLS / "profile_case.py"), "1", "1000", "8", "--dist", "bogus")
    assert result.returncode == 2 and "invalid choice: 'bogus'" in result.stderr


def test_sanitize_subset_radix_and_batch_exclude_each_other():
    result = run(str(TOOLS / "sanitize_subset.py"), "--radix", "--batch")
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


def test_throughput_skew_rejects_a_missing_fixtures_folder(tmp_path):
    result = run(str(TOOLS / "throughput_skew.py"), "--fixtures", str(tmp_path / "none"))
    assert result.returncode == 2 and "no such folder" in result.stderr


def test_ptxas_usage_reports_and_compares(tmp_path):
    """ptxas's figures for the probe (compiled here: NVRTC needs no GPU), then the same tree
    against them: nothing differs; against a file it did not write: a usage error."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="needs the cu13 extra (cuda-bindings, NVRTC)")
    out = tmp_path / "usage.json"
    first = run(str(TOOLS / "ptxas_usage.py"), "--only", "ds_probe", "--jobs", "1", "--json", str(out))
    assert first.returncode == 0, first.stderr
    (name, got), = json.loads(out.read_text()).items()
    assert name.startswith("ds_probe") and name in first.stdout
    assert got["registers"] > 0 and got["spill_stores"] == got["spill_loads"] == 0
    again = run(str(TOOLS / "ptxas_usage.py"), "--only", "ds_probe", "--jobs", "1", "--against", str(out))
    assert again.returncode == 0 and "no differences" in again.stdout, again.stderr
    (tmp_path / "other.json").write_text(json.dumps({name: {"registers": 1}}))
    wrong = run(str(TOOLS / "ptxas_usage.py"), "--only", "ds_probe", "--against", str(tmp_path / "other.json"))
    assert wrong.returncode == 2 and "not a --json output of this tool" in wrong.stderr


def test_read_roof_compiles_its_kernel():
    """tools/read_roof.cu, outside kernels_cu/ but on its headers, compiles with NVRTC (no GPU
    needed) for sm_90a and sm_80, for bf16 and, with DeepSelect's shapes, float32."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="needs the cu13 extra (cuda-bindings, NVRTC)")
    result = run(str(TOOLS / "read_roof.py"), "--arch", "sm_90a,sm_80", "--deepselect")
    assert result.returncode == 0, result.stderr
    for arch in ("sm_90a", "sm_80"):
        for dtype in ("bfloat16", "float32"):
            assert f"ds_read_roof_{dtype}_k0_t256_ds_unroll4 {arch}: " in result.stdout
