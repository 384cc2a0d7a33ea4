"""What the backend needs to know about one NPU: its arch and how many vector cores it has."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

from ..errors import BackendUnavailableError

# SoC name prefixes (``acl.get_soc_name()``) -> bisheng --npu-arch. Atlas A2 is Ascend910B*,
# Atlas A3 is Ascend910_93*, Ascend 950 is Ascend950*.
_ARCH_OF_SOC = (("Ascend910B", "dav-2201"), ("Ascend910_93", "dav-2201"), ("Ascend950", "dav-3510"))
# When torch_npu does not report the vector-core count: the largest of the arch's products.
# Launching more blocks than cores is still correct (blocks run in waves), only slower.
_DEFAULT_VECTOR_CORES = {"dav-2201": 48, "dav-3510": 64}


@dataclass(frozen=True)
class NpuInfo:
    """ordinal: torch_npu device index. soc: SoC name. arch: bisheng --npu-arch. vector_cores:
    AI Core vector units the kernel's blocks are spread over."""

    ordinal: int
    soc: str
    arch: str
    vector_cores: int


def arch_of_soc(soc: str) -> str:
    """The NPU arch of SoC ``soc``. Raises BackendUnavailableError for SoCs without kernels."""
    for prefix, arch in _ARCH_OF_SOC:
        if soc.startswith(prefix):
            return arch
    raise BackendUnavailableError(
        f"no deepselect-rt kernels for the NPU {soc!r}; supported: Atlas A2/A3 (Ascend910B*, "
        "Ascend910_93*, dav-2201) and Ascend 950 (dav-3510)")


@functools.lru_cache(maxsize=None)
def info(ordinal: int) -> NpuInfo:
    """Properties of NPU ``ordinal`` (read once). Needs acl and torch_npu imported."""
    import acl

    soc = acl.get_soc_name()
    arch = arch_of_soc(soc)
    props = sys.modules["torch_npu"].npu.get_device_properties(ordinal)
    cores = int(getattr(props, "vector_core_num", 0) or _DEFAULT_VECTOR_CORES[arch])
    return NpuInfo(ordinal, soc, arch, cores)


__all__ = ["NpuInfo", "arch_of_soc", "info"]
