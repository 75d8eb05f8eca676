"""A process killed mid-call leaves its read-only placeholders; whoever comes next sweeps them
before anything is recorded, so the next call is its own and nothing is "restored"."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings

from .conftest import RunBash

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"),
]

KILLED_CALL = """
import asyncio, sys
from pathlib import Path
from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings
from steward.safety.checkpoints.wrapper import CheckpointToolset
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import FunctionToolset, ToolContext
from steward.tools.shell import bash

workspace, state = Path(sys.argv[1]), Path(sys.argv[2])
checkpointer = Checkpointer(workspace, CheckpointSettings(state_dir=state))
toolset = CheckpointToolset(FunctionToolset([bash]), lambda _w: checkpointer)
ctx = ToolContext(workspace=workspace, sandbox=BubblewrapSandbox(SandboxSettings()), run_id="test-run")
command = "echo started > started.txt; sleep 600"
asyncio.run(toolset.call_tool("bash", {"command": command, "timeout_s": 600}, ctx))
"""


def kill_mid_call(workspace: Path, state_dir: Path) -> None:
    """Run a sandboxed call in another process and SIGKILL that process while it runs."""
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_CALL, str(workspace), str(state_dir)], start_new_session=True
    )
    try:
        for _ in range(6000):  # bounded: the call writes the file as soon as it runs
            if (workspace / "started.txt").exists() or process.poll() is not None:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.05)
        assert (workspace / "started.txt").exists(), "the call never started"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# project\n")
    return ws


async def test_the_next_call_after_a_killed_one_is_its_own(
    workspace: Path, state_dir: Path, checkpointed_bash: RunBash
) -> None:
    kill_mid_call(workspace, state_dir)
    left = {p.name for p in workspace.iterdir()}
    assert "steward.toml" in left  # what the killed process could not remove (the premise)
    sandbox = BubblewrapSandbox(SandboxSettings(cpu_s=30, max_processes=128, tmpfs_mb=64))
    result = await checkpointed_bash(sandbox, workspace, "echo next > next.txt")
    assert not result.is_error, result.content
    assert result.category != "protected" and "restored" not in result.content
    assert (workspace / "next.txt").read_text() == "next\n"
    assert not (workspace / "steward.toml").exists()
    assert not (workspace / ".git").exists() and not (workspace / "personas").exists()


async def test_a_run_started_or_resumed_sweeps_them_before_any_call(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> None:
    from steward import Agent

    kill_mid_call(workspace, state_dir)
    assert (workspace / "steward.toml").exists()
    script = tmp_path / "script.yaml"
    end = {"phase": "end", "summary": "nothing to do", "end_status": "solved", "end_message": "nothing to do"}
    script.write_text(yaml.safe_dump([{"agent_step": end}]))
    result = await Agent(model=f"scripted:{script}").run("look around", workspace=workspace)
    assert result.solved
    assert not (workspace / "steward.toml").exists() and not (workspace / ".git").exists()
    assert not (workspace / "personas").exists()
