"""The contract's argument checks (docs/contract.md "Inputs"): each violation raises TypeError or
ValueError before any work, naming the argument, also under ``python -O``. And NumPy round trips
through the public API against the reference."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt import reference

X = np.arange(40, dtype=np.float32).reshape(4, 10)

# (name, call kwargs, exception, text the message must contain)
def _misaligned(dtype, shape) -> np.ndarray:
    """Zeros of `dtype` starting one byte past an element boundary (a byte-offset view)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + 16, np.uint8)
    start = (-raw.ctypes.data % 16) + 1
    return raw[start:start + n].view(dtype).reshape(shape)


class _CudaStream:
    """A stream object speaking the CUDA stream protocol: ``__cuda_stream__()`` gives ``answer``."""

    def __init__(self, answer):
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer


# One int32 allocation seen as caller outputs and as row vectors (begin, end, offsets): zeros,
# valid for each of them, so only the aliasing is wrong.
_SHARED = np.zeros(32, np.int32)

CASES = [
    ("not_a_tensor", dict(input=[[1.0, 2.0]]), TypeError, "input"),
    ("input_3d", dict(input=np.zeros((2, 2, 2), np.float32)), ValueError, "2-D"),
    ("input_dtype", dict(input=np.zeros((2, 3), np.int32)), TypeError, "bfloat16, float16 or float32"),
    ("input_col_stride", dict(input=np.zeros((3, 8), np.float32)[:, ::2]), ValueError, "stride 1"),
    ("topk_float", dict(topk=2.0), TypeError, "topk"),
    ("topk_bool", dict(topk=True), TypeError, "topk"),
    ("topk_negative", dict(topk=-1), ValueError, "topk"),
    ("both_orders", dict(sorted=True, sorted_index=True), ValueError, "sorted_index"),
    ("sorted_not_bool", dict(sorted="yes"), TypeError, "sorted"),
    ("indices_type", dict(indices_type="float32"), TypeError, "indices_type"),
    ("nan_policy", dict(nan_policy="ignore"), ValueError, "nan_policy"),
    ("begin_dtype", dict(begin=np.zeros(4, np.float32)), TypeError, "begin"),
    ("end_shape", dict(end=np.full(3, 5, np.int32)), ValueError, "end"),
    ("end_past_width", dict(end=np.full(4, 11, np.int32)), ValueError, "end"),
    ("begin_negative", dict(begin=np.full(4, -1, np.int32)), ValueError, "begin"),
    ("begin_after_end", dict(begin=np.full(4, 6, np.int32), end=np.full(4, 5, np.int32)), ValueError,
     "row 0 has begin 6 > end 5"),
    ("begin_after_width", dict(begin=np.array([0, 0, 11, 0], np.int32)), ValueError, "row 2 has begin 11 > width 10"),
    ("offset_dtype", dict(output_idx_offset=np.zeros(4, np.float64)), TypeError, "output_idx_offset"),
    ("offset_int32_overflow", dict(output_idx_offset=np.full(4, 2**31 - 5, np.int32), indices_type="int32"),
     ValueError, "output_idx_offset"),
    # Each row's own largest index (end - 1) counts, not the width: row 2's is 4.
    ("offset_past_row_end", dict(output_idx_offset=np.array([0, 0, 2**31 - 4, 0], np.int32), indices_type="int32",
                                 end=np.array([10, 10, 5, 10], np.int32)), ValueError,
     "output_idx_offset[2] = 2147483644 takes row 2's indices [0, 4] to [2147483644, 2147483648], outside int32's"),
    ("offset_int32_underflow", dict(output_idx_offset=np.array([0, 0, -(2**31) - 1, 0]), indices_type="int32"),
     ValueError, "output_idx_offset[2] = -2147483649 takes row 2's indices [0, 9] to [-2147483649, -2147483640]"),
    ("idx_fill_range", dict(idx_oob_fill_value=2**31, indices_type="int32"), ValueError, "idx_oob_fill_value"),
    ("val_fill_type", dict(value_oob_fill_value="x"), TypeError, "value_oob_fill_value"),
    ("out_idx_shape", dict(output_idx=np.zeros((4, 2), np.int64)), ValueError, "output_idx"),
    ("out_idx_dtype", dict(output_idx=np.zeros((4, 3), np.int32)), TypeError, "output_idx"),
    ("out_val_dtype", dict(output_val=np.zeros((4, 3), np.float16)), TypeError, "output_val"),
    # A dtype topk never takes names the one this call writes, not every value dtype.
    ("out_val_float64", dict(output_val=np.zeros((4, 3), np.float64)), TypeError,
     "output_val must have dtype float32, got float64"),
    ("out_idx_float64", dict(output_idx=np.zeros((4, 3), np.float64), indices_type="int32"), TypeError,
     "output_idx must have dtype int32, got float64"),
    ("out_rows_overlap", dict(output_idx=np.lib.stride_tricks.as_strided(np.zeros(20, np.int64), (4, 3), (16, 8))),
     ValueError, "overlap"),
    ("out_aliases_input", dict(output_val=X[:, :3]), ValueError, "alias"),
    ("out_idx_aliases_begin", dict(output_idx=_SHARED[:12].reshape(4, 3), begin=_SHARED[:4], indices_type="int32"),
     ValueError, "output_idx must not alias begin"),
    ("out_idx_aliases_end", dict(output_idx=_SHARED[:12].reshape(4, 3), end=_SHARED[8:12], indices_type="int32"),
     ValueError, "output_idx must not alias end"),
    ("out_val_aliases_offset", dict(output_val=_SHARED[:12].view(np.float32).reshape(4, 3),
                                    output_idx_offset=_SHARED[11:15]), ValueError,
     "output_val must not alias output_idx_offset"),
    # Byte ranges, as for the input: begin lies between the output's rows, sharing no element.
    ("out_idx_spans_begin", dict(output_idx=_SHARED.reshape(4, 8)[:, :3], begin=_SHARED[4:8], indices_type="int32"),
     ValueError, "output_idx must not alias begin"),
    ("out_val_aliases_out_idx", dict(output_idx=_SHARED[:12].reshape(4, 3), indices_type="int32",
                                     output_val=_SHARED[6:18].view(np.float32).reshape(4, 3)), ValueError,
     "output_val must not alias output_idx"),
    ("out_val_without_values", dict(output_val=np.zeros((4, 3), np.float32), return_value=False), ValueError,
     "return_value"),
    ("stream_type", dict(stream="default"), TypeError, "stream"),
    ("stream_bool", dict(stream=True), TypeError, "stream must be None, an integer handle"),
    ("stream_numpy_bool", dict(stream=np.bool_(True)), TypeError, "stream must be None, an integer handle"),
    ("stream_bool_handle", dict(stream=SimpleNamespace(handle=True)), TypeError, "stream must be None, an integer"),
    ("stream_negative", dict(stream=-1), ValueError, "stream must be a CUDA stream handle in [0, 2**64), got -1"),
    ("stream_beyond_64_bits", dict(stream=2**64), ValueError, "stream must be a CUDA stream handle in [0, 2**64)"),
    ("stream_negative_numpy", dict(stream=np.int64(-2)), ValueError, "stream must be a CUDA stream handle"),
    ("stream_negative_ptr", dict(stream=SimpleNamespace(ptr=-1)), ValueError, "stream.ptr must be a CUDA stream"),
    ("stream_protocol_none", dict(stream=_CudaStream(None)), TypeError,
     "stream.__cuda_stream__() must return (version, handle), two integers, got None"),
    ("stream_protocol_text", dict(stream=_CudaStream((0, "abc"))), TypeError,
     "stream.__cuda_stream__() must return (version, handle), two integers, got (0, 'abc')"),
    ("stream_protocol_negative", dict(stream=_CudaStream((0, -3))), ValueError,
     "stream.__cuda_stream__()[1] must be a CUDA stream handle in [0, 2**64), got -3"),
    ("stream_protocol_not_callable", dict(stream=SimpleNamespace(__cuda_stream__=5)), TypeError,
     "stream.__cuda_stream__ must be a method"),
    ("nan_policy_type", dict(nan_policy=1), TypeError, "nan_policy"),
    ("topk_too_large", dict(topk=2**31), ValueError, "topk"),
    ("val_fill_none", dict(value_oob_fill_value=None), TypeError, "value_oob_fill_value"),
    ("out_idx_read_only", dict(output_idx=np.lib.stride_tricks.as_strided(np.zeros(12, np.int64), (4, 3), (24, 8),
                                                                         writeable=False)), ValueError, "read-only"),
    ("offset_int64_overflow", dict(output_idx_offset=np.full(4, 2**63 - 5, np.int64)), ValueError, "output_idx_offset"),
    ("indices_type_bogus_prefix", dict(indices_type="garbage.int32"), TypeError, "indices_type"),
    ("out_idx_misaligned", dict(output_idx=_misaligned(np.int64, (4, 3))), ValueError, "output_idx data pointer"),
    ("out_val_misaligned", dict(output_val=_misaligned(np.float32, (4, 3))), ValueError, "output_val data pointer"),
    ("begin_misaligned", dict(begin=_misaligned(np.int32, (4,))), ValueError, "begin data pointer"),
    ("end_misaligned", dict(end=_misaligned(np.int64, (4,))), ValueError, "end data pointer"),
    ("offset_misaligned", dict(output_idx_offset=_misaligned(np.int32, (4,))), ValueError,
     "output_idx_offset data pointer"),
]


