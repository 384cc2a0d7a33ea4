"""Ascend C source -> device binary: aclrtc (``libacl_rtc.so`` through ctypes) or ``bisheng``.

aclrtc is preferred (no subprocess, no temp files). It takes one translation unit without
headers, so the kernel's own quoted includes are inlined first (``amalgamate``); CANN's
``kernel_operator.h`` stays an ``#include``. bisheng compiles the file in place with
``-I kernels_ascendc``. Both get the same target and defines (``compile_options``); the result is
the AI Core binary that ``aclrtBinaryLoadFromData`` loads.
"""

from __future__ import annotations

import ctypes
import functools
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailableError, CompileError
from ..jit import env
from ..jit.key import toolchain_key_fields
from ..jit.spec import KernelSpec
from . import driver
from .variants import normalise_arch

# Files under kernels_ascendc/ that take part in a compile and so in the cache key.
SOURCE_SUFFIXES = (".cpp", ".h")
_BASE_OPTIONS = ("-O2", "-std=c++17")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$")


@dataclass(frozen=True)
class Options:
    """argv: what the compiler gets (besides input and output). portable: the same with the
    kernels folder replaced by "<kernels_ascendc>", for cache keys that agree across machines."""

    argv: tuple
    portable: tuple


@dataclass(frozen=True)
class CompileResult:
    """binary: the AI Core binary. log: compiler output. options: argv used. seconds: wall
    time. compiler: "aclrtc" or "bisheng"."""

    binary: bytes
    log: str
    options: tuple
    seconds: float
    compiler: str


def compiler_kind(stack: driver.AscendStack) -> str:
    """"aclrtc" when CANN ships libacl_rtc.so, else "bisheng" (``stack`` must have one)."""
    return "aclrtc" if stack.aclrtc is not None else "bisheng"


def compile_options(variant: KernelSpec, arch: str, kind: str, source_dir: Path | None = None) -> Options:
    """Target, optimisation and defines for ``variant`` on ``arch`` (ValueError if unknown).

    bisheng also gets ``-x asc`` (Ascend C), ``--cce-aicore-only`` (device code only, no host
    stub) and the include path of the kernels folder; aclrtc needs neither (amalgamated source).
    """
    arch = normalise_arch(arch)
    common = [f"--npu-arch={arch}", *_BASE_OPTIONS]
    common += [f"-D{name}={value}" for name, value in sorted(variant.defines.items())]
    if kind == "aclrtc":
        return Options(tuple(common), tuple(common))
    source_dir = Path(source_dir) if source_dir is not None else env.ascendc_source_dir()
    head = ["-x", "asc", "--cce-aicore-only"]
    return Options((*head, *common, "-I", str(source_dir)), (*head, *common, "-I", "<kernels_ascendc>"))


def bisheng_command(bisheng: Path | str, variant: KernelSpec, arch: str, source_dir: Path,
                    output: Path) -> list[str]:
    """The bisheng command line that compiles ``variant`` for ``arch`` into ``output``."""
    options = compile_options(variant, arch, "bisheng", source_dir)
    return [str(bisheng), *options.argv, "-c", str(Path(source_dir) / variant.source), "-o", str(output)]


def amalgamate(source_dir: Path, name: str) -> str:
    """``name`` with every quoted include found under ``source_dir`` inlined once, recursively
    (``#pragma once`` lines dropped, each header's text only at its first inclusion).

    Includes that are not files of ``source_dir`` (``kernel_operator.h``) are left as they
    are. Raises FileNotFoundError for a missing ``name``.
    """
    source_dir = Path(source_dir)
    seen: set[str] = set()

    def expand(rel: str) -> list[str]:
        out = [f'// ---- {rel} ----']
        for line in (source_dir / rel).read_text().splitlines():
            match = _INCLUDE.match(line)
            if match and (source_dir / match.group(1)).is_file():
                if match.group(1) not in seen:
                    seen.add(match.group(1))
                    out += expand(match.group(1))
            elif not _PRAGMA_ONCE.match(line):
                out.append(line)
        return out

    seen.add(name)
    return "\n".join(expand(name)) + "\n"


