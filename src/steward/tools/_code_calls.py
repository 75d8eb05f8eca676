"""The events a tool's result brings with it, shared by the live loop and a rebuild.

Before a call's ``tool_result`` come its notes (signal events), then the calls a program made
from inside it (``execute_code``), each recorded as its own call of the run: a ``tool_use``
and a ``tool_result`` with the id ``<parent id>.<n>``. A rebuild reads them back from the log
(``nested_calls``), so the loop emits the same events whether it is live or replaying.
"""

from __future__ import annotations

from collections.abc import Callable

from steward.events import Event, SignalEvent, ToolResultEvent, ToolUse
from steward.tools.base import NestedCall, ToolResult


def result_events(step: int, call_id: str, result: ToolResult) -> list[Event]:
    """The events to record before ``result``: its notes, then its nested calls."""
    events: list[Event] = []
    for kind, message in result.notes:
        level = "warning" if kind == "blocked" else "info"
        events.append(SignalEvent(code=kind, level=level, message=message))
    for nested in result.nested:
        nested_id = f"{call_id}.{nested.n}"
        events.append(ToolUse(step=step, call_id=nested_id, tool=nested.tool, input=dict(nested.arguments)))
        events.append(
            ToolResultEvent(
                step=step,
                call_id=nested_id,
                tool=nested.tool,
                status="failed" if nested.is_error else "completed",
                output=nested.output,
                duration_ms=round(nested.duration_ms, 3),
                error_category=nested.category,
            )
        )
    return events


def nested_calls(peek: Callable[[int], Event | None]) -> tuple[int, tuple[NestedCall, ...]]:
    """The nested calls recorded from ``peek(0)`` on (the events after a call's notes) and how
    many events they take: pairs of ``tool_use`` and ``tool_result`` with one ``<parent>.<n>`` id."""
    calls: list[NestedCall] = []
    at = 0
    while True:  # bounded by the log: each pass takes two of its events or stops
        use, done = peek(at), peek(at + 1)
        if not (
            isinstance(use, ToolUse) and isinstance(done, ToolResultEvent) and use.call_id == done.call_id
        ):
            break
        parent, dot, n = use.call_id.rpartition(".")
        if not (parent and dot and n.isdigit()):
            break
        calls.append(
            NestedCall(
                n=int(n),
                tool=use.tool,
                arguments=use.input,
                output=done.output,
                is_error=done.status == "failed",
                duration_ms=done.duration_ms,
                category=done.error_category,
            )
        )
        at += 2
    return at, tuple(calls)
