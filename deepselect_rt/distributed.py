"""Exact top-k of rows whose columns are split over the ranks of a torch.distributed group.

Import it explicitly (``import deepselect_rt.distributed``): it imports torch, and
``import deepselect_rt`` does not import it.

Each rank holds a contiguous column shard of the same rows: a vocab-parallel LM head's logits
(sampling), or a context-parallel indexer's scores. ``topk`` gives every rank (or one, ``dst``)
the same answer, bit for bit, as ``deepselect_rt.topk`` on the rows put back together:

1. Each rank runs ``deepselect_rt.topk`` on its shard: the shard's own top-k by ascending column
   (``sorted_index=True``), indices made global with ``output_idx_offset`` (the shard's first
   global column), NaN ranked above +inf (``"propagate"``) whatever the caller's policy. Every
   element of the global top-k is in its shard's top-k, so these ``world * k`` candidates hold
   the answer.
2. The candidates, indices and values packed in one byte buffer, go to every rank in one
   ``all_gather`` (one ``gather`` with ``dst``).
3. A merging rank moves each row's valid candidates to the front, rank by rank (so a lower
   candidate column is a lower global column), with its count as ``end``; a shard's fill slots
   (short rows) fall past ``end`` and can never be selected, not even over a real -inf. A final
   ``deepselect_rt.topk`` over them, with the caller's ``sorted``, fills and NaN policy, then
   picks exactly what the whole row would give (ties to the lower global index), and the picked
   candidate columns are mapped back to global indices.

The number of valid candidates of row i on rank r is ``min(k, len)`` of the row's range clipped
to the shard, which every rank computes from ``begin``, ``end`` and the shard widths without
exchanging it.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.distributed as dist

from . import api, checks, dtypes
from .errors import NaNInputError
from .request import NAN_POLICIES

__all__ = ["topk"]

_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
                 "int32": torch.int32, "int64": torch.int64}
_INPUT_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_BITS = {2: torch.int16, 4: torch.int32}

# The arguments every rank must pass alike, in the order of the metadata exchange; each rank adds
# its width first and the maxima of host begin/end last.
_AGREED = ("rows (local.shape[0])", "k", "local's dtype", "indices_type", "sorted", "return_value", "nan_policy",
           "dst", "idx_oob_fill_value", "value_oob_fill_value")

# Shard boundaries as device tensors, by (device, boundaries): made once, so a repeated call does
# not copy them to the GPU (a synchronising copy) each time.
_BOUNDS: dict = {}
_BOUNDS_MAX = 64


def topk(local, k, *, group=None, dst=None, width_offsets=None, sorted=False, begin=None, end=None,
         indices_type="int64", return_value=True, nan_policy=None, abort_when_nan_found=True,
         idx_oob_fill_value=2**31 - 1, value_oob_fill_value=-math.inf):
    """Exact top-k of rows split by columns over the ranks of ``group``.

    Every rank of the group calls it with its own shard; the result is bit for bit that of
    ``deepselect_rt.topk`` on the rows put back together (shards in group-rank order) with the
    same arguments: ties to the lower global column, the same short-row fills and NaN handling.

    Args:
        local: this rank's shard, a torch tensor ``(rows, width_local)`` of bfloat16, float16 or
            float32 with stride 1 on the last dimension: global columns
            ``[offset, offset + width_local)``, where ``offset`` is the sum of the widths of the
            lower group ranks. Widths may differ between ranks, 0 included. On a CUDA device
            with an NCCL group, or on the CPU with a gloo group. Every rank has the same
            ``rows`` and dtype.
        k: the number of elements per row, an integer in ``[0, 2**31 - 1]`` with ``k *
            world_size`` at most ``2**31 - 1``. It may exceed a shard's width or the global width
            (rows are then short).
        group: the process group (default: the world group). Only its collectives are used: one
            small ``all_gather`` of each rank's width and arguments (not with ``width_offsets``)
            and one ``all_gather`` (``gather`` with ``dst``) of ``rows x k`` candidates a rank.
        dst: None (default): every rank gets the outputs. A global rank of ``group`` (as
            ``torch.distributed.gather`` takes): only that rank does; the others get
            ``(None, None)`` and send their candidates only.
        width_offsets: None (default): the widths are exchanged at each call (on NCCL this
            synchronises the host with the GPU once). Or a sequence of ``world_size + 1``
            integers, 0 first and non-decreasing: rank r holds global columns
            ``[width_offsets[r], width_offsets[r + 1])``, so the last is the global width. Then
            nothing but the candidates is exchanged, and the arguments are not compared between
            ranks: every rank must pass the same ones (a rank whose offsets do not match its
            shard raises, and the other ranks then wait in the exchange).
        sorted: values descending (ties by ascending global index). Otherwise the selected
            elements come by ascending global index, as in ``deepselect_rt.topk``.
        begin, end: optional ``(rows,)`` int32/int64 tensors on ``local``'s device, GLOBAL
            columns: row i selects from ``[begin[i], end[i])`` of the whole row (defaults 0 and
            the global width), the same tensor values on every rank: they are not compared
            between ranks. Each rank clips them to its shard. CPU tensors must satisfy
            ``0 <= begin <= end <= global width``; CUDA tensors are clamped into that range,
            without a sync.
        indices_type: "int32" or "int64" (default; a string, NumPy or torch dtype). int32 needs
            a global width of at most 2**31.
        return_value: when False the values are not returned (None); they are still exchanged,
            since the merge needs them.
        nan_policy, abort_when_nan_found: as in ``deepselect_rt.topk`` (default "raise"). A row
            holds NaN when any shard has one inside the row's range. "sentinel": such a row gets
            0x3F3F3F3F in every index slot and NaN values. "raise": the same, and the row goes to
            the NaN record of each merging rank's device; ``NaNInputError`` comes from that
            rank's next ``deepselect_rt`` call there, or from ``deepselect_rt.check_nan()``,
            and names the merge (dtype, ``rows x world*k``, k). "raise_sync": every merging rank
            raises ``NaNInputError`` naming the rows, after the exchange. "propagate": NaN
            ranks above +inf.
        idx_oob_fill_value, value_oob_fill_value: fills of a short row's slots past its
            elements (defaults 2**31 - 1 and -inf), as in ``deepselect_rt.topk``.

    Returns:
        ``(values, indices)`` on ``local``'s device: values ``(rows, k)`` of ``local``'s dtype
        (None when ``return_value`` is False), indices ``(rows, k)`` of ``indices_type``, global
        column numbers. ``(None, None)`` on the ranks other than ``dst``.

    Raises:
        TypeError: a wrong type or dtype (``local``, ``k``, ``group``, ``begin``, ``end``,
            ``dst``, ``width_offsets``, ``indices_type``, ``nan_policy``, the flags, the fills).
        ValueError: a wrong shape, range or combination, naming the argument: before any
            collective where this rank can tell alone; after the width exchange, on every rank
            alike, where ranks disagree (rows, k, dtype, arguments) or ``end`` exceeds the global
            width.
        RuntimeError: torch.distributed is not initialised, or a CUDA driver error (named).
        BackendUnavailableError, CompileError: as ``deepselect_rt.topk`` raises them for the
            local top-k and the merge.
        NaNInputError: under "raise_sync", on the merging ranks. A report an earlier call on
            this device left pending is raised at the end of this call, after its collectives
            (so that the other ranks are not left waiting), instead of returning outputs.

    A rank that raises before the collectives while the others do not (its arguments differ
    from theirs) leaves them waiting in the collective, as with any torch.distributed call.
    """
    rows, width, dtype = _check_local(local)
    k = _check_k(k)
    sc = checks.scalar_arguments(k, sorted, False, return_value, indices_type, nan_policy, abort_when_nan_found,
                                 idx_oob_fill_value, value_oob_fill_value, None)
    group = _check_group(group)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    dst_rank = _check_dst(dst, group, world)
    begin = _check_row_vector(begin, "begin", local)
    end = _check_row_vector(end, "end", local)
    host = _host_ranges(begin, end)

    if width_offsets is None:
        bounds = _exchange_widths(local, width, rows, dtype, sc, dst, host, group, world)
    else:
        bounds = _check_width_offsets(width_offsets, world, rank, width)
    total = bounds[-1]
    _check_global_ranges(host, total, who="")
    if sc.index_dtype == "int32" and total - 1 > checks.INT32_MAX:
        raise ValueError(f"indices_type int32 cannot hold the global columns of width {total} (over 2**31); "
                         "pass indices_type='int64'")
    if world * k > checks.INT32_MAX:
        raise ValueError(f"k * world_size must be at most 2**31 - 1 (the merge's row of candidates), got "
                         f"{k} * {world}")

    merging = dst_rank is None or rank == dst_rank
    itype, vtype = _TORCH_DTYPES[sc.index_dtype], local.dtype
    if rows == 0 or k == 0:
        if not merging:
            return None, None
        values = torch.empty((rows, k), dtype=vtype, device=local.device) if sc.return_value else None
        return values, torch.empty((rows, k), dtype=itype, device=local.device)

    begin_g, end_g = _global_ranges(begin, end, total)
    send, layout = _send_buffer(rows, k, itype, vtype, local.device)
    pending = None
    try:
        _local_candidates(local, k, bounds[rank], begin_g, end_g, itype, layout(send))
    except NaNInputError as err:  # an earlier call's report: keep in step with the other ranks first
        pending = err
        _local_candidates(local, k, bounds[rank], begin_g, end_g, itype, layout(send))

    recv = _exchange(send, group, world, dst)
    if pending is not None:
        raise pending
    if not merging:
        return None, None
    cand_idx, cand_val = layout(recv.view(world, -1))
    return _merge(cand_idx, cand_val, k, bounds, begin_g, end_g, sc, local.device)


def _check_local(local) -> tuple[int, int, str]:
    if not isinstance(local, torch.Tensor):
        raise TypeError(f"local must be a torch tensor, got {type(local).__name__}")
    if local.dim() != 2:
        raise ValueError(f"local must be 2-D (rows, width_local), got shape {tuple(local.shape)}")
    if local.dtype not in _INPUT_DTYPES:
        raise TypeError(f"local must have dtype bfloat16, float16 or float32, got {local.dtype}")
    rows, width = local.shape
    if width > 1 and rows > 0 and local.stride(1) != 1:
        raise ValueError(f"local's last dimension must have stride 1, got strides {local.stride()}")
    return rows, width, _INPUT_DTYPES[local.dtype]


def _check_k(k) -> int:
    number = None if isinstance(k, bool) else _index_or_none(k)
    if number is None:
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if not 0 <= number <= checks.INT32_MAX:
        raise ValueError(f"k must be in [0, 2**31 - 1], got {number}")
    return number


def _index_or_none(value):
    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_group(group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group first")
    if group is None:
        return dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}")
    if dist.get_rank(group) < 0:
        raise ValueError("this process is not a member of group")
    return group


def _check_dst(dst, group, world: int) -> int | None:
    """``dst``'s rank in ``group``, or None."""
    if dst is None:
        return None
    number = None if isinstance(dst, bool) else _index_or_none(dst)
    if number is None:
        raise TypeError(f"dst must be None or an integer (a global rank), got {type(dst).__name__}")
    if group is dist.group.WORLD:
        if not 0 <= number < world:
            raise ValueError(f"dst must be a rank in [0, {world}), got {number}")
        return number
    try:
        return dist.get_group_rank(group, number)
    except (ValueError, RuntimeError):
        raise ValueError(f"dst {number} is not a member of group") from None


