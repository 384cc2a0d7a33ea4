"""Exceptions raised by deepselect_rt."""

from __future__ import annotations


class NaNInputError(ValueError):
    """A row held a NaN in ``[begin, end)`` and ``nan_policy`` was ``"raise"``.

    ``rows`` lists the offending row numbers (all of them for the reference backend, the first
    ones found for a GPU backend), in ascending order.
    """

    def __init__(self, rows):
        self.rows = [int(r) for r in rows]
        shown = ", ".join(str(r) for r in self.rows[:16])
        more = f" (and {len(self.rows) - 16} more)" if len(self.rows) > 16 else ""
        super().__init__(
            f"input holds NaN in row{'s' if len(self.rows) > 1 else ''} {shown}{more}; pass nan_policy='sentinel' or 'propagate' "
            "to accept NaN (with nan_policy=None, abort_when_nan_found=False gives 'sentinel')"
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
