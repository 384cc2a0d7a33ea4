"""`deepselect-rt info / warmup / cache` on a CPU-only machine, against a private tmp cache."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="needs the cu13 extra (cuda-bindings, NVRTC)")

import deepselect_rt  # noqa: E402
from deepselect_rt.cli import main as cli  # noqa: E402
from deepselect_rt.cli.console import compile_progress  # noqa: E402
from deepselect_rt.jit import env as config  # noqa: E402
from deepselect_rt.jit import env as resources  # noqa: E402
from deepselect_rt.jit import warmup  # noqa: E402
from deepselect_rt.cuda.nvrtc import NVRTC_COMPILER  # noqa: E402
from deepselect_rt.jit.cache import KernelCache, compile_count  # noqa: E402
from deepselect_rt.cuda import arch as module  # noqa: E402
from deepselect_rt.cuda import nvrtc, variants  # noqa: E402
from deepselect_rt.cuda.variants import PROBE, default_variants
from deepselect_rt.jit.spec import KernelSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
V2 = KernelSpec("probe", threads=128)


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(config.ENV_CACHE_DIR, str(root))
    for name in set(config.ENV_NAMES) - {config.ENV_CACHE_DIR}:
        monkeypatch.delenv(name, raising=False)
    return root


def run_cli(*args, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items()}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), full.get("PYTHONPATH")]))
    full.update(env)
    return subprocess.run([sys.executable, "-m", "deepselect_rt.cli", *args], env=full,
                          capture_output=True, text=True, timeout=600)


def main(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_info_runs_without_gpu(cache_env):
    result = run_cli("info")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "backend: " in out and "NVRTC: " in out and "kernel cache" in out
    assert str(cache_env) in out
    if not module.probe()[0]:
        assert "backend: none" in out


@pytest.mark.parametrize("command", [["info"], ["cache", "list"]])
def test_a_cache_path_that_is_not_a_folder_is_named(capsys, cache_env, monkeypatch, tmp_path, command):
    monkeypatch.setenv("DEEPSELECT_RT_CACHE_PATH", str(tmp_path / "mistyped"))
    rc, out, _ = main(capsys, *command)
    assert rc == 0 and f"{tmp_path / 'mistyped'} is not a folder" in out.replace("\n", "")


@pytest.mark.parametrize("command", [["info"], ["cache", "list"], ["cache", "verify"]])
def test_reading_commands_create_no_cache_folder(capsys, cache_env, command):
    rc, out, _ = main(capsys, *command)
    assert rc == 0 and not cache_env.exists()


def test_info_looks_kernels_up_without_creating_the_cache_folder(capsys, cache_env, monkeypatch, tmp_path):
    """A read-only layer with entries makes info look each default variant up in every layer."""
    baked = tmp_path / "baked"
    KernelCache(NVRTC_COMPILER, baked, read_only=[]).resolve(PROBE, "sm_90a")
    monkeypatch.setenv(config.ENV_CACHE_PATH, str(baked))
    rc, out, _ = main(capsys, "info")
    assert rc == 0 and "sm_90a" in out and not cache_env.exists()


def test_a_dangling_link_as_cache_root_is_not_writable(capsys, cache_env, monkeypatch, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    monkeypatch.setenv(config.ENV_CACHE_DIR, str(link))
    rc, out, _ = main(capsys, "cache", "list")
    assert rc == 0 and f"user: {link} (not writable)" in out.replace("\n", "")


def test_cache_list_tells_writable_roots_without_creating_them(capsys, cache_env, monkeypatch, tmp_path):
    rc, out, _ = main(capsys, "cache", "list")
    assert rc == 0 and f"user: {cache_env}\n" in out and not cache_env.exists()
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv(config.ENV_CACHE_DIR, str(afile / "cache"))
    rc, out, _ = main(capsys, "cache", "list")
    assert rc == 0 and f"user: {afile / 'cache'} (not writable)" in out.replace("\n", "")


@pytest.mark.parametrize("name, value", [(config.ENV_ARCH, "garbage"), (config.ENV_ARCH, "native"),
                                         (config.ENV_CACHE_MAX_BYTES, "garbage"), (config.ENV_LOCK_TIMEOUT, "nan")])
@pytest.mark.parametrize("command", [["info"], ["warmup", "--arch", "sm_80", "--dtype", "float32", "--k", "8"]])
def test_a_malformed_variable_is_one_error_before_any_output(capsys, monkeypatch, name, value, command):
    monkeypatch.setenv(name, value)
    rc, out, err = main(capsys, *command)
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"error: {name}")


def test_info_lists_the_variables_set(capsys, cache_env, monkeypatch):
    monkeypatch.setenv(config.ENV_ARCH, "compute_80")
    rc, out, _ = main(capsys, "info")
    assert rc == 0 and f"environment: {config.ENV_CACHE_DIR}={cache_env}, {config.ENV_ARCH}=compute_80" in out


def test_a_relative_cache_dir_is_made_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEEPSELECT_RT_CACHE_DIR", "relative/dir")
    assert config.writable_cache_root() == tmp_path / "relative" / "dir"


def test_info_shows_cached_variants(capsys, cache_env):
    KernelCache(NVRTC_COMPILER).resolve(PROBE, "sm_90a")
    rc, out, _ = main(capsys, "info")
    assert rc == 0
    assert PROBE.entry in out and "sm_90a" in out and "user" in out


def test_info_counts_kernels_another_nvrtc_built(capsys, cache_env, monkeypatch):
    """A kernel cached by another NVRTC version is a miss for this one: the table shows "-" and
    a line says which version built how many."""
    KernelCache(NVRTC_COMPILER).resolve(PROBE, "sm_90a")
    built = ".".join(map(str, nvrtc.nvrtc_version()))
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (99, 1))
    rc, out, _ = main(capsys, "info")
    assert rc == 0
    line = out[out.index("cached kernel(s) of these archs"):].replace("\n", " ")
    assert f"built by nvrtc {built}, not the nvrtc 99.1 in use" in line
    assert out[:out.index("cached kernel(s) of these archs")].rstrip().endswith("1")
    row = next(r for r in out.splitlines() if PROBE.entry in r)
    assert "-" in row.split(PROBE.entry, 1)[1] and "user" not in row


def test_cache_commands(capsys, cache_env):
    cache = KernelCache(NVRTC_COMPILER)
    cache.resolve(PROBE, "sm_90a")
    bad = cache.resolve(V2, "sm_80").path

    rc, out, _ = main(capsys, "cache", "list")
    assert rc == 0 and "2 cached kernel(s)" in out
    assert PROBE.entry in out and V2.entry in out and "sm_80" in out
    assert ".".join(map(str, nvrtc.nvrtc_version()[:2])) in out  # the nvrtc column

    rc, out, _ = main(capsys, "cache", "verify")
    assert rc == 0 and "checked 2 entries: all intact" in out

    bad.write_bytes(bad.read_bytes()[:100])
    rc, out, _ = main(capsys, "cache", "verify")
    assert rc == 1 and "truncated" in out and bad.name[:12] in out
    assert "cache verify --fix` deletes them" in out  # the way to repair
    rc, out, _ = main(capsys, "cache", "verify", "--fix")
    assert rc == 1 and "deleted" in out
    rc, out, _ = main(capsys, "cache", "verify")
    assert rc == 0 and "checked 1 entry: all intact" in out

    rc, out, _ = main(capsys, "cache", "prune", "--max-size", "1G")
    assert rc == 0 and "removed 0 entries" in out
    rc, out, _ = main(capsys, "cache", "prune", "--max-size", "1")
    assert rc == 0 and "removed 1 entry" in out
    KernelCache(NVRTC_COMPILER).resolve(PROBE, "sm_90a")
    rc, out, _ = main(capsys, "cache", "clear")
    assert rc == 0 and "removed 1 entry" in out
    assert KernelCache(NVRTC_COMPILER).list_entries() == []


def test_cache_list_and_info_count_the_files_they_leave_out(capsys, cache_env):
    """Metadata that cannot be read and cubins without metadata are not entries the table can
    show; a last line counts them and names the command that says what is wrong."""
    cache = KernelCache(NVRTC_COMPILER)
    cache.resolve(PROBE, "sm_90a")
    rc, out, _ = main(capsys, "cache", "list")
    assert rc == 0 and "not readable" not in out
    cache.resolve(V2, "sm_80").path.with_suffix(".json").write_text("{not json")
    cache.resolve(V2, "sm_90a").path.with_suffix(".json").unlink()
    rc, out, _ = main(capsys, "cache", "list")
    assert rc == 0 and "1 cached kernel(s)" in out
    last = out.rstrip().splitlines()[-1]
    assert last == "2 files are not readable entries (not listed); run `deepselect-rt cache verify`"
    rc, out, _ = main(capsys, "info")
    assert rc == 0 and "\n2 files are not readable entries (not listed)" in out


@pytest.mark.parametrize("args, message", [
    (("warmup", "--arch", "sm_99"), "unsupported GPU architecture 'sm_99'"),
    (("warmup", "--arch", "sm_100f"), "unsupported GPU architecture 'sm_100f'"),
    (("warmup", "--arch", "hopper"), "unknown GPU architecture 'hopper'"),
    (("warmup", "--arch", "compute_75"), "compute_80, compute_86, compute_89"),
    (("warmup", "--arch", "sm_70"), "(compute capability 7.0); use one of sm_80, sm_86, sm_89, sm_90a, sm_100a, sm_103a, "
                                    "sm_120, compute_80, compute_86, compute_89"),
    (("warmup", "--arch", "sm_90a", "--dtype", "float64"), "--dtype 'float64'"),
    (("warmup", "--arch", "sm_90a", "--k", "8,many"), "--k 'many': expected an integer"),
    (("warmup", "--arch", "sm_90a", "--k", ""), "name at least one k"),
    (("warmup", "--arch", "sm_90a", "--k", "8,0"), "--k 0: k must be in [1, 2**31 - 1]"),
    (("warmup", "--arch", "sm_90a", "--k", "99999999999"), "--k 99999999999: k must be in [1, 2**31 - 1]"),
    (("warmup", "--arch", "sm_90a", "--dtype", ","), "name at least one of"),
    (("warmup", "--arch", "sm_90a", "--jobs", "0"), "--jobs 0"),
    (("cache", "prune", "--max-size", "lots"), "--max-size: cannot parse 'lots'"),
])
def test_bad_usage_exits_2_with_a_clear_error(capsys, args, message):
    rc, _, err = main(capsys, *args)
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_warmup_without_arch_needs_a_gpu(capsys):
    if module.probe()[0]:
        pytest.skip("a GPU is visible: warmup without --arch would use it")
    rc, _, err = main(capsys, "warmup")
    # One line, though longer than the 200 columns piped output gets (it was wrapped in two).
    assert rc == 1 and "pass --arch" in err and len(err.strip().splitlines()) == 1


def test_warmup_into_unwritable_target_fails(capsys, tmp_path):
    target = tmp_path / "a-file"
    target.write_text("")
    rc, _, err = main(capsys, "warmup", "--arch", "sm_80", "--into", str(target))
    assert rc == 1 and "not writable" in err


def test_warmup_failure_prints_the_nvrtc_log(capsys, tmp_path, monkeypatch):
    broken = tmp_path / "kernels_cu"
    shutil.copytree(resources.cuda_source_dir(), broken)
    (broken / "probe.cu").write_text('extern "C" __global__ void DS_ENTRY() { undefined_name; }\n')
    monkeypatch.setattr(resources, "cuda_source_dir", lambda: broken)
    monkeypatch.setattr(variants, "default_variants", lambda arch=None: [PROBE, V2])
    rc, out, err = main(capsys, "warmup", "--arch", "sm_80", "--jobs", "1")
    assert rc == 1
    assert "2 failed" in out
    assert "undefined_name" in err and "error" in err and PROBE.entry in err


def test_warmup_filters(capsys, monkeypatch):
    seen = []
    monkeypatch.setattr(warmup, "run", lambda tasks, **kw: seen.extend(tasks) or [])
    rc, _, _ = main(capsys, "warmup", "--arch", "sm_90a,9.0,sm_80", "--dtype", "float32",
                    "--k", "1000")
    assert rc == 0
    assert {t.arch for t in seen} == {"sm_90a", "sm_80"}
    assert seen and all(t.variant.dtype in ("", "float32") for t in seen)
    assert {t.variant.kmax for t in seen} == {0, 1024}  # k = 1000: the 1024 bucket and the k-free kernels


@pytest.mark.parametrize("k", [2**31 - 1, 2**31])
def test_warmup_takes_the_k_values_topk_takes(capsys, monkeypatch, k):
    monkeypatch.setattr(warmup, "run", lambda tasks, **kw: [])
    rc, _, _ = main(capsys, "warmup", "--arch", "sm_90a", "--k", str(k))
    try:
        deepselect_rt.topk(np.zeros((0, 4), np.float32), k)  # no rows: checks k, allocates nothing
        topk_takes = True
    except ValueError:
        topk_takes = False
    assert rc == (0 if topk_takes else 2)


def test_warmup_table_wraps_variant_names_in_an_80_column_terminal(capsys, monkeypatch):
    # A terminal gets rich's own width: there the variant column once cut the names short
    # with an ellipsis. Each name must be whole, folded over lines of its cell.
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(warmup, "run", lambda tasks, **kw: [
        warmup.Outcome(t, "disk", 0.0, 1024) for t in tasks])
    rc, out, _ = main(capsys, "warmup", "--arch", "sm_90a", "--dtype", "bfloat16", "--k", "2048")
    assert rc == 0
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # a terminal's styles (bold, italic)
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    rows, cell = [], ""
    for line in out.splitlines():
        parts = line.split("│")
        if len(parts) < 3:
            continue
        if parts[2].strip() and cell:  # an arch in the row: a new variant begins
            rows.append(cell)
            cell = ""
        cell += parts[1].strip()
    rows.append(cell)
    names = [v.entry for v in default_variants("sm_90a") if v.dtype in ("", "bfloat16")
             and v.kmax in (0, 2048)]
    assert sorted(rows) == sorted(names)


def test_compile_progress_keeps_the_count_in_an_80_column_terminal():
    # The description (arch, then the variant just done) gives way, cut with an ellipsis; the
    # count and the elapsed time stay (a long name once pushed them out of the line).
    from rich.console import Console

    console = Console(width=80, record=True, force_terminal=False)
    progress = compile_progress(console)
    bar = progress.add_task("compiling", total=9)
    progress.update(bar, advance=2, description="sm_90a " + max((v.entry for v in default_variants("sm_90a")), key=len))
    console.print(progress.get_renderable())
    line = console.export_text().rstrip("\n")
    assert len(line) <= 80 and line.startswith("sm_90a ds_topk_") and "…" in line
    assert "2/9" in line and "0:00:0" in line


def test_warmup_into_then_cache_path_compiles_nothing(tmp_path, monkeypatch):
    baked = tmp_path / "baked"
    result = run_cli("warmup", "--arch", "sm_90a", "--into", str(baked))
    assert result.returncode == 0, result.stdout + result.stderr
    variants = default_variants("sm_90a")
    for v in variants:
        assert v.entry in result.stdout
    assert f"{len(variants)} compiled" in result.stdout
    # Only entries: this folder is what gets baked into a wheel or an image.
    assert [p.name for p in baked.iterdir()] == [f"v{config.CACHE_SCHEMA}"]
    assert {p.suffix for p in baked.rglob("*") if p.is_file()} == {".cubin", ".json"}

    monkeypatch.setenv(config.ENV_CACHE_PATH, str(baked))
    monkeypatch.setenv(config.ENV_CACHE_DIR, str(tmp_path / "empty"))
    before = compile_count()
    cache = KernelCache(NVRTC_COMPILER)
    for v in variants:
        found = cache.resolve(v, "sm_90a")
        assert found.origin == "disk" and found.path.is_relative_to(baked)
    assert compile_count() == before and cache.compiles == 0

    # A second warmup into the same folder finds everything already there.
    again = run_cli("warmup", "--arch", "sm_90a", "--into", str(baked), "--jobs", "1")
    assert again.returncode == 0 and f"0 compiled, {len(variants)} already cached" in again.stdout


def test_every_command_is_registered():
    help_text = cli.build_parser().format_help()
    for name in ("info", "warmup", "cache"):
        assert name in help_text
    for spec in cli.COMMANDS:  # "module:function" strings: other modules add theirs
        module_name, function = spec.split(":")
        assert callable(getattr(__import__(module_name, fromlist=[function]), function))


@pytest.mark.parametrize("command", [["cache", "clear"], ["cache", "prune", "--max-size", "0"]])
def test_cache_maintenance_on_unwritable_root_fails(command, tmp_path):
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        root = Path("/proc/1/deepselect-rt")  # root ignores permission bits; /proc refuses writes
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        root = ro / "cache"
    proc = run_cli(*command, DEEPSELECT_RT_CACHE_DIR=str(root))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not writable" in proc.stderr


def test_a_cache_dir_that_is_a_file_gets_clean_messages(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    verify = run_cli("cache", "verify", DEEPSELECT_RT_CACHE_DIR=str(afile))
    assert verify.returncode == 0 and "Traceback" not in verify.stderr
    # Reading the cache compiles nothing: no word of compiled kernels kept in memory only.
    assert "kept in memory" not in verify.stderr
    info = run_cli("info", DEEPSELECT_RT_CACHE_DIR=str(afile))
    assert info.returncode == 0 and "kept in memory" not in info.stderr
    warm = run_cli("warmup", "--arch", "sm_80", "--dtype", "float32", "--k", "8", "--into", str(afile))
    assert warm.returncode == 1 and "is not writable (Not a directory" in warm.stderr


@pytest.mark.parametrize("timeout", ["abc", "nan", "-1", "inf"])
def test_warmup_bad_lock_timeout_is_one_error(tmp_path, timeout):
    result = run_cli("warmup", "--arch", "sm_80", "--dtype", "float32", "--k", "8", "--into", str(tmp_path / "c"),
                     **{config.ENV_LOCK_TIMEOUT: timeout})
    assert result.returncode == 2
    assert result.stderr.count("DEEPSELECT_RT_LOCK_TIMEOUT") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "c" / "v1").exists() or not any((tmp_path / "c" / "v1").rglob("*.cubin"))


def test_warmup_without_a_lock_folder_warns_once(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    result = run_cli("warmup", "--arch", "sm_80", "--dtype", "float32", "--k", "8", "--jobs", "2",
                     "--into", str(tmp_path / "c"), **{config.ENV_LOCK_DIR: str(afile / "locks")})
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("cannot make the compile lock folder") == 1 and "DEEPSELECT_RT_LOCK_DIR" in result.stderr


def _start_warmup(root: Path) -> subprocess.Popen:
    """`warmup --jobs 2` of sm_90a's kernels into ``root``, in its own process group, once its
    first entry is written (its workers started)."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    # Python's own SIGINT handler first: a runner that started these tests in the background has
    # SIGINT ignored, which the command would inherit and honour.
    launch = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
              "runpy.run_module('deepselect_rt.cli', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", launch, "warmup", "--arch", "sm_90a", "--jobs", "2",
                             "--into", str(root)], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    for _ in range(3000):
        if proc.poll() is not None or any(root.rglob("*.cubin")):
            break
        time.sleep(0.1)
    if proc.poll() is not None:
        pytest.fail(f"warmup ended before any entry was written: {proc.communicate()[1]}")
    return proc


