"""``deepselect-rt warmup``: compile the default kernel set ahead of time, with or without a GPU."""

from __future__ import annotations

import time

from .console import compile_progress, split_values, variant_column


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "warmup", help="compile the kernel set ahead of time",
        description="Compile the default kernel variants with NVRTC into the cache. With --arch "
                    "no GPU or driver is needed; without it the visible GPUs' archs are used.")
    p.add_argument("--arch", help="comma-separated archs, e.g. sm_90a,sm_100a; a compute capability (9.0, "
                                  "sm_90) maps as on a device (sm_90 -> sm_90a), native asks the GPU; "
                                  "compute_80/86/89: PTX for DEEPSELECT_RT_ARCH")
    p.add_argument("--npu-arch", help="comma-separated Ascend NPU archs: dav-2201 (Atlas A2/A3), "
                                      "dav-3510 (Ascend 950); needs CANN's aclrtc or bisheng")
    p.add_argument("--dtype", action="append", metavar="DTYPE",
                   help="only variants for these input dtypes (comma-separated or repeated)")
    p.add_argument("--k", action="append", metavar="K",
                   help="only the variants the plan picks for these k values: each k's smallest "
                        "streaming bucket, plus the k-free kernels (comma-separated or repeated)")
    p.add_argument("--jobs", type=int, default=None,
                   help="parallel compiler processes (default: CPU count)")
    p.add_argument("--into", metavar="DIR",
                   help="fill DIR as a cache root (e.g. the wheel's cache/ folder)")
    p.set_defaults(handler=_warmup)


def _warmup(args, out, err) -> int:
    from rich.markup import escape
    from rich.table import Table

    from ..checks import INT32_MAX
    from ..cuda.arch import resolve_archs
    from ..dtypes import INPUT_DTYPES
    from ..jit import env, warmup
    from .environment import checked_settings

    checked_settings()
    dtypes = split_values(args.dtype)
    for d in dtypes:
        if d not in INPUT_DTYPES:
            raise ValueError(f"--dtype {d!r}: use one of {', '.join(INPUT_DTYPES)}")
    if args.dtype is not None and not dtypes:
        raise ValueError(f"--dtype {args.dtype[-1]!r}: name at least one of {', '.join(INPUT_DTYPES)}")
    ks = []
    for k in split_values(args.k):
        try:
            ks.append(int(k))
        except ValueError:
            raise ValueError(f"--k {k!r}: expected an integer") from None
    if args.k is not None and not ks:
        raise ValueError(f"--k {args.k[-1]!r}: name at least one k")
    for k in ks:
        if not 1 <= k <= INT32_MAX:  # topk's own limit
            raise ValueError(f"--k {k}: k must be in [1, 2**31 - 1]")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be >= 1")

    archs = resolve_archs(args.arch) if args.arch or not args.npu_arch else []
    tasks = cuda_tasks(archs, dtypes=dtypes or None, ks=ks or None)
    if args.npu_arch:
        tasks += npu_tasks(args.npu_arch, dtypes=dtypes or None)
        archs = list(dict.fromkeys(t.arch for t in tasks))
    if not tasks:
        raise ValueError("no kernel variant matches --dtype/--k")
    root = warmup.check_target(args.into)
    err.print(f"warming up {len(tasks)} kernel(s) for {', '.join(archs)} into {root}",
              markup=False)

    start = time.perf_counter()
    with compile_progress(err) as progress:
        bar = progress.add_task("compiling", total=len(tasks))

        def done(outcome) -> None:
            progress.update(bar, advance=1,
                            description=f"{outcome.task.arch} {outcome.task.variant.entry}")

        outcomes = warmup.run(tasks, jobs=args.jobs, into=args.into, on_done=done)
    elapsed = time.perf_counter() - start

    table = Table(variant_column(), "arch", "result", "compile s", "size", title="warmup")
    for o in outcomes:
        table.add_row(o.task.variant.entry, o.task.arch, o.origin,
                      f"{o.seconds:.2f}" if o.origin == "compiled" else "-",
                      env.format_size(o.size) if o.size else "-")
    out.print(table)
    failed = [o for o in outcomes if o.failed]
    compiled = sum(o.origin == "compiled" for o in outcomes)
    out.print(f"{compiled} compiled, {len(outcomes) - compiled - len(failed)} already cached, "
              f"{len(failed)} failed in {elapsed:.1f} s")
    for o in failed:
        err.print(f"[red]error[/]: {o.task.variant.entry} for {o.task.arch}: {escape(o.error)}",
                  highlight=False)
        if o.log:
            err.print(o.log, markup=False, highlight=False)
    return 1 if failed else 0


def cuda_tasks(archs: list[str], *, dtypes=None, ks=None) -> list:
    """Warmup tasks for the default CUDA variants on ``archs`` (only ``dtypes`` and ``ks`` when
    given)."""
    from ..cuda.nvrtc import NVRTC_COMPILER
    from ..cuda.variants import default_variants, filter_variants
    from ..jit.warmup import Task

    return [Task(v, a, NVRTC_COMPILER) for a in archs
            for v in filter_variants(default_variants(a), dtypes=dtypes, ks=ks)]


def npu_tasks(spec: str, *, dtypes=None) -> list:
    """Warmup tasks for the Ascend kernels on the NPU archs of ``spec`` ("dav-2201,dav-3510"),
    only ``dtypes`` when given. Raises ValueError for an unknown or empty arch list."""
    from ..ascend import variants as npu
    from ..ascend.loader import ASCEND_COMPILER
    from ..jit.warmup import Task

    archs = list(dict.fromkeys(npu.normalise_arch(a) for a in spec.split(",") if a.strip()))
    if not archs:
        raise ValueError(f"--npu-arch {spec!r} names no architecture")
    return [Task(v, a, ASCEND_COMPILER) for a in archs for v in npu.default_variants(dtypes)]
