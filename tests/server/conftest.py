"""Fixtures for the server tests: a deployment (workspace, store on both engines, token) whose
``start`` runs real ``steward serve`` processes on loopback."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "kit"))  # `from server_kit import ...` in the tests

from chat_kit import Receiver
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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    thread = threading.Thread(target=made.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield made
    made.server.shutdown()
    made.server.server_close()
    thread.join(5)
