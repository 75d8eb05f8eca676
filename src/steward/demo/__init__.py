"""The built-in demo: a small project with a failing test, and the script that fixes it."""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from steward.models.scripted import ScriptedModel, parse_script


def prepare_workspace(parent: str | None = None) -> Path:
    """Copy the sample project into a new temporary directory and return it."""
    target = Path(tempfile.mkdtemp(prefix="steward-demo-", dir=parent))
    source = resources.files(__package__) / "project"
    for item in source.iterdir():
        if item.is_file() and not item.name.endswith(".pyc"):
            (target / item.name).write_bytes(item.read_bytes())
    return target


def demo_model() -> ScriptedModel:
    text = (resources.files(__package__) / "script.yaml").read_text(encoding="utf-8")
    python = shlex.quote(sys.executable or shutil.which("python3") or "python3")
    replies = parse_script(text.replace("{python}", python), "demo script")
    return ScriptedModel(replies, name="scripted:demo", source="the demo script")


DEMO_GOAL = "The tests in this project fail. Find the bug and fix it, then confirm the tests pass."
