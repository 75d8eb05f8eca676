"""Fixtures for the server tests: a deployment (workspace, store on both engines, token) whose
``start`` runs real ``steward serve`` processes on loopback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "kit"))  # `from server_kit import ...` in the tests

from server_kit import Deployment


@pytest.fixture
def deployment(tmp_path: Path, db_url: str) -> Iterator[Deployment]:
    made = Deployment(tmp_path, db_url)
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def sqlite_deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, f"sqlite:///{tmp_path}/store/steward.db")
    try:
        yield made
    finally:
        made.stop()
