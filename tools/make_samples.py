"""Rebuild deepselect_rt/samples/ (the real inputs shipped in the package) from the fixtures.

Usage: python tools/make_samples.py [FIXTURES_DIR]   (default ../shared/fixtures)

Takes a few whole rows of the real-data fixtures (fixtures README: all-MiniLM-L6-v2 run on real
text) and writes ``real_rows.npz`` (compressed) and ``provenance.json`` beside it: the source
files' sha256, which rows were taken, the formulas, and the sha256 of every stored array
(``deepselect_rt.bench.samples.provenance()``; tests/test_cli_check.py compares the rows with the
fixtures).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "deepselect_rt" / "samples"
# Indexer rows: the most -inf (end 70117), two in between, and the one with end = N (no -inf).
INDEXER_ROWS = (0, 3, 5, 7)
# Sampler rows: every 8th of the 64, spread evenly over the whole text.
SAMPLER_ROWS = tuple(range(0, 64, 8))
SOURCES = ("README.md", "indexer_scores_bf16.npy", "indexer_scores.json", "sampler_logits_fp32.npy",
           "sampler_logits.json", "text_sources.json")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(fixtures: Path) -> None:
    indexer_meta = json.loads((fixtures / "indexer_scores.json").read_text())
    sampler_meta = json.loads((fixtures / "sampler_logits.json").read_text())
    bits = np.load(fixtures / "indexer_scores_bf16.npy")[list(INDEXER_ROWS)]
    logits = np.load(fixtures / "sampler_logits_fp32.npy")[list(SAMPLER_ROWS)]
    end = np.array([indexer_meta["rows"][r]["end"] for r in INDEXER_ROWS], np.int32)
    arrays = {"indexer_bf16_bits": np.ascontiguousarray(bits), "indexer_end": end,
              "sampler_fp32": np.ascontiguousarray(logits)}
    np.savez_compressed(OUT / "real_rows.npz", **arrays)

    keep = ("row", "q", "end", "n_neg_inf", "token", "file", "context")
    provenance = {
        "what": "A few whole rows of the deepselect-rt real-data fixtures, for `deepselect-rt check`, "
                "`deepselect-rt bench --real` and the tests. Real data: the published weights of "
                "sentence-transformers/all-MiniLM-L6-v2 applied to real text; nothing synthetic, "
                "nothing edited. Full description: the fixtures README (sha256 below).",
        "built_by": "tools/make_samples.py",
        "model": indexer_meta["model"],
        "model_source": indexer_meta["source"],
        "text": f"{indexer_meta['n_tokens']} tokens of 25 real text files (Debian common licenses, "
                "CPython 3.11.7 Lib/ sources), listed with their sha256 in the fixtures' "
                "text_sources.json",
        "sources": {name: sha256((fixtures / name).read_bytes()) for name in SOURCES},
        "arrays": {
            "indexer_bf16_bits": {
                "dtype": "uint16 (bfloat16 bit patterns, round-to-nearest-even from float32; -inf = 0xFF80)",
                "shape": list(bits.shape),
                "source": "indexer_scores_bf16.npy", "source_rows": list(INDEXER_ROWS),
                "formula": indexer_meta["formula"] + f" (H: {indexer_meta['layer_meaning']}, "
                           f"{indexer_meta['n_heads']} heads of {indexer_meta['head_dim']}, w_h = 1/12)",
                "rows": [{k: indexer_meta["rows"][r][k] for k in keep} for r in INDEXER_ROWS],
            },
            "indexer_end": {"dtype": "int32", "shape": list(end.shape),
                            "meaning": "causal end = q + 1 of each indexer row; columns >= end are -inf"},
            "sampler_fp32": {
                "dtype": "float32", "shape": list(logits.shape),
                "source": "sampler_logits_fp32.npy", "source_rows": list(SAMPLER_ROWS),
                "formula": sampler_meta["formula"],
                "rows": [{k: sampler_meta["rows"][r][k] for k in ("row", "token_index", "token", "file")}
                         for r in SAMPLER_ROWS],
            },
        },
        "sha256": {name: sha256(a.tobytes()) for name, a in arrays.items()},
    }
    (OUT / "provenance.json").write_text(json.dumps(provenance, indent=1, ensure_ascii=False) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir() if p.suffix in (".npz", ".json"))
    print(f"wrote {OUT} ({total:,} bytes)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fixtures", nargs="?", type=Path, default=REPO.parent / "shared" / "fixtures",
                        help="the fixtures folder (default ../shared/fixtures)")
    fixtures = parser.parse_args().fixtures
    missing = [name for name in SOURCES if not (fixtures / name).is_file()]
    if missing:
        sys.exit(f"tools/make_samples.py: {fixtures} lacks the fixtures {', '.join(missing)} "
                 "(pass the fixtures folder as the argument)")
    main(fixtures)
