"""The project's kernel cache (``deepselect_rt.cache``) for Ascend binaries.

Same roots, layers, atomic writes, locks and maintenance as the CUDA cubins; entries live under
their NPU arch (``v1/dav-2201/...``). The key holds the CANN version, the compiler (aclrtc or
bisheng), the arch, the variant, the portable options and a digest of ``kernels_ascendc/``, so a
CANN upgrade or a kernel edit misses cleanly.
"""

from __future__ import annotations

from pathlib import Path

from .. import resources
from ..cache import KernelCache, default_cache
from ..cache_key import cache_key, toolchain_key_fields
from . import compiler, probe
from .variants import normalise_arch


class AscendKernelCache(KernelCache):
    """KernelCache whose entries are Ascend binaries compiled by aclrtc or bisheng.

    stack: the Ascend stack to compile with (default: detected on first use). Other arguments
    as KernelCache's.
    """

    def __init__(self, root=None, read_only=None, *, max_bytes=None, source_dir=None,
                 stack: probe.AscendStack | None = None):
        super().__init__(root, read_only, max_bytes=max_bytes, source_dir=source_dir)
        self._stack = stack

    @property
    def source_dir(self) -> Path:
        return self._source_dir if self._source_dir is not None else resources.ascendc_source_dir()

    @property
    def stack(self) -> probe.AscendStack:
        """The Ascend stack; BackendUnavailableError when CANN or a compiler is missing."""
        if self._stack is None:
            self._stack = probe.require_compiler()
        return self._stack

    def key_for(self, variant, arch: str) -> tuple[str, dict]:
        """(cache key, key fields) of ``variant`` on NPU ``arch``.

        Raises ValueError for an unknown arch, BackendUnavailableError without CANN/compiler.
        """
        arch = normalise_arch(arch)
        kind = compiler.compiler_kind(self.stack)
        options = compiler.compile_options(variant, arch, kind, self.source_dir)
        toolchain = {"cann": self.stack.cann_version, "compiler": kind}
        fields = toolchain_key_fields(variant, arch, options.portable, toolchain, self.source_dir,
                                      compiler.SOURCE_SUFFIXES)
        return cache_key(fields), fields

    def _compile(self, variant, arch: str) -> tuple[bytes, float]:
        result = compiler.compile_binary(variant, arch, self.source_dir, self.stack)
        return result.binary, result.seconds


def ascend_cache(into: Path | None = None) -> AscendKernelCache:
    """The process-wide Ascend cache for the current environment, or one that fills exactly the
    root ``into`` (``warmup --into``: nothing else is searched)."""
    if into is not None:
        return AscendKernelCache(into, read_only=[])
    return default_cache(AscendKernelCache)


__all__ = ["AscendKernelCache", "ascend_cache"]
