"""Registers, spill stores and loads (bytes a thread) and stack frame of every kernel variant,
from ptxas through NVRTC (``--ptxas-options=-v``), for one arch and one source tree. No GPU
needed. A kernel change can add spills to loops it does not touch (the streaming kernel's batch
variants run at 64 registers a thread, four CTAs an SM), so compare a branch with main before
timing it:

    python tools/ptxas_usage.py --json main.json
    git archive BRANCH deepselect_rt kernels_cu | tar -x -C /tmp/b
    python tools/ptxas_usage.py --tree /tmp/b --against main.json

Prints a table, a row a kernel (entry function): every one, or with --against those whose
figures differ, are new, or (without --only) are gone."""

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
parser.add_argument("--json", type=Path, help="write {kernel: {registers, spill_stores, spill_loads, stack}} here")
parser.add_argument("--against", type=Path, help="a JSON of an earlier run: show only what differs from it")
args = parser.parse_args()
# A tree without the package would silently compile whichever deepselect_rt is installed.
if not (args.tree / "deepselect_rt" / "__init__.py").is_file():
    parser.error(f"--tree {args.tree}: no deepselect_rt/__init__.py there (give a source tree, e.g. a git archive)")
if args.against and not args.against.is_file():
    parser.error(f"--against {args.against}: no such file (give the --json of an earlier run)")
if not (args.tree / "kernels_cu").is_dir():
    parser.error(f"--tree {args.tree}: no kernels_cu/ there (archive it with deepselect_rt)")
if args.jobs < 1:
    parser.error(f"--jobs {args.jobs}: give at least 1")
if args.json and not args.json.parent.is_dir():
    parser.error(f"--json {args.json}: no folder {args.json.parent}")
sys.path.insert(0, str(args.tree.resolve()))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from deepselect_rt.cuda import nvrtc, variants  # noqa: E402
from deepselect_rt.errors import BackendUnavailableError, CompileError  # noqa: E402

if "extra_options" not in inspect.signature(nvrtc.compile_cubin).parameters:
    parser.error(f"--tree {args.tree}: its compile_cubin takes no extra_options (the tree predates this tool; "
                 "rebase it on main)")

FIELDS = ("registers", "spill_stores", "spill_loads", "stack")
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)\s*\n.*?(\d+) bytes stack frame, (\d+) bytes spill stores, "
                         r"(\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")


def parse(log: str) -> dict:
    """{entry function: {field: int}} from a ptxas -v log: each entry's registers from the lines
    after its "Compiling entry function", its stack and spills from its own "Function
    properties" (a device function the compiler kept out of line reports its own, not listed)."""
    properties = {name: tuple(map(int, figures)) for name, *figures in _PROPERTIES.findall(log)}
    found = {}
    for block in re.split(r"(?=ptxas info\s*: Compiling entry function)", log):
        entry = _ENTRY.search(block)
        if entry:
            used = _USED.search(block)
            stack, stores, loads = properties.get(entry.group(1), (0, 0, 0))
            found[entry.group(1)] = {"registers": int(used.group(1)) if used else 0, "spill_stores": stores,
                                     "spill_loads": loads, "stack": stack}
    return found


def usage(variant) -> dict:
    """The ptxas figures of one variant's kernels (parse)."""
    return parse(nvrtc.compile_cubin(variant, nvrtc.normalise_arch(args.arch), args.tree / "kernels_cu",
                                     ("--ptxas-options=-v",)).log)


def earlier() -> dict:
    """--against's figures, checked before any compile."""
    if not args.against:
        return {}
    try:
        before = json.loads(args.against.read_text())
        if all(isinstance(got, dict) and set(got) == set(FIELDS) for got in before.values()):
            return before
    except (ValueError, AttributeError):
        pass
    parser.error(f"--against {args.against}: not a --json output of this tool")


def main() -> None:
    try:
        arch = nvrtc.normalise_arch(args.arch)
    except ValueError as exc:
        sys.exit(f"tools/ptxas_usage.py: {exc}")
    before = earlier()
    chosen = [v for v in variants.default_variants(arch)
              if not args.only or any(part in v.entry for part in args.only.split(","))]
    if not chosen:
        sys.exit(f"tools/ptxas_usage.py: no variant for {arch} matches --only {args.only!r}")
    console = Console()
    found = {}
    try:
        with console.status(f"compiling {len(chosen)} variants for {arch}"), \
                ProcessPoolExecutor(min(args.jobs, len(chosen)), mp_context=multiprocessing.get_context("spawn")) as pool:
            for kernels in pool.map(usage, chosen):
                found.update(kernels)
    except (BackendUnavailableError, CompileError) as exc:
        sys.exit(f"tools/ptxas_usage.py: {str(exc).splitlines()[0]}")
    table = Table(title=f"ptxas usage for {arch}, kernels of {args.tree}" +
                  (f" (differences from {args.against.name})" if before else ""))
    table.add_column("kernel", overflow="fold")
    for field in FIELDS:
        table.add_column(field.replace("_", " "), justify="right")
    for name, got in found.items():
        old = before.get(name)
        if before and old == got:
            continue
        cells = [str(got[f]) if old is None or old[f] == got[f] else f"{old[f]} -> {got[f]}" for f in FIELDS]
        table.add_row(name + (" (new)" if before and old is None else ""), *cells)
    gone = sorted(set(before) - set(found)) if not args.only else []
    for name in gone:
        table.add_row(f"{name} (gone)", *("-" for _ in FIELDS))
    console.print(table if table.rows else f"no differences from {args.against}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
