"""Continuation (seed 001): a run that says it is done is asked once more when it is not.

When a step ends the run with an answer (``agent_step`` end ``solved``, or a plain reply that
ends it ``answered``), ``Continuation.checked`` looks before the run is closed:

- in autonomous mode, at the plan's sub-tasks that are not done and the open ``tasks``;
- in either mode, at the verifier (``[limits] verify``, e.g. ``"pytest -q"``), run in the
  sandbox like ``bash`` and bounded by its timeout. In structured mode the open work is the
  human's to judge (they watch the run); a failing verifier is a fact, so it is checked there
  too.

Anything left, the agent is told what ("your plan says sub-task 2 'add tests' is not done; the
verifier says ... (exit 1)") and asked "are you done?"; the run goes on. At most
``[limits] max_continuations`` times: past that the run ends ``partial`` with what is still
open. Each decision is a ``continuation`` event.

The verifier's run is recorded as a call of the hidden tool ``verify_work`` (``tool_use`` and
``tool_result`` events, no transcript entry): a rebuilt run takes its recorded result, so a
resumed or replayed run reaches the same decision and never runs the verifier or asks again.
``VerifierToolset`` offers the tool to no model; called anyway, it only ever runs the
configured command.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from steward import events as ev
from steward import run_state as rs
from steward.models.base import ToolSpec
from steward.tools.base import FunctionToolset, ToolContext, ToolResult, Toolset, WrapperToolset
from steward.tools.shell import bash

if TYPE_CHECKING:
    from steward.loop import Items, Loop

__all__ = ["VERIFY_TOOL", "Continuation", "VerifierToolset", "open_work", "question"]

VERIFY_TOOL = "verify_work"
#: Characters of the verifier's output quoted to the agent (its end: where test runners summarise).
OUTPUT_TAIL_CHARS = 1_500
#: Open items named one by one in the question (more are counted).
NAMED_ITEMS = 5

_VERIFY_SPEC = ToolSpec(
    VERIFY_TOOL,
    "Runs the project's configured verifier (Steward runs it when a run ends; not offered).",
    {"type": "object", "properties": {}, "additionalProperties": False},
    idempotent=True,  # checking twice changes nothing: a check cut short by a crash runs again
)


class VerifierToolset(WrapperToolset):
    """``wrapped`` plus the hidden ``verify_work`` tool, which runs ``command`` like ``bash``.

    ``checker`` is where the command runs: ``bash`` alone, wrapped as the agent's tools are in
    what must hold for any output (its secret values redacted: ``steward.agent.runs``); the
    policy is not asked, the command being the user's configuration, not the model's.
    """

    def __init__(self, wrapped: Toolset, command: str, checker: Toolset | None = None) -> None:
        super().__init__(wrapped)
        self.command = command
        self.checker = checker if checker is not None else FunctionToolset([bash])

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if name != VERIFY_TOOL:
            return await self.wrapped.call_tool(name, arguments, ctx)
        # The arguments are ignored: the tool runs the user's command, never one it is given.
        return await self.checker.call_tool(bash.name, {"command": self.command}, ctx)

    async def spec_of(self, name: str, ctx: ToolContext) -> ToolSpec | None:
        return _VERIFY_SPEC if name == VERIFY_TOOL else await self.wrapped.spec_of(name, ctx)


def open_work(state: rs.RunState) -> list[str]:
    """What the run's plan and task list say is not done, one line each."""
    plan, found = state.memory.plan, []
    if plan is not None:
        found += [f"sub-task {t.id} {t.title!r} is {t.status}" for t in plan.sub_tasks if t.status != "done"]
    found += [f"task {t.id} {t.text!r} is open" for t in state.memory.tasks.open()]
    return found


def question(open_items: Sequence[str], verifier: str | None) -> str:
    """What the agent is asked when the run it ended has work left."""
    parts = []
    if open_items:
        named = "; ".join(open_items[:NAMED_ITEMS])
        more = f" (and {len(open_items) - NAMED_ITEMS} more)" if len(open_items) > NAMED_ITEMS else ""
        parts.append(f"your plan says {named}{more}")
    if verifier is not None:
        parts.append(f"the verifier says:\n{verifier}")
    return (
        "Before this run ends: " + "; and ".join(parts) + "\n\nAre you done? If not, go on with the work. "
        "If you are, end again with agent_step phase end and say why (end_status partial if something "
        "is left undone)."
    )