def _call(kwargs):
    args = dict(input=X, topk=3)
    args.update(kwargs)
    return deepselect_rt.topk(**args)


@pytest.mark.parametrize("name,kwargs,exc,text", CASES, ids=[c[0] for c in CASES])
def test_validation(name, kwargs, exc, text):
    with pytest.raises(exc) as info:
        _call(kwargs)
    assert text in str(info.value)


def test_validation_under_python_O():
    """Same cases in a `python -O` child: the checks are real ifs, not asserts."""
    script = (
        "import sys; sys.path[:0] = [%r]\n"
        "import test_api as t\n"
        "bad = []\n"
        "for name, kw, exc, text in t.CASES:\n"
        "    try:\n"
        "        t._call(kw); bad.append(name + ': no error')\n"
        "    except exc as e:\n"
        "        if text not in str(e): bad.append(name + ': ' + str(e))\n"
        "assert not __debug__\n"
        "print('BAD', bad)\n"
    ) % str(__import__("pathlib").Path(__file__).parent)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, check=True)
    assert "BAD []" in out.stdout, out.stdout + out.stderr


def test_numpy_round_trip_matches_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 300)).astype(np.float32)
    end = np.array([300, 0, 7, 150, 299], np.int32)
    vals, idx = deepselect_rt.topk(x, 10, end=end, sorted=True, nan_policy="propagate")
    want = reference.topk(x, 10, end=end, sorted=True)
    assert isinstance(vals, np.ndarray) and isinstance(idx, np.ndarray)
    np.testing.assert_array_equal(idx, want[1])
    np.testing.assert_array_equal(vals, want[0])


