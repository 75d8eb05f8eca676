"""Fixtures for every test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _checkpoints_out_of_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Shadow repositories of test runs go to a temporary state directory, never the user's."""
    import os

    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))
