"""Real workspaces in temp dirs; HOME points into the temp dir so no real user skill is found."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from steward.config import RulesSettings
from steward.tools.base import ToolContext

Write = Callable[[Path, str], Path]
MakeSkill = Callable[..., Path]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = tmp_path / "home"
    fake.mkdir()
    monkeypatch.setenv("HOME", str(fake))
    return fake


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def settings() -> RulesSettings:
    return RulesSettings()


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def write() -> Write:
    """``write(path, text)``: create the file and its parents."""
    return _write


@pytest.fixture
def make_skill() -> MakeSkill:
    """``make_skill(base, name, description, body=..., folder=...)``: a skill folder with a SKILL.md."""

    def make(base: Path, name: str, description: str, body: str = "Do the thing.", folder: str = "") -> Path:
        text = f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
        return _write(base / (folder or name) / "SKILL.md", text).parent

    return make
