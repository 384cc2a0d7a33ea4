"""The ``dtype:rows:width:k`` shape argument of the timing tools in tools/ (argparse type). It
imports no deepselect_rt, so a tool that times another tree's package (ab_shapes.py --tree) can
use it before choosing which package to import."""

from __future__ import annotations

import argparse

DTYPES = ("bfloat16", "float16", "float32")


def shape(text: str) -> tuple[str, int, int, int]:
    """argparse type: ``dtype:rows:width:k`` (e.g. bfloat16:512:65536:512) as (dtype, rows,
    width, k)."""
    parts = text.split(":")
    if len(parts) != 4 or parts[0] not in DTYPES or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
        raise argparse.ArgumentTypeError(f"{text!r}: expected dtype:rows:width:k (e.g. bfloat16:512:65536:512)")
    return (parts[0], *(int(p) for p in parts[1:]))


if __name__ == "__main__":
    import sys

    sys.exit("tools/shape_arg.py is the shape argument of the timing tools in tools/, not a tool: run one of them")
