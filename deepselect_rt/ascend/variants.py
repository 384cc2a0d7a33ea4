"""What the Ascend backend can compile: one variant per input dtype, one entry point each.

k, the index type, begin/end/offsets, sorting and the NaN policy are kernel arguments (see
``args.py``), not variants, so each NPU arch needs three binaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import INPUT_DTYPES

# Compile-time codes of the input dtypes, shared with kernels_ascendc/common/dtype.h (and the
# same numbers as the CUDA backend's).
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}

# NPU architectures the kernels target (bisheng's --npu-arch values): Atlas A2/A3 (Ascend 910B,
# 910_93) and Ascend 950.
SUPPORTED_ARCHS = ("dav-2201", "dav-3510")


@dataclass(frozen=True)
class Variant:
    """One compilable Ascend kernel.

    family: the source file ``kernels_ascendc/<family>.cpp``. dtype: input dtype (canonical
    name). extra: further (name, value) defines, sorted (none yet; kept so that cache keys and
    metadata have the same shape as the CUDA variants').
    """

    family: str
    dtype: str
    extra: tuple = field(default=())

    @property
    def source(self) -> str:
        return f"{self.family}.cpp"

    @property
    def entry(self) -> str:
        parts = [self.family, self.dtype, *(f"{k.lower()}{v}" for k, v in self.extra)]
        return "ds_npu_" + "_".join(parts)

    @property
    def defines(self) -> dict:
        d = {"DS_ENTRY": self.entry, "DS_DTYPE": str(DTYPE_CODE[self.dtype])}
        d.update({k: str(v) for k, v in self.extra})
        return d

    def describe(self) -> str:
        return self.entry


def stream_variant(dtype: str) -> Variant:
    """The streaming kernel (kernels_ascendc/topk_stream.cpp) for ``dtype``."""
    if dtype not in DTYPE_CODE:
        raise TypeError(f"the Ascend kernel takes {', '.join(DTYPE_CODE)} input, got {dtype}")
    return Variant("topk_stream", dtype)


def default_variants(dtypes=None) -> list[Variant]:
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


__all__ = ["Variant", "DTYPE_CODE", "SUPPORTED_ARCHS", "stream_variant", "default_variants",
           "normalise_arch"]
