"""The CUDA backend's launch logic on the CPU, with the driver calls replaced: what ``run``
launches, and the repeat launch it returns for interop/repeat.py (other streams and output pointers,
invalidated by forced_split and forget_plans, absent where a call needs the whole path). The real launches are
covered by the GPU tests."""

from __future__ import annotations

import ctypes
from contextlib import nullcontext

import pytest

pytest.importorskip("cuda.bindings", reason="needs the cu13 extra (cuda-bindings)")

from deepselect_rt.cuda import backend, launch  # noqa: E402
from deepselect_rt.cuda.plan import Plan  # noqa: E402
from deepselect_rt.cuda.variants import (SPLIT_CLUSTER, SPLIT_RADIX, SPLIT_WORKSPACE, radix_variant,  # noqa: E402
                                         stream_variant)
from deepselect_rt.request import TopkRequest  # noqa: E402
from deepselect_rt.interop.outputs import Allocated  # noqa: E402
from deepselect_rt.interop.views import TensorView  # noqa: E402


def _view(ptr, shape, dtype):
    return TensorView(ptr, shape, (shape[1], 1), dtype, "cuda", 0, "torch", None)


def _request(nan_policy="sentinel", rows=3, k=16):
    return TopkRequest(x=_view(0x1000, (rows, 5000), "bfloat16"), k=k, begin=None, end=None, offsets=None,
                       index_dtype="int32", sorted=True, sorted_index=False, return_value=True,
                       nan_policy=nan_policy, idx_fill=-1, val_fill=0.0, out_idx=_view(0x2000, (rows, k), "int32"),
                       out_val=_view(0x3000, (rows, k), "bfloat16"), stream=11)


@pytest.fixture
def launches(monkeypatch):
    """Every launch.launch call as (kernel, grid, stream, cluster, Params copy); no driver."""
    seen = []

    def fake_launch(kernel, grid, threads, smem, stream, params, cluster=1):
        seen.append((kernel, grid, stream, cluster, launch.Params.from_buffer_copy(params)))

    monkeypatch.setattr(launch, "launch", fake_launch)
    monkeypatch.setattr(backend, "on_device", lambda device: nullcontext())
    monkeypatch.setattr(backend, "is_current", lambda device: True)
    return seen


def _ready(monkeypatch, split=1, how=""):
    plan = Plan(stream_variant("bfloat16", 256, split=how), 512, 40000, split, how,
                "merge-variant" if how == SPLIT_WORKSPACE else None)
    ready = backend._Ready(plan, "kernel", "merge" if how == SPLIT_WORKSPACE else None)
    monkeypatch.setattr(backend, "_ready_for", lambda req: ready)


def test_run_launches_and_returns_a_repeat_launch(monkeypatch, launches):
    _ready(monkeypatch, 4, SPLIT_CLUSTER)
    again = backend.run(_request())
    (kernel, grid, stream, cluster, params), = launches
    assert (kernel, grid, stream, cluster) == ("kernel", 12, 11, 4)
    assert (params.x, params.out_idx, params.out_val, params.split) == (0x1000, 0x2000, 0x3000, 4)
    assert again(22) is True
    assert launches[1][:4] == ("kernel", 12, 22, 4) and bytes(launches[1][4]) == bytes(params)
    assert again(33, out_idx=0x4000) is True
    patched = launches[2][4]
    assert (patched.out_idx, patched.out_val, patched.x, patched.flags) == (0x4000, 0x3000, 0x1000, params.flags)
    assert again(33, out_val=0x5000) and launches[3][4].out_idx == 0x2000 and launches[3][4].out_val == 0x5000
    assert again(44, 0x6000, 0, 0, (("x", 0x1100), ("end", 0x7000)))  # new inputs too (cuda/xla_launch.py)
    moved = launches[4][4]
    assert (moved.x, moved.end, moved.out_idx, moved.out_val, moved.begin) == (0x1100, 0x7000, 0x6000, 0x3000, 0)
    assert again(22) and bytes(launches[5][4]) == bytes(params)  # the first call's block is unchanged


def test_radix_plans_launch_one_cluster_per_row(monkeypatch, launches):
    plan = Plan(radix_variant("bfloat16", 1024, 2), 1024, 8000, 16, SPLIT_RADIX)
    monkeypatch.setattr(backend, "_ready_for", lambda req: backend._Ready(plan, "radix"))
    again = backend.run(_request(rows=2))
    assert launches[0][:4] == ("radix", 32, 11, 16) and launches[0][4].split == 16
    assert again(7) and launches[1][:4] == ("radix", 32, 7, 16)


def test_forced_split_invalidates_a_repeat_launch(monkeypatch, launches):
    _ready(monkeypatch)
    again = backend.run(_request())
    with backend.forced_split(2):
        assert again(5) is False
    assert again(5) is False  # leaving it changes the plans again
    assert len(launches) == 1


