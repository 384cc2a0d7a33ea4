"""Devices and loaded kernels, through the CUDA driver (``cuda.bindings.driver``).

``get_kernel(device, variant)`` turns a variant into a launchable ``CUkernel`` once per
(device ordinal, variant): the device's compute capability picks the arch, the kernel cache gives
the cubin (compiling it on a miss), ``cuLibraryLoadData`` loads it and ``cuLibraryGetKernel``
finds the entry. Libraries stay loaded for the life of the process. Device properties that
dispatch needs are read once per device.

Importing this module needs neither cuda-bindings nor a driver: both are looked up on first use,
and their absence is a BackendUnavailableError that says what to install.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .. import config
from ..errors import BackendUnavailableError
from .nvrtc import arch_for_compute_capability
from .variants import Variant

_lock = threading.RLock()
_initialised = False
_devices: dict[int, "DeviceInfo"] = {}
# (device ordinal, variant) -> (CUlibrary, CUkernel, cubin). The library is kept so it is never
# unloaded, the cubin because lazy loading may read the image after cuLibraryLoadData returns.
_kernels: dict[tuple[int, Variant], tuple] = {}


@dataclass(frozen=True)
class DeviceInfo:
    """What dispatch needs to know about one GPU.

    ordinal: driver device ordinal. compute_capability: (major, minor). arch: the arch whose
    kernels it runs, or None when deepselect-rt has none for it. sm_count: multiprocessors.
    max_shared_memory_per_block_optin: bytes a kernel may use after opting in.
    shared_memory_per_sm: bytes per multiprocessor. cluster_launch: thread-block clusters
    supported. total_memory: bytes.
    """

    ordinal: int
    name: str
    compute_capability: tuple
    arch: str | None
    sm_count: int
    max_shared_memory_per_block_optin: int
    shared_memory_per_sm: int
    cluster_launch: bool
    total_memory: int


def _driver():
    """The ``cuda.bindings.driver`` module. Raises BackendUnavailableError when not installed."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the CUDA backend needs cuda-bindings ({exc}); {config.NVRTC_INSTALL_HINT}") from None
    return driver


