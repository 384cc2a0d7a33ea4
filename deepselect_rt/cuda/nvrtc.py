"""Compile one kernel variant from ``kernels_cu/`` to a CUBIN for one architecture with NVRTC.

NVRTC comes from the pip wheels (``cuda.bindings.nvrtc``, which finds ``libnvrtc`` through
``cuda.pathfinder``), so compiling needs neither nvcc nor a GPU nor a driver: ``warmup --arch``
cross-compiles anywhere. Only ``"native"`` asks the driver which architecture the GPU has.

Architectures are the project's fixed set (``SUPPORTED_ARCHS``): a cubin runs only on its own
architecture family, and the ``a`` targets (sm_90a, sm_100a, sm_103a) only on exactly that
compute capability, which is what the kernels are tuned for.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .. import config, resources
from ..errors import BackendUnavailableError, CompileError
from .variants import Variant

SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_103a", "sm_120")

# The arch built for each compute capability. A device whose exact capability is missing uses the
# highest non-"a" arch of its major version below it (cubins run on later minors of one major):
# 8.7 -> sm_86, 12.1 -> sm_120.
_ARCH_OF_CC = {(8, 0): "sm_80", (8, 6): "sm_86", (8, 9): "sm_89", (9, 0): "sm_90a",
               (10, 0): "sm_100a", (10, 3): "sm_103a", (12, 0): "sm_120"}

_ARCH_RE = re.compile(r"^(?:sm_?)?(\d+)(?:\.(\d))?([af]?)$")

# Fixed options. No --use_fast_math: it flushes denormals and changes comparisons' inputs, and
# top-k must be exact. -default-device lets helpers omit __device__. -lineinfo keeps profiler
# source mapping at no run-time cost.
_BASE_OPTIONS = ("-std=c++17", "-default-device", "-lineinfo")


@dataclass(frozen=True)
class CompileResult:
    """A compiled variant.

    cubin: the ELF image. log: NVRTC's log (warnings; may be empty). options: the exact NVRTC
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
            f"NVRTC is not installed (cuda-bindings missing: {exc}); {config.NVRTC_INSTALL_HINT}"
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
            f"libnvrtc could not be loaded ({exc}); {config.NVRTC_INSTALL_HINT}") from None


def nvrtc_library() -> tuple[str, str]:
    """(absolute path of libnvrtc, how cuda.pathfinder found it, e.g. "site-packages").

    Raises BackendUnavailableError when it cannot be found.
    """
    try:
        import cuda.pathfinder as pathfinder

        loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
    except (ImportError, RuntimeError) as exc:
        raise BackendUnavailableError(f"libnvrtc not found ({exc}); {config.NVRTC_INSTALL_HINT}"
                                      ) from None
    return str(loaded.abs_path), str(getattr(loaded, "found_via", "unknown"))


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[str, ...]:
    """The archs of ``SUPPORTED_ARCHS`` that the installed NVRTC can target.

    Raises BackendUnavailableError when NVRTC is missing.
    """
    nvrtc_version()  # turns a missing library into BackendUnavailableError
    numbers = set(_check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))
    return tuple(a for a in SUPPORTED_ARCHS if int(_ARCH_RE.match(a).group(1)) in numbers)


def arch_for_compute_capability(major: int, minor: int) -> str:
    """The arch deepselect-rt builds for a device of compute capability major.minor.

    Raises ValueError for a device it has no kernels for (e.g. 7.5).
    """
    arch = _ARCH_OF_CC.get((major, minor))
    if arch is None:
        below = [(cc, a) for cc, a in _ARCH_OF_CC.items()
                 if cc[0] == major and cc[1] <= minor and not a.endswith("a")]
        if below:
            arch = max(below)[1]
    if arch is None:
        raise ValueError(f"no deepselect-rt kernels for compute capability {major}.{minor}; "
                         f"supported: {', '.join(SUPPORTED_ARCHS)}")
    return arch


