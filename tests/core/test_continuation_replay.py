"""A continued run rebuilt from its log (a crash, ``steward resume``) reaches the same decisions
without asking again or running the verifier again: its recorded result is taken instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steward.agent import Agent
from steward.config import Config, Limits
from steward.continuation import VERIFY_TOOL
from steward.events import ContinuationEvent, Event, ToolResultEvent, ToolUse, decode_event
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, UserMessage
from steward.models.scripted import FunctionModel
from steward.store.events import EventStore

GOAL = "make the checks pass"
VERIFY = "echo run >> checks.log; echo 'FAILED: 1 test'; exit 1"
ENDS = ["Done.", "Done, really."]


def reply(request: ModelRequest) -> AssistantMessage:
    n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    end = {"phase": "end", "summary": "end", "end_status": "solved", "end_message": ENDS[n]}
    return AssistantMessage(tool_calls=(ToolCall(f"r{n}", "agent_step", end),))


def agent(store: EventStore) -> Agent:
    limits = Limits(max_steps=10, verify=VERIFY, max_continuations=1)
    return Agent(FunctionModel(reply, name="ends"), builtin_tools=False, config=Config(limits=limits),
                 sandbox=False, store=store)  # fmt: skip


def shape(events: list[Event]) -> list[tuple[Any, ...]]:
    keep = ("step", "call_id", "tool", "status", "output", "number", "asked", "reasons", "end_status")
    return [(e.type, *(getattr(e, k, None) for k in keep)) for e in events]


def _moved(event: Event, run_id: str) -> Event:
    data = event.to_dict()
    data["run_id"] = run_id
    return decode_event(data)


def checks(workspace: Path) -> int:
    log = workspace / "checks.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


async def test_a_rebuilt_run_does_not_ask_again_nor_rerun_the_verifier(
    store: EventStore, tmp_path: Path
) -> None:
    run = agent(store).start(GOAL, workspace=tmp_path)
    result = await run.result()
    assert result.end_status == "partial"
    full = await store.events(run.id)
    assert [(e.number, e.asked) for e in full if isinstance(e, ContinuationEvent)] == [(1, True), (1, False)]
    assert checks(tmp_path) == 2
    for k in range(2, len(full)):
        before = checks(tmp_path)
        new_id = f"{run.id[:8]}-cut{k}"
        await store.create_run(new_id, goal=GOAL, workspace=str(tmp_path), owner="elsewhere:1")
        await store.append(new_id, [_moved(e, new_id) for e in full[:k]])
        rebuilt = await agent(store).resume(new_id, force=True)
        resumed = await rebuilt.result()
        assert (resumed.end_status, resumed.output) == (result.end_status, result.output), k
        assert shape(await store.events(new_id)) == shape(full), k
        # Only the checks the log had not finished recording run again (a cut after a check's
        # start runs it again: checking is idempotent).
        unrecorded = sum(1 for e in full[k:] if isinstance(e, ToolResultEvent) and e.tool == VERIFY_TOOL)
        assert checks(tmp_path) - before == unrecorded, k
        said = [m.content for m in rebuilt.state.transcript.messages() if isinstance(m, UserMessage)]
        assert sum("Are you done?" in m for m in said) == 1, k
    assert any(isinstance(e, ToolUse) and e.tool == VERIFY_TOOL for e in full)