def test_numpy_input_takes_no_stream():
    """A NumPy input runs on the CPU reference before the call returns: a stream handle is
    checked (stream_type above) and then unused (deepselect_rt.topk's docstring)."""
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    want = reference.topk(x, 5, sorted=True)
    for stream in (None, 0, 0x7F00DEAD, 2**64 - 1, np.int64(5), np.uint64(2**64 - 1), _CudaStream((0, 7)),
                   SimpleNamespace(cuda_stream=3), SimpleNamespace(ptr=np.int32(4)), SimpleNamespace(handle=5)):
        vals, idx = deepselect_rt.topk(x, 5, sorted=True, stream=stream)
        np.testing.assert_array_equal(idx, want[1])
        np.testing.assert_array_equal(vals, want[0])


class _CudaProducer:
    """A DLPack producer on CUDA device 0 that records the stream each export is asked for, then
    refuses the export (no GPU is needed to see what the consumer asked for)."""

    def __init__(self, streams):
        self.streams = streams

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA

    def __dlpack__(self, stream=None, **kwargs):
        self.streams.append(stream)
        raise BufferError("recorded")


def test_an_explicit_stream_reaches_the_producers_export():
    """DLPack's consumer names its stream so the producer orders pending writes before it: with
    stream= given, that stream (0, the legacy default, spelled 1 as DLPack asks), not the
    producer framework's current one, for the input and for every other array."""
    for stream, asked in ((0x7F00DEAD, 0x7F00DEAD), (_CudaStream((0, 12345)), 12345), (0, 1)):
        streams = []
        with pytest.raises(TypeError, match="input: _CudaProducer refused a DLPack export"):
            deepselect_rt.topk(_CudaProducer(streams), 4, stream=stream)
        assert streams == [asked]
    for argument in ("begin", "output_idx"):
        streams = []
        with pytest.raises(TypeError, match=f"{argument}: _CudaProducer refused"):
            deepselect_rt.topk(np.zeros((2, 8), np.float32), 4, stream=777, **{argument: _CudaProducer(streams)})
        assert streams == [777]


