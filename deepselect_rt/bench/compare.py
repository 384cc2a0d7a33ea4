"""Two runs of the same cases side by side: how each case's time moved from a baseline run to a
new one, beside how torch.topk's moved between the same two runs (what the machine alone moved,
as a scale for the noise). Used by ``deepselect-rt bench --against``."""

from __future__ import annotations

from dataclasses import dataclass

from .grid import Case, Result

# A case whose time grew by more than this factor counts as slower: repeated runs of one version
# on one GPU differ by up to about this much.
SLOWER = 1.03


@dataclass(frozen=True)
class Change:
    """One case in both runs. Times in us: CUDA-graph replay where both runs timed it for both
    libraries (``graph``), else CUDA events."""

    case: Case
    ours_new: float
    ours_old: float
    torch_new: float
    torch_old: float
    graph: bool

    @property
    def ratio(self) -> float:
        """Our new time over our baseline time."""
        return self.ours_new / self.ours_old

    @property
    def torch_ratio(self) -> float:
        """torch.topk's time in the new run over its time in the baseline run."""
        return self.torch_new / self.torch_old


def _times(result: Result, graph: bool) -> tuple[float, float]:
    if graph:
        return result.ours_graph_us, result.torch_graph_us
    return result.ours_us, result.torch_us


def _has_graph(result: Result) -> bool:
    return result.ours_graph_us is not None and result.torch_graph_us is not None


def pair(new: list[Result], old: list[Result]) -> tuple[list[Change], list[Case], list[Case]]:
    """(a Change for every case in both runs, in ``new``'s order; the cases only in ``new``; the
    cases only in ``old``). A case is its whole description (``Case`` equality)."""
    before = {r.case: r for r in old}
    changes, only_new = [], []
    for r in new:
        base = before.get(r.case)
        if base is None:
            only_new.append(r.case)
            continue
        graph = _has_graph(r) and _has_graph(base)
        ours_new, torch_new = _times(r, graph)
        ours_old, torch_old = _times(base, graph)
        changes.append(Change(r.case, ours_new, ours_old, torch_new, torch_old, graph))
    seen = {r.case for r in new}
    return changes, only_new, [r.case for r in old if r.case not in seen]


def slower(changes: list[Change], factor: float = SLOWER) -> list[Change]:
    """The changes whose new time is over ``factor`` times the baseline's at the three decimals
    the ratio is shown with (1.0304 reads 1.030, not over 1.03), slowest first."""
    return sorted((c for c in changes if round(c.ratio, 3) > factor), key=lambda c: -c.ratio)


__all__ = ["Change", "SLOWER", "pair", "slower"]
