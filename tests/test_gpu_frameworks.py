"""Framework integration on the GPU: CUDA graphs, streams, torch.compile, CuPy and JAX
round trips. Every result is checked against the NumPy reference. Run with ``pytest -m gpu``."""

from __future__ import annotations

import os
import warnings
from contextlib import nullcontext

import numpy as np
import pytest

import deepselect_rt
from gpu_helpers import Producer, cupy_cuda, to_host, torch_cuda

pytestmark = pytest.mark.gpu


def _want(t, k, **kw):
    return deepselect_rt.topk(to_host(t), k, **kw)


def test_cuda_graph_capture_replay_and_other_shapes():
    torch = torch_cuda()
    x = torch.randn(64, 50000, device="cuda", dtype=torch.bfloat16)
    kw = dict(indices_type="int32", nan_policy="sentinel", sorted=True)
    deepselect_rt.topk(x, 512, **kw)  # warm-up: compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        vals, idx = deepselect_rt.topk(x, 512, **kw)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(to_host(idx), _want(x, 512, **kw)[1])
    other = torch.randn(7, 3000, device="cuda", dtype=torch.bfloat16)
    v2, i2 = deepselect_rt.topk(other, 100, **kw)
    np.testing.assert_array_equal(to_host(i2), _want(other, 100, **kw)[1])
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(to_host(idx), _want(x, 512, **kw)[1])
    np.testing.assert_array_equal(to_host(vals).view(np.uint16), _want(x, 512, **kw)[0].view(np.uint16))


def test_raise_sync_refuses_graph_capture():
    torch = torch_cuda()
    x = torch.randn(4, 1000, device="cuda")
    deepselect_rt.topk(x, 10)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="capture"):
        with torch.cuda.graph(graph):
            deepselect_rt.topk(x, 10, nan_policy="raise_sync")


def test_streams_alternating_and_producer_on_side_stream():
    torch = torch_cuda()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    base = torch.randn(16, 20000, device="cuda")
    torch.cuda.synchronize()
    want = _want(base, 64, nan_policy="propagate")[1]
    results = []
    for i in range(1000):
        stream = s1 if i % 2 else s2
        with torch.cuda.stream(stream):
            # The producer runs on this stream right before topk: no host sync in between.
            x = base * 1.0
            results.append(deepselect_rt.topk(x, 64, nan_policy="propagate")[1])
    torch.cuda.synchronize()
    for r in results[::97] + results[-3:]:
        np.testing.assert_array_equal(to_host(r), want)


def test_explicit_stream_argument():
    torch = torch_cuda()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.randn(8, 5000, device="cuda")
    _, idx = deepselect_rt.topk(x, 32, stream=s, nan_policy="propagate")
    s.synchronize()
    np.testing.assert_array_equal(to_host(idx), _want(x, 32, nan_policy="propagate")[1])


