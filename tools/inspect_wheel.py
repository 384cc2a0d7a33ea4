"""Checks a built wheel: pure Python (py3-none-any), holds every kernel source, no compiled file,
and, installed on its own (outside the checkout), finds its kernel sources and compiles a kernel.

Usage: python tools/inspect_wheel.py dist/deepselect_rt-*.whl
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Run from an empty folder with only the installed wheel (and the environment's dependencies) on
# the path: the source folders must come from the wheel, and a kernel must compile from them.
_SMOKE = """
from deepselect_rt.jit import env
from deepselect_rt.cuda import nvrtc, variants
src = env.cuda_source_dir()
assert src.is_relative_to(TARGET), f"kernel sources found outside the wheel: {src}"
assert (src / "topk_stream.cu").is_file(), f"no topk_stream.cu in {src}"
assert (env.ascendc_source_dir()).is_dir()
try:
    result = nvrtc.compile_cubin(variants.stream_variant("bfloat16", 512), "sm_90a")
except Exception as exc:  # no NVRTC in this environment: the folder checks above still ran
    print("installed wheel: sources found; compile skipped:", type(exc).__name__, exc)
else:
    assert result.cubin[:4] == b"\x7fELF"
    print("installed wheel: sources found, a kernel compiled")
"""


def smoke(wheel: Path) -> list[str]:
    """Install ``wheel`` alone into a temporary folder and run _SMOKE from elsewhere."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        str(wheel)], check=True)
        env = {**os.environ, "PYTHONPATH": str(target), "DEEPSELECT_RT_CACHE_DIR": str(Path(tmp) / "cache")}
        run = subprocess.run([sys.executable, "-c", f"TARGET = {str(target)!r}\n" + _SMOKE], cwd=tmp, env=env,
                             capture_output=True, text=True)
        print(run.stdout.strip())
        return [] if run.returncode == 0 else [f"installed wheel fails: {run.stderr.strip()[-2000:]}"]

SOURCES = (".cu", ".cuh", ".h", ".hpp", ".cpp")
COMPILED = (".so", ".pyd", ".dll", ".dylib", ".o", ".a", ".cubin", ".fatbin", ".ptx", ".pyc")


def main(path: str) -> int:
    repo = Path(__file__).resolve().parents[1]
    wheel = Path(path)
    problems = []
    if not wheel.name.endswith("-py3-none-any.whl"):
        problems.append(f"not a pure-Python wheel: {wheel.name}")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, package in (("kernels_cu", "kernels_cu"), ("kernels_ascendc", "kernels_ascendc")):
        for src in sorted((repo / folder).rglob("*")):
            if src.is_file() and src.suffix in SOURCES:
                inside = f"deepselect_rt/{package}/{src.relative_to(repo / folder).as_posix()}"
                if inside not in names:
                    problems.append(f"missing kernel source {inside}")
    problems += [f"compiled file in wheel: {n}" for n in sorted(names) if n.endswith(COMPILED)]
    if "deepselect_rt/api.py" not in names:
        problems.append("package code missing (deepselect_rt/api.py)")
    if not problems:
        problems += smoke(wheel)
    for p in problems:
        print(p)
    kernels = sum(1 for n in names if n.startswith("deepselect_rt/kernels_"))
    print(f"{wheel.name}: {len(names)} files, {kernels} kernel sources, {'FAILED' if problems else 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", help="the built wheel, e.g. dist/deepselect_rt-*.whl")
    wheel = parser.parse_args().wheel
    if not Path(wheel).is_file():
        sys.exit(f"tools/inspect_wheel.py: no wheel at {wheel} (build one: python -m build --wheel)")
    sys.exit(main(wheel))
