"""The kernel cache: layers, keys, atomic writes, locks, corruption, unwritable roots, pruning.

Every test points DEEPSELECT_RT_CACHE_DIR at a tmp folder: the user's cache is never touched.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="needs the cu13 extra (cuda-bindings, NVRTC)")

import deepselect_rt  # noqa: E402
from deepselect_rt.jit import cache as cache_mod  # noqa: E402
from deepselect_rt.jit import env as config  # noqa: E402
from deepselect_rt.jit import env as resources  # noqa: E402
from deepselect_rt.cuda.nvrtc import NVRTC_COMPILER  # noqa: E402
from deepselect_rt.jit.cache import KernelCache, compile_count, default_cache  # noqa: E402
from deepselect_rt.cuda import nvrtc  # noqa: E402
from deepselect_rt.cuda.variants import PROBE
from deepselect_rt.jit.spec import KernelSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARCH = "sm_90a"
V1 = PROBE
V2 = KernelSpec("probe", threads=128)
V3 = KernelSpec("probe", threads=64)


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    """A private writable root and lock dir, no extra layers, no cap."""
    root = tmp_path / "cache"
    monkeypatch.setenv(config.ENV_CACHE_DIR, str(root))
    monkeypatch.setenv(config.ENV_LOCK_DIR, str(tmp_path / "locks"))
    for name in (config.ENV_CACHE_PATH, config.ENV_CACHE_MAX_BYTES, config.ENV_LOCK_TIMEOUT):
        monkeypatch.delenv(name, raising=False)
    return root


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DEEPSELECT_RT_") or k == config.ENV_LOCK_DIR}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_child(script: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=child_env(**env),
                          capture_output=True, text=True, timeout=300)


# -- hits and layout ----------------------------------------------------------------------------

def test_second_request_does_not_compile(cache_env):
    before = compile_count()
    cache = KernelCache(NVRTC_COMPILER)
    first = cache.resolve(V1, ARCH)
    assert first.origin == "compiled" and cache.compiles == 1
    assert cache.resolve(V1, "9.0").origin == "memory"
    fresh = KernelCache(NVRTC_COMPILER)
    again = fresh.resolve(V1, ARCH)
    assert again.origin == "disk" and fresh.compiles == 0
    assert again.cubin == first.cubin and again.path == first.path
    assert compile_count() == before + 1


def test_layout_and_metadata(cache_env):
    resolved = KernelCache(NVRTC_COMPILER).resolve(V1, ARCH)
    key = resolved.key
    assert resolved.path == cache_env / f"v{config.CACHE_SCHEMA}" / ARCH / key[:2] / f"{key}.cubin"
    meta = json.loads(resolved.path.with_suffix(".json").read_text())
    assert meta["key"] == key and meta["arch"] == ARCH and meta["entry"] == V1.entry
    assert meta["sha256"] == sha(resolved.cubin) and meta["size"] == len(resolved.cubin)
    assert meta["variant"]["family"] == "probe" and meta["nvrtc"] and meta["options"]
    assert meta["created"] <= time.time()
    assert not list(resolved.path.parent.glob(".*.tmp"))
    assert [p.name for p in cache_env.iterdir()] == [f"v{config.CACHE_SCHEMA}"]  # entries only


def test_read_only_layers_are_searched_first(tmp_path, cache_env, monkeypatch):
    baked = tmp_path / "baked"
    built = KernelCache(NVRTC_COMPILER, baked, read_only=[]).resolve(V1, ARCH)
    monkeypatch.setenv(config.ENV_CACHE_PATH,
                       os.pathsep.join([str(tmp_path / "absent"), str(baked)]))
    cache = KernelCache(NVRTC_COMPILER)
    layers = cache.layers()
    assert [(l.kind, l.path) for l in layers[-2:]] == [("path", baked), ("user", cache_env)]
    assert all(l.path != tmp_path / "absent" for l in layers)  # missing roots are skipped
    found = cache.resolve(V1, ARCH)
    assert found.origin == "disk" and found.path == built.path and cache.compiles == 0
    assert not (cache_env / f"v{config.CACHE_SCHEMA}" / ARCH).exists()  # nothing copied


def test_threads_share_one_compile(cache_env):
    cache = KernelCache(NVRTC_COMPILER)
    with ThreadPoolExecutor(8) as pool:
        cubins = list(pool.map(lambda _: cache.get_or_build(V1, ARCH), range(8)))
    assert len(set(cubins)) == 1 and cache.compiles == 1


LOCK_HOLDER = """
    import sys, time, filelock
    lock = filelock.FileLock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    time.sleep(120)
