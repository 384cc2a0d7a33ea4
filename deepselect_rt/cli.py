"""``deepselect-rt``: the command line (info, warmup, cache; more subcommands plug in).

Each subcommand is a ``register(subparsers)`` function that adds its parser and sets
``handler=fn`` with ``fn(args, out: Console, err: Console) -> int`` (the exit code). To add one,
write those two functions in your own module and list ``"module:register"`` in ``COMMANDS``;
heavy imports belong inside the handler so that ``--help`` stays fast.

Exit codes: 0 success, 1 the work failed (a compile error, a bad cache entry, no GPU or NVRTC),
2 bad usage (an unknown arch, dtype or size).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import warnings

COMMANDS = (
    "deepselect_rt.cli:register_info",
    "deepselect_rt.cli:register_warmup",
    "deepselect_rt.cli:register_cache",
    "deepselect_rt.check:register",
    "deepselect_rt.bench_cli:register",
)


def compile_progress(console):
    """A transient progress bar for compiles (warmup, check) whose description, the arch and
    variant just done, gives way first in a narrow terminal, cut with an ellipsis: the count
    and the elapsed time stay readable (at 80 columns a long name pushed them out)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Column

    description = TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"))
    return Progress(description, BarColumn(bar_width=20), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, expand=True)


def _variant_column():
    """A table column of kernel variant names that wraps a name rather than cutting it short
    (in an 80-column terminal rich's default ellipsis cut the names, which users copy)."""
    from rich.table import Column

    return Column("variant", overflow="fold")


# -- info ---------------------------------------------------------------------------------------

def register_info(subparsers) -> None:
    p = subparsers.add_parser("info", help="backend, devices, NVRTC and the kernel cache",
                              description="Show the backend, the GPUs and their archs, NVRTC, the "
                                          "kernel cache layers, and which default "
                                          "kernel variants are cached for each arch.")
    p.set_defaults(handler=_info)


def _info(args, out, err) -> int:
    from .cache import default_cache
    from .cache_key import package_version
    from .cuda import module

    out.print(f"[bold]deepselect-rt[/] {package_version()}")
    devices, why_not = module.probe()
    out.print(f"backend: {'cuda' if devices else 'none'}" + ("" if devices else f" ({why_not})"),
              markup=False)
    if devices:
        _print_devices(out, devices)
    have_nvrtc = _print_compiler(out)
    cache = default_cache()
    entries = cache.list_entries()
    _print_layers(out, cache, entries)
    # The archs that matter: the devices' here, else whatever the cache holds (a build box).
    archs = list(dict.fromkeys(d.arch for d in devices if d.arch)) or \
        sorted({e.arch for e in entries})
    if not archs:
        hint = "`deepselect-rt warmup`" if devices else "`deepselect-rt warmup --arch sm_90a`; no GPU: name the arch"
        out.print(f"cached default variants: none (run {hint})")
    elif not have_nvrtc:
        out.print("cached default variants: unknown (cache keys need the NVRTC version)")
    else:
        _print_cached_variants(out, cache, archs, for_devices=bool(devices))
    return 0


def _print_devices(out, devices) -> None:
    from rich.table import Table

    from . import config

    table = Table("device", "name", "capability", "arch", "SMs", "smem/block (opt-in)",
                  "clusters", title="CUDA devices")
    for d in devices:
        table.add_row(str(d.ordinal), d.name, "%d.%d" % d.compute_capability,
                      d.arch or "unsupported", str(d.sm_count),
                      config.format_size(d.max_shared_memory_per_block_optin),
                      "yes" if d.cluster_launch else "no")
    out.print(table)


def _print_compiler(out) -> bool:
    """NVRTC and CUDA header lines; returns whether NVRTC is usable."""
    from .cuda import nvrtc
    from .errors import BackendUnavailableError

    try:
        version = ".".join(map(str, nvrtc.nvrtc_version()))
        path, found_via = nvrtc.nvrtc_library()
    except BackendUnavailableError as exc:
        out.print(f"NVRTC: unavailable: {exc}", markup=False)
        return False
    out.print(f"NVRTC: {version} ({path}, found via {found_via})", markup=False)
    return True


