"""The Ascend backend's host side, on the CPU: probes, tiling, the parameter struct against the
shipped header, cache keys, compile commands, error messages. Nothing here needs an NPU or CANN;
the kernel itself is exercised by tests/test_ascend_npu.py (marker ``npu``)."""

from __future__ import annotations

import ctypes
import re
import shutil
import sys
import types

import numpy as np
import pytest

from deepselect_rt.ascend import backend, compiler, variants
from deepselect_rt.ascend import arch as device
from deepselect_rt.ascend import driver as probe
from deepselect_rt.ascend import launch as args
from deepselect_rt.ascend import plan as tiling
from deepselect_rt.cli import main as cli
from deepselect_rt.cli.warmup import npu_tasks
from deepselect_rt.jit import env as resources
from deepselect_rt.jit import warmup
from deepselect_rt.jit.cache import KernelCache
from deepselect_rt.jit.key import toolchain_key_fields
from deepselect_rt.jit.spec import FLAGS
from deepselect_rt.errors import BackendUnavailableError
from deepselect_rt.request import TopkRequest
from deepselect_rt.interop.views import view_of

KERNELS = resources.ascendc_source_dir()


# -- fakes of the machine's inputs (files and modules, not behaviour) ---------------------------

def _importer(present: set):
    def import_module(name):
        if name not in present:
            raise ImportError(f"No module named {name!r}")
        return types.ModuleType(name)
    return import_module


def _cann(tmp_path, *, aclrtc=True, bisheng=True, version="8.2.RC1"):
    home = tmp_path / "cann"
    (home / "lib64").mkdir(parents=True)
    if version:
        (home / "version.info").write_text(f"Version={version}\n")
    if aclrtc:
        (home / "lib64" / "libacl_rtc.so").write_bytes(b"")
    if bisheng:
        path = home / "compiler" / "ccec_compiler" / "bin" / "bisheng"
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\necho 'error: fake bisheng' >&2\nexit 1\n")
        path.chmod(0o755)
    return home


def _devdir(tmp_path, *names):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in names:
        (dev / name).write_bytes(b"")
    return dev


def _stack(tmp_path, **kw):
    return probe.detect(_devdir(tmp_path, "davinci0"), {"ASCEND_HOME_PATH": str(_cann(tmp_path, **kw))},
                        _importer({"acl", "torch_npu"}))


# -- probe and backend selection ----------------------------------------------------------------

def test_probe_finds_a_complete_stack(tmp_path):
    stack = _stack(tmp_path)
    assert stack.device_nodes == ("davinci0",)
    assert stack.cann_version == "8.2.RC1"
    assert stack.aclrtc.name == "libacl_rtc.so" and stack.bisheng.name == "bisheng"
    assert stack.missing_for_run() == [] and probe.require_runtime(stack) is stack


def test_probe_ignores_the_manager_node_and_reads_toolkit_home(tmp_path):
    dev = _devdir(tmp_path, "davinci_manager", "devmm_svm")
    home = _cann(tmp_path, version=None)
    stack = probe.detect(dev, {"ASCEND_TOOLKIT_HOME": str(home)}, _importer(set()))
    assert stack.device_nodes == ()
    assert stack.cann_home == home and stack.cann_version == "unknown"


@pytest.mark.parametrize("missing, expected", [
    ("node", "no /dev/davinci<N> device node"),
    ("cann", "ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME"),
    ("compiler", "neither libacl_rtc.so (aclrtc) nor bisheng"),
    ("acl", "AscendCL Python module 'acl'"),
    ("torch_npu", "torch_npu"),
])
def test_require_runtime_names_exactly_what_is_missing(tmp_path, monkeypatch, missing, expected):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no bisheng found on PATH either
    dev = _devdir(tmp_path, *(() if missing == "node" else ("davinci0",)))
    env = {} if missing == "cann" else {
        "ASCEND_HOME_PATH": str(_cann(tmp_path, aclrtc=missing != "compiler", bisheng=missing != "compiler")),
        "PATH": str(tmp_path / "nothing")}
    present = {"acl", "torch_npu"} - {missing}
    stack = probe.detect(dev, env, _importer(present))
    with pytest.raises(BackendUnavailableError) as err:
        probe.require_runtime(stack)
    text = str(err.value)
    assert expected in text
    assert text.count("\n  - ") == 1, text  # only the one missing piece is named


