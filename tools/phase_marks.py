"""clock64 marks in a copy of the kernels, for the tools that say where a kernel's time goes
(tools/cluster_phases.py, tools/stream_phases.py).

A tool lists its marks as (file, anchor, replacement) edits; ``marked_copy`` puts them into a
temporary copy of a tree's package and kernels, whose kernels then define, for thread 0 of each
of the first ``MARK_CTAS`` CTAs and slot i of its row of 128 in a ``__device__`` array
``ds_phase``: ``DS_MARK(i)``, after a ``__syncthreads`` of the whole CTA, stores clock64 at slot
i and %globaltimer at slot 64 + i; ``DS_MARK_FIRST(i)`` does so only where slot i is still empty
(a step that may run twice: its first time); ``DS_COUNT(i)`` adds 1 and ``DS_VALUE(i, v)``
stores v, without a barrier (slots a tool keeps for counts). ``read_marks`` copies the array
back after a call, ``step_cycles`` turns marks into cycles per step. The barriers add ~100
cycles a mark.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

MARK_CTAS = 8192
SLOTS = 128

MARK_HOOK = r"""
#define DS_MARK_CTAS %(ctas)d
#define DS_SLOTS %(slots)d
__device__ unsigned long long ds_phase[DS_MARK_CTAS * DS_SLOTS];
// Slot i of this CTA's row, for thread 0 of a CTA whose marks are kept; else null.
__device__ __forceinline__ unsigned long long* ds_slot(int i) {
    return threadIdx.x == 0 && blockIdx.x < DS_MARK_CTAS ? ds_phase + blockIdx.x * DS_SLOTS + i : nullptr;
}
__device__ __forceinline__ void ds_mark(int i, bool first_only) {
    __syncthreads();
    unsigned long long* s = ds_slot(i);
    if (s && !(first_only && *s)) {
        unsigned long long g;
        asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(g));
        s[0] = clock64();
        s[64] = g;
    }
}
#define DS_MARK(i) ds_mark(i, false)
#define DS_MARK_FIRST(i) ds_mark(i, true)
#define DS_COUNT(i) do { if (unsigned long long* s = ds_slot(i)) ++*s; } while (0)
#define DS_VALUE(i, v) do { if (unsigned long long* s = ds_slot(i)) *s = (v); } while (0)
""" % {"ctas": MARK_CTAS, "slots": SLOTS}

# Headers that take marks define them away when the kernel that includes them has none.
NO_MARKS = "#ifndef DS_MARK\n#define DS_MARK(i)\n#define DS_MARK_FIRST(i)\n#define DS_COUNT(i)\n#define DS_VALUE(i, v)\n#endif\n"


def marked_copy(tree: Path, edits: dict[str, list[tuple[str, str]]], tool: str) -> Path:
    """A temporary copy of ``tree``'s package and kernels with ``edits`` ({file: [(anchor,
    replacement)]}) made; exits naming the anchor where a file no longer holds it exactly once."""
    dest = Path(tempfile.mkdtemp(prefix="ds-phases-"))
    atexit.register(shutil.rmtree, dest, True)
    for folder in ("deepselect_rt", "kernels_cu", "cache"):
        if (tree / folder).exists():
            shutil.copytree(tree / folder, dest / folder)
    for name, file_edits in edits.items():
        path = dest / name
        text = path.read_text()
        for anchor, replacement in file_edits:
            if text.count(anchor) != 1:
                sys.exit(f"{tool}: {name} no longer has this anchor once:\n{anchor}")
            text = text.replace(anchor, replacement)
        path.write_text(text)
    return dest


def read_marks(module, driver, torch, variant, ctas: int) -> np.ndarray:
    """The slots (``ctas`` x SLOTS, int64: clock64 at 0-63, %globaltimer ns at 64-127) that the
    last call of ``variant`` left, after zeroing them for the next call."""
    if ctas > MARK_CTAS:
        raise ValueError(f"marks are kept for {MARK_CTAS} CTAs, not {ctas}")
    ptr, size = module.kernel_global(0, variant, "ds_phase")
    torch.cuda.synchronize()
    buf = torch.empty(size // 8, dtype=torch.int64)
    module.check(driver.cuMemcpyDtoH(buf.data_ptr(), ptr, size), "cuMemcpyDtoH")
    module.check(driver.cuMemsetD8(ptr, 0, size), "cuMemsetD8")
    return buf.numpy().reshape(MARK_CTAS, SLOTS)[:ctas].copy()


def step_cycles(marks: np.ndarray, order: list[tuple[str, int]], first: int, last: int) -> dict:
    """{step: (median over calls of the median CTA's cycles, of the slowest CTA's)} for the steps
    ``order`` ([(name, slot at its end)], each from the previous slot, the first from ``first``),
    and "total" from ``first`` to ``last``. ``marks``: calls x CTAs x slots."""
    out, prev = {}, first
    for name, slot in order + [("total", last)]:
        delta = marks[:, :, slot] - marks[:, :, prev if name != "total" else first]
        out[name] = (float(np.median(np.median(delta, axis=1))), float(np.median(delta.max(axis=1))))
        prev = slot
    return out


if __name__ == "__main__":
    sys.exit("tools/phase_marks.py is shared by the phase tools, not a tool: run tools/stream_phases.py "
             "or tools/cluster_phases.py")
