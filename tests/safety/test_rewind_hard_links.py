"""A file with more than one hard link (pnpm and uv install packages that way) changed in place
by a command is restored in place by a rewind: the same inode, so every other name of it,
inside the workspace or in a package store outside, gets its content back too."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings

from .conftest import RunBash

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
]


async def test_a_hard_linked_file_is_restored_in_place(
    tmp_path: Path, state_dir: Path, checkpointed_bash: RunBash
) -> None:
    store = tmp_path / "store"  # a package manager's store, outside the workspace
    store.mkdir()
    (store / "index.js").write_text("module.exports = 1\n")
    (store / "tool").write_text("#!/bin/sh\necho tool\n")
    (store / "tool").chmod(0o755)
    ws = tmp_path / "ws"
    (ws / "node_modules" / "pkg").mkdir(parents=True)
    os.link(store / "index.js", ws / "node_modules" / "pkg" / "index.js")
    os.link(ws / "node_modules" / "pkg" / "index.js", ws / "copy.js")  # two names in the workspace too
    os.link(store / "tool", ws / "tool")
    inode = (store / "index.js").stat().st_ino
    sandbox = BubblewrapSandbox(SandboxSettings(cpu_s=30, max_processes=128, tmpfs_mb=64))
    command = "echo 'module.exports = 666' > node_modules/pkg/index.js; echo 'echo pwned' >> tool"
    await checkpointed_bash(sandbox, ws, command)
    assert (store / "index.js").read_text() == "module.exports = 666\n"  # the premise: one file
    cp = Checkpointer(ws, CheckpointSettings(state_dir=state_dir))
    report = cp.rewind("test-run", cp.checkpoints("test-run")[0])
    assert report.failed == []
    for name in (ws / "node_modules" / "pkg" / "index.js", ws / "copy.js", store / "index.js"):
        assert name.read_text() == "module.exports = 1\n"
        assert name.stat().st_ino == inode and name.stat().st_nlink == 3
    assert (store / "tool").read_text() == "#!/bin/sh\necho tool\n"
    assert (
        os.access(store / "tool", os.X_OK) and (ws / "tool").stat().st_ino == (store / "tool").stat().st_ino
    )
