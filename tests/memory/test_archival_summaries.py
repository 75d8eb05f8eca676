"""Summaries written for other reasons are archived in long-term memory too, and recallable:
a closed session's summary, and the turns a run folded to save context. No model call is added."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steward import Agent, FunctionModel, Limits, ScriptedModel, tool
from steward.events import CompactionEvent, ToolResultEvent
from steward.memory.archival import LongTermAccess
from steward.memory.longterm import Scope
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.sessions import Session
from steward.store.events import EventStore

END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "finished"}}


async def recall_in(store: EventStore, workspace: Path, query: str) -> str:
    """What a new run's ``recall`` answers to ``query`` in the default scope of ``workspace``."""
    agent = Agent(
        ScriptedModel.from_data([{"tool": "recall", "args": {"query": query}}, END]),
        store=store, builtin_tools=False, sandbox=False,
    )  # fmt: skip
    try:
        events = [e async for e in agent.start("look it up", workspace=workspace).stream()]
    finally:
        await agent.aclose()
    return next(e.output for e in events if isinstance(e, ToolResultEvent))


async def test_a_closed_sessions_summary_is_recallable(store: EventStore, tmp_path: Path) -> None:
    answer = {"agent_step": {"phase": "end", "summary": "s", "end_status": "solved",
              "end_message": "The invoice exporter now writes ISO dates."}}  # fmt: skip
    agent = Agent(ScriptedModel.from_data([answer]), store=store, builtin_tools=False, sandbox=False)
    try:
        session = await Session.open(agent, title="exporter work")
        await (await session.start("make the invoice exporter write ISO dates", workspace=tmp_path)).result()
        summary = await session.close()
    finally:
        await agent.aclose()
    assert "invoice exporter" in summary
    found = await recall_in(store, tmp_path, "invoice exporter dates")
    first = found.splitlines()[0]
    assert "session summary" in first and "invoice exporter" in first
    items = await LongTermAccess(store.engine, agent.config.memory).memory.items(None, kind="session_summary")
    assert [(i.scope, i.session_id) for i in items] == [
        (Scope("local", "", str(tmp_path.resolve())), session.id)
    ]


@tool
def note(i: int) -> str:
    """A medium output."""
    return f"note {i} " + "x" * 1500


def _script() -> list[AssistantMessage]:
    steps = [AssistantMessage(tool_calls=(ToolCall(f"c{i}", "note", {"i": i}),)) for i in range(1, 30)]
    end = ToolCall("end", "agent_step", dict(END["agent_step"]))
    return [*steps, AssistantMessage(tool_calls=(end,))]


async def test_turns_folded_to_save_context_are_recallable(store: EventStore, tmp_path: Path) -> None:
    script = _script()
    seen: list[ModelRequest] = []

    def reply(request: ModelRequest) -> AssistantMessage:
        if request.purpose == "summary":
            return AssistantMessage(text="Notes were taken one by one; the zebra parser needed no change.")
        seen.append(request)
        return script[min(len(seen), len(script)) - 1]

    agent = Agent(
        FunctionModel(reply, summaries=True), tools=[note], builtin_tools=False, sandbox=False, store=store,
        limits=Limits(request_token_budget=4_000, keep_recent_observations=2, max_steps=40),
    )  # fmt: skip
    try:
        events: list[Any] = [e async for e in agent.start("take notes", workspace=tmp_path).stream()]
    finally:
        await agent.aclose()
    assert any(isinstance(e, CompactionEvent) and e.kind == "turns" for e in events)
    found = await recall_in(store, tmp_path, "zebra parser")
    assert "turns" in found.splitlines()[0] and "the zebra parser needed no change" in found
