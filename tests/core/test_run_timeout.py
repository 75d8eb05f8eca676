"""The run's wall-clock limit (``[limits] run_timeout_s``): the run ends partial, what it ran is stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from steward import Agent, Limits, ScriptedModel, tool
from steward._proc import pid_alive
from steward.events import DoneEvent, Event, SignalEvent, ToolResultEvent
from steward.models.base import AssistantMessage, Model, ModelRequest, StreamItem, TextDelta, ToolCall
from steward.models.scripted import FunctionModel
from steward.safety.policy.rules import Policy
from steward.store.events import EventStore, open_store

HANG_BOUND_S = 30.0  # only so that a broken limit fails the test instead of hanging it


def step(phase: str, summary: str = "s", **fields: Any) -> dict[str, Any]:
    return {"agent_step": {"phase": phase, "summary": summary, **fields}}


END = step("end", end_status="solved", end_message="finished")
PLAN = step(
    "plan",
    plan={
        "goal": "sleep",
        "sub_tasks": [{"id": 1, "title": "start the sleeper"}, {"id": 2, "title": "report"}],
    },
)


def bash_agent(replies: list[dict[str, Any]], **limits: Any) -> Agent:
    return Agent(
        ScriptedModel.from_data(replies),
        limits=Limits(**limits),
        policy=Policy.from_lists(allow=["bash"]),
        sandbox=False,
    )


async def events_of(agent: Agent, workspace: Path) -> list[Event]:
    run = agent.start("sleep for a while", workspace=workspace)
    async with asyncio.timeout(HANG_BOUND_S):
        return [e async for e in run.stream()]


async def gone(pid: int) -> bool:
    """Whether ``pid`` stopped running (a zombie counts as stopped), polled within the bound."""
    for _ in range(int(HANG_BOUND_S / 0.05)):
        if not pid_alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_long_command_is_stopped_and_the_run_ends_partial(tmp_path: Path) -> None:
    sleeper = {"tool": "bash", "args": {"command": "sleep 60 & echo $! > sleeper.pid; wait"}}
    events = await events_of(bash_agent([PLAN, sleeper, END], run_timeout_s=2), tmp_path)

    pid = int((tmp_path / "sleeper.pid").read_text())
    assert await gone(pid)
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.status == "failed" and result.error_category == "timeout"
    assert result.output.startswith("Stopped by the run's time limit (2 s of running)")
    timeouts = [n for n, e in enumerate(events) if isinstance(e, SignalEvent) and e.code == "run_timeout"]
    assert len(timeouts) == 1 and timeouts[0] > events.index(result)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.status == "done" and done.end_status == "partial"
    assert "time limit (2 s of running)" in done.message
    assert "Not done: 1 start the sleeper; 2 report" in done.message


async def test_a_model_call_past_the_limit_is_cancelled(tmp_path: Path) -> None:
    closed: list[str] = []

    class Stalling(Model):
        """A provider that starts a reply and then never finishes it."""

        name = "stalling"

        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
            try:
                yield TextDelta("thinking about it")
                await asyncio.sleep(HANG_BOUND_S * 2)
            finally:
                closed.append("stream")

    run = Agent(Stalling(), limits=Limits(run_timeout_s=1), sandbox=False).start("wait", workspace=tmp_path)
    async with asyncio.timeout(HANG_BOUND_S):
        events = [e async for e in run.stream()]

    assert closed == ["stream"]
    assert [e.type for e in events][-2:] == ["signal", "done"]
    assert isinstance(events[-2], SignalEvent) and events[-2].code == "run_timeout"
    assert run.state.end_status == "partial" and "time limit" in run.state.output


async def test_a_run_within_its_limit_ends_normally(tmp_path: Path) -> None:
    events = await events_of(
        bash_agent([{"tool": "bash", "args": {"command": "echo hi"}}, END], run_timeout_s=60), tmp_path
    )

    assert "run_timeout" not in [getattr(e, "code", None) for e in events]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "solved" and done.message == "finished"


DEPLOYS: list[str] = []


@tool
def deploy(target: str) -> str:
    """Deploy to a target.

    Args:
        target: Where to deploy.
    """
    DEPLOYS.append(target)
    return f"deployed to {target}"


async def test_time_waiting_for_an_approval_is_not_counted(tmp_path: Path) -> None:
    limit = 2.0
    DEPLOYS.clear()
    agent = Agent(
        ScriptedModel.from_data([{"tool": "deploy", "args": {"target": "prod"}}, END]),
        tools=[deploy],
        builtin_tools=False,
        policy=Policy.from_lists(ask=["deploy"]),
        limits=Limits(run_timeout_s=limit),
        sandbox=False,
    )
    run = agent.start("ship it", workspace=tmp_path)
    async with asyncio.timeout(HANG_BOUND_S):
        first = [e async for e in run.stream()]
    assert first[-1].type == "waiting"

    await asyncio.sleep(limit + 0.5)  # the human takes longer than the whole limit
    async with asyncio.timeout(HANG_BOUND_S):
        after = [e async for e in run.approve_stream()]

    assert DEPLOYS == ["prod"]
    assert "run_timeout" not in [getattr(e, "code", None) for e in after]
    assert [e.type for e in after].count("step") == 1  # the next step ran
    assert run.state.end_status == "solved"
    assert run.state.run_time_s < limit  # the running total leaves the wait out


@tool
async def slow() -> str:
    """Take longer than any run here may."""
    await asyncio.sleep(HANG_BOUND_S * 2)
    return "finished"


def slow_then_answer(request: ModelRequest) -> AssistantMessage:
    asked = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}
    call = ToolCall("c1", "slow", {}) if asked == 0 else ToolCall("c2", "agent_step", end)
    return AssistantMessage(tool_calls=(call,))


def slow_agent(store: EventStore) -> Agent:
    return Agent(
        FunctionModel(slow_then_answer),
        tools=[slow],
        builtin_tools=False,
        limits=Limits(run_timeout_s=1),
        store=store,
        sandbox=False,
    )


async def resumed_from(store: EventStore, prefix: list[Event], workspace: Path) -> list[Event]:
    """The run as a process that died after ``prefix`` left it, resumed; its whole log after."""
    run_id = prefix[0].run_id
    await store.delete_run(run_id)
    await store.create_run(run_id, goal="be slow", workspace=str(workspace), owner=_dead_owner())
    await store.append(run_id, prefix)
    run = await slow_agent(store).resume(run_id)
    async with asyncio.timeout(HANG_BOUND_S):
        await run.result()
    return await store.events(run_id)


def _dead_owner() -> str:
    import socket
    import subprocess

    gone = subprocess.Popen(["true"])  # a pid that existed and has certainly exited
    gone.wait()
    return f"{socket.gethostname()}:{gone.pid}"


async def test_a_timed_out_run_rebuilt_from_its_log_ends_the_same_way(tmp_path: Path) -> None:
    async with await open_store(f"sqlite:///{tmp_path}/steward.db") as store:
        run = slow_agent(store).start("be slow", workspace=tmp_path)
        async with asyncio.timeout(HANG_BOUND_S):
            await run.result()
        full = await store.events(run.id)
        assert [e.type for e in full][-3:] == ["tool_result", "signal", "done"]

        # Dead after the time-out was recorded, before the end was: the log decides, not the clock.
        again = await resumed_from(store, full[:-1], tmp_path)
        assert [e.type for e in again] == [e.type for e in full]
        assert isinstance(again[-1], DoneEvent) and again[-1].end_status == "partial"

        # Dead right after the cut call: a new process gives the run a fresh clock and it goes on.
        again = await resumed_from(store, full[:-2], tmp_path)
        assert [e.type for e in again][len(full) - 2 :][:2] == ["step", "model_reply"]
        assert isinstance(again[-1], DoneEvent)
        assert again[-1].end_status == "solved" and "run_timeout" not in [
            getattr(e, "code", "") for e in again
        ]
