"""TensorView ingestion (torch fast path, NumPy, DLPack versioned and legacy), host views and
output allocation, on CPU. The CUDA and CuPy paths need a GPU and are not exercised here."""

from __future__ import annotations

import gc
import subprocess
import sys
import warnings
import weakref

import ml_dtypes
import numpy as np
import pytest

from deepselect_rt.interop import views as tensors
from deepselect_rt.interop.outputs import allocate, current_stream
from deepselect_rt.interop.views import INDEX_DTYPES_TEXT, host_array, view_of
from gpu_helpers import Producer

NUMPY_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.int64]
FIELDS = ("ptr", "shape", "strides", "dtype", "device_type", "device_id", "writable")


class LegacyProducer(Producer):
    """A pre-DLPack-1.0 producer: ``max_version`` is an unexpected keyword."""

    def __dlpack__(self, *, stream=None):
        return self.inner.__dlpack__(stream=stream)


def fields(view):
    return {f: getattr(view, f) for f in FIELDS}


def test_import_loads_no_framework():
    code = ("import sys, deepselect_rt.interop.outputs; "
            "print([m for m in ('torch', 'jax', 'cupy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- NumPy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_contiguous(dtype):
    a = np.arange(32).astype(dtype).reshape(4, 8)
    v = view_of(a)
    assert v.ptr == a.ctypes.data == a.__array_interface__["data"][0]
    assert (v.shape, v.strides) == ((4, 8), (8, 1))
    assert v.dtype == np.dtype(dtype).name
    assert v.itemsize == np.dtype(dtype).itemsize
    assert (v.device_type, v.device_id, v.framework, v.is_cuda) == ("cpu", 0, "numpy", False)
    assert v.obj is a and v.writable


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_strided_and_host_array_shares_memory(dtype):
    a = np.arange(32).astype(dtype).reshape(4, 8)
    cols = view_of(a[:, :5])
    assert (cols.ptr, cols.shape, cols.strides) == (a.ctypes.data, (4, 5), (8, 1))
    rows = view_of(a[1::2, 2:])
    assert rows.ptr == a.ctypes.data + (8 + 2) * a.itemsize
    assert (rows.shape, rows.strides) == ((2, 6), (16, 1))
    h = host_array(rows)
    assert h.dtype == np.dtype(dtype)
    h[1, 0] = 99
    assert a[3, 2] == 99


def test_numpy_readonly_and_misaligned_strides():
    a = np.zeros((2, 4), np.float32)
    a.setflags(write=False)
    assert not view_of(a).writable
    raw = np.zeros(33, np.uint8)[1:].view(np.float32)  # fine: whole elements
    assert view_of(raw).strides == (1,)
    odd = np.lib.stride_tricks.as_strided(np.zeros(16, np.float32), (2, 2), (6, 4))
    with pytest.raises(ValueError, match="input"):
        view_of(odd)


def test_numpy_masked_array_is_refused():
    # Its mask would be silently ignored: the masked values could be selected.
    a = np.ma.masked_array(np.arange(8, dtype=np.float32), mask=np.arange(8) > 5)
    with pytest.raises(TypeError, match="input is a NumPy masked array.*filled"):
        view_of(a)


# --- torch -----------------------------------------------------------------------------------

@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def torch_cases(torch):
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    return {
        "float32": base.clone(),
        "bfloat16": base.to(torch.bfloat16),
        "float16": base.to(torch.float16),
        "int32": base.to(torch.int32),
        "int64": base.to(torch.int64),
        "sliced": base.to(torch.bfloat16)[1::2, 3:7],  # storage offset, row stride 16
    }


def test_torch_fast_path(torch):
    for key, t in torch_cases(torch).items():
        v = view_of(t, name="input")
        assert v.ptr == t.data_ptr()
        assert (v.shape, v.strides) == (tuple(t.shape), t.stride())
        assert v.dtype == str(t.dtype).removeprefix("torch.")
        assert (v.device_type, v.device_id, v.framework) == ("cpu", 0, "torch")
        assert v.obj is t and v.keepalive is None
    s = torch_cases(torch)["sliced"]
    assert s.storage_offset() == 11
    assert view_of(s).ptr == s.untyped_storage().data_ptr() + 11 * 2
    assert view_of(s).strides == (16, 1)


@pytest.mark.parametrize("producer", [Producer, LegacyProducer])
def test_torch_dlpack_matches_fast_path(torch, producer):
    for key, t in torch_cases(torch).items():
        fast, slow = view_of(t), view_of(producer(t))
        assert fields(fast) == fields(slow), key
        assert slow.framework == "dlpack"
        capsule = "dltensor" if producer is LegacyProducer else "dltensor_versioned"
        assert f'"{capsule}"' in repr(slow.keepalive)


def test_torch_bfloat16_host_array_shares_memory(torch):
    t = torch.zeros(4, 8, dtype=torch.bfloat16)
    for v in (view_of(t[:, 2:6]), view_of(Producer(t[:, 2:6]))):
        h = host_array(v)
        assert h.dtype == ml_dtypes.bfloat16 and h.shape == (4, 4)
        assert h.strides == (16, 2)
        h[3, 1] = 1.5
    assert t[3, 3].item() == 1.5


def test_torch_requires_grad_and_rejections(torch):
    assert view_of(torch.ones(3, requires_grad=True)).dtype == "float32"
    with pytest.raises(ValueError, match="output_val requires grad: .* autograd would not see"):
        view_of(torch.ones(3, requires_grad=True), name="output_val", output=True)
    assert view_of(torch.ones(3), name="output_val", output=True).writable
    with pytest.raises(TypeError, match=r"layout torch.sparse_coo; pass input.to_dense\(\)"):
        view_of(torch.eye(3).to_sparse(), name="input")
    with warnings.catch_warnings():  # nested tensors are a prototype API, and torch says so
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.ones(5), torch.ones(7)])
    with pytest.raises(TypeError, match="input is a nested tensor: .*ragged_topk"):
        view_of(nested, name="input")
    with pytest.raises(TypeError, match="input is a torch tensor without storage .* inside torch.vmap"):
        torch.vmap(lambda a: view_of(a, name="input"))(torch.randn(3, 10))
    with pytest.raises(TypeError, match="resolve_neg"):
        view_of(torch.ones(2, dtype=torch.complex64).conj().imag)


