"""Compile one kernel variant from ``kernels_cu/`` to a CUBIN for one architecture with NVRTC.

NVRTC comes from the pip wheels (``cuda.bindings.nvrtc``, which finds ``libnvrtc`` through
``cuda.pathfinder``), so compiling needs neither nvcc nor a GPU nor a driver: ``warmup --arch``
cross-compiles anywhere. Only ``"native"`` asks the driver which architecture the GPU has.

``NVRTC_COMPILER`` is this module as the compiler ``jit.cache.KernelCache`` takes;
``NVRTC_PTX_COMPILER`` compiles to PTX instead, for XLA's kernel-call launcher (``xla_call.py``),
which assembles PTX itself.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailableError, CompileError
from ..jit import env
from ..jit.key import toolchain_key_fields
from ..jit.spec import KernelSpec, arch_number
from .arch import PTX_ARCHS, SUPPORTED_ARCHS, normalise_arch

# Fixed options. No --use_fast_math: it flushes denormals and changes comparisons' inputs, and
# top-k must be exact. -default-device lets helpers omit __device__. -lineinfo keeps profiler
# source mapping at no run-time cost; what XLA's launcher gets (PTX, or the bare cubin) goes
# without it, since line info doubles to triples the code that jaxlib may copy and hash per call.
_BASE_OPTIONS = ("-std=c++17", "-default-device")
_LINE_INFO = ("-lineinfo",)


@dataclass(frozen=True)
class CompileResult:
    """A compiled variant.

    cubin: the ELF image (PTX text for a compute_XX arch). log: NVRTC's log (warnings; may be empty). options: the exact NVRTC
    options used. seconds: wall time of the compile.
    """

    cubin: bytes
    log: str
    options: tuple
    seconds: float


def _nvrtc():
    """The ``cuda.bindings.nvrtc`` module. Raises BackendUnavailableError when not installed."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise BackendUnavailableError(
            f"NVRTC is not installed (cuda-bindings missing: {exc}); {env.NVRTC_INSTALL_HINT}"
        ) from None
    return nvrtc


