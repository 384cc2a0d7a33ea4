"""Is a usable Ascend stack here, and if not, exactly what is missing.

The Ascend backend needs: an NPU device node (``/dev/davinci<N>``), a CANN install named by
``ASCEND_HOME_PATH`` or ``ASCEND_TOOLKIT_HOME`` (run CANN's ``set_env.sh``), a kernel compiler
from it (``libacl_rtc.so`` for aclrtc, else the ``bisheng`` executable), the AscendCL Python
module ``acl`` and ``torch_npu``. Compiling (``warmup --npu-arch``) needs only CANN and a
compiler. ``detect`` never raises; ``require_runtime`` / ``require_compiler`` raise
BackendUnavailableError listing every missing piece.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailableError

DEV_DIR = Path("/dev")
ENV_HOMES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
# Where CANN installs keep their version (first "version=" line wins), newest layout first.
_VERSION_FILES = ("version.info", "compiler/version.info", "runtime/version.info",
                  "ascend_toolkit_install.info", "version.cfg")
_VERSION_RE = re.compile(r"^\s*version\s*[=:]\s*(\S+)", re.IGNORECASE | re.MULTILINE)
_ACLRTC = ("lib64/libacl_rtc.so", "lib/libacl_rtc.so")
_BISHENG = ("compiler/ccec_compiler/bin/bisheng", "tools/bisheng_compiler/bin/bisheng", "bin/bisheng")
_DEVICE_NODE = re.compile(r"^davinci\d+$")  # not davinci_manager


@dataclass(frozen=True)
class AscendStack:
    """What was found. device_nodes: names under the device dir. cann_home: the CANN root or
    None. cann_version: its version string, "unknown" when no version file is readable, None
    without CANN. aclrtc, bisheng: paths or None. acl, torch_npu: whether they import."""

    device_nodes: tuple
    cann_home: Path | None
    cann_version: str | None
    aclrtc: Path | None
    bisheng: Path | None
    acl: bool
    torch_npu: bool

    def missing_for_compile(self) -> list[str]:
        """What keeps kernels from compiling here, one line each (empty: nothing)."""
        if self.cann_home is None:
            return [f"CANN toolkit: set {' or '.join(ENV_HOMES)} to the CANN install (source its "
                    "set_env.sh)"]
        if self.aclrtc is None and self.bisheng is None:
            return [f"a kernel compiler: neither libacl_rtc.so (aclrtc) nor bisheng was found under "
                    f"{self.cann_home} or on PATH"]
        return []

    def missing_for_run(self) -> list[str]:
        """What keeps kernels from running here, one line each (empty: nothing)."""
        missing = []
        if not self.device_nodes:
            missing.append("an Ascend NPU: no /dev/davinci<N> device node")
        missing += self.missing_for_compile()
        if not self.acl:
            missing.append("the AscendCL Python module 'acl' (ships with CANN: source set_env.sh)")
        if not self.torch_npu:
            missing.append("torch_npu (pip install torch-npu matching your torch and CANN)")
        return missing


def _cann_home(environ) -> Path | None:
    for name in ENV_HOMES:
        value = environ.get(name, "").strip()
        if value and Path(value).is_dir():
            return Path(value)
    return None


def cann_version(home: Path) -> str:
    """The CANN version under ``home`` ("8.2.RC1"), or "unknown" when no version file reads."""
    for rel in _VERSION_FILES:
        try:
            match = _VERSION_RE.search((home / rel).read_text(errors="replace"))
        except OSError:
            continue
        if match:
            return match.group(1)
    return "unknown"


def _first_file(home: Path, candidates) -> Path | None:
    return next((home / c for c in candidates if (home / c).is_file()), None)


def _imports(name: str, import_module) -> bool:
    try:
        import_module(name)
    except Exception:  # ImportError, and the OSError/RuntimeError of a broken native install
        return False
    return True


def detect(dev_dir: Path | str | None = None, environ=None,
           import_module=importlib.import_module) -> AscendStack:
    """Look for every piece (see the module docstring); never raises.

    dev_dir: where device nodes live (default ``DEV_DIR``, read at call time). environ: the
    environment (default ``os.environ``). import_module: how modules are imported
    (``importlib.import_module``).
    """
    environ = os.environ if environ is None else environ
    dev_dir = Path(dev_dir if dev_dir is not None else DEV_DIR)
    try:
        nodes = tuple(sorted(p.name for p in dev_dir.iterdir() if _DEVICE_NODE.match(p.name)))
    except OSError:
        nodes = ()
    home = _cann_home(environ)
    version = aclrtc = bisheng = None
    if home is not None:
        version = cann_version(home)
        aclrtc = _first_file(home, _ACLRTC)
        bisheng = _first_file(home, _BISHENG)
        if bisheng is None:
            found = shutil.which("bisheng", path=environ.get("PATH"))
            bisheng = Path(found) if found else None
    return AscendStack(nodes, home, version, aclrtc, bisheng, _imports("acl", import_module),
                       _imports("torch_npu", import_module))


def _raise(what: str, missing: list[str]):
    raise BackendUnavailableError(f"{what} needs, and this machine lacks:\n  - " + "\n  - ".join(missing))


def require_runtime(stack: AscendStack | None = None) -> AscendStack:
    """The stack, when kernels can compile and run here; else BackendUnavailableError."""
    stack = stack or detect()
    missing = stack.missing_for_run()
    if missing:
        _raise("deepselect_rt.topk on an NPU tensor", missing)
    return stack


def require_compiler(stack: AscendStack | None = None) -> AscendStack:
    """The stack, when kernels can compile here (no NPU needed); else BackendUnavailableError."""
    stack = stack or detect()
    missing = stack.missing_for_compile()
    if missing:
        _raise("compiling Ascend kernels", missing)
    return stack


__all__ = ["AscendStack", "detect", "cann_version", "require_runtime", "require_compiler", "DEV_DIR"]