def test_torch_allocate(torch):
    x = torch.zeros(3, 10, dtype=torch.bfloat16)
    for dtype in ("int32", "int64", "bfloat16"):
        out = allocate(view_of(x), (3, 4), dtype)
        r = out.result()
        assert isinstance(r, torch.Tensor) and r.dtype == getattr(torch, dtype)
        assert tuple(r.shape) == (3, 4) and r.is_contiguous() and r.device == x.device
        assert out.view.ptr == r.data_ptr() and out.view.framework == "torch"
        host_array(out.view)[2, 3] = 7
        assert r[2, 3].item() == 7


def test_cpu_stream_is_zero(torch):
    assert current_stream(view_of(torch.zeros(2))) == 0
    assert current_stream(view_of(np.zeros(2, np.float32))) == 0


# --- JAX -------------------------------------------------------------------------------------

@pytest.fixture
def jax():
    return pytest.importorskip("jax")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_jax_dlpack(jax, dtype):
    import jax.numpy as jnp

    x = jnp.arange(24, dtype=dtype).reshape(4, 6)
    v = view_of(x)
    assert (v.shape, v.strides, v.dtype) == ((4, 6), (6, 1), dtype)
    assert (v.device_type, v.device_id, v.framework) == ("cpu", 0, "jax")
    assert v.ptr == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(host_array(v), np.asarray(x))
    assert current_stream(v) == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_jax_allocate(jax, dtype):
    import jax.numpy as jnp

    x = jnp.zeros((3, 10), jnp.bfloat16)
    out = allocate(view_of(x), (3, 4), dtype)
    assert out.view.ptr % 64 == 0
    h = host_array(out.view)
    h[...] = np.arange(12).reshape(3, 4)
    r = out.result()
    assert isinstance(r, jax.Array) and r.dtype == jnp.dtype(dtype) and r.shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(r).astype(np.float32), np.arange(12).reshape(3, 4))
    assert r.unsafe_buffer_pointer() == out.view.ptr  # handed over without a copy


