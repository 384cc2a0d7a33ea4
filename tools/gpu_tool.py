"""The start of the GPU tools in tools/: ``--help`` from the tool's docstring and arguments, then
a one-line error instead of a traceback where no GPU, or no torch with CUDA, is usable (the
tools time with torch's CUDA events). Importing it puts the checkout first on ``sys.path``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deepselect_rt.bench import timing  # noqa: E402
from deepselect_rt.errors import BackendUnavailableError  # noqa: E402
from deepselect_rt.jit import env  # noqa: E402


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser whose help is the tool's docstring, as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def int_list(text: str) -> list[int]:
    """argparse type: comma-separated positive integers, each optionally with K or M (powers of
    1024, as ``deepselect-rt bench --width`` takes them): "32,64", "16K,1M"."""
    try:
        values = [env.parse_size(part.strip()) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers (K or M "
                                         "for powers of 1024, e.g. 16K,1M)")
    return values


def sampled_columns(width: int, vec: int, threads: int, pad: int = 0):
    """The columns of the 16-byte vectors (``vec`` elements each) that the streaming kernel's
    ``threads``-thread CTA samples for its first threshold in a row of ``width`` columns that
    starts 16-byte aligned: vector t * vectors // threads (kernels_cu/stream/stream_range.cuh); with
    ``pad``, that many vectors more on either side (rows that start unaligned sample vectors
    shifted by less than two). A NumPy array of column indices within the row."""
    import numpy as np

    starts = (np.arange(threads) * (width // vec) // threads)[:, None] * vec
    cols = (starts + np.arange(-pad * vec, (1 + pad) * vec)).ravel()
    return cols[(cols >= 0) & (cols < width)]


def start(name: str, args: argparse.ArgumentParser) -> argparse.Namespace:
    """Parses the command line, then exits with one line unless a GPU is usable."""
    parsed = args.parse_args()
    try:
        timing.require_gpu(name)
    except BackendUnavailableError as exc:
        sys.exit(str(exc))
    return parsed


if __name__ == "__main__":
    sys.exit("tools/gpu_tool.py is the shared start of the GPU tools in tools/, not a tool: run one of them")
