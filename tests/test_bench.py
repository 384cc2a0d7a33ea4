"""`deepselect-rt bench`: options, the case sets, saved results and the plot (CPU), and the run
itself on a GPU machine (marker gpu)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deepselect_rt.bench import compare
from deepselect_rt.bench import grid as bench
from deepselect_rt.bench import samples as sample_data
from deepselect_rt.bench import timing
from deepselect_rt.cli import bench as bench_cli
from deepselect_rt.cli import main as cli
from deepselect_rt.cuda import arch as module

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def has_gpu() -> bool:
    return bool(module.probe()[0])


def run(*args, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["DEEPSELECT_RT_CACHE_DIR"] = str(tmp_path / "cache")
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=900)


def main(capsys, *args):
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def cases_for(*args):
    return bench_cli._cases(cli.build_parser().parse_args(["bench", *args]))


# -- graph timing, on a simulated GPU timeline ------------------------------------------------

class SimulatedGPU:
    """A stand-in for torch's CUDA events and graphs on one stream: work advances a clock; the
    flush's time grows with every flush (clocks drifting over a run), the top-k's stays fixed."""

    def __init__(self, flush_us, topk_us, drift_a_flush):
        self.now_ms, self.flushes, self.capturing = 0.0, 0, None
        self.flush_us, self.topk_us, self.drift = flush_us, topk_us, drift_a_flush
        gpu = self

        class Event:
            def __init__(self, enable_timing):
                self.at_ms = None

            def record(self):
                self.at_ms = gpu.now_ms

            def synchronize(self):
                pass

            def elapsed_time(self, stop):
                return stop.at_ms - self.at_ms

        class CUDAGraph:
            def __init__(self):
                self.work = []

            def replay(self):
                for step in self.work:
                    step()

        class Capture:
            def __init__(self, graph):
                self.graph = graph

            def __enter__(self):
                gpu.capturing = self.graph

            def __exit__(self, *exc):
                gpu.capturing = None

        self.cuda = type("cuda", (), {"Event": Event, "CUDAGraph": CUDAGraph, "graph": Capture,
                                      "synchronize": staticmethod(lambda: None)})

    def run(self, step):
        if self.capturing is not None:
            self.capturing.work.append(step)
        else:
            step()

    def flush_step(self):
        self.flushes += 1
        self.now_ms += self.flush_us * (1 + self.drift * self.flushes) / 1e3

    def topk_step(self):
        self.now_ms += self.topk_us / 1e3

    def zero_(self):
        self.run(self.flush_step)

    def topk(self):
        self.run(self.topk_step)


def test_graph_time_follows_the_topk_while_the_flush_drifts():
    # A 130 us flush that slows 0.2% a flush (~20% over this run) under an 8 us top-k: two
    # medians taken one after the other would differ by ~13 us of drift alone.
    gpu = SimulatedGPU(flush_us=130.0, topk_us=8.0, drift_a_flush=0.002)
    us = timing.time_graph(gpu, gpu.topk, gpu, 50)
    assert abs(us - 8.0) < 0.5, us


def test_graph_time_without_drift_is_the_topk():
    gpu = SimulatedGPU(flush_us=130.0, topk_us=3.25, drift_a_flush=0.0)
    assert timing.time_graph(gpu, gpu.topk, gpu, 9) == pytest.approx(3.25)


# -- cases --------------------------------------------------------------------------------------

def test_standard_grid():
    grid = bench.standard_grid()
    assert all(c.rows * c.width * 2 <= bench.MAX_INPUT_BYTES for c in grid if c.dtype == "bfloat16")
    assert {c.scenario for c in grid} == {"indexer", "sampler"}
    quick = bench.standard_grid(quick=True)
    assert len(quick) >= 6 and set(quick) <= set(grid)


def test_filters():
    cases = cases_for("--dtype", "bfloat16", "--rows", "512,64", "--width", "128K", "--k", "2048", "--k", "512")
    assert cases and {(c.dtype, c.width) for c in cases} == {("bfloat16", 131072)}
    assert {c.rows for c in cases} == {512, 64} and {c.k for c in cases} == {512, 2048}
    assert {c.values for c in cases} == {True, False}
    skewed = cases_for("--quick", "--dist", "ascending,many_zeros")
    assert len(skewed) == 2 * len(bench.standard_grid(quick=True))
    assert {c.dist for c in skewed} == {"ascending", "many_zeros"}


def test_real_grid():
    scores, end = sample_data.indexer_rows()
    cases = cases_for("--real", "--rows", "64")
    indexer = [c for c in cases if c.scenario == "indexer"]
    assert indexer and all(c.dist == "real" and c.width == scores.shape[1] for c in indexer)
    elements = int(np.resize(end, 64).sum())
    assert indexer[0].elements == elements < 64 * scores.shape[1]
    c = indexer[0]
    assert c.bytes_moved() == elements * 2 + 64 * c.k * 4  # bf16 read, int32 indices, no values
    assert {c.scenario for c in cases} == {"indexer", "sampler"}


@pytest.mark.parametrize("args, message", [
    (("--dtype", "float64"), "--dtype 'float64'"),
    (("--rows", "many"), "--rows 'many': expected a positive integer"),
    (("--k", "0"), "--k '0': must be >= 1"),
    (("--width", "lots"), "--width 'lots': expected a positive integer"),
    (("--dist", "weird"), "--dist 'weird'"),
    (("--rows", "3"), "no case matches the filters"),
    (("--quick", "--real"), "pass one"),
    (("--from-json", "x.json", "--quick"), "takes only --plot"),
    (("--quick", "--json", "/no/such/folder/b.json"), "does not exist"),
])
def test_bad_usage_exits_2(capsys, args, message):
    rc, _, err = main(capsys, "bench", *args)
    assert rc == 2
    assert message in err


def test_bench_without_gpu_says_so(tmp_path):
    if has_gpu():
        pytest.skip("a GPU is visible")
    result = run("-m", "deepselect_rt.cli", "bench", "--quick", tmp_path=tmp_path)
    assert result.returncode == 1
    assert "needs an NVIDIA GPU" in result.stderr and "--from-json" in result.stderr


# -- saved results and the plot -----------------------------------------------------------------

def crafted_results() -> list[dict]:
    """A small saved run: two row counts, two widths, two k, values and not, the JAX columns."""
    out = []
    for rows in (64, 4096):
        for width in (16384, 131072, 1048576):
            for k in (512, 2048):
                for values in (False, True):
                    case = bench.Case("indexer", "bfloat16", rows, width, k, "int32", values, False)
                    ours = case.bytes_moved() / (2.5e12 * min(1, rows / 132)) * 1e6 + 5
                    r = bench.Result(case, ours, ours * 7, {bench.JAX: ours * 40, bench.JAX_OURS: ours + 150})
                    out.append(r.as_dict())
    sampler = bench.Case("sampler", "float32", 4096, bench.SAMPLER_WIDTH, 512, "int64", True, True)
    out.append(bench.Result(sampler, 716.0, 5910.0, ours_graph_us=700.0, torch_graph_us=5900.0).as_dict())
    return out


def test_results_round_trip(tmp_path):
    dicts = crafted_results()
    results = [bench.Result.from_dict(d) for d in dicts]
    assert [r.as_dict() for r in results] == dicts
    path = tmp_path / "b.json"
    host = bench.HostOverhead("float32 1x1024 k=8", 10_000, 12.0, 8.0)
    bench.save_json(path, results, host, {"gpu": "NVIDIA H200"})
    again, host2, meta = bench.load_json(path)
    assert [r.as_dict() for r in again] == dicts and host2 == host and meta["gpu"] == "NVIDIA H200"
    old = tmp_path / "old.json"  # the older format: a bare list, no peers
    old.write_text(json.dumps([{k: v for k, v in dicts[0].items() if k not in ("peers", "elements")}]))
    assert bench.load_json(old)[0][0].case == results[0].case
    bad = tmp_path / "bad.json"
    bad.write_text('{"results": [{"rows": 1}]}')
    with pytest.raises(ValueError, match=r"not a file written by deepselect-rt bench --json \(a result lacks "
                                         r"scenario, dtype, width, k, index, values, sorted, ours_us, torch_us\)"):
        bench.load_json(bad)
    other = tmp_path / "other.json"
    other.write_text('{"shapes": []}')
    with pytest.raises(ValueError, match=r'\(no "results" list\)'):
        bench.load_json(other)
    empty = tmp_path / "empty.json"  # another tool's file with an empty "results" list
    empty.write_text('{"meta": {}, "results": [], "host_us": {"ours": 50.0}}')
    with pytest.raises(ValueError, match=r"\(no results and no host times\)"):
        bench.load_json(empty)


def test_plot_from_saved_json(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps({"meta": {"gpu": "NVIDIA H200", "date": "2026-11-29"},
                                 "results": crafted_results(), "host": None}))
    png = tmp_path / "perf.png"
    rc, out, err = main(capsys, "bench", "--from-json", str(saved), "--plot", str(png))
    assert rc == 0, err
    data = png.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert "bfloat16 4096x1048576 k=512" in out and "plot written" in out
    assert f"{bench.JAX} and {bench.JAX_OURS}: wall time per blocking call of a jax.jit function" in out


def test_plot_format_is_checked_before_the_table(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps({"meta": {}, "results": crafted_results(), "host": None}))
    rc, out, err = main(capsys, "bench", "--from-json", str(saved), "--plot", str(tmp_path / "perf.txt"))
    assert rc == 2 and "the format comes from the suffix" in err and ".png" in err
    assert "k=512" not in out and not (tmp_path / "perf.txt").exists()


@pytest.mark.parametrize("change", [{"ours_us": 0}, {"dtype": "float64"}, {"peers": {"jax": "x"}},
                                    {"ours_us": float("nan")}, {"torch_us": float("inf")},
                                    {"ours_graph_us": 0}, {"torch_graph_us": -5.0}, {"ours_graph_us": "fast"}])
def test_from_json_rejects_bad_results(capsys, tmp_path, change):
    saved = tmp_path / "bad.json"
    saved.write_text(json.dumps([dict(crafted_results()[0], **change)]))
    rc, _, err = main(capsys, "bench", "--from-json", str(saved))
    assert rc == 2 and "bad.json" in err and "not a file written by deepselect-rt bench --json" in err


@pytest.mark.parametrize("doc", [{"results": None}, {"results": {}}, {"meta": {}}, "results"])
def test_from_json_without_a_results_list_says_so(capsys, tmp_path, doc):
    saved = tmp_path / "bad.json"
    saved.write_text(json.dumps(doc))
    rc, _, err = main(capsys, "bench", "--from-json", str(saved))
    assert rc == 2 and err.strip().endswith('not a file written by deepselect-rt bench --json (no "results" list)')


def test_table_shows_small_bandwidths(capsys, tmp_path):
    case = bench.Case("indexer", "bfloat16", 1, 131072, 512, "int32", False, False)
    saved = tmp_path / "small.json"
    saved.write_text(json.dumps([bench.Result(case, 17.0, 40.0).as_dict()]))
    rc, out, err = main(capsys, "bench", "--from-json", str(saved))
    assert rc == 0, err
    tbs = case.bytes_moved() / 17.0 / 1e6  # bytes per us -> TB/s
    shown = float(re.search(r"17\.0 │ ([0-9.]+) │", out).group(1))
    assert 0.001 < tbs < 0.1 and abs(shown - tbs) < 0.01 * tbs


def test_from_json_missing_file_fails(capsys, tmp_path):
    rc, _, err = main(capsys, "bench", "--from-json", str(tmp_path / "none.json"))
    assert rc == 2 and "--from-json" in err and "none.json" in err and "no such file" in err


# -- a run against a baseline ---------------------------------------------------------------

def scaled(dicts: list[dict], factors: dict) -> list[dict]:
    """``dicts`` with ours_us (and its graph time) times ``factors[i]`` for the i-th result."""
    out = []
    for i, d in enumerate(dicts):
        f = factors.get(i, 1.0)
        graph = d.get("ours_graph_us")
        out.append(dict(d, ours_us=d["ours_us"] * f, ours_graph_us=None if graph is None else graph * f))
    return out


def test_pair_and_slower_against_brute_force():
    old = [bench.Result.from_dict(d) for d in crafted_results()]
    drift = 1.10  # torch.topk 10% slower in the new run
    new_dicts = [dict(d, torch_us=d["torch_us"] * drift,
                      torch_graph_us=None if d.get("torch_graph_us") is None else d["torch_graph_us"] * drift)
                 for d in scaled(crafted_results(), {0: 1.25, 3: 1.02, 5: 0.8, 7: 1.04, 24: 1.5})]
    new = [bench.Result.from_dict(d) for d in new_dicts[1:]]  # case 0 only in the baseline
    new.append(bench.Result(bench.Case("indexer", "bfloat16", 7, 4096, 8, "int32", False, False), 1.0, 2.0))
    changes, only_new, only_old = compare.pair(new, old)
    assert only_new == [new[-1].case] and only_old == [old[0].case]
    assert [c.case for c in changes] == [r.case for r in old[1:]]
    for c, before, after in zip(changes, old[1:], new_dicts[1:]):
        graph = before.ours_graph_us is not None
        assert c.graph == graph
        key = "_graph_us" if graph else "_us"
        assert c.ratio == pytest.approx(after["ours" + key] / getattr(before, "ours" + key))
        assert c.torch_ratio == pytest.approx(drift)
    # Over 1.03x: 1.5 and 1.04, slowest first; 1.02 and 0.8 are not.
    worse = compare.slower(changes)
    assert [c.case for c in worse] == [old[24].case, old[7].case]
    assert [c.ratio for c in worse] == pytest.approx([1.5, 1.04])
    assert compare.slower(changes, factor=0.5) == sorted(changes, key=lambda c: -c.ratio)


def saved_run(tmp_path, name: str, dicts: list[dict], gpu: str = "NVIDIA H100 80GB HBM3") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"meta": {"gpu": gpu, "date": "2026-12-07"}, "results": dicts, "host": None}))
    return str(path)


def test_against_reports_slower_cases_and_exits_1(capsys, tmp_path):
    old = saved_run(tmp_path, "old.json", crafted_results())
    new = saved_run(tmp_path, "new.json", scaled(crafted_results(), {2: 1.2}))
    rc, out, err = main(capsys, "bench", "--from-json", new, "--against", old)
    assert rc == 1, err
    label = bench.Result.from_dict(crafted_results()[2]).case.label()
    assert "1 of 25 case(s) over 1.03x the baseline's time" in out and f"the slowest: {label} at 1.200x" in out
    assert "different GPUs" not in out


def test_against_an_equal_run_exits_0(capsys, tmp_path):
    old = saved_run(tmp_path, "old.json", crafted_results())
    new = saved_run(tmp_path, "new.json", scaled(crafted_results(), {2: 0.5}), gpu="NVIDIA H200")
    rc, out, err = main(capsys, "bench", "--from-json", new, "--against", old)
    assert rc == 0, err
    assert "0 of 25 case(s) over 1.03x" in out and "different GPUs" in out and "0.500" in out


def test_against_without_shared_cases_exits_1(capsys, tmp_path):
    old = saved_run(tmp_path, "old.json", crafted_results()[:3])
    new = saved_run(tmp_path, "new.json", crafted_results()[3:6])
    rc, out, _ = main(capsys, "bench", "--from-json", new, "--against", old)
    assert rc == 1 and "no case is in both runs" in out


def test_against_missing_file_fails_before_the_gpu(capsys, tmp_path):
    rc, _, err = main(capsys, "bench", "--quick", "--against", str(tmp_path / "none.json"))
    assert rc == 2 and "--against" in err and "no such file" in err
    rc, _, err = main(capsys, "bench", "--quick", "--against", str(tmp_path))
    assert rc == 2 and "is a folder" in err


def test_against_counts_over_as_shown(capsys, tmp_path):
    """1.0304 is shown as 1.030 and is not over 1.03; 1.0306 is shown as 1.031 and is."""
    old = saved_run(tmp_path, "old.json", crafted_results(), gpu="[bold]H100[/bold]")
    new = saved_run(tmp_path, "new.json", scaled(crafted_results(), {1: 1.0304, 4: 1.0306}),
                    gpu="[bold]H100[/bold]")
    rc, out, err = main(capsys, "bench", "--from-json", new, "--against", old)
    label = bench.Result.from_dict(crafted_results()[4]).case.label()
    assert rc == 1, err
    assert f"1 of 25 case(s) over 1.03x the baseline's time; the slowest: {label} at 1.031x" in out
    assert "[bold]H100[/bold]" in out  # the GPU's name as recorded, not read as markup


# -- on a GPU -----------------------------------------------------------------------------------

def gpu_only():
    if not has_gpu():
        pytest.skip("no CUDA device")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")


@pytest.mark.gpu
def test_bench_quick_plot_on_gpu(tmp_path):
    gpu_only()
    pytest.importorskip("matplotlib")
    png, saved = tmp_path / "perf.png", tmp_path / "bench.json"
    result = run("-m", "deepselect_rt.cli", "bench", "--quick", "--plot", str(png), "--json", str(saved),
                 tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    results, _, meta = bench.load_json(saved)
    assert len(results) == len(bench.standard_grid(quick=True)) and meta["gpu"]
    assert all(r.ours_us > 0 and r.torch_us > 0 for r in results)
    from deepselect_rt.bench import timing

    if timing.jax_available():  # both JAX columns timed, none lost to an error
        assert all(set(r.peers) == {bench.JAX, bench.JAX_OURS} and not r.peer_errors for r in results)
    assert png.read_bytes().startswith(PNG_SIGNATURE)


@pytest.mark.gpu
def test_bench_real_and_host_on_gpu(tmp_path):
    gpu_only()
    saved = tmp_path / "real.json"
    result = run("-m", "deepselect_rt.cli", "bench", "--real", "--rows", "64", "--host", "--json", str(saved),
                 tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    results, host, _ = bench.load_json(saved)
    assert {r.case.dist for r in results} == {"real"} and host.ours_us > 0 and host.torch_us > 0
    assert "host time per call" in result.stdout
