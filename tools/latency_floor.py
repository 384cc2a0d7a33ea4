"""The fixed latency of one row (issue 5): GPU time under CUDA-graph replay with a cold L2 of a
single short row, one CTA, for several k, unsorted and sorted, against torch.topk. GPU only;
prints a table."""

import gpu_tool

gpu_tool.start("tools/latency_floor.py", gpu_tool.parser(__doc__))

import torch  # noqa: E402
from rich.table import Table  # noqa: E402

import deepselect_rt  # noqa: E402
from deepselect_rt import bench, cli  # noqa: E402
from deepselect_rt.cuda import backend  # noqa: E402

flush = torch.empty(bench.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
table = Table("width", "k", "unsorted us", "sorted us", "torch us",
              title="one bf16 row, one CTA, graph replay, cold L2")
for width in (1024, 16384):
    x = torch.randn(1, width, device="cuda").to(torch.bfloat16)
    for k in (8, 64, 512, 1000):
        idx = torch.empty(1, k, dtype=torch.int32, device="cuda")
        times = []
        for by_value in (False, True):
            with backend.forced_split(1):
                times.append(bench._time_graph(torch, lambda: deepselect_rt.topk(
                    x, k, output_idx=idx, indices_type="int32", return_value=False, nan_policy="sentinel",
                    sorted=by_value), flush, 30))
        peer = bench._time_graph(torch, lambda: torch.topk(x, k, dim=1, sorted=False), flush, 30)
        table.add_row(str(width), str(k), f"{times[0]:.1f}", f"{times[1]:.1f}", f"{peer:.1f}")
cli.console().print(table)
