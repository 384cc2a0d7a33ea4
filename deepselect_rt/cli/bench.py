"""``deepselect-rt bench``: the standard grid of docs/performance.md (or ``--quick``, filtered, or
``--real`` inputs) on the GPU against torch.topk and jax.lax.top_k, as a table, a JSON record and
a plot; ``--from-json`` redraws a saved run without a GPU. The timing itself is ``deepselect_rt.bench``'s.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..bench import compare
from ..errors import BackendUnavailableError
from .console import split_values


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="time topk against torch.topk (and jax.lax.top_k, under jax.jit with ours) on the GPU",
        description="Benchmark by docs/performance.md: CUDA events, cold L2, median of 30 calls, "
                    "peers on the same inputs in the same run. Without options: the standard grid "
                    "(several minutes on an H200). Needs a GPU and torch with CUDA, except "
                    "--from-json.")
    grid = p.add_argument_group("cases")
    grid.add_argument("--quick", action="store_true", help="six representative shapes of the grid")
    grid.add_argument("--real", action="store_true",
                      help="the shipped real inputs (indexer bf16 with causal end, sampler fp32 "
                           "logits) tiled to a few batch sizes, instead of the grid")
    grid.add_argument("--dtype", action="append", metavar="DTYPE",
                      help="only these input dtypes (bfloat16, float32, float16; comma-separated or repeated)")
    grid.add_argument("--rows", action="append", metavar="N", help="only these row counts")
    grid.add_argument("--width", action="append", metavar="N", help="only these widths (e.g. 131072 or 128K)")
    grid.add_argument("--k", action="append", metavar="K", help="only these k")
    grid.add_argument("--dist", action="append", metavar="NAME",
                      help="input distribution(s) instead of randn (see deepselect_rt.bench.distributions)")
    grid.add_argument("--host", action="store_true",
                      help="also measure host time per call: ours (defaults, sentinel, caller buffers, CuPy, JAX, "
                           "under jax.jit), torch.topk, jax.jit(jax.lax.top_k), and the floor of any Python call "
                           "(one kernel launch, with and without two torch.empty)")
    p.add_argument("--json", metavar="FILE", help="write the results (with date, GPU, driver, commit)")
    p.add_argument("--plot", metavar="FILE.png", help="draw TB/s against width, one panel per row count")
    p.add_argument("--from-json", metavar="FILE", help="print (and --plot) a saved run; no GPU needed")
    p.add_argument("--against", metavar="FILE",
                   help="compare with a saved baseline run (e.g. of the previous version, on the same GPU): "
                        "each shared case's time new / baseline beside torch.topk's (what the machine alone "
                        f"moved); exit 1 if a case is over {compare.SLOWER:g}x the baseline")
    p.set_defaults(handler=_bench)


def _positive_ints(values, option: str, parse=int) -> list[int]:
    out = []
    for text in split_values(values):
        try:
            n = parse(text)
        except ValueError:
            raise ValueError(f"{option} {text!r}: expected a positive integer") from None
        if n < 1:
            raise ValueError(f"{option} {text!r}: must be >= 1")
        out.append(n)
    return out


def _width(text: str) -> int:
    from ..jit import env

    return env.parse_size(text, what="--width")


def _cases(args):
    """The cases the options ask for. Raises ValueError for bad values or an empty selection."""
    from ..bench import distributions, grid
    from ..dtypes import INPUT_DTYPES

    dtypes = split_values(args.dtype)
    for d in dtypes:
        if d not in INPUT_DTYPES:
            raise ValueError(f"--dtype {d!r}: use one of {', '.join(INPUT_DTYPES)}")
    dists = split_values(args.dist)
    for d in dists:
        if d not in distributions.NAMES:
            raise ValueError(f"--dist {d!r}: use one of {', '.join(distributions.NAMES)}")
    if args.quick and args.real:
        raise ValueError("--quick and --real pick different cases; pass one")
    base = grid.real_grid() if args.real else grid.standard_grid(quick=args.quick)
    cases = grid.select(base, dtypes=dtypes, rows=_positive_ints(args.rows, "--rows"),
                         widths=_positive_ints(args.width, "--width", _width),
                         ks=_positive_ints(args.k, "--k"), dists=dists)
    if not cases:
        def values(attr):
            return ", ".join(str(v) for v in sorted({getattr(c, attr) for c in base}))
        raise ValueError(f"no case matches the filters; this set has dtypes {values('dtype')}; "
                         f"rows {values('rows')}; widths {values('width')}; k {values('k')}")
    return cases


def _check_outputs(args) -> None:
    for option, value in (("--json", args.json), ("--plot", args.plot)):
        if value and not Path(value).expanduser().resolve().parent.is_dir():
            raise ValueError(f"{option} {value}: folder {Path(value).parent} does not exist")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise BackendUnavailableError("--plot needs matplotlib: pip install 'deepselect-rt[bench]'")
    if args.plot:
        from matplotlib.figure import Figure

        formats = Figure().canvas.get_supported_filetypes()
        suffix = Path(args.plot).suffix.lstrip(".").lower()
        if suffix not in formats:
            raise ValueError(f"--plot {args.plot}: the format comes from the suffix; use one of "
                             f"{', '.join('.' + f for f in sorted(formats))}")


def _tbs(tbs: float) -> str:
    """Three significant digits: the few-row shapes move kilobytes, 0.00 TB/s at two decimals."""
    return f"{tbs:.3g}"


def _bench(args, out, err) -> int:
    from ..bench import grid, timing

    if args.from_json:
        given = [o for o in ("quick", "real", "dtype", "rows", "width", "k", "dist", "host", "json")
                 if getattr(args, o)]
        if given:
            raise ValueError(f"--from-json shows a saved run; it takes only --plot and --against "
                             f"(got --{given[0]})")
        _check_outputs(args)
        results, host, meta = grid.load_json(_saved(args.from_json, "--from-json"))
        baseline = _baseline(args)
        _report(out, results, host, meta, args.plot)
        return _compared(out, results, meta, baseline) if baseline else 0

    cases = _cases(args)
    _check_outputs(args)
    baseline = _baseline(args)
    timing.require_gpu("deepselect-rt bench", " `deepselect-rt bench --from-json FILE [--plot FILE.png]` "
                      "shows a saved run without one.")
    rc, results, meta = _run(args, cases, out, err)
    return max(rc, _compared(out, results, meta, baseline)) if baseline and results else rc


def _saved(path: str, option: str) -> Path:
    found = Path(path).expanduser()
    if found.is_dir():
        raise ValueError(f"{option} {path!r} is a folder; name a file written by deepselect-rt bench --json")
    if not found.is_file():
        raise ValueError(f"{option} {path!r}: no such file")
    return found


def _baseline(args):
    """The --against run as load_json's (results, host, meta), or None without --against."""
    from ..bench import grid

    return grid.load_json(_saved(args.against, "--against")) if args.against else None


