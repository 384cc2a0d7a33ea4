"""Registers, spill stores and loads (bytes a thread) and stack frame of every kernel variant,
from ptxas through NVRTC (``--ptxas-options=-v``), for one arch and one source tree. No GPU
needed. A kernel change can add spills to loops it does not touch (the streaming kernel's batch
variants run at 64 registers a thread, four CTAs an SM), so compare a branch with main before
timing it:

    python tools/ptxas_usage.py --json main.json
    git archive BRANCH deepselect_rt kernels_cu | tar -x -C /tmp/b
    python tools/ptxas_usage.py --tree /tmp/b --against main.json

Prints a table: every variant, or with --against those whose figures differ. A source holding
several entry points reports each; the figures are listed in the log's order."""

import argparse
import inspect
import json
import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="source tree whose kernels to compile (default: this checkout)")
parser.add_argument("--arch", default="sm_90a", help="GPU architecture (default sm_90a)")
parser.add_argument("--only", default="", help="only variants whose name contains one of these, comma-separated")
parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles (default: CPUs)")
parser.add_argument("--json", type=Path, help="write {variant: {registers, spill_stores, spill_loads, stack}} here")
parser.add_argument("--against", type=Path, help="a JSON of an earlier run: show only what differs from it")
args = parser.parse_args()
# A tree without the package would silently compile whichever deepselect_rt is installed.
if not (args.tree / "deepselect_rt" / "__init__.py").is_file():
    parser.error(f"--tree {args.tree}: no deepselect_rt/__init__.py there (give a source tree, e.g. a git archive)")
if args.against and not args.against.is_file():
    parser.error(f"--against {args.against}: no such file (give the --json of an earlier run)")
if args.jobs < 1:
    parser.error(f"--jobs {args.jobs}: give at least 1")
sys.path.insert(0, str(args.tree.resolve()))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from deepselect_rt.cuda import nvrtc, variants  # noqa: E402
from deepselect_rt.errors import BackendUnavailableError  # noqa: E402

if "extra_options" not in inspect.signature(nvrtc.compile_cubin).parameters:
    parser.error(f"--tree {args.tree}: its compile_cubin takes no extra_options (the tree predates this tool; "
                 "rebase it on main)")

FIELDS = ("registers", "spill_stores", "spill_loads", "stack")
_USED = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_STACK = re.compile(r"(\d+) bytes stack frame")


def usage(variant) -> dict:
    """The ptxas figures of one variant: each field a list, one entry per kernel in the log."""
    log = nvrtc.compile_cubin(variant, nvrtc.normalise_arch(args.arch), args.tree / "kernels_cu",
                              ("--ptxas-options=-v",)).log
    spills = _SPILLS.findall(log)
    return {"registers": [int(n) for n in _USED.findall(log)], "spill_stores": [int(s) for s, _ in spills],
            "spill_loads": [int(l) for _, l in spills], "stack": [int(n) for n in _STACK.findall(log)]}


def main() -> None:
    try:
        arch = nvrtc.normalise_arch(args.arch)
    except ValueError as exc:
        sys.exit(f"tools/ptxas_usage.py: {exc}")
    chosen = [v for v in variants.default_variants(arch)
              if not args.only or any(part in v.entry for part in args.only.split(","))]
    if not chosen:
        sys.exit(f"tools/ptxas_usage.py: no variant for {arch} matches --only {args.only!r}")
    console = Console()
    try:
        with console.status(f"compiling {len(chosen)} variants for {arch}"), \
                ProcessPoolExecutor(min(args.jobs, len(chosen)), mp_context=multiprocessing.get_context("spawn")) as pool:
            found = dict(zip((v.entry for v in chosen), pool.map(usage, chosen)))
    except BackendUnavailableError as exc:
        sys.exit(f"tools/ptxas_usage.py: {exc}")
    before = json.loads(args.against.read_text()) if args.against else {}
    table = Table(title=f"ptxas usage for {arch}, kernels of {args.tree}" +
                  (f" (differences from {args.against.name})" if before else ""))
    table.add_column("variant", overflow="fold")
    for field in FIELDS:
        table.add_column(field.replace("_", " "), justify="right")

    def cell(now, old):
        text = ", ".join(map(str, now)) or "-"
        return text if old is None or old == now else f"{', '.join(map(str, old)) or '-'} -> {text}"

    for name, got in found.items():
        old = before.get(name)
        if before and old == got:
            continue
        table.add_row(name, *(cell(got[f], old and old[f]) for f in FIELDS))
    console.print(table if table.rows else f"no differences from {args.against}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