def test_jax_int64_without_x64_is_refused(jax):
    if jax.config.jax_enable_x64:
        pytest.skip("jax_enable_x64 is on")
    x = jax.numpy.zeros((2, 8), "float32")
    with pytest.raises(TypeError, match="jax_enable_x64"):
        allocate(view_of(x), (2, 4), "int64")


# --- DLPack ownership, generic producers, NumPy allocation ----------------------------------

def test_capsule_kept_alive_then_freed():
    a = np.arange(8, dtype=np.float32)
    alive = weakref.ref(a)
    v = view_of(Producer(a))  # NumPy's own __dlpack__, through the foreign-producer path
    assert v.framework == "dlpack" and v.ptr == a.ctypes.data
    del a
    gc.collect()
    assert alive() is not None  # the capsule in keepalive owns the export
    assert host_array(v)[3] == 3
    del v
    gc.collect()
    assert alive() is None  # the capsule's destructor ran the deleter: nothing leaked


def test_numpy_and_generic_allocate():
    out = allocate(view_of(np.zeros((2, 5), ml_dtypes.bfloat16)), (2, 3), "bfloat16")
    r = out.result()
    assert isinstance(r, np.ndarray) and r.dtype == ml_dtypes.bfloat16 and r.shape == (2, 3)
    assert r.flags.c_contiguous
    host_array(out.view)[1, 2] = 2.5
    assert r[1, 2] == 2.5

    generic = allocate(view_of(Producer(np.zeros((2, 5), np.float32))), (2, 3), "int64")
    g = generic.result()
    assert isinstance(g, np.ndarray) and g.dtype == np.int64 and g.flags.c_contiguous


def test_zero_size_host_array():
    v = view_of(Producer(np.zeros((0, 4), np.float32)))
    assert host_array(v).shape == (0, 4)


# --- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("obj", [[1.0, 2.0], 3.0, "x", None])
def test_non_tensor_is_type_error(obj):
    with pytest.raises(TypeError, match=r"output_idx must be a torch/JAX/CuPy tensor \(DLPack\) "
                                        r"or a NumPy array"):
        view_of(obj, name="output_idx")


@pytest.mark.parametrize("dtype", [np.complex64, np.bool_, np.float64, np.uint8])
def test_numpy_unsupported_dtype(dtype):
    with pytest.raises(TypeError, match=r"begin must have dtype int32 or int64, got "):
        view_of(np.zeros(4, dtype), name="begin", takes=INDEX_DTYPES_TEXT)
    with pytest.raises(TypeError, match=r"input must have dtype bfloat16, float16 or float32, got "):
        view_of(np.zeros(4, dtype), name="input")


def test_non_native_byte_order():
    with pytest.raises(TypeError, match="input must have dtype .* got >f4 .big-endian"):
        view_of(np.zeros(4, ">f4"))


def test_torch_unsupported_dtype(torch):
    for dtype in (torch.complex64, torch.bool, torch.float64):
        name = str(dtype).removeprefix("torch.")
        with pytest.raises(TypeError, match=f"input must have dtype bfloat16, float16 or float32, got {name}$"):
            view_of(torch.zeros(4, dtype=dtype))
        with pytest.raises(TypeError, match="input"):
            view_of(Producer(torch.zeros(4, dtype=dtype)))


def test_producer_refusal_is_type_error():
    # NumPy cannot export ml_dtypes bfloat16 over DLPack (BufferError).
    with pytest.raises(TypeError, match="output_val: Producer refused a DLPack export"):
        view_of(Producer(np.zeros(4, ml_dtypes.bfloat16)), name="output_val")


def test_host_array_rejects_device_views():
    v = tensors.TensorView(0, (2,), (1,), "float32", "cuda", 0, "dlpack", None)
    assert v.is_cuda
    with pytest.raises(ValueError, match="CPU"):
        host_array(v)