"""


def test_held_lock_times_out_into_a_warning(cache_env, monkeypatch):
    cache = KernelCache(NVRTC_COMPILER)
    key, _ = cache.key_for(V1, ARCH)
    lock_path = config.lock_dir() / f"{key}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LOCK_HOLDER), str(lock_path)],
                              stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv(config.ENV_LOCK_TIMEOUT, "0.2")
        with pytest.warns(RuntimeWarning, match="compiling without it"):
            built = cache.resolve(V1, ARCH)
    finally:
        holder.kill()
        holder.wait()
    assert built.origin == "compiled" and cache.compiles == 1


# -- many processes, one compile per key --------------------------------------------------------

def _race(root: str, barrier, results) -> None:
    barrier.wait(timeout=120)  # all start together, on an empty cache
    cache = KernelCache(NVRTC_COMPILER, root, read_only=[])
    digests = [sha(cache.get_or_build(v, ARCH)) for v in (V1, V2)]
    results.put((os.getpid(), digests, cache.compiles))


def test_sixteen_processes_share_one_compile_per_key(cache_env):
    ctx = multiprocessing.get_context("spawn")
    n = 16
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(cache_env), barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=240) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * n
    assert len({tuple(d) for _, d, _ in outcomes}) == 1  # identical bytes everywhere
    assert sum(c for _, _, c in outcomes) == 2  # exactly one compile per key
    cache = KernelCache(NVRTC_COMPILER, cache_env, read_only=[])
    entries = cache.list_entries()
    assert sorted(e.entry for e in entries) == sorted([V1.entry, V2.entry])
    assert len(list(cache_env.rglob("*.cubin"))) == 2
    assert not list(cache_env.rglob("*.tmp"))
    assert cache.verify() == (2, [])


# -- a writer killed mid-way --------------------------------------------------------------------

KILLER = """
    import os, signal
    from deepselect_rt.cuda.nvrtc import NVRTC_COMPILER
    from deepselect_rt.jit.cache import KernelCache
    from deepselect_rt.cuda import nvrtc
    from deepselect_rt.cuda.variants import PROBE
    point = os.environ["KILL_AT"]
    calls = {"replace": 0}
    real_replace, real_compile = os.replace, nvrtc.compile_cubin

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def replace(src, dst):
        calls["replace"] += 1
        if point == "before_cubin_rename" or (
                point == "before_metadata_rename" and calls["replace"] == 2):
            die()
        real_replace(src, dst)

    def compile_cubin(*args, **kwargs):
        result = real_compile(*args, **kwargs)
        if point == "after_compile":
            die()
        return result

    os.replace = replace
    nvrtc.compile_cubin = compile_cubin
    KernelCache(NVRTC_COMPILER, read_only=[]).get_or_build(PROBE, "sm_90a")
    print("survived")
