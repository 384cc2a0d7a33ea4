"""The benchmark figure: effective bandwidth (TB/s) against row width (log2 axis), one panel per
row count, one colour per implementation, one line style per k, one marker per kind of input;
shared y axis. Drawn with matplotlib's object API (no pyplot, so no display or global backend
state: the PNG is rendered by Agg). Needs ``pip install 'deepselect-rt[bench]'``.
"""

from __future__ import annotations

import math
from pathlib import Path

from .grid import JAX, JAX_OURS, OURS, TORCH, Result

COLOURS = {OURS: "#1f5fbf", TORCH: "#e07b00", JAX: "#2e9940", JAX_OURS: "#7a3db8"}
OTHER_COLOURS = ("#8e44ad", "#c0392b", "#7f8c8d")
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
# The H200's measured copy/read roof (performance.md).
H200_ROOF_TBS = 4.3


def _width_label(width: int) -> str:
    if width % (1 << 20) == 0:
        return f"{width >> 20}M"
    if width % (1 << 10) == 0:
        return f"{width >> 10}K"
    return str(width)


def plot(results: list[Result], path, meta: dict | None = None) -> Path:
    """Draw ``results`` into ``path`` (format from its suffix, e.g. .png); returns the path.

    meta: ``bench.run_meta()``-style dict; its gpu, date and commit go into the title, and an H200
    gets its 4.3 TB/s roof drawn. Raises ValueError when there is nothing to draw, ImportError
    without matplotlib.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    if not results:
        raise ValueError("no results to plot")
    meta = meta or {}
    row_counts = sorted({r.case.rows for r in results})
    impls = list(dict.fromkeys(name for r in results for name in r.times()))
    ks = sorted({r.case.k for r in results})
    flavours = sorted({r.case.flavour() for r in results})
    others = iter(OTHER_COLOURS * len(impls))
    colour = {name: COLOURS.get(name) or next(others) for name in impls}
    style = {k: LINE_STYLES[i % len(LINE_STYLES)] for i, k in enumerate(ks)}
    marker = {f: MARKERS[i % len(MARKERS)] for i, f in enumerate(flavours)}

    ncols = min(3, len(row_counts))
    nrows = math.ceil(len(row_counts) / ncols)
    fig = Figure(figsize=(4.6 * ncols, 3.5 * nrows + 1.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False).ravel()
    widths = sorted({r.case.width for r in results})
    lo, hi = math.floor(math.log2(widths[0])), math.ceil(math.log2(widths[-1]))
    ticks = [1 << e for e in range(lo, hi + 1)]
    roof = H200_ROOF_TBS if "H200" in str(meta.get("gpu", "")) else None

    for ax, rows in zip(axes, row_counts):
        series: dict[tuple, list] = {}
        for r in results:
            if r.case.rows != rows:
                continue
            for name, us in r.times().items():
                series.setdefault((name, r.case.k, r.case.flavour()), []).append((r.case.width, r.tbs(us)))
        for (name, k, flavour), points in sorted(series.items(), key=lambda s: impls.index(s[0][0])):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], color=colour[name], linestyle=style[k],
                    marker=marker[flavour], markersize=5, linewidth=1.6 if name == OURS else 1.2)
        if roof:
            ax.axhline(roof, color="0.6", linewidth=0.8, linestyle=(0, (4, 3)))
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [_width_label(t) for t in ticks])
        ax.set_xticks([], minor=True)
        ax.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)
        ax.set_title(f"{rows} row{'s' if rows > 1 else ''}", fontsize=10)
        ax.grid(True, which="major", color="0.9")
        ax.set_xlabel("row width (elements)")
    for ax in axes[::ncols]:
        ax.set_ylabel("effective bandwidth (TB/s)")
    for ax in axes[len(row_counts):]:
        ax.set_visible(False)
    axes[0].set_ylim(bottom=0, top=max(roof or 0, axes[0].get_ylim()[1]) * 1.05)

    fig.legend(handles=[Line2D([], [], color=colour[n], linewidth=2, label=n) for n in impls]
               + ([Line2D([], [], color="0.6", linestyle=(0, (4, 3)), label=f"H200 roof {roof} TB/s")] if roof else []),
               title="implementation", loc="outside lower left", fontsize=8, title_fontsize=8, frameon=False)
    fig.legend(handles=[Line2D([], [], color="0.3", linestyle=style[k], label=f"k = {k}") for k in ks],
               title="k (line style)", loc="outside lower center", ncols=min(4, len(ks)), fontsize=8,
               title_fontsize=8, frameon=False)
    fig.legend(handles=[Line2D([], [], color="0.3", linestyle="", marker=marker[f], label=f) for f in flavours],
               title="input (marker)", loc="outside lower right", ncols=min(2, len(flavours)), fontsize=8,
               title_fontsize=8, frameon=False)
    where = ", ".join(str(meta[key]) for key in ("gpu", "date", "commit") if meta.get(key))
    fig.suptitle("top-k effective bandwidth (bytes read + written / GPU time, cold L2)"
                 + (f"\n{where}" if where else ""), fontsize=11)
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path


__all__ = ["plot"]
