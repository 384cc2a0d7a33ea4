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


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def _execute(frame: xla_ffi_handler.Frame) -> None:
    seen.append((frame.attrs, frame.shapes("args"), frame.shapes("rets")))
    if frame.attrs["mode"] == "fail":
        raise ValueError("the test asked for a failure")
    if frame.attrs["mode"] == "interrupt":
        raise KeyboardInterrupt
    if frame.attrs["mode"] == "unprintable":
        raise _Unprintable()
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


@pytest.mark.parametrize("mode, text", [("fail", "deepselect-rt: ValueError: the test asked for a failure"),
                                        ("interrupt", "deepselect-rt: KeyboardInterrupt"),
                                        ("unprintable", "_Unprintable \\(its message could not be formatted\\)")])
def test_handler_exception_fails_the_computation_with_its_text(mode, text):
    """Every exception, KeyboardInterrupt and one whose text fails included, becomes XLA's error:
    the computation raises and the process lives on."""
    a, b = jnp.zeros((2, 2), jnp.float32), jnp.zeros(1, jnp.int32)
    with pytest.raises(Exception, match=text):
        jax.block_until_ready(jax.jit(_call, static_argnums=2)(a, b, mode))
    got = jax.jit(_call, static_argnums=2)(a, b, "ok")  # the handler still works
    np.testing.assert_array_equal(np.asarray(got), np.zeros((2, 2), np.float32))
