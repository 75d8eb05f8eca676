"""``cli``: ``python -m steward ARGS`` in a clean environment, the temporary folder its workspace."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config-home")
    env["XDG_STATE_HOME"] = str(tmp_path.parent / f"{tmp_path.name}-state")

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "steward", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip

    return run