"""


@pytest.mark.parametrize("point", ["after_compile", "before_cubin_rename",
                                   "before_metadata_rename"])
def test_killed_writer_leaves_nothing_that_loads(cache_env, point):
    child = run_child(KILLER, KILL_AT=point, **{config.ENV_CACHE_DIR: str(cache_env)})
    assert child.returncode == -9, child.stdout + child.stderr
    leftovers = list(cache_env.rglob("*.tmp"))
    if point == "before_cubin_rename":
        assert leftovers  # the fsynced temp file the dead writer never renamed
    cache = KernelCache(NVRTC_COMPILER, read_only=[])
    assert cache.lookup(V1, ARCH) is None  # whatever it left is not an entry
    built = cache.resolve(V1, ARCH)  # the dead writer's lock does not block us
    assert built.origin == "compiled" and cache.compiles == 1
    assert KernelCache(NVRTC_COMPILER, read_only=[]).resolve(V1, ARCH).cubin == built.cubin
    assert cache.verify() == (1, [])  # young temp files may belong to a live writer: not reported
    old = time.time() - config.STALE_TMP_AGE_S - 60
    for path in leftovers:
        os.utime(path, (old, old))
    checked, problems = cache.verify()
    assert {p.path for p in problems} == set(leftovers)
    cache.prune(1 << 40)
    assert not list(cache_env.rglob("*.tmp"))
    assert cache.verify() == (1, [])


# -- corrupted entries --------------------------------------------------------------------------

def _corrupt(path: Path, how: str) -> None:
    meta = path.with_suffix(".json")
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "flipped":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))
    elif how == "appended":
        path.write_bytes(path.read_bytes() + b"extra")
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "no_cubin":
        path.unlink()
    elif how == "bad_metadata":
        meta.write_text("{not json")
    elif how == "no_metadata":
        meta.unlink()
    elif how == "wrong_key":
        fields = json.loads(meta.read_text())
        fields["key"] = "0" * 64
        meta.write_text(json.dumps(fields))


@pytest.mark.parametrize("how", ["truncated", "appended", "flipped", "empty", "no_cubin", "bad_metadata",
                                 "no_metadata", "wrong_key"])
def test_corrupted_entry_is_detected_and_rebuilt(cache_env, how):
    good = KernelCache(NVRTC_COMPILER).resolve(V1, ARCH)
    _corrupt(good.path, how)
    checked, problems = KernelCache(NVRTC_COMPILER).verify()
    assert problems, f"verify missed a {how} entry"
    if how in ("truncated", "appended"):
        assert ("bytes appended" if how == "appended" else "(truncated)") in str(problems)
    cache = KernelCache(NVRTC_COMPILER)
    rebuilt = cache.resolve(V1, ARCH)
    assert rebuilt.origin == "compiled" and cache.compiles == 1
    assert rebuilt.cubin == good.cubin
    assert KernelCache(NVRTC_COMPILER).resolve(V1, ARCH).origin == "disk"
    assert KernelCache(NVRTC_COMPILER).verify() == (1, [])


def test_corrupted_read_only_layer_is_skipped(tmp_path, cache_env):
    baked = tmp_path / "baked"
    good = KernelCache(NVRTC_COMPILER, baked, read_only=[]).resolve(V1, ARCH)
    _corrupt(good.path, "flipped")
    cache = KernelCache(NVRTC_COMPILER, read_only=[baked])
    again = cache.resolve(V1, ARCH)
    assert again.origin == "compiled" and again.cubin == good.cubin
    assert again.path.is_relative_to(cache_env)


# -- unwritable roots: memory only, one warning -------------------------------------------------

UNWRITABLE = """
    import json, warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        from deepselect_rt.cuda.nvrtc import NVRTC_COMPILER
        from deepselect_rt.jit.cache import KernelCache, default_cache
        from deepselect_rt.cuda.variants import PROBE
        from deepselect_rt.jit.spec import KernelSpec
        a = default_cache(NVRTC_COMPILER).get_or_build(PROBE, "sm_90a")
        b = default_cache(NVRTC_COMPILER).get_or_build(KernelSpec("probe", threads=128), "sm_90a")
        fresh = KernelCache(NVRTC_COMPILER)
        c = fresh.get_or_build(PROBE, "sm_90a")
    print(json.dumps({"warnings": [str(w.message) for w in caught],
                      "ok": a == c and a[:4] == b[:4] == b"\\x7fELF",
                      "writable": [layer.writable for layer in fresh.layers()]}))
"""


def _read_only_dir(tmp_path: Path) -> Path:
    """A folder nobody can write. Root ignores permission bits, so root gets a /proc folder."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        if not Path("/proc/1").is_dir():
            pytest.skip("running as root without /proc: no read-only folder to test with")
        return Path("/proc/1")
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    return path


@pytest.mark.parametrize("case", ["read_only_dir", "home_unwritable", "root_is_a_file"])
def test_unwritable_cache_works_in_memory_with_one_warning(tmp_path, case):
    env = {}
    if case == "read_only_dir":
        env[config.ENV_CACHE_DIR] = str(_read_only_dir(tmp_path))
    elif case == "home_unwritable":
        env["HOME"] = str(_read_only_dir(tmp_path))
        env["XDG_CACHE_HOME"] = ""  # platformdirs then uses $HOME/.cache
    else:
        file = tmp_path / "a-file"
        file.write_text("not a folder")
        env[config.ENV_CACHE_DIR] = str(file)
    child = run_child(UNWRITABLE, **env)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["ok"]
    assert len(report["warnings"]) == 1, report["warnings"]
    assert "not writable" in report["warnings"][0] and config.ENV_CACHE_DIR in report["warnings"][0]
    assert report["writable"][-1] is False


# -- keys ---------------------------------------------------------------------------------------

