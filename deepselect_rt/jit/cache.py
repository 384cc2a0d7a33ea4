"""The on-disk kernel cache: layered lookup, atomic writes, per-key compile locks, LRU pruning.

Lookup of (variant, arch): this process's memory, then the read-only layers (the wheel's
pre-built ``cache/``, then each root in ``DEEPSELECT_RT_CACHE_PATH``), then the writable root
(``DEEPSELECT_RT_CACHE_DIR``); on a miss, take the key's file lock, look in the writable root
again (another process may have just built it), compile with the cache's compiler and store.

The cache knows no backend: it is given a compiler (``Compiler`` below; ``cuda/nvrtc.py`` and
``ascend/compiler.py`` provide one each) that names the kernels folder, the key's toolchain
fields and how to build a binary.

A root holds ``v<schema>/<arch>/<key[:2]>/<key>.cubin`` and ``<key>.json`` beside it (the key's
fields, the binary's size and sha256, the creation time). The cubin is written first and the
metadata second, each to a temp file in the same folder that is fsynced and then renamed over the
target, so a reader sees whole files or none. The metadata's sha256 is what makes an entry valid
and it is checked on every load: a truncated, corrupted or half-written entry is a miss, and the
writable root gets a fresh copy. When no root is writable the cache keeps compiled kernels in
memory only and warns once per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from typing import Protocol

from . import env
from .key import cache_key

_process_lock = threading.Lock()  # guards the two process-wide values below
_compiles = 0
_warned: set = set()  # kinds of warning already given in this process
_KEY = re.compile(r"[0-9a-f]{64}")  # a cache key (key.cache_key: a sha256 in hex), an entry's file name
# The start of the warning given when the compile lock folder cannot be made.
LOCKLESS_WARNING = "deepselect-rt: cannot make the compile lock folder"


def compile_count() -> int:
    """How many kernel compiles this process has started, through any KernelCache."""
    return _compiles


def _warn_once(kind: str, message: str) -> None:
    with _process_lock:
        first = kind not in _warned
        _warned.add(kind)
    if first:
        warnings.warn(message, RuntimeWarning, stacklevel=5)


class Compiler(Protocol):
    """What the cache needs of a backend's compiler.

    ``name``: shown in listings ("nvrtc"). ``source_dir()``: the shipped kernels folder.
    ``key_fields(spec, arch, source_dir)``: the key's fields, the normalised arch among them
    (build them with ``key.toolchain_key_fields``), raising ValueError for a bad arch and BackendUnavailableError
    when the toolchain is missing. ``compile(spec, arch, source_dir)``: (binary, seconds),
    raising CompileError when the source does not compile. ``require()``: raises
    BackendUnavailableError naming what is missing when the toolchain is not installed.
    Compilers are picklable (warmup sends them to worker processes).
    """

    name: str

    def require(self) -> None: ...

    def source_dir(self) -> Path: ...

    def key_fields(self, spec, arch: str, source_dir: Path) -> dict: ...

    def compile(self, spec, arch: str, source_dir: Path) -> tuple[bytes, float]: ...


@dataclass(frozen=True)
class Layer:
    """One cache root. kind: "prebuilt" (the wheel's), "path" (DEEPSELECT_RT_CACHE_PATH) or
    "user" (the writable root; ``writable`` is False when it could not be written)."""

    path: Path
    kind: str
    writable: bool


@dataclass(frozen=True)
class Entry:
    """A stored kernel, from its metadata. size: cubin bytes; disk_bytes: cubin + metadata;
    created, last_used: Unix times (last_used is the cubin's mtime, refreshed on each hit);
    toolchain: the compiler and version that built it, e.g. "nvrtc 13.0" (part of the key:
    another version misses it)."""

    key: str
    arch: str
    entry: str
    toolchain: str
    variant: dict
    size: int
    disk_bytes: int
    created: float
    last_used: float
    layer: Layer
    cubin_path: Path


@dataclass(frozen=True)
class Resolved:
    """A kernel found or built. origin: "memory", "disk" or "compiled"; path: the stored cubin
    (None when only in memory); seconds: compile time, 0.0 when not compiled here."""

    cubin: bytes
    key: str
    origin: str
    path: Path | None
    seconds: float


@dataclass(frozen=True)
class Problem:
    """A bad file found by ``verify``: what it is and why it is bad."""

    layer: Layer
    path: Path
    reason: str


@dataclass(frozen=True)
class Removal:
    """What ``prune``/``clear`` did: entries and bytes removed, bytes left in the writable root."""

    entries: int
    freed_bytes: int
    remaining_bytes: int


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    # Makes the rename itself durable; not possible (nor needed) where folders can't be opened.
    if not hasattr(os, "O_DIRECTORY"):
        return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a fsynced temp file in the same folder and os.replace."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a shared or baked-in cache must be readable
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _read_metadata(meta_path: Path) -> dict:
    """The parsed metadata. Raises OSError or ValueError when it is unreadable or malformed."""
    meta = json.loads(meta_path.read_bytes())
    if not isinstance(meta, dict):
        raise ValueError("metadata is not an object")
    for name, kind in (("key", str), ("sha256", str), ("size", int), ("arch", str)):
        if not isinstance(meta.get(name), kind):
            raise ValueError(f"metadata field {name!r} missing or not {kind.__name__}")
    return meta


def _check_entry(meta_path: Path) -> tuple[dict, bytes]:
    """Metadata and cubin of a complete, intact entry. Raises OSError/ValueError naming the flaw."""
    meta = _read_metadata(meta_path)
    if meta["key"] != meta_path.stem:
        raise ValueError(f"metadata key {meta['key'][:12]}... does not match its file name")
    data = meta_path.with_suffix(".cubin").read_bytes()
    if len(data) != meta["size"]:
        flaw = "truncated" if len(data) < meta["size"] else "bytes appended"
        raise ValueError(f"cubin has {len(data)} bytes, metadata says {meta['size']} ({flaw})")
    if _sha256(data) != meta["sha256"]:
        raise ValueError("cubin sha256 does not match its metadata (corrupted)")
    return meta, data


def _unlisted(metas: list[Path], entries: list[Entry]) -> list[Path]:
    """The metadata files among ``metas`` that list_entries could not read into ``entries``."""
    listed = {e.cubin_path.with_suffix(".json") for e in entries}
    return [m for m in metas if m not in listed]


def _is_stale_temp(path: Path, now: float) -> bool:
    try:
        return now - path.stat().st_mtime > env.STALE_TMP_AGE_S
    except OSError:
        return False


def _unlink(path: Path) -> int:
    """Remove a file; returns the bytes freed (0 if it was already gone)."""
    try:
        size = path.stat().st_size
        path.unlink()
        return size
    except FileNotFoundError:
        return 0


def _entry_files(base: Path, suffix: str) -> list[Path]:
    """The files ``<arch>/<key[:2]>/<key><suffix>`` under ``base``, ``key`` a cache key."""
    return [p for p in base.glob(f"*/*/*{suffix}") if _KEY.fullmatch(p.stem) and p.parent.name == p.stem[:2]]


def _scan_schema(base: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(metadata paths, orphan cubins, temp files) of the schema folder ``base`` (``v1``):
    entries are ``<arch>/<key[:2]>/<key>.{json,cubin}``; any other file is not the cache's."""
    if not base.is_dir():
        return [], [], []
    metas = sorted(_entry_files(base, ".json"))
    cubins = {p.with_suffix(".json") for p in _entry_files(base, ".cubin")}
    orphans = sorted(p.with_suffix(".cubin") for p in cubins - set(metas))
    temps = sorted(base.glob("**/.*.tmp"))
    return metas, orphans, temps


def _remove_empty_folders(base: Path) -> None:
    """Remove the empty folders under ``base`` (not ``base``), deepest first; one that is not
    empty or is already gone stays as it is."""
    for folder, _, _ in os.walk(base, topdown=False):
        if Path(folder) != base:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


class KernelCache:
    """Kernel binaries by (spec, arch), from memory, disk layers or ``compiler``.

    compiler: a ``Compiler``, or None for a cache that is only listed, verified and pruned
    (``resolve`` then raises ValueError). root: the writable root (default
    ``env.writable_cache_root()``). read_only: read-only roots searched first, in order
    (default: the wheel's pre-built cache, then ``DEEPSELECT_RT_CACHE_PATH``). max_bytes: size
    cap of the writable root, pruned least recently used first after each write (default
    ``DEEPSELECT_RT_CACHE_MAX_BYTES``, else none).
    source_dir: the kernels folder (default: the compiler's shipped one, looked up per call).
    Thread-safe; many processes may share one root.
    """

    def __init__(self, compiler: Compiler | None = None, root: Path | str | None = None, read_only=None, *,
                 max_bytes: int | None = None, source_dir: Path | str | None = None):
        self.compiler = compiler
        self.root = Path(root).expanduser() if root is not None else env.writable_cache_root()
        if read_only is None:
            self._read_only = [(env.prebuilt_cache_root(), "prebuilt")]
            self._read_only += [(p, "path") for p in env.extra_cache_paths()]
        else:
            self._read_only = [(Path(p).expanduser(), "path") for p in read_only]
        self.max_bytes = max_bytes if max_bytes is not None else env.cache_max_bytes()
        self._source_dir = Path(source_dir) if source_dir is not None else None
        self.compiles = 0
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._memory: dict[str, Resolved] = {}
        self._writable_checked = False
        self._writable: Path | None = None
        self._lock_dir: Path | None = None
        self.unwritable_reason = ""  # why writable_root() is None, once it has been probed

    # -- where things are ------------------------------------------------------------------

    @property
    def source_dir(self) -> Path:
        """The kernels folder whose sources this cache compiles and hashes into keys."""
        if self._source_dir is not None:
            return self._source_dir
        return self._need_compiler().source_dir()

    def _need_compiler(self) -> Compiler:
        if self.compiler is None:
            raise ValueError("this KernelCache was made without a compiler: it can list, verify and prune "
                             "entries but not build or look up kernels")
        return self.compiler

    def writable_root(self) -> Path | None:
        """The writable root, created if needed, or None (memory only, warned once per process)."""
        with self._lock:
            if not self._writable_checked:
                self._writable = self._probe_writable()
                self._lock_dir = self._probe_lock_dir() if self._writable else None
                self._writable_checked = True
            return self._writable

    def _probe_writable(self) -> Path | None:
        try:
            vdir = self.root / f"v{env.CACHE_SCHEMA}"
            vdir.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=vdir, prefix=".probe.", suffix=".tmp")
            os.close(fd)
            os.unlink(probe)
            return self.root
        except OSError as exc:
            self.unwritable_reason = f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)
            return None

    @staticmethod
    def _probe_lock_dir() -> Path | None:
        path = env.lock_dir()
        try:
            path.mkdir(parents=True, exist_ok=True)
            return path
        except OSError as exc:  # compiles then run unserialised: duplicated work, still correct
            _warn_once("lockless", f"{LOCKLESS_WARNING} {path} ({exc.strerror or exc}); processes sharing the "
                                   f"cache may each compile the same kernel (set {env.ENV_LOCK_DIR} to a "
                                   "writable local folder)")
            return None

    def layers(self) -> list[Layer]:
        """Every root searched, in order: read-only ones that exist, then the writable one."""
        found, seen = [], {self.root.resolve()}
        for path, kind in self._read_only:
            if path.is_dir() and path.resolve() not in seen:
                seen.add(path.resolve())
                found.append(Layer(path, kind, False))
        found.append(Layer(self.root, "user", self._can_write()))
        return found

    def _can_write(self) -> bool:
        """Whether the writable root is writable, without creating it (listing writes nothing):
        the probe's answer once a write has asked for it, else whether the nearest existing
        folder on the way to it is writable."""
        with self._lock:
            if self._writable_checked:
                return self._writable is not None
        path = self.root / f"v{env.CACHE_SCHEMA}"
        try:
            while not os.path.lexists(path) and path != path.parent:
                path = path.parent
            return path.is_dir() and os.access(path, os.W_OK | os.X_OK)  # False for a dangling link
        except OSError:
            return False

    @staticmethod
    def _entry_paths(root: Path, arch: str, key: str) -> tuple[Path, Path]:
        folder = root / f"v{env.CACHE_SCHEMA}" / arch / key[:2]
        return folder / f"{key}.cubin", folder / f"{key}.json"

    # -- lookup and build ------------------------------------------------------------------

    def key_for(self, variant, arch: str) -> tuple[str, dict]:
        """(cache key, key fields) of ``variant`` on ``arch``.

        Raises ValueError for a bad arch, BackendUnavailableError without the toolchain.
        """
        fields = self._need_compiler().key_fields(variant, arch, self.source_dir)
        return cache_key(fields), fields

    def _load(self, root: Path, arch: str, key: str, *, touch: bool) -> Resolved | None:
        cubin_path, meta_path = self._entry_paths(root, arch, key)
        try:
            _, data = _check_entry(meta_path)
        except (OSError, ValueError):
            return None  # absent, torn or corrupted: a miss
        if touch:
            with contextlib.suppress(OSError):
                os.utime(cubin_path)  # least-recently-used order for prune()
        return Resolved(data, key, "disk", cubin_path, 0.0)

    def lookup(self, variant, arch: str) -> Resolved | None:
        """The kernel from memory or a disk layer, or None; never compiles."""
        key, fields = self.key_for(variant, arch)
        return self._lookup(key, fields["arch"])

    def _memory_hit(self, key: str) -> Resolved | None:
        with self._lock:
            hit = self._memory.get(key)
        return None if hit is None else Resolved(hit.cubin, key, "memory", hit.path, 0.0)

    def _lookup(self, key: str, arch: str) -> Resolved | None:
        hit = self._memory_hit(key)
        if hit is not None:
            return hit
        # An unwritable user root is still read: it may hold kernels from an earlier run. Not
        # writable_root(), which makes the root: a lookup (info's) must not write.
        writable = self._can_write()
        for root, _ in [*self._read_only, (self.root, "user")]:
            found = self._load(root, arch, key, touch=writable and root == self.root)
            if found is not None:
                return self._remember(found)
        return None

    def _remember(self, resolved: Resolved) -> Resolved:
        with self._lock:
            self._memory[resolved.key] = resolved
        return resolved

    def resolve(self, variant, arch: str) -> Resolved:
        """The kernel for ``variant`` on ``arch``, compiling and storing it on a miss.

        Raises CompileError (with the compiler's log), ValueError for a bad arch or a cache made
        without a compiler, BackendUnavailableError when the toolchain is missing (the key holds
        its version).
        """
        key, fields = self.key_for(variant, arch)
        arch = fields["arch"]
        found = self._lookup(key, arch)
        if found is not None:
            return found
        with self._key_lock(key), self._file_lock(key):
            # Re-check: another thread or process may have built it while we waited.
            hit = self._memory_hit(key)
            if hit is not None:
                return hit
            writable = self.writable_root()
            if writable is not None:
                found = self._load(writable, arch, key, touch=True)
                if found is not None:
                    return self._remember(found)
            return self._remember(self._build(variant, arch, key, fields))

    def get_or_build(self, variant, arch: str) -> bytes:
        """The cubin bytes for ``variant`` on ``arch`` (see ``resolve`` for errors)."""
        return self.resolve(variant, arch).cubin

    def _build(self, variant, arch: str, key: str, fields: dict) -> Resolved:
        global _compiles
        with _process_lock:
            _compiles += 1
        with self._lock:
            self.compiles += 1
        binary, seconds = self._need_compiler().compile(variant, arch, self.source_dir)
        path = None
        writable = self.writable_root()
        if writable is None:
            # Said when a compile cannot be kept, not when the cache is only listed or read.
            _warn_once("memory-only", f"deepselect-rt: the kernel cache {self.root} is not writable "
                       f"({self.unwritable_reason}); compiled kernels are kept in memory for this process "
                       f"only. Set {env.ENV_CACHE_DIR} to a writable folder to keep them.")
        else:
            meta = {**fields, "key": key, "size": len(binary),
                    "sha256": _sha256(binary), "created": time.time(),
                    "compile_seconds": round(seconds, 4)}
            try:
                path = self._store(writable, arch, key, binary, meta)
            except OSError as exc:  # disk full, folder removed under us: keep it in memory
                warnings.warn(f"deepselect-rt: could not store kernel {variant.entry} for {arch} "
                              f"in {writable}: {exc}", RuntimeWarning, stacklevel=3)
        if path is not None and self.max_bytes is not None:
            # Keep this process's memory: the cap bounds the disk, not what is loaded.
            self.prune(self.max_bytes, forget=False)
            if not path.exists():
                _warn_once("cap-too-small", f"deepselect-rt: the cache cap of {env.format_size(self.max_bytes)} "
                           f"({env.ENV_CACHE_MAX_BYTES}) holds no kernel of {env.format_size(len(binary))}; "
                           "kernels are compiled again in every process")
                path = None
        return Resolved(binary, key, "compiled", path, seconds)

    def _store(self, root: Path, arch: str, key: str, cubin: bytes, meta: dict) -> Path:
        cubin_path, meta_path = self._entry_paths(root, arch, key)
        cubin_path.parent.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for leftover in cubin_path.parent.glob(f".{key}.*.tmp"):
            if _is_stale_temp(leftover, now):
                with contextlib.suppress(OSError):
                    leftover.unlink()
        # Cubin first, metadata last: the metadata's sha256 is what makes the entry valid.
        try:
            _atomic_write(cubin_path, cubin)
        except FileNotFoundError:  # another process's prune removed the folder while it was empty
            cubin_path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(cubin_path, cubin)
        _atomic_write(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
        return cubin_path

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    @contextlib.contextmanager
    def _file_lock(self, key: str):
        """Hold the key's inter-process lock; on timeout or lock failure, warn and go on."""
        self.writable_root()
        if self._lock_dir is None:
            yield
            return
        import filelock

        path = self._lock_dir / f"{key}.lock"
        timeout = env.lock_timeout()
        lock = filelock.FileLock(str(path), timeout=timeout)
        held = False
        try:
            lock.acquire()
            held = True
        except filelock.Timeout:  # before OSError: Timeout subclasses it in filelock >= 3.13
            warnings.warn(f"deepselect-rt: waited {timeout:.0f} s for {path}; compiling without "
                          f"it (raise {env.ENV_LOCK_TIMEOUT} to wait longer)", RuntimeWarning,
                          stacklevel=4)
        except OSError as exc:
            warnings.warn(f"deepselect-rt: cannot take compile lock {path} ({exc}); compiling "
                          "without it", RuntimeWarning, stacklevel=4)
        try:
            yield
        finally:
            if held:
                lock.release()

    # -- maintenance -----------------------------------------------------------------------

    def _scan(self, layer: Layer):
        """(metadata paths, orphan cubins, temp files) of one layer's current schema."""
        return _scan_schema(layer.path / f"v{env.CACHE_SCHEMA}")

    def list_entries(self, layers: list[Layer] | None = None) -> list[Entry]:
        """Entries of every layer (or the given ones), from their metadata (not re-hashed)."""
        entries = []
        for layer in layers if layers is not None else self.layers():
            for meta_path in self._scan(layer)[0]:
                cubin_path = meta_path.with_suffix(".cubin")
                try:
                    meta = _read_metadata(meta_path)
                    st = cubin_path.stat()
                    disk = st.st_size + meta_path.stat().st_size
                except (OSError, ValueError):
                    continue  # verify() reports these
                entries.append(Entry(
                    key=meta["key"], arch=meta["arch"], entry=str(meta.get("entry", "?")),
                    toolchain=toolchain_text(meta),
                    variant=meta.get("variant", {}), size=meta["size"], disk_bytes=disk,
                    created=float(meta.get("created", 0.0)), last_used=st.st_mtime,
                    layer=layer, cubin_path=cubin_path))
        return entries

    def unlisted_files(self, entries: list[Entry]) -> list[Path]:
        """Files of every layer that are none of ``entries`` (from list_entries): metadata that
        cannot be read or whose cubin is gone, and cubins without metadata; verify() says why."""
        left_out = []
        for layer in self.layers():
            metas, orphans, _ = self._scan(layer)
            left_out += _unlisted(metas, entries) + orphans
        return left_out

    def verify(self, *, fix: bool = False) -> tuple[int, list[Problem]]:
        """Re-hash every entry of every layer.

        Returns (entries checked, problems): bad or orphaned entries, and temp files left by
        writers that died. fix=True deletes the bad files of the writable root (they are rebuilt
        on next use).
        """
        checked, problems, now = 0, [], time.time()
        for layer in self.layers():
            metas, orphans, temps = self._scan(layer)
            bad = []
            for meta_path in metas:
                checked += 1
                try:
                    _check_entry(meta_path)
                except (OSError, ValueError) as exc:
                    bad.append(Problem(layer, meta_path, str(exc)))
            bad += [Problem(layer, p, "cubin without metadata (an interrupted write)")
                    for p in orphans]
            bad += [Problem(layer, p, "temp file of a writer that died")
                    for p in temps if _is_stale_temp(p, now)]
            if fix and layer.writable:
                for problem in bad:
                    _unlink(problem.path)
                    if problem.path.suffix == ".json":
                        _unlink(problem.path.with_suffix(".cubin"))
            problems += bad
        return checked, problems

    def _writable_layer(self) -> Layer | None:
        root = self.writable_root()
        return Layer(root, "user", True) if root is not None else None

    def prune(self, max_bytes: int, forget: bool = True) -> Removal:
        """Shrink the writable root to at most ``max_bytes``, least recently used entries first.

        Also removes orphaned cubins, stale temp files, entries whose metadata or cubin cannot be
        read (a lookup rebuilds those anyway; ``list_entries`` does not show them) and the
        folders left empty.
        Read-only layers are never touched. ``forget``: also drop the removed entries from this
        cache's memory.
        """
        layer = self._writable_layer()
        if layer is None:
            return Removal(0, 0, 0)
        metas, orphans, temps = self._scan(layer)
        now = time.time()
        freed = sum(_unlink(p) for p in orphans if _is_stale_temp(p, now))
        freed += sum(_unlink(p) for p in temps if _is_stale_temp(p, now))
        entries = sorted(self.list_entries([layer]), key=lambda e: e.last_used)
        unreadable = _unlisted(metas, entries)  # a writer renames the cubin first
        freed += sum(_unlink(m) + _unlink(m.with_suffix(".cubin")) for m in unreadable)
        total = sum(e.disk_bytes for e in entries)
        removed = len(unreadable)
        for entry in entries:
            if total <= max_bytes:
                break
            # Metadata first: a reader then misses cleanly instead of finding a cubin-less entry.
            gone = _unlink(entry.cubin_path.with_suffix(".json")) + _unlink(entry.cubin_path)
            total -= entry.disk_bytes
            freed += gone
            removed += 1
            if forget:
                with self._lock:
                    self._memory.pop(entry.key, None)
        _remove_empty_folders(layer.path / f"v{env.CACHE_SCHEMA}")
        return Removal(removed, freed, max(total, 0))

    def clear(self) -> Removal:
        """Delete every entry and temp file of the writable root (``v<N>`` folders up to this
        layout's) and this cache's memory; any other file stays. Read-only layers are never
        touched."""
        with self._lock:
            self._memory.clear()
        layer = self._writable_layer()
        if layer is None:
            return Removal(0, 0, 0)
        entries = freed = 0
        for schema in range(1, env.CACHE_SCHEMA + 1):  # this layout's folder and older ones'
            folder = layer.path / f"v{schema}"
            metas, orphans, temps = _scan_schema(folder)
            # Metadata first: a reader then misses cleanly instead of finding a cubin-less entry.
            freed += sum(_unlink(m) + _unlink(m.with_suffix(".cubin")) for m in metas)
            freed += sum(_unlink(p) for p in orphans + temps)
            entries += len(metas)
            _remove_empty_folders(folder)
        return Removal(entries, freed, 0)


_default_lock = threading.Lock()
_default: dict = {}


def toolchain_text(meta: dict) -> str:
    """"nvrtc 13.0", "cann 8.2.RC1 aclrtc": the toolchain fields an entry's key holds."""
    if "nvrtc" in meta:
        return f"nvrtc {meta['nvrtc']}"
    if "cann" in meta:
        return f"cann {meta['cann']} {meta.get('compiler', '?')}"
    return "?"


def default_cache(compiler: Compiler | None = None) -> KernelCache:
    """The process-wide cache with ``compiler`` (None: one for listing and maintenance only) for
    the current environment: one per distinct configuration, so changing
    ``DEEPSELECT_RT_CACHE_*`` gives a new one."""
    signature = (compiler and compiler.name, env.writable_cache_root(), env.prebuilt_cache_root(),
                 tuple(env.extra_cache_paths()), env.cache_max_bytes())
    with _default_lock:
        cache = _default.get(signature)
        if cache is None:
            cache = _default[signature] = KernelCache(compiler)
        return cache


__all__ = ["Compiler", "KernelCache", "Layer", "Entry", "Resolved", "Problem", "Removal", "default_cache", "toolchain_text",
           "compile_count"]
