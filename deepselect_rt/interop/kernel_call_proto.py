"""The bytes jaxlib's kernel-call custom call takes as its ``opaque`` attribute (before zlib): a
``TritonAnyKernelCall`` message of ``jaxlib/gpu/triton.proto``, written here field by field.

Written here rather than through jaxlib's bindings (``TritonKernel(...).to_proto``) because those
bindings cannot attach a module image: a kernel compiled to machine code ahead of time. With one
attached (``TritonKernel.module_image``, read by jaxlib's plugins that also register an
``instantiate`` handler), XLA loads our NVRTC cubin as it is, and the kernel's ``ptx`` field
holds only a short digest of that cubin: jaxlib rebuilds the kernel description from the proto
on every execution and looks its loaded image up by that field, so a digest there costs a few
bytes where the whole PTX text costs a copy and a hash of it per call.

Pure encoding: no JAX, no GPU. Proto3 rules: scalar fields at their zero value are left out,
fields that track presence (``optional``, members of a ``oneof``, messages) are written when set.
"""

from __future__ import annotations

import hashlib

# Field numbers (jaxlib/gpu/triton.proto).
_ANY_KERNEL_CALL, _ANY_NAME = 1, 4
_CALL_KERNEL, _CALL_GRID, _CALL_PARAMETERS = 1, (2, 3, 4), 5
_KERNEL_NAME, _NUM_WARPS, _SHARED_MEM, _PTX, _COMPUTE_CAPABILITY, _NUM_CTAS, _MODULE_IMAGE = 1, 2, 3, 4, 6, 10, 11
_IMAGE_OBJECT_FILE, _IMAGE_KERNEL_NAME, _IMAGE_SHARED_MEM = 1, 2, 3
_PARAM_ARRAY, _PARAM_I64, _PARAM_U64 = 1, 5, 6
_ARRAY_PTR_DIVISIBILITY = 2

_VARINT, _LENGTH_DELIMITED = 0, 2


def _varint(value: int) -> bytes:
    """Base-128 varint; a negative int64 goes as its 64-bit two's complement (ten bytes)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int_field(field: int, value: int, present: bool = False) -> bytes:
    """A varint field; left out at zero unless it tracks presence (``present``)."""
    return _tag(field, _VARINT) + _varint(value) if value or present else b""


def _bytes_field(field: int, value: bytes, present: bool = False) -> bytes:
    return _tag(field, _LENGTH_DELIMITED) + _varint(len(value)) + value if value or present else b""


def image_digest(image: bytes) -> str:
    """What stands in the ``ptx`` field beside a module image: unique to the image's bytes, since
    jaxlib keys its loaded images by (kernel name, shared memory, this text, compute capability)."""
    return "deepselect-rt cubin sha256:" + hashlib.sha256(image).hexdigest()


def _parameter(kind: str, value: int) -> bytes:
    if kind == "buffer":
        # bytes_to_zero stays 0; jaxlib fails the call if the buffer's address is not a multiple
        # of a nonzero ptr_divisibility (value).
        body = _bytes_field(_PARAM_ARRAY, _int_field(_ARRAY_PTR_DIVISIBILITY, value), present=True)
    elif kind == "i64":
        body = _int_field(_PARAM_I64, value, present=True)
    elif kind == "u64":
        body = _int_field(_PARAM_U64, value, present=True)
    else:
        raise ValueError(f"unknown kernel parameter kind {kind!r}; expected 'buffer', 'i64' or 'u64'")
    return _bytes_field(_CALL_PARAMETERS, body, present=True)


def encode(entry: str, threads: int, cluster: int, smem: int, compute_capability: int, grid: int,
           params: tuple, name: str, *, ptx: str = "", image: bytes = b"") -> bytes:
    """The serialized ``TritonAnyKernelCall``: ``entry`` launched on ``grid`` clusters of
    ``cluster`` CTAs of ``threads`` threads with ``smem`` bytes of dynamic shared memory, one
    parameter per ``params`` item (``("buffer", d)`` for the next XLA buffer, whose address must
    be a multiple of ``d`` bytes when ``d`` > 0; ``("i64" | "u64", value)``). The code is either
    ``ptx`` (jaxlib assembles it for ``compute_capability``) or ``image``, machine code for
    exactly that compute capability (major * 10 + minor). ``name`` labels the call in jaxlib's
    errors. ValueError when neither or both are given."""
    if bool(ptx) == bool(image):
        raise ValueError("a kernel call carries either PTX text or a module image, exactly one of them")
    kernel = b"".join((
        _bytes_field(_KERNEL_NAME, entry.encode()),
        _int_field(_NUM_WARPS, threads // 32),
        _int_field(_SHARED_MEM, smem),
        _bytes_field(_PTX, (ptx or image_digest(image)).encode()),
        _int_field(_COMPUTE_CAPABILITY, compute_capability),
        _int_field(_NUM_CTAS, cluster, present=True),
    ))
    if image:
        kernel += _bytes_field(_MODULE_IMAGE, b"".join((
            _bytes_field(_IMAGE_OBJECT_FILE, image),
            _bytes_field(_IMAGE_KERNEL_NAME, entry.encode()),
            _int_field(_IMAGE_SHARED_MEM, smem),
        )), present=True)
    call = b"".join((
        _bytes_field(_CALL_KERNEL, kernel, present=True),
        *(_int_field(field, size) for field, size in zip(_CALL_GRID, (grid, 1, 1))),
        *(_parameter(kind, value) for kind, value in params),
    ))
    return _bytes_field(_ANY_KERNEL_CALL, call, present=True) + _bytes_field(_ANY_NAME, name.encode())
