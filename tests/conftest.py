"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The real-data fixtures: $DEEPSELECT_RT_FIXTURES, else ``<repo>/../shared/fixtures``."""
    path = Path(os.environ.get("DEEPSELECT_RT_FIXTURES",
                               Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"))
    if not path.is_dir():
        pytest.skip(f"fixtures not found at {path}")
    return path
