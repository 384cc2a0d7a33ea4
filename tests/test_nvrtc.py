"""NVRTC compilation: arch names, options, includes, errors, and real cubins for every variant.

Runs on a CPU-only machine: NVRTC from the pip wheels cross-compiles without a GPU or a driver.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import struct
from concurrent.futures import ProcessPoolExecutor

import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="needs the cu13 extra (cuda-bindings, NVRTC)")

from deepselect_rt.jit import env as resources  # noqa: E402
from deepselect_rt.cuda import arch, nvrtc  # noqa: E402
from deepselect_rt.cuda.variants import PROBE, default_variants
from deepselect_rt.jit.spec import KernelSpec  # noqa: E402
from deepselect_rt.errors import CompileError  # noqa: E402

ARCHS = ("sm_80", "sm_90a", "sm_100a")
EM_CUDA = 190


# -- a minimal ELF64 reader, enough to check a cubin's target and its symbols -------------------

def read_elf(data: bytes) -> dict:
    """Header fields, sections by name and symbol names (with their type) of an ELF64 file."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    assert data[4] == 2 and data[5] == 1, "expected ELF64 little-endian"
    abi_version = data[8]
    e_machine, = struct.unpack_from("<H", data, 18)
    e_flags, = struct.unpack_from("<I", data, 48)
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    headers = []
    for i in range(e_shnum):
        name, kind, _, _, offset, size, link = struct.unpack_from(
            "<IIQQQQI", data, e_shoff + i * e_shentsize)
        headers.append((name, kind, offset, size, link))
    names_off = headers[e_shstrndx][2]

    def cstr(base: int, off: int) -> str:
        end = data.index(b"\0", base + off)
        return data[base + off:end].decode()

    sections = {}
    symbols = {}
    for name, kind, offset, size, link in headers:
        body = data[offset:offset + size] if kind != 8 else b""  # 8 = SHT_NOBITS
        sections[cstr(names_off, name)] = body
        if kind == 2:  # SHT_SYMTAB: Elf64_Sym is 24 bytes; names in the linked string table
            strtab = headers[link][2]
            for off in range(0, size, 24):
                st_name, st_info = struct.unpack_from("<IB", data, offset + off)
                if st_name:
                    symbols[cstr(strtab, st_name)] = st_info & 0xF  # 2 = STT_FUNC
    return {"machine": e_machine, "abi_version": abi_version, "flags": e_flags,
            "sections": sections, "symbols": symbols}


def elf_sm(elf: dict) -> int:
    """The SM number in e_flags: the low byte in the CUDA ELF ABI v1 (EI_ABIVERSION 7), bits
    8-15 in v2 (EI_ABIVERSION 8, CUDA 12.8+; LLVM's EF_CUDA_SM_MASK / EF_CUDA_SM_OFFSET)."""
    if elf["abi_version"] == 7:
        return elf["flags"] & 0xFF
    assert elf["abi_version"] == 8, f"unknown CUDA ELF ABI version {elf['abi_version']}"
    return (elf["flags"] >> 8) & 0xFF


def assert_cubin_for(cubin: bytes, arch: str, entry: str) -> None:
    elf = read_elf(cubin)
    assert elf["machine"] == EM_CUDA
    assert elf_sm(elf) == int(arch[3:].rstrip("af")), f"e_flags {elf['flags']:#x} is not {arch}"
    # e_flags does not tell sm_90 from sm_90a; ptxas records the exact target in this note.
    note = elf["sections"].get(".note.nv.tkinfo")
    if note is not None:
        assert f"-arch {arch} ".encode() in note
    assert elf["symbols"].get(entry) == 2, f"no function symbol {entry}"
    assert f".text.{entry}" in elf["sections"]


# -- every registered variant, three archs ------------------------------------------------------

@pytest.fixture(scope="module")
def compiled():
    """{(variant, arch): CompileResult} for every default variant of each arch of ARCHS, in
    parallel."""
    tasks = [(v, a) for a in ARCHS for v in default_variants(a)]
    jobs = min(len(tasks), os.cpu_count() or 1)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = pool.map(nvrtc.compile_cubin, [v for v, _ in tasks], [a for _, a in tasks])
        return dict(zip(tasks, results))


@pytest.mark.parametrize("arch", ARCHS)
def test_every_variant_compiles_to_a_cubin_for_its_arch(compiled, arch):
    for variant in default_variants(arch):
        result = compiled[variant, arch]
        assert result.cubin[:4] == b"\x7fELF"
        assert_cubin_for(result.cubin, arch, variant.entry)
        assert f"--gpu-architecture={arch}" in result.options
        assert result.seconds > 0


