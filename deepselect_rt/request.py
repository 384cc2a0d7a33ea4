"""A validated top-k call: what every backend receives (built by eager.py, consumed by backends).

Everything here is framework-neutral: tensors are TensorViews, dtypes canonical names.
"""

from __future__ import annotations

from dataclasses import dataclass

from .interop.views import TensorView

NAN_POLICIES = ("raise", "raise_sync", "sentinel", "propagate")


# Not frozen (built once per call on the launch path: ~5 us frozen, <1 us not); never mutated.
@dataclass(slots=True)
class TopkRequest:
    x: TensorView                  # (rows, width) input
    k: int
    begin: TensorView | None       # (rows,) int32/int64
    end: TensorView | None
    offsets: TensorView | None
    index_dtype: str               # "int32" | "int64"
    sorted: bool
    sorted_index: bool
    return_value: bool
    nan_policy: str                # one of NAN_POLICIES
    idx_fill: int
    val_fill: float
    out_idx: TensorView            # (rows, k), written in place
    out_val: TensorView | None     # (rows, k) or None when values are not returned
    stream: int                    # CUDA stream handle (0 = legacy default); unused on the host
    # The serving options (contract.md, "Serving"); the defaults give the plain top-k.
    page_table: TensorView | None = None    # (batch, max_pages) int32
    page_size: int = 0                      # > 0 with page_table
    row_to_batch: TensorView | None = None  # (rows,) int32/int64: a row's page-table row
    k_per_row: TensorView | None = None     # (rows,) int32/int64: a row's own k <= k
    out_raw: TensorView | None = None       # (rows, k) indices before the page lookup, or None
    relative: bool = False                  # indices count from each row's begin (ragged_topk)

    @property
    def rows(self) -> int:
        return self.x.shape[0]

    @property
    def width(self) -> int:
        return self.x.shape[1]
