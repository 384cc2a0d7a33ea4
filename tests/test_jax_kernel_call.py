"""The CUDA route of topk under jax.jit, without a GPU: the field-argument entries, the kernel's
parameters, the plan's limits, and the lowering to jaxlib's kernel-call custom call (with jaxlib's
bindings replaced by a stand-in). The route itself runs in the GPU suite."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt.cuda import launch, xla_call
from deepselect_rt.cuda.plan import DeviceLimits, Plan
from deepselect_rt.cuda.variants import (SPLIT_CLUSTER, large_variant, radix_variant, stream_variant,
                                         with_field_args)
from deepselect_rt.jit.spec import F_BEGIN64, F_IDX64, F_NAN_SENTINEL, F_OFF64, F_SORTED, F_VALUES

PARAMS_CUH = Path(__file__).resolve().parents[1] / "kernels_cu" / "common" / "params.cuh"


def test_field_arguments_follow_the_argument_block():
    text = PARAMS_CUH.read_text()
    struct = re.search(r"struct Params \{(.*?)\};", text, re.S).group(1)
    fields = re.findall(r"(\w+);", re.sub(r"//[^\n]*", "", struct))
    declared = re.findall(r"\bf_(\w+)\b", re.search(r"#define DS_PARAMS\b(.*?)#define DS_BIND_PARAMS", text,
                                                    re.S).group(1))
    bound = re.findall(r"\bf_(\w+)\b", re.search(r"#define DS_BIND_PARAMS\b(.*?)#else", text, re.S).group(1))
    assert fields == declared == bound == list(launch._FIELDS)


def test_with_field_args_is_its_own_variant():
    v = stream_variant("bfloat16", 512)
    fv = with_field_args(v)
    assert fv != v and fv.defines["DS_FIELD_ARGS"] == "1" and "field_args1" in fv.entry
    assert with_field_args(fv) == fv


def _plan(split=1):
    return Plan(stream_variant("float32", 512), 256, 40000, split, SPLIT_CLUSTER if split > 1 else "")


def test_parameters_put_xla_buffers_where_the_block_has_pointers():
    params = xla_call.parameters(_plan(4), 3, 1000, 7, {"end": "int32", "output_idx_offset": "int64"},
                                 index_dtype="int64", sorted=True, return_value=True, nan_policy="sentinel",
                                 idx_fill=-1, val_fill=-np.inf, dtype="float32", nan=(11, 22, 33))
    named = dict(zip(launch._FIELDS, params))
    assert len(params) == len(launch._FIELDS)
    buffers = [name for name, p in named.items() if p == xla_call.BUFFER]
    assert buffers == ["x", "end", "offsets", "out_idx", "out_val"]  # XLA's order: operands, then results
    assert named["begin"] == ("u64", 0) and named["workspace"] == ("u64", 0)
    assert named["row_stride"] == named["width"] == ("i64", 1000) and named["rows"] == ("i64", 3)
    assert named["k"] == named["idx_row_stride"] == named["val_row_stride"] == ("i64", 7)
    assert named["flags"] == ("i64", F_SORTED | F_IDX64 | F_VALUES | F_NAN_SENTINEL | F_OFF64)
    assert named["idx_fill"] == ("i64", -1) and named["val_fill_bits"] == ("u64", 0xFF800000)
    assert (named["nan_head"], named["nan_entries"], named["nan_call"]) == (("u64", 11), ("u64", 22), ("i64", 33))
    assert named["split"] == ("i64", 4)


def test_parameters_without_values_or_vectors():
    params = xla_call.parameters(_plan(), 2, 50, 3, {"begin": "int64"}, index_dtype="int32", sorted=False,
                                 return_value=False, nan_policy="propagate", idx_fill=5, val_fill=0.0,
                                 dtype="bfloat16")
    named = dict(zip(launch._FIELDS, params))
    assert [n for n, p in named.items() if p == xla_call.BUFFER] == ["x", "begin", "out_idx"]
    assert named["out_val"] == ("u64", 0) and named["val_row_stride"] == ("i64", 0)
    assert named["flags"] == ("i64", F_BEGIN64)
    assert named["nan_head"] == ("u64", 0)


@pytest.mark.parametrize("rows, width, k", [(1, 1 << 20, 2048), (1, 1 << 17, 512), (4, 1 << 18, 64), (8, 300000, 256)])
def test_split_stays_within_portable_clusters(rows, width, k):
    h200 = DeviceLimits(132, 232448, True)
    split, how, tier = xla_call.split_for(rows, width, k, "bfloat16", h200)
    assert 1 <= split <= xla_call.PORTABLE_CLUSTER
    assert xla_call.split_for(rows, width, k, "bfloat16", DeviceLimits(108, 166912, False)) == (1, "", None)


def test_ptx_for_xla_leaves_out_line_info():
    from deepselect_rt.cuda import nvrtc

    v = stream_variant("bfloat16", 512)
    assert "-lineinfo" in nvrtc.compile_options(v, "sm_90a").argv
    ptx_options = nvrtc.compile_options(v, "sm_90a", ptx=True).argv
    assert "--gpu-architecture=compute_90a" in ptx_options and "-lineinfo" not in ptx_options


@pytest.mark.parametrize("variant", [stream_variant("bfloat16", 512, split=SPLIT_CLUSTER),
                                     radix_variant("float32", 1024, 1), large_variant("float16")],
                         ids=lambda v: v.family)
def test_field_arg_entries_compile_to_ptx(variant):
    nvrtc = pytest.importorskip("deepselect_rt.cuda.nvrtc")
    try:
        nvrtc.nvrtc_version()
    except deepselect_rt.BackendUnavailableError as exc:
        pytest.skip(str(exc))
    fv = with_field_args(variant)
    ptx = nvrtc.compile_cubin(fv, "sm_90a", ptx=True).cubin.decode()
    assert ".target sm_90a" in ptx and "\t.loc\t" not in ptx  # no line info: jaxlib handles the text a call
    entry = re.search(rf"\.entry {fv.entry}\((.*?)\)", ptx, re.S)
    assert entry is not None and entry.group(1).count(".param .u64") == len(launch._FIELDS)


# --- the lowering ----------------------------------------------------------------------------

class _FakeLib:
    """Stands in for jax._src.lib.gpu_triton: records what the proto would hold."""

    @staticmethod
    def create_array_parameter(bytes_to_zero, divisibility):
        return ("array", bytes_to_zero, divisibility)

    @staticmethod
    def create_scalar_parameter(value, kind):
        return (kind, value)

    class TritonKernel:
        def __init__(self, *args):
            self.args = args

    class TritonKernelCall:
        def __init__(self, kernel, *args):
            self.kernel, self.args = kernel, args

        def to_proto(self, name, metadata):
            return repr((name, self.kernel.args, self.args)).encode()


def test_cuda_lowering_emits_the_kernel_call(monkeypatch):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    from deepselect_rt.interop import jax_ffi

    seen = {}

    def fake_kernel_call(device, dtype, rows, width, k, vectors, **kwargs):
        seen.update(device=device, dtype=dtype, shape=(rows, width, k), vectors=vectors, **kwargs)
        return xla_call.KernelCall("ds_entry", "// ptx", 90, 512, rows, 2, 70000,
                                   (xla_call.BUFFER, ("i64", -3), ("u64", 2**63)))

    monkeypatch.setattr(jax_ffi, "kernel_call_lib", lambda: (_FakeLib, None))
    monkeypatch.setattr(jax_ffi, "target_device", lambda policy: 3)
    monkeypatch.setattr(xla_call, "kernel_call", fake_kernel_call)
    f = jax.jit(lambda a, e: deepselect_rt.topk(a, 5, end=e, indices_type="int32", nan_policy="sentinel"))
    text = f.trace(jnp.zeros((4, 64), jnp.bfloat16), jnp.zeros(4, jnp.int32)).lower(
        lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "custom_call" in line]
    assert len(calls) == 1 and "@triton_kernel_call_ffi(%arg0, %arg1)" in calls[0]
    assert calls[0].endswith("-> (tensor<4x5xi32>, tensor<4x5xbf16>)")  # indices first, as the kernel takes them
    assert re.search(r"return %0#1, %0#0 ", text)  # values first, as topk returns them
    assert seen == dict(device=3, dtype="bfloat16", shape=(4, 64, 5), vectors={"end": "int32"},
                        index_dtype="int32", sorted=False, return_value=True, nan_policy="sentinel",
                        idx_fill=2**31 - 1, val_fill=-np.inf)
    opaque = re.search(r'opaque = "((?:[^"\\]|\\.)*)"', calls[0]).group(1)
    raw = bytes(int(m[1:], 16) if m.startswith("\\") else ord(m) for m in re.findall(r"\\[0-9A-F]{2}|.", opaque))
    assert zlib.decompress(raw) == repr(("ds_entry", ("ds_entry", 16, 2, 70000, "// ptx", "", 90),
                                         (4, 1, 1, [("array", 0, 0), ("i64", -3), ("u64", 2**63)]))).encode()


def test_kernel_call_lib_says_why_not():
    pytest.importorskip("jax")
    from deepselect_rt.interop import jax_ffi

    lib, why = jax_ffi.kernel_call_lib()
    assert (lib is None) == (why is not None)
    if lib is None:
        assert "triton_kernel_call_ffi" in why or "jaxlib" in why
