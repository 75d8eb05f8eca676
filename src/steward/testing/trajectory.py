"""A deterministic agent for crash, resume and store tests: every kind of step, real side effects.

The model is a function of the request (the number of replies so far picks the next one), so
a rebuilt run asks for exactly what the original would have asked for next. The ``mark``
tool appends a line to ``markers.txt`` in the workspace: a side effect the tests count.
Setting ``STEWARD_CRASH_IN_MARK=NAME`` makes ``mark(NAME)`` kill its own process with
SIGKILL right after writing its line, a crash in the middle of a tool call.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from steward.agent import Agent
from steward.config import Config, Limits
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.models.scripted import FunctionModel
from steward.tools.base import ToolContext, tool

MARKERS = "markers.txt"
CRASH_ENV = "STEWARD_CRASH_IN_MARK"
GOAL = "mark a, b, c, d and e, asking which colour first"
APPROVAL_RULE = "mark(c)"  # an ask rule: mark("c") waits for a human


def _step(**fields: Any) -> tuple[str, dict[str, Any]]:
    return "agent_step", fields


# One entry per model reply: each a list of (tool, arguments), or a final text.
SCRIPT: list[list[tuple[str, dict[str, Any]]] | str] = [
    [
        _step(
            phase="plan",
            thinking="two parts",
            summary="plan",
            plan={
                "goal": GOAL,
                "sub_tasks": [
                    {"id": 1, "title": "mark a and b", "depends_on": []},
                    {"id": 2, "title": "mark c, d and e", "depends_on": [1]},
                ],
            },
        )
    ],
    [("mark", {"name": "a"})],
    [
        _step(
            phase="act",
            thinking="b next",
            summary="mark b",
            action={"tool_name": "mark", "tool_input": {"name": "b"}},
        )
    ],
    [
        _step(
            phase="verify",
            thinking="a and b are written",
            summary="verified a, b",
            key_facts=["a and b are marked"],
            sub_task_outcome="done",
        )
    ],
    [_step(phase="feedback", thinking="need a colour", summary="ask", feedback_message="Which colour?")],
    [("mark", {"name": "c"})],
    [("mark", {"name": "d"}), ("mark", {"name": "e"})],
    [_step(phase="verify", thinking="all written", summary="verified c, d, e", sub_task_outcome="done")],
    [_step(phase="end", summary="done", end_status="solved", end_message="Marked a, b, c, d and e.")],
]


def trajectory_reply(request: ModelRequest) -> AssistantMessage:
    replies = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    entry = SCRIPT[min(replies, len(SCRIPT) - 1)]
    if isinstance(entry, str):
        return AssistantMessage(text=entry)
    calls = tuple(ToolCall(f"r{replies}c{n}", name, args) for n, (name, args) in enumerate(entry))
    return AssistantMessage(tool_calls=calls)


@tool
def mark(ctx: ToolContext, name: str) -> str:
    """Append NAME to markers.txt in the workspace.

    Args:
        name: The marker to write.
    """
    with (ctx.workspace / MARKERS).open("a", encoding="utf-8") as out:
        out.write(name + "\n")
        out.flush()
        os.fsync(out.fileno())
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"marked {name}"


def trajectory_agent(*, approvals: bool = True) -> Agent:
    """The agent: the trajectory model, ``mark``, no built-in tools, and the approval rule."""
    from steward.safety.policy.rules import Policy

    return Agent(
        FunctionModel(trajectory_reply, name="trajectory"),
        tools=[mark],
        builtin_tools=False,
        policy=Policy.from_lists(ask=[APPROVAL_RULE] if approvals else []),
        config=Config(limits=Limits(max_steps=30)),
        sandbox=False,
    )


def markers(workspace: Path) -> list[str]:
    path = workspace / MARKERS
    return path.read_text(encoding="utf-8").split() if path.exists() else []
