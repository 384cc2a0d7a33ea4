"""Every path, environment variable and tunable of the compilers and the kernel cache, in one place.

The shipped folders: in a wheel, ``kernels_cu/``, ``kernels_ascendc/`` and ``cache/`` are mapped
into the package as ``deepselect_rt/kernels_cu`` etc. (pyproject.toml); in a source checkout or an
editable install they are plain folders beside the package. Compilers and the cache key read them
as real files, so they are located on disk directly (``importlib.resources`` gives a
``MultiplexedPath``, not a folder, for these data-only packages).

Environment variables (read at call time, so tests and long-running processes can change them):

``DEEPSELECT_RT_CACHE_DIR``
    The writable cache root. Default: the user cache dir (``platformdirs.user_cache_dir``,
    ``~/.cache/deepselect-rt`` on Linux).
``DEEPSELECT_RT_CACHE_PATH``
    Extra read-only cache roots, ``os.pathsep``-separated, searched after the wheel's pre-built
    ``cache/`` and before the writable root (for cubins baked into an image or a shared volume).
``DEEPSELECT_RT_CACHE_MAX_BYTES``
    Size cap of the writable root ("500M", "2G", or bytes); least recently used entries are
    pruned after each write. Unset or empty: no cap.
``DEEPSELECT_RT_LOCK_DIR``
    Where the per-key compile locks live. Default: ``deepselect-rt-locks-<uid>`` in the temp
    dir. Point processes on several nodes that share one cache root at a common folder here
    only if it supports flock; otherwise each node compiles once and the atomic writes keep the
    shared root consistent.
``DEEPSELECT_RT_LOCK_TIMEOUT``
    Seconds to wait for another process compiling the same kernel before compiling anyway.
``DEEPSELECT_RT_ARCH``
    Run the kernels of this arch instead of the GPU's own, with that arch's limits (shared
    memory per CTA, clusters). ``compute_80``, ``compute_86``, ``compute_89`` run PTX that the
    driver compiles for the GPU at load time: how the sm_80-sm_89 code paths are tested on a
    newer GPU. Unset: the GPU's own arch.
"""

from __future__ import annotations

import getpass
import math
import os
import re
import tempfile
from pathlib import Path

APP_NAME = "deepselect-rt"

ENV_CACHE_DIR = "DEEPSELECT_RT_CACHE_DIR"
ENV_CACHE_PATH = "DEEPSELECT_RT_CACHE_PATH"
ENV_CACHE_MAX_BYTES = "DEEPSELECT_RT_CACHE_MAX_BYTES"
ENV_LOCK_DIR = "DEEPSELECT_RT_LOCK_DIR"
ENV_LOCK_TIMEOUT = "DEEPSELECT_RT_LOCK_TIMEOUT"
ENV_ARCH = "DEEPSELECT_RT_ARCH"
ENV_NAMES = (ENV_CACHE_DIR, ENV_CACHE_PATH, ENV_CACHE_MAX_BYTES, ENV_LOCK_DIR, ENV_LOCK_TIMEOUT, ENV_ARCH)

# Bump when the on-disk layout or the key's fields change: old entries then live on, unread, in
# their own v<N> folder until `deepselect-rt cache clear`.
CACHE_SCHEMA = 1

# Long enough for the slowest kernel compile; a waiter that times out compiles itself (correct,
# only wasteful) rather than failing.
DEFAULT_LOCK_TIMEOUT_S = 600.0

# A temp file older than this belongs to a writer that died (a live one renames it within a
# compile's time), so cleanup may delete it without racing a live writer.
STALE_TMP_AGE_S = 600.0

# Files under kernels_cu/ that take part in a compile and therefore in the cache key.
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inc")

# The pip extra that brings NVRTC, named in every "not installed" message.
NVRTC_INSTALL_HINT = "pip install 'deepselect-rt[cu13]'  (or [cu12] for a CUDA 12 driver)"


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def settings() -> dict[str, str]:
    """The variables of ``ENV_NAMES`` that are set (not empty), by name, as their text."""
    return {name: value for name in ENV_NAMES if (value := _env(name)) is not None}


def writable_cache_root() -> Path:
    """The root the cache writes to (it may turn out not to be writable: see ``cache.py``). A
    relative ``DEEPSELECT_RT_CACHE_DIR`` is taken from the current folder, made absolute."""
    explicit = _env(ENV_CACHE_DIR)
    if explicit:
        return Path(explicit).expanduser().absolute()
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def extra_cache_paths() -> list[Path]:
    """The read-only roots named in ``DEEPSELECT_RT_CACHE_PATH``, in order (empty parts skipped)."""
    value = _env(ENV_CACHE_PATH)
    if not value:
        return []
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]