def _compared(out, results, meta, baseline) -> int:
    """Prints the comparison of ``results`` (with ``meta``) against ``baseline`` (load_json's
    triple); 1 when a case is slower (compare.slower) or none is shared, else 0."""
    from rich.markup import escape
    from rich.table import Table

    old, _, old_meta = baseline
    changes, only_new, only_old = compare.pair(results, old)
    if not changes:
        out.print("no case is in both runs: nothing to compare", markup=False)
        return 1
    gpus = {m.get("gpu") for m in (meta, old_meta)}
    title = "against the baseline run" + "".join(f"\n{label}: {escape(_where(m) or 'not recorded')}"
                                                 for label, m in (("new", meta), ("baseline", old_meta)))
    table = Table("case", "ours us", "baseline us", "new / baseline", "torch.topk new / baseline", title=title)
    for c in sorted(changes, key=lambda c: -c.ratio):
        table.add_row(c.case.label() + (" (graph)" if c.graph else ""), f"{c.ours_new:.1f}", f"{c.ours_old:.1f}",
                      f"{c.ratio:.3f}", f"{c.torch_ratio:.3f}")
    out.print(table)
    if None not in gpus and len(gpus) > 1:
        out.print(f"the runs are on different GPUs ({' and '.join(sorted(gpus))}): their times compare the GPUs "
                  "as much as the code; compare two runs on one GPU", markup=False)
    for what, cases in (("only in the new run", only_new), ("only in the baseline", only_old)):
        if cases:
            out.print(f"{len(cases)} case(s) {what}, not compared", markup=False)
    worse = compare.slower(changes)
    out.print(f"{len(worse)} of {len(changes)} case(s) over {compare.SLOWER:g}x the baseline's time"
              + (f"; the slowest: {worse[0].case.label()} at {worse[0].ratio:.3f}x" if worse else ""), markup=False)
    return 1 if worse else 0


