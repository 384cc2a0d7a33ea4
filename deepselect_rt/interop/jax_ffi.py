"""Every use of JAX's private API and version-dependent behaviour, in one place.

- ``check_version``: the oldest JAX the traced route (``interop/jax.py``) is written for.
- ``register_gpu_lowering``: the CUDA lowering of ``deepselect_rt_topk``. Where it can, it
  lowers the call to jaxlib's kernel-call custom call, ``triton_kernel_call_ffi``: XLA launches
  our NVRTC kernel on its own stream into the buffers it allocated. The target and its
  descriptor (``jaxlib/gpu/triton.proto``, written by ``interop/kernel_call_proto.py``) are
  private to jaxlib, used here as jax-triton and Pallas use them; the custom call is emitted
  through the public ``jax.ffi.ffi_lowering`` with the zlib-compressed descriptor as its
  ``opaque`` attribute. Where jaxlib's plugin loads module images (it registers an
  ``instantiate`` handler, jaxlib 0.11.1 on), the descriptor carries the cubin the eager path
  loads; before that, PTX, which jaxlib assembles with ptxas. A call whose eager plan that
  launcher cannot carry (clusters of more than 8 CTAs) lowers instead to deepselect-rt's own
  FFI target, ``OWN_TARGET``: a Python handler (``interop/xla_ffi_handler.py``, public FFI C
  ABI) that launches the eager plan on XLA's stream (``cuda/xla_launch.py``). Elsewhere (no
  CUDA plugin, jaxlib too old, no CUDA driver bindings or NVRTC for deepselect-rt,
  nan_policy="raise" with several GPUs, XLA refusing OWN_TARGET's registration) the host
  callback serves, with a warning saying why.
"""

from __future__ import annotations

import re
import threading
import warnings
import zlib

import jax

from ..errors import BackendUnavailableError
from . import kernel_call_proto, xla_ffi_handler

#: The oldest JAX the traced route is written for: ``jax.ffi`` and ``pure_callback``'s
#: ``vmap_method`` (0.4.34+), ``jax.extend.core.Primitive``. Tested with jax 0.10.2.
MIN_JAX = (0, 5, 0)
#: The oldest jaxlib whose CUDA plugin registers ``triton_kernel_call_ffi`` (jaxlib/gpu/triton.cc,
#: ``Registrations``, since 0.10.1) with the 7-argument ``TritonKernel`` (num_ctas, since 0.9.0).
MIN_JAXLIB_KERNEL_CALL = (0, 10, 1)
TARGET = "triton_kernel_call_ffi"
#: deepselect-rt's own FFI target (a Python handler), for plans TARGET's launcher cannot carry.
OWN_TARGET = "deepselect_rt_topk_launch"


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.10.2.dev20260101"`` -> ``(0, 10, 2)``: the leading release numbers."""
    numbers = []
    for part in text.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


def check_version(version: str | None = None) -> None:
    """Raises BackendUnavailableError when ``version`` (default: the installed jax's) is older
    than MIN_JAX, naming both and what still works."""
    version = jax.__version__ if version is None else version
    if version_tuple(version) < MIN_JAX:
        raise BackendUnavailableError(
            f"deepselect_rt.topk inside jax.jit, jax.vmap or jax.grad needs jax >= "
            f"{'.'.join(map(str, MIN_JAX))}, found jax {version}; upgrade jax, or call topk on concrete "
            "jax.Arrays outside the transformation")


def kernel_call_route() -> tuple[str | None, str | None]:
    """How jaxlib's kernel-call target takes our kernel: ("image", None) where its CUDA plugin
    loads module images, ("ptx", None) where it assembles PTX only, or (None, why it cannot be
    used)."""
    try:
        import jaxlib.version
        from jax._src.lib import gpu_triton
    except ImportError as exc:
        return None, f"jaxlib's kernel-call bindings cannot be imported ({exc})"
    found = jaxlib.version.__version__
    if version_tuple(found) < MIN_JAXLIB_KERNEL_CALL:
        return None, (f"jaxlib {found} is older than {'.'.join(map(str, MIN_JAXLIB_KERNEL_CALL))}, whose CUDA "
                      f"plugin registers {TARGET}")
    plugin = getattr(gpu_triton, "_cuda_triton", None)
    handlers = None if plugin is None else plugin.registrations().get(TARGET)
    if handlers is None:
        return None, f"JAX's CUDA plugin does not register {TARGET}"
    return ("image" if isinstance(handlers, dict) and "instantiate" in handlers else "ptx"), None


