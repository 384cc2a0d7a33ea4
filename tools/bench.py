"""Thin wrapper kept for tools/device_check.sh: ``python tools/bench.py [--quick|--full] [ARGS]``
runs ``deepselect-rt bench [ARGS]`` from a checkout (``--full``, the standard grid, is the
CLI's default; every other argument passes through). See ``deepselect-rt bench --help``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deepselect_rt import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main(["bench", *(arg for arg in sys.argv[1:] if arg != "--full")]))
