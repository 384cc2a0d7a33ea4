"""Where a kernel's warps stall, from Nsight Compute's per-instruction source page:

    ncu --set full --import-source yes -k regex:ds_topk_stream -s 2 -c 1 -o prof \\
        python tools/profile_case.py 4096 131072 512
    ncu -i prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python tools/ncu_stalls.py prof.csv                      # reasons, then the top instructions
    python tools/ncu_stalls.py prof.csv --dis kernel.dis     # by source line instead
    python tools/ncu_stalls.py prof.csv --per 1048576        # by executions per unit of work
    python tools/ncu_stalls.py prof.csv --by-count --dis kernel.dis   # what each loop costs

--dis takes `nvdisasm -g -c` of the kernel's cubin (the kernel cache's .cubin for that
variant): its line markers map each instruction to a source file and line. --per N groups the
instructions by how often each ran against N (for example rows x blocks x warps: what runs once
a block, what runs in the selects, what runs once a row). --by-count groups the instructions
that ran equally often (to three significant digits): a loop body's instructions all run as
many times as the loop, so each group is one loop or straight run of code, with what it cost in
warp instructions and the source files it comes from (with --dis). Shares are of all warp stall
samples, or of all instructions executed where said. No GPU needed; prints tables."""

from __future__ import annotations

import argparse
import collections
import csv
import re
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def fail(message: str) -> None:
    sys.exit(f"tools/ncu_stalls.py: {message}")


def read_text(path: Path) -> str:
    if not path.is_file():
        fail(f"{path} is not a file")
    try:
        return path.read_text()
    except UnicodeDecodeError:
        fail(f"{path} is not text (pass the CSV export or nvdisasm's output, not a report or cubin)")


def read_source_page(path: Path) -> tuple[list[str], list[dict]]:
    """(stall reason columns, rows) of an `ncu --page source --csv --print-source sass` file."""
    lines = read_text(path).splitlines()
    # A "Kernel Name" line comes first; the header is the first line naming the samples column.
    start = next((i for i, line in enumerate(lines) if SAMPLES in line), None)
    if start is None:
        fail(f"{path} has no {SAMPLES!r} column; export it with "
             "ncu -i REPORT --page source --csv --print-source sass")
    rows = list(csv.DictReader(lines[start:]))
    for row in rows:
        for column in (SAMPLES, EXECUTED):
            if not re.fullmatch(r"[\d,]*", row.get(column) or ""):
                fail(f"{path}: {column!r} holds {row.get(column)!r}, not a count")
        if not re.fullmatch(r"0x[0-9a-fA-F]+", row.get("Address") or ""):
            fail(f"{path}: an address {row.get('Address')!r} is not hexadecimal")
    reasons = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h] if rows else []
    return reasons, rows


def count(row: dict, column: str) -> int:
    return int((row.get(column) or "0").replace(",", "") or 0)


def source_lines(path: Path) -> dict[int, str]:
    """Instruction offset -> "file:line" from `nvdisasm -g -c` output."""
    where, current = {}, None
    for line in read_text(path).splitlines():
        marker = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if marker:
            current = f"{Path(marker.group(1)).name}:{marker.group(2)}"
            continue
        offset = re.match(r"\s*/\*([0-9a-f]{4,})\*/", line)
        if offset and current:
            where[int(offset.group(1), 16)] = current
    if not where:
        fail(f"{path} maps no instruction to a source line (use nvdisasm -g -c on a cubin built with line info)")
    return where


def count_key(executed: int) -> int:
    """``executed`` to three significant digits: the instructions of one loop body share it."""
    return round(executed, 3 - len(str(executed)))