def register_gpu_lowering(primitive, fallback) -> None:
    """Register ``primitive``'s CUDA lowering: the kernel-call custom call where it can be used,
    else ``fallback`` (a lowering rule with the primitive's signature: the host callback)."""
    from jax.interpreters import mlir

    def lowering(ctx, *operands, call):
        route, why = kernel_call_route()
        if route is not None:
            try:
                return _kernel_lowering(route, ctx, operands, call)
            except BackendUnavailableError as exc:  # no CUDA driver bindings or NVRTC here
                why = str(exc)
            except _Unsupported as exc:
                why = str(exc)
        _warn_once(why)
        return fallback(ctx, *operands, call=call)

    mlir.register_lowering(primitive, lowering, platform="cuda")


class _Unsupported(Exception):
    """A call the kernel route does not take (the callback does)."""


def _kernel_lowering(route: str, ctx, operands, call):
    from ..cuda import xla_call, xla_launch
    from ..dtypes import canonical

    x, *vectors = ctx.avals_in
    rows, width = x.shape
    device, dtype = target_device(call.nan_policy), canonical(x.dtype)
    given = {name: canonical(aval.dtype) for name, aval in zip(call.vectors, vectors)}
    options = dict(index_dtype=call.index_dtype, sorted=call.sorted, return_value=call.return_value,
                   nan_policy=call.nan_policy, idx_fill=call.idx_fill, val_fill=call.val_fill)
    if xla_launch.needs_own_launch(device, dtype, rows, width, call.k, "begin" in given):
        _register_own_target()
        xla_launch.prepare(device, dtype, rows, width, call.k, "begin" in given)
        spec = xla_launch.spec(dtype, rows, width, call.k, given, **options)
        return jax.ffi.ffi_lowering(OWN_TARGET)(ctx, *operands, spec=spec)
    launch = xla_call.kernel_call(device, dtype, rows, width, call.k, given, image=route == "image", **options)
    opaque = zlib.compress(kernel_call_proto.encode(
        launch.entry, launch.threads, launch.cluster, launch.smem, launch.compute_capability, launch.grid,
        launch.params, launch.entry, ptx=launch.ptx, image=launch.image))
    # The kernel's buffers come indices first; the primitive returns values first.
    order = [len(ctx.avals_out) - 1] + list(range(len(ctx.avals_out) - 1))
    inner = ctx.replace(avals_out=[ctx.avals_out[i] for i in order])
    results = jax.ffi.ffi_lowering(TARGET)(inner, *operands, opaque=opaque)
    return [results[order.index(i)] for i in range(len(order))]


def _register_own_target() -> None:
    """Registers OWN_TARGET's handler with XLA, once (XLA refuses a second handler under the
    name): ``cuda/xla_launch.py`` runs each execution. Raises _Unsupported when XLA refuses it."""
    global _own_registered
    with _own_lock:
        if _own_registered:
            return
        from ..cuda import xla_launch

        def execute(frame: xla_ffi_handler.Frame) -> None:
            xla_launch.execute(frame.attrs["spec"], frame.stream(), frame.args, frame.rets, frame.shapes)

        try:
            jax.ffi.register_ffi_target(OWN_TARGET, xla_ffi_handler.capsule(execute), platform="CUDA")
        except Exception as exc:  # XLA's own error type differs between jaxlib versions
            raise _Unsupported(f"XLA refused to register {OWN_TARGET} ({exc})") from None
        _own_registered = True


_own_registered = False
_own_lock = threading.Lock()


def target_device(nan_policy: str) -> int:
    """The CUDA ordinal the call is planned and compiled for: JAX's first GPU (one model of GPU
    a process is assumed, as jax-triton and Pallas assume it)."""
    devices = jax.devices("gpu")
    if nan_policy == "raise" and len(devices) > 1:
        # The NaN record is per device and its address goes into the compiled call.
        raise _Unsupported("nan_policy='raise' under jax.jit on several GPUs (pass 'sentinel' or 'propagate' "
                           "for the kernel route)")
    ordinal = getattr(devices[0], "local_hardware_id", None)
    return devices[0].id if ordinal is None else ordinal


_warned: set = set()


def _warn_once(why: str) -> None:
    if why not in _warned:
        _warned.add(why)
        warnings.warn(f"deepselect_rt.topk under jax.jit on CUDA runs through a host callback (slow: the arrays "
                      f"go to the host and back) because {why}", RuntimeWarning, stacklevel=3)