def test_outputs_next_to_row_vectors_are_accepted():
    """The aliasing check refuses overlap only: an output ending where begin starts, in one
    allocation, gives the reference's answer."""
    raw = np.zeros(12 + 4, np.int32)
    out, begin = raw[:12].reshape(4, 3), raw[12:]
    begin[:] = [0, 2, 5, 9]
    _, idx = deepselect_rt.topk(X[::-1], 3, sorted=True, begin=begin, output_idx=out, indices_type="int32")
    want = reference.topk(np.ascontiguousarray(X[::-1]), 3, sorted=True, begin=np.array([0, 2, 5, 9]),
                          index_dtype="int32")
    assert idx is out
    np.testing.assert_array_equal(out, want[1])
    np.testing.assert_array_equal(begin, [0, 2, 5, 9])


def test_int32_offsets_are_checked_against_each_rows_range():
    """Offsets that keep every row's valid indices, [begin, end) + offset, in int32 are accepted
    however close to the limit, and rows with no element take none: the reference's answer."""
    x = np.random.default_rng(2).standard_normal((5, 10)).astype(np.float32)
    # Rows 2 and 4 are empty, at either end of the row: an offset there would take no index.
    begin = np.array([0, 5, 0, 3, 10], np.int32)
    end = np.array([1, 10, 0, 6, 10], np.int32)
    offsets = np.array([2**31 - 1, 2**31 - 10, 2**31 - 1, -(2**31) - 3, 2**31 - 1])  # int64: row 3 goes below int32
    vals, idx = deepselect_rt.topk(x, 5, sorted=True, begin=begin, end=end, output_idx_offset=offsets,
                                   indices_type="int32")
    want = reference.topk(x, 5, sorted=True, begin=begin, end=end, offsets=offsets, index_dtype="int32")
    np.testing.assert_array_equal(idx, want[1])
    np.testing.assert_array_equal(vals, want[0])
    assert idx[0, 0] == 2**31 - 1 and idx[1].max() == 2**31 - 1 and idx[3].min() == -(2**31)  # both ends of int32


def test_empty_outputs_without_work():
    v, i = deepselect_rt.topk(X, 0)
    assert v.shape == (4, 0) and i.shape == (4, 0)
    v, i = deepselect_rt.topk(np.zeros((0, 10), np.float32), 3)
    assert v.shape == (0, 3) and i.shape == (0, 3)


def test_empty_caller_buffers_of_zero_rows():
    # NumPy gives empty arrays zero strides; no element is written, so any strides do.
    x = np.ones((0, 5), np.float32)
    idx, val = np.zeros((0, 3), np.int64), np.zeros((0, 3), np.float32)
    v, i = deepselect_rt.topk(x, 3, output_idx=idx, output_val=val)
    assert i is idx and v is val


def test_caller_buffers_returned_and_canaries_kept():
    idx = np.full((4, 8), -9, np.int64)
    val = np.full((4, 8), 7.0, np.float32)
    v, i = deepselect_rt.topk(X, 3, output_idx=idx[:, :3], output_val=val[:, :3], sorted=True)
    assert (idx[:, 3:] == -9).all() and (val[:, 3:] == 7.0).all()
    np.testing.assert_array_equal(i, np.tile([9, 8, 7], (4, 1)))


def test_torch_cpu_round_trip():
    torch = pytest.importorskip("torch")
    t = torch.randn(3, 50, dtype=torch.bfloat16)
    v, i = deepselect_rt.topk(t, 4, sorted=True, indices_type=torch.int32)
    assert isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16 and i.dtype == torch.int32
    want = deepselect_rt.topk(t.view(torch.int16).numpy().view(__import__("ml_dtypes").bfloat16), 4, sorted=True)
    np.testing.assert_array_equal(i.numpy(), want[1])


def test_torch_buffer_that_requires_grad_is_refused_unwritten():
    """Autograd would not see the write into such a buffer (torch.topk(out=) refuses it too, in
    grad mode; this refusal holds in any mode, as the write bypasses autograd either way)."""
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 10)
    val = torch.full((4, 3), 7.0, requires_grad=True)
    with pytest.raises(ValueError, match="output_val requires grad"):
        deepselect_rt.topk(x, 3, output_val=val)
    assert (val == 7.0).all()
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        torch.topk(x, 3, out=(val, torch.empty(4, 3, dtype=torch.long)))
    # The input may require grad: it is only read (and the values carry no history).
    v, i = deepselect_rt.topk(x.requires_grad_(), 3, sorted=True, output_val=torch.empty(4, 3))
    want = reference.topk(x.detach().numpy(), 3, sorted=True)
    np.testing.assert_array_equal(i.numpy(), want[1])
    np.testing.assert_array_equal(v.numpy(), want[0])