def check(result, what: str):
    """Unpack a driver call's (CUresult, *values) tuple.

    Returns None, the single value, or a tuple of values. Raises RuntimeError naming the call
    and the driver's error (e.g. "cuLibraryLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (...)").
    """
    err, *values = result
    if int(err) != 0:
        name = getattr(err, "name", str(int(err)))
        detail = ""
        try:
            status, text = _driver().cuGetErrorString(err)
            if int(status) == 0 and text:
                detail = f" ({text.decode(errors='replace')})"
        except Exception:  # the error text is a courtesy; the name already identifies it
            pass
        raise RuntimeError(f"{what} failed: {name}{detail}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def init() -> None:
    """Initialise the driver once. Raises BackendUnavailableError when there is none usable."""
    global _initialised
    with _lock:
        if _initialised:
            return
        driver = _driver()
        try:
            check(driver.cuInit(0), "cuInit")
        except RuntimeError as exc:  # also cuda.pathfinder's "libcuda not found"
            raise BackendUnavailableError(f"CUDA is not usable: {exc}") from None
        _initialised = True


def device_count() -> int:
    """Visible CUDA devices. Raises BackendUnavailableError without a usable driver."""
    init()
    return int(check(_driver().cuDeviceGetCount(), "cuDeviceGetCount"))


def device_info(ordinal: int) -> DeviceInfo:
    """Properties of device ``ordinal`` (read once, then cached).

    Raises BackendUnavailableError without a driver, RuntimeError for a bad ordinal.
    """
    with _lock:
        info = _devices.get(ordinal)
    if info is not None:
        return info
    init()
    driver = _driver()
    count = device_count()
    if not 0 <= ordinal < count:
        raise RuntimeError(f"CUDA device {ordinal} does not exist ({count} visible)")
    dev = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
    attr = driver.CUdevice_attribute

    def get(name: str) -> int:
        return int(check(driver.cuDeviceGetAttribute(getattr(attr, name), dev),
                         f"cuDeviceGetAttribute({name})"))

    cc = (get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
          get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))
    try:
        arch = arch_for_compute_capability(*cc)
    except ValueError:
        arch = None
    name = check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
    info = DeviceInfo(
        ordinal=ordinal,
        name=bytes(name).split(b"\0", 1)[0].decode(errors="replace"),
        compute_capability=cc,
        arch=arch,
        sm_count=get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        max_shared_memory_per_block_optin=get(
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        shared_memory_per_sm=get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        cluster_launch=bool(get("CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH")),
        total_memory=int(check(driver.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
    )
    with _lock:
        return _devices.setdefault(ordinal, info)


def device_arch(ordinal: int) -> str:
    """The arch of device ``ordinal``. Raises BackendUnavailableError when it has no kernels."""
    info = device_info(ordinal)
    if info.arch is None:
        major, minor = info.compute_capability
        raise BackendUnavailableError(
            f"CUDA device {ordinal} ({info.name}) has compute capability {major}.{minor}, "
            "for which deepselect-rt has no kernels")
    return info.arch


# How to compile where "native" finds no GPU to ask.
_NAME_AN_ARCH = "pass an explicit arch such as sm_90a to compile without a GPU"


def native_arch() -> str:
    """The arch of the current context's device, or of device 0 when no context is current.

    Raises BackendUnavailableError when there is no driver or no device.
    """
    try:
        init()
    except BackendUnavailableError as exc:
        raise BackendUnavailableError(f"{str(exc).rstrip('.')}; {_NAME_AN_ARCH}") from None
    driver = _driver()
    err, dev = driver.cuCtxGetDevice()
    if int(err) == 0:
        return device_arch(int(dev))
    if device_count() == 0:
        raise BackendUnavailableError(f"no CUDA device found; {_NAME_AN_ARCH}")
    return device_arch(0)


def probe() -> tuple[list[DeviceInfo], str | None]:
    """(devices, None) when the CUDA backend is usable, else ([], why not). Never raises."""
    try:
        return [device_info(i) for i in range(device_count())], None
    except Exception as exc:  # info must report, not crash, whatever is missing or broken
        return [], str(exc)


def get_kernel(device_ordinal: int, variant: Variant, cache=None):
    """The ``CUkernel`` of ``variant`` for device ``device_ordinal``, loaded once per process.

    cache: a ``KernelCache`` (default ``cache.default_cache()``). Raises CompileError when the
    kernel does not compile, BackendUnavailableError without a driver or for an unsupported GPU,
    RuntimeError (with the driver's error name) when loading fails.
    """
    key = (device_ordinal, variant)
    with _lock:
        found = _kernels.get(key)
    if found is not None:
        return found[1]
    arch = device_arch(device_ordinal)
    if cache is None:
        from ..cache import default_cache

        cache = default_cache()
    cubin = cache.get_or_build(variant, arch)
    driver = _driver()
    with _lock:
        found = _kernels.get(key)  # another thread may have loaded it meanwhile
        if found is not None:
            return found[1]
        library = check(driver.cuLibraryLoadData(cubin, None, None, 0, None, None, 0),
                        f"cuLibraryLoadData({variant.entry}, {arch})")
        try:
            kernel = check(driver.cuLibraryGetKernel(library, variant.entry.encode()),
                           f"cuLibraryGetKernel({variant.entry})")
        except RuntimeError:
            driver.cuLibraryUnload(library)
            raise
        _kernels[key] = (library, kernel, cubin)
        return kernel


def kernel_global(device_ordinal: int, variant: Variant, name: str) -> tuple[int, int]:
    """(device address, bytes) of the ``__device__`` variable ``name`` in the loaded ``variant``
    (for instrumented copies of the kernels in tools/). Raises KeyError when the variant is not
    loaded on that device, RuntimeError (the driver's error) when it has no such variable."""
    with _lock:
        library = _kernels[(device_ordinal, variant)][0]
    ptr, size = check(_driver().cuLibraryGetGlobal(library, name.encode()), f"cuLibraryGetGlobal({name})")
    return int(ptr), int(size)


__all__ = ["DeviceInfo", "check", "init", "device_count", "device_info", "device_arch",
           "native_arch", "probe", "get_kernel", "kernel_global"]