@functools.lru_cache(maxsize=None)
def _aclrtc(path: str):
    lib = ctypes.CDLL(path)
    for name in ("aclrtcCreateProg", "aclrtcCompileProg", "aclrtcGetCompileLogSize",
                 "aclrtcGetCompileLog", "aclrtcGetBinDataSize", "aclrtcGetBinData", "aclrtcDestroyProg"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _rtc_check(err: int, what: str, variant: KernelSpec, options, log: str = "") -> None:
    if err != 0:
        raise CompileError(f"{what} failed with aclError {err}", log=log, variant=variant, options=options)


def _compile_aclrtc(lib_path: Path, variant: KernelSpec, source: str, options: Options) -> tuple[bytes, str]:
    lib = _aclrtc(str(lib_path))
    prog = ctypes.c_void_p()
    argv = options.argv
    _rtc_check(lib.aclrtcCreateProg(ctypes.byref(prog), source.encode(), variant.source.encode(), 0,
                                    None, None), "aclrtcCreateProg", variant, argv)
    try:
        encoded = (ctypes.c_char_p * len(argv))(*(a.encode() for a in argv))
        status = lib.aclrtcCompileProg(prog, len(argv), encoded)
        size = ctypes.c_size_t(0)
        lib.aclrtcGetCompileLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        lib.aclrtcGetCompileLog(prog, buf)
        log = buf.value.decode(errors="replace")
        _rtc_check(status, f"aclrtcCompileProg of {variant.source}", variant, argv, log)
        _rtc_check(lib.aclrtcGetBinDataSize(prog, ctypes.byref(size)), "aclrtcGetBinDataSize", variant, argv)
        binary = ctypes.create_string_buffer(size.value)
        _rtc_check(lib.aclrtcGetBinData(prog, binary), "aclrtcGetBinData", variant, argv)
        return binary.raw, log
    finally:
        lib.aclrtcDestroyProg(ctypes.byref(prog))


def _compile_bisheng(bisheng: Path, variant: KernelSpec, arch: str, source_dir: Path) -> tuple[bytes, str, tuple]:
    with tempfile.TemporaryDirectory(prefix="deepselect-rt-npu-") as tmp:
        output = Path(tmp) / f"{variant.entry}.o"
        command = bisheng_command(bisheng, variant, arch, source_dir, output)
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:  # not executable, wrong architecture, removed since the probe
            raise BackendUnavailableError(f"cannot run bisheng at {bisheng}: {exc}") from None
        log = (done.stdout + done.stderr).strip()
        if done.returncode != 0 or not output.is_file():
            raise CompileError(f"bisheng failed to compile {variant.source} for {arch} (exit "
                               f"{done.returncode})", log=log, variant=variant, options=command)
        return output.read_bytes(), log, tuple(command)


def compile_binary(variant: KernelSpec, arch: str, source_dir: Path | None = None,
                   stack: driver.AscendStack | None = None) -> CompileResult:
    """Compile ``variant`` (``kernels_ascendc/<family>.cpp``) for NPU ``arch``.

    Raises BackendUnavailableError without CANN or a compiler (naming which), ValueError for an
    unknown arch, CompileError (with the compiler log) when the source does not compile.
    """
    stack = driver.require_compiler(stack)
    arch = normalise_arch(arch)
    source_dir = Path(source_dir) if source_dir is not None else env.ascendc_source_dir()
    kind = compiler_kind(stack)
    start = time.perf_counter()
    if kind == "aclrtc":
        options = compile_options(variant, arch, kind, source_dir)
        try:
            source = amalgamate(source_dir, variant.source)
        except OSError as exc:
            raise CompileError(f"cannot read kernel source: {exc}", variant=variant, options=options.argv) from None
        binary, log = _compile_aclrtc(stack.aclrtc, variant, source, options)
        argv = options.argv
    else:
        binary, log, argv = _compile_bisheng(stack.bisheng, variant, arch, source_dir)
    return CompileResult(binary, log, argv, time.perf_counter() - start, kind)


class AscendCompiler:
    """aclrtc or bisheng as the compiler of ``jit.cache.KernelCache``; the key holds the CANN
    version, the compiler and the NPU arch, so a CANN upgrade or a kernel edit misses cleanly.

    stack: the Ascend stack to compile with (default: detected on first use).
    """

    name = "ascend"

    def __init__(self, stack: driver.AscendStack | None = None):
        self._stack = stack

    @property
    def stack(self) -> driver.AscendStack:
        """The Ascend stack; BackendUnavailableError when CANN or a compiler is missing."""
        if self._stack is None:
            self._stack = driver.require_compiler()
        return self._stack

    def require(self) -> None:
        self.stack  # noqa: B018 (detects the stack, raising when CANN or a compiler is missing)

    @staticmethod
    def source_dir() -> Path:
        return env.ascendc_source_dir()

    def key_fields(self, spec: KernelSpec, arch: str, source_dir: Path) -> dict:
        arch = normalise_arch(arch)
        kind = compiler_kind(self.stack)
        options = compile_options(spec, arch, kind, source_dir)
        toolchain = {"cann": self.stack.cann_version, "compiler": kind}
        return toolchain_key_fields(spec, arch, options.portable, toolchain, source_dir, SOURCE_SUFFIXES)

    def compile(self, spec: KernelSpec, arch: str, source_dir: Path) -> tuple[bytes, float]:
        result = compile_binary(spec, arch, source_dir, self.stack)
        return result.binary, result.seconds


__all__ = ["Options", "CompileResult", "SOURCE_SUFFIXES", "compiler_kind", "compile_options",
           "bisheng_command", "amalgamate", "compile_binary", "AscendCompiler"]
