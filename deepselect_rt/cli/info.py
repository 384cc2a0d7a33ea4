"""``deepselect-rt info``: the backend, devices, NVRTC, the cache layers and what they hold."""

from __future__ import annotations

from .cache import print_skipped_paths, print_unlisted
from .console import variant_column


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="backend, devices, NVRTC and the kernel cache",
                              description="Show the backend, the GPUs and their archs, NVRTC, the "
                                          "kernel cache layers, and which default "
                                          "kernel variants are cached for each arch.")
    p.set_defaults(handler=_info)


def _info(args, out, err) -> int:
    from ..cuda import arch
    from ..cuda.nvrtc import NVRTC_COMPILER
    from ..jit.cache import default_cache
    from ..jit.key import package_version
    from .environment import checked_settings

    settings = checked_settings()
    out.print(f"[bold]deepselect-rt[/] {package_version()}")
    if settings:
        out.print("environment: " + ", ".join(f"{name}={value}" for name, value in settings.items()), markup=False)
    devices, why_not = arch.probe()
    out.print(f"backend: {'cuda' if devices else 'none'}" + ("" if devices else f" ({why_not})"),
              markup=False)
    if devices:
        _print_devices(out, devices)
    have_nvrtc = _print_compiler(out)
    cache = default_cache(NVRTC_COMPILER)
    entries = cache.list_entries()
    _print_layers(out, cache, entries)
    # The archs that matter: the devices' here, else whatever the cache holds (a build box).
    archs = list(dict.fromkeys(d.arch for d in devices if d.arch)) or \
        sorted({e.arch for e in entries})
    if not archs:
        hint = "`deepselect-rt warmup`" if devices else "`deepselect-rt warmup --arch sm_90a`; no GPU: name the arch"
        out.print(f"cached default variants: none (run {hint})")
    elif not have_nvrtc:
        out.print("cached default variants: unknown (cache keys need the NVRTC version)")
    else:
        _print_cached_variants(out, cache, archs, for_devices=bool(devices))
        _print_other_toolchains(out, entries, archs)
    return 0


def _print_other_toolchains(out, entries, archs) -> None:
    """Says how many cached kernels of ``archs`` another NVRTC version built: a kernel's key holds
    its compiler's version, so the table above counts them as not cached."""
    from collections import Counter

    from ..cuda import nvrtc
    from ..jit.cache import toolchain_text

    current = toolchain_text(nvrtc.toolchain_fields())
    others = Counter(e.toolchain for e in entries
                     if e.arch in archs and e.toolchain.startswith("nvrtc ") and e.toolchain != current)
    for toolchain, count in sorted(others.items()):
        out.print(f"{count} cached kernel(s) of these archs were built by {toolchain}, not the {current} in use, "
                  "so they are not used here (a kernel's key holds its compiler's version); `deepselect-rt "
                  "warmup` (with --arch where no GPU is visible) builds them with this one", markup=False)


def _print_devices(out, devices) -> None:
    from rich.table import Table

    from ..jit import env

    table = Table("device", "name", "capability", "arch", "SMs", "smem/block (opt-in)",
                  "clusters", title="CUDA devices")
    for d in devices:
        table.add_row(str(d.ordinal), d.name, "%d.%d" % d.compute_capability,
                      d.arch or "unsupported", str(d.sm_count),
                      env.format_size(d.max_shared_memory_per_block_optin),
                      "yes" if d.cluster_launch else "no")
    out.print(table)


def _print_compiler(out) -> bool:
    """NVRTC and CUDA header lines; returns whether NVRTC is usable."""
    from ..cuda import nvrtc
    from ..errors import BackendUnavailableError

    try:
        version = ".".join(map(str, nvrtc.nvrtc_version()))
        path, found_via = nvrtc.nvrtc_library()
    except BackendUnavailableError as exc:
        out.print(f"NVRTC: unavailable: {exc}", markup=False)
        return False
    out.print(f"NVRTC: {version} ({path}, found via {found_via})", markup=False)
    return True


def _print_layers(out, cache, entries) -> None:
    from rich.table import Table

    from ..jit import env

    table = Table("layer", "path", "writable", "entries", "size", title="kernel cache")
    table.columns[1].overflow = "fold"
    for layer in cache.layers():
        mine = [e for e in entries if e.layer == layer]
        table.add_row(layer.kind, str(layer.path), "yes" if layer.writable else "no",
                      str(len(mine)), env.format_size(sum(e.disk_bytes for e in mine)))
    out.print(table)
    print_skipped_paths(out)
    print_unlisted(cache, entries, out)


def _print_cached_variants(out, cache, archs, *, for_devices: bool) -> None:
    """Which layer holds each default variant for each arch ("-": not cached; "n/a": not one of
    that arch's defaults, e.g. the workspace split where clusters exist)."""
    from rich.table import Table

    from ..cuda.variants import default_variants

    layers = cache.layers()

    def where(found) -> str:
        if found is None:
            return "-"
        return next((layer.kind for layer in layers
                     if found.path is not None and layer.path in found.path.parents), "memory")

    title = "default variants cached " + ("for this machine's devices" if for_devices
                                          else "(archs present in the cache)")
    table = Table(variant_column(), *archs, title=title)
    own = {arch: set(default_variants(arch)) for arch in archs}  # "n/a": never picked on that arch
    for variant in default_variants():
        table.add_row(variant.entry, *(where(cache.lookup(variant, arch)) if variant in own[arch] else "n/a"
                                       for arch in archs))
    out.print(table)