@pytest.mark.parametrize("case", ["stream=side", "stream=0 under side", "producer under side"])
def test_outputs_come_from_the_launch_streams_pool(case):
    """Outputs belong to the launch stream's pool in torch's caching allocator, so once freed
    they are handed out again only after its work, never to another stream while the kernel
    may still write them (tensors.allocate), under either launch path: for stream= a side
    stream; for stream=0 while a side stream is current (torch.cuda.ExternalStream(0) would
    give a new pooled stream, pytorch/pytorch#182960); for an input through DLPack with no
    stream=, which runs on stream 0 while torch allocates with a side stream current."""
    torch = torch_cuda()
    side = torch.cuda.Stream()
    x = torch.randn(4096, 1000, device="cuda")
    torch.cuda.synchronize()
    launch = side.cuda_stream if case == "stream=side" else 0
    kwargs = {"stream=side": {"stream": side}, "stream=0 under side": {"stream": 0}}.get(case, {})
    for policy in ("propagate", "raise"):
        with torch.cuda.stream(side) if "under side" in case else nullcontext():
            vals, idx = deepselect_rt.topk(Producer(x) if case == "producer under side" else x, 300,
                                           nan_policy=policy, **kwargs)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(to_host(idx), _want(x, 300, nan_policy=policy)[1])
        segments = torch.cuda.memory_snapshot()
        for out in (vals, idx):
            owner = [seg["stream"] for seg in segments
                     if seg["address"] <= out.data_ptr() < seg["address"] + seg["total_size"]]
            assert owner == [launch], (policy, owner, launch)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_cuda(backend):
    torch = torch_cuda()
    x = torch.randn(32, 70000, device="cuda", dtype=torch.bfloat16)

    def f(x):
        _, idx = deepselect_rt.topk(x * 2, 2048, indices_type=torch.int32, return_value=False,
                                    nan_policy="sentinel")
        return idx + 1

    got = torch.compile(f, fullgraph=True, backend=backend)(x)
    want = _want(x * 2, 2048, indices_type="int32", return_value=False, nan_policy="sentinel")[1] + 1
    np.testing.assert_array_equal(to_host(got), want)


def test_input_on_second_gpu_while_first_is_current():
    torch = torch_cuda()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = torch.randn(4, 9000, device="cuda:1")
    with torch.cuda.device(0):
        v, i = deepselect_rt.topk(x, 50, nan_policy="propagate")
    assert i.device == x.device and v.device == x.device
    np.testing.assert_array_equal(to_host(i), _want(x, 50, nan_policy="propagate")[1])


def test_cupy_round_trip():
    cp = cupy_cuda()
    x = cp.random.standard_normal((6, 40000), dtype=cp.float32)
    vals, idx = deepselect_rt.topk(x, 256, sorted=True, nan_policy="propagate")
    assert isinstance(vals, cp.ndarray) and isinstance(idx, cp.ndarray)
    want = deepselect_rt.topk(cp.asnumpy(x), 256, sorted=True, nan_policy="propagate")
    np.testing.assert_array_equal(cp.asnumpy(idx), want[1])
    np.testing.assert_array_equal(cp.asnumpy(vals), want[0])


def test_managed_memory_runs_on_the_cuda_backend():
    cp = cupy_cuda()
    host = np.random.default_rng(3).standard_normal((5, 30000)).astype(np.float32)
    managed = cp.cuda.malloc_managed(host.nbytes)
    x = cp.ndarray(host.shape, cp.float32, managed)
    x.set(host)
    if x.__dlpack_device__()[0] != 13:  # kDLCUDAManaged
        pytest.skip("this CuPy exports managed memory as plain CUDA memory")
    vals, idx = deepselect_rt.topk(x, 100, sorted=True)
    want = deepselect_rt.topk(host, 100, sorted=True)
    np.testing.assert_array_equal(cp.asnumpy(idx), want[1])
    np.testing.assert_array_equal(cp.asnumpy(vals), want[0])


def test_cupy_explicit_stream_waits_for_the_producers_writes():
    """stream= names another stream than CuPy's current one, which is still writing the input:
    the DLPack export for that stream orders the writes before the kernel (api.eager_topk)."""
    cp = cupy_cuda()
    producer, consumer = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with producer:
        x = cp.zeros((64, 1 << 20), dtype=cp.float32)
        deepselect_rt.topk(x, 64, stream=consumer.ptr, nan_policy="propagate")  # compile and load first
        producer.synchronize()
        consumer.synchronize()
        for seed in range(8):  # milliseconds of writes still queued when topk is called
            x += cp.random.default_rng(seed).standard_normal(x.shape, dtype=cp.float32)
        _, idx = deepselect_rt.topk(x, 64, stream=consumer.ptr, nan_policy="propagate")
    consumer.synchronize()
    producer.synchronize()
    want = deepselect_rt.topk(cp.asnumpy(x), 64, nan_policy="propagate")
    np.testing.assert_array_equal(cp.asnumpy(idx), want[1])


