"""torch integration on the CPU: torch.compile(fullgraph=True) captures topk as one custom op with
the same results as eager calls (checked against the NumPy reference), and the deep_select
drop-in module."""

from __future__ import annotations

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt import reference

torch = pytest.importorskip("torch")


def _reference(x, k, **kw):
    return reference.topk(x.numpy(), k, **kw)


@pytest.mark.parametrize("kw,ref_kw", [
    (dict(sorted=True, nan_policy="propagate"), dict(sorted=True)),
    (dict(indices_type=torch.int32, return_value=False, nan_policy="sentinel"),
     dict(index_dtype="int32", return_value=False, nan_policy="sentinel")),
    (dict(sorted_index=True, idx_oob_fill_value=-1, value_oob_fill_value=0.0, nan_policy="propagate"),
     dict(idx_fill=-1, val_fill=0.0)),
])
def test_compile_fullgraph_matches_reference(kw, ref_kw):
    x = torch.randn(5, 40)
    x[2, 3] = float("nan")
    end = torch.tensor([40, 3, 20, 0, 39], dtype=torch.int32)
    offsets = torch.tensor([0, 10, -5, 7, 2**20], dtype=torch.int64)

    def f(x, end, offsets):
        return deepselect_rt.topk(x, 8, end=end, output_idx_offset=offsets, **kw)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, end, offsets)
    want = _reference(x, 8, end=end.numpy(), offsets=offsets.numpy(), **ref_kw)
    np.testing.assert_array_equal(got[1].numpy(), want[1])
    if want[0] is None:
        assert got[0] is None
    else:
        np.testing.assert_array_equal(got[0].numpy().view(np.uint32), want[0].view(np.uint32))


def test_compile_fills_caller_buffers():
    x = torch.randn(3, 50)
    idx = torch.full((3, 6), -1, dtype=torch.int64)
    val = torch.zeros(3, 6)

    def f(x, idx, val):
        return deepselect_rt.topk(x, 6, sorted=True, output_idx=idx, output_val=val, nan_policy="propagate")

    v, i = torch.compile(f, fullgraph=True, backend="aot_eager")(x, idx, val)
    want = _reference(x, 6, sorted=True)
    np.testing.assert_array_equal(idx.numpy(), want[1])
    np.testing.assert_array_equal(val.numpy(), want[0])
    assert v.data_ptr() == val.data_ptr() and i.data_ptr() == idx.data_ptr()


@pytest.mark.parametrize("kw,text", [
    (dict(topk=2.5), "topk must be an integer"),
    (dict(sorted="no"), "sorted must be a bool"),
    (dict(value_oob_fill_value="1"), "value_oob_fill_value must be a real number"),
    (dict(stream="junk"), "stream cannot be passed under torch.compile"),
    (dict(output_val=torch.zeros(2, 2), return_value=False), "return_value=False"),
    (dict(topk=-1), "topk must be in"),
])
def test_compile_checks_scalar_arguments(kw, text):
    """torch reports errors raised while tracing as its own exception carrying our message."""
    args = dict(topk=2)
    args.update(kw)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=text):
        torch.compile(lambda a: deepselect_rt.topk(a, **args), fullgraph=True, backend="aot_eager")(torch.randn(2, 8))


def test_compile_checks_caller_buffers_when_run():
    torch._dynamo.reset()
    f = torch.compile(lambda a, o: deepselect_rt.topk(a, 2, output_idx=o), fullgraph=True, backend="aot_eager")
    with pytest.raises(TypeError, match="output_idx must have dtype int64"):
        f(torch.randn(2, 8), torch.zeros(2, 2, dtype=torch.int32))


def test_custom_op_registered():
    import deepselect_rt.interop.torch_op  # noqa: F401  (registers the op)

    assert hasattr(torch.ops.deepselect_rt, "topk")


def test_compat_is_a_drop_in():
    import deepselect_rt.compat as deep_select

    x = torch.randn(4, 100, dtype=torch.bfloat16)
    v, i = deep_select.topk(x, 10, True, nan_policy="propagate")
    assert i.dtype == torch.int64 and v.dtype == torch.bfloat16
    want = deepselect_rt.topk(x, 10, sorted=True, nan_policy="propagate")
    assert torch.equal(i, want[1])
    assert deep_select.get_stride_requirement() == deepselect_rt.get_stride_requirement()