def _print_layers(out, cache, entries) -> None:
    from rich.table import Table

    from . import config

    table = Table("layer", "path", "writable", "entries", "size", title="kernel cache")
    table.columns[1].overflow = "fold"
    for layer in cache.layers():
        mine = [e for e in entries if e.layer == layer]
        table.add_row(layer.kind, str(layer.path), "yes" if layer.writable else "no",
                      str(len(mine)), config.format_size(sum(e.disk_bytes for e in mine)))
    out.print(table)
    _print_skipped_paths(out)


def _print_skipped_paths(out) -> None:
    # A mistyped DEEPSELECT_RT_CACHE_PATH part would otherwise just be absent from the layers.
    from . import config

    for path in config.extra_cache_paths():
        if not path.is_dir():
            out.print(f"{config.ENV_CACHE_PATH}: {path} is not a folder; skipped", markup=False)


def _print_cached_variants(out, cache, archs, *, for_devices: bool) -> None:
    """Which layer holds each default variant for each arch ("-": not cached; "n/a": not one of
    that arch's defaults, e.g. the workspace split where clusters exist)."""
    from rich.table import Table

    from .cuda.variants import default_variants

    layers = cache.layers()

    def where(found) -> str:
        if found is None:
            return "-"
        return next((layer.kind for layer in layers
                     if found.path is not None and layer.path in found.path.parents), "memory")

    title = "default variants cached " + ("for this machine's devices" if for_devices
                                          else "(archs present in the cache)")
    table = Table(_variant_column(), *archs, title=title)
    own = {arch: set(default_variants(arch)) for arch in archs}  # "n/a": never picked on that arch
    for variant in default_variants():
        table.add_row(variant.entry, *(where(cache.lookup(variant, arch)) if variant in own[arch] else "n/a"
                                       for arch in archs))
    out.print(table)


# -- warmup -------------------------------------------------------------------------------------

def register_warmup(subparsers) -> None:
    p = subparsers.add_parser(
        "warmup", help="compile the kernel set ahead of time",
        description="Compile the default kernel variants with NVRTC into the cache. With --arch "
                    "no GPU or driver is needed; without it the visible GPUs' archs are used.")
    p.add_argument("--arch", help="comma-separated archs, e.g. sm_90a,sm_100a; a compute capability (9.0, "
                                  "sm_90) maps as on a device (sm_90 -> sm_90a), native asks the GPU")
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


def split_values(values) -> list[str]:
    """The comma-separated items of a repeatable option ("--k 8,16 --k 32" -> ["8", "16", "32"])."""
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def _warmup(args, out, err) -> int:
    from rich.markup import escape
    from rich.table import Table

    from . import config, warmup
    from .api import INT32_MAX
    from .cuda.variants import INPUT_DTYPES

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

    archs = warmup.resolve_archs(args.arch) if args.arch or not args.npu_arch else []
    tasks = warmup.plan(archs, dtypes=dtypes or None, ks=ks or None)
    if args.npu_arch:
        tasks += warmup.plan_npu(args.npu_arch, dtypes=dtypes or None)
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

    table = Table(_variant_column(), "arch", "result", "compile s", "size", title="warmup")
    for o in outcomes:
        table.add_row(o.task.variant.entry, o.task.arch, o.origin,
                      f"{o.seconds:.2f}" if o.origin == "compiled" else "-",
                      config.format_size(o.size) if o.size else "-")
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


# -- cache --------------------------------------------------------------------------------------

def register_cache(subparsers) -> None:
    p = subparsers.add_parser("cache", help="list, verify, clear or prune the kernel cache")
    sub = p.add_subparsers(dest="cache_command", metavar="{list,verify,clear,prune}")
    sub.required = True
    sub.add_parser("list", help="entries of every cache layer").set_defaults(handler=_cache_list)
    verify = sub.add_parser("verify", help="re-hash every entry; exit 1 if any is bad")
    verify.add_argument("--fix", action="store_true",
                        help="delete bad entries from the writable cache (rebuilt on next use)")
    verify.set_defaults(handler=_cache_verify)
    sub.add_parser("clear", help="delete every entry of the writable cache").set_defaults(
        handler=_cache_clear)
    prune = sub.add_parser("prune", help="shrink the writable cache, least recently used first")
    prune.add_argument("--max-size", required=True, metavar="SIZE",
                       help="size to shrink to, e.g. 500M or 2G")
    prune.set_defaults(handler=_cache_prune)


