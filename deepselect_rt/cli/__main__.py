"""``python -m deepselect_rt.cli``: the ``deepselect-rt`` command."""

from .main import run

run()