_PACKAGE = Path(__file__).resolve().parent.parent
_CHECKOUT = _PACKAGE.parent
# package subfolder in a wheel -> folder in a checkout
_FOLDERS = {"kernels_cu": "kernels_cu", "kernels_ascendc": "kernels_ascendc", "prebuilt": "cache"}


def _shipped_folder(name: str) -> Path:
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _CHECKOUT / _FOLDERS[name]


def cuda_source_dir() -> Path:
    """Folder holding the CUDA C++ kernel sources (``*.cu``) and headers (``*.cuh``)."""
    return _shipped_folder("kernels_cu")


def ascendc_source_dir() -> Path:
    """Folder holding the Ascend C kernel sources."""
    return _shipped_folder("kernels_ascendc")


def prebuilt_cache_root() -> Path:
    """The read-only root shipped inside the wheel (``cache/`` in a checkout, filled by
    ``deepselect-rt warmup --into cache/``)."""
    return _shipped_folder("prebuilt")


def cache_max_bytes() -> int | None:
    """The cap from ``DEEPSELECT_RT_CACHE_MAX_BYTES``, or None. Raises ValueError if malformed."""
    value = _env(ENV_CACHE_MAX_BYTES)
    return parse_size(value, what=ENV_CACHE_MAX_BYTES) if value else None


def lock_dir() -> Path:
    """Where per-key compile locks live: ``DEEPSELECT_RT_LOCK_DIR``, else a per-user folder in
    the node-local temp dir. Not inside a cache root: flock is unreliable on network file
    systems, and a root baked into a wheel or image should hold entries only."""
    explicit = _env(ENV_LOCK_DIR)
    if explicit:
        return Path(explicit).expanduser()
    uid = os.getuid() if hasattr(os, "getuid") else getpass.getuser()
    return Path(tempfile.gettempdir()) / f"{APP_NAME}-locks-{uid}"


def arch_override() -> str | None:
    """The arch named by ``DEEPSELECT_RT_ARCH`` (not yet normalised), or None."""
    return _env(ENV_ARCH)


def lock_timeout() -> float:
    """Seconds to wait for a compile lock. Raises ValueError unless the variable is a finite
    number >= 0."""
    value = _env(ENV_LOCK_TIMEOUT)
    if value is None:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{ENV_LOCK_TIMEOUT}={value!r} is not a number of seconds") from None
    if not 0 <= seconds < math.inf:  # NaN too
        raise ValueError(f"{ENV_LOCK_TIMEOUT}={value!r}: use a finite number of seconds >= 0")
    return seconds


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpe]?)(?:i?b)?\s*$", re.IGNORECASE)
# format_size's units, so whatever it prints parses back.
_SIZE_UNITS = {unit: 1 << (10 * power) for power, unit in enumerate(("", "k", "m", "g", "t", "p", "e"))}


def parse_size(text: str, *, what: str = "size") -> int:
    """Parse "500M", "2G", "1.5GiB", "4096" into bytes (units are powers of 1024).

    Raises ValueError naming ``what`` for anything else, or for a size too large to hold.
    """
    match = _SIZE_RE.match(str(text))
    if not match and _SIZE_RE.match(str(text).strip().removeprefix("-")):
        raise ValueError(f"{what}: {text!r} is negative; a size is a byte count of 0 or more, e.g. 500M or 2G")
    if not match:
        raise ValueError(f"{what}: cannot parse {text!r}; use a byte count or a number with "
                         "K, M, G, T, P or E (powers of 1024), e.g. 500M or 2G")
    number, unit = match.groups()
    size = float(number) * _SIZE_UNITS[unit.lower()]
    if math.isinf(size):  # a long digit string overflows the float
        raise ValueError(f"{what}: {text!r} is too large; a size must be a finite number of bytes, e.g. 500M or 2G")
    return int(size)


def format_size(n: int) -> str:
    """Bytes as a short human string ("4.9 KiB"); past 1024 EiB the EiB count grows."""
    if n < 1024:
        return f"{n} B"
    size, unit = float(n), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        size /= 1024
        if size < 1024:
            break
    return f"{size:.1f} {unit}"
