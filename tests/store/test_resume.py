"""Runs rebuilt from their logs: same state as the original, and crashes at every point resume.

A crash is simulated here by cutting the recorded log after event k (what a process killed
right then would have left, with the markers its tools had written) and resuming from it.
Real SIGKILLs of real processes are in ``test_crash.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from steward.agent import Agent
from steward.errors import RunError, StewardError
from steward.events import ApprovalGateEvent, ApprovalResultEvent, Event, ToolResultEvent, ToolUse
from steward.models.base import ToolCall
from steward.run import Run, RunResult
from steward.store.events import EventStore, open_store
from steward.testing.trajectory import GOAL, markers, trajectory_agent

ALL = ["a", "b", "c", "d", "e"]
# The model's last reply in the runs below: it says it is done ("ok").
END_OK = ToolCall(
    "end", "agent_step", {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}
)


def _dead_owner() -> str:
    import socket
    import subprocess

    gone = subprocess.Popen(["true"])  # a pid that existed and has certainly exited
    gone.wait()
    return f"{socket.gethostname()}:{gone.pid}"


DEAD_OWNER = _dead_owner()


async def finish(run: Run, result: RunResult | None = None) -> RunResult:
    """Answer and approve whatever the run waits for until it ends (bounded)."""
    result = result or await run.result()
    for _ in range(10):
        if not result.waiting:
            return result
        assert result.pending is not None
        approval = result.pending.approval
        if approval is not None and "outcome is unknown" in approval.reason:
            # Asked again about a call that was interrupted: this human checks and declines.
            result = await run.deny(reason="it already ran")
        elif approval is not None:
            result = await run.approve()
        else:
            result = await run.answer("blue")
    raise AssertionError("the run kept waiting")


async def full_run(store: EventStore, workspace: Path) -> tuple[Agent, str, list[Event]]:
    agent = trajectory_agent()
    agent.store = store
    run = agent.start(GOAL, workspace=workspace)
    result = await finish(run)
    assert result.solved, result.output
    return agent, run.id, await store.events(run.id)


async def test_a_finished_run_is_recorded_completely_and_in_order(store: EventStore, tmp_path: Path) -> None:
    _, run_id, events = await full_run(store, tmp_path)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    types = [e.type for e in events]
    for needed in ("model_reply", "approval_gate", "approval_result", "answer", "waiting", "done"):
        assert needed in types
    row = await store.get_run(run_id)
    assert row is not None and row.status == "done" and row.end_status == "solved"
    assert row.output == "Marked a, b, c, d and e." and row.owner is None and row.workspace == str(tmp_path)
    assert markers(tmp_path) == ALL


async def test_a_waiting_run_is_rebuilt_with_the_same_state(store: EventStore, tmp_path: Path) -> None:
    agent = trajectory_agent()
    agent.store = store
    original = agent.start(GOAL, workspace=tmp_path)
    result = await original.result()
    assert result.waiting and result.question == "Which colour?"

    other = trajectory_agent()  # a new process, in effect: nothing shared but the store
    other.store = store
    rebuilt = await other.resume(original.id[:6])
    assert rebuilt.status == "waiting" and rebuilt.pending == original.pending
    a, b = original.state, rebuilt.state
    assert b.memory.render_view() == a.memory.render_view()
    assert b.transcript.entries == a.transcript.entries
    assert b.counters == a.counters and b.usage == a.usage and b.seq == a.seq
    assert markers(tmp_path) == ["a", "b"]  # nothing ran again

    result = await rebuilt.answer("blue")  # then on to the approval, also across a "restart"
    assert result.waiting and result.pending is not None and result.pending.approval is not None
    third = trajectory_agent()
    third.store = store
    again = await third.resume(original.id)
    assert again.pending is not None and again.pending.approval is not None
    assert again.pending.approval.tool == "mark" and again.pending.approval.arguments == {"name": "c"}
    result = await again.approve()
    assert result.solved and markers(tmp_path) == ALL
    events = await store.events(original.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_finished_run_is_not_resumed(store: EventStore, tmp_path: Path) -> None:
    agent, run_id, _ = await full_run(store, tmp_path)
    with pytest.raises(RunError, match="already finished"):
        await agent.resume(run_id)
    with pytest.raises(StewardError, match="no run 'nope'"):
        await agent.resume("nope")


def _expected_markers(events: list[Event]) -> tuple[list[str], set[str]]:
    """Markers written by calls whose results are in ``events``; calls started without one."""
    done = {e.call_id for e in events if isinstance(e, ToolResultEvent)}
    written, started = [], set()
    for e in events:
        if isinstance(e, ToolUse):
            if e.call_id in done:
                result = next(r for r in events if isinstance(r, ToolResultEvent) and r.call_id == e.call_id)
                if result.status == "completed":
                    written.append(e.input["name"])
            elif not _waits_for_approval(events, e):
                started.add(e.input["name"])
    return written, started


def _waits_for_approval(events: list[Event], use: ToolUse) -> bool:
    """Whether the call was held at its approval gate (never started) when the log ends."""
    after = events[events.index(use) + 1 :]
    gated = any(isinstance(e, ApprovalGateEvent) for e in after)
    approved = any(isinstance(e, ApprovalResultEvent) and e.decision == "approved" for e in after)
    return gated and not approved


async def test_a_run_cut_after_any_event_resumes_to_the_end(store_url: str, tmp_path: Path) -> None:
    """For every k: the log's first k events, as a crash would leave them, resume and finish."""
    source = tmp_path / "original"
    source.mkdir()
    async with await open_store(store_url) as store:
        _, run_id, full = await full_run(store, source)
    for k in range(1, len(full)):
        prefix = full[:k]
        ws = tmp_path / f"cut{k}"
        ws.mkdir()
        written, started = _expected_markers(prefix)
        # The markers as the crash left them: results recorded, and for a call that was running
        # when the process died, its line may or may not be there; both are tried.
        for tool_ran in sorted({False, bool(started)}):
            shutil.rmtree(ws)
            ws.mkdir()
            (ws / "markers.txt").write_text(
                "".join(f"{m}\n" for m in written + (sorted(started) if tool_ran else []))
            )
            async with await open_store(store_url) as store:
                # The cut log under the same run id, as if its process had died, owned by a dead pid.
                new_id = run_id
                await store.delete_run(new_id)
                await store.create_run(new_id, goal=GOAL, workspace=str(ws), owner=DEAD_OWNER)
                await store.append(new_id, [_moved(e, new_id, ws) for e in prefix])
                agent = trajectory_agent()
                agent.store = store
                run = await agent.resume(new_id)
                result = await finish(run)
                assert result.status == "done", (k, result.output)
                events = await store.events(new_id)
                assert [e.seq for e in events] == list(range(1, len(events) + 1)), k
                assert [e.type for e in events[:k]] == [e.type for e in prefix], k
                got = markers(ws)
                assert len(got) == len(set(got)), (k, got)  # nothing ran twice
                interrupted = {e.tool_input_name for e in _interrupted(events)}
                for name in ALL:
                    assert name in got or name in interrupted, (k, name, got)
                row = await store.get_run(new_id)
                assert row is not None and row.attempts == 1 and row.status == "done"


