"""A program cut short leaves the calls it made on the record, and a resumed run runs none again.

Each call a program makes is recorded as it is made, not with the program's result: a program
that raises, is killed, runs out of time, or whose host process is killed mid-program (here a
real SIGKILL of a real process) leaves them in the run's log. A run resumed after the host's
death rebuilds them from the log, reports the program as interrupted, and runs nothing again.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.tools.side_effects import TALLIES, cleared, tally

from steward import Agent, ScriptedModel
from steward.config import Config
from steward.events import Event, ToolResultEvent, ToolUse
from steward.safety.policy.rules import Policy
from steward.store.events import open_store

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

__all__ = ["cleared"]  # the autouse fixture that clears the counted calls


END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "finished"}}


def run_it(program: str, timeout_s: float = 60) -> dict[str, Any]:
    return {"tool": "execute_code", "args": {"code": program, "timeout_s": timeout_s}}


def agent(replies: list[dict[str, Any]], **kwargs: Any) -> Agent:
    model = ScriptedModel.from_data(replies)
    return Agent(model, tools=[tally], policy=Policy.from_lists(), config=Config(), **kwargs)


def calls(events: list[Event]) -> list[tuple[str, str, str]]:
    """(id, tool, status) of each tool result, in order."""
    return [(e.call_id, e.tool, e.status) for e in events if isinstance(e, ToolResultEvent)]


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def program_events(tmp_path: Path, program: str, timeout_s: float = 60) -> list[Event]:
    run = agent([run_it(program, timeout_s), END]).start("go", workspace=workspace(tmp_path))
    events = [e async for e in run.stream()]
    assert run.status == "done"
    return events


async def test_a_program_that_raises_leaves_its_calls(tmp_path: Path) -> None:
    program = "tally(word='a')\ntally(word='b')\nraise ValueError('broken on purpose')\n"
    events = await program_events(tmp_path, program)
    parent = next(e for e in events if isinstance(e, ToolUse)).call_id
    assert calls(events) == [
        (f"{parent}.1", "tally", "completed"),
        (f"{parent}.2", "tally", "completed"),
        (parent, "execute_code", "failed"),
    ]
    outer = next(e for e in events if isinstance(e, ToolResultEvent) and e.call_id == parent)
    assert "ValueError: broken on purpose" in outer.output and "line 3" in outer.output
    assert TALLIES == ["a", "b"]


async def test_a_killed_program_leaves_its_calls(tmp_path: Path) -> None:
    program = "import os, signal\ntally(word='a')\nos.kill(os.getpid(), signal.SIGKILL)\n"
    events = await program_events(tmp_path, program)
    parent = next(e for e in events if isinstance(e, ToolUse)).call_id
    assert calls(events) == [(f"{parent}.1", "tally", "completed"), (parent, "execute_code", "failed")]
    outer = next(e for e in events if isinstance(e, ToolResultEvent) and e.call_id == parent)
    assert "killed by signal 9" in outer.output


async def test_a_program_out_of_time_leaves_its_calls(tmp_path: Path) -> None:
    program = "tally(word='a')\nwhile True:\n    pass\n"
    events = await program_events(tmp_path, program, timeout_s=10)
    parent = next(e for e in events if isinstance(e, ToolUse)).call_id
    assert calls(events) == [(f"{parent}.1", "tally", "completed"), (parent, "execute_code", "failed")]
    outer = next(e for e in events if isinstance(e, ToolResultEvent) and e.call_id == parent)
    assert "[stopped after 10 s" in outer.output


HOST = """
import asyncio, sys
from pathlib import Path
from steward import Agent, ScriptedModel, tool
from steward.config import Config
from steward.safety.policy.rules import Policy
from steward.store.events import open_store

db, root, tallies, program = sys.argv[1:5]

@tool
def tally(word: str) -> str:
    \"\"\"Count a word.

    Args:
        word: The word.
    \"\"\"
    with open(tallies, "a") as file:
        file.write(word + "\\n")
    return f"tallied {word}"

async def main() -> None:
    async with await open_store(f"sqlite:///{db}") as store:
        reply = {"tool": "execute_code", "args": {"code": program, "timeout_s": 600}}
        agent = Agent(ScriptedModel.from_data([reply]), tools=[tally], policy=Policy.from_lists(),
                      config=Config(), store=store)
        run = agent.start("go", workspace=root)
        async for event in run.stream():
            if event.type == "tool_use" and event.call_id.endswith(".2"):
                print(run.id, flush=True)  # the second call is on the record: kill me now

asyncio.run(main())
"""

SLEEPER = "tally(word='a')\ntally(word='b')\nimport time\ntime.sleep(600)\n"


def killed_mid_program(db: Path, root: Path, tallies: Path) -> str:
    """Run a program in another process, SIGKILL that process while the program sleeps after
    two calls, and return the run's id."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOST, str(db), str(root), str(tallies), SLEEPER],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        # The event: the host printed the id (or died); 120 s is only a bound for a broken build.
        ready, _, _ = select.select([process.stdout], [], [], 120)
        assert ready, "the program's second call never reached the record"
        run_id = process.stdout.readline().strip()
        assert run_id, f"the host process ended first (exit code {process.poll()})"
        return run_id
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


async def test_a_run_resumed_after_its_host_died_mid_program_runs_no_call_again(tmp_path: Path) -> None:
    root, db, tallies = workspace(tmp_path), tmp_path / "steward.db", tmp_path / "tallies.txt"
    run_id = killed_mid_program(db, root, tallies)
    assert tallies.read_text() == "a\nb\n"
    async with await open_store(f"sqlite:///{db}") as store:
        before = await store.events(run_id)
        parent = next(e for e in before if isinstance(e, ToolUse)).call_id
        assert [e.call_id for e in before if isinstance(e, ToolUse)] == [parent, f"{parent}.1", f"{parent}.2"]

        resumed = await agent([run_it(SLEEPER), END], store=store).resume(run_id)
        assert (await resumed.result()).solved
        after = await store.events(run_id)
    assert TALLIES == [] and tallies.read_text() == "a\nb\n"  # nothing ran again
    results = calls(after)
    assert results[0] == (f"{parent}.1", "tally", "completed")
    assert results[1][:2] == (f"{parent}.2", "tally")  # its result may not have been stored yet
    assert results[2] == (parent, "execute_code", "failed")
    outer = next(e for e in after if isinstance(e, ToolResultEvent) and e.call_id == parent)
    assert outer.error_category == "interrupted"
