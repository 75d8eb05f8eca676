"""Fixtures of the safety tests."""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings
from steward.safety.checkpoints.wrapper import CheckpointToolset
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox, SandboxSettings
from steward.tools.base import CommandSandbox, FunctionToolset, ToolContext, ToolResult
from steward.tools.shell import bash

RunBash = Callable[[CommandSandbox | None, Path, str], Awaitable[ToolResult]]

GIT_ID = ["-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "protocol.file.allow=always"]


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` as a user with a name, failing the test on a non-zero exit."""
    done = subprocess.run(
        ["git", "-C", str(repo), *GIT_ID, *args], capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    """A sandbox roomy enough for git and checkpointed commands; modules needing less override it."""
    return BubblewrapSandbox(SandboxSettings(cpu_s=30, max_processes=128, tmpfs_mb=64))


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """Where checkpoints live: outside the workspace, as in real use."""
    return tmp_path / "state"


@pytest.fixture
def checkpointed_bash(state_dir: Path) -> RunBash:
    """``bash`` as an agent runs it: a checkpoint before, the comparison after."""

    async def run(sandbox: CommandSandbox | None, workspace: Path, command: str) -> ToolResult:
        checkpointer = Checkpointer(workspace, CheckpointSettings(state_dir=state_dir))
        toolset = CheckpointToolset(FunctionToolset([bash]), lambda _workspace: checkpointer)
        ctx = ToolContext(workspace=workspace, sandbox=sandbox, run_id="test-run")
        return await toolset.call_tool("bash", {"command": command, "timeout_s": 20}, ctx)

    return run
