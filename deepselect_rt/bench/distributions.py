"""Row distributions used by the tests, `check` and `bench`: the ordinary case and the skewed
ones that must be neither wrong nor much slower (docs/performance.md, tests/test_gpu_topk.py).

Every generator returns a ``(rows, width)`` NumPy array of the requested dtype, deterministic
for a given seed.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import numpy_dtype

NAMES = ("normal", "tiny", "huge", "all_equal", "few_distinct", "subnormal", "ascending", "descending",
         "late_large", "signed_zeros", "all_neg_inf", "few_finite", "pos_inf_clusters", "many_zeros")


def _subnormal(dtype: str) -> float:
    return {"float32": 1e-40, "float16": 1e-6, "bfloat16": 1e-40}[dtype]


def make(name: str, rows: int, width: int, dtype: str, seed: int = 0) -> np.ndarray:
    """A ``(rows, width)`` array of distribution ``name`` (one of NAMES) in ``dtype``."""
    rng = np.random.default_rng(seed)
    shape = (rows, width)
    col = np.broadcast_to(np.arange(width, dtype=np.float64), shape)
    if name == "normal":
        x = rng.standard_normal(shape, dtype=np.float32)
    elif name == "tiny":
        x = rng.standard_normal(shape, dtype=np.float32) * 1e-4
    elif name == "huge":
        x = rng.standard_normal(shape, dtype=np.float32) * 1e4
    elif name == "all_equal":
        x = np.full(shape, 0.5, np.float32)
    elif name == "few_distinct":
        x = rng.integers(-2, 3, shape).astype(np.float32)
    elif name == "subnormal":
        x = rng.integers(1, 50, shape).astype(np.float32) * _subnormal(dtype)
    elif name == "ascending":
        x = col / max(width, 1)
    elif name == "descending":
        x = -col / max(width, 1)
    elif name == "late_large":
        # Large values in the last 1/16 of the row: the blocks a sequential scan would see last.
        x = rng.standard_normal(shape, dtype=np.float32)
        x[:, width - width // 16:] += 100
    elif name == "signed_zeros":
        x = np.where(rng.random(shape) < 0.5, -0.0, 0.0).astype(np.float32)
        x[rng.random(shape) < 0.01] = 1.0
    elif name == "all_neg_inf":
        x = np.full(shape, -np.inf, np.float32)
    elif name == "few_finite":
        x = np.full(shape, -np.inf, np.float32)
        x[rng.random(shape) < 0.001] = 1.0
    elif name == "pos_inf_clusters":
        x = rng.standard_normal(shape, dtype=np.float32)
        for r in range(rows):
            start = rng.integers(0, max(width - 64, 1))
            x[r, start:start + 64] = np.inf
    elif name == "many_zeros":
        x = rng.standard_normal(shape, dtype=np.float32)
        x[rng.random(shape) < 0.9] = 0.0
    else:
        raise ValueError(f"unknown distribution {name!r}; known: {', '.join(NAMES)}")
    return np.asarray(x, dtype=np.float32).astype(numpy_dtype(dtype))