def test_forget_plans_drops_plans_and_repeat_launches(monkeypatch, launches):
    _ready(monkeypatch)
    again = backend.run(_request())
    plan = Plan(stream_variant("bfloat16", 256), 512, 40000, 1, "", None)
    backend._ready[("a key",)] = backend._Ready(plan, "kernel", None)
    assert backend.prepared_plans() == [plan]
    backend.forget_plans()
    assert backend._ready == {} and backend.prepared_plans() == []
    assert again(5) is False and len(launches) == 1


def test_whole_path_calls_return_no_repeat_launch(monkeypatch, launches):
    _ready(monkeypatch)
    monkeypatch.setattr(backend, "_nan_args", lambda req: (0, 0, 7))
    monkeypatch.setattr(backend, "_raise_now", lambda req: None)
    assert backend.run(_request("raise_sync")) is None
    assert backend.run(_request("raise")) is not None  # recorded, not waited for: repeatable
    launches.clear()
    _ready(monkeypatch, 2, SPLIT_WORKSPACE)
    scratch = Allocated(_view(0x9000, (1, 64), "int32"))
    monkeypatch.setattr(backend, "workspace", lambda like, nbytes, stream: scratch)
    assert backend.run(_request()) is None
    assert [(k, g, c) for k, g, _, c, _ in launches] == [("kernel", 6, 1), ("merge", 3, 1)]
    assert launches[0][4].workspace == launches[1][4].workspace == 0x9000


def test_stream_device_finds_the_primary_context_of_the_stream(monkeypatch):
    """driver.stream_device (the own XLA handler's device): the device of the stream's context,
    found once per context and checked to be that device's primary context; no other device's
    context is retained; an error for a context that is not primary."""
    import ctypes
    from types import SimpleNamespace

    from deepselect_rt.cuda import driver

    contexts = {0xA: 0x100, 0xB: 0x200, 0xC: 0x999}  # stream -> its context
    devices = {0x100: 0, 0x200: 1, 0x999: 1}  # context -> its device
    primaries = {0: 0x100, 1: 0x200}
    current, calls, retained = [], [], []

    def stream_get_ctx(stream, out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = contexts[stream]
        return 0

    def primary_context(device):
        retained.append(device)
        driver._primary_handle[device] = primaries[device]

    fake = SimpleNamespace(
        CUcontext=int,
        cuCtxPushCurrent=lambda ctx: calls.append("push") or current.append(ctx) or (0,),
        cuCtxGetDevice=lambda: calls.append("get") or (0, devices[current[-1]]),
        cuCtxPopCurrent=lambda: calls.append("pop") or (0, current.pop()))
    monkeypatch.setattr(driver, "_primary_handle", {})
    monkeypatch.setattr(driver, "_context_device", {})
    monkeypatch.setattr(driver, "driver_function", lambda name, prototype: stream_get_ctx)
    monkeypatch.setattr(driver, "primary_context", primary_context)
    monkeypatch.setattr(driver, "bindings", lambda: fake)
    assert driver.stream_device(0xB) == 1 and retained == [1] and calls == ["push", "get", "pop"]
    assert driver.stream_device(0xB) == 1 and calls == ["push", "get", "pop"]  # known: no driver call
    assert driver.stream_device(0xA) == 0 and retained == [1, 0] and not current
    with pytest.raises(RuntimeError, match="other than its primary context"):
        driver.stream_device(0xC)


def test_cluster_launch_configs_are_fresh_copies_with_the_cluster_attribute():
    """Each cluster launch gets its own CUlaunchConfig (a stream set on one never reaches
    another launch), copied from one built per shape, pointing at the cluster-size attribute."""
    first = launch._cluster_config(12, 256, 1000, 4)
    first.stream = 77
    second = launch._cluster_config(12, 256, 1000, 4)
    assert second.stream is None and ctypes.addressof(second) != ctypes.addressof(first)
    for config in (first, second):
        assert (list(config.grid), list(config.block), config.smem, config.num_attrs) == ([12, 1, 1], [256, 1, 1],
                                                                                            1000, 1)
        attr = config.attrs.contents
        assert attr.id == 4 and list(attr.value[:3]) == [4, 1, 1]  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    other = launch._cluster_config(6, 128, 0, 16)
    assert list(other.grid) == [6, 1, 1] and list(other.attrs.contents.value[:3]) == [16, 1, 1]


def test_a_cluster_config_reaches_c_as_its_address():
    """launch() hands the config to cuLaunchKernelEx's prototype as a struct instance: C must see
    its address, with the stream and the cluster attribute in place (memcpy stands in for the
    driver)."""
    libc = ctypes.CDLL(None)
    prototype = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(launch._LaunchConfig),
                                 ctypes.c_size_t)
    memcpy = prototype(ctypes.cast(libc.memcpy, ctypes.c_void_p).value)
    config = launch._cluster_config(12, 256, 1000, 16)
    config.stream = 0x1234
    seen = ctypes.create_string_buffer(ctypes.sizeof(config))
    memcpy(seen, config, ctypes.sizeof(config))
    copy = launch._LaunchConfig.from_buffer_copy(seen.raw)
    assert seen.raw == bytes(config) and copy.stream == 0x1234
    assert list(copy.attrs.contents.value[:3]) == [16, 1, 1]
