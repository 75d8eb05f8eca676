"""A real workspace in a temp dir, and a neighbour outside it holding a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.tools.base import ToolContext

SECRET = "TOP SECRET\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace that no tool may read or write."""
    neighbour = tmp_path / "outside"
    neighbour.mkdir()
    (neighbour / "secret.txt").write_text(SECRET)
    return neighbour


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace)
