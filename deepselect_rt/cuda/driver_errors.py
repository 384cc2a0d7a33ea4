"""Turning cuda.bindings' (error, value...) tuples into values or a clear RuntimeError."""

from __future__ import annotations


def check(result, what: str):
    """Return the value(s) after the error code of a driver call, or raise naming the call."""
    from cuda.bindings import driver

    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        name = driver.cuGetErrorName(err)[1]
        raise RuntimeError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)