def normalise_arch(arch: str) -> str:
    """The canonical arch name for a user's spelling.

    Accepts "sm_90a", "sm90a", "90a", "sm_90", "90", "9.0", "SM_100A" and "native" (the
    architecture of the current CUDA device, asked of the driver). A spelling without a suffix
    is a compute capability and maps as on a device ("9.0" and "sm_90" -> "sm_90a", "8.7" ->
    "sm_86"); one with a suffix must name a supported arch exactly. Raises ValueError (listing
    the supported archs) for anything else, BackendUnavailableError when "native" finds no GPU.
    """
    text = str(arch).strip().lower()
    if text == "native":
        from .module import native_arch

        return native_arch()
    match = _ARCH_RE.match(text)
    if not match:
        raise ValueError(f"unknown GPU architecture {arch!r}; use one of "
                         f"{', '.join(SUPPORTED_ARCHS)}, a compute capability like 9.0, or native")
    digits, dotted_minor, suffix = match.groups()
    if dotted_minor is not None:
        major, minor = int(digits), int(dotted_minor)
    elif len(digits) >= 2:
        major, minor = int(digits[:-1]), int(digits[-1])
    else:
        raise ValueError(f"unknown GPU architecture {arch!r}; use one of "
                         f"{', '.join(SUPPORTED_ARCHS)}")
    if suffix:
        name = f"sm_{major}{minor}{suffix}"
        if name not in SUPPORTED_ARCHS:
            try:  # e.g. sm_120a: say which build serves those GPUs
                served = f" ({major}.{minor} GPUs run the {arch_for_compute_capability(major, minor)} build)"
            except ValueError:
                served = ""
            raise ValueError(f"unsupported GPU architecture {arch!r}{served}; use one of "
                             f"{', '.join(SUPPORTED_ARCHS)}")
        return name
    try:
        return arch_for_compute_capability(major, minor)
    except ValueError:
        raise ValueError(f"unsupported GPU architecture {arch!r} (compute capability "
                         f"{major}.{minor}); use one of {', '.join(SUPPORTED_ARCHS)}") from None


@dataclass(frozen=True)
class Options:
    """NVRTC options for one compile.

    argv: what NVRTC gets. portable: the same with the kernels folder replaced by "<kernels_cu>",
    so that cache keys agree between the machine that pre-builds and the one that loads. No CUDA
    toolkit headers: the kernels handle elements as bit patterns (kernels_cu/common/dtype.cuh),
    and a headers folder in the key made cubins built where a toolkit was found miss where none
    was (fresh-user finding).
    """

    argv: tuple
    portable: tuple


def compile_options(variant: Variant, arch: str, source_dir: Path | None = None) -> Options:
    """The options that compile ``variant`` for ``arch`` (normalised first; ValueError if bad)."""
    arch = normalise_arch(arch)
    source_dir = Path(source_dir) if source_dir is not None else resources.cuda_source_dir()
    common = [f"--gpu-architecture={arch}", *_BASE_OPTIONS]
    common += [f"-D{name}={value}" for name, value in sorted(variant.defines.items())]
    return Options((*common, f"--include-path={source_dir}"), (*common, "--include-path=<kernels_cu>"))


def _program_log(nvrtc, prog) -> str:
    size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = b" " * size
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\0 ").decode(errors="replace")


def compile_cubin(variant: Variant, arch: str, source_dir: Path | None = None,
                  extra_options: tuple[str, ...] = ()) -> CompileResult:
    """Compile ``variant`` (``kernels_cu/<family>.cu``) for ``arch`` to a CUBIN.

    source_dir: the kernels folder (default: the shipped one). extra_options: NVRTC options
    appended for this compile alone, for diagnostics (``--ptxas-options=-v`` puts registers and
    spills in the log: tools/ptxas_usage.py); the kernel cache never passes any. Raises
    CompileError (with the NVRTC log, the variant and the options) when the source is missing or
    does not compile, ValueError for an unknown arch, BackendUnavailableError when NVRTC is not
    installed.
    """
    nvrtc = _nvrtc()
    arch = normalise_arch(arch)
    if arch not in supported_archs():
        raise BackendUnavailableError(
            f"NVRTC {'.'.join(map(str, nvrtc_version()))} cannot target {arch}; "
            f"it supports {', '.join(supported_archs())}")
    source_dir = Path(source_dir) if source_dir is not None else resources.cuda_source_dir()
    used = (*compile_options(variant, arch, source_dir).argv, *extra_options)
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
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return CompileResult(cubin, log, used, time.perf_counter() - start)