def test_stride_requirement():
    assert deepselect_rt.get_stride_requirement() == (16, 16)


def test_numpy_scalars_accepted_for_flags_and_fills():
    want = deepselect_rt.topk(X, 12, sorted=True, value_oob_fill_value=-1.0)
    got = deepselect_rt.topk(X, 12, sorted=np.bool_(True), value_oob_fill_value=np.float32(-1))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert deepselect_rt.topk(X, 2, indices_type="i4")[1].dtype == np.int32
    bf = deepselect_rt.topk(X, 12, sorted=True, value_oob_fill_value=__import__("ml_dtypes").bfloat16(-1))
    np.testing.assert_array_equal(bf[0], want[0])


def test_negative_row_strides():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 50)).astype(np.float32)
    idx = np.zeros((6, 7), np.int64)
    got = deepselect_rt.topk(x[::-1], 7, sorted=True, output_idx=idx[::-1])
    want = reference.topk(np.ascontiguousarray(x[::-1]), 7, sorted=True)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(idx[::-1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_jax_output_buffers_refused():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.asarray(X)
    with pytest.raises(TypeError, match="immutable"):
        deepselect_rt.topk(x, 3, indices_type="int32", output_idx=jnp.zeros((4, 3), jnp.int32))


def test_compat_without_torch_default_index_type():
    script = ("import sys, numpy as np; sys.modules['torch'] = None\n"
              "import deepselect_rt.compat as ds\n"
              "v, i = ds.topk(np.arange(8, dtype=np.float32).reshape(2, 4), 2)\n"
              "print(i.dtype)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "int64"


def test_fill_beyond_every_float_becomes_infinity():
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    vals, _ = deepselect_rt.topk(x, 8, value_oob_fill_value=2**2000)
    assert vals[0, -1] == np.inf
    vals, _ = deepselect_rt.topk(x, 8, value_oob_fill_value=-(2**2000))
    assert vals[0, -1] == -np.inf


def test_dtype_errors_name_what_each_array_takes():
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(TypeError, match="input must have dtype bfloat16, float16 or float32, got float64"):
        deepselect_rt.topk(x.astype(np.float64), 2)
    with pytest.raises(TypeError, match="input must have dtype bfloat16, float16 or float32, got int32"):
        deepselect_rt.topk(x.astype(np.int32), 2)
    with pytest.raises(TypeError, match="big-endian"):
        deepselect_rt.topk(x.astype(">f4"), 2)
    with pytest.raises(TypeError, match="end must have dtype int32 or int64, got uint32"):
        deepselect_rt.topk(x, 2, end=np.zeros(2, np.uint32))


def test_k_is_an_integer_scalar_of_any_framework():
    """0-d integer arrays count as integers; bools and one-element arrays of other ranks do not
    (torch's ``__index__`` would take both)."""
    torch = pytest.importorskip("torch")
    want = deepselect_rt.topk(X, 3)
    for k in (np.int64(3), np.array(3), torch.tensor(3)):
        got = deepselect_rt.topk(X, k)
        np.testing.assert_array_equal(got[1], want[1])
    for k in (True, np.bool_(True), torch.tensor(True), torch.tensor([2]), np.array([2]), torch.tensor(2.0)):
        with pytest.raises(TypeError, match="topk must be an integer"):
            deepselect_rt.topk(X, k)


def test_a_non_integer_k_is_named_with_its_dtype():
    with pytest.raises(TypeError, match=r"got ndarray of dtype float64 and shape \(\)"):
        deepselect_rt.topk(X, np.array(3.0))


def test_a_traced_k_under_jax_jit_asks_for_a_static_argument():
    jax = pytest.importorskip("jax")
    with jax.default_device(jax.devices("cpu")[0]):
        with pytest.raises(TypeError, match="static_argnums"):
            jax.jit(lambda a, k: deepselect_rt.topk(a, k, indices_type="int32"))(jax.numpy.asarray(X), 2)
