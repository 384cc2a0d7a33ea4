"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The property tests check rules, not speed: on a loaded 2-core CI machine (NVRTC compiling beside
# them) hypothesis's timing checks failed a plan test whose draws took 1.25 s.
settings.register_profile("untimed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("untimed")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The real-data fixtures: $DEEPSELECT_RT_FIXTURES, else ``<repo>/../shared/fixtures``."""
    path = Path(os.environ.get("DEEPSELECT_RT_FIXTURES",
                               Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"))
    if not path.is_dir():
        pytest.skip(f"fixtures not found at {path}")
    return path