def test_archs_give_different_cubins(compiled):
    cubins = {compiled[PROBE, a].cubin for a in ARCHS}
    assert len(cubins) == len(ARCHS)


# -- arch names ---------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling, name", [
    ("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("sm90a", "sm_90a"), ("SM_90A", "sm_90a"),
    ("9.0", "sm_90a"), ("sm_90", "sm_90a"), ("90", "sm_90a"), (" sm_80 ", "sm_80"),
    ("8.6", "sm_86"), ("89", "sm_89"), ("10.0", "sm_100a"), ("sm_100a", "sm_100a"),
    ("103a", "sm_103a"), ("10.3", "sm_103a"), ("sm_120", "sm_120"), ("12.0", "sm_120"),
    ("8.7", "sm_86"), ("12.1", "sm_120"),
])
def test_normalise_arch(spelling, name):
    assert arch.normalise_arch(spelling) == name


@pytest.mark.parametrize("bad", ["sm_75", "7.5", "sm_99", "sm_100f", "sm_91a", "compute_90",
                                 "9", "", "gpu", "sm_9.0x"])
def test_normalise_arch_rejects(bad):
    with pytest.raises(ValueError, match="sm_80, sm_86"):
        arch.normalise_arch(bad)


def test_native_without_a_usable_driver_says_to_name_an_arch(monkeypatch):
    from deepselect_rt.cuda import arch as module
    from deepselect_rt.errors import BackendUnavailableError

    def no_driver():
        raise BackendUnavailableError("CUDA is not usable: no libcuda")

    monkeypatch.setattr(module, "init", no_driver)
    with pytest.raises(BackendUnavailableError, match="no libcuda; pass an explicit arch such as sm_90a"):
        arch.normalise_arch("native")


def test_suffixed_arch_names_the_build_that_serves_it():
    with pytest.raises(ValueError, match=r"12\.0 GPUs run the sm_120 build"):
        arch.normalise_arch("sm_120a")
    with pytest.raises(ValueError, match=r"10\.0 GPUs run the sm_100a build"):
        arch.normalise_arch("sm_100f")


def test_compute_capability_table():
    table = {(8, 0): "sm_80", (8, 6): "sm_86", (8, 9): "sm_89", (9, 0): "sm_90a",
             (10, 0): "sm_100a", (10, 3): "sm_103a", (12, 0): "sm_120", (12, 1): "sm_120"}
    for cc, name in table.items():
        assert arch.arch_for_compute_capability(*cc) == name
    for cc in [(7, 5), (9, 1), (11, 0)]:
        with pytest.raises(ValueError, match="no deepselect-rt kernels"):
            arch.arch_for_compute_capability(*cc)


def test_version_and_supported_archs():
    major, minor = nvrtc.nvrtc_version()
    assert major >= 12 and minor >= 0
    assert set(nvrtc.supported_archs()) <= set(arch.SUPPORTED_ARCHS + arch.PTX_ARCHS)
    assert {"sm_80", "sm_90a", "sm_100a"} <= set(nvrtc.supported_archs())
    path, found_via = nvrtc.nvrtc_library()
    assert "nvrtc" in os.path.basename(path)


# -- options ------------------------------------------------------------------------------------

def test_options_are_exact_and_portable():
    variant = KernelSpec("probe", "bfloat16", 512, 128, (("DS_EXTRA", 3),))
    options = nvrtc.compile_options(variant, "9.0")
    argv = options.argv
    assert "--gpu-architecture=sm_90a" in argv
    assert {"-std=c++17", "-default-device", "-lineinfo"} <= set(argv)
    assert not any("fast" in o for o in argv)  # exactness: no --use_fast_math
    for name, value in variant.defines.items():
        assert f"-D{name}={value}" in argv
    assert f"--include-path={resources.cuda_source_dir()}" in argv
    # The portable form (the cache key's) names no machine path.
    assert not any(os.sep + "kernels_cu" in o or "/usr" in o for o in options.portable)
    assert "--include-path=<kernels_cu>" in options.portable


# -- sources, includes, errors ------------------------------------------------------------------

