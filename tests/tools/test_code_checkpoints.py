"""What a program writes itself: nothing in the sandbox; without it, checkpointed and checked.

In the sandbox the workspace is read-only to the program (it changes files only through the
tools, each checkpointed as its own call), so ``execute_code`` takes no checkpoint there. With
the sandbox off the program can write the workspace itself: the call is then checkpointed like
``bash``, what it may not change (a git hook) is undone, and its own tool calls, each under the
workspace's lock, still run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, ScriptedModel
from steward.config import Config
from steward.events import Event, SignalEvent, ToolResultEvent, ToolUse
from steward.safety.policy.rules import Policy

END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "finished"}}
WRITES = (
    "write_file(path='through_tool.txt', content='by the tool')\n"
    "open('direct.txt', 'w').write('by the program')\n"
    "print('wrote')\n"
)


def code(program: str) -> dict[str, Any]:
    return {"tool": "execute_code", "args": {"code": program, "timeout_s": 60}}


def git_workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


async def run_program(root: Path, program: str, *, sandbox: bool) -> list[Event]:
    agent = Agent(
        ScriptedModel.from_data([code(program), END]),
        policy=Policy.from_lists(),
        config=Config(),
        sandbox=sandbox,
    )
    run = agent.start("go", workspace=root)
    events = [e async for e in run.stream()]
    assert run.status == "done"
    return events


def checkpoints(events: list[Event]) -> list[str]:
    return [e.message for e in events if isinstance(e, SignalEvent) and e.code == "checkpoint"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap")
async def test_in_the_sandbox_only_the_program_s_tool_calls_write_and_each_is_checkpointed(
    tmp_path: Path,
) -> None:
    root = git_workspace(tmp_path)
    events = await run_program(root, WRITES, sandbox=True)
    assert (root / "through_tool.txt").read_text() == "by the tool"
    assert not (root / "direct.txt").exists()  # the program's own write failed
    outer = next(e for e in events if isinstance(e, ToolResultEvent) and e.tool == "execute_code")
    assert outer.status == "failed" and "Read-only file system" in outer.output
    marks = checkpoints(events)
    assert len(marks) == 1 and "before write_file" in marks[0]  # none for execute_code itself


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_without_the_sandbox_the_program_s_call_is_checkpointed(tmp_path: Path) -> None:
    root = git_workspace(tmp_path)
    events = await run_program(root, WRITES, sandbox=False)
    assert (root / "through_tool.txt").read_text() == "by the tool"  # its own call ran (the lock)
    assert (root / "direct.txt").read_text() == "by the program"
    marks = checkpoints(events)
    assert any("before execute_code" in m for m in marks), marks
    assert any("before write_file" in m for m in marks), marks
    outer = next(e for e in events if isinstance(e, ToolResultEvent) and e.tool == "execute_code")
    assert outer.status == "completed" and outer.output == "wrote"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_without_the_sandbox_a_hook_the_program_plants_is_undone(tmp_path: Path) -> None:
    root = git_workspace(tmp_path)
    hook = root / ".git" / "hooks" / "pre-commit"
    program = f"open({str(hook)!r}, 'w').write('#!/bin/sh\\necho planted\\n')\n"
    events = await run_program(root, program, sandbox=False)
    assert not hook.exists()
    outer = next(e for e in events if isinstance(e, ToolResultEvent) and e.tool == "execute_code")
    assert outer.status == "failed" and outer.error_category == "protected"
    assert [e.tool for e in events if isinstance(e, ToolUse)] == ["execute_code"]
