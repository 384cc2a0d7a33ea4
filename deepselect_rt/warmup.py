"""Ahead-of-time compilation of the kernel set into a cache root (``deepselect-rt warmup``).

Each (variant, arch) is one task; tasks run in worker processes (NVRTC compiles are CPU-bound and
single-threaded) that share the cache root through its per-key locks and atomic writes. With an
explicit arch list no GPU or driver is needed; ``--into DIR`` fills DIR as a cache root, which is
how the wheel's ``cache/`` folder and container images get their pre-built cubins.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from . import config
from .cache import KernelCache, default_cache
from .cuda import nvrtc
from .cuda.variants import Variant, default_variants, filter_variants
from .errors import BackendUnavailableError, CompileError


@dataclass(frozen=True)
class Task:
    """Build ``variant`` for ``arch`` (a normalised arch name)."""

    variant: Variant
    arch: str


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


def resolve_archs(spec: str | None) -> list[str]:
    """Arch names from "sm_90a,100a" (normalised, duplicates dropped, order kept).

    None means the archs of every visible GPU. Raises ValueError for an unknown arch,
    BackendUnavailableError when None is given and there is no GPU or driver.
    """
    if spec is None:
        from .cuda import module

        devices, why_not = module.probe()
        if not devices:
            raise BackendUnavailableError(
                f"no GPU to warm up for ({why_not or 'no CUDA device visible'}); pass --arch, "
                f"e.g. --arch {','.join(nvrtc.SUPPORTED_ARCHS)}, to compile without one")
        names = [module.device_arch(d.ordinal) for d in devices]
    else:
        names = [nvrtc.normalise_arch(part) for part in spec.split(",") if part.strip()]
        if not names:
            raise ValueError(f"--arch {spec!r} names no architecture")
    return list(dict.fromkeys(names))


def plan(archs: list[str], *, dtypes=None, ks=None) -> list[Task]:
    """Tasks for the default variants on ``archs`` (only ``dtypes`` and ``ks`` when given)."""
    return [Task(v, a) for a in archs for v in filter_variants(default_variants(a), dtypes=dtypes, ks=ks)]


def plan_npu(spec: str, *, dtypes=None) -> list[Task]:
    """Tasks for the Ascend kernels on the NPU archs of ``spec`` ("dav-2201,dav-3510"), only
    ``dtypes`` when given. Raises ValueError for an unknown or empty arch list."""
    from .ascend import variants as npu

    archs = list(dict.fromkeys(npu.normalise_arch(a) for a in spec.split(",") if a.strip()))
    if not archs:
        raise ValueError(f"--npu-arch {spec!r} names no architecture")
    return [Task(v, a) for a in archs for v in npu.default_variants(dtypes)]


def _is_npu(arch: str | None) -> bool:
    return arch is not None and arch.startswith("dav-")


def _cache_for(into: Path | None, arch: str | None = None) -> KernelCache:
    # --into fills exactly that root, so nothing else is searched: a kernel found in another
    # layer would otherwise be left out of it.
    if _is_npu(arch):
        from .ascend.kernel_cache import ascend_cache

        return ascend_cache(into)
    return KernelCache(into, read_only=[]) if into is not None else default_cache()


def _run_task(task: Task, into: Path | None) -> Outcome:
    """One task, in a worker process or inline; every failure becomes an Outcome."""
    try:
        resolved = _cache_for(into, task.arch).resolve(task.variant, task.arch)
    except CompileError as exc:
        return Outcome(task, "failed", error=str(exc).splitlines()[0], log=exc.log)
    except Exception as exc:  # reported per task; the run goes on with the others
        return Outcome(task, "failed", error=f"{type(exc).__name__}: {exc}")
    return Outcome(task, resolved.origin, resolved.seconds, len(resolved.cubin))


def check_target(into: Path | None) -> Path:
    """The root warmup writes to. Raises OSError when it is not writable (a warmup that keeps
    nothing would silently waste its work)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the memory-only warning; we raise instead
        cache = _cache_for(into)
        root = cache.writable_root()
    if root is None:
        raise OSError(f"cache root {cache.root} is not writable ({cache.unwritable_reason}); "
                      f"warmup would keep nothing")
    return root


def run(tasks: list[Task], *, jobs: int | None = None, into: Path | None = None,
        on_done=None) -> list[Outcome]:
    """Build ``tasks``; returns one Outcome per task, in task order.

    jobs: worker processes (default ``os.cpu_count()``; 1 runs inline). into: the cache root to
    fill (default: the user's cache with all its layers). on_done: called with each Outcome as it
    finishes (for progress display). Raises OSError when the target root is not writable,
    ValueError for a malformed DEEPSELECT_RT_LOCK_TIMEOUT, BackendUnavailableError when NVRTC
    (CUDA tasks) or CANN's aclrtc/bisheng (NPU tasks) is missing.
    """
    into = Path(into).expanduser() if into is not None else None
    check_target(into)
    config.lock_timeout()  # a malformed DEEPSELECT_RT_LOCK_TIMEOUT: one error, not one per task
    # A missing compiler fails once, here, rather than once per task.
    if any(not _is_npu(t.arch) for t in tasks):
        nvrtc.nvrtc_version()
    if any(_is_npu(t.arch) for t in tasks):
        from .ascend import probe

        probe.require_compiler()
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
        # spawn, not fork: a forked child would inherit locks and NVRTC state mid-use.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [pool.submit(_run_task, task, into) for task in tasks]
            for future in as_completed(futures):
                finish(future.result())
    return [outcomes[t] for t in tasks]


__all__ = ["Task", "Outcome", "resolve_archs", "plan", "plan_npu", "check_target", "run"]
