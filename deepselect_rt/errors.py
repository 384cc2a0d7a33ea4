"""Exceptions raised by deepselect_rt."""

from __future__ import annotations


class NaNInputError(ValueError):
    """A row held a NaN in ``[begin, end)`` and ``nan_policy`` was ``"raise"`` or ``"raise_sync"``.

    ``rows``: the offending row numbers of one call, ascending. ``call``: that call, described
    (dtype, shape, k, stream), when the error is reported after the call returned (the default
    "raise" reports it at the next call or ``check_nan``); None for an immediate raise.
    ``other_calls``: further calls with NaN rows reported by the same check. ``lost``: NaN rows
    the record could not keep (more than it holds between two checks).
    """

    def __init__(self, rows, *, call: str | None = None, other_calls: int = 0, lost: int = 0):
        self.rows = [int(r) for r in rows]
        self.call, self.other_calls, self.lost = call, other_calls, lost
        shown = ", ".join(str(r) for r in self.rows[:16])
        more = f" (and {len(self.rows) - 16} more)" if len(self.rows) > 16 else ""
        where = f"an earlier top-k call ({call}) met" if call else "input holds"
        extra = f"; {other_calls} other call(s) also met NaN" if other_calls else ""
        extra += f"; {lost} further NaN row(s) were not recorded" if lost else ""
        super().__init__(
            f"{where} NaN in row{'s' if len(self.rows) != 1 else ''} {shown}{more}{extra}"
            + ("; those rows hold the sentinel (index 0x3F3F3F3F)" if call else "")
            + ". Pass nan_policy='sentinel' or 'propagate' to accept NaN (with nan_policy=None, "
            "abort_when_nan_found=False gives 'sentinel')"
        )


class BackendUnavailableError(RuntimeError):
    """No backend can run this input: names what is missing (driver, wheel, toolkit)."""


class CompileError(RuntimeError):
    """A kernel failed to compile; carries the compiler log, the variant and the options."""

    def __init__(self, message: str, *, log: str = "", variant: object = None, options=()):
        self.log = log
        self.variant = variant
        self.options = tuple(options)
        super().__init__(f"{message}\nvariant: {variant}\noptions: {' '.join(self.options)}\n{log}")