def _run(args, cases, out, err) -> tuple[int, list, dict]:
    """Times ``cases``: (exit code, results, the run's meta)."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..bench import grid, timing

    jax_peer = timing.jax_available()
    meta = grid.run_meta()
    err.print(f"{len(cases)} case(s) on {meta['gpu']}; peers: {grid.TORCH}"
              + (f", {grid.JAX}, {grid.JAX_OURS}" if jax_peer else f" ({grid.JAX}: no JAX GPU backend here)"),
              markup=False)
    host = timing.host_overhead() if args.host else None
    results, failed = [], []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        bar = progress.add_task("benchmarking", total=len(cases))
        for case in cases:
            progress.update(bar, description=case.label())
            try:
                results.append(timing.run_case(case, jax_peer=jax_peer))
            except Exception as exc:  # one failed shape (e.g. out of memory) is reported, the run goes on
                failed.append(case)
                err.print(f"[red]failed[/] {escape(case.label())}: {escape(f'{type(exc).__name__}: {exc}')}",
                          highlight=False)
            progress.advance(bar)
    if args.json:
        grid.save_json(Path(args.json).expanduser(), results, host, meta)
    _report(out, results, host, meta, args.plot)
    if args.json:
        out.print(f"results written to {args.json}", markup=False)
    if failed:
        err.print(f"{len(failed)} of {len(cases)} case(s) failed", highlight=False)
    return (1 if failed or not results else 0), results, meta


def _where(meta: dict) -> str:
    """The run's GPU, driver, date and commit, as its meta records them."""
    return ", ".join(str(meta[k]) for k in ("gpu", "driver", "date", "commit") if meta.get(k))


def _report(out, results, host, meta, plot_path) -> None:
    """Print the results table (and host overhead), draw the plot when asked."""
    from rich.markup import escape
    from rich.table import Table

    from ..bench import grid

    where = escape(_where(meta))
    peers = list(dict.fromkeys(name for r in results for name in r.peers))
    graphs = any(r.ours_graph_us is not None for r in results)
    table = Table(title="deepselect-rt vs " + ", ".join([grid.TORCH, *peers])
                  + f" (GPU us: median of {grid.ITERS}, cold L2)" + (f"\n{where}" if where else ""))
    table.add_column("case")
    for name in ("ours us", "TB/s", "torch us", "speedup", *(f"{p} us" for p in peers),
                 *(("ours graph us", "torch graph us") if graphs else ())):
        table.add_column(name, justify="right")
    for r in results:
        row = [r.case.label(), f"{r.ours_us:.1f}", _tbs(r.ours_tbs), f"{r.torch_us:.1f}", f"{r.speedup:.2f}x"]
        row += [f"{r.peers[p]:.1f}" if p in r.peers else "-" for p in peers]
        if graphs:
            row += ["-" if v is None else f"{v:.1f}" for v in (r.ours_graph_us, r.torch_graph_us)]
        table.add_row(*row)
    out.print(table)
    jax_columns = [p for p in (grid.JAX, grid.JAX_OURS) if p in peers]
    if jax_columns:
        out.print(f"{' and '.join(jax_columns)}: wall time per blocking call of a jax.jit function (JAX runs on "
                  "its own stream), so it includes JAX's dispatch; int32 indices", markup=False)
    for r in results:
        for name, why in r.peer_errors.items():
            out.print(f"{name} failed on {r.case.label()}: {why}", markup=False)
    if host is not None and host.by_call:
        table = Table("call", "host us per call", title=f"host time per call ({host.shape}, {host.calls} calls)")
        for label, us in host.by_call.items():
            table.add_row(label, f"{us:.1f}")
        out.print(table)
    elif host is not None:
        out.print(f"host overhead per call ({host.shape}, {host.calls} calls, outputs preallocated): "
                  f"ours {host.ours_us:.1f} us, torch.topk {host.torch_us:.1f} us", markup=False)
    if plot_path and results:
        from ..bench import plot

        out.print(f"plot written to {plot.plot(results, Path(plot_path).expanduser(), meta)}",
                  markup=False)


__all__ = ["register"]
