"""``python -m deepselect_rt.cli``: the ``deepselect-rt`` command."""

import sys

from .main import main

sys.exit(main())
