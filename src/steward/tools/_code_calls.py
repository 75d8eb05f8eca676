"""The events a tool's call brings with it, shared by the live loop and a rebuild.

The calls a program makes from inside its ``execute_code`` call are each recorded as a call of
the run as soon as each is made (``while_calling``): a ``tool_use`` and a ``tool_result`` with
the id ``<parent id>.<n>``, so a program that crashes, is killed or is cut short by a stopped
process leaves them on the record. After them come the call's notes (signal events), then its
own ``tool_result``. A rebuild reads them back from the log (``nested_calls``) and hands them to
the loop the same way, so the loop emits the same events whether it is live or replaying.

A program stopped for an approval (``ProgramPaused``) has its calls so far on the record before
the approval gate, which stands for the gated call. Approved, the program runs again with those
calls answered from the record (never run twice) and the gated one approved; denied, the gated
call is recorded as refused and the ``execute_code`` call as not run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from steward.errors import ApprovalRequired
from steward.events import ApprovalGateEvent, Event, SignalEvent, ToolResultEvent, ToolUse
from steward.tools.base import NestedCall, ToolContext, ToolResult, Toolset

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


def result_events(result: ToolResult) -> list[Event]:
    """The events to record before ``result``: its notes (its nested calls are on the record)."""
    return [
        SignalEvent(code=kind, level="warning" if kind == "blocked" else "info", message=message)
        for kind, message in result.notes
    ]


async def while_calling(
    toolset: Toolset, name: str, arguments: Mapping[str, Any], ctx: ToolContext, call_id: str
) -> AsyncIterator[Event | ToolResult]:
    """Call the tool: the events of each call a program makes inside it, as it is made, then the
    result last (or the call's exception, once the calls before it are out)."""
    if name != NAME:  # only a program makes calls inside its own
        yield await toolset.call_tool(name, arguments, ctx)
        return
    step = ctx.step
    made: asyncio.Queue[NestedCall] = asyncio.Queue()
    task = asyncio.ensure_future(toolset.call_tool(name, arguments, replace(ctx, on_call=made.put_nowait)))
    taking: asyncio.Future[NestedCall] | None = None
    try:
        while not task.done():  # bounded by the call: each pass takes one nested call, or it ended
            taking = asyncio.ensure_future(made.get())
            await asyncio.wait({task, taking}, return_when=asyncio.FIRST_COMPLETED)
            if not taking.done():
                break
            for event in _pair(step, call_id, taking.result()):
                yield event
        while not made.empty():  # the calls made just before it ended
            for event in _pair(step, call_id, made.get_nowait()):
                yield event
        yield task.result()
    finally:
        if taking is not None:
            taking.cancel()
        if not task.done():  # the run was stopped meanwhile: so is the program
            task.cancel()
            await asyncio.wait({task})


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


def asked_after_a_stop(
    gate: ApprovalGateEvent, name: str, arguments: Mapping[str, Any], earlier: tuple[NestedCall, ...],
    reason: str,
) -> ApprovalRequired:  # fmt: skip
    """An approved call whose process stopped before anything of it was recorded, asked again:
    a program's gated call keeps its program and the calls made before it."""
    if name == NAME and gate.tool != NAME:
        request = ApprovalRequired(
            tool=gate.tool, arguments=gate.input, call_hash=gate.call_hash, reason=reason, suggestion=None
        )
        return ProgramPaused(request, program=arguments, earlier=earlier)
    return ApprovalRequired(
        tool=name, arguments=dict(arguments), call_hash=gate.call_hash, reason=reason, suggestion=None
    )


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


def recorded_calls(
    peek: Callable[[int], Event | None], report: Callable[[NestedCall], None] | None, interrupted: str
) -> tuple[int, tuple[NestedCall, ...], bool]:
    """A rebuild's nested calls: those recorded from ``peek(0)`` on, each handed to ``report`` as
    the live program hands them; how many events they take; and whether the log ends with them
    (the process stopped while the program ran). A call begun where the log ends is handed over
    as ``interrupted``: its outcome is unknown."""
    taken, calls = nested_calls(peek)
    cut = _begun(peek(taken), peek(taken + 1), interrupted)
    for made in (*calls, cut) if cut is not None else calls:
        if report is not None:
            report(made)
    ended = cut is not None or (bool(calls) and peek(taken) is None)
    return taken, calls, ended


def _begun(recorded: Event | None, after: Event | None, output: str) -> NestedCall | None:
    if not isinstance(recorded, ToolUse) or after is not None:
        return None
    parent, dot, n = recorded.call_id.rpartition(".")
    if not (parent and dot and n.isdigit()):
        return None
    return NestedCall(int(n), recorded.tool, recorded.input, output, True, 0.0, "interrupted")
