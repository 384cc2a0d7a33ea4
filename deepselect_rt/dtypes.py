"""Canonical dtype names and their conversion from strings, NumPy, torch, JAX and CuPy dtypes.

Everything below the API works with the canonical names only ("bfloat16", "float16", "float32",
"int32", "int64", ...), so no module below ``interop/`` needs to know a framework.
"""

from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

INPUT_DTYPES = ("bfloat16", "float16", "float32")
INDEX_DTYPES = ("int32", "int64")
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8, "uint8": 1,
            "int8": 1, "int16": 2, "uint16": 2, "uint32": 4, "uint64": 8, "float64": 8, "bool": 1}


# torch-style short names ("half", "long") and the module prefixes a dtype string may carry.
_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "int": "int32", "long": "int64",
            "double": "float64"}
_STRING_PREFIXES = ("", "torch", "numpy", "np", "jnp", "jax.numpy", "cupy", "cp", "ml_dtypes")


def canonical(dtype) -> str:
    """Return the canonical name of ``dtype``.

    Accepts a string ("int32", "torch.int32"), a NumPy dtype or scalar type, an ml_dtypes
    bfloat16, a torch dtype, a JAX dtype (``jnp.int32``) or a CuPy scalar type. Raises
    ``TypeError`` for anything else.
    """
    if isinstance(dtype, str):
        prefix, _, name = dtype.rpartition(".")
        if prefix not in _STRING_PREFIXES:
            raise TypeError(f"unsupported dtype {dtype!r}")
        name = name.lower()
        if name not in ITEMSIZE and name not in _ALIASES:
            try:  # NumPy's own spellings: "i4", "<f4", "float_"
                name = np.dtype(name).name
            except TypeError:
                raise TypeError(f"unsupported dtype {dtype!r}") from None
    elif type(dtype).__module__.startswith("torch"):
        name = str(dtype).rsplit(".", 1)[-1]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            inner = getattr(dtype, "dtype", None)
            if inner is None:
                raise TypeError(f"not a dtype: {dtype!r}") from None
            name = np.dtype(inner).name
    name = _ALIASES.get(name, name)
    if name not in ITEMSIZE:
        raise TypeError(f"unsupported dtype {dtype!r}")
    return name


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype for a canonical name (bfloat16 through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def double_bits(value: float) -> int:
    """A float's float64 bit pattern as a signed int64: carries a fill exactly (a NaN keeps its
    sign and payload, -0.0 stays apart from +0.0) through metadata, JSON or a hashable key."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


def from_double_bits(bits: int) -> float:
    """The float whose float64 bit pattern is ``bits`` (``double_bits``' inverse)."""
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def fill_bits(value: float, dtype: str) -> int:
    """Bit pattern of ``value`` cast to input dtype ``dtype`` (-inf in bfloat16: 0xFF80), for the
    kernels' fill argument. Beyond the dtype's range it is the dtype's infinity, as a cast gives
    (contract.md), without NumPy's overflow warning."""
    # Memoised on the double's bits, as launch paths are hot: keyed on the float, -0.0 would
    # find +0.0's pattern (they compare equal) and each NaN object would miss.
    return _fill_bits(struct.pack("<d", value), dtype)


@lru_cache(maxsize=64)
def _fill_bits(double: bytes, dtype: str) -> int:
    with np.errstate(over="ignore"):
        arr = np.array(struct.unpack("<d", double), dtype=numpy_dtype(dtype))
    return int(arr.view(np.uint16 if arr.itemsize == 2 else np.uint32)[0])
