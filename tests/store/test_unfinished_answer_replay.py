"""A run whose plain-text reply was sent back (``unfinished_answer``) is rebuilt from its log to
the same state, wherever a crash cut it, and goes on to the same end.

The model is a function of the request (the number of its replies so far picks the next one),
so a rebuilt run asks for exactly what the original would have asked next.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steward.agent import Agent
from steward.config import Config, Limits
from steward.ending import UNFINISHED_ANSWER
from steward.events import Event, SignalEvent, ToolUse, decode_event
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, UserMessage
from steward.models.scripted import FunctionModel
from steward.store.events import open_store
from steward.tools.base import tool

GOAL = "write the two notes"
NUDGE = (
    "Your plan says sub-task 2 'Write note b' is open: go on with it, or end with agent_step phase end "
    "and end_status partial or stuck and say why."
)


def _step(**fields: Any) -> ToolCall:
    return ToolCall("", "agent_step", fields)


PLAN = {"goal": GOAL, "sub_tasks": [{"id": 1, "title": "Write note a"}, {"id": 2, "title": "Write note b"}]}
SCRIPT: list[ToolCall | str] = [
    _step(phase="plan", summary="plan", plan=PLAN),
    ToolCall("", "note", {"name": "a"}),
    _step(phase="verify", summary="a is written", sub_task_outcome="done"),
    "Note a is written, so the notes are done.",  # sub-task 2 is open: sent back
    ToolCall("", "note", {"name": "b"}),
    _step(phase="verify", summary="b is written", sub_task_outcome="done"),
    _step(phase="end", summary="done", end_status="solved", end_message="Wrote notes a and b."),
]


def reply(request: ModelRequest) -> AssistantMessage:
    n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    entry = SCRIPT[n]
    if isinstance(entry, str):
        return AssistantMessage(text=entry)
    return AssistantMessage(tool_calls=(ToolCall(f"r{n}", entry.name, entry.arguments),))


@tool
def note(name: str) -> str:
    """Write a note.

    Args:
        name: The note's name.
    """
    return f"wrote note {name}"


def agent() -> Agent:
    return Agent(
        FunctionModel(reply, name="notes"),
        tools=[note],
        builtin_tools=False,
        config=Config(limits=Limits(max_steps=20)),
        sandbox=False,
    )


def shape(events: list[Event]) -> list[tuple[Any, ...]]:
    """What must replay identically: each event's kind and what it says (no times or durations)."""
    keep = ("step", "phase", "call_id", "tool", "status", "output", "code", "level", "message", "end_status")
    return [(e.type, *(getattr(e, k, None) for k in keep)) for e in events]


async def test_a_run_cut_anywhere_around_its_nudge_replays_it_word_for_word(
    store_url: str, tmp_path: Path
) -> None:
    async with await open_store(store_url) as store:
        first = agent()
        first.store = store
        run = first.start(GOAL, workspace=tmp_path)
        result = await run.result()
        assert result.solved and result.output == "Wrote notes a and b."
        full = await store.events(run.id)
    [nudge] = [e for e in full if isinstance(e, SignalEvent) and e.code == UNFINISHED_ANSWER]
    assert nudge.message == NUDGE
    at = full.index(nudge)
    # Cut before the reply that was sent back, between it and its nudge, right after the nudge,
    # and at the next step (the crash "mid-nudge" and its neighbours); a cut after a tool's start
    # is another story (the call is reported interrupted: ``test_resume``).
    cuts = [k for k in range(at - 3, at + 4) if not isinstance(full[k - 1], ToolUse)]
    assert len(cuts) >= 5
    for k in cuts:
        async with await open_store(store_url) as store:
            new_id = f"{run.id[:8]}-cut{k}"
            await store.create_run(new_id, goal=GOAL, workspace=str(tmp_path), owner="elsewhere:1")
            await store.append(new_id, [_moved(e, new_id) for e in full[:k]])
            again = agent()
            again.store = store
            rebuilt = await again.resume(new_id, force=True)
            resumed = await rebuilt.result()
            assert (resumed.status, resumed.end_status, resumed.output) == (
                "done",
                "solved",
                result.output,
            ), k
            assert shape(await store.events(new_id)) == shape(full), k
            said = [m.content for m in rebuilt.state.transcript.messages() if isinstance(m, UserMessage)]
            assert said.count(NUDGE) == 1, k  # rebuilt or said live, the model read it once


def _moved(event: Event, run_id: str) -> Event:
    data = event.to_dict()
    data["run_id"] = run_id
    return decode_event(data)