def test_cupy_outputs_for_another_stream_raise_no_deprecation_warning():
    """Outputs allocated for a stream= other than CuPy's current one are allocated with that
    stream current, wrapped without CuPy 14's deprecated ExternalStream."""
    cp = cupy_cuda()
    x = cp.random.standard_normal((4, 5000), dtype=cp.float32)
    side = cp.cuda.Stream(non_blocking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        vals, idx = deepselect_rt.topk(x, 32, stream=side.ptr, nan_policy="propagate")
    side.synchronize()
    want = deepselect_rt.topk(cp.asnumpy(x), 32, nan_policy="propagate")
    np.testing.assert_array_equal(cp.asnumpy(idx), want[1])
    np.testing.assert_array_equal(cp.asnumpy(vals), want[0])


def test_jax_round_trip():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.key(0), (5, 30000), dtype=jnp.bfloat16)
    vals, idx = deepselect_rt.topk(x, 300, sorted=True, indices_type="int32", nan_policy="propagate")
    assert isinstance(vals, jax.Array) and isinstance(idx, jax.Array)
    assert list(idx.devices())[0].platform == "gpu"
    import ml_dtypes

    host = np.asarray(x).astype(ml_dtypes.bfloat16)
    want = deepselect_rt.topk(host, 300, sorted=True, indices_type="int32", nan_policy="propagate")
    np.testing.assert_array_equal(np.asarray(idx), want[1])
    np.testing.assert_array_equal(np.asarray(vals).view(np.uint16), want[0].view(np.uint16))


@pytest.mark.parametrize("kw", [
    dict(indices_type="int32"),
    dict(indices_type="int32", sorted=True, return_value=False),
    dict(indices_type="int32", nan_policy="sentinel", idx_oob_fill_value=-1, value_oob_fill_value=float("nan")),
    dict(indices_type="int32", sorted_index=True, nan_policy="propagate"),
], ids=["defaults", "no-values", "nan-fill", "sorted-index"])
def test_jax_eager_calls_match_the_reference(kw):
    """Concrete JAX arrays (through the cached jit where it can run), with row vectors, twice
    with the same arguments and once with another shape."""
    jax = _jax_gpu()
    import jax.numpy as jnp
    import ml_dtypes

    for rows, width, k in ((6, 20000, 100), (6, 20000, 100), (3, 700, 900)):
        x = jax.random.normal(jax.random.key(width + rows), (rows, width), dtype=jnp.bfloat16)
        begin = jnp.arange(rows, dtype=jnp.int32) * 5
        end = jnp.full((rows,), width - 3, jnp.int32)
        vals, idx = deepselect_rt.topk(x, k, begin=begin, end=end, **kw)
        host = np.asarray(x).astype(ml_dtypes.bfloat16)
        want = deepselect_rt.topk(host, k, begin=np.asarray(begin), end=np.asarray(end), **kw)
        assert isinstance(idx, jax.Array) and list(idx.devices())[0].platform == "gpu"
        np.testing.assert_array_equal(np.asarray(idx), want[1])
        if want[0] is None:
            assert vals is None
        else:
            np.testing.assert_array_equal(np.asarray(vals).view(np.uint16), want[0].view(np.uint16))


def test_jax_eager_nan_is_reported_by_the_next_call():
    jax = _jax_gpu()
    import jax.numpy as jnp

    x = jnp.zeros((4, 5000), jnp.float32).at[2, 17].set(jnp.nan)
    vals, idx = deepselect_rt.topk(x, 8, indices_type="int32")  # the default: "raise", no wait
    assert np.isnan(np.asarray(vals)[2, 0])  # the row carries the sentinel
    with pytest.raises(deepselect_rt.NaNInputError, match=r"row"):
        deepselect_rt.topk(jnp.ones((4, 5000), jnp.float32), 8, indices_type="int32")
    deepselect_rt.check_nan()  # reported once