def test_a_cann_path_that_does_not_exist_counts_as_missing(tmp_path):
    stack = probe.detect(_devdir(tmp_path), {"ASCEND_HOME_PATH": str(tmp_path / "gone")}, _importer(set()))
    assert stack.cann_home is None
    assert len(stack.missing_for_run()) == 4


def test_backend_run_raises_backend_unavailable_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "DEV_DIR", _devdir(tmp_path))
    for name in probe.ENV_HOMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(sys.modules, "acl", None)  # makes `import acl` fail
    x = np.zeros((2, 8), np.float32)
    req = TopkRequest(view_of(x), 2, None, None, None, "int64", False, False, True, "raise", 0,
                      0.0, view_of(np.zeros((2, 2), np.int64)), view_of(np.zeros((2, 2), np.float32)), 0)
    with pytest.raises(BackendUnavailableError, match="davinci.*\n.*CANN toolkit.*\n.*'acl'"):
        backend.run(req)


def test_arch_of_soc():
    assert device.arch_of_soc("Ascend910B3") == "dav-2201"
    assert device.arch_of_soc("Ascend910_9382") == "dav-2201"
    assert device.arch_of_soc("Ascend950PR") == "dav-3510"
    with pytest.raises(BackendUnavailableError, match="Ascend310P3"):
        device.arch_of_soc("Ascend310P3")


# -- variants -----------------------------------------------------------------------------------

def test_arch_spellings_and_errors():
    assert variants.normalise_arch("DAV_2201") == variants.normalise_arch("2201") == "dav-2201"
    with pytest.raises(ValueError, match="dav-2201, dav-3510"):
        variants.normalise_arch("dav-1001")


def test_dtype_codes_match_the_kernel_header():
    text = (KERNELS / "common" / "dtype.h").read_text()
    codes = {name: int(v) for name, v in re.findall(r"#define DS_DTYPE_(\w+) (\d+)", text)}
    assert codes == {"F32": variants.DTYPE_CODE["float32"], "F16": variants.DTYPE_CODE["float16"],
                     "BF16": variants.DTYPE_CODE["bfloat16"]}


def test_default_variants_one_per_dtype_with_distinct_entries():
    vs = variants.default_variants()
    assert [v.dtype for v in vs] == ["bfloat16", "float16", "float32"]
    assert len({v.entry for v in vs}) == 3
    assert [v.dtype for v in variants.default_variants(["float32"])] == ["float32"]


# -- tiling -------------------------------------------------------------------------------------

