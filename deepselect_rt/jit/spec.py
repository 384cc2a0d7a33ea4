"""What a kernel build is, for every backend: the spec type, dtype codes and runtime flag bits.

A ``KernelSpec`` is a kernel family (one source file) specialised at compile time by
preprocessor defines; it names one binary with one entry point. The CUDA and Ascend backends
build the same type (``backend`` tells which), the cache keys and stores it the same way, and
the dtype codes and flag bits below are the numbers both kernel trees read
(``kernels_cu/common/dtype.cuh``, ``params.cuh``; ``kernels_ascendc/common/dtype.h``,
``params.h``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Compile-time codes of the input dtypes (DS_DTYPE).
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}

# Runtime flag bits of the argument block (DS_F_* in the kernel headers).
F_SORTED, F_IDX64, F_BEGIN64, F_END64, F_OFF64, F_VALUES, F_NAN_SENTINEL = 1, 2, 4, 8, 16, 32, 64
FLAGS = {"DS_F_SORTED": F_SORTED, "DS_F_IDX64": F_IDX64, "DS_F_BEGIN64": F_BEGIN64,
         "DS_F_END64": F_END64, "DS_F_OFF64": F_OFF64, "DS_F_VALUES": F_VALUES,
         "DS_F_NAN_SENTINEL": F_NAN_SENTINEL}
# The serving options' bits, read by the CUDA kernels only (kernels_cu/common/params.cuh; the
# Ascend backend refuses these options): row_to_batch and k_per_row int64, indices counted from
# each row's begin (ragged rows).
F_R2B64, F_KROW64, F_RELATIVE = 128, 256, 512
SERVING_FLAGS = {"DS_F_R2B64": F_R2B64, "DS_F_KROW64": F_KROW64, "DS_F_RELATIVE": F_RELATIVE}

# backend -> (source suffix, entry prefix)
_SOURCES = {"cuda": (".cu", "ds_"), "ascend": (".cpp", "ds_npu_")}


def flags_of(req) -> int:
    """The flag bits of a ``request.TopkRequest``. Every policy but "propagate" writes the
    sentinel into NaN rows; the raising ones also pass the kernel a NaN record. ``k_per_row``
    sorts by value: a row's best k_i are then its first k_i slots (contract.md)."""
    flags = F_SORTED * (req.sorted or req.k_per_row is not None) | F_IDX64 * (req.index_dtype == "int64")
    flags |= F_VALUES * req.return_value | F_NAN_SENTINEL * (req.nan_policy != "propagate")
    flags |= F_RELATIVE * req.relative
    for view, bit in ((req.begin, F_BEGIN64), (req.end, F_END64), (req.offsets, F_OFF64),
                      (req.row_to_batch, F_R2B64), (req.k_per_row, F_KROW64)):
        if view is not None and view.dtype == "int64":
            flags |= bit
    return flags


@dataclass(frozen=True)
class KernelSpec:
    """One compilable kernel.

    family: the source file (``kernels_cu/<family>.cu`` or ``kernels_ascendc/<family>.cpp``).
    dtype: input dtype (canonical name), or "" for dtype-free kernels.
    kmax: the largest k this build serves (CUDA: its shared-memory buffer is sized from it); 0
        if the family does not depend on k.
    threads: threads per CTA (CUDA: compiled in as the launch bound).
    extra: further (name, value) defines, sorted, for family-specific tuning.
    min_sm: the oldest CUDA arch (80, 90, ...) the source compiles for; 0 for every arch.
    backend: "cuda" or "ascend".
    """

    family: str
    dtype: str = ""
    kmax: int = 0
    threads: int = 256
    extra: tuple = field(default=())
    min_sm: int = 0
    backend: str = "cuda"

    @property
    def source(self) -> str:
        return self.family + _SOURCES[self.backend][0]

    @property
    def entry(self) -> str:
        if self.backend == "cuda":
            parts = [self.family, self.dtype or "any", f"k{self.kmax}", f"t{self.threads}"]
        else:  # the Ascend kernels take k and the tiling as arguments
            parts = [self.family, self.dtype]
        parts += [f"{k.lower()}{v}" for k, v in self.extra]
        return _SOURCES[self.backend][1] + "_".join(parts)

    @property
    def defines(self) -> dict:
        d = {"DS_ENTRY": self.entry}
        if self.backend == "cuda":
            d.update(DS_THREADS=str(self.threads), DS_KMAX=str(self.kmax))
        if self.dtype:
            d["DS_DTYPE"] = str(DTYPE_CODE[self.dtype])
        d.update({k: str(v) for k, v in self.extra})
        return d

    def builds_for(self, arch: str) -> bool:
        """Whether the kernel exists for CUDA ``arch`` (e.g. "sm_90a"): clusters need sm_90."""
        return self.backend != "cuda" or arch_number(arch) >= self.min_sm


def arch_number(arch: str) -> int:
    """90 for "sm_90a", 120 for "sm_120", 80 for "compute_80" (PTX)."""
    return int(arch.removeprefix("compute_").removeprefix("sm_").rstrip("abf"))


__all__ = ["KernelSpec", "DTYPE_CODE", "FLAGS", "SERVING_FLAGS", "F_SORTED", "F_IDX64", "F_BEGIN64", "F_END64", "F_OFF64",
           "F_VALUES", "F_NAN_SENTINEL", "F_R2B64", "F_KROW64", "F_RELATIVE", "flags_of", "arch_number"]
