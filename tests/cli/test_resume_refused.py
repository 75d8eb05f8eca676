"""A resume that is refused changes nothing about the run: a moved workspace is not a crash (no
attempt is counted, the run is never marked failed for it), the message says what ``-w`` found,
``runs show`` offers only what can work, and a rebuild that fails leaves a waiting run waiting."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward.agent import Agent
from steward.config import Config
from steward.errors import RunError, ScriptError
from steward.store.events import open_store

SLOW: list[dict[str, Any]] = [
    {"tool": "bash", "args": {"command": "touch started; sleep 60"}},
    {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "all done"}},
]
ASK = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"  # outside the workspace: it stays where it is when that moves
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


def killed_run(tmp_path: Path, ws: Path) -> None:
    """A run in ``ws`` whose process was killed with SIGKILL mid-command (recorded as running)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config-home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "steward", "run", "wait", "--model", script(tmp_path, SLOW), "-w", str(ws)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (ws / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_resuming_a_moved_workspace_is_refused_without_counting_a_crash(cli: Any, tmp_path: Path) -> None:
    ws, moved = tmp_path / "project", tmp_path / "project-moved"
    ws.mkdir()
    killed_run(tmp_path, ws)
    ws.rename(moved)
    for _ in range(4):  # more than the three crashes that would close it for good
        refused = cli("resume", "-w", str(moved), XDG_STATE_HOME=str(tmp_path / "state"))
        assert refused.returncode == 2, refused.stderr
        assert str(ws) in refused.stderr and f"found through {moved}" in refused.stderr
        assert "Traceback" not in refused.stderr and "--workspace" not in refused.stderr
    shown = cli("runs", "show", "last", "-w", str(moved)).stdout
    assert "running" in shown and "crash" not in shown and "steward resume" not in shown, shown
    assert f"workspace {ws} is gone" in shown

    moved.rename(ws)  # put back: it goes on, as a run that crashed once
    shown = cli("runs", "show", "last", "-w", str(ws)).stdout
    assert f"steward resume {shown.split()[1]} -w {ws}" in shown, shown
    resumed = cli("resume", "-w", str(ws), XDG_STATE_HOME=str(tmp_path / "state"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed after 1 crash" in cli("runs", "show", "last", "-w", str(ws)).stdout


def test_a_run_closed_for_good_is_not_offered_to_resume(cli: Any, tmp_path: Path) -> None:
    ws = tmp_path / "project"
    ws.mkdir()
    killed_run(tmp_path, ws)

    async def give_up() -> None:
        async with await open_store(f"sqlite:///{ws / '.steward' / 'steward.db'}") as store:
            agent = Agent(script(tmp_path, SLOW), config=Config(), store=store)
            with pytest.raises(RunError, match="marked failed"):
                await agent.resume("last", max_attempts=0)  # the crash limit is reached

    asyncio.run(give_up())
    shown = cli("runs", "show", "last", "-w", str(ws)).stdout
    assert "failed" in shown and "ended for good" in shown and "steward resume" not in shown, shown


def test_a_waiting_run_whose_rebuild_fails_still_waits(cli: Any, tmp_path: Path) -> None:
    first = cli("run", "pick", "--model", script(tmp_path, [ASK]), stdin="")
    assert first.returncode == 1, first.stderr

    async def resume_with_a_model_that_cannot_load() -> None:
        async with await open_store(f"sqlite:///{tmp_path / '.steward' / 'steward.db'}") as store:
            agent = Agent("scripted:/nonexistent/script.yaml", config=Config(), store=store)
            with pytest.raises(ScriptError, match="was not found"):
                await agent.resume("last")
            await agent.aclose()

    asyncio.run(resume_with_a_model_that_cannot_load())
    answered = cli("answer", "last", "blue")  # still waiting: the answer is taken
    assert "not waiting" not in answered.stderr
    assert "answered: blue" in cli("runs", "show", "last").stdout
