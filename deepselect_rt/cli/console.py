"""What every subcommand shares: the rich consoles, the compile progress bar, option parsing."""

from __future__ import annotations

import sys


def console(stderr: bool = False):
    """A rich Console for the commands' output (and tools/'): a terminal's own width, or, piped,
    wide tables and unwrapped lines, since a log or a test wants whole kernel names and paths, not
    the 80-column ellipses rich gives a non-terminal, and an error on one line."""
    from rich.console import Console

    if (sys.stderr if stderr else sys.stdout).isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=200, soft_wrap=True)


def compile_progress(console):
    """A transient progress bar for compiles (warmup, check) whose description, the arch and
    variant just done, gives way first in a narrow terminal, cut with an ellipsis: the count
    and the elapsed time stay readable (at 80 columns a long name pushed them out)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Column

    description = TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"))
    return Progress(description, BarColumn(bar_width=20), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, expand=True)


def variant_column():
    """A table column of kernel variant names that wraps a name rather than cutting it short
    (in an 80-column terminal rich's default ellipsis cut the names, which users copy)."""
    from rich.table import Column

    return Column("variant", overflow="fold")


def split_values(values) -> list[str]:
    """The comma-separated items of a repeatable option ("--k 8,16 --k 32" -> ["8", "16", "32"])."""
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def own_usage(subparsers) -> None:
    """Each command parser under ``subparsers`` records itself as ``command_parser``, so that
    ``main`` reports a bad option with that command's usage (a nested one's defaults win)."""
    for command_parser in subparsers.choices.values():
        command_parser.set_defaults(command_parser=command_parser)
