from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def cli(tmp_path: Path) -> Any:
    """Run ``python -m steward ARGS`` in a clean environment; returns CompletedProcess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    env["COLUMNS"] = "200"
    # Checkpoints live outside the workspace (the workspace here is tmp_path itself).
    env["XDG_STATE_HOME"] = str(tmp_path.parent / f"{tmp_path.name}-state")

    def run(*args: str, cwd: Path | None = None, stdin: str | None = None, timeout: float = 60, **extra: str):
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
