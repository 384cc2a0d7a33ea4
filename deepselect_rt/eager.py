"""One call, run now: views -> checks -> request -> backend -> outputs.

A call repeated with the same tensors and arguments takes ``interop.repeat``'s fast path (no
checks, no plan); any other takes the whole path and, once it succeeded, may be remembered.
"""

from __future__ import annotations

import math

from . import checks, nan_record
from .errors import BackendUnavailableError
from .interop import repeat
from .interop.outputs import allocate, current_stream
from .interop.views import TensorView, view_of
from .request import TopkRequest


def _backend(x: TensorView):
    if x.device_type == "cpu":
        from . import host

        return host
    if x.is_cuda:  # managed memory too: the kernels read it as device memory
        from .cuda import backend

        return backend
    if x.device_type == "npu":
        from .ascend import backend

        return backend
    raise BackendUnavailableError(f"no backend for tensors on device type {x.device_type!r}; "
                                  "accepted: cpu (NumPy reference), cuda, cuda_managed, npu")


def topk(input, topk, sorted=False, begin=None, end=None, indices_type="int64", sorted_index=False,
               output_idx=None, output_val=None, output_idx_offset=None, idx_oob_fill_value=2**31 - 1,
               value_oob_fill_value=-math.inf, return_value=True, abort_when_nan_found=True,
               nan_policy=None, stream=None, *, page_table=None, page_size=None, row_to_batch=None,
               k_per_row=None, return_raw_indices=False, output_raw_idx=None):
    """``api.topk`` run now, on real tensors (the torch custom op's implementation calls this;
    under torch.compile ``api.topk`` goes through that op). Same arguments, results and errors."""
    serving = None
    if (page_table is not None or page_size is not None or row_to_batch is not None or k_per_row is not None
            or output_raw_idx is not None or return_raw_indices is not False):  # no generator: this runs every call
        serving = (page_table, page_size, row_to_batch, k_per_row, return_raw_indices, output_raw_idx)
    call_key = repeat.key(input, topk, sorted, begin, end, indices_type, sorted_index, output_idx, output_val,
                          output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value,
                          abort_when_nan_found, nan_policy, stream, serving)
    if call_key is not None:
        done = repeat.run(call_key, output_idx, output_val, output_raw_idx)
        if done is not None:
            return done
    # An explicit stream is known before the views: a DLPack producer (CuPy, JAX) then orders its
    # pending writes of each array before that stream, the one the kernel runs on.
    explicit_stream = checks.stream_handle(stream)
    x = view_of(input, name="input", stream=explicit_stream)
    checks.check_input(x)
    nan_record.raise_pending(("cuda" if x.is_cuda else x.device_type, x.device_id))
    begin_v = checks.row_vector(begin, "begin", x, explicit_stream)
    end_v = checks.row_vector(end, "end", x, explicit_stream)
    return _run(x, input, topk, sorted, begin_v, end_v, False, indices_type, sorted_index, output_idx, output_val,
                output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value, abort_when_nan_found,
                nan_policy, explicit_stream, page_table, page_size, row_to_batch, k_per_row, return_raw_indices,
                output_raw_idx, call_key)


def ragged_topk(input, cu_seqlens, topk, sorted=False, indices_type="int64", sorted_index=False, output_idx=None,
                output_val=None, output_idx_offset=None, idx_oob_fill_value=2**31 - 1,
                value_oob_fill_value=-math.inf, return_value=True, abort_when_nan_found=True, nan_policy=None,
                stream=None, *, page_table=None, page_size=None, row_to_batch=None, k_per_row=None,
                return_raw_indices=False, output_raw_idx=None):
    """``api.ragged_topk`` run now: the packed rows as ``(rows, total)`` rows of stride 0 with
    ``begin``/``end`` from ``cu_seqlens`` and indices counted from each row's begin (no new
    kernel: the kernels' ``DS_F_RELATIVE`` flag subtracts begin)."""
    explicit_stream = checks.stream_handle(stream)
    flat = view_of(input, name="input", stream=explicit_stream)
    x, begin_v, end_v = checks.ragged_views(flat, cu_seqlens, explicit_stream)
    checks.check_input(x)
    nan_record.raise_pending(("cuda" if x.is_cuda else x.device_type, x.device_id))
    return _run(x, input, topk, sorted, begin_v, end_v, True, indices_type, sorted_index, output_idx, output_val,
                output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value, abort_when_nan_found,
                nan_policy, explicit_stream, page_table, page_size, row_to_batch, k_per_row, return_raw_indices,
                output_raw_idx, None)


