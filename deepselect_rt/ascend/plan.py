"""Host-side tiling of the Ascend kernel: rows per core, chunk length, output tile, UB budget.

Rows go to cores in contiguous runs: core c takes ``rows_per_core`` rows plus one if
``c < rows_extra`` (kernels_ascendc/topk_stream.cpp, ``Process``), so every row is covered
exactly once. The unified buffer (UB) of one vector core must hold, at once (``ub_bytes``
mirrors the kernel's ``Init``): the chunk (and its float32 widening for bfloat16), two bit
masks, the lane index and survivor columns, the candidate heap (8 bytes per k), and the output
staging tile.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import ITEMSIZE
from ..errors import BackendUnavailableError
from .variants import normalise_arch

# UB bytes per vector core. 192 KiB on Atlas A2/A3; Ascend 950 is given the same conservative
# figure until measured (a smaller budget is always safe).
UB_BYTES = {"dav-2201": 192 * 1024, "dav-3510": 192 * 1024}
# Left to AscendC's own bookkeeping and alignment slack.
UB_RESERVE = 8 * 1024
CHUNK_ALIGN = 64          # kernels_ascendc/common/params.h DS_CHUNK_ALIGN (a float32 repeat)
CHUNKS = (16384, 8192, 4096, 2048, 1024, 512, 256, 128, 64)   # preferred first
OUT_TILE_MAX = 1024
OUT_TILE_ALIGN = 16       # keeps every staging buffer a whole number of 32-byte blocks


def _round32(n: int) -> int:
    return (n + 31) // 32 * 32


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def ub_bytes(dtype: str, chunk: int, k: int, out_tile: int) -> int:
    """UB bytes the kernel allocates for these sizes (its ``Init``, buffer by buffer)."""
    item = ITEMSIZE[dtype]
    total = _round32(chunk * item)                              # the chunk as read
    total += _round32(chunk * 4) if dtype == "bfloat16" else 0  # widened to float32
    total += 2 * _round32(chunk // 8)                           # >= floor, NaN bit masks
    total += 2 * _round32(chunk * 4)                            # lane index, survivors
    total += _round32(k * 8)                                    # candidate heap
    total += _round32(out_tile * 8) + _round32(out_tile * item)  # index and value staging
    return total + 32                                           # NaN flag word


@dataclass(frozen=True)
class Tiling:
    """block_dim: kernel blocks (one per vector core used). rows_per_core, rows_extra: the row
    split (module docstring). chunk: elements read per step. out_tile: output slots per
    copy-out. ub: UB bytes used per core."""

    block_dim: int
    rows_per_core: int
    rows_extra: int
    chunk: int
    out_tile: int
    ub: int

    def rows_of(self, core: int) -> range:
        """The rows core ``core`` processes (the kernel's ``Process`` formula)."""
        first = core * self.rows_per_core + min(core, self.rows_extra)
        return range(first, first + self.rows_per_core + (core < self.rows_extra))


def max_k(dtype: str, arch: str) -> int:
    """The largest k the kernel serves on ``arch`` (smallest chunk and output tile)."""
    budget = UB_BYTES[normalise_arch(arch)] - UB_RESERVE
    fixed = ub_bytes(dtype, CHUNKS[-1], 0, OUT_TILE_ALIGN)
    return (budget - fixed) // 8


def make_tiling(rows: int, width: int, k: int, dtype: str, arch: str, cores: int) -> Tiling:
    """The launch shape for a (rows, width) top-k on ``cores`` vector cores of ``arch``.

    rows, k >= 1; width >= 0. Chooses the largest chunk (not above the row width, rounded to
    the compare granularity) whose buffers fit the UB with the candidate heap for k. Raises
    BackendUnavailableError when k alone does not fit (naming the largest k that does),
    ValueError for an unknown arch or non-positive rows/k/cores.
    """
    if rows < 1 or k < 1 or cores < 1:
        raise ValueError(f"tiling needs rows, k and cores >= 1, got {rows}, {k}, {cores}")
    budget = UB_BYTES[normalise_arch(arch)] - UB_RESERVE
    out_tile = min(OUT_TILE_MAX, _round_up(k, OUT_TILE_ALIGN))
    widest = max(CHUNK_ALIGN, _round_up(width, CHUNK_ALIGN))
    for chunk in CHUNKS:
        if chunk > widest and chunk != CHUNKS[-1]:
            continue
        for tile in (out_tile, OUT_TILE_ALIGN):
            used = ub_bytes(dtype, chunk, k, tile)
            if used <= budget:
                block_dim = min(rows, cores)
                per_core, extra = divmod(rows, block_dim)
                return Tiling(block_dim, per_core, extra, chunk, tile, used)
    raise BackendUnavailableError(
        f"topk={k} does not fit the Ascend kernel's unified buffer on {arch} ({dtype}): the "
        f"candidate heap needs 8 bytes per k; the largest k served is {max_k(dtype, arch)}")


__all__ = ["Tiling", "UB_BYTES", "UB_RESERVE", "CHUNKS", "CHUNK_ALIGN", "ub_bytes", "max_k",
           "make_tiling"]