def test_key_depends_on_every_input(tmp_path, monkeypatch):
    cache = KernelCache(NVRTC_COMPILER)
    base, _ = cache.key_for(V1, ARCH)
    assert cache.key_for(V1, "9.0")[0] == base  # spelling does not matter
    assert cache.key_for(V1, "sm_80")[0] != base
    assert cache.key_for(V2, ARCH)[0] != base

    copy = tmp_path / "kernels_cu"
    shutil.copytree(resources.cuda_source_dir(), copy)
    monkeypatch.setattr(resources, "cuda_source_dir", lambda: copy)
    assert cache.key_for(V1, ARCH)[0] == base  # same contents, another folder: same key
    probe = copy / "probe.cu"
    probe.write_bytes(probe.read_bytes() + b"\n")  # one byte more
    changed, _ = cache.key_for(V1, ARCH)
    assert changed != base
    # A header in a subfolder counts too, even one no kernel includes yet.
    (copy / "common").mkdir(exist_ok=True)
    (copy / "common" / "new.cuh").write_text("#pragma once\n")
    assert cache.key_for(V1, ARCH)[0] not in (base, changed)
    built = cache.resolve(V1, ARCH)  # and it compiles the changed source
    assert built.origin == "compiled"
    monkeypatch.undo()

    monkeypatch.setattr(deepselect_rt, "__version__", "99.0.0")
    assert cache.key_for(V1, ARCH)[0] != base
    monkeypatch.undo()
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (99, 1))
    assert cache.key_for(V1, ARCH)[0] != base


def test_edited_source_is_rebuilt(tmp_path, monkeypatch):
    copy = tmp_path / "kernels_cu"
    shutil.copytree(resources.cuda_source_dir(), copy)
    monkeypatch.setattr(resources, "cuda_source_dir", lambda: copy)
    first = KernelCache(NVRTC_COMPILER).resolve(V1, ARCH)
    probe = copy / "probe.cu"
    probe.write_text(probe.read_text().replace("i * 3u + 1u", "i * 5u + 1u"))
    cache = KernelCache(NVRTC_COMPILER)
    second = cache.resolve(V1, ARCH)
    assert second.origin == "compiled" and second.key != first.key
    assert second.cubin != first.cubin


# -- maintenance --------------------------------------------------------------------------------

def test_prune_removes_least_recently_used(cache_env):
    cache = KernelCache(NVRTC_COMPILER)
    paths = {v: cache.resolve(v, ARCH).path for v in (V1, V2, V3)}
    now = time.time()
    for age, v in ((300, V1), (200, V2), (100, V3)):
        os.utime(paths[v], (now - age, now - age))
    assert KernelCache(NVRTC_COMPILER).resolve(V1, ARCH).origin == "disk"  # a hit makes V1 the most recent
    sizes = {e.entry: e.disk_bytes for e in cache.list_entries()}
    removed = cache.prune(sizes[V1.entry] + sizes[V3.entry])
    assert removed.entries == 1 and removed.freed_bytes == sizes[V2.entry]
    assert sorted(e.entry for e in cache.list_entries()) == sorted([V1.entry, V3.entry])
    assert KernelCache(NVRTC_COMPILER).resolve(V2, ARCH).origin == "compiled"


def test_prune_removes_entries_it_cannot_read(cache_env):
    cache = KernelCache(NVRTC_COMPILER)
    paths = {v: cache.resolve(v, ARCH).path for v in (V1, V2)}
    bad_meta = paths[V1].with_suffix(".json")
    bad_meta.write_text("{not json")
    bad_bytes = bad_meta.stat().st_size + paths[V1].stat().st_size
    assert [e.entry for e in cache.list_entries()] == [V2.entry]  # unreadable: not listed
    removed = cache.prune(1 << 30)  # under the budget, yet the unreadable entry goes
    assert removed.entries == 1 and removed.freed_bytes == bad_bytes
    assert not bad_meta.exists() and not paths[V1].exists() and paths[V2].exists()
    removed = cache.prune(0)
    assert removed.entries == 1 and removed.remaining_bytes == 0
    assert not any(cache_env.rglob("*.cubin"))
    # No empty arch or shard folders are left behind; the schema folder stays.
    schema = paths[V2].parents[2]
    assert schema.is_dir() and not any(schema.iterdir())
    assert KernelCache(NVRTC_COMPILER).resolve(V2, ARCH).origin == "compiled" and paths[V2].exists()


def test_store_recreates_a_folder_a_prune_removed(cache_env, monkeypatch):
    # Another process's prune may remove a shard folder between this one's mkdir and its write.
    cache = KernelCache(NVRTC_COMPILER)
    real_write = cache_mod._atomic_write
    raced = []

    def write_after_a_prune(path, data):
        if not raced:
            raced.append(path)
            path.parent.rmdir()
        real_write(path, data)

    monkeypatch.setattr(cache_mod, "_atomic_write", write_after_a_prune)
    resolved = cache.resolve(V1, ARCH)
    assert raced and resolved.origin == "compiled" and resolved.path.exists()
    assert KernelCache(NVRTC_COMPILER).resolve(V1, ARCH).origin == "disk"


