"""GPU architectures and devices: which arch a compute capability runs, what dispatch needs to
know about each device (read once), and the spellings users may give for an arch.

Architectures are the project's fixed set (``SUPPORTED_ARCHS``): a cubin runs only on its own
architecture family, and the ``a`` targets (sm_90a, sm_100a, sm_103a) only on exactly that
compute capability, which is what the kernels are tuned for.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from ..errors import BackendUnavailableError
from ..jit import env
from ..jit.spec import arch_number
from .driver import bindings, check, init

_lock = threading.Lock()
_devices: dict[int, "DeviceInfo"] = {}

SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_103a", "sm_120")

# The arch built for each compute capability. A device whose exact capability is missing uses the
# highest non-"a" arch of its major version below it (cubins run on later minors of one major):
# 8.7 -> sm_86, 12.1 -> sm_120.
_ARCH_OF_CC = {(8, 0): "sm_80", (8, 6): "sm_86", (8, 9): "sm_89", (9, 0): "sm_90a",
               (10, 0): "sm_100a", (10, 3): "sm_103a", (12, 0): "sm_120"}

_ARCH_RE = re.compile(r"^(?:sm_?)?(\d+)(?:\.(\d))?([af]?)$")

def arch_for_compute_capability(major: int, minor: int) -> str:
    """The arch deepselect-rt builds for a device of compute capability major.minor.

    Raises ValueError for a device it has no kernels for (e.g. 7.5).
    """
    arch = _ARCH_OF_CC.get((major, minor))
    if arch is None:
        below = [(cc, a) for cc, a in _ARCH_OF_CC.items()
                 if cc[0] == major and cc[1] <= minor and not a.endswith("a")]
        if below:
            arch = max(below)[1]
    if arch is None:
        raise ValueError(f"no deepselect-rt kernels for compute capability {major}.{minor}; "
                         f"supported: {', '.join(SUPPORTED_ARCHS)}")
    return arch


# PTX targets: the driver compiles them for the GPU at load time. Used to run the code paths of
# older archs on a newer GPU (DEEPSELECT_RT_ARCH); cubins serve real deployments.
PTX_ARCHS = ("compute_80", "compute_86", "compute_89")
_ACCEPTED = ", ".join(SUPPORTED_ARCHS + PTX_ARCHS)
# Dynamic shared memory a CTA may opt into, by arch number, where it is less than a newer GPU's.
_SMEM_OPTIN = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024}


def normalise_arch(arch: str) -> str:
    """The canonical arch name for a user's spelling.

    Accepts "sm_90a", "sm90a", "90a", "sm_90", "90", "9.0", "SM_100A" and "native" (the
    architecture of the current CUDA device, asked of the driver). A spelling without a suffix
    is a compute capability and maps as on a device ("9.0" and "sm_90" -> "sm_90a", "8.7" ->
    "sm_86"); one with a suffix must name a supported arch exactly. Raises ValueError (listing
    the supported archs) for anything else, BackendUnavailableError when "native" finds no GPU.
    """
    text = str(arch).strip().lower()
    if text in PTX_ARCHS:
        return text
    if text == "native":
        return native_arch()
    match = _ARCH_RE.match(text)
    if not match:
        raise ValueError(f"unknown GPU architecture {arch!r}; use one of {_ACCEPTED}, a compute capability "
                         "like 9.0, or native")
    digits, dotted_minor, suffix = match.groups()
    if dotted_minor is not None:
        major, minor = int(digits), int(dotted_minor)
    elif len(digits) >= 2:
        major, minor = int(digits[:-1]), int(digits[-1])
    else:
        raise ValueError(f"unknown GPU architecture {arch!r}; use one of {_ACCEPTED}")
    if suffix:
        name = f"sm_{major}{minor}{suffix}"
        if name not in SUPPORTED_ARCHS:
            try:  # e.g. sm_120a: say which build serves those GPUs
                served = f" ({major}.{minor} GPUs run the {arch_for_compute_capability(major, minor)} build)"
            except ValueError:
                served = ""
            raise ValueError(f"unsupported GPU architecture {arch!r}{served}; use one of {_ACCEPTED}")
        return name
    try:
        return arch_for_compute_capability(major, minor)
    except ValueError:
        raise ValueError(f"unsupported GPU architecture {arch!r} (compute capability "
                         f"{major}.{minor}); use one of {_ACCEPTED}") from None


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


def device_count() -> int:
    """Visible CUDA devices. Raises BackendUnavailableError without a usable driver."""
    init()
    return int(check(bindings().cuDeviceGetCount(), "cuDeviceGetCount"))


def device_info(ordinal: int) -> DeviceInfo:
    """Properties of device ``ordinal`` (read once, then cached).

    Raises BackendUnavailableError without a driver, RuntimeError for a bad ordinal.
    """
    with _lock:
        info = _devices.get(ordinal)
    if info is not None:
        return info
    init()
    driver = bindings()
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
    driver = bindings()
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


def resolve_archs(spec: str | None) -> list[str]:
    """Arch names from "sm_90a,100a" (normalised, duplicates dropped, order kept).

    None means the archs whose kernels run on every visible GPU (``run_arch``: its own, or
    ``DEEPSELECT_RT_ARCH``). Raises ValueError for an unknown arch, BackendUnavailableError when
    None is given and there is no GPU or driver.
    """
    if spec is None:
        devices, why_not = probe()
        if not devices:
            raise BackendUnavailableError(
                f"no GPU to warm up for ({why_not or 'no CUDA device visible'}); pass --arch, "
                f"e.g. --arch {','.join(SUPPORTED_ARCHS)}, to compile without one")
        names = [run_arch(d.ordinal) for d in devices]
    else:
        names = [normalise_arch(part) for part in spec.split(",") if part.strip()]
        if not names:
            raise ValueError(f"--arch {spec!r} names no architecture")
    return list(dict.fromkeys(names))


def run_arch(ordinal: int) -> str:
    """The arch whose kernels run on device ``ordinal``: ``DEEPSELECT_RT_ARCH`` when set (an
    older arch, or its PTX), else the device's own. Raises ValueError for a bad override,
    BackendUnavailableError for a device without kernels."""
    arch = arch_override()
    if arch is None:
        return device_arch(ordinal)
    own = device_arch(ordinal)
    if arch_number(arch) > arch_number(own):
        raise ValueError(f"{env.ENV_ARCH}={env.arch_override()!r} is newer than device {ordinal}'s {own}")
    return arch


def arch_override() -> str | None:
    """``DEEPSELECT_RT_ARCH`` normalised, or None where it is not set. Raises ValueError naming
    the variable for an unknown arch."""
    text = env.arch_override()
    if text is None:
        return None
    if text.lower() == "native":  # the GPU's own arch is what an unset variable means
        raise ValueError(f"{env.ENV_ARCH}={text!r}: unset it to run each GPU's own arch, or name one of {_ACCEPTED}")
    try:
        return normalise_arch(text)
    except ValueError as exc:
        raise ValueError(f"{env.ENV_ARCH}: {exc}") from None


def run_limits(ordinal: int) -> tuple[int, bool]:
    """(dynamic shared memory a CTA may opt into, clusters usable) on device ``ordinal`` for the
    kernels of ``run_arch``: the device's own, capped at that arch's where it is older."""
    info = device_info(ordinal)
    number = arch_number(run_arch(ordinal))
    smem = min(info.max_shared_memory_per_block_optin, _SMEM_OPTIN.get(number, 1 << 30))
    return smem, info.cluster_launch and number >= 90
