"""The examples run and pass their own checks: on the CPU (torch CPU tensors, the reference
backend), and on a GPU (marked gpu)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RUNS = [("dsa_decode.py", []), ("dsa_decode.py", ["--batch", "5", "--page-size", "1", "--topk", "96"]),
        ("sample.py", ["--vocab", "4000"]), ("dsa_decode.py", ["--max-len", "10"]),
        ("sample.py", ["--vocab", "20", "--max-k", "20"])]


def run(script: str, args: list[str]) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("script,args", RUNS)
def test_example_on_the_cpu(script, args):
    pytest.importorskip("torch")
    assert " ok on cpu" in run(script, [*args, "--device", "cpu"])


NON_POSITIVE = [("dsa_decode.py", "--batch", "0"), ("dsa_decode.py", "--max-len", "-1"),
                ("dsa_decode.py", "--page-size", "0"), ("dsa_decode.py", "--topk", "0"),
                ("sample.py", "--batch", "-3"), ("sample.py", "--vocab", "0"), ("sample.py", "--max-k", "0"),
                *[("vocab_parallel_sampling.py", option, "0")
                  for option in ("--vocab", "--hidden", "--rows", "--k", "--steps", "--temperature")],
                ("vocab_parallel_sampling.py", "--temperature", "nan")]


@pytest.mark.parametrize("script,option,value", NON_POSITIVE)
def test_example_refuses_a_non_positive_number(script, option, value):
    """A usage error naming the option and what it takes, before any work, rather than a traceback."""
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, str(EXAMPLES / script), option, value], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert f"error: argument {option}: expected a positive" in done.stderr


def test_sample_refuses_a_k_above_the_vocabulary():
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, str(EXAMPLES / "sample.py"), "--vocab", "10"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "error: argument --max-k: expected at most --vocab (10), got 50" in done.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("script,args", RUNS + [("dsa_decode.py", ["--batch", "64", "--max-len", "20000",
                                                                    "--topk", "2048", "--page-size", "64"])])
def test_example_on_the_gpu(script, args):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    assert " ok on cuda" in run(script, [*args, "--device", "cuda"])
