"""Timing as docs/performance.md prescribes: CUDA events, cold L2 before every call, median of
at least 30 calls, torch.topk on the same inputs in the same run; CUDA-graph replay for short
shapes; host time per call apart.

Measuring needs torch with CUDA (the timing harness and the reference peer); jax.lax.top_k joins
as a peer where JAX has a GPU backend. CuPy is no peer: it has no top-k and no bfloat16, and an
argpartition + sort emulation would time CuPy's sort, not a top-k. Used by ``deepselect-rt
bench`` and the developer tools.
"""

from __future__ import annotations

import os
import statistics
import time

from ..errors import BackendUnavailableError
from .grid import FLUSH_BYTES, GRAPH_BELOW_US, HOST_CALLS, ITERS, JAX, JAX_OURS, Case, HostOverhead, Result


def require_gpu(who: str, without: str = "") -> None:
    """Raises BackendUnavailableError, naming ``who`` (the command or tool) and ending with
    ``without`` (what works without a GPU, if anything), unless a CUDA GPU and torch with CUDA
    are there: timing uses torch's CUDA events, and torch.topk is the reference peer."""
    from ..cuda import arch

    devices, why_not = arch.probe()
    if not devices:
        raise BackendUnavailableError(f"{who} needs an NVIDIA GPU, and none is usable here "
                                      f"({why_not or 'no CUDA device visible'}).{without}")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise BackendUnavailableError(f"{who} times with torch's CUDA events: install torch with CUDA")


def event_us(torch, fn) -> float:
    """GPU time (us) of one call of fn on torch's current stream, from CUDA events."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3


def time_events(torch, fn, flush, iters: int) -> float:
    """Median GPU time of fn in microseconds from CUDA events, L2 flushed before each call."""
    fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        times.append(event_us(torch, fn))
    return statistics.median(times)


def time_graph(torch, fn, flush, iters: int) -> float | None:
    """GPU time of fn (us) under CUDA-graph replay: graph [flush; fn] minus graph [flush], so that
    host launch gaps do not count. None when fn cannot be captured.

    The two graphs replay in alternation, either first by turns, and the result is the median of
    each pair's difference: the flush (512 MiB written, ~130 us on an H200) dwarfs a few-row
    top-k (~8 us), so a drift of the flush's time between two separate medians would show as
    a top-k's time several times over."""
    try:
        fn()  # kernels loaded and outputs allocated outside the capture
        torch.cuda.synchronize()
        both, flush_only = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(both):
            flush.zero_()
            fn()
        with torch.cuda.graph(flush_only):
            flush.zero_()
    except Exception:  # a capture failure costs this column only, not the benchmark
        torch.cuda.synchronize()
        return None
    both.replay()
    flush_only.replay()
    graphs = (both, flush_only)
    differences = []
    for i in range(iters):
        us = [0.0, 0.0]
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            us[j] = event_us(torch, graphs[j].replay)
        differences.append(us[0] - us[1])
    return max(0.0, statistics.median(differences))


def time_wall(torch, fn, flush, iters: int) -> float:
    """Median wall time (us) of fn, which must block until its GPU work is done, L2 flushed and
    the device idle before each call. For peers on their own streams (JAX), which CUDA events on
    torch's stream do not see; includes the peer's dispatch overhead."""
    fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def torch_dtype(torch, name: str):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def _to_cuda(torch, host):
    """A CUDA tensor with the bits of a NumPy array (bfloat16 moved as int16, which torch reads)."""
    import ml_dtypes

    if host.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(host.view("int16")).cuda().view(torch.bfloat16)
    return torch.from_numpy(host).cuda()


def case_input(torch, case: Case):
    """``(x, end)`` on the GPU for ``case``; end is None unless the case has causal rows."""
    import numpy as np

    from . import distributions, samples

    dt = torch_dtype(torch, case.dtype)
    if case.dist == "real":
        if case.scenario == "indexer":
            scores, end = samples.indexer_rows()
            x = np.resize(scores, (case.rows, case.width))
            return _to_cuda(torch, x), _to_cuda(torch, np.resize(end, case.rows))
        return _to_cuda(torch, np.resize(samples.sampler_rows(), (case.rows, case.width))), None
    if case.dist == "normal":
        return torch.randn(case.rows, case.width, device="cuda", dtype=torch.float32).to(dt), None
    host = distributions.make(case.dist, case.rows, case.width, "float32")
    return torch.from_numpy(host).cuda().to(dt), None


