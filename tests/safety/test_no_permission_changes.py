"""Steward changes nobody's permissions: an unreadable folder stays unreadable through a run.

The checkpoint and the comparison run in a child process for which permissions hold (under root,
without its permission override): a folder the user made unreadable keeps mode 000, and one a
call makes unreadable is reported, not opened up.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, subprocess, sys
from pathlib import Path
from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings

workspace, state, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
checkpointer = Checkpointer(workspace, CheckpointSettings(state_dir=state))
before = checkpointer.before("run")
subprocess.run(["sh", "-c", command], cwd=workspace, check=True)
print(json.dumps(checkpointer.after(before).items))
"""


def run_call(tmp_path: Path, workspace: Path, command: str) -> list[str]:
    """One checkpointed call, in a process for which permissions hold (root's dac capabilities
    dropped: root reads a mode-000 folder otherwise)."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("needs setpriv (util-linux) to drop root's permission override")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    done = subprocess.run(
        [*prefix, sys.executable, "-c", CHILD, str(workspace), str(state), command],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    items: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return items


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.py").write_text("print(1)\n")
    return ws


def test_a_folder_the_user_made_unreadable_keeps_mode_000(tmp_path: Path, workspace: Path) -> None:
    locked = workspace / "locked"
    locked.mkdir()
    (locked / "private.txt").write_text("mine\n")
    locked.chmod(0o000)
    try:
        run_call(tmp_path, workspace, "echo changed > main.py")
        assert stat.S_IMODE(locked.stat().st_mode) == 0o000
        assert (workspace / "main.py").read_text() == "changed\n"
    finally:
        locked.chmod(0o755)


def test_a_folder_a_call_makes_unreadable_is_reported_not_opened(tmp_path: Path, workspace: Path) -> None:
    items = run_call(tmp_path, workspace, "mkdir hidden && chmod 000 hidden")
    try:
        assert stat.S_IMODE((workspace / "hidden").stat().st_mode) == 0o000
        assert any("hidden could not be checked" in item for item in items), items
    finally:
        (workspace / "hidden").chmod(0o755)
