"""Fixtures for the job tests: a store on both engines, and a fleet of real processes on it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "kit"))  # `from fleet_kit import Fleet` in the tests

from fleet_kit import Fleet


@pytest.fixture
def fleet(tmp_path: Path, db_url: str) -> Iterator[Fleet]:
    made = Fleet(tmp_path, db_url)
    try:
        yield made
    finally:
        made.stop()
