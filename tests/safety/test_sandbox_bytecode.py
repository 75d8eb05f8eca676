"""A fix re-run at once is the code that runs: commands in the sandbox write no bytecode.

Python reuses a module's cached bytecode when its source has the same size and modification
second. An agent's one-character fix (``a - b`` -> ``a + b``) tested again within that second
would run the old code and report the fix as wrong. The test makes that second the same on
purpose (``os.utime``), so it does not depend on how fast the machine is.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import ToolContext
from steward.tools.shell import bash

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)


async def run(workspace: Path, command: str) -> str:
    ctx = ToolContext(workspace=workspace, sandbox=BubblewrapSandbox(SandboxSettings()))
    result = await bash.call({"command": command}, ctx)
    assert not result.is_error, result.content
    return result.content


async def test_an_edit_of_the_same_size_in_the_same_second_is_what_runs(tmp_path: Path) -> None:
    source = tmp_path / "calc.py"
    source.write_text("def add(a, b):\n    return a - b\n")
    stamp = source.stat().st_mtime_ns
    assert "\n1\n" in "\n" + await run(tmp_path, "python3 -c 'import calc; print(calc.add(2, 1))'")
    source.write_text("def add(a, b):\n    return a + b\n")  # same size
    os.utime(source, ns=(stamp, stamp))  # and the same second
    assert "\n3\n" in "\n" + await run(tmp_path, "python3 -c 'import calc; print(calc.add(2, 1))'")
    assert not (tmp_path / "__pycache__").exists()


async def test_a_user_who_wants_bytecode_written_keeps_their_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "")
    (tmp_path / "calc.py").write_text("X = 1\n")
    ctx = ToolContext(
        workspace=tmp_path, sandbox=BubblewrapSandbox(SandboxSettings(env=("PYTHONDONTWRITEBYTECODE",)))
    )
    result = await bash.call({"command": "python3 -c 'import calc'"}, ctx)
    assert not result.is_error, result.content
    assert (tmp_path / "__pycache__").is_dir()
