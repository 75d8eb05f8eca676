"""`steward doctor` lists what is sealed (files the host runs later) and what of it is here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
def test_doctor_lists_the_sealed_classes_and_what_the_workspace_holds(cli: Any, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "tools-env")], check=True)
    (tmp_path / "web" / ".vscode").mkdir(parents=True)
    (tmp_path / "web" / ".vscode" / "tasks.json").write_text("{}\n")
    proc = cli("doctor")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "here 1 Python environment, 1 editor or direnv file" in proc.stdout
    for sealed in (
        ".pth files and start-up modules",
        "bin/activate*",
        "core.hooksPath, husky",
        ".vscode/tasks.json",
        "dotfiles",
    ):
        assert sealed in proc.stdout, sealed