def jax_available() -> bool:
    """Whether JAX is installed with a GPU backend. Turns off JAX's grab of 75% of GPU memory
    (it would starve torch) before JAX's first import."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax

        return bool(jax.devices("gpu"))
    except Exception:  # not installed, or CPU-only jaxlib ("Unknown backend: 'gpu'")
        return False


def _jax_calls(x, end, case: Case) -> dict:
    """Blocking calls of jax.jit(jax.lax.top_k) and jax.jit(deepselect_rt.topk) (int32 indices, as
    lax.top_k gives, and ``nan_policy="sentinel"``, as ours runs above) on zero-copy JAX views of
    ``x`` and ``end``, by peer name."""
    import jax

    import deepselect_rt

    xj = jax.dlpack.from_dlpack(x)
    ej = None if end is None else jax.dlpack.from_dlpack(end)
    kw = dict(sorted=case.sorted, return_value=case.values, indices_type="int32", nan_policy="sentinel")
    lax_top_k = jax.jit(lambda a: jax.lax.top_k(a, case.k))
    ours = jax.jit(lambda a, e: deepselect_rt.topk(a, case.k, end=e, **kw))
    return {JAX: lambda: jax.block_until_ready(lax_top_k(xj)), JAX_OURS: lambda: jax.block_until_ready(ours(xj, ej))}


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def run_case(case: Case, iters: int = ITERS, jax_peer: bool = False) -> Result:
    """Time ``case`` for ours and torch.topk (and, when ``jax_peer``, jax.jit of jax.lax.top_k
    and of ours).

    Ours runs with preallocated outputs and nan_policy="sentinel" (no sync), with the causal
    ``end`` of real indexer rows; the peers take the whole rows, whose tail is -inf there, as a
    masked indexer would pass them. Raises whatever ours or torch raise (out of memory, ...).
    """
    import torch

    import deepselect_rt

    x, end = case_input(torch, case)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    kw = dict(indices_type=case.index, return_value=case.values, sorted=case.sorted, nan_policy="sentinel", end=end)
    idx = torch.empty(case.rows, case.k, dtype=getattr(torch, case.index), device="cuda")
    val = torch.empty(case.rows, case.k, dtype=x.dtype, device="cuda") if case.values else None

    def ours():
        deepselect_rt.topk(x, case.k, output_idx=idx, output_val=val, **kw)

    def peer():
        torch.topk(x, case.k, dim=1, sorted=case.sorted)

    result = Result(case, time_events(torch, ours, flush, iters), time_events(torch, peer, flush, iters))
    if min(result.ours_us, result.torch_us) < GRAPH_BELOW_US:
        result.ours_graph_us = time_graph(torch, ours, flush, iters)
        result.torch_graph_us = time_graph(torch, peer, flush, iters)
    if jax_peer:  # a JAX column's failure (memory, dlpack, lowering) loses that column only
        try:
            calls = _jax_calls(x, end, case)
        except Exception as exc:
            calls, result.peer_errors[JAX] = {}, _why(exc)
        for name, fn in calls.items():
            try:
                result.peers[name] = time_wall(torch, fn, flush, iters)
            except Exception as exc:
                result.peer_errors[name] = _why(exc)
    return result


def per_call_us(fn, calls: int, burst: int = 25) -> float:
    """Host time per call (us) of ``fn``: ``calls`` calls in bursts of ``burst``, each burst timed
    from an idle GPU to its last call returning (no sync inside), so that a kernel slower than
    the host does not hide the host's own time while the launch queue has room."""
    import torch

    for _ in range(100):
        fn()
    total = 0.0
    for start in range(0, calls, burst):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(min(burst, calls - start)):
            fn()
        total += time.perf_counter() - t0
    torch.cuda.synchronize()
    return total / calls * 1e6