@dataclass(slots=True)
class Continuation:
    """The check one run's endings go through (``Loop.ending``)."""

    verify: str
    max_continuations: int
    mode: Callable[[], str]  # the run's policy mode now ("structured" | "autonomous")
    asked: int = 0

    async def checked(self, loop: Loop, items: Items) -> Items:
        """``items`` (one step's events and outcome) with an answer's ending checked first."""
        async for item in items:
            if isinstance(item, rs.Finish) and item.end_status in ("solved", "answered"):
                async for part in self._check(loop, item):
                    yield part
            else:
                yield item

    async def _check(self, loop: Loop, finish: rs.Finish) -> AsyncIterator[ev.Event | rs.Outcome]:
        st = loop.state
        open_items = open_work(st) if self.mode() == "autonomous" else []
        verifier, exit_code = None, None
        if self.verify:
            result = None
            async for item in self._run_verifier(loop):
                if isinstance(item, ToolResult):
                    result = item
                else:
                    yield item
            assert result is not None
            exit_code = _exit_code(result.content)
            if result.is_error:
                tail = _tail(result.content)
                verifier = f"`{self.verify}` failed ({_exit_text(exit_code)}); its output ends:\n{tail}"
        reasons = [*open_items, *([f"the verifier `{self.verify}` failed"] if verifier is not None else [])]
        if not reasons:
            yield finish
            return
        if self.asked >= self.max_continuations:
            yield loop.emit(ev.ContinuationEvent(number=self.asked, asked=False, reasons=reasons, message="",
                                                 verifier_exit=exit_code))  # fmt: skip
            typed = loop.settings.output_schema is not None  # a typed answer stays the data it is
            left = "; ".join(reasons)
            message = finish.message if typed else f"{finish.message}\n\nNot done after being asked: {left}."
            yield rs.Finish("partial", message)
            return
        self.asked += 1
        message = question(open_items, verifier)
        st.transcript.add_user(message)
        yield loop.emit(ev.ContinuationEvent(number=self.asked, asked=True, reasons=reasons, message=message,
                                             verifier_exit=exit_code))  # fmt: skip
        yield rs.CONTINUE

    async def _run_verifier(self, loop: Loop) -> AsyncIterator[ev.Event | ToolResult]:
        """The verifier as a recorded call of ``verify_work``: its events, then its result."""
        n = loop.state.counters.step
        call_id = f"verify-{n}-{self.asked + 1}"
        arguments = {"command": self.verify}
        yield loop.emit(ev.ToolUse(step=n, call_id=call_id, tool=VERIFY_TOOL, input=arguments))
        started = time.perf_counter()
        result = await loop.toolset.call_tool(VERIFY_TOOL, arguments, replace(loop.ctx, step=n))
        for kind, text in result.notes:
            level = "warning" if kind == "blocked" else "info"
            yield loop.emit(ev.SignalEvent(code=kind, level=level, message=text))
        took = result.duration_ms
        took = took if took is not None else (time.perf_counter() - started) * 1000
        status = "failed" if result.is_error else "completed"
        yield loop.emit(
            ev.ToolResultEvent(
                step=n, call_id=call_id, tool=VERIFY_TOOL, status=status,
                output=result.content, duration_ms=round(took, 3), error_category=result.category,
            )
        )  # fmt: skip
        yield result


def _exit_code(output: str) -> int | None:
    last = output.rstrip().rpartition("\n")[2]
    number = last.removeprefix("exit code: ").split(" ", 1)[0]
    return int(number) if last.startswith("exit code: ") and number.lstrip("-").isdigit() else None


def _exit_text(code: int | None) -> str:
    return f"exit {code}" if code is not None else "it did not finish"


def _tail(output: str) -> str:
    text = output.rstrip()
    return text if len(text) <= OUTPUT_TAIL_CHARS else "..." + text[-OUTPUT_TAIL_CHARS:]
