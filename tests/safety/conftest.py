"""Fixtures of the safety tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from steward.safety.checkpoints.around_calls import Checkpointer
from steward.safety.checkpoints.shadow import CheckpointSettings
from steward.safety.checkpoints.wrapper import CheckpointToolset
from steward.tools.base import CommandSandbox, FunctionToolset, ToolContext, ToolResult
from steward.tools.shell import bash

RunBash = Callable[[CommandSandbox | None, Path, str], Awaitable[ToolResult]]


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
