"""Where the shipped kernel sources and the pre-built cache live, from a wheel or a checkout.

In a wheel, ``kernels_cu/``, ``kernels_ascendc/`` and ``cache/`` are mapped into the package as
``deepselect_rt.kernels_cu`` etc. (pyproject.toml); in a source checkout run with
``PYTHONPATH=.`` they are plain folders beside the package.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
_FOLDERS = {"kernels_cu": "kernels_cu", "kernels_ascendc": "kernels_ascendc", "prebuilt": "cache"}


def _folder(name: str) -> Path:
    try:
        found = importlib.resources.files(f"deepselect_rt.{name}")
        path = Path(str(found))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return _CHECKOUT / _FOLDERS[name]


def cuda_source_dir() -> Path:
    """Folder holding the CUDA C++ kernel sources (``*.cu``) and headers (``*.cuh``)."""
    return _folder("kernels_cu")


def ascendc_source_dir() -> Path:
    """Folder holding the Ascend C kernel sources."""
    return _folder("kernels_ascendc")


def prebuilt_cache_dir() -> Path:
    """The read-only cache layer shipped inside the wheel (filled by ``warmup --into cache/``)."""
    return _folder("prebuilt")
