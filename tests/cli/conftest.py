from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest


class Cli(Protocol):
    """The ``cli`` fixture: ``cli("runs", "list")`` runs ``python -m steward runs list``."""

    def __call__(
        self, *args: str, cwd: Path | None = ..., stdin: str | None = ..., timeout: float = ..., **extra: str
    ) -> subprocess.CompletedProcess[str]: ...


@pytest.fixture
def cli(tmp_path: Path, remember_sandbox_check: Callable[[Path], None]) -> Cli:
    """Run ``python -m steward ARGS`` in a clean environment; returns CompletedProcess. The
    sandbox's self-check is remembered as on a machine that ran one (tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    env["COLUMNS"] = "200"
    # Checkpoints live outside the workspace (the workspace here is tmp_path itself).
    env["XDG_STATE_HOME"] = str(tmp_path.parent / f"{tmp_path.name}-state")
    remember_sandbox_check(Path(env["XDG_STATE_HOME"]))

    def run(
        *args: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 60, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward", *args],
            cwd=cwd or tmp_path,
            env={**env, **extra},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