def test_size_cap_from_environment(cache_env, monkeypatch):
    monkeypatch.setenv(config.ENV_CACHE_MAX_BYTES, "12K")
    cache = KernelCache(NVRTC_COMPILER)
    assert cache.max_bytes == 12 * 1024
    for v in (V1, V2, V3):
        cache.resolve(v, ARCH)
    assert sum(e.disk_bytes for e in cache.list_entries()) <= 12 * 1024
    assert cache.list_entries()  # the newest survives


def test_clear(cache_env):
    cache = KernelCache(NVRTC_COMPILER)
    cache.resolve(V1, ARCH)
    cache.resolve(V2, ARCH)
    removed = cache.clear()
    assert removed.entries == 2 and removed.freed_bytes > 0
    assert cache.list_entries() == []
    assert cache.resolve(V1, ARCH).origin == "compiled"  # memory was cleared too


def test_clear_removes_entries_only(cache_env):
    """Files in the writable root that are not entries (someone else's) stay."""
    cache = KernelCache(NVRTC_COMPILER)
    cache.resolve(V1, ARCH)
    schema = cache_env / f"v{config.CACHE_SCHEMA}"
    mine = [schema / "sub" / "mine.txt", schema / "sm_90a" / "ab" / "notes.json"]
    for path in mine:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    mine.append(cache_env / f"v{config.CACHE_SCHEMA + 1}" / "photo.jpg")  # not a layout of ours
    mine[-1].parent.mkdir()
    mine[-1].write_text("x")
    removed = cache.clear()
    assert removed.entries == 1 and removed.freed_bytes > 1
    assert cache.list_entries() == [] and all(path.read_text() == "x" for path in mine)


def test_default_cache_follows_environment(tmp_path, monkeypatch):
    first = default_cache(NVRTC_COMPILER)
    assert default_cache(NVRTC_COMPILER) is first
    monkeypatch.setenv(config.ENV_CACHE_DIR, str(tmp_path / "other"))
    second = default_cache(NVRTC_COMPILER)
    assert second is not first and second.root == tmp_path / "other"


@pytest.mark.parametrize("text, size", [("500M", 500 << 20), ("2G", 2 << 30), ("1.5GiB", 3 << 29),
                                        ("4096", 4096), ("12k", 12 << 10), ("3 MB", 3 << 20)])
def test_parse_size(text, size):
    assert config.parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "M", "-1G", "2Q", "1e3"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="500M"):
        config.parse_size(bad)


@pytest.mark.parametrize("bad", ["-1G", " -5M"])
def test_parse_size_says_a_negative_size_is_negative(bad):
    with pytest.raises(ValueError, match="--max-size: .* is negative"):
        config.parse_size(bad, what="--max-size")


@pytest.mark.parametrize("bad", ["9" * 400, "9" * 306 + "T"])
def test_parse_size_says_an_infinite_size_is_too_large(bad):
    with pytest.raises(ValueError, match="--max-size: .* is too large; a size must be a finite number of bytes"):
        config.parse_size(bad, what="--max-size")


@pytest.mark.parametrize("size, text", [(1023, "1023 B"), (5000, "4.9 KiB"), (3 << 30, "3.0 GiB"), (5 << 40, "5.0 TiB"),
                                        (3 << 50, "3.0 PiB"), (2 << 60, "2.0 EiB"), (2048 << 60, "2048.0 EiB")])
def test_format_size(size, text):
    assert config.format_size(size) == text


@pytest.mark.parametrize("size", [5000, 3 << 30, 5 << 40, 3 << 50, 2 << 60])
def test_what_format_size_prints_parses_back(size):
    text = config.format_size(size)
    assert abs(config.parse_size(text.replace(" ", "")) - size) <= size / 100


def test_cap_smaller_than_a_kernel_warns_and_keeps_it_in_memory(cache_env, monkeypatch):
    monkeypatch.setattr(cache_mod, "_warned", set())
    monkeypatch.setenv(config.ENV_CACHE_MAX_BYTES, "10")
    cache = KernelCache(NVRTC_COMPILER)
    with pytest.warns(RuntimeWarning, match="holds no kernel"):
        first = cache.resolve(V1, ARCH)
    assert first.origin == "compiled" and first.path is None and not cache.list_entries()
    assert cache.resolve(V1, ARCH).origin == "memory" and cache.compiles == 1
