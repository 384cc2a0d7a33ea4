"""deepselect_rt.topk inside JAX transformations (jax.jit, jax.vmap, jax.grad) on the CPU: the
primitive's host-callback route, compared bit for bit with the NumPy reference. JAX's CPU
device is the default here even where a GPU is visible (tests/test_gpu_frameworks.py runs the
GPU route)."""

from __future__ import annotations

import contextlib
import importlib

import ml_dtypes
import numpy as np
import pytest

import deepselect_rt
from deepselect_rt import NaNInputError, reference
from deepselect_rt.errors import BackendUnavailableError

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
UINT = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}


@pytest.fixture(autouse=True)
def _on_the_cpu():
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _x64():
    """A context enabling jax_enable_x64 (the context manager moved between JAX versions)."""
    enable = getattr(jax, "enable_x64", None)
    if enable is None:
        enable = getattr(importlib.import_module("jax.experimental"), "enable_x64", None)
    if enable is None:
        pytest.skip("this JAX has no enable_x64 context manager")
    return enable(True)


def _rows(dtype: str, rows: int = 6, width: int = 97, seed: int = 0) -> np.ndarray:
    """Random rows with heavy ties, -0.0 beside +0.0, and infinities."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, (rows, width)).astype(np.float32) / 2
    x[0, ::3] = -0.0
    x[0, 1::3] = 0.0
    x[1, 5] = np.inf
    x[1, 7] = -np.inf
    x[2] = rng.standard_normal(width)
    return x.astype(DTYPES[dtype])


def _same(got, want) -> None:
    """Bit-identical (so -0.0 differs from +0.0), dtype included."""
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f" or want.dtype == ml_dtypes.bfloat16:
        got, want = got.view(UINT[str(want.dtype)]), want.view(UINT[str(want.dtype)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("order", [{}, {"sorted": True}, {"sorted_index": True}])
@pytest.mark.parametrize("k", [1, 10, 97, 130])
def test_jit_matches_reference_bit_for_bit(dtype, order, k):
    x = _rows(dtype)
    f = jax.jit(lambda a: deepselect_rt.topk(a, k, indices_type="int32", **order))
    values, indices = f(jnp.asarray(x))
    want_v, want_i = reference.topk(x, k, index_dtype="int32", sorted=order.get("sorted", False))
    _same(indices, want_i)
    _same(values, want_v)


def test_lowered_text_shows_the_callback():
    x = jnp.asarray(_rows("float32"))
    text = jax.jit(lambda a: deepselect_rt.topk(a, 4, indices_type="int32")).lower(x).as_text()
    assert "callback" in text
    jaxpr = str(jax.make_jaxpr(lambda a: deepselect_rt.topk(a, 4, indices_type="int32"))(x))
    assert "deepselect_rt_topk" in jaxpr


def test_traced_ranges_offsets_and_fills():
    x = _rows("bfloat16", rows=5, width=40)
    begin = np.array([0, 3, 10, 40, 7], np.int32)
    end = np.array([40, 9, 12, 40, 30], np.int32)
    offsets = np.array([100, -3, 2**31 - 50, 0, 5], np.int32)
    kwargs = dict(sorted=True, indices_type="int32", idx_oob_fill_value=-7, value_oob_fill_value=-2.5)
    f = jax.jit(lambda a, b, e, o: deepselect_rt.topk(a, 8, begin=b, end=e, output_idx_offset=o, **kwargs))
    values, indices = f(jnp.asarray(x), begin, end, offsets)
    want_v, want_i = reference.topk(x, 8, begin=begin, end=end, offsets=offsets, index_dtype="int32",
                                    sorted=True, idx_fill=-7, val_fill=-2.5)
    _same(indices, want_i)
    _same(values, want_v)


def test_traced_ranges_are_clamped():
    x = _rows("float32", rows=3, width=20)
    begin, end = np.array([-5, 15, 4], np.int32), np.array([50, 10, 8], np.int32)
    f = jax.jit(lambda a, b, e: deepselect_rt.topk(a, 6, begin=b, end=e, indices_type="int32"))
    values, indices = f(x, begin, end)
    want_v, want_i = reference.topk(x, 6, begin=begin, end=end, index_dtype="int32")
    _same(indices, want_i)
    _same(values, want_v)


def test_concrete_numpy_vectors_are_checked_as_eager():
    x = jnp.asarray(_rows("float32", rows=3, width=20))
    with pytest.raises(ValueError, match=r"end must lie in \[0, width=20\]"):
        jax.jit(lambda a: deepselect_rt.topk(a, 2, end=np.array([1, 2, 30], np.int32), indices_type="int32"))(x)


def test_return_value_false_gives_none():
    x = _rows("float16")
    values, indices = jax.jit(lambda a: deepselect_rt.topk(a, 5, return_value=False, indices_type="int32"))(x)
    assert values is None
    _same(indices, reference.topk(x, 5, index_dtype="int32", return_value=False)[1])


def test_int64_indices_under_x64():
    x = _rows("float32")
    with _x64():
        begin = jnp.array([0, 1, 2, 3, 4, 5], jnp.int64)
        offsets = jnp.full(6, 2**40, jnp.int64)
        values, indices = jax.jit(lambda a, b, o: deepselect_rt.topk(a, 7, begin=b, output_idx_offset=o))(
            x, begin, offsets)
        assert indices.dtype == jnp.int64
    want_v, want_i = reference.topk(x, 7, begin=np.arange(6), offsets=np.full(6, 2**40), index_dtype="int64")
    _same(indices, want_i)
    _same(values, want_v)


def test_empty_outputs():
    x = jnp.zeros((3, 8), jnp.float32)
    values, indices = jax.jit(lambda a: deepselect_rt.topk(a, 0, indices_type="int32"))(x)
    assert values.shape == indices.shape == (3, 0)
    values, indices = jax.jit(lambda a: deepselect_rt.topk(a, 4, indices_type="int32"))(jnp.zeros((0, 8)))
    assert values.shape == indices.shape == (0, 4)


# --- NaN -------------------------------------------------------------------------------------

def _with_nan(dtype: str = "float32") -> np.ndarray:
    x = _rows(dtype, rows=4, width=30)
    x[1, 17] = np.nan
    x[3, 2] = np.nan
    return x


@pytest.mark.parametrize("policy", ["sentinel", "propagate"])
def test_nan_policies(policy):
    x = _with_nan()
    values, indices = jax.jit(lambda a: deepselect_rt.topk(a, 5, sorted=True, nan_policy=policy,
                                                           indices_type="int32"))(x)
    want_v, want_i = reference.topk(x, 5, sorted=True, nan_policy=policy, index_dtype="int32")
    _same(indices, want_i)
    _same(values, want_v)


def test_nan_raise_marks_rows_and_records_them():
    deepselect_rt.check_nan()  # nothing pending from elsewhere
    x = _with_nan("bfloat16")
    values, indices = jax.jit(lambda a: deepselect_rt.topk(a, 5, indices_type="int32"))(x)
    want_v, want_i = reference.topk(x, 5, nan_policy="sentinel", index_dtype="int32")
    _same(indices, want_i)
    _same(values, want_v)
    with pytest.raises(NaNInputError) as info:
        deepselect_rt.check_nan()
    assert info.value.rows == [1, 3] and "4x30" in info.value.call


def test_nan_raise_reported_by_the_next_eager_call():
    deepselect_rt.check_nan()
    jax.block_until_ready(jax.jit(lambda a: deepselect_rt.topk(a, 2, indices_type="int32"))(_with_nan()))
    with pytest.raises(NaNInputError):
        deepselect_rt.topk(np.zeros((1, 4), np.float32), 1)
    deepselect_rt.check_nan()  # reported once


# --- vmap ------------------------------------------------------------------------------------

def test_vmap_folds_the_batch_into_rows():
    x = _rows("bfloat16", rows=12, width=33).reshape(3, 4, 33)
    f = jax.jit(jax.vmap(lambda a: deepselect_rt.topk(a, 6, sorted=True, indices_type="int32")))
    values, indices = f(jnp.asarray(x))
    assert values.shape == indices.shape == (3, 4, 6)
    want_v, want_i = reference.topk(x.reshape(12, 33), 6, sorted=True, index_dtype="int32")
    _same(indices, want_i.reshape(3, 4, 6))
    _same(values, want_v.reshape(3, 4, 6))
    calls = [line for line in f.lower(jnp.asarray(x)).as_text().splitlines() if "custom_call" in line]
    assert len(calls) == 1 and "(tensor<12x33xbf16>)" in calls[0]  # one call for the whole batch


def test_vmap_over_other_axes_and_unbatched_input():
    x = _rows("float32", rows=4, width=25)
    ends = np.array([[1, 5, 9, 25], [3, 3, 3, 3]], np.int32)
    f = jax.jit(jax.vmap(lambda a, e: deepselect_rt.topk(a, 4, end=e, indices_type="int32"), in_axes=(None, 1),
                         out_axes=1))
    values, indices = f(x, ends.T)
    for j in range(2):
        want_v, want_i = reference.topk(x, 4, end=ends[j], index_dtype="int32")
        _same(indices[:, j], want_i)
        _same(values[:, j], want_v)


def test_vmap_without_jit_and_nested():
    x = _rows("float16", rows=8, width=19).reshape(2, 2, 2, 19)
    values, indices = jax.vmap(jax.vmap(lambda a: deepselect_rt.topk(a, 3, indices_type="int32")))(jnp.asarray(x))
    want_v, want_i = reference.topk(x.reshape(8, 19), 3, index_dtype="int32")
    _same(indices, want_i.reshape(2, 2, 2, 3))
    _same(values, want_v.reshape(2, 2, 2, 3))


# --- grad ------------------------------------------------------------------------------------

def _reference_grad(x, k, cot, begin=None, end=None, nan_policy="sentinel", sorted=False):
    """The cotangent of each selected element (slot order: ``sorted``) added at its column (raw
    columns: no offsets); fill slots and sentinel rows give nothing."""
    rows, width = x.shape
    _, cols = reference.topk(x, k, begin=begin, end=end, index_dtype="int64", nan_policy="propagate",
                             sorted=sorted)
    b = np.zeros(rows, np.int64) if begin is None else np.asarray(begin, np.int64)
    e = np.full(rows, width, np.int64) if end is None else np.asarray(end, np.int64)
    nan_rows = reference.nan_rows(x, begin, end) if nan_policy != "propagate" else []
    grad = np.zeros((rows, width), np.float64)
    for r in range(rows):
        if r in nan_rows:
            continue
        for j in range(min(k, e[r] - b[r])):
            grad[r, cols[r, j]] += cot[r, j]
    return grad


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_grad_scatters_to_selected_columns(dtype):
    x = _rows(dtype, rows=5, width=30)
    x[4, 3] = np.nan
    begin = np.array([0, 2, 5, 29, 0], np.int32)
    end = np.array([30, 6, 30, 30, 30], np.int32)
    offsets = np.array([1000, -1, 7, 0, 3], np.int32)
    cot = np.random.default_rng(3).integers(1, 9, (5, 8)).astype(np.float32)

    def loss(a):
        values, _ = deepselect_rt.topk(a, 8, sorted=True, begin=begin, end=end, output_idx_offset=offsets,
                                       indices_type="int32", nan_policy="sentinel")
        return jnp.sum(values.astype(jnp.float32) * cot)

    grad = jax.jit(jax.grad(loss))(jnp.asarray(x))
    assert grad.dtype == jnp.dtype(DTYPES[dtype])
    np.testing.assert_array_equal(np.asarray(grad, np.float64), _reference_grad(x, 8, cot, begin, end, sorted=True))


def test_grad_under_propagate_reaches_nan_elements():
    x = _with_nan()
    cot = np.arange(1, 4 * 5 + 1, dtype=np.float32).reshape(4, 5)
    grad = jax.grad(lambda a: jnp.sum(deepselect_rt.topk(a, 5, nan_policy="propagate",
                                                         indices_type="int32")[0] * cot))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(grad), _reference_grad(x, 5, cot, nan_policy="propagate"))


def test_grad_without_jit_vmap_of_grad_and_no_values():
    x = _rows("float32", rows=6, width=21).reshape(2, 3, 21)
    loss = lambda a: jnp.sum(deepselect_rt.topk(a, 4, indices_type="int32")[0] ** 2)  # noqa: E731
    grads = jax.vmap(jax.grad(loss))(jnp.asarray(x))
    want = [_reference_grad(x[i], 4, 2 * reference.topk(x[i], 4)[0]) for i in range(2)]
    np.testing.assert_array_equal(np.asarray(grads), np.stack(want))
    # Only indices returned: the input gets a zero gradient.
    g = jax.grad(lambda a: jnp.sum(a) * 0 + jnp.sum(
        deepselect_rt.topk(a, 2, return_value=False, indices_type="int32")[1]).astype(jnp.float32))(jnp.asarray(x[0]))
    np.testing.assert_array_equal(np.asarray(g), np.zeros_like(x[0]))


# --- errors at trace time --------------------------------------------------------------------

_X = _rows("float32", rows=4, width=16)

BAD = [
    dict(topk=-1),
    dict(topk=2.5),
    dict(sorted=True, sorted_index=True),
    dict(sorted="yes"),
    dict(indices_type="float32"),
    dict(nan_policy="ignore"),
    dict(idx_oob_fill_value=2**40),
    dict(value_oob_fill_value="x"),
    dict(begin=np.zeros(4, np.float32)),
    dict(end=np.zeros(3, np.int32)),
    dict(stream=-1),
    dict(stream="s"),
]


@pytest.mark.parametrize("bad", BAD, ids=lambda d: ",".join(f"{k}={v!r}"[:30] for k, v in d.items()))
def test_errors_match_eager_at_trace_time(bad):
    kwargs = {"topk": 3, "indices_type": "int32", **bad}
    k = kwargs.pop("topk")
    with pytest.raises((TypeError, ValueError)) as eager_error:
        deepselect_rt.topk(jnp.asarray(_X), k, **kwargs)
    traced = {name: jnp.asarray(v) if isinstance(v, np.ndarray) else v for name, v in kwargs.items()}
    arrays = {name: v for name, v in traced.items() if isinstance(v, jax.Array)}
    rest = {name: v for name, v in traced.items() if name not in arrays}
    with pytest.raises(type(eager_error.value)) as jit_error:
        jax.jit(lambda a, arr: deepselect_rt.topk(a, k, **arr, **rest))(jnp.asarray(_X), arrays)
    assert str(jit_error.value) == str(eager_error.value)


@pytest.mark.parametrize("x, message", [
    (np.zeros((2, 3, 4), np.float32), r"input must be 2-D \(rows, width\), got shape \(2, 3, 4\)"),
    (np.zeros((2, 4), np.int32), "input must have dtype bfloat16, float16 or float32, got int32"),
])
def test_input_errors_match_eager(x, message):
    with pytest.raises((TypeError, ValueError), match=message):
        deepselect_rt.topk(jnp.asarray(x), 2, indices_type="int32")
    with pytest.raises((TypeError, ValueError), match=message):
        jax.jit(lambda a: deepselect_rt.topk(a, 2, indices_type="int32"))(jnp.asarray(x))


def test_float64_input_refused_under_x64():
    with _x64():
        x = jnp.zeros((2, 4), jnp.float64)
        with pytest.raises(TypeError, match="input must have dtype bfloat16, float16 or float32, got float64"):
            jax.jit(lambda a: deepselect_rt.topk(a, 2))(x)


def test_int64_without_x64_is_refused():
    if jax.config.jax_enable_x64:
        pytest.skip("jax_enable_x64 is on")
    with pytest.raises(TypeError, match="jax_enable_x64"):
        jax.jit(lambda a: deepselect_rt.topk(a, 2))(jnp.asarray(_X))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"output_idx": "buffer"}, TypeError, "output_idx cannot be written inside a JAX transformation"),
    ({"output_val": "buffer"}, TypeError, "output_val cannot be written inside a JAX transformation"),
    ({"stream": 0}, ValueError, "XLA runs the call on its own stream"),
    ({"nan_policy": "raise_sync"}, ValueError, "raise_sync"),
])
def test_transformation_only_errors(kwargs, error, message):
    buffers = {name: jnp.zeros((4, 3), jnp.int32) for name, v in kwargs.items() if v == "buffer"}
    rest = {name: v for name, v in kwargs.items() if v != "buffer"}
    with pytest.raises(error, match=message):
        jax.jit(lambda a, b: deepselect_rt.topk(a, 3, indices_type="int32", **b, **rest))(jnp.asarray(_X), buffers)


def test_serving_options_refused_inside_transformations():
    table = np.arange(8, dtype=np.int32).reshape(4, 2)
    x = jnp.asarray(_X)
    calls = [
        jax.jit(lambda a: deepselect_rt.topk(a, 3, indices_type="int32", page_table=table, page_size=8)),
        jax.jit(lambda a: deepselect_rt.topk(a, 3, indices_type="int32", k_per_row=np.ones(4, np.int32))),
        jax.vmap(lambda a: deepselect_rt.topk(a, 3, indices_type="int32", return_raw_indices=True)),
        jax.jit(lambda a: deepselect_rt.ragged_topk(a.ravel(), np.array([0, 5, 12], np.int32), 3,
                                                    indices_type="int32")),
    ]
    for i, f in enumerate(calls):
        with pytest.raises(ValueError, match="not supported under jax.jit and other JAX transformations"):
            f(x[None] if i == 2 else x)


@pytest.mark.parametrize("option", ["page_table", "row_to_batch", "k_per_row", "output_raw_idx"])
def test_a_traced_serving_option_with_a_concrete_input_is_refused_by_name(option):
    """A tracer among the serving options puts the call inside the transformation too, even when
    the input itself is a NumPy array."""
    values = {"page_table": np.zeros((4, 2), np.int32), "row_to_batch": np.arange(4, dtype=np.int32),
              "k_per_row": np.ones(4, np.int32), "output_raw_idx": np.zeros((4, 3), np.int32)}
    kw = {"page_table": values["page_table"], "page_size": 8} if option in ("page_table", "row_to_batch") else {}
    if option == "output_raw_idx":
        kw["return_raw_indices"] = True

    def call(traced):
        return deepselect_rt.topk(_X, 3, indices_type="int32", **{**kw, option: traced})

    with pytest.raises(ValueError, match=f"{option}.*not supported under jax.jit and other JAX transformations"):
        jax.jit(call)(jnp.asarray(values[option]))


def test_other_tensor_kinds_refused_inside_jit():
    with pytest.raises(TypeError, match="begin must be a JAX or NumPy array"):
        jax.jit(lambda a: deepselect_rt.topk(a, 2, begin=[0, 0, 0, 0], indices_type="int32"))(jnp.asarray(_X))


def test_old_jax_is_refused_with_a_clear_error():
    from deepselect_rt.interop import jax_ffi

    assert jax_ffi.version_tuple("0.10.2.dev20260101+cuda") == (0, 10, 2)
    jax_ffi.check_version("0.5.0")
    with pytest.raises(BackendUnavailableError, match=r"needs jax >= 0\.5\.0, found jax 0\.4\.30"):
        jax_ffi.check_version("0.4.30")


def test_eager_jax_calls_do_not_take_the_traced_route():
    with contextlib.ExitStack():
        values, indices = deepselect_rt.topk(jnp.asarray(_X), 3, indices_type="int32")
    assert isinstance(values, jax.Array) and not isinstance(values, jax.core.Tracer)


SHARD_MAP_SCRIPT = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np
import deepselect_rt
from jax.sharding import Mesh, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
mesh = Mesh(np.array(jax.devices()[:2]), ("rows",))
x = np.random.default_rng(0).standard_normal((8, 1000)).astype(np.float32)
x[:, 500] = x[:, 10]  # ties across the row
topk = lambda a: deepselect_rt.topk(a, 5, indices_type="int32", nan_policy="sentinel", sorted=True)
f = jax.jit(shard_map(topk, mesh=mesh, in_specs=P("rows"), out_specs=(P("rows"), P("rows"))))
v, i = f(jnp.asarray(x))
rv, ri = deepselect_rt.topk(x, 5, indices_type="int32", nan_policy="sentinel", sorted=True)
assert np.array_equal(np.asarray(i), ri) and np.array_equal(np.asarray(v).view(np.uint32), rv.view(np.uint32))
from jax.sharding import NamedSharding
for spec in (P("rows"), P()):  # sharded and replicated: no one buffer outside jit
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, spec))
    try:
        topk(xs)
        raise SystemExit("an array on two devices was taken eagerly")
    except ValueError as exc:
        assert "on 2 devices" in str(exc) and "inside jax.jit" in str(exc), exc
    assert np.array_equal(np.asarray(jax.jit(topk)(xs)[1]), ri)
print("ok")
"""


