"""Bytes a step of deepselect_rt.distributed.topk against an all-gather of the rows: the tables of
docs/performance.md's section "Top-k across GPUs: bytes moved", as Markdown.

    python tools/dist_bytes.py

Byte counts, not measured times. Per rank and step, what its all-gather returns (its own share
included):

    top-k exchange   rows * k * world * (value bytes + index bytes)   (the candidates)
    all-gather       rows * width * value bytes                       (the whole rows)

The exchange moves fewer bytes while k < (width / world) * value / (value + index bytes).
"""

from __future__ import annotations

import argparse

# (name, value dtype, value bytes, index dtype, index bytes, width, row counts, ks)
SCENARIOS = [
    ("sampler", "fp32", 4, "int64", 8, 129280, (1, 512), (50, 512, 4096)),
    ("indexer", "bf16", 2, "int32", 4, 1 << 20, (1, 64), (2048,)),
]
WORLDS = (2, 4, 8)
BREAK_EVEN_WORLDS = range(2, 9)


def exchange_bytes(rows: int, k: int, world: int, value: int, index: int) -> int:
    return rows * k * world * (value + index)


def gather_bytes(rows: int, width: int, value: int) -> int:
    return rows * width * value


def size(n: int) -> str:
    for unit, scale in (("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} B"


def tables() -> str:
    lines = ["| scenario | k | world | top-k exchange, 1 row | all-gather, 1 row | rows | top-k exchange | "
             "all-gather | exchange / all-gather |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, vname, vb, iname, ib, width, row_counts, ks in SCENARIOS:
        label = f"{name}: {vname} x {width:,}, {iname} indices"
        rows = max(row_counts)
        for k in ks:
            for world in WORLDS:
                ex1, ga1 = exchange_bytes(1, k, world, vb, ib), gather_bytes(1, width, vb)
                lines.append(f"| {label} | {k} | {world} | {size(ex1)} | {size(ga1)} | {rows} | "
                             f"{size(ex1 * rows)} | {size(ga1 * rows)} | {ex1 / ga1:.1%} |")
    lines += ["", "| scenario | " + " | ".join(f"world {w}" for w in BREAK_EVEN_WORLDS) + " |",
              "|---|" + "---|" * len(BREAK_EVEN_WORLDS)]
    for name, vname, vb, iname, ib, width, *_ in SCENARIOS:
        # The largest k at which the exchange still moves fewer bytes than the all-gather.
        cells = [f"{(width * vb - 1) // (w * (vb + ib)):,}" for w in BREAK_EVEN_WORLDS]
        lines.append(f"| {name}: {vname} x {width:,}, {iname} indices | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    print(tables())


if __name__ == "__main__":
    main()