SHAPES = [(1, 1, 1), (1, 63, 5), (3, 64, 64), (7, 65, 100), (48, 1000, 1), (49, 131072, 2048),
          (1000, 16384, 512), (5, 1 << 20, 4096), (2, 10, 10000), (97, 129280, 4096)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("arch", variants.SUPPORTED_ARCHS)
@pytest.mark.parametrize("rows, width, k", SHAPES)
@pytest.mark.parametrize("cores", [1, 7, 48])
def test_tiling_invariants(dtype, arch, rows, width, k, cores):
    t = tiling.make_tiling(rows, width, k, dtype, arch, cores)
    covered = [r for c in range(t.block_dim) for r in t.rows_of(c)]
    assert covered == list(range(rows))          # every row exactly once, in order
    assert 1 <= t.block_dim <= min(rows, cores)
    assert t.ub == tiling.ub_bytes(dtype, t.chunk, k, t.out_tile)
    assert t.ub <= tiling.UB_BYTES[arch] - tiling.UB_RESERVE
    assert t.chunk % tiling.CHUNK_ALIGN == 0 and t.chunk in tiling.CHUNKS
    assert t.out_tile % tiling.OUT_TILE_ALIGN == 0 and t.out_tile >= 1
    assert t.chunk <= max(tiling.CHUNK_ALIGN, -(-width // 64) * 64)


def test_tiling_prefers_large_chunks_for_long_rows():
    t = tiling.make_tiling(4, 1 << 20, 512, "bfloat16", "dav-2201", 48)
    assert t.chunk >= 4096


def test_tiling_k_limit_is_exact_and_named():
    kmax = tiling.max_k("float32", "dav-2201")
    assert kmax >= 8192
    tiling.make_tiling(1, 1 << 16, kmax, "float32", "dav-2201", 1)
    with pytest.raises(BackendUnavailableError, match=f"largest k served is {kmax}"):
        tiling.make_tiling(1, 1 << 16, kmax + 1, "float32", "dav-2201", 1)


def test_tiling_rejects_degenerate_inputs():
    with pytest.raises(ValueError, match="rows, k and cores"):
        tiling.make_tiling(0, 8, 1, "float32", "dav-2201", 1)


def test_ub_bytes_lists_every_kernel_buffer():
    # ub_bytes mirrors the kernel's InitBuffer calls one term each (bfloat16 has all of them).
    text = (KERNELS / "topk_stream.cpp").read_text()
    assert text.count("pipe_.InitBuffer(") == 10
    chunk, k, tile = 1024, 100, 112
    expect = 2 * chunk + 4 * chunk + 2 * 128 + 2 * 4 * chunk + 800 + 8 * tile + 2 * tile + 32
    assert tiling.ub_bytes("bfloat16", chunk, k, tile) == expect


# -- the parameter struct against params.h ------------------------------------------------------

_C_TYPES = {"uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64}


def _header_fields():
    text = (KERNELS / "common" / "params.h").read_text()
    body = re.search(r"struct DsParams \{(.*?)\};", text, re.S).group(1)
    fields = re.findall(r"^\s*(\w+)\s+(\w+);\s*//\s*(\d+)", body, re.M)
    declared = int(re.search(r"(\d+) fields, (\d+) bytes", text).group(2))
    return [(t, n, int(o)) for t, n, o in fields], declared, text


def test_params_layout_matches_the_header_byte_for_byte():
    fields, declared_size, _ = _header_fields()
    assert [name for _, name, _ in fields] == [name for name, _ in args.Params._fields_]
    offset = 0
    for ctype_name, name, comment_offset in fields:
        size = ctypes.sizeof(_C_TYPES[ctype_name])
        offset = -(-offset // size) * size             # C alignment of an 8-byte scalar
        assert comment_offset == offset, f"{name}: header comment says {comment_offset}, C puts it at {offset}"
        member = getattr(args.Params, name)
        assert (member.offset, member.size) == (offset, size), name
        assert dict(args.Params._fields_)[name] is _C_TYPES[ctype_name], f"{name}: signedness"
        offset += size
    assert ctypes.sizeof(args.Params) == offset == declared_size


def test_flags_match_the_header():
    _, _, text = _header_fields()
    header = {name: int(v) for name, v in re.findall(r"#define (DS_F_\w+) (\d+)", text)}
    assert header == FLAGS
    align = int(re.search(r"#define DS_CHUNK_ALIGN (\d+)", text).group(1))
    assert align == tiling.CHUNK_ALIGN


def _request(dtype=np.float32, *, index="int32", sorted_=False, policy="sentinel", begin=None,
             offsets=None, values=True):
    x = np.arange(40, dtype=dtype).reshape(4, 10)[:, :9]   # row stride 10, width 9
    out_idx = np.zeros((4, 3), index)
    out_val = np.zeros((4, 3), dtype) if values else None
    opt = lambda a: None if a is None else view_of(a)  # noqa: E731
    return TopkRequest(view_of(x), 3, opt(begin), None, opt(offsets), index, sorted_, False, values,
                       policy, -1, float("-inf"), view_of(out_idx), opt(out_val), 0), x, out_idx, out_val


def test_pack_fills_every_field():
    req, x, out_idx, out_val = _request(begin=np.zeros(4, np.int64), offsets=np.zeros(4, np.int32))
    t = tiling.make_tiling(4, 9, 3, "float32", "dav-2201", 2)
    p = args.pack(req, t, nan_flags_ptr=0)
    assert p.x == x.ctypes.data and p.row_stride == 10 and (p.rows, p.width, p.k) == (4, 9, 3)
    assert p.begin == req.begin.ptr and p.end == 0 and p.offsets == req.offsets.ptr
    assert p.out_idx == out_idx.ctypes.data and p.idx_row_stride == 3
    assert p.out_val == out_val.ctypes.data and p.val_row_stride == 3
    assert p.flags == FLAGS["DS_F_BEGIN64"] | FLAGS["DS_F_VALUES"] | FLAGS["DS_F_NAN_SENTINEL"]
    assert p.idx_fill == -1 and p.val_fill_bits == 0xFF800000 and p.nan_flags == 0
    assert (p.rows_per_core, p.rows_extra, p.chunk, p.out_tile) == (2, 0, t.chunk, t.out_tile)
    raw = bytes(p)
    assert len(raw) == 160 and int.from_bytes(raw[104:112], "little", signed=True) == -1


@pytest.mark.parametrize("dtype, bits", [(np.float16, 0xFC00), ("bfloat16", 0xFF80)])
def test_pack_fill_bits_in_16_bit_dtypes(dtype, bits):
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    req, *_ = _request(dt, index="int64", sorted_=True, policy="propagate", values=False)
    p = args.pack(req, tiling.make_tiling(4, 9, 3, req.x.dtype, "dav-3510", 8), nan_flags_ptr=0x1000)
    assert p.val_fill_bits == bits and p.out_val == 0 and p.nan_flags == 0x1000
    assert p.flags == FLAGS["DS_F_SORTED"] | FLAGS["DS_F_IDX64"]


# -- compile command lines and the source given to aclrtc ---------------------------------------

def test_bisheng_command_line(tmp_path):
    v = variants.stream_variant("bfloat16")
    cmd = compiler.bisheng_command("/cann/bisheng", v, "dav-2201", KERNELS, tmp_path / "k.o")
    assert cmd[0] == "/cann/bisheng"
    assert cmd[1:4] == ["-x", "asc", "--cce-aicore-only"]
    assert "--npu-arch=dav-2201" in cmd and "-O2" in cmd and "-std=c++17" in cmd
    assert f"-DDS_ENTRY={v.entry}" in cmd and "-DDS_DTYPE=2" in cmd
    assert cmd[cmd.index("-I") + 1] == str(KERNELS)
    assert cmd[-4:] == ["-c", str(KERNELS / "topk_stream.cpp"), "-o", str(tmp_path / "k.o")]


def test_aclrtc_options_have_no_machine_paths():
    opts = compiler.compile_options(variants.stream_variant("float16"), "3510", "aclrtc", KERNELS)
    assert opts.argv == opts.portable
    assert opts.argv[0] == "--npu-arch=dav-3510" and "-DDS_DTYPE=1" in opts.argv


def test_amalgamated_source_inlines_each_kernel_header_once():
    text = compiler.amalgamate(KERNELS, "topk_stream.cpp")
    headers = sorted(p.relative_to(KERNELS).as_posix() for p in KERNELS.rglob("*.h"))
    for rel in headers:
        assert text.count(f"// ---- {rel} ----") == 1, rel
    local = re.findall(r'#\s*include\s+"([^"]+)"', text)
    assert set(local) == {"kernel_operator.h"}           # only CANN's header is left to include
    assert "#pragma once" not in text
    assert 'extern "C" __global__ __aicore__ void DS_ENTRY(DsParams p)' in text
    # Definitions come before their use: params.h's struct precedes the entry point.
    assert text.index("struct DsParams {") < text.index("void DS_ENTRY(")


def test_every_shipped_kernel_file_is_in_the_sources_digest():
    found = {p.suffix for p in KERNELS.rglob("*") if p.is_file()}
    assert found <= set(compiler.SOURCE_SUFFIXES)


# -- cache keys ---------------------------------------------------------------------------------

def _cache(tmp_path, stack, source_dir=None):
    return KernelCache(compiler.AscendCompiler(stack), tmp_path / "root", read_only=[], source_dir=source_dir)


def _with_version(stack, version):
    return probe.AscendStack(stack.device_nodes, stack.cann_home, version, stack.aclrtc,
                             stack.bisheng, stack.acl, stack.torch_npu)


def test_cache_key_holds_cann_version_arch_compiler_and_sources(tmp_path):
    stack = _stack(tmp_path)
    v = variants.stream_variant("bfloat16")
    key, fields = _cache(tmp_path, stack).key_for(v, "dav-2201")
    assert fields["cann"] == "8.2.RC1" and fields["compiler"] == "aclrtc" and fields["arch"] == "dav-2201"
    assert "nvrtc" not in fields
    assert _cache(tmp_path, stack).key_for(v, "2201")[0] == key                      # stable
    assert _cache(tmp_path, stack).key_for(v, "dav-3510")[0] != key                  # arch
    assert _cache(tmp_path, _with_version(stack, "8.3.RC1")).key_for(v, "dav-2201")[0] != key
    bisheng_only = probe.AscendStack(stack.device_nodes, stack.cann_home, "8.2.RC1", None,
                                     stack.bisheng, True, True)
    assert _cache(tmp_path, bisheng_only).key_for(v, "dav-2201")[0] != key          # compiler
    assert _cache(tmp_path, stack).key_for(variants.stream_variant("float16"), "dav-2201")[0] != key
    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy)
    assert _cache(tmp_path, stack, copy).key_for(v, "dav-2201")[0] == key           # no paths
    (copy / "topk_stream.cpp").write_text((copy / "topk_stream.cpp").read_text() + "\n// edit\n")
    assert _cache(tmp_path, stack, copy).key_for(v, "dav-2201")[0] != key           # a .cpp edit


def test_cuda_key_fields_are_unchanged_by_the_extension_point(tmp_path):
    from deepselect_rt.cuda.variants import PROBE

    cuda_dir = resources.cuda_source_dir()
    fields = toolchain_key_fields(PROBE, "sm_90a", ["-x"], {"nvrtc": "13.0"}, cuda_dir)
    assert fields["nvrtc"] == "13.0" and "cann" not in fields
    assert list(fields) == ["schema", "package", "sources", "variant", "entry", "options", "arch", "nvrtc"]


def test_cache_serves_stored_binaries_without_a_compiler(tmp_path):
    stack = _stack(tmp_path)
    cache = _cache(tmp_path, stack)
    v = variants.stream_variant("float32")
    key, fields = cache.key_for(v, "dav-2201")
    meta = {**fields, "key": key, "size": 4, "sha256": __import__("hashlib").sha256(b"\x7fELF").hexdigest(),
            "created": 0.0}
    cache._store(cache.writable_root(), "dav-2201", key, b"\x7fELF", meta)
    found = _cache(tmp_path, stack).resolve(v, "dav-2201")
    assert (found.cubin, found.origin) == (b"\x7fELF", "disk")


def test_cache_compile_failure_carries_the_bisheng_log(tmp_path):
    stack = _stack(tmp_path, aclrtc=False)    # the fake bisheng exits 1
    with pytest.raises(Exception) as err:
        _cache(tmp_path, stack).resolve(variants.stream_variant("float32"), "dav-2201")
    assert type(err.value).__name__ == "CompileError" and "bisheng failed" in str(err.value)
    assert err.value.log == "error: fake bisheng"
    assert "--npu-arch=dav-2201" in err.value.options


def test_a_bisheng_that_cannot_run_is_backend_unavailable(tmp_path):
    stack = _stack(tmp_path, aclrtc=False)
    stack.bisheng.chmod(0o644)
    with pytest.raises(BackendUnavailableError, match="cannot run bisheng"):
        compiler.compile_binary(variants.stream_variant("float32"), "dav-2201", KERNELS, stack)


# -- the CLI ------------------------------------------------------------------------------------

def _clear_cann(monkeypatch, tmp_path):
    for name in probe.ENV_HOMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEEPSELECT_RT_CACHE_DIR", str(tmp_path / "cache"))


def test_warmup_npu_arch_without_cann_is_a_clear_error(tmp_path, monkeypatch, capsys):
    _clear_cann(monkeypatch, tmp_path)
    assert cli.main(["warmup", "--npu-arch", "dav-2201"]) == 1
    err = capsys.readouterr().err
    assert "ASCEND_HOME_PATH" in err and "Traceback" not in err


def test_warmup_npu_arch_rejects_unknown_arch(tmp_path, monkeypatch, capsys):
    _clear_cann(monkeypatch, tmp_path)
    assert cli.main(["warmup", "--npu-arch", "dav-1001"]) == 2
    assert "dav-2201, dav-3510" in capsys.readouterr().err


def test_warmup_plans_npu_tasks_per_arch_and_dtype():
    tasks = npu_tasks("dav-2201, 3510", dtypes=["bfloat16"])
    assert [(t.variant.dtype, t.arch) for t in tasks] == [("bfloat16", "dav-2201"), ("bfloat16", "dav-3510")]
    with pytest.raises(ValueError, match="names no architecture"):
        npu_tasks(" , ")


def test_warmup_npu_tasks_reach_the_ascend_cache(tmp_path, monkeypatch):
    _clear_cann(monkeypatch, tmp_path)
    home = _cann(tmp_path, aclrtc=False)   # bisheng that fails: the task must come back failed
    monkeypatch.setenv("ASCEND_HOME_PATH", str(home))
    outcomes = warmup.run(npu_tasks("dav-2201", dtypes=["float32"]), jobs=1, into=tmp_path / "into")
    assert [o.origin for o in outcomes] == ["failed"] and "bisheng failed" in outcomes[0].error
