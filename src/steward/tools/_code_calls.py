"""The events a tool's result brings with it, shared by the live loop and a rebuild.

Before a call's ``tool_result`` come its notes (signal events), then the calls a program made
from inside it (``execute_code``), each recorded as its own call of the run: a ``tool_use``
and a ``tool_result`` with the id ``<parent id>.<n>``. A rebuild reads them back from the log
(``nested_calls``), so the loop emits the same events whether it is live or replaying.

A program stopped for an approval (``ProgramPaused``) has its calls so far recorded before the
approval gate, which stands for the gated call. Approved, the program runs again with those
calls answered from the record (never run twice) and the gated one approved; denied, the gated
call is recorded as refused and the ``execute_code`` call as not run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from steward.errors import ApprovalRequired
from steward.events import ApprovalGateEvent, Event, SignalEvent, ToolResultEvent, ToolUse
from steward.tools.base import NestedCall, ToolContext, ToolResult

NAME = "execute_code"

WAITING = "execute_code.waiting"
"""The owner of the run-scoped ``{approval hash: Waiting}`` of programs stopped for an approval."""


class ProgramPaused(ApprovalRequired):
    """A program's call needs approval: the program is stopped there.

    ``program`` holds the ``execute_code`` arguments (what runs again once approved), ``earlier``
    the calls the program made before the gated one (recorded before the gate)."""

    def __init__(
        self, request: ApprovalRequired, *, program: Mapping[str, Any], earlier: tuple[NestedCall, ...],
        reason: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(
            tool=request.tool, arguments=request.arguments, call_hash=request.call_hash,
            reason=request.reason if reason is None else reason, suggestion=request.suggestion,
            description=request.description, deadline=request.deadline, waits_for=request.waits_for,
        )  # fmt: skip
        self.program = dict(program)
        self.earlier = earlier


@dataclass(slots=True, frozen=True)
class Waiting:
    """A program stopped for an approval: what runs again once it is given."""

    arguments: Mapping[str, Any]
    records: tuple[NestedCall, ...]
    approved: str | None  # the approval the program itself ran with, if it needed one


def _pair(step: int, call_id: str, nested: NestedCall) -> list[Event]:
    nested_id = f"{call_id}.{nested.n}"
    return [
        ToolUse(step=step, call_id=nested_id, tool=nested.tool, input=dict(nested.arguments)),
        ToolResultEvent(
            step=step,
            call_id=nested_id,
            tool=nested.tool,
            status="failed" if nested.is_error else "completed",
            output=nested.output,
            duration_ms=round(nested.duration_ms, 3),
            error_category=nested.category,
        ),
    ]


def result_events(step: int, call_id: str, result: ToolResult) -> list[Event]:
    """The events to record before ``result``: its notes, then its nested calls."""
    events: list[Event] = []
    for kind, message in result.notes:
        level = "warning" if kind == "blocked" else "info"
        events.append(SignalEvent(code=kind, level=level, message=message))
    for nested in result.nested:
        events.extend(_pair(step, call_id, nested))
    return events


def paused_events(step: int, call_id: str, request: ApprovalRequired) -> list[Event]:
    """The events to record before an approval gate: a stopped program's calls so far."""
    if not isinstance(request, ProgramPaused):
        return []
    return [event for nested in request.earlier for event in _pair(step, call_id, nested)]


class Asked(Protocol):
    """What of an approval (``steward.run_state.Approval``) these helpers read."""

    @property
    def tool(self) -> str: ...
    @property
    def arguments(self) -> dict[str, Any]: ...
    @property
    def call_hash(self) -> str: ...
    @property
    def program(self) -> dict[str, Any] | None: ...
    @property
    def earlier(self) -> tuple[NestedCall, ...]: ...


def resumed_call(ctx: ToolContext, a: Asked, approved: bool) -> tuple[str, dict[str, Any]]:
    """The call an answered approval carries out (and records): for a program's gated call,
    ``execute_code`` itself, its earlier calls kept for the run again (``CodeToolset``)."""
    if a.program is None:
        return a.tool, a.arguments
    if approved:  # after a restart only the approval knows them (a live wait knows more)
        waiting = ctx.scope(WAITING, dict[str, Waiting])
        waiting.setdefault(a.call_hash, Waiting(a.program, a.earlier, None))
    return NAME, a.program


def denied_events(step: int, call_id: str, a: Asked, refused: ToolResult) -> list[Event]:
    """A program's gated call that was denied, recorded as a refused call of the program."""
    if a.program is None:
        return []
    n = len(a.earlier) + 1
    refusal = NestedCall(n, a.tool, a.arguments, refused.content, True, 0.0, refused.category)
    return _pair(step, call_id, refusal)


def asked_again(
    gate: ApprovalGateEvent, name: str, arguments: Mapping[str, Any], earlier: tuple[NestedCall, ...]
) -> ApprovalRequired:
    """The approval a rebuild meets in the log, as the live run raised it."""
    request = ApprovalRequired(
        tool=gate.tool, arguments=gate.input, call_hash=gate.call_hash, reason=gate.reason,
        suggestion=gate.suggestion, description=gate.description, deadline=gate.deadline,
        waits_for=gate.waits_for,
    )  # fmt: skip
    if name == NAME and gate.tool != NAME:  # a program's call, not the program itself
        return ProgramPaused(request, program=arguments, earlier=earlier)
    return request


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
