"""Real scripted runs the trajectory tests export: real tools in a temporary workspace, a real store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from steward.agent import Agent
from steward.config import Config, Limits
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.models.scripted import FunctionModel
from steward.store.events import EventStore

GOAL = "write notes.txt, read it back and say what it holds"
PLAN = {
    "goal": GOAL,
    "sub_tasks": [
        {"id": 1, "title": "write notes.txt", "depends_on": []},
        {"id": 2, "title": "read it back", "depends_on": [1]},
    ],
}


def step(phase: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return "agent_step", {"phase": phase, "thinking": f"{phase} now", "summary": f"{phase} step", **fields}


Reply = Sequence[tuple[str, Mapping[str, Any]]] | str

#: plan, a direct call, verify, a failing call, reflect, an act step, verify, then a plain-text answer.
WORK: list[Reply] = [
    [step("plan", plan=PLAN)],
    [("write_file", {"path": "notes.txt", "content": "alpha\nbeta\n"})],
    [step("verify", sub_task_outcome="done")],
    [("read_file", {"path": "missing.txt"})],
    [step("reflect", summary="the file is notes.txt, not missing.txt")],
    [step("act", action={"tool_name": "read_file", "tool_input": {"path": "notes.txt"}})],
    [step("verify", key_facts=["notes.txt holds alpha and beta"], sub_task_outcome="done")],
    "notes.txt holds two lines: alpha and beta.",
]


def scripted(replies: Sequence[Reply], name: str = "scripted-work") -> FunctionModel:
    """A model that gives ``replies`` in order (the last again if asked for more)."""

    def reply(request: ModelRequest) -> AssistantMessage:
        n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        entry = replies[min(n, len(replies) - 1)]
        if isinstance(entry, str):
            return AssistantMessage(text=entry)
        calls = tuple(ToolCall(f"c{n}-{k}", tool, dict(args)) for k, (tool, args) in enumerate(entry))
        return AssistantMessage(tool_calls=calls)

    return FunctionModel(reply, name=name)


def agent(store: EventStore, replies: Sequence[Reply], *, verify: str = "", max_steps: int = 20,
          instructions: str = "") -> Agent:  # fmt: skip
    limits = Limits(max_steps=max_steps, verify=verify, max_continuations=1 if verify else 0)
    return Agent(scripted(replies), config=Config(limits=limits), sandbox=False, store=store,
                 instructions=instructions)  # fmt: skip


async def run(store: EventStore, workspace: Path, replies: Sequence[Reply], **options: Any) -> str:
    """Run ``replies`` to its end in ``workspace``; the run's id."""
    started = agent(store, replies, **options).start(GOAL, workspace=workspace)
    await started.result()
    return started.id