def test_shard_map_with_rows_sharded_matches_the_reference():
    """Rows sharded over a mesh axis (two CPU devices): each device takes its own rows, and the
    result is the reference's bit for bit. (A sharded width would give each device the top-k of
    its own columns only: see docs/contract.md.) An array on both devices, sharded or
    replicated, is refused outside jit with a ValueError naming what works, and is exact
    under jax.jit."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SHARD_MAP_SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_eager_route_through_a_cached_jit(monkeypatch):
    """The route of concrete GPU arrays (interop/jax_eager.py), here let onto JAX's CPU device:
    exact for every argument set, one trace per set of static arguments and shapes, and the
    eager path for what it does not take (NumPy row vectors)."""
    from deepselect_rt.interop import jax as jax_interop

    traces = []
    traced_topk = jax_interop.topk
    monkeypatch.setattr(jax_interop, "gpu_route_ordinal", lambda: 0)
    monkeypatch.setattr(jax_interop, "on_gpu", lambda a: isinstance(a, jax.Array))
    monkeypatch.setattr(jax_interop, "topk", lambda *args: traces.append(args[1]) or traced_topk(*args))
    x = _rows("float32", rows=5, width=64)
    end = np.array([64, 10, 0, 64, 33], np.int32)
    for kw in (dict(k=7), dict(k=7), dict(k=7, sorted=True), dict(k=3, end=jnp.asarray(end)),
               dict(k=3, end=jnp.asarray(end)), dict(k=9, return_value=False)):
        k = kw.pop("k")
        got = deepselect_rt.topk(jnp.asarray(x), k, indices_type="int32", nan_policy="sentinel", **kw)
        want = deepselect_rt.topk(x, k, indices_type="int32", nan_policy="sentinel",
                                  **{n: np.asarray(v) if n == "end" else v for n, v in kw.items()})
        _same(got[1], want[1])
        assert (got[0] is None) == (want[0] is None)
        if want[0] is not None:
            _same(got[0], want[0])
    assert traces == [7, 7, 3, 9]  # the repeated argument sets reuse their jitted function
    deepselect_rt.topk(jnp.asarray(x), 3, end=end, indices_type="int32")  # NumPy end: the eager path
    assert traces == [7, 7, 3, 9]