def test_includes_resolve_from_kernels_folder_not_cwd(tmp_path, monkeypatch):
    src = tmp_path / "kernels"
    (src / "common").mkdir(parents=True)
    (src / "common" / "keys.cuh").write_text(
        '#pragma once\n#include "dtype.cuh"\n'
        "__device__ inline int key_of(int x) { return x + DS_DT; }\n")
    (src / "common" / "dtype.cuh").write_text("#pragma once\n#define DS_DT 7\n")
    (src / "shadow.cuh").write_text("#define SHADOW 1\n")
    (src / "fam.cu").write_text(
        '#include "common/keys.cuh"\n#include "shadow.cuh"\n'
        'extern "C" __global__ void DS_ENTRY(int* x) { x[0] = key_of(SHADOW); }\n')
    # A same-named header in the working directory must not be picked up.
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "shadow.cuh").write_text("#error picked up the working directory's header\n")
    monkeypatch.chdir(cwd)
    variant = KernelSpec("fam")
    result = nvrtc.compile_cubin(variant, "sm_80", source_dir=src)
    assert_cubin_for(result.cubin, "sm_80", variant.entry)


def test_compile_error_carries_log_variant_and_options(tmp_path):
    (tmp_path / "broken.cu").write_text(
        'extern "C" __global__ void DS_ENTRY(int* x) { x[0] = nope; }\n')
    variant = KernelSpec("broken")
    with pytest.raises(CompileError) as info:
        nvrtc.compile_cubin(variant, "sm_90a", source_dir=tmp_path)
    err = info.value
    assert "nope" in err.log and "error" in err.log
    assert err.variant == variant
    assert "--gpu-architecture=sm_90a" in err.options
    assert "broken.cu" in str(err) and "sm_90a" in str(err)


def test_missing_source_is_a_compile_error(tmp_path):
    with pytest.raises(CompileError, match="cannot read kernel source"):
        nvrtc.compile_cubin(KernelSpec("absent"), "sm_80", source_dir=tmp_path)


def test_shipped_sources_compile_from_a_copy(tmp_path):
    copy = tmp_path / "kernels_cu"
    shutil.copytree(resources.cuda_source_dir(), copy)
    result = nvrtc.compile_cubin(PROBE, "sm_80", source_dir=copy)
    assert_cubin_for(result.cubin, "sm_80", PROBE.entry)


def test_extra_options_reach_nvrtc_and_the_result():
    # --ptxas-options=-v makes ptxas report the kernel's resources in the log; without it the
    # probe compiles silently. The options recorded are the ones used.
    quiet = nvrtc.compile_cubin(PROBE, "sm_90a")
    verbose = nvrtc.compile_cubin(PROBE, "sm_90a", extra_options=("--ptxas-options=-v",))
    assert "registers" not in quiet.log
    assert f"Compiling entry function '{PROBE.entry}'" in verbose.log and "Used " in verbose.log
    assert verbose.options == (*quiet.options, "--ptxas-options=-v")
    assert_cubin_for(verbose.cubin, "sm_90a", PROBE.entry)


def test_ptx_arch_compiles_to_ptx_text():
    """compute_80 gives PTX (NUL-terminated), which the driver compiles at load time: how the
    sm_80 code paths run on a newer GPU (DEEPSELECT_RT_ARCH)."""
    assert arch.normalise_arch(" compute_80 ") == "compute_80"
    result = nvrtc.compile_cubin(PROBE, "compute_80")
    assert result.cubin.startswith(b"//") and result.cubin.endswith(b"\0") and b".target sm_80" in result.cubin


def test_arch_override_caps_the_limits(monkeypatch):
    """DEEPSELECT_RT_ARCH runs an older arch's kernels with that arch's limits: no clusters
    before sm_90, sm_80's 163 KiB of shared memory a CTA; a newer arch than the GPU's is refused."""
    info = arch.DeviceInfo(0, "H100", (9, 0), "sm_90a", 132, 227 * 1024, 228 * 1024, True, 80 << 30)
    monkeypatch.setattr(arch, "device_info", lambda ordinal: info)
    monkeypatch.delenv("DEEPSELECT_RT_ARCH", raising=False)
    assert arch.run_arch(0) == "sm_90a" and arch.run_limits(0) == (227 * 1024, True)
    monkeypatch.setenv("DEEPSELECT_RT_ARCH", "compute_80")
    assert arch.run_arch(0) == "compute_80" and arch.run_limits(0) == (163 * 1024, False)
    monkeypatch.setenv("DEEPSELECT_RT_ARCH", "sm_100a")
    with pytest.raises(ValueError, match="newer than device 0"):
        arch.run_arch(0)