def _check(result, what: str):
    """Unpack a ``cuda.bindings.nvrtc`` (err, *values) tuple; raise on any error."""
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err.name if hasattr(err, 'name') else err}")
    return values[0] if len(values) == 1 else tuple(values)


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the loaded libnvrtc. Raises BackendUnavailableError when it is missing."""
    nvrtc = _nvrtc()
    try:
        return tuple(int(x) for x in _check(nvrtc.nvrtcVersion(), "nvrtcVersion"))
    except RuntimeError as exc:  # cuda.pathfinder's "library not found" is a RuntimeError too
        raise BackendUnavailableError(
            f"libnvrtc could not be loaded ({exc}); {env.NVRTC_INSTALL_HINT}") from None


def toolchain_fields() -> dict:
    """The loaded NVRTC as a kernel key's toolchain fields ({"nvrtc": "13.0"}); raises as
    nvrtc_version does."""
    return {"nvrtc": ".".join(str(x) for x in nvrtc_version())}


def nvrtc_library() -> tuple[str, str]:
    """(absolute path of libnvrtc, how cuda.pathfinder found it, e.g. "site-packages").

    Raises BackendUnavailableError when it cannot be found.
    """
    try:
        import cuda.pathfinder as pathfinder

        loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
    except (ImportError, RuntimeError) as exc:
        raise BackendUnavailableError(f"libnvrtc not found ({exc}); {env.NVRTC_INSTALL_HINT}"
                                      ) from None
    return str(loaded.abs_path), str(getattr(loaded, "found_via", "unknown"))


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[str, ...]:
    """The archs of ``SUPPORTED_ARCHS`` that the installed NVRTC can target.

    Raises BackendUnavailableError when NVRTC is missing.
    """
    nvrtc_version()  # turns a missing library into BackendUnavailableError
    numbers = set(_check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))
    return tuple(a for a in SUPPORTED_ARCHS + PTX_ARCHS if arch_number(a) in numbers)


@dataclass(frozen=True)
class Options:
    """NVRTC options for one compile.

    argv: what NVRTC gets. portable: the same with the kernels folder replaced by "<kernels_cu>",
    so that cache keys agree between the machine that pre-builds and the one that loads. No CUDA
    toolkit headers: the kernels handle elements as bit patterns (kernels_cu/common/dtype.cuh),
    and a headers folder in the key would make cubins built where a toolkit was found miss
    where none is.
    """

    argv: tuple
    portable: tuple


def compile_options(variant: KernelSpec, arch: str, source_dir: Path | None = None, ptx: bool = False,
                    line_info: bool = True) -> Options:
    """The options that compile ``variant`` for ``arch`` (normalised first; ValueError if bad);
    ``ptx``: for the arch's virtual architecture (compute_90a for sm_90a), whose output is PTX;
    ``line_info``: source lines for profilers in a cubin (never in PTX)."""
    arch = normalise_arch(arch)
    source_dir = Path(source_dir) if source_dir is not None else env.cuda_source_dir()
    target = "compute_" + arch.removeprefix("sm_") if ptx and arch.startswith("sm_") else arch
    common = [f"--gpu-architecture={target}", *_BASE_OPTIONS, *(_LINE_INFO if line_info and not ptx else ())]
    common += [f"-D{name}={value}" for name, value in sorted(variant.defines.items())]
    return Options((*common, f"--include-path={source_dir}"), (*common, "--include-path=<kernels_cu>"))


def _program_log(nvrtc, prog) -> str:
    size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = b" " * size
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\0 ").decode(errors="replace")


def compile_cubin(variant: KernelSpec, arch: str, source_dir: Path | None = None,
                  extra_options: tuple[str, ...] = (), ptx: bool = False, line_info: bool = True) -> CompileResult:
    """Compile ``variant`` (``kernels_cu/<family>.cu``) for ``arch`` to a CUBIN.

    source_dir: the kernels folder (default: the shipped one). extra_options: NVRTC options
    appended for this compile alone, for diagnostics (``--ptxas-options=-v`` puts registers and
    spills in the log); the kernel cache never passes any. Raises
    CompileError (with the NVRTC log, the variant and the options) when the source is missing or
    does not compile, ValueError for an unknown arch, BackendUnavailableError when NVRTC is not
    installed. ``ptx``: PTX text for the arch's virtual architecture instead (in ``cubin``), for
    launchers that assemble it themselves (XLA's kernel-call target runs ptxas).
    """
    nvrtc = _nvrtc()
    arch = normalise_arch(arch)
    if arch not in supported_archs():
        raise BackendUnavailableError(
            f"NVRTC {'.'.join(map(str, nvrtc_version()))} cannot target {arch}; "
            f"it supports {', '.join(supported_archs())}")
    source_dir = Path(source_dir) if source_dir is not None else env.cuda_source_dir()
    used = (*compile_options(variant, arch, source_dir, ptx, line_info).argv, *extra_options)
    path = source_dir / variant.source
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise CompileError(f"cannot read kernel source {path}: {exc}", variant=variant,
                           options=used) from None

    start = time.perf_counter()
    # The program is named by its absolute path: NVRTC then resolves quoted includes against
    # kernels_cu/ (and a header's own folder), never against the process's working directory.
    prog = _check(nvrtc.nvrtcCreateProgram(source, str(path).encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        argv = [o.encode() for o in used]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(argv), argv)
        log = _program_log(nvrtc, prog)
        if int(status) != 0:
            raise CompileError(f"NVRTC failed to compile {variant.source} for {arch}: {status.name}", log=log,
                               variant=variant, options=used)
        if ptx or arch.startswith("compute_"):  # PTX, NUL-terminated, as cuLibraryLoadData takes it
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            cubin = b" " * size
            _check(nvrtc.nvrtcGetPTX(prog, cubin), "nvrtcGetPTX")
            if ptx:  # XLA's kernel-call launcher assembles the text itself, without the NUL
                cubin = cubin.rstrip(b"\0")
        else:
            size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            cubin = b" " * size
            _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return CompileResult(cubin, log, used, time.perf_counter() - start)


class _Nvrtc:
    """NVRTC as the compiler of ``jit.cache.KernelCache`` (cubins; ``ptx=True``: PTX text;
    ``line_info=False``: cubins without source lines)."""

    def __init__(self, ptx: bool = False, line_info: bool = True):
        self.ptx, self.line_info = ptx, line_info
        self.name = "nvrtc-ptx" if ptx else "nvrtc" if line_info else "nvrtc-bare"

    @staticmethod
    def require() -> None:
        nvrtc_version()

    @staticmethod
    def source_dir() -> Path:
        return env.cuda_source_dir()

    def key_fields(self, spec: KernelSpec, arch: str, source_dir: Path) -> dict:
        arch = normalise_arch(arch)
        options = compile_options(spec, arch, source_dir, self.ptx, self.line_info)  # the key's options
        return toolchain_key_fields(spec, arch, options.portable, toolchain_fields(), source_dir)

    def compile(self, spec: KernelSpec, arch: str, source_dir: Path) -> tuple[bytes, float]:
        result = compile_cubin(spec, arch, source_dir, ptx=self.ptx, line_info=self.line_info)
        return result.cubin, result.seconds


NVRTC_COMPILER = _Nvrtc()
#: PTX for launchers that assemble it themselves (jax.jit's kernel-call route, cuda/xla_call.py).
NVRTC_PTX_COMPILER = _Nvrtc(ptx=True)
#: Cubins without line info, for launchers that keep the image in every call's description (the
#: same route where jaxlib loads module images): about a third of the size.
NVRTC_BARE_COMPILER = _Nvrtc(line_info=False)