def _jax_gpu():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    return jax


# (rows, width, k, dtype): one CTA a row, a split row (clusters of at most 8 under jit), the
# cluster radix select, the any-k kernel, a short row.
JIT_SHAPES = [(64, 30000, 512, "bfloat16"), (1, 1 << 20, 2048, "bfloat16"), (4, 65536, 64, "float32"),
              (3, 20000, 5000, "float16"), (8, 100, 300, "float32")]


@pytest.mark.parametrize("route", ["default", "ptx"])
@pytest.mark.parametrize("rows, width, k, dtype", JIT_SHAPES)
def test_jax_jit_launches_the_kernel_through_xla(rows, width, k, dtype, route, monkeypatch):
    import warnings

    jax = _jax_gpu()
    import jax.numpy as jnp
    import ml_dtypes

    from deepselect_rt.interop import jax_ffi

    if route == "ptx":  # the route of jaxlib plugins that do not load module images
        monkeypatch.setattr(jax_ffi, "kernel_call_route", lambda: ("ptx", None))

    x = jax.random.normal(jax.random.key(rows), (rows, width), dtype=jnp.dtype(dtype))
    end = jnp.full((rows,), width - 7, jnp.int32)
    f = jax.jit(lambda a, e: deepselect_rt.topk(a, k, end=e, sorted=True, indices_type="int32",
                                                nan_policy="sentinel"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the host-callback fallback warns
        text = f.lower(x, end).as_text()
        vals, idx = f(x, end)
    from deepselect_rt.cuda import xla_launch

    own = xla_launch.needs_own_launch(0, dtype, rows, width, k, False)
    assert (jax_ffi.OWN_TARGET if own else "triton_kernel_call_ffi") in text and "callback" not in text
    host = np.asarray(x)
    want = deepselect_rt.topk(host, k, end=np.asarray(end), sorted=True, indices_type="int32",
                              nan_policy="sentinel")
    np.testing.assert_array_equal(np.asarray(idx), want[1])
    bits = np.uint16 if host.dtype in (np.float16, ml_dtypes.bfloat16) else np.uint32
    np.testing.assert_array_equal(np.asarray(vals).view(bits), want[0].view(bits))


@pytest.mark.parametrize("rows, width, k", [(64, 1 << 16, 64), (1, 1 << 20, 2048), (2, 1 << 19, 512),
                                            (3, (1 << 16) - 8, 100)])
def test_jax_jit_rows_that_fill_their_ctas_exactly(rows, width, k):
    """Rows planned from XLA's 16-byte alignment fill their CTAs' registers to the last vector:
    the largest values sit in the first and last columns, so a dropped vector shows. Also with
    begin columns (planned one vector wider) and on a row slice of a larger array."""
    jax = _jax_gpu()
    import jax.numpy as jnp
    import ml_dtypes

    rng = np.random.default_rng(rows)
    host = rng.standard_normal((rows + 1, width)).astype(ml_dtypes.bfloat16)
    host[:, :8] = host[:, -8:] = 100 + np.arange(8)
    x = jnp.asarray(host)
    kw = dict(sorted=True, indices_type="int32", nan_policy="sentinel")
    begin = np.zeros(rows, np.int32)
    cases = {"aligned": (jax.jit(lambda a: deepselect_rt.topk(a[1:], k, **kw)), (x,)),
             "begin": (jax.jit(lambda a, b: deepselect_rt.topk(a[1:], k, begin=b, **kw)), (x, jnp.asarray(begin)))}
    want = deepselect_rt.topk(host[1:], k, **kw)
    for name, (f, args) in cases.items():
        vals, idx = f(*args)
        np.testing.assert_array_equal(np.asarray(idx), want[1], err_msg=name)
        np.testing.assert_array_equal(np.asarray(vals).view(np.uint16), want[0].view(np.uint16), err_msg=name)


@pytest.mark.parametrize("dtype, width, k", [("bfloat16", 1 << 20, 2048), ("float32", 129280, 512),
                                            ("bfloat16", 1 << 17, 100)])
def test_jax_jit_own_launch_runs_the_eager_plan(dtype, width, k):
    """Plans of more than 8 CTAs a cluster go through deepselect-rt's own FFI handler: exact
    against the NumPy reference with ties at the slice edges, for new buffers on every call
    (the repeated launch takes their addresses), on a row slice, with row vectors, values or
    not, and NaN rows reported by check_nan under the default policy."""
    jax = _jax_gpu()
    import jax.numpy as jnp
    import ml_dtypes

    from deepselect_rt.cuda import xla_launch
    from deepselect_rt.interop import jax_ffi

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    bits = np.uint16 if dtype == "bfloat16" else np.uint32
    assert xla_launch.needs_own_launch(0, dtype, 1, width, k, False)
    kw = dict(sorted=True, indices_type="int32", nan_policy="sentinel")
    plain = jax.jit(lambda a: deepselect_rt.topk(a, k, **kw))
    sliced = jax.jit(lambda a, b, e, o: deepselect_rt.topk(a[1:], k, begin=b, end=e, output_idx_offset=o, **kw))
    no_values = jax.jit(lambda a: deepselect_rt.topk(a, k, return_value=False, **kw))
    assert jax_ffi.OWN_TARGET in plain.lower(jnp.zeros((1, width), np_dtype)).as_text()
    rng = np.random.default_rng(width)
    for trial in range(3):
        host = rng.standard_normal((2, width)).astype(np_dtype)
        host[:, :8] = host[:, -8:] = 100 + np.arange(8)
        host[:, width // 2 - 40:width // 2 + 40] = 50  # ties across the middle CTAs' edge
        x = jnp.asarray(host)
        b, e, o = (np.array([v], np.int32) for v in (5 * trial, width - 3 * trial, 7))
        for name, got, want in (
                ("plain", plain(x[:1]), deepselect_rt.topk(host[:1], k, **kw)),
                ("sliced", sliced(x, jnp.asarray(b), jnp.asarray(e), jnp.asarray(o)),
                 deepselect_rt.topk(host[1:], k, begin=b, end=e, output_idx_offset=o, **kw))):
            np.testing.assert_array_equal(np.asarray(got[1]), want[1], err_msg=f"{name} {trial}")
            np.testing.assert_array_equal(np.asarray(got[0]).view(bits), want[0].view(bits), err_msg=name)
        vals, idx = no_values(x[:1])
        assert vals is None
        np.testing.assert_array_equal(np.asarray(idx), deepselect_rt.topk(host[:1], k, **kw)[1])
    deepselect_rt.check_nan()
    bad = jnp.asarray(host[:1]).at[0, 77].set(jnp.nan)
    _, idx = jax.jit(lambda a: deepselect_rt.topk(a, k, indices_type="int32"))(bad)
    assert (np.asarray(idx) == 0x3F3F3F3F).all()
    with pytest.raises(deepselect_rt.NaNInputError):
        deepselect_rt.check_nan()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kw", [dict(), dict(sorted=True), dict(sorted_index=True),
                                dict(sorted=True, return_value=False, idx_oob_fill_value=-1),
                                dict(nan_policy="propagate", value_oob_fill_value=float("nan"))],
                         ids=["unsorted", "sorted", "sorted-index", "no-values", "propagate"])
def test_jax_jit_contract_on_the_gpu(dtype, kw):
    """Heavy ties, -0.0 beside +0.0, infinities, NaN, short rows (begin/end) and offsets, inside
    jax.jit on the GPU, bit for bit against the NumPy reference."""
    jax = _jax_gpu()
    import jax.numpy as jnp
    import ml_dtypes

    rng = np.random.default_rng(7)
    host = (rng.integers(-4, 5, (9, 301)).astype(np.float32) / 2)
    host[0, ::3], host[0, 1::3] = -0.0, 0.0
    host[1, 5], host[1, 7], host[2, 11] = np.inf, -np.inf, np.nan
    host = host.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    begin = np.array([0, 3, 0, 50, 0, 7, 0, 299, 0], np.int32)
    end = np.array([301, 200, 301, 60, 0, 301, 13, 301, 301], np.int32)
    offsets = np.arange(9, dtype=np.int32) * 1000
    kw = dict(indices_type="int32", nan_policy="sentinel") | kw
    for k in (1, 10, 97, 350):
        f = jax.jit(lambda a, b, e, o: deepselect_rt.topk(a, k, begin=b, end=e, output_idx_offset=o, **kw))
        vals, idx = f(jnp.asarray(host), jnp.asarray(begin), jnp.asarray(end), jnp.asarray(offsets))
        want = deepselect_rt.topk(host, k, begin=begin, end=end, output_idx_offset=offsets, **kw)
        np.testing.assert_array_equal(np.asarray(idx), want[1])
        if want[0] is None:
            assert vals is None
        else:
            bits = np.uint32 if dtype == "float32" else np.uint16
            np.testing.assert_array_equal(np.asarray(vals).view(bits), want[0].view(bits))


def test_kernel_call_descriptor_matches_jaxlibs_own():
    """Our descriptor, byte for byte against jaxlib's bindings where both can say it (PTX)."""
    _jax_gpu()
    from jax._src.lib import gpu_triton

    from deepselect_rt.interop import jax_ffi, kernel_call_proto

    route, why = jax_ffi.kernel_call_route()
    if route is None:
        pytest.skip(why)
    params = (("buffer", 0), ("i64", 1000), ("i64", -1), ("u64", 2**64 - 1), ("u64", 0), ("buffer", 0))
    for cluster, smem in ((1, 0), (4, 70000)):
        ours = kernel_call_proto.encode("ds_entry", 512, cluster, smem, 90, 7, params, "name", ptx="// text")
        lib = gpu_triton.TritonKernelCall(
            gpu_triton.TritonKernel("ds_entry", 16, cluster, smem, "// text", "", 90), 7, 1, 1,
            [gpu_triton.create_array_parameter(0, 0) if kind == "buffer"
             else gpu_triton.create_scalar_parameter(value, kind) for kind, value in params])
        assert ours == lib.to_proto("name", b"")


def test_jax_jit_vmap_grad_and_nan_record_on_the_gpu():
    jax = _jax_gpu()
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.key(1), (2, 6, 5000), dtype=jnp.float32)
    f = jax.jit(jax.vmap(lambda a: deepselect_rt.topk(a, 50, indices_type="int32")))
    vals, idx = f(x)
    want = deepselect_rt.topk(np.asarray(x).reshape(12, 5000), 50, indices_type="int32")
    np.testing.assert_array_equal(np.asarray(idx).reshape(12, 50), want[1])
    grad = jax.jit(jax.grad(lambda a: deepselect_rt.topk(a, 50, indices_type="int32")[0].sum()))(x[0])
    expect = np.zeros((6, 5000), np.float32)
    np.put_along_axis(expect, want[1][:6].astype(np.int64), 1.0, axis=1)
    np.testing.assert_array_equal(np.asarray(grad), expect)
    deepselect_rt.check_nan()
    bad = x[0].at[2, 10].set(jnp.nan)
    _, idx = jax.jit(lambda a: deepselect_rt.topk(a, 4, indices_type="int32"))(bad)
    assert (np.asarray(idx)[2] == 0x3F3F3F3F).all()
    # The GPU's record (the kernel route; the CPU's with several GPUs: the host callback).
    with pytest.raises(deepselect_rt.NaNInputError):
        deepselect_rt.check_nan()