def _run(x, input, topk, sorted, begin_v, end_v, relative, indices_type, sorted_index, output_idx, output_val,
         output_idx_offset, idx_oob_fill_value, value_oob_fill_value, return_value, abort_when_nan_found, nan_policy,
         explicit_stream, page_table, page_size, row_to_batch, k_per_row, return_raw_indices, output_raw_idx,
         call_key):
    """The rest of a call once the input ``x`` and its row range views are made."""
    rows, width = x.shape
    sc = checks.scalar_arguments(topk, sorted, sorted_index, return_value, indices_type, nan_policy,
                          abort_when_nan_found, idx_oob_fill_value, value_oob_fill_value, output_val)
    k, index_dtype = sc.k, sc.index_dtype
    offsets_v = checks.row_vector(output_idx_offset, "output_idx_offset", x, explicit_stream)
    begin_host, end_host = checks.host_values(begin_v), checks.host_values(end_v)
    if not relative:  # ragged_views checked cu_seqlens
        checks.check_ranges(begin_host, end_host, x)
    checks.check_offsets(offsets_v, begin_host, end_host, index_dtype, x, relative)
    serving = checks.serving_arguments(page_table, page_size, row_to_batch, k_per_row, return_raw_indices,
                                       output_raw_idx, k, sc.sorted_index, x, explicit_stream)
    checks.check_page_positions(serving, begin_host, end_host, offsets_v, begin_v is not None, end_v is not None,
                                relative, x)
    inputs = {"input": x, "begin": begin_v, "end": end_v, "output_idx_offset": offsets_v,
              "page_table": serving.page_table, "row_to_batch": serving.row_to_batch, "k_per_row": serving.k_per_row}
    if relative:
        inputs["cu_seqlens"], inputs["cu_seqlens[1:]"] = inputs.pop("begin"), inputs.pop("end")
    out_idx = None if output_idx is None else checks.caller_output(output_idx, "output_idx", index_dtype, rows, k, x,
                                                              inputs, explicit_stream)
    out_val = None if output_val is None else checks.caller_output(output_val, "output_val", x.dtype, rows, k, x,
                                                              {**inputs, "output_idx": out_idx}, explicit_stream)
    out_raw = None if output_raw_idx is None else checks.caller_output(
        output_raw_idx, "output_raw_idx", index_dtype, rows, k, x,
        {**inputs, "output_idx": out_idx, "output_val": out_val}, explicit_stream)
    stream_handle = explicit_stream if explicit_stream is not None else current_stream(x)
    backend = _backend(x) if rows and k else None

    idx_alloc = val_alloc = raw_alloc = None
    if out_idx is None:
        idx_alloc = allocate(x, (rows, k), index_dtype, explicit_stream)
        out_idx = idx_alloc.view
    if sc.return_value and out_val is None:
        val_alloc = allocate(x, (rows, k), x.dtype, explicit_stream)
        out_val = val_alloc.view
    if serving.return_raw and out_raw is None:
        raw_alloc = allocate(x, (rows, k), index_dtype, explicit_stream)
        out_raw = raw_alloc.view
    again = None
    if backend is not None:
        req = TopkRequest(
            x=x, k=k, begin=begin_v, end=end_v, offsets=offsets_v, index_dtype=index_dtype,
            sorted=sc.sorted, sorted_index=sc.sorted_index, return_value=sc.return_value,
            nan_policy=sc.nan_policy, idx_fill=sc.idx_fill, val_fill=sc.val_fill, out_idx=out_idx, out_val=out_val,
            stream=stream_handle, page_table=serving.page_table, page_size=serving.page_size,
            row_to_batch=serving.row_to_batch, k_per_row=serving.k_per_row, out_raw=out_raw, relative=relative,
        )
        again = backend.run(req)
    indices = idx_alloc.result() if idx_alloc is not None else output_idx
    values = None
    if sc.return_value:
        values = val_alloc.result() if val_alloc is not None else output_val
    raw = None
    if serving.return_raw:
        raw = raw_alloc.result() if raw_alloc is not None else output_raw_idx
    if call_key is not None and again is not None:
        repeat.remember(call_key, again, input, indices, values, raw, idx_alloc is not None, val_alloc is not None,
                        raw_alloc is not None)
    if serving.return_raw:
        return values, indices, raw
    return values, indices