def _check_row_vector(vec, name: str, local):
    if vec is None:
        return None
    if not isinstance(vec, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor or None, got {type(vec).__name__}")
    if vec.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must have dtype int32 or int64, got {vec.dtype}")
    if tuple(vec.shape) != (local.shape[0],):
        raise ValueError(f"{name} must have shape (rows,) = ({local.shape[0]},), got {tuple(vec.shape)}")
    if vec.device != local.device:
        raise ValueError(f"{name} is on {vec.device} but local is on {local.device}; they must be on the same device")
    return vec


def _host_ranges(begin, end) -> dict:
    """Checks of CPU begin/end that need no global width (0 <= begin <= end); returns the
    maxima the global width must bound (-1: none, or on a device, where values are clamped)."""
    b = begin if begin is not None and begin.device.type == "cpu" else None
    e = end if end is not None and end.device.type == "cpu" else None
    if e is not None and len(e) and int(e.min()) < 0:
        raise ValueError(f"end must be >= 0, got minimum {int(e.min())}")
    if b is not None and len(b) and int(b.min()) < 0:
        raise ValueError(f"begin must be >= 0, got minimum {int(b.min())}")
    if b is not None and e is not None and len(b):
        bad = torch.nonzero(b.long() > e.long()).flatten()
        if len(bad):
            row = int(bad[0])
            raise ValueError(f"begin must be <= end in every row: row {row} has begin {int(b[row])} > end {int(e[row])}")
    return {"begin": int(b.max()) if b is not None and len(b) else -1,
            "end": int(e.max()) if e is not None and len(e) else -1}


def _check_global_ranges(host: dict, total: int, who: str) -> None:
    if host["end"] > total:
        raise ValueError(f"end must be <= the global width {total}{who}, got maximum {host['end']}")
    if host["begin"] > total:
        raise ValueError(f"begin must be <= the global width {total}{who}, got maximum {host['begin']}")


def _check_width_offsets(width_offsets, world: int, rank: int, width: int) -> list[int]:
    if isinstance(width_offsets, torch.Tensor):
        width_offsets = width_offsets.tolist()
    try:
        bounds = [None if isinstance(v, bool) else _index_or_none(v) for v in width_offsets]
    except TypeError:
        raise TypeError(f"width_offsets must be a sequence of integers, got {type(width_offsets).__name__}") from None
    if None in bounds:
        raise TypeError(f"width_offsets must hold integers, got {list(width_offsets)!r}")
    if len(bounds) != world + 1:
        raise ValueError(f"width_offsets must have world_size + 1 = {world + 1} entries, got {len(bounds)}")
    if bounds[0] != 0 or any(b > c for b, c in zip(bounds, bounds[1:])):
        raise ValueError(f"width_offsets must start at 0 and never decrease, got {bounds}")
    if bounds[rank + 1] - bounds[rank] != width:
        raise ValueError(f"width_offsets gives rank {rank} columns [{bounds[rank]}, {bounds[rank + 1]}), "
                         f"{bounds[rank + 1] - bounds[rank]} wide, but local is {width} wide")
    return bounds


def _exchange_widths(local, width, rows, dtype, sc, dst, host, group, world: int) -> list[int]:
    """All-gather each rank's width and arguments; returns the shard boundaries. Raises the same
    ValueError on every rank where ranks disagree or an end exceeds the global width."""
    agreed = [rows, sc.k, dtypes.INPUT_DTYPES.index(dtype), dtypes.INDEX_DTYPES.index(sc.index_dtype),
              int(sc.sorted), int(sc.return_value), NAN_POLICIES.index(sc.nan_policy), -1 if dst is None else dst,
              sc.idx_fill, dtypes.double_bits(sc.val_fill)]
    mine = torch.tensor([width, *agreed, host["begin"], host["end"]], dtype=torch.int64)
    table = torch.empty(world * len(mine), dtype=torch.int64, device=local.device)
    _all_gather(table, mine.to(local.device), group)
    table = table.view(world, -1).tolist()  # on NCCL: waits for the exchange
    for column, name in enumerate(_AGREED, start=1):
        values = [entry[column] for entry in table]
        if len(set(values)) > 1:
            raise ValueError(f"ranks disagree on {name}: {_spelled(name, values)} by group rank; every rank "
                             "must pass the same")
    bounds = [0]
    for entry in table:
        bounds.append(bounds[-1] + entry[0])
    for r, entry in enumerate(table):
        _check_global_ranges({"begin": entry[-2], "end": entry[-1]}, bounds[-1], who=f" (on group rank {r})")
    return bounds


def _spelled(name: str, values: list[int]) -> list:
    if name == "local's dtype":
        return [dtypes.INPUT_DTYPES[v] for v in values]
    if name == "indices_type":
        return [dtypes.INDEX_DTYPES[v] for v in values]
    if name == "nan_policy":
        return [NAN_POLICIES[v] for v in values]
    if name in ("sorted", "return_value"):
        return [bool(v) for v in values]
    if name == "dst":
        return [None if v < 0 else v for v in values]
    if name == "value_oob_fill_value":
        return [dtypes.from_double_bits(v) for v in values]
    return values


def _global_ranges(begin, end, total: int):
    """begin and end as int64 clamped into ``0 <= begin <= end <= total`` (None stays None)."""
    end_g = None if end is None else end.long().clamp(0, total)
    if begin is None:
        return None, end_g
    begin_g = begin.long().clamp(0, total)
    return (begin_g if end_g is None else torch.minimum(begin_g, end_g)), end_g


def _send_buffer(rows: int, k: int, itype, vtype, device):
    """One byte buffer for a rank's candidates, indices first then values, each part padded to
    16 bytes (so both can be viewed in their dtypes in every rank's slice of the exchange), and
    the function that views a buffer ``(..., nbytes)`` as ``(indices, values)``, each
    ``(..., rows, k)``."""
    isize, vsize = itype.itemsize, vtype.itemsize
    idx_bytes = -(-rows * k * isize // 16) * 16
    val_bytes = -(-rows * k * vsize // 16) * 16

    def layout(buf):
        lead = buf.shape[:-1]
        idx = buf[..., :rows * k * isize].view(itype).view(*lead, rows, k)
        val = buf[..., idx_bytes:idx_bytes + rows * k * vsize].view(vtype).view(*lead, rows, k)
        return idx, val

    return torch.empty(idx_bytes + val_bytes, dtype=torch.uint8, device=device), layout


def _local_candidates(local, k: int, offset: int, begin_g, end_g, itype, out) -> None:
    """This shard's top-k by ascending global column into ``out = (indices, values)``; slots past
    the shard's elements in the row's range hold fills, never read by the merge."""
    out_idx, out_val = out
    rows, width = local.shape
    if width == 0:  # no element: every slot is a fill (written, so the bytes sent are defined)
        out_idx.fill_(checks.INT32_MAX)
        out_val.fill_(-math.inf)
        return
    lb = None if begin_g is None else (begin_g - offset).clamp_(0, width)
    le = None if end_g is None else (end_g - offset).clamp_(0, width)
    offsets = torch.full((rows,), offset, dtype=torch.int64, device=local.device)
    api.topk(local, k, sorted_index=True, begin=lb, end=le, indices_type=itype, output_idx=out_idx,
             output_val=out_val, output_idx_offset=offsets, nan_policy="propagate")


def _all_gather(out, tensor, group) -> None:
    gather_single = getattr(dist, "all_gather_single", None)  # torch >= 2.13; the older name warns there
    (gather_single or dist.all_gather_into_tensor)(out, tensor, group=group)


def _exchange(send, group, world: int, dst):
    """Every rank's buffer, ``(world * nbytes,)`` in group-rank order, on the merging ranks (an
    unused buffer on the others when ``dst`` is set)."""
    if dst is None:
        recv = torch.empty(world * send.numel(), dtype=torch.uint8, device=send.device)
        _all_gather(recv, send, group)
        return recv
    is_dst = dist.get_rank() == dst
    recv = torch.empty(world * send.numel() if is_dst else 0, dtype=torch.uint8, device=send.device)
    dist.gather(send, list(recv.view(world, -1).unbind(0)) if is_dst else None, dst=dst, group=group)
    return recv


def _valid_counts(bounds: list[int], begin_g, end_g, k: int, rows: int, device):
    """``(rows, world)`` int64: how many of rank r's k candidates of row i are elements (not
    fills): ``min(k, len)`` of the row's range clipped to rank r's shard."""
    key = (device, tuple(bounds))
    cached = _BOUNDS.get(key)
    if cached is None:
        if len(_BOUNDS) >= _BOUNDS_MAX:
            _BOUNDS.clear()
        b = torch.tensor(bounds, dtype=torch.int64, device=device)
        cached = _BOUNDS[key] = (b[:-1], b[1:] - b[:-1])
    starts, widths = cached
    lb = 0 if begin_g is None else torch.minimum((begin_g[:, None] - starts).clamp_(min=0), widths)
    le = widths.expand(rows, -1) if end_g is None else torch.minimum((end_g[:, None] - starts).clamp_(min=0), widths)
    return (le - lb).clamp_(0, k)


def _merge(cand_idx, cand_val, k: int, bounds: list[int], begin_g, end_g, sc, device):
    """The exact top-k of each row among ``cand_* (world, rows, k)``; returns the outputs."""
    world, rows, _ = cand_idx.shape
    widths = [b - a for a, b in zip(bounds, bounds[1:])]
    flat_idx = cand_idx.permute(1, 0, 2).contiguous().view(rows, world * k)
    flat_val = cand_val.permute(1, 0, 2).contiguous().view(rows, world * k)
    if begin_g is None and end_g is None and k <= min(widths):
        # Every candidate is an element: nothing to move, no fills, no range.
        count = total = valid = None
    else:
        count = _valid_counts(bounds, begin_g, end_g, k, rows, device)
        before = count.cumsum(1) - count  # valid candidates of the lower ranks
        total = count.sum(1)
        slot = torch.arange(k, device=device)
        valid = slot < count[:, :, None]
        # Valid candidates to the front in rank order, fills behind them in rank order: a
        # permutation of each row's world * k columns.
        fills_before = torch.arange(0, world * k, k, device=device)[:, None] - before[:, :, None] - count[:, :, None]
        to = torch.where(valid, before[:, :, None] + slot, total[:, None, None] + fills_before + slot)
        to = to.view(rows, world * k)
        flat_idx = torch.empty_like(flat_idx).scatter_(1, to, flat_idx)
        # Moved as integers: a float scatter quiets signalling NaNs, and the values must keep their bits.
        bits = _BITS[flat_val.element_size()]
        flat_val = torch.empty_like(flat_val).view(bits).scatter_(1, to, flat_val.view(bits)).view(flat_val.dtype)
    values, picked = api.topk(flat_val, k, sorted=sc.sorted, end=total, indices_type=_TORCH_DTYPES[sc.index_dtype],
                              idx_oob_fill_value=sc.idx_fill, value_oob_fill_value=sc.val_fill,
                              return_value=sc.return_value, nan_policy=sc.nan_policy)
    indices = flat_idx.gather(1, picked.long().clamp(0, world * k - 1))
    # Slots that are not candidates: fills of a short row, and every slot of a NaN row under the
    # sentinel policies; they keep what the merge wrote there.
    keep = None
    if total is not None:
        keep = torch.arange(k, device=device) >= total.clamp(max=k)[:, None]
    if sc.nan_policy != "propagate":
        has_nan = torch.isnan(cand_val).permute(1, 0, 2)
        if valid is not None:
            has_nan &= valid
        nan_rows = has_nan.reshape(rows, -1).any(1, keepdim=True)
        keep = nan_rows if keep is None else keep | nan_rows
    if keep is not None:
        indices = torch.where(keep, picked, indices)
    return values, indices
