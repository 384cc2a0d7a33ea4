"""Package data: a few rows of real top-k inputs (``real_rows.npz``, ``provenance.json``).

Load them with ``deepselect_rt.bench.samples``; rebuilt by ``tools/make_samples.py``.
"""
