"""``deepselect-rt cache list|verify|clear|prune``: maintenance of the kernel cache."""

from __future__ import annotations

import time

from .console import own_usage, variant_column


def register(subparsers) -> None:
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
    own_usage(sub)


def _cache_list(args, out, err) -> int:
    from rich.table import Column, Table

    from ..jit import env
    from ..jit.cache import default_cache

    cache = default_cache()
    entries = cache.list_entries()
    # The key prefix starts the entry's file names (which `cache verify` prints): whole, never cut.
    table = Table("layer", "arch", "toolchain", variant_column(), "size", "last used",
                  Column("key", no_wrap=True, min_width=12),
                  title=f"{len(entries)} cached kernel(s)")
    for e in sorted(entries, key=lambda e: (e.layer.kind, e.arch, e.toolchain, e.entry)):
        table.add_row(e.layer.kind, e.arch, e.toolchain, e.entry, env.format_size(e.size),
                      time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)), e.key[:12])
    out.print(table)
    for layer in cache.layers():
        out.print(f"{layer.kind}: {layer.path}" + ("" if layer.writable or layer.kind != "user"
                                                   else " (not writable)"), markup=False)
    print_skipped_paths(out)
    print_unlisted(cache, entries, out)
    return 0


def print_unlisted(cache, entries, out) -> None:
    """One line counting the files of ``cache`` that are none of ``entries`` (list_entries'), if
    any: without it a table's count reads as the whole cache while bad entries sit on disk."""
    count = len(cache.unlisted_files(entries))
    if count:
        what = "1 file is not a readable entry" if count == 1 else f"{count} files are not readable entries"
        out.print(f"{what} (not listed); run `deepselect-rt cache verify`", markup=False)


def _cache_verify(args, out, err) -> int:
    from rich.markup import escape

    from ..jit.cache import default_cache

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
    from ..jit import env
    from ..jit.cache import default_cache

    cache = default_cache()
    if cache.writable_root() is None:
        err.print(f"error: the cache root {cache.root} is not writable ({cache.unwritable_reason}); "
                  f"nothing was removed", markup=False)
        return 1
    removed = cache.clear()
    out.print(f"removed {removed.entries} entr{'y' if removed.entries == 1 else 'ies'} "
              f"({env.format_size(removed.freed_bytes)}) from {cache.root}", markup=False)
    return 0


def _cache_prune(args, out, err) -> int:
    from ..jit import env
    from ..jit.cache import default_cache

    limit = env.parse_size(args.max_size, what="--max-size")
    cache = default_cache()
    if cache.writable_root() is None:
        err.print(f"error: the cache root {cache.root} is not writable ({cache.unwritable_reason}); "
                  f"nothing was pruned", markup=False)
        return 1
    removed = cache.prune(limit)
    out.print(f"removed {removed.entries} entr{'y' if removed.entries == 1 else 'ies'}, freed "
              f"{env.format_size(removed.freed_bytes)}; "
              f"{env.format_size(removed.remaining_bytes)} left "
              f"(limit {env.format_size(limit)})")
    return 0


def print_skipped_paths(out) -> None:
    # A mistyped DEEPSELECT_RT_CACHE_PATH part would otherwise just be absent from the layers.
    from ..jit import env

    for path in env.extra_cache_paths():
        if not path.is_dir():
            out.print(f"{env.ENV_CACHE_PATH}: {path} is not a folder; skipped", markup=False)
