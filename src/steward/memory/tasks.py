"""``tasks``: a free-form checklist beside the plan, kept per run.

The plan (``agent_step`` phase ``plan``) is a structured decomposition of the goal; the task
list is the agent's scratch to-do list ("rerun the linter", "mention the API change in the
PR"). It lives in the run's working memory (``WorkingMemory.tasks``), is shown in its view, and
an open task keeps an autonomous run from ending unasked (``steward.continuation``).

Nothing is stored for it apart from the run's log: each successful ``tasks`` call is a
``tool_use`` event whose arguments, applied again in order (``tasks_from_events``), give the
list back, for ``steward runs show``, the API, a rebuilt run (``TasksToolset.replayed``) and
the next run of a session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from steward.errors import ToolError
from steward.events import Event, ToolResultEvent, ToolUse
from steward.tools.base import FunctionToolset, Tool, ToolContext, ToolResult

__all__ = ["MAX_TASKS", "TASKS_KEY", "TASKS_TOOL", "Task", "TaskList", "TasksToolset", "tasks_from_events"]

TASKS_TOOL = "tasks"
#: Tasks one run may hold; adding past it is an error the model can fix by finishing some.
MAX_TASKS = 50
#: Characters of one task's text (a checklist line, not a document).
MAX_TASK_CHARS = 300

Action = Literal["add", "done", "list"]


@dataclass(slots=True)
class Task:
    id: int
    text: str
    done: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "done": self.done}


@dataclass(slots=True)
class TaskList:
    """One run's checklist; ids count from 1 and are never reused within the run."""

    items: list[Task] = field(default_factory=list)
    next_id: int = 1

    def open(self) -> list[Task]:
        return [t for t in self.items if not t.done]

    def add(self, texts: Sequence[str]) -> list[Task]:
        cleaned = [" ".join(t.split()) for t in texts]
        if not any(cleaned):
            raise ToolError("Give the task's text: tasks(action='add', text='...').")
        too_long = next((t for t in cleaned if len(t) > MAX_TASK_CHARS), None)
        if too_long is not None:
            raise ToolError(
                f"A task is one line of at most {MAX_TASK_CHARS} characters; shorten {too_long[:40]!r}..."
            )
        if len(self.items) + len(cleaned) > MAX_TASKS:
            raise ToolError(f"A run holds at most {MAX_TASKS} tasks; mark some done before adding more.")
        added = []
        for text in filter(None, cleaned):
            added.append(Task(self.next_id, text))
            self.next_id += 1
        self.items.extend(added)
        return added

    def mark_done(self, ids: Iterable[int]) -> list[Task]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            raise ToolError("Name the tasks that are done: tasks(action='done', ids=[1, 2]).")
        by_id = {t.id: t for t in self.items}
        unknown = [i for i in wanted if i not in by_id]
        if unknown:
            known = ", ".join(str(t.id) for t in self.items) or "none yet"
            raise ToolError(f"No task {', '.join(map(str, unknown))} (the tasks are: {known}).")
        for i in wanted:
            by_id[i].done = True
        return [by_id[i] for i in wanted]

    def apply(self, arguments: Mapping[str, Any]) -> str:
        """Carry out one ``tasks`` call; what the agent reads back. Bad arguments: ``ToolError``."""
        action = arguments.get("action", "list")
        text, ids = arguments.get("text", ""), arguments.get("ids") or []
        match action:
            case "add":
                lines = [line for line in str(text).splitlines() if line.strip()] or [str(text)]
                added = self.add(lines)
                head = "Added " + ", ".join(f"{t.id} {t.text!r}" for t in added) + "."
            case "done":
                marked = self.mark_done(int(i) for i in ids)
                head = "Done: " + ", ".join(f"{t.id} {t.text!r}" for t in marked) + "."
            case "list":
                head = ""
            case _:
                raise ToolError(f"action must be add, done or list (got {action!r}).")
        return (head + "\n" + self.render()).strip()

    def render(self) -> str:
        """The checklist as the view and the tool show it (open tasks first)."""
        if not self.items:
            return "No tasks yet."
        ordered = [*self.open(), *(t for t in self.items if t.done)]
        left = len(self.open())
        lines = [f"[Tasks] {left} open, {len(self.items) - left} done"]
        lines.extend(f"  {'✓' if t.done else '○'} {t.id}. {t.text}" for t in ordered)
        return "\n".join(lines)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [t.as_dict() for t in self.items]


TASKS_KEY = "steward.tasks"  # where a run's list is found in its context (``ToolContext.scope``)


async def tasks(
    ctx: ToolContext, action: Action = "list", text: str = "", ids: list[int] | None = None
) -> str:
    """Keep a checklist of small to-dos beside your plan (e.g. "update the changelog").

    Open tasks are shown in your working memory; a run is not finished while one is open.

    Args:
        action: "add" a task (one per line of text), mark tasks "done" by id, or "list" them.
        text: For add: the task, or several, one per line.
        ids: For done: the ids of the finished tasks.
    """
    return ctx.scope(TASKS_KEY, TaskList).apply({"action": action, "text": text, "ids": ids or []})


class TasksToolset(FunctionToolset):
    """The ``tasks`` tool over the calling run's ``TaskList``.

    The list is found with ``ctx.scope(TASKS_KEY, ...)``: a run registers its working memory's
    list there when it starts (``steward.agent.runs``), so the tool and the view share it. A
    rebuilt run gets it back from the recorded calls (``replayed``).
    """

    def __init__(self) -> None:
        super().__init__([Tool(tasks, name=TASKS_TOOL)])

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:
        if name == TASKS_TOOL and not result.is_error:
            ctx.scope(TASKS_KEY, TaskList).apply(arguments)


def tasks_from_events(events: Iterable[Event]) -> TaskList:
    """A run's task list as its log leaves it: its successful ``tasks`` calls applied in order."""
    board, asked = TaskList(), dict[str, Mapping[str, Any]]()
    for event in events:
        if isinstance(event, ToolUse) and event.tool == TASKS_TOOL:
            asked[event.call_id] = event.input
        elif isinstance(event, ToolResultEvent) and event.tool == TASKS_TOOL and event.status == "completed":
            arguments = asked.pop(event.call_id, None)
            if arguments is not None:
                try:
                    board.apply(arguments)
                except (ToolError, TypeError, ValueError):
                    continue  # it succeeded when it ran: a later change of rules cannot undo it
    return board
