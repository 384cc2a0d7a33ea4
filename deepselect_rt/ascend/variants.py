"""What the Ascend backend can compile: one variant per input dtype, one entry point each.

k, the index type, begin/end/offsets, sorting and the NaN policy are kernel arguments (see
``launch.py``), not variants, so each NPU arch needs three binaries.
"""

from __future__ import annotations

from ..dtypes import INPUT_DTYPES
from ..jit.spec import DTYPE_CODE, KernelSpec

# NPU architectures the kernels target (bisheng's --npu-arch values): Atlas A2/A3 (Ascend 910B,
# 910_93) and Ascend 950.
SUPPORTED_ARCHS = ("dav-2201", "dav-3510")


def stream_variant(dtype: str) -> KernelSpec:
    """The streaming kernel (kernels_ascendc/topk_stream.cpp) for ``dtype``."""
    if dtype not in DTYPE_CODE:
        raise TypeError(f"the Ascend kernel takes {', '.join(DTYPE_CODE)} input, got {dtype}")
    return KernelSpec("topk_stream", dtype, backend="ascend")


def default_variants(dtypes=None) -> list[KernelSpec]:
    """What ``warmup --npu-arch`` builds: the streaming kernel for each (given) input dtype."""
    return [stream_variant(d) for d in INPUT_DTYPES if not dtypes or d in dtypes]


def normalise_arch(arch: str) -> str:
    """The canonical NPU arch name: "dav-2201", "DAV_2201" and "2201" give "dav-2201".

    Raises ValueError naming the supported archs for anything else.
    """
    text = str(arch).strip().lower().replace("_", "-")
    name = text if text.startswith("dav-") else f"dav-{text}"
    if name not in SUPPORTED_ARCHS:
        raise ValueError(f"unknown NPU architecture {arch!r}; use one of {', '.join(SUPPORTED_ARCHS)}")
    return name


__all__ = ["SUPPORTED_ARCHS", "stream_variant", "default_variants",
           "normalise_arch"]
