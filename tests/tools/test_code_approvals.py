"""A program's gated call, approved or denied: what the program did before it is on the record.

The calls a program made before it stopped to ask are recorded before the approval gate; run
again once approved, the program gets their answers from the record (they do not run twice,
even when another process carries out the approval); denied, the gated call is recorded as
refused and the ``execute_code`` call as not run. A rebuild from the store runs nothing again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.tools.side_effects import DEPLOYS, TALLIES, cleared, deploy, tally

from steward import Agent, ScriptedModel
from steward.config import Config
from steward.events import ApprovalGateEvent, ApprovalResultEvent, Event, ToolResultEvent, ToolUse
from steward.safety.policy.rules import Policy
from steward.store.events import open_store

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

__all__ = ["cleared"]  # the autouse fixture that clears the counted calls


PROGRAM = "print(tally(word='a'))\nprint(deploy(target='prod'))\nprint(tally(word='b'))\n"
RUN_IT = {"tool": "execute_code", "args": {"code": PROGRAM, "timeout_s": 60}}
END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "finished"}}
ASK = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Anything else?"}}


def agent(replies: list[dict[str, Any]], **kwargs: Any) -> Agent:
    policy = Policy.from_lists(ask=["deploy"])
    model = ScriptedModel.from_data(replies)
    return Agent(model, tools=[tally, deploy], policy=policy, config=Config(), **kwargs)


def calls(events: list[Event], parent: str) -> list[tuple[str, str, str]]:
    """(id, tool, status) of each result of ``parent`` and its nested calls, in order."""
    return [
        (e.call_id, e.tool, e.status)
        for e in events
        if isinstance(e, ToolResultEvent) and (e.call_id == parent or e.call_id.startswith(parent + "."))
    ]


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def test_an_approved_program_gets_its_earlier_calls_from_the_record(tmp_path: Path) -> None:
    run = agent([RUN_IT, END]).start("go", workspace=workspace(tmp_path))
    first = [e async for e in run.stream()]
    parent = next(e for e in first if isinstance(e, ToolUse)).call_id
    assert isinstance(first[-2], ApprovalGateEvent) and first[-2].tool == "deploy"
    assert calls(first, parent) == [(f"{parent}.1", "tally", "completed")]  # recorded before the gate
    after = [e async for e in run.approve_stream()]
    assert TALLIES == ["a", "b"] and DEPLOYS == ["prod"]  # 'a' did not run twice
    assert calls(after, parent) == [
        (f"{parent}.2", "deploy", "completed"),
        (f"{parent}.3", "tally", "completed"),
        (parent, "execute_code", "completed"),  # the outer result is the program's, not deploy's
    ]
    outer = next(e for e in after if isinstance(e, ToolResultEvent) and e.call_id == parent)
    assert outer.output.splitlines()[1:] == ["tallied a", "deployed to prod", "tallied b"]
    assert run.status == "done"


async def test_a_denied_call_and_the_calls_before_it_are_on_the_record(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    async with await open_store(f"sqlite:///{tmp_path}/steward.db") as store:
        run = agent([RUN_IT, ASK], store=store).start("go", workspace=root)
        assert (await run.result()).waiting
        assert (await run.deny(reason="not on a Friday")).waiting  # then the model asks a question
        recorded = await store.events(run.id)
        parent = next(e for e in recorded if isinstance(e, ToolUse)).call_id
        assert calls(recorded, parent) == [
            (f"{parent}.1", "tally", "completed"),
            (f"{parent}.2", "deploy", "failed"),
            (parent, "execute_code", "failed"),
        ]
        denied = next(e for e in recorded if isinstance(e, ToolResultEvent) and e.call_id == f"{parent}.2")
        assert "denied" in denied.output and "not on a Friday" in denied.output
        use = next(e for e in recorded if isinstance(e, ToolUse) and e.call_id == f"{parent}.2")
        assert use.input == {"target": "prod"}
        assert TALLIES == ["a"] and DEPLOYS == []

        # Another process rebuilds the run from the store: the log replays, nothing runs again.
        resumed = await agent([RUN_IT, ASK, END], store=store).resume(run.id)
        assert (await resumed.answer("no")).solved
        assert TALLIES == ["a"] and DEPLOYS == []
        again = await store.events(run.id)
        assert [(e.type, e.seq) for e in again[: len(recorded)]] == [(e.type, e.seq) for e in recorded]


async def test_an_approval_given_in_another_process_does_not_run_earlier_calls_again(
    tmp_path: Path,
) -> None:
    root = workspace(tmp_path)
    async with await open_store(f"sqlite:///{tmp_path}/steward.db") as store:
        run = agent([RUN_IT, END], store=store).start("go", workspace=root)
        assert (await run.result()).waiting
        assert TALLIES == ["a"]
        # A new process: the program's state is gone; the record of its first call is not.
        resumed = await agent([RUN_IT, END], store=store).resume(run.id)
        assert (await resumed.approve()).solved
        assert TALLIES == ["a", "b"] and DEPLOYS == ["prod"]
        events = await store.events(run.id)
        parent = next(e for e in events if isinstance(e, ToolUse)).call_id
        assert calls(events, parent) == [
            (f"{parent}.1", "tally", "completed"),
            (f"{parent}.2", "deploy", "completed"),
            (f"{parent}.3", "tally", "completed"),
            (parent, "execute_code", "completed"),
        ]


async def test_a_program_that_takes_another_path_runs_its_new_calls(tmp_path: Path) -> None:
    """Answers from the record are given only while the calls match: a program whose calls differ
    on its second run (a file it reads changed meanwhile) has them run, numbered after the record."""
    root = workspace(tmp_path)
    (root / "word.txt").write_text("a")
    program = "print(tally(word=open('word.txt').read()))\nprint(deploy(target='prod'))\n"
    run = agent([{"tool": "execute_code", "args": {"code": program}}, END]).start("go", workspace=root)
    first = [e async for e in run.stream()]
    parent = next(e for e in first if isinstance(e, ToolUse)).call_id
    (root / "word.txt").write_text("z")
    after = [e async for e in run.approve_stream()]
    assert TALLIES == ["a", "z"] and DEPLOYS == ["prod"]
    assert calls(after, parent) == [
        (f"{parent}.2", "tally", "completed"),
        (f"{parent}.3", "deploy", "completed"),
        (parent, "execute_code", "completed"),
    ]


async def test_an_approval_whose_process_died_before_the_program_ran_is_asked_again_with_its_record(
    tmp_path: Path,
) -> None:
    """The log ends with the approval (the process stopped right after it): the gated call is put
    to the human again, and approved, the program's first call still does not run twice."""
    root = workspace(tmp_path)
    async with await open_store(f"sqlite:///{tmp_path}/steward.db") as store:
        run = agent([RUN_IT, END], store=store).start("go", workspace=root)
        assert (await run.result()).waiting
        recorded = await store.events(run.id)
        gate = next(e for e in recorded if isinstance(e, ApprovalGateEvent))
        approval = ApprovalResultEvent(id=gate.id, tool=gate.tool, decision="approved", by="user")
        approval.seq, approval.run_id, approval.ts = recorded[-1].seq + 1, run.id, recorded[-1].ts
        await store.append(run.id, [approval])
        await store.set_status(run.id, "running")  # as the process left it

        resumed = await agent([RUN_IT, END], store=store).resume(run.id, force=True)
        asked = await resumed.result()
        assert asked.waiting and TALLIES == ["a"] and DEPLOYS == []
        again = [e for e in await store.events(run.id) if isinstance(e, ApprovalGateEvent)][-1]
        assert again.tool == "deploy" and "process stopped" in again.reason
        assert (await resumed.approve()).solved
        assert TALLIES == ["a", "b"] and DEPLOYS == ["prod"]


async def test_a_program_with_two_gated_calls_is_asked_about_each_once(tmp_path: Path) -> None:
    program = "print(tally(word='a'))\nprint(deploy(target='staging'))\nprint(deploy(target='prod'))\n"
    run = agent([{"tool": "execute_code", "args": {"code": program}}, END]).start(
        "go", workspace=workspace(tmp_path)
    )
    first = [e async for e in run.stream()]
    assert isinstance(first[-2], ApprovalGateEvent) and first[-2].input == {"target": "staging"}
    second = [e async for e in run.approve_stream()]
    assert isinstance(second[-2], ApprovalGateEvent) and second[-2].input == {"target": "prod"}
    assert DEPLOYS == ["staging"]
    third = [e async for e in run.approve_stream()]
    assert DEPLOYS == ["staging", "prod"] and TALLIES == ["a"]  # each call ran once
    assert not any(isinstance(e, ApprovalGateEvent) for e in third)
    parent = next(e for e in first if isinstance(e, ToolUse)).call_id
    assert calls([*first, *second, *third], parent) == [
        (f"{parent}.1", "tally", "completed"),
        (f"{parent}.2", "deploy", "completed"),
        (f"{parent}.3", "deploy", "completed"),
        (parent, "execute_code", "completed"),
    ]