def per_class(executed: int, per: int) -> str:
    if executed == 0:
        return "never"
    ratio = executed / per
    for bound, name in ((0.05, "< 0.05"), (0.5, "0.05 - 0.5"), (1.5, "0.5 - 1.5")):
        if ratio < bound:
            return name
    return ">= 1.5"


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path, help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--dis", type=Path, help="nvdisasm -g -c output of the same cubin: group by source line")
    parser.add_argument("--per", type=positive, help="group by executions per this many units of work")
    parser.add_argument("--by-count", action="store_true",
                        help="group the instructions that ran equally often: what each loop costs")
    parser.add_argument("--top", type=positive, default=20, help="rows of the last tables (default 20)")
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    reasons, rows = read_source_page(args.csv)
    total = sum(count(r, SAMPLES) for r in rows)
    if not total:
        fail(f"{args.csv} holds no warp stall samples (profile with --set full)")
    console = Console()

    by_reason = collections.Counter({r[len("stall_"):]: sum(count(row, r) for row in rows) for r in reasons})
    table = Table("reason", "samples", "share", title=f"{args.csv.name}: {total} warp stall samples")
    for reason, n in by_reason.most_common(10):
        table.add_row(reason, str(n), f"{100 * n / total:.1f}%")
    console.print(table)

    def top_reasons(group: list[dict]) -> str:
        c = collections.Counter({r[len("stall_"):]: sum(count(row, r) for row in group) for r in reasons})
        return ", ".join(f"{name} {n}" for name, n in c.most_common(2) if n)

    if args.per:
        groups = collections.defaultdict(list)
        for row in rows:
            groups[per_class(count(row, EXECUTED), args.per)].append(row)
        table = Table("runs per unit", "samples", "share", "warp instructions", "top reasons",
                      title=f"by executions per {args.per}")
        for name, group in sorted(groups.items(), key=lambda kv: -sum(count(r, SAMPLES) for r in kv[1])):
            n = sum(count(r, SAMPLES) for r in group)
            table.add_row(name, str(n), f"{100 * n / total:.1f}%", str(sum(count(r, EXECUTED) for r in group)),
                          top_reasons(group))
        console.print(table)

    where = source_lines(args.dis) if args.dis else {}
    base = int(rows[0]["Address"], 16)

    def source(row: dict) -> str:
        return where.get(int(row["Address"], 16) - base, "?")

    if args.by_count:
        executed = sum(count(r, EXECUTED) for r in rows) or 1
        groups = collections.defaultdict(list)
        for row in rows:
            if count(row, EXECUTED):
                groups[count_key(count(row, EXECUTED))].append(row)
        table = Table("runs", "instructions", "warp instructions", "of all", "samples", "share",
                      *(["source files"] if where else []), title="by execution count (loops)")
        ranked = sorted(groups.items(), key=lambda kv: -kv[0] * len(kv[1]))
        for runs, group in ranked[: args.top]:
            n = sum(count(r, SAMPLES) for r in group)
            warp = sum(count(r, EXECUTED) for r in group)
            files = collections.Counter(source(r).split(":")[0] for r in group)
            table.add_row(str(runs), str(len(group)), str(warp), f"{100 * warp / executed:.1f}%", str(n),
                          f"{100 * n / total:.1f}%",
                          *([", ".join(f"{f} {c}" for f, c in files.most_common(3))] if where else []))
        console.print(table)

    if args.dis:
        groups = collections.defaultdict(list)
        for row in rows:
            groups[source(row)].append(row)
        table = Table("source line", "samples", "share", "top reasons", title="by source line")
        ranked = sorted(groups.items(), key=lambda kv: -sum(count(r, SAMPLES) for r in kv[1]))
        for name, group in ranked[: args.top]:
            n = sum(count(r, SAMPLES) for r in group)
            table.add_row(name, str(n), f"{100 * n / total:.1f}%", top_reasons(group))
    else:
        table = Table("address", "instruction", "samples", "share", "executed", "top reasons", title="by instruction")
        for row in sorted(rows, key=lambda r: -count(r, SAMPLES))[: args.top]:
            n = count(row, SAMPLES)
            table.add_row(row["Address"][-6:], row["Source"].strip()[:48], str(n), f"{100 * n / total:.1f}%",
                          str(count(row, EXECUTED)), top_reasons([row]))
    console.print(table)


if __name__ == "__main__":
    main()