def host_overhead(calls: int = HOST_CALLS) -> HostOverhead:
    """Host time per call (``per_call_us``) over ``calls`` calls on a 4 x 4096 bfloat16 input,
    k = 16: ours with the defaults, with nan_policy="sentinel", with caller buffers, with a page
    table and per-row k, from CuPy and JAX arrays where those have a GPU and under jax.jit,
    beside torch.topk (allocating and with ``out=``), jax.jit(jax.lax.top_k) and the floor of
    any call made from Python (``_floors``)."""
    import torch

    import deepselect_rt

    rows, width, k = 4, 4096, 16
    x = torch.randn(rows, width, device="cuda").to(torch.bfloat16)
    idx = torch.empty(rows, k, dtype=torch.int64, device="cuda")
    val = torch.empty(rows, k, dtype=x.dtype, device="cuda")
    table = torch.arange(rows * width // 64, dtype=torch.int32, device="cuda").view(rows, width // 64)
    per_row = torch.full((rows,), k, dtype=torch.int32, device="cuda")
    topk = deepselect_rt.topk
    calls_ = {
        "ours, defaults": lambda: topk(x, k),
        "ours, nan_policy='sentinel'": lambda: topk(x, k, nan_policy="sentinel"),
        "ours, caller buffers": lambda: topk(x, k, output_idx=idx, output_val=val),
        "ours, page table and per-row k (int32 indices)": lambda: topk(
            x, k, indices_type="int32", page_table=table, page_size=64, k_per_row=per_row),
        "torch.topk": lambda: torch.topk(x, k, dim=1, sorted=False),
        "torch.topk, out=": lambda: torch.topk(x, k, dim=1, sorted=False, out=(val, idx)),
    }
    try:
        import cupy

        xc = cupy.from_dlpack(x)
        calls_["ours, CuPy array"] = lambda: topk(xc, k)
    except Exception:  # noqa: BLE001  no CuPy with a GPU here: the row is left out
        pass
    if jax_available():
        import jax

        xj = jax.dlpack.from_dlpack(x)
        top_k = jax.jit(lambda a: jax.lax.top_k(a, k))
        ours_jit = jax.jit(lambda a: topk(a, k, indices_type="int32"))
        calls_["ours, JAX array (int32 indices)"] = lambda: topk(xj, k, indices_type="int32")
        calls_["jax.jit(ours) (defaults, int32 indices)"] = lambda: ours_jit(xj)
        calls_["jax.jit(jax.lax.top_k)"] = lambda: top_k(xj)
    calls_.update(_floors(torch, x, k))
    by_call = {label: per_call_us(fn, calls) for label, fn in calls_.items()}
    return HostOverhead(f"bfloat16 {rows}x{width} k={k}", calls, by_call["ours, caller buffers"],
                        by_call["torch.topk, out="], by_call)


def _floors(torch, x, k: int) -> dict:
    """What any call made from Python costs at least on this machine, to read our rows against:
    one ``cuLaunchKernel`` through cuda.bindings (of the toolchain probe kernel, told to write
    nothing) on torch's current stream, alone and after allocating two ``(rows, k)`` outputs
    with ``torch.empty``; no checks, no bookkeeping."""
    import ctypes

    from ..cuda import driver, loader, variants
    from ..interop.outputs import torch_stream_getter

    device = x.device.index or 0
    kernel = loader.get_kernel(device, variants.PROBE)
    args = (ctypes.c_uint64 * 2)()  # out = null, n = 0
    argv = (ctypes.c_void_p * 2)(ctypes.addressof(args), ctypes.addressof(args) + 8)
    argv_ptr, cu, stream = ctypes.addressof(argv), driver.bindings(), torch_stream_getter()
    shape, dtype = (x.shape[0], k), x.dtype

    def launch():
        cu.cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream(device), argv_ptr, 0)

    def allocate_and_launch():
        out = (torch.empty(shape, dtype=torch.int64, device=x.device), torch.empty(shape, dtype=dtype, device=x.device))
        launch()
        return out

    return {"floor: one cuLaunchKernel from Python": launch,
            "floor: two torch.empty and one cuLaunchKernel": allocate_and_launch}


__all__ = ["require_gpu", "event_us", "time_events", "time_graph", "time_wall", "case_input", "torch_dtype", "jax_available",
           "run_case", "per_call_us", "host_overhead"]
