"""The kernel cache key: everything that can change a compiled cubin, hashed.

Fields: the cache schema, the package version, a digest of every shipped source and header under
``kernels_cu/``, the variant's parameters, the portable NVRTC options (include paths replaced by
stable tokens), the arch and the toolchain (NVRTC's version; CANN's version and compiler).
Machine paths are left out so that a cache built by ``warmup --into`` on one machine is found on
another. Each compiler builds its fields with ``toolchain_key_fields``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from pathlib import Path

from . import env

_digest_lock = threading.Lock()
_digest_memo: dict = {}


def package_version() -> str:
    """``deepselect_rt.__version__``, else the installed distribution's, else "0+unknown"."""
    import deepselect_rt  # the package is already imported by the time this module is

    version = getattr(deepselect_rt, "__version__", None)
    if version:
        return str(version)
    from importlib import metadata

    try:
        return metadata.version(env.APP_NAME)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _source_files(source_dir: Path, suffixes) -> list[Path]:
    return sorted(p for p in source_dir.rglob("*")
                  if p.is_file() and p.suffix in suffixes and "__pycache__" not in p.parts)


def source_digest(source_dir: Path, suffixes=env.SOURCE_SUFFIXES) -> str:
    """sha256 over the sorted relative paths and contents of every source and header under
    ``source_dir`` (files ending in one of ``suffixes``).

    Memoised on the files' (path, size, mtime) so repeated lookups only stat. Raises
    FileNotFoundError when the folder does not exist.
    """
    source_dir = Path(source_dir).resolve()
    if not source_dir.is_dir():
        raise FileNotFoundError(f"kernel source folder {source_dir} does not exist")
    files = _source_files(source_dir, tuple(suffixes))
    signature = tuple((str(p), st.st_size, st.st_mtime_ns) for p in files for st in [p.stat()])
    with _digest_lock:
        memo = _digest_memo.get(source_dir)
        if memo is not None and memo[0] == signature:
            return memo[1]
    h = hashlib.sha256()
    for path in files:
        rel = path.relative_to(source_dir).as_posix().encode()
        data = path.read_bytes()
        # Length-prefixed so that no two different trees hash the same byte stream.
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    digest = h.hexdigest()
    with _digest_lock:
        _digest_memo[source_dir] = (signature, digest)
    return digest


def variant_fields(variant) -> dict:
    """The variant's parameters as JSON-ready data (also stored in each entry's metadata)."""
    fields = dataclasses.asdict(variant)
    fields["extra"] = [list(pair) for pair in variant.extra]
    return fields


def toolchain_key_fields(variant, arch: str, portable_options, toolchain: dict, source_dir: Path,
                         suffixes=env.SOURCE_SUFFIXES) -> dict:
    """The key's inputs for any compiler: the common fields plus ``toolchain`` (what identifies
    the compiler, e.g. ``{"nvrtc": "13.0"}`` or ``{"cann": "8.2.RC1", "compiler": "aclrtc"}``),
    with the sources digested over ``suffixes``."""
    return {
        "schema": env.CACHE_SCHEMA,
        "package": package_version(),
        "sources": source_digest(source_dir, suffixes),
        "variant": variant_fields(variant),
        "entry": variant.entry,
        "options": list(portable_options),
        "arch": arch,
        **toolchain,
    }


def cache_key(fields: dict) -> str:
    """The hex sha256 of ``fields`` (canonical JSON)."""
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


__all__ = ["package_version", "source_digest", "variant_fields", "toolchain_key_fields",
           "cache_key"]
