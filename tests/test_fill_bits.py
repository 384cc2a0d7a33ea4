"""The value fill in the kernels' argument blocks (CUDA and Ascend), on the CPU: a fill beyond
the input dtype's range becomes its infinity, as a cast would (contract.md), and packing it
warns about nothing."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

from deepselect_rt import dtypes
from deepselect_rt.ascend import launch as args
from deepselect_rt.ascend import plan as tiling
from deepselect_rt.cuda import launch
from deepselect_rt.request import TopkRequest
from deepselect_rt.interop.views import view_of

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def _request(dtype, val_fill: float) -> TopkRequest:
    x = np.zeros((2, 8), DTYPES[dtype])
    return TopkRequest(view_of(x), 3, None, None, None, "int64", False, False, True, "sentinel", -1, val_fill,
                       view_of(np.zeros((2, 3), np.int64)), view_of(np.zeros((2, 3), x.dtype)), 0)


PACKERS = {
    "cuda": launch.pack,
    "ascend": lambda req: args.pack(req, tiling.make_tiling(2, 8, 3, req.x.dtype, "dav-2201", 2)),
}


@pytest.mark.parametrize("packer", PACKERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [1e6, -1e6, 1e40])
def test_fill_beyond_the_dtype_packs_its_infinity_without_a_warning(packer, dtype, value):
    with np.errstate(over="ignore"):  # NumPy's own cast, the oracle
        cast = np.array(value).astype(DTYPES[dtype])
    want = int(cast.view(np.uint16 if cast.itemsize == 2 else np.uint32))
    if abs(value) > float(np.finfo(DTYPES[dtype]).max):
        infinity = np.array(np.copysign(np.inf, value), DTYPES[dtype])
        assert want == int(infinity.view(np.uint16 if cast.itemsize == 2 else np.uint32))
    dtypes._fill_bits.cache_clear()  # a memoised pattern would skip the cast, and so its warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        params = PACKERS[packer](_request(dtype, value))
    assert params.val_fill_bits == want


@pytest.mark.parametrize("dtype", DTYPES)
def test_fills_equal_as_floats_keep_their_own_bits(dtype):
    """-0.0 after +0.0 (and the reverse) packs its own sign: the memo must not take the two
    zeros, which compare equal, for one value. The oracle is NumPy's cast of each value."""
    view = np.uint16 if np.dtype(DTYPES[dtype]).itemsize == 2 else np.uint32
    for order in ((0.0, -0.0), (-0.0, 0.0)):
        dtypes._fill_bits.cache_clear()
        for value in order:
            want = int(np.array(value, DTYPES[dtype]).view(view))
            assert launch.pack(_request(dtype, value)).val_fill_bits == want
    assert dtypes.fill_bits(-0.0, dtype) != dtypes.fill_bits(0.0, dtype)
