"""The CUDA route of topk under jax.jit, without a GPU: the field-argument entries, the kernel's
parameters, the plan's limits, and the lowering to jaxlib's kernel-call custom call (with jaxlib's
bindings replaced by a stand-in). The route itself runs in the GPU suite."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import deepselect_rt
from deepselect_rt.cuda import launch, xla_call, xla_launch
from deepselect_rt.cuda.plan import DeviceLimits, Plan, choose_split, radix_tier, row_vectors
from deepselect_rt.cuda.variants import (SPLIT_CLUSTER, SPLIT_RADIX, large_variant, radix_variant, stream_variant,
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
    buffers = [name for name, p in named.items() if p[0] == "buffer"]
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
    assert [n for n, p in named.items() if p[0] == "buffer"] == ["x", "begin", "out_idx"]
    assert named["out_val"] == ("u64", 0) and named["val_row_stride"] == ("i64", 0)
    assert named["flags"] == ("i64", F_BEGIN64)
    assert named["nan_head"] == ("u64", 0)


H200 = DeviceLimits(132, 232448, True)


@pytest.mark.parametrize("rows, width, k", [(1, 1 << 20, 2048), (1, 1 << 17, 512), (4, 1 << 18, 64), (8, 300000, 256),
                                            (64, 1 << 16, 64)])
def test_split_is_the_eager_choice_for_aligned_rows(rows, width, k):
    """Under jit, rows without begin columns are planned from XLA's 16-byte alignment (as an
    eager call on an aligned tensor plans them), with begin columns one vector wider; clusters
    within the portable size, the radix tier chosen for it; no split without clusters."""
    for begin in (False, True):
        vectors = row_vectors("bfloat16", width, 0, width, begin)
        split, how = choose_split(rows, width, vectors, k, "bfloat16", H200)
        split = min(split, xla_call.PORTABLE_CLUSTER)
        tier = radix_tier("bfloat16", vectors, split) if how == SPLIT_RADIX else None
        assert xla_call.split_for(rows, width, k, "bfloat16", H200, begin) == (split, how, tier)
        assert xla_call.split_for(rows, width, k, "bfloat16", DeviceLimits(108, 166912, False), begin) == (1, "", None)
    assert vectors == row_vectors("bfloat16", width, 0, width) + 1


def test_aligned_rows_keep_the_eager_radix_tier_under_jit():
    assert xla_call.split_for(1, 1 << 17, 512, "bfloat16", H200, False) == (8, SPLIT_RADIX, (1024, 2))
    assert xla_call.split_for(1, 1 << 17, 512, "bfloat16", H200, True) == (8, SPLIT_RADIX, (1024, 4))
    # 64 rows of 64K: the aligned row fits two CTAs of the four-vector tier; one vector more does not
    assert xla_call.split_for(64, 1 << 16, 64, "bfloat16", H200, False) == (2, SPLIT_RADIX, (1024, 4))
    assert xla_call.split_for(64, 1 << 16, 64, "bfloat16", H200, True) == (2, SPLIT_RADIX, (1024, 8))


@pytest.mark.parametrize("width, vectors, aligned", [(1024, {}, True), (1024, {"end": "int32"}, True),
                                                     (1024, {"begin": "int32"}, False), (1001, {}, False)])
def test_input_buffer_asks_for_the_alignment_the_plan_took(width, vectors, aligned):
    params = xla_call.parameters(_plan(), 2, width, 3, vectors, index_dtype="int32", sorted=False,
                                 return_value=False, nan_policy="propagate", idx_fill=5, val_fill=0.0,
                                 dtype="bfloat16")
    assert params[0] == (("buffer", xla_call.ALIGNMENT) if aligned else xla_call.BUFFER)


def test_ptx_for_xla_leaves_out_line_info():
    from deepselect_rt.cuda import nvrtc

    v = stream_variant("bfloat16", 512)
    assert "-lineinfo" in nvrtc.compile_options(v, "sm_90a").argv
    ptx_options = nvrtc.compile_options(v, "sm_90a", ptx=True).argv
    assert "--gpu-architecture=compute_90a" in ptx_options and "-lineinfo" not in ptx_options
    bare = nvrtc.compile_options(v, "sm_90a", line_info=False).argv
    assert "--gpu-architecture=sm_90a" in bare and "-lineinfo" not in bare
    assert nvrtc.NVRTC_BARE_COMPILER.name not in (nvrtc.NVRTC_COMPILER.name, nvrtc.NVRTC_PTX_COMPILER.name)


@pytest.fixture
def nvrtc():
    """deepselect_rt.cuda.nvrtc where NVRTC loads, else the test skips."""
    module = pytest.importorskip("deepselect_rt.cuda.nvrtc")
    try:
        module.nvrtc_version()
    except deepselect_rt.BackendUnavailableError as exc:
        pytest.skip(str(exc))
    return module


@pytest.mark.parametrize("variant", [stream_variant("bfloat16", 512, split=SPLIT_CLUSTER),
                                     radix_variant("float32", 1024, 1), large_variant("float16")],
                         ids=lambda v: v.family)
def test_field_arg_entries_compile_to_ptx(variant, nvrtc):
    fv = with_field_args(variant)
    ptx = nvrtc.compile_cubin(fv, "sm_90a", ptx=True).cubin.decode()
    assert ".target sm_90a" in ptx and "\t.loc\t" not in ptx  # no line info: jaxlib handles the text a call
    entry = re.search(rf"\.entry {fv.entry}\((.*?)\)", ptx, re.S)
    assert entry is not None and entry.group(1).count(".param .u64") == len(launch._FIELDS)


# --- the kernel-call descriptor --------------------------------------------------------------

def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def _tag_varint(field: int, value: int) -> bytes:
    """A one-byte tag and a one-byte varint (field < 16, value < 128)."""
    return bytes((field << 3, value))


def _decode(data: bytes) -> list:
    """A protobuf message as [(field, value)]: varints as ints, length-delimited as bytes."""
    fields, i = [], 0
    while i < len(data):
        tag, i = _read_varint(data, i)
        if tag & 7 == 0:
            value, i = _read_varint(data, i)
        else:
            assert tag & 7 == 2, tag
            size, i = _read_varint(data, i)
            value, i = data[i:i + size], i + size
        fields.append((tag >> 3, value))
    return fields


def test_descriptor_with_ptx_holds_the_launch():
    from deepselect_rt.interop import kernel_call_proto

    params = (("buffer", 0), ("i64", -3), ("u64", 2**63), ("u64", 0), ("buffer", 16))
    data = kernel_call_proto.encode("ds_entry", 512, 2, 70000, 90, 4, params, "my call", ptx="// ptx")
    top = _decode(data)
    assert [f for f, _ in top] == [1, 4] and top[1][1] == b"my call"
    call = _decode(top[0][1])
    assert [f for f, _ in call] == [1, 2, 3, 4, 5, 5, 5, 5, 5] and [v for _, v in call[1:4]] == [4, 1, 1]
    assert [_decode(v) for _, v in call[4:]] == [[(1, b"")], [(5, 2**64 - 3)], [(6, 2**63)], [(6, 0)],
                                                 [(1, _tag_varint(2, 16))]]
    kernel = _decode(call[0][1])
    assert kernel == [(1, b"ds_entry"), (2, 16), (3, 70000), (4, b"// ptx"), (6, 90), (10, 2)]


def test_descriptor_with_an_image_names_it_by_digest():
    from deepselect_rt.interop import kernel_call_proto

    image = b"\x7fELF" + bytes(range(256)) * 40
    data = kernel_call_proto.encode("ds_entry", 256, 1, 0, 90, 1, (("buffer", 0),), "ds_entry", image=image)
    kernel = dict(_decode(_decode(_decode(data)[0][1])[0][1]))
    assert 3 not in kernel  # no dynamic shared memory: left out, as proto3 does
    assert kernel[4].decode() == "deepselect-rt cubin sha256:" + __import__("hashlib").sha256(image).hexdigest()
    assert kernel[10] == 1 and _decode(kernel[11]) == [(1, image), (2, b"ds_entry")]
    other = kernel_call_proto.encode("ds_entry", 256, 1, 0, 90, 1, (("buffer", 0),), "ds_entry",
                                     image=image[:-1] + b"\x00")
    assert dict(_decode(_decode(_decode(other)[0][1])[0][1]))[4] != kernel[4]


@pytest.mark.parametrize("code", [{}, {"ptx": "x", "image": b"y"}])
def test_descriptor_needs_exactly_one_kind_of_code(code):
    from deepselect_rt.interop import kernel_call_proto

    with pytest.raises(ValueError, match="exactly one"):
        kernel_call_proto.encode("e", 32, 1, 0, 90, 1, (), "e", **code)
    with pytest.raises(ValueError, match="'buffer', 'i64' or 'u64'"):
        kernel_call_proto.encode("e", 32, 1, 0, 90, 1, (("f32", 1),), "e", ptx="x")


# --- the lowering ----------------------------------------------------------------------------

@pytest.mark.parametrize("route", ["image", "ptx"])
def test_cuda_lowering_emits_the_kernel_call(monkeypatch, route):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    from deepselect_rt.interop import jax_ffi

    seen = {}

    def fake_kernel_call(device, dtype, rows, width, k, vectors, **kwargs):
        seen.update(device=device, dtype=dtype, shape=(rows, width, k), vectors=vectors, **kwargs)
        code = {"image": b"\x7fELF-cubin"} if kwargs["image"] else {"ptx": "// ptx"}
        return xla_call.KernelCall("ds_entry", 90, 512, rows, 2, 70000,
                                   (xla_call.BUFFER, ("i64", -3), ("u64", 2**63)), **code)

    monkeypatch.setattr(jax_ffi, "kernel_call_route", lambda: (route, None))
    monkeypatch.setattr(jax_ffi, "target_device", lambda policy: 3)
    monkeypatch.setattr(xla_call, "kernel_call", fake_kernel_call)
    monkeypatch.setattr(xla_launch, "needs_own_launch", lambda *args: False)
    f = jax.jit(lambda a, e: deepselect_rt.topk(a, 5, end=e, indices_type="int32", nan_policy="sentinel"))
    text = f.trace(jnp.zeros((4, 64), jnp.bfloat16), jnp.zeros(4, jnp.int32)).lower(
        lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "custom_call" in line]
    assert len(calls) == 1 and "@triton_kernel_call_ffi(%arg0, %arg1)" in calls[0]
    assert calls[0].endswith("-> (tensor<4x5xi32>, tensor<4x5xbf16>)")  # indices first, as the kernel takes them
    assert re.search(r"return %0#1, %0#0 ", text)  # values first, as topk returns them
    assert seen == dict(device=3, dtype="bfloat16", shape=(4, 64, 5), vectors={"end": "int32"},
                        index_dtype="int32", sorted=False, return_value=True, nan_policy="sentinel",
                        idx_fill=2**31 - 1, val_fill=-np.inf, image=route == "image")
    opaque = re.search(r'opaque = "((?:[^"\\]|\\.)*)"', calls[0]).group(1)
    raw = bytes(int(m[1:], 16) if m.startswith("\\") else ord(m) for m in re.findall(r"\\[0-9A-F]{2}|.", opaque))
    top = _decode(zlib.decompress(raw))
    call = _decode(top[0][1])
    kernel = dict(_decode(call[0][1]))
    assert top[1] == (4, b"ds_entry") and [v for _, v in call[1:4]] == [4, 1, 1] and len(call) == 7
    assert (kernel[1], kernel[2], kernel[3], kernel[6], kernel[10]) == (b"ds_entry", 16, 70000, 90, 2)
    if route == "image":
        assert dict(_decode(kernel[11]))[1] == b"\x7fELF-cubin" and kernel[4].startswith(b"deepselect-rt cubin")
    else:
        assert kernel[4] == b"// ptx" and 11 not in kernel


def test_cuda_lowering_of_plans_beyond_the_launcher_emits_our_own_target(monkeypatch):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    import json

    from deepselect_rt.interop import jax_ffi

    asked = []
    monkeypatch.setattr(jax_ffi, "kernel_call_route", lambda: ("image", None))
    monkeypatch.setattr(jax_ffi, "target_device", lambda policy: 2)
    monkeypatch.setattr(xla_launch, "needs_own_launch", lambda *args: asked.append(args) or True)
    monkeypatch.setattr(xla_launch, "prepare", lambda *args: asked.append(("prepare",) + args))
    f = jax.jit(lambda a, b: deepselect_rt.topk(a, 9, begin=b, sorted=True, indices_type="int32",
                                                nan_policy="propagate", idx_oob_fill_value=-1))
    text = f.trace(jnp.zeros((3, 1000), jnp.float32), jnp.zeros(3, jnp.int32)).lower(
        lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "custom_call" in line]
    assert len(calls) == 1 and f"@{jax_ffi.OWN_TARGET}(%arg0, %arg1)" in calls[0]
    assert calls[0].endswith("-> (tensor<3x9xf32>, tensor<3x9xi32>)")  # values, then indices
    assert asked == [(2, "float32", 3, 1000, 9, True), ("prepare", 2, "float32", 3, 1000, 9, True)]
    spec = re.search(r'spec = "((?:[^"\\]|\\.)*)"', calls[0]).group(1)
    spec = re.sub(r"\\([0-9A-F]{2})", lambda m: chr(int(m[1], 16)), spec)  # MLIR's escapes
    assert json.loads(spec) == dict(dtype="float32", rows=3, width=1000, k=9, vectors=[["begin", "int32"]],
                                    index_dtype="int32", sorted=True, return_value=True, nan_policy="propagate",
                                    idx_fill=-1, val_fill_bits=-0x10000000000000)  # -inf's float64 bits


def test_launcher_carries_clusters_of_at_most_eight():
    h100 = DeviceLimits(132, 232448, clusters=True)
    # The eager plan: the radix select in clusters of 16 for 1-8 rows of 1M, and 1 x 128K.
    assert not xla_call.launcher_carries(1, 1 << 20, 2048, "bfloat16", h100, False)
    assert not xla_call.launcher_carries(8, 1 << 20, 2048, "bfloat16", h100, False)
    assert not xla_call.launcher_carries(1, 1 << 17, 512, "bfloat16", h100, True)
    assert xla_call.launcher_carries(16, 1 << 20, 2048, "bfloat16", h100, False)
    assert xla_call.launcher_carries(64, 1 << 16, 64, "bfloat16", h100, False)
    assert xla_call.launcher_carries(1, 1 << 20, 2048, "bfloat16", DeviceLimits(108, 166912), False)  # no clusters
    for rows, width, k in [(1, 1 << 20, 2048), (4, 1 << 18, 512), (2, 129280, 64)]:
        vectors = row_vectors("float32", width)
        split, _ = choose_split(rows, width, vectors, k, "float32", h100)
        assert xla_call.launcher_carries(rows, width, k, "float32", h100, False) == (split <= 8)


def test_own_launch_repeats_with_the_new_addresses(monkeypatch):
    """xla_launch.execute: the first execution plans through backend.run with XLA's addresses, on
    the device of XLA's stream; later ones repeat that launch with the new addresses; an input at
    another address modulo 16 bytes (another plan), a repeat refused (plans changed) or another
    device takes backend.run again."""
    runs, repeats = [], []

    def again(stream, out_idx, out_val, out_raw, inputs):
        repeats.append((stream, out_idx, out_val, out_raw, inputs))
        return len(repeats) != 2  # the second repeat is refused

    monkeypatch.setattr(xla_launch.backend, "run", lambda req: runs.append(req) or again)
    shapes = {"args": [(2, 4096), (2,), (2,)], "rets": [(2, 16), (2, 16)]}.__getitem__
    monkeypatch.setattr(xla_launch, "stream_device", lambda stream: {7: 1, 8: 1, 9: 0}[stream])
    spec = xla_launch.spec("bfloat16", 2, 4096, 16, {"end": "int32", "output_idx_offset": "int64"},
                           index_dtype="int64", sorted=False, return_value=True, nan_policy="raise",
                           idx_fill=-1, val_fill=-float("nan"))  # a NaN's sign survives
    xla_launch.execute(spec, 7, [0x1000, 0x2000, 0x3000], [0x4000, 0x5000], shapes)
    (req,) = runs
    assert (req.x.ptr, req.x.shape, req.x.strides, req.x.dtype, req.x.device_id) == (0x1000, (2, 4096), (4096, 1),
                                                                                    "bfloat16", 1)
    assert req.begin is None and (req.end.ptr, req.end.dtype) == (0x2000, "int32")
    assert (req.offsets.ptr, req.offsets.dtype, req.offsets.shape) == (0x3000, "int64", (2,))
    assert (req.out_val.ptr, req.out_idx.ptr, req.out_idx.dtype, req.out_idx.shape) == (0x4000, 0x5000, "int64", (2, 16))
    assert (req.stream, req.k, req.nan_policy, req.return_value, req.idx_fill) == (7, 16, "raise", True, -1)
    assert np.isnan(req.val_fill) and struct.pack("<d", req.val_fill) == struct.pack("<d", -np.float64("nan"))
    xla_launch.execute(spec, 8, [0x1100, 0x2100, 0x3100], [0x4100, 0x5100], shapes)
    assert len(runs) == 1
    assert repeats[-1] == (8, 0x5100, 0x4100, 0, (("x", 0x1100), ("end", 0x2100), ("offsets", 0x3100)))
    xla_launch.execute(spec, 8, [0x1200, 0x2200, 0x3200], [0x4200, 0x5200], shapes)  # the repeat is refused
    assert len(runs) == 2 and runs[-1].x.ptr == 0x1200
    xla_launch.execute(spec, 8, [0x1208, 0x2200, 0x3200], [0x4200, 0x5200], shapes)  # 8 bytes off: planned anew
    assert len(runs) == 3 and runs[-1].x.ptr == 0x1208
    xla_launch.execute(spec, 9, [0x1200, 0x2200, 0x3200], [0x4200, 0x5200], shapes)  # another device's stream
    assert len(runs) == 4 and runs[-1].x.device_id == 0 and runs[-1].stream == 9
    wrong = {"args": [(2, 4096), (2,), (2,)], "rets": [(2, 16)]}.__getitem__  # values missing
    with pytest.raises(ValueError, match="XLA passed buffers of shapes"):
        xla_launch.execute(spec, 9, [0x1204, 0x2200, 0x3200], [0x4200], wrong)
    assert len(runs) == 4


def test_kernel_call_route_says_why_not():
    pytest.importorskip("jax")
    from deepselect_rt.interop import jax_ffi

    route, why = jax_ffi.kernel_call_route()
    assert (route is None) == (why is not None) and route in (None, "image", "ptx")
    if route is None:
        assert "triton_kernel_call_ffi" in why or "jaxlib" in why