def _moved(event: Event, run_id: str, ws: Path) -> Event:
    from steward.events import RunStart, decode_event

    data = event.to_dict()
    data["run_id"] = run_id
    moved = decode_event(data)
    if isinstance(moved, RunStart):
        moved.workspace = str(ws)
    return moved


class _Interrupted:
    def __init__(self, name: str) -> None:
        self.tool_input_name = name


def _interrupted(events: list[Event]) -> list[_Interrupted]:
    uses = {e.call_id: e for e in events if isinstance(e, ToolUse)}
    return [
        _Interrupted(uses[e.call_id].input["name"])
        for e in events
        if isinstance(e, ToolResultEvent)
        and e.call_id in uses
        and (e.error_category == "interrupted" or "it already ran" in e.output)
    ]


async def test_a_cancelled_run_resumes_and_its_cut_call_is_reported(
    store: EventStore, tmp_path: Path
) -> None:
    import asyncio

    from steward import tool
    from steward.models.base import AssistantMessage, ModelRequest, ToolCall
    from steward.models.scripted import FunctionModel

    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Take a while."""
        started.set()
        await asyncio.sleep(30)
        return "finished"

    def reply(request: ModelRequest) -> AssistantMessage:
        n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        return (
            AssistantMessage(tool_calls=(ToolCall("c1", "slow", {}),))
            if n == 0
            else AssistantMessage(tool_calls=(END_OK,))
        )

    agent = Agent(FunctionModel(reply), tools=[slow], builtin_tools=False, store=store)
    run = agent.start("be slow", workspace=tmp_path)
    task = asyncio.create_task(run.result())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    row = await store.get_run(run.id)
    assert row is not None and row.status == "cancelled"

    again = await Agent(FunctionModel(reply), tools=[slow], builtin_tools=False, store=store).resume(run.id)
    result = await again.result()
    assert result.solved and result.output == "ok"
    events = await store.events(run.id)
    cut = next(e for e in events if isinstance(e, ToolResultEvent))
    assert cut.error_category == "interrupted"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_rebuilt_run_reports_the_notes_of_its_calls_again(store: EventStore, tmp_path: Path) -> None:
    from steward import tool
    from steward.events import SignalEvent
    from steward.models.base import AssistantMessage, ModelRequest, ToolCall
    from steward.models.scripted import FunctionModel
    from steward.safety.policy.rules import Policy

    @tool
    def deploy(target: str) -> str:
        """Deploy to a target.

        Args:
            target: Where to deploy.
        """
        return f"deployed to {target}"

    ask = {"phase": "feedback", "summary": "ask", "feedback_message": "Where else?"}
    script = [ToolCall("c1", "deploy", {"target": "prod"}), ToolCall("c2", "agent_step", ask)]

    def reply(request: ModelRequest) -> AssistantMessage:
        n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        return AssistantMessage(tool_calls=(script[n] if n < len(script) else END_OK,))

    def make() -> Agent:
        policy = Policy.from_lists(deny=["deploy(prod)"])
        return Agent(FunctionModel(reply), tools=[deploy], builtin_tools=False, policy=policy, store=store)

    original = make().start("deploy", workspace=tmp_path)
    assert (await original.result()).question == "Where else?"
    rebuilt = await make().resume(original.id)  # the log's blocked note must come back with the result
    assert rebuilt.status == "waiting" and rebuilt.state.seq == original.state.seq
    result = await rebuilt.answer("nowhere")
    assert result.solved and result.output == "ok"
    events = await store.events(original.id)
    blocked = [e for e in events if isinstance(e, SignalEvent) and e.code == "blocked"]
    assert [(e.level, e.message) for e in blocked] == [
        ("warning", "deploy: denied by the rule deny deploy(prod) (config)")
    ]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_an_idempotent_tool_cut_short_runs_again_instead_of_being_reported(
    store: EventStore, tmp_path: Path
) -> None:
    """A tool whose spec says running it twice changes nothing (``delegate``) is called again
    when the run goes on after a stop, rather than reported to the model as interrupted."""
    import asyncio
    from collections.abc import Mapping, Sequence
    from typing import Any

    from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolSpec
    from steward.models.scripted import FunctionModel
    from steward.tools.base import ToolContext, ToolResult, Toolset

    started = asyncio.Event()
    calls: list[str] = []

    class Lookup(Toolset):
        async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
            return [ToolSpec("lookup", "Look it up.", {"type": "object", "properties": {}}, idempotent=True)]

        async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
            calls.append(name)
            if len(calls) == 1:
                started.set()
                await asyncio.sleep(30)
            return ToolResult("found it")

    def reply(request: ModelRequest) -> AssistantMessage:
        n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        return (
            AssistantMessage(tool_calls=(ToolCall("c1", "lookup", {}),))
            if n == 0
            else AssistantMessage(tool_calls=(END_OK,))
        )

    def make() -> Agent:
        return Agent(FunctionModel(reply), toolsets=[Lookup()], builtin_tools=False, store=store)

    run = make().start("look", workspace=tmp_path)
    task = asyncio.create_task(run.result())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = await (await make().resume(run.id)).result()
    assert result.solved and calls == ["lookup", "lookup"]
    (done,) = [e for e in await store.events(run.id) if isinstance(e, ToolResultEvent)]
    assert done.output == "found it" and done.error_category is None
