"""The cases of tests/test_distributed.py, run inside each process of a gloo group.

Every rank builds the same global rows from the same seed, passes its column shard to
``deepselect_rt.distributed.topk`` and compares the outputs, bit for bit, with
``deepselect_rt.topk`` on the whole rows (the CPU reference). A mismatch is recorded, never
raised, so that the ranks stay in step through the following collectives; each rank writes what
it checked, what failed and how long it took, by case group, to ``rank<r>.json``.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import deepselect_rt
from deepselect_rt import distributed as dtopk
from deepselect_rt.errors import NaNInputError

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
# A quiet NaN, a negative NaN and one with a payload, per dtype's bits.
_NANS = {torch.float32: (0x7FC00000, -0x00400000, 0x7F800001), torch.float16: (0x7E00, -0x0200, 0x7C01),
         torch.bfloat16: (0x7FC0, -0x0040, 0x7F81)}
TIE_VALUES = (-math.inf, -1.0, -0.0, 0.0, 1.0, math.inf)


class Cases:
    """One rank's view of the case groups: the group, a shared seed, and the tally."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.checked = 0
        self.failures: list[str] = []

    def fail(self, what: str) -> None:
        self.failures.append(f"rank {self.rank}: {what}")

    # --- inputs ---------------------------------------------------------------------------

    @staticmethod
    def split(rnd: random.Random, width: int, world: int) -> list[int]:
        """Shard boundaries: ``world`` contiguous parts of ``width`` columns, some maybe empty."""
        cuts = sorted(rnd.randint(0, width) for _ in range(world - 1))
        return [0, *cuts, width]

    @staticmethod
    def values(rnd: random.Random, rows: int, width: int, dtype, ties: bool = False) -> torch.Tensor:
        gen = torch.Generator().manual_seed(rnd.randrange(2**31))
        if ties:
            pick = torch.randint(0, len(TIE_VALUES), (rows, width), generator=gen)
            return torch.tensor(TIE_VALUES)[pick].to(dtype)
        return torch.randn(rows, width, generator=gen).to(dtype)

    @staticmethod
    def ranges(rnd: random.Random, rows: int, width: int, dtype=torch.int64):
        begin, end = [], []
        for _ in range(rows):
            b = rnd.randint(0, width)
            begin.append(b)
            end.append(rnd.randint(b, width))
        return torch.tensor(begin, dtype=dtype), torch.tensor(end, dtype=dtype)

    @staticmethod
    def put_nan(x: torch.Tensor, row: int, col: int, variant: int = 0) -> None:
        x.view(_BITS[x.dtype])[row, col] = _NANS[x.dtype][variant]

    # --- one comparison -------------------------------------------------------------------

    def same(self, what, got, want) -> bool:
        """Outputs equal bit for bit; ``what()`` names the case in a failure."""
        if got is None or want is None:
            if got is not want:
                self.fail(f"{what()}: got {type(got).__name__}, want {type(want).__name__}")
                return False
            return True
        if got.dtype != want.dtype or got.shape != want.shape:
            self.fail(f"{what()}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
            return False
        a, b = (t.view(_BITS[t.dtype]) if t.is_floating_point() else t for t in (got, want))
        if not torch.equal(a, b):
            self.fail(f"{what()}: got\n{got}\nwant\n{want}")
            return False
        return True

    def check(self, label: str, x: torch.Tensor, k: int, bounds: list[int], *, offsets: bool = False,
              dst=None, **kw) -> None:
        """Run the distributed top-k of ``x`` split at ``bounds`` and compare with the reference."""
        merges = dst is None or self.rank == dst
        ref_kw = dict(kw)
        if ref_kw.get("nan_policy") == "raise" or (ref_kw.get("nan_policy") is None
                                                    and ref_kw.get("abort_when_nan_found", True)):
            # The same outputs as "raise", without a report of the reference's own.
            ref_kw["nan_policy"] = "sentinel"
        # The reference first: the call under test may leave a report that the next call raises.
        want = deepselect_rt.topk(x, k, **ref_kw) if merges else (None, None)
        local = x[:, bounds[self.rank]:bounds[self.rank + 1]]
        extra = {"width_offsets": bounds} if offsets else {}
        got = dtopk.topk(local, k, dst=dst, **extra, **kw)
        self.checked += 1

        def what():
            return f"{label} (k={k}, bounds={bounds}, width_offsets={offsets}, dst={dst}, {kw})"

        if not merges:
            if got != (None, None):
                self.fail(f"{what()}: a rank other than dst got {got}")
            return
        self.same(lambda: f"{what()} values", got[0], want[0]) and \
            self.same(lambda: f"{what()} indices", got[1], want[1])

    def expect(self, label: str, error, fn, match: str = "") -> None:
        self.checked += 1
        try:
            fn()
        except error as err:
            if match not in str(err):
                self.fail(f"{label}: {error.__name__} {str(err)!r} does not say {match!r}")
            return
        except Exception as err:  # noqa: BLE001 - recorded, so that the ranks stay in step
            self.fail(f"{label}: raised {type(err).__name__}: {err}, want {error.__name__}")
            return
        self.fail(f"{label}: raised nothing, want {error.__name__}")


# --- case groups ------------------------------------------------------------------------------

def random_shapes(c: Cases) -> None:
    """Random widths, uneven shards (some empty), dtypes, k (up to past the width), ranges,
    orders, index types, values returned or not."""
    rnd = random.Random(1)
    for case in range(60):
        rows, width = rnd.choice((1, 2, 3, 5)), rnd.randint(1, 70)
        dtype = rnd.choice(DTYPES)
        x = c.values(rnd, rows, width, dtype, ties=case % 3 == 0)
        bounds = c.split(rnd, width, c.world)
        k = rnd.choice((1, 2, 3, 7, max(1, width // 2), width, width + 3, bounds[1] + 1))
        kw = dict(sorted=rnd.random() < 0.5, indices_type=rnd.choice(("int32", "int64")),
                  return_value=rnd.random() < 0.8)
        if rnd.random() < 0.5:
            kw["begin"], kw["end"] = c.ranges(rnd, rows, width, rnd.choice((torch.int32, torch.int64)))
        c.check(f"random case {case}", x, k, bounds, offsets=rnd.random() < 0.5, **kw)


def ties_across_shards(c: Cases) -> None:
    """Equal values on both sides of a shard boundary: the lower global index wins, in value order
    and in index order; +-0.0 and +-inf keep their total order."""
    rnd = random.Random(2)
    width = 8 * c.world
    even = [i * 8 for i in range(c.world + 1)]
    for dtype in DTYPES:
        same = torch.ones(3, width, dtype=dtype)
        same[1] = -math.inf
        same[2] = -0.0
        for k in (1, 5, 8, 9, width - 1):
            for sorted_ in (False, True):
                c.check("all equal", same, k, even, sorted=sorted_)
        for case in range(6):
            x = c.values(rnd, 4, width, dtype, ties=True)
            for sorted_ in (False, True):
                c.check(f"few distinct values {case}", x, rnd.choice((3, 8, 12)), c.split(rnd, width, c.world),
                        sorted=sorted_)


def ranges_in_one_shard(c: Cases) -> None:
    """Rows whose begin/end fall inside one shard, on a boundary, empty or at the end; short rows
    of real -inf elements, which must come before the fills."""
    width = 10 * c.world
    bounds = [i * 10 for i in range(c.world + 1)]
    begin = [0, 3, 10, 12, 10, 0, width, 5, width - 4, 7]
    end = [3, 8, 20, 18, 10, width, width, 15, width, 7]
    begin, end = torch.tensor(begin), torch.tensor(end)
    rows = len(begin)
    for dtype in DTYPES:
        x = torch.randn(rows, width, generator=torch.Generator().manual_seed(3)).to(dtype)
        x[5] = -math.inf  # a full row of -inf
        x[7, 5:15] = -math.inf  # a range straddling a boundary, all -inf
        for k in (1, 4, 6, 10, 11, 25):
            for sorted_ in (False, True):
                for itype in ("int32", "int64"):
                    c.check("ranges", x, k, bounds, begin=begin, end=end, sorted=sorted_, indices_type=itype)
        c.check("begin only", x, 6, bounds, begin=begin)
        c.check("end only, int32", x, 6, bounds, end=end.int(), offsets=True)
        c.check("custom fills", x, 12, bounds, begin=begin, end=end, idx_oob_fill_value=-1,
                value_oob_fill_value=0.0, indices_type="int32")
        c.check("NaN fill", x, 12, bounds, begin=begin, end=end, value_oob_fill_value=math.nan, sorted=True)


def k_past_the_shards(c: Cases) -> None:
    """k larger than every shard, than the whole row, and shards of width 0."""
    rnd = random.Random(4)
    for dtype in DTYPES:
        x = c.values(rnd, 3, 5 * c.world, dtype)
        bounds = [i * 5 for i in range(c.world + 1)]
        for k in (6, 5 * c.world, 5 * c.world + 4):
            c.check("k past a shard", x, k, bounds, sorted=True)
            c.check("k past a shard, index order", x, k, bounds)
        lopsided = [0] * c.world + [5 * c.world]  # every column on the last rank
        c.check("all columns on the last rank", x, 7, lopsided, offsets=True)
        lopsided = [0] + [5 * c.world] * c.world  # every column on rank 0
        c.check("all columns on rank 0", x, 7, lopsided)


def nan_policies(c: Cases) -> None:
    """NaN in one shard, inside or outside a row's range, under every policy."""
    width = 6 * c.world
    bounds = [i * 6 for i in range(c.world + 1)]
    end = torch.full((4,), width)
    end[2] = 6 * (c.world - 1) + 2  # row 2's NaN (last shard, column 4 of it) lies past its end
    for dtype in DTYPES:
        x = torch.randn(4, width, generator=torch.Generator().manual_seed(5)).to(dtype)
        last = 6 * (c.world - 1)
        c.put_nan(x, 0, last + 1)  # in the last shard
        c.put_nan(x, 2, last + 4)  # outside row 2's range
        c.put_nan(x, 3, 2, variant=1)  # in the first shard, negative
        c.put_nan(x, 3, last + 3, variant=2)  # and a payload in the last
        for k in (1, 3, 6 * c.world + 1):
            for sorted_ in (False, True):
                for policy in ("sentinel", "propagate"):
                    c.check(f"NaN {policy}", x, k, bounds, end=end, sorted=sorted_, nan_policy=policy)
                c.check("NaN sentinel through abort_when_nan_found=False", x, k, bounds, end=end,
                        abort_when_nan_found=False)
            c.check("NaN raise", x, k, bounds, end=end, nan_policy="raise")
            c.expect("NaN reported by check_nan", NaNInputError, deepselect_rt.check_nan, match="rows 0, 3")
            c.expect("NaN raise_sync", NaNInputError,
                     lambda: dtopk.topk(x[:, bounds[c.rank]:bounds[c.rank + 1]], k, end=end, nan_policy="raise_sync"),
                     match="rows 0, 3")
        c.check("no NaN in range, raise_sync", x[1:3], 2, bounds, end=end[1:3], nan_policy="raise_sync")


def pending_reports(c: Cases) -> None:
    """A report left by an earlier call is raised after the next call's collectives, on the ranks
    that merged, and the call after that runs normally: no rank is left waiting."""
    width = 3 * c.world
    bounds = [i * 3 for i in range(c.world + 1)]
    x = torch.arange(2 * width, dtype=torch.float32).view(2, width)
    bad = x.clone()
    c.put_nan(bad, 1, width - 1)
    local = lambda t: t[:, bounds[c.rank]:bounds[c.rank + 1]]  # noqa: E731
    for dst in (None, c.world - 1):
        merges = dst is None or c.rank == dst
        c.check("NaN recorded", bad, 2, bounds, dst=dst)  # the default policy: "raise"
        if merges:
            c.expect("report at the next call", NaNInputError, lambda: dtopk.topk(local(x), 2, dst=dst),
                     match="an earlier top-k call")
        else:
            c.check("no report where nothing merged", x, 2, bounds, dst=dst)
        c.check("the call after the report", x, 2, bounds, dst=dst)


def dst_rank(c: Cases) -> None:
    """Only dst gets the outputs; the others get (None, None)."""
    rnd = random.Random(6)
    for dst in range(c.world):
        for offsets in (False, True):
            x = c.values(rnd, 3, 20, rnd.choice(DTYPES))
            begin, end = c.ranges(rnd, 3, 20)
            c.check("dst", x, 4, c.split(rnd, 20, c.world), dst=dst, offsets=offsets, begin=begin, end=end,
                    sorted=dst % 2 == 0)


def empty_calls(c: Cases) -> None:
    """k == 0 and rows == 0 give empty outputs of the right dtypes."""
    x = torch.randn(3, 4 * c.world)
    bounds = [i * 4 for i in range(c.world + 1)]
    for offsets in (False, True):
        c.check("k == 0", x, 0, bounds, offsets=offsets, indices_type="int32")
        c.check("rows == 0", x[:0], 3, bounds, offsets=offsets)
        c.check("rows == 0, no values", x[:0], 3, bounds, offsets=offsets, return_value=False)
        c.check("k == 0 to dst", x, 0, bounds, offsets=offsets, dst=0)


def argument_errors(c: Cases) -> None:
    """Local errors raise before any collective (the ranks pass the same arguments); ranks that
    disagree raise the same ValueError on every rank after the width exchange."""
    bounds = [i * 4 for i in range(c.world + 1)]
    x = torch.randn(3, 4)
    t = dtopk.topk
    c.expect("numpy local", TypeError, lambda: t(x.numpy(), 2), "local must be a torch tensor")
    c.expect("1-D local", ValueError, lambda: t(x[0], 2), "local must be 2-D")
    c.expect("integer local", TypeError, lambda: t(x.int(), 2), "local must have dtype")
    c.expect("k < 0", ValueError, lambda: t(x, -1), "k must be in")
    c.expect("k float", TypeError, lambda: t(x, 2.0), "k must be an integer")
    c.expect("sorted not a bool", TypeError, lambda: t(x, 2, sorted=1), "sorted must be a bool")
    c.expect("bad indices_type", TypeError, lambda: t(x, 2, indices_type="int16"), "indices_type")
    c.expect("bad nan_policy", ValueError, lambda: t(x, 2, nan_policy="ignore"), "nan_policy")
    c.expect("fill past int32", ValueError, lambda: t(x, 2, indices_type="int32", idx_oob_fill_value=2**40),
             "idx_oob_fill_value")
    c.expect("begin shape", ValueError, lambda: t(x, 2, begin=torch.zeros(2, dtype=torch.int64)), "begin must have shape")
    c.expect("begin dtype", TypeError, lambda: t(x, 2, begin=torch.zeros(3)), "begin must have dtype")
    c.expect("end a list", TypeError, lambda: t(x, 2, end=[1, 2, 3]), "end must be a torch tensor")
    c.expect("begin > end", ValueError, lambda: t(x, 2, begin=torch.tensor([0, 3, 0]), end=torch.tensor([1, 2, 1])),
             "row 1 has begin 3 > end 2")
    c.expect("end < 0", ValueError, lambda: t(x, 2, end=torch.tensor([1, -2, 1])), "end must be >= 0")
    c.expect("dst out of range", ValueError, lambda: t(x, 2, dst=c.world), "dst must be a rank")
    c.expect("dst a bool", TypeError, lambda: t(x, 2, dst=True), "dst must be None or an integer")
    c.expect("group", TypeError, lambda: t(x, 2, group="world"), "group must be")
    c.expect("width_offsets length", ValueError, lambda: t(x, 2, width_offsets=bounds[:-1]), "world_size + 1")
    c.expect("width_offsets start", ValueError, lambda: t(x, 2, width_offsets=[b + 1 for b in bounds]), "start at 0")
    c.expect("width_offsets width", ValueError, lambda: t(x[:, :3], 2, width_offsets=bounds), "local is 3 wide")
    c.expect("width_offsets floats", TypeError, lambda: t(x, 2, width_offsets=[float(b) for b in bounds]),
             "width_offsets must hold integers")
    c.expect("end past the global width (width_offsets)", ValueError,
             lambda: t(x, 2, width_offsets=bounds, end=torch.tensor([1, 4 * c.world + 1, 0])), "global width")
    # After the width exchange, the same error on every rank, naming the rank at fault.
    c.expect("ranks disagree on k", ValueError, lambda: t(x, 2 + (c.rank == 1)), "ranks disagree on k: [2, 3")
    c.expect("ranks disagree on rows", ValueError, lambda: t(x[:2 + (c.rank == 0)], 2), "ranks disagree on rows")
    c.expect("ranks disagree on dtype", ValueError, lambda: t(x.half() if c.rank == 0 else x, 2),
             "ranks disagree on local's dtype: ['float16', 'float32'")
    c.expect("ranks disagree on sorted", ValueError, lambda: t(x, 2, sorted=c.rank == 0), "ranks disagree on sorted")
    c.expect("ranks disagree on dst", ValueError, lambda: t(x, 2, dst=c.rank), "ranks disagree on dst")
    big_end = torch.tensor([1, 4 * c.world + (c.rank == 0), 0])
    c.expect("end past the global width on one rank", ValueError, lambda: t(x, 2, end=big_end),
             "global width {} (on group rank 0)".format(4 * c.world))
    c.check("still in step", torch.randn(3, 4 * c.world, generator=torch.Generator().manual_seed(7)), 2, bounds)


def subgroup(c: Cases) -> None:
    """A group of two ranks (1 and the last; 0 and 1 in a world of 2): only its collectives are used,
    and dst is a global rank."""
    members = [1, c.world - 1] if c.world > 2 else [0, 1]
    group = dist.new_group(members)  # every rank takes part in making it
    if c.rank not in members:
        return
    x = torch.randn(2, 9, generator=torch.Generator().manual_seed(8))
    own = x[:, :4] if c.rank == members[0] else x[:, 4:]
    for dst in (None, members[-1]):
        got = dtopk.topk(own, 5, group=group, dst=dst, sorted=True)
        c.checked += 1
        want = deepselect_rt.topk(x, 5, sorted=True)
        if dst is not None and c.rank != dst:
            if got != (None, None):
                c.fail(f"subgroup: a rank other than dst got {got}")
            continue
        c.same(lambda: "subgroup values", got[0], want[0]) and c.same(lambda: "subgroup indices", got[1], want[1])


GROUPS = {f.__name__: f for f in (random_shapes, ties_across_shards, ranges_in_one_shard, k_past_the_shards,
                                  nan_policies, pending_reports, dst_rank, empty_calls, argument_errors, subgroup)}


def worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """One process of the group: every case group, then ``rank<r>.json`` in ``out_dir``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=30))
    results = {}
    try:
        for name, group in GROUPS.items():
            cases = Cases(rank, world)
            start = time.perf_counter()
            broke = False
            try:
                group(cases)
            except Exception:  # noqa: BLE001 - the ranks are out of step now: stop after this group
                cases.fail(traceback.format_exc())
                broke = True
            results[name] = {"checked": cases.checked, "failures": cases.failures,
                             "seconds": round(time.perf_counter() - start, 3)}
            if broke:
                break
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()
