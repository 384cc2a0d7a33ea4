"""Where the shipped kernel sources and the pre-built cache live, from a wheel or a checkout.

In a wheel, ``kernels_cu/``, ``kernels_ascendc/`` and ``cache/`` are mapped into the package as
``deepselect_rt/kernels_cu`` etc. (pyproject.toml); in a source checkout or an editable install
they are plain folders beside the package. NVRTC and the cache key read them as real files, so
the folders are located on disk directly (``importlib.resources`` gives a ``MultiplexedPath``,
not a folder, for these data-only packages).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent
# package subfolder in a wheel -> folder in a checkout
_FOLDERS = {"kernels_cu": "kernels_cu", "kernels_ascendc": "kernels_ascendc", "prebuilt": "cache"}


def _folder(name: str) -> Path:
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _CHECKOUT / _FOLDERS[name]


def cuda_source_dir() -> Path:
    """Folder holding the CUDA C++ kernel sources (``*.cu``) and headers (``*.cuh``)."""
    return _folder("kernels_cu")


def ascendc_source_dir() -> Path:
    """Folder holding the Ascend C kernel sources."""
    return _folder("kernels_ascendc")


def prebuilt_cache_dir() -> Path:
    """The read-only cache layer shipped inside the wheel (filled by ``warmup --into cache/``)."""
    return _folder("prebuilt")
