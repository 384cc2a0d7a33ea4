"""Ahead-of-time compilation of the kernel set into a cache root (``deepselect-rt warmup``).

Each (kernel spec, arch, compiler) is one task; tasks run in worker processes (NVRTC compiles
are CPU-bound and single-threaded) that share the cache root through its per-key locks and
atomic writes. With an explicit arch list no GPU or driver is needed (the backends say which
tasks an arch needs: ``cuda.variants.default_variants``, ``ascend.variants.default_variants``);
``--into DIR`` fills DIR as a cache root, which is how the wheel's ``cache/`` folder and
container images get their pre-built cubins.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompileError
from . import env
from .cache import LOCKLESS_WARNING, Compiler, KernelCache, default_cache
from .spec import KernelSpec


@dataclass(frozen=True)
class Task:
    """Build ``variant`` for ``arch`` (a normalised arch name) with ``compiler``."""

    variant: KernelSpec
    arch: str
    compiler: Compiler = field(compare=False)


@dataclass(frozen=True)
class Outcome:
    """The result of one task.

    origin: "compiled", "disk" or "memory" (already cached), or "failed". seconds: compile time
    (0.0 when cached). size: cubin bytes. error: one-line reason when failed, else "". log: the
    NVRTC log of a failed compile.
    """

    task: Task
    origin: str
    seconds: float = 0.0
    size: int = 0
    error: str = ""
    log: str = ""

    @property
    def failed(self) -> bool:
        return self.origin == "failed"


def _cache_for(into: Path | None, compiler: Compiler) -> KernelCache:
    # --into fills exactly that root, so nothing else is searched: a kernel found in another
    # layer would otherwise be left out of it.
    return KernelCache(compiler, into, read_only=[]) if into is not None else default_cache(compiler)


def _run_task(task: Task, into: Path | None) -> Outcome:
    """One task, in a worker process or inline; every failure becomes an Outcome."""
    try:
        resolved = _cache_for(into, task.compiler).resolve(task.variant, task.arch)
    except CompileError as exc:
        return Outcome(task, "failed", error=str(exc).splitlines()[0], log=exc.log)
    except Exception as exc:  # reported per task; the run goes on with the others
        return Outcome(task, "failed", error=f"{type(exc).__name__}: {exc}")
    return Outcome(task, resolved.origin, resolved.seconds, len(resolved.cubin))


def _worker_init(sigint_ignored: bool) -> None:
    # Ctrl-C reaches the workers too (one process group): the default action ends one at once,
    # even inside an NVRTC compile, where Python's handler would wait for the compile to end.
    # What it was writing is a temp file, never a half entry (the cache's atomic writes). A
    # parent that ignores SIGINT (a background job) has workers that ignore it too.
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by _sigint_deferred
    warnings.filterwarnings("ignore", message=LOCKLESS_WARNING)  # check_target said it once
    # A parent killed outright (SIGTERM, SIGKILL) never shuts the pool down: end with it rather
    # than compile on, then wait forever on a queue no one reads.
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()


def _exit_with(sentinel) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


@contextlib.contextmanager
def _sigint_deferred():
    """SIGINT held back while the pool starts its workers (in ``submit``), then delivered: the
    workers start with it blocked (a signal mask survives spawn's fork and exec) until
    _worker_init, since one interrupted while Python starts up prints a traceback; in the main
    thread a Ctrl-C meanwhile (which another thread may take) is recorded and raised on leaving,
    not midway through starting a worker."""
    pending = []
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    swap = previous is signal.default_int_handler
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    try:
        if swap:
            signal.signal(signal.SIGINT, lambda *_: pending.append(True))
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if swap:
            signal.signal(signal.SIGINT, previous)
    if pending:
        raise KeyboardInterrupt


def _result(future, task: Task) -> Outcome:
    try:
        return future.result()
    except BrokenProcessPool:  # a worker was killed (the OOM killer, a signal) or crashed
        return Outcome(task, "failed", error="the worker pool broke before this task finished (a worker "
                                             "was killed or ran out of memory)")


def _run_pool(tasks: list[Task], jobs: int, into: Path | None, finish) -> None:
    """``tasks`` over ``jobs`` spawned worker processes, each Outcome to ``finish`` as it comes.
    On KeyboardInterrupt the workers are terminated (compiles in flight would otherwise run to
    their end, and the queued tasks after them), then it is raised again."""
    # spawn, not fork: a forked child would inherit locks and NVRTC state mid-use.
    context = multiprocessing.get_context("spawn")
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init,
                             initargs=(ignored,)) as pool:
        others = set(multiprocessing.active_children())
        try:
            with _sigint_deferred():
                futures = {pool.submit(_run_task, task, into): task for task in tasks}
            for future in as_completed(futures):
                finish(_result(future, futures[future]))
        except KeyboardInterrupt:
            # A pool with a dead worker runs nothing more: its queued tasks fail, none start.
            # (Cancelling them here would race the pool's own thread failing them.)
            for worker in set(multiprocessing.active_children()) - others:
                worker.terminate()
            raise


def check_target(into: Path | None) -> Path:
    """The root warmup writes to. Raises OSError when it is not writable (a warmup that keeps
    nothing would silently waste its work)."""
    cache = KernelCache(None, into, read_only=[]) if into is not None else default_cache()
    root = cache.writable_root()  # warns here, once, where compiles cannot take locks
    if root is None:
        raise OSError(f"cache root {cache.root} is not writable ({cache.unwritable_reason}); "
                      f"warmup would keep nothing")
    return root


def run(tasks: list[Task], *, jobs: int | None = None, into: Path | None = None,
        on_done=None) -> list[Outcome]:
    """Build ``tasks``; returns one Outcome per task, in task order.

    jobs: worker processes (default ``os.cpu_count()``; 1 runs inline). into: the cache root to
    fill (default: the user's cache with all its layers). on_done: called with each Outcome as it
    finishes (for progress display). Ctrl-C (KeyboardInterrupt) stops the workers and starts no
    more tasks; entries already written stay. Raises OSError when the target root is not writable,
    ValueError for a malformed DEEPSELECT_RT_LOCK_TIMEOUT, BackendUnavailableError when a task's
    compiler is missing (``Compiler.require``).
    """
    into = Path(into).expanduser() if into is not None else None
    check_target(into)
    env.lock_timeout()  # a malformed DEEPSELECT_RT_LOCK_TIMEOUT: one error, not one per task
    # A missing compiler fails once, here, rather than once per task.
    for compiler in {t.compiler.name: t.compiler for t in tasks}.values():
        compiler.require()
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    outcomes: dict[Task, Outcome] = {}

    def finish(outcome: Outcome) -> None:
        outcomes[outcome.task] = outcome
        if on_done is not None:
            on_done(outcome)

    if jobs == 1:
        for task in tasks:
            finish(_run_task(task, into))
    else:
        _run_pool(tasks, jobs, into, finish)
    return [outcomes[t] for t in tasks]


__all__ = ["Task", "Outcome", "check_target", "run"]
