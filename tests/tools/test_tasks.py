"""``tasks``: the run's checklist beside its plan (``steward.memory.tasks``): added, marked done
and listed by the agent, shown in its working-memory view, kept in the run's log (``runs show``
rebuilds it from there), and given back to a rebuilt run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.core.conftest import RecordingScript

from steward import Agent, ScriptedModel
from steward.config import Config, Limits
from steward.errors import ToolError
from steward.events import Event, decode_event
from steward.memory.tasks import MAX_TASKS, TaskList, tasks_from_events
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.models.scripted import FunctionModel
from steward.store.events import EventStore


def call(action: str, **fields: Any) -> dict[str, Any]:
    return {"tool": "tasks", "args": {"action": action, **fields}}


def test_tasks_are_added_marked_done_and_listed_open_first() -> None:
    board = TaskList()
    assert "Added 1 'run the linter', 2 'update the changelog'" in board.apply(
        {"action": "add", "text": "run the linter\nupdate the changelog"}
    )
    shown = board.apply({"action": "done", "ids": [1]})
    assert shown.splitlines()[1:] == [
        "[Tasks] 1 open, 1 done",
        "  ○ 2. update the changelog",
        "  ✓ 1. run the linter",
    ]
    assert [t.id for t in board.open()] == [2]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"action": "add", "text": "  "}, "Give the task's text"),
        ({"action": "done", "ids": []}, "Name the tasks that are done"),
        ({"action": "done", "ids": [7]}, "No task 7"),
        ({"action": "drop"}, "action must be add, done or list"),
        ({"action": "add", "text": "x" * 301}, "at most 300 characters"),
    ],
)
def test_a_wrong_call_says_how_to_fix_it(arguments: dict[str, Any], says: str) -> None:
    with pytest.raises(ToolError, match=says):
        TaskList().apply(arguments)


def test_the_list_is_bounded() -> None:
    board = TaskList()
    board.apply({"action": "add", "text": "\n".join(f"t{i}" for i in range(MAX_TASKS))})
    with pytest.raises(ToolError, match="mark some done"):
        board.apply({"action": "add", "text": "one more"})


async def test_the_agent_keeps_its_tasks_and_sees_them_in_its_view(tmp_path: Path) -> None:
    model = RecordingScript(ScriptedModel.from_data(
        [call("add", text="write the tests"), call("add", text="update the docs"), call("done", ids=[2]),
         {"text": "Tests written; docs updated."}]
    ))  # fmt: skip
    run = Agent(model, sandbox=False).start("write the tests and the docs", workspace=tmp_path)
    await run.result()
    last = model.requests[-1].system_text
    assert "[Tasks] 1 open, 1 done\n  ○ 1. write the tests\n  ✓ 2. update the docs" in last
    assert [t.as_dict() for t in run.state.memory.tasks.items] == [
        {"id": 1, "text": "write the tests", "done": False},
        {"id": 2, "text": "update the docs", "done": True},
    ]


def reply(request: ModelRequest) -> AssistantMessage:
    script: list[tuple[str, dict[str, Any]]] = [
        ("add", {"text": "first"}), ("add", {"text": "second"}), ("done", {"ids": [1]}),
    ]  # fmt: skip
    n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    if n < len(script):
        action, fields = script[n]
        return AssistantMessage(tool_calls=(ToolCall(f"c{n}", "tasks", {"action": action, **fields}),))
    return AssistantMessage(text="All listed.")


async def test_the_log_keeps_the_list_and_a_rebuilt_run_gets_it_back(
    store: EventStore, tmp_path: Path
) -> None:
    def agent() -> Agent:
        return Agent(
            FunctionModel(reply, name="tasks"), sandbox=False, store=store, config=Config(limits=Limits())
        )

    run = agent().start("keep a list", workspace=tmp_path)
    await run.result()
    full = await store.events(run.id)
    from_log = tasks_from_events(full)
    assert [(t.id, t.text, t.done) for t in from_log.items] == [(1, "first", True), (2, "second", False)]
    # Rebuilt from a log cut before the run's end, it has the same list as the run had there.
    cut = next(
        k for k, e in enumerate(full) if e.type == "tool_result" and "second" in getattr(e, "output", "")
    )
    new_id = run.id[:8] + "-cut"
    await store.create_run(new_id, goal="keep a list", workspace=str(tmp_path), owner="elsewhere:1")
    await store.append(new_id, [_moved(e, new_id) for e in full[: cut + 1]])
    rebuilt = await agent().resume(new_id, force=True)
    assert [(t.id, t.done) for t in rebuilt.state.memory.tasks.items] == [(1, False), (2, False)]
    await rebuilt.result()
    assert [(t.id, t.done) for t in rebuilt.state.memory.tasks.items] == [(1, True), (2, False)]


def _moved(event: Event, run_id: str) -> Event:
    data = event.to_dict()
    data["run_id"] = run_id
    return decode_event(data)
