"""XLA FFI handlers in Python (interop/xla_ffi_handler.py) on JAX's CPU backend: the frame's
buffers, dimensions and string attributes, and an exception turned into XLA's error."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from deepselect_rt.interop import xla_ffi_handler  # noqa: E402

seen = []


def _execute(frame: xla_ffi_handler.Frame) -> None:
    seen.append((frame.attrs, frame.shapes("args"), frame.shapes("rets")))
    if frame.attrs["mode"] == "fail":
        raise ValueError("the test asked for a failure")
    (a, b), (a_shape, b_shape) = frame.args, frame.shapes("args")
    n = int(np.prod(a_shape))
    first = np.ctypeslib.as_array(ctypes.cast(a, ctypes.POINTER(ctypes.c_float)), (n,))
    second = np.ctypeslib.as_array(ctypes.cast(b, ctypes.POINTER(ctypes.c_int32)), b_shape)
    out = np.ctypeslib.as_array(ctypes.cast(frame.rets[0], ctypes.POINTER(ctypes.c_float)), (n,))
    out[:] = first * 2 + second.sum()


jax.ffi.register_ffi_target("deepselect_rt_test_handler", xla_ffi_handler.capsule(_execute), platform="cpu")


def _call(a, b, mode):
    out = jax.ShapeDtypeStruct(a.shape, a.dtype)
    return jax.ffi.ffi_call("deepselect_rt_test_handler", out)(a, b, mode=mode, note="ü text")


def test_handler_sees_buffers_shapes_and_attributes():
    seen.clear()
    a = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    b = jnp.array([1, 2, 3, 4, 5], jnp.int32)
    got = jax.jit(_call, static_argnums=2)(a, b, "ok")
    np.testing.assert_array_equal(np.asarray(got), np.arange(12, dtype=np.float32).reshape(3, 4) * 2 + 15)
    assert seen == [({"mode": "ok", "note": "ü text"}, [(3, 4), (5,)], [(3, 4)])]


def test_handler_exception_fails_the_computation_with_its_text():
    a, b = jnp.zeros((2, 2), jnp.float32), jnp.zeros(1, jnp.int32)
    with pytest.raises(Exception, match="deepselect-rt: ValueError: the test asked for a failure"):
        jax.block_until_ready(jax.jit(_call, static_argnums=2)(a, b, "fail"))
