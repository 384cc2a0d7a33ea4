"""The real inputs shipped in the package (``deepselect_rt/samples/``), for ``deepselect-rt
check``, ``deepselect-rt bench --real`` and the tests.

A few whole rows of the project's real-data fixtures (all-MiniLM-L6-v2 run on real text, see
``provenance()``): DSA lightning-indexer scores in bfloat16 with their causal ``end``, and
sampler vocabulary logits in float32. No NaN and no -0.0 anywhere; indexer rows are -inf from
their ``end`` on.
"""

from __future__ import annotations

import importlib.resources
import json

import ml_dtypes
import numpy as np

_PACKAGE = "deepselect_rt.samples"
DATA_FILE = "real_rows.npz"
PROVENANCE_FILE = "provenance.json"


def _arrays() -> dict[str, np.ndarray]:
    with importlib.resources.files(_PACKAGE).joinpath(DATA_FILE).open("rb") as f:
        with np.load(f) as npz:
            return {name: npz[name] for name in npz.files}


def indexer_rows() -> tuple[np.ndarray, np.ndarray]:
    """``(scores, end)``: scores ``(4, 131072)`` ``ml_dtypes.bfloat16``, end ``(4,)`` int32.

    Row i holds real scores on ``[0, end[i])`` and -inf after; ``end`` runs from 70117 to 131072
    (the last row has no -inf). Fresh arrays on every call.
    """
    arrays = _arrays()
    return arrays["indexer_bf16_bits"].view(ml_dtypes.bfloat16), arrays["indexer_end"]


def sampler_rows() -> np.ndarray:
    """Vocabulary logits ``(8, 30522)`` float32, all finite. A fresh array on every call."""
    return _arrays()["sampler_fp32"]


def provenance() -> dict:
    """Where the rows come from: model, text, formulas, source files' sha256, rows taken, and the
    sha256 of each stored array's raw bytes (key ``"sha256"``)."""
    text = importlib.resources.files(_PACKAGE).joinpath(PROVENANCE_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def data_files() -> list:
    """The shipped files (Traversables: ``.name``, ``.read_bytes()``)."""
    folder = importlib.resources.files(_PACKAGE)
    return [folder.joinpath(DATA_FILE), folder.joinpath(PROVENANCE_FILE)]


__all__ = ["indexer_rows", "sampler_rows", "provenance", "data_files"]
