"""Checks a built wheel: pure Python (py3-none-any), holds every kernel source, no compiled file.

Usage: python tools/inspect_wheel.py dist/deepselect_rt-*.whl
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

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
    for p in problems:
        print(p)
    kernels = sum(1 for n in names if n.startswith("deepselect_rt/kernels_"))
    print(f"{wheel.name}: {len(names)} files, {kernels} kernel sources, {'FAILED' if problems else 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