def _finish(proc: subprocess.Popen) -> str:
    """The stderr of ``proc`` once it ends (killed if it has not within two minutes)."""
    try:
        return proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.skipif(not Path(f"/proc/self/task/{os.getpid()}/children").exists(),
                    reason="finds the workers through Linux's /proc/PID/task/TID/children")
def test_a_killed_worker_fails_its_tasks_without_a_traceback(tmp_path):
    """A worker killed mid-compile (the OOM killer, say) fails the tasks it and the pool had left,
    each reported; the run still ends with its table and exit code 1."""
    root = tmp_path / "c"
    proc = _start_warmup(root)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    workers = [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert workers
    os.kill(workers[0], signal.SIGKILL)
    err = _finish(proc)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "the worker pool broke before this task finished" in err


def test_workers_end_with_a_killed_warmup(tmp_path):
    """SIGTERM to the command alone (`kill`, `docker stop`): its workers stop compiling and end
    too, instead of waiting forever on a queue no one reads."""
    proc = _start_warmup(tmp_path / "c")
    proc.terminate()
    _finish(proc)
    for _ in range(600):
        try:
            os.killpg(proc.pid, 0)  # the group's processes: the workers, the resource tracker
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("processes of the killed warmup were still running a minute later")
    assert proc.returncode == -signal.SIGTERM


@pytest.mark.parametrize("to", ["group", "command"])
def test_ctrl_c_stops_warmup_at_once_with_one_line(tmp_path, to):
    """SIGINT mid-warmup, to the process group (a terminal's Ctrl-C) or to the command alone:
    the workers end inside their compiles, so not every kernel is built; one line, no
    traceback, and the command ends by SIGINT (a shell's 130), so a loop running it stops."""
    root = tmp_path / "c"
    proc = _start_warmup(root)
    (os.killpg if to == "group" else os.kill)(proc.pid, signal.SIGINT)
    err = _finish(proc)
    assert proc.returncode == -signal.SIGINT and err.strip().endswith("interrupted") and "Traceback" not in err, err
    assert len(list(root.rglob("*.cubin"))) < len(default_variants("sm_90a"))


@pytest.mark.parametrize("command, usage", [(["info"], "info [-h]"),
                                            (["cache", "prune", "--max-size", "1G"], "cache prune [-h] --max-size SIZE"),
                                            (["cache", "clear"], "cache clear [-h]")])
def test_an_unknown_option_is_reported_with_its_commands_usage(capsys, command, usage):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command, "--x"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"usage: deepselect-rt {usage}" in err and "unrecognized arguments: --x" in err
