"""``deepselect-rt``: the command line (info, warmup, cache, check, bench).

Each subcommand is a ``register(subparsers)`` function that adds its parser and sets
``handler=fn`` with ``fn(args, out: Console, err: Console) -> int`` (the exit code). To add one,
write those two functions in your own module and list ``"module:register"`` in ``COMMANDS``;
heavy imports belong inside the handler so that ``--help`` stays fast.

Exit codes: 0 success, 1 the work failed (a compile error, a bad cache entry, no GPU or NVRTC),
2 bad usage (an unknown arch, dtype or size). Ctrl-C: ``main`` raises KeyboardInterrupt, and
the command (``run``) ends by SIGINT, which a shell shows as 130.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings

from .console import console, own_usage

INTERRUPTED = 130  # a shell's code for a command ended by SIGINT

COMMANDS = (
    "deepselect_rt.cli.info:register",
    "deepselect_rt.cli.warmup:register",
    "deepselect_rt.cli.cache:register",
    "deepselect_rt.cli.check:register",
    "deepselect_rt.cli.bench:register",
)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand of ``COMMANDS`` registered."""
    parser = argparse.ArgumentParser(
        prog="deepselect-rt", description="Exact top-k kernels compiled at run time with NVRTC.")
    from ..jit.key import package_version

    parser.add_argument("--version", action="version", version=f"deepselect-rt {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for spec in COMMANDS:
        module_name, function = spec.split(":")
        getattr(importlib.import_module(module_name), function)(subparsers)
    own_usage(subparsers)
    return parser


def main(argv=None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    from rich.markup import escape

    from ..errors import BackendUnavailableError, CompileError

    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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


def run() -> None:
    """The ``deepselect-rt`` command: ``main``'s exit code. After Ctrl-C (a KeyboardInterrupt
    from anywhere, the imports included) one line, "interrupted", and the process ends by
    SIGINT, as a shell expects of an interrupted command (a loop over commands stops)."""
    try:
        code = main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = INTERRUPTED  # reached only where SIGINT is blocked
    sys.exit(code)


if __name__ == "__main__":
    run()