def _cache_list(args, out, err) -> int:
    from rich.table import Column, Table

    from . import config
    from .cache import default_cache

    cache = default_cache()
    entries = cache.list_entries()
    # The key prefix starts the entry's file names (which `cache verify` prints): whole, never cut.
    table = Table("layer", "arch", "nvrtc", _variant_column(), "size", "last used",
                  Column("key", no_wrap=True, min_width=12),
                  title=f"{len(entries)} cached kernel(s)")
    for e in sorted(entries, key=lambda e: (e.layer.kind, e.arch, e.nvrtc, e.entry)):
        table.add_row(e.layer.kind, e.arch, e.nvrtc, e.entry, config.format_size(e.size),
                      time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)), e.key[:12])
    out.print(table)
    for layer in cache.layers():
        out.print(f"{layer.kind}: {layer.path}" + ("" if layer.writable or layer.kind != "user"
                                                   else " (not writable)"), markup=False)
    _print_skipped_paths(out)
    return 0


def _cache_verify(args, out, err) -> int:
    from rich.markup import escape

    from .cache import default_cache

    checked, problems = default_cache().verify(fix=args.fix)
    for p in problems:
        out.print(f"[red]bad[/] {escape(str(p.path))}: {escape(p.reason)}", highlight=False)
    verdict = "all intact" if not problems else f"{len(problems)} problem(s)"
    fixed = (" (bad files in the writable cache deleted; read-only layers left as they are)" if args.fix
             else "; `deepselect-rt cache verify --fix` deletes them, and the next use compiles them again")
    fixed = fixed if problems else ""
    out.print(f"checked {checked} entr{'y' if checked == 1 else 'ies'}: {verdict}{fixed}")
    return 1 if problems else 0


def _cache_clear(args, out, err) -> int:
    from . import config
    from .cache import default_cache

    cache = default_cache()
    if cache.writable_root() is None:
        err.print(f"error: the cache root {cache.root} is not writable ({cache.unwritable_reason}); "
                  f"nothing was removed", markup=False)
        return 1
    removed = cache.clear()
    out.print(f"removed {removed.entries} entr{'y' if removed.entries == 1 else 'ies'} "
              f"({config.format_size(removed.freed_bytes)}) from {cache.root}", markup=False)
    return 0


def _cache_prune(args, out, err) -> int:
    from . import config
    from .cache import default_cache

    limit = config.parse_size(args.max_size, what="--max-size")
    cache = default_cache()
    if cache.writable_root() is None:
        err.print(f"error: the cache root {cache.root} is not writable ({cache.unwritable_reason}); "
                  f"nothing was pruned", markup=False)
        return 1
    removed = cache.prune(limit)
    out.print(f"removed {removed.entries} entr{'y' if removed.entries == 1 else 'ies'}, freed "
              f"{config.format_size(removed.freed_bytes)}; "
              f"{config.format_size(removed.remaining_bytes)} left "
              f"(limit {config.format_size(limit)})")
    return 0


# -- entry point --------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand of ``COMMANDS`` registered."""
    parser = argparse.ArgumentParser(
        prog="deepselect-rt", description="Exact top-k kernels compiled at run time with NVRTC.")
    from .cache_key import package_version

    parser.add_argument("--version", action="version", version=f"deepselect-rt {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for spec in COMMANDS:
        module_name, function = spec.split(":")
        getattr(importlib.import_module(module_name), function)(subparsers)
    return parser


def console(stderr: bool = False):
    """A rich Console for the commands' output (and tools/'): a terminal's own width, or, piped,
    wide tables and unwrapped lines, since a log or a test wants whole kernel names and paths, not
    the 80-column ellipses rich gives a non-terminal, and an error on one line."""
    from rich.console import Console

    if (sys.stderr if stderr else sys.stdout).isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=200, soft_wrap=True)


def main(argv=None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    from rich.markup import escape

    from .errors import BackendUnavailableError, CompileError

    args = build_parser().parse_args(argv)
    out, err = console(), console(stderr=True)

    def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
        # One line per warning, like the errors; not Python's file:line and source echo.
        err.print(f"[yellow]warning[/]: {escape(str(message))}", highlight=False)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            return args.handler(args, out, err)
    except ValueError as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return 2
    except (BackendUnavailableError, CompileError, OSError) as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
