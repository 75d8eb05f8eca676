"""Rebuilding a run from its recorded events: the loop runs again against a recorded world.

The loop is the one place that knows how events change a run's state, so a run is rebuilt by
running the same loop with its model, its toolset and its clock wrapped in recorded ones that
answer from the log: the model's replies (and summaries), tool results (with the notes that
came with them), approvals asked, and where the time ran out. While the log lasts nothing is
asked of the model and no tool runs; every event the loop emits must be the recorded one at
that position (``Replay.stamp`` checks it and gives it its recorded time). When the log ends
the wrappers pass everything through: the loop is live again, at exactly the point where the
earlier process stopped. The loop never knows which of the two it is talking to.

A call whose start is the log's last word ran when the process stopped: its outcome is
unknown, and it is reported to the model as interrupted, never run again (an approved one
is put to the human again).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from steward.clock import RUN_TIMEOUT, Clock
from steward.errors import ConfigError, ModelError, ReplayError, RunError, StewardError
from steward.events import (
    ApprovalGateEvent,
    ApprovalResultEvent,
    CompactionEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    ModeEvent,
    ModelReplyEvent,
    RewindEvent,
    RunStart,
    SignalEvent,
    ToolResultEvent,
    ToolUse,
    WaitingEvent,
)
from steward.models.base import (
    NOTICE_SIGNAL,
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    Notice,
    StreamItem,
    ToolSpec,
    Usage,
)
from steward.replies import response_from
from steward.tools._code_calls import asked_after_a_stop, asked_again, recorded_calls
from steward.tools.base import NestedCall, ToolContext, ToolResult, Toolset, WrapperToolset

if TYPE_CHECKING:
    from steward.run_state import RunState
    from steward.safety.policy.rules import ModeSwitch
    from steward.store.events import EventStore, RunRow


INTERRUPTED = (
    "Interrupted: the process running this call stopped before the call finished, so its outcome "
    "is unknown: it may have done all, some or none of its work. Check the state (read the files, "
    "run a read-only command) before doing it again."
)

_CUT_AFTER_APPROVAL = (
    "it was approved, but the process stopped while it ran, so its outcome is unknown; "
    "approve to run it again"
)

# The fields that identify an event well enough to notice that the loop took another path.
_KEYS: dict[str, tuple[str, ...]] = {
    "step": ("step",),
    "phase": ("step", "phase"),
    "tool_use": ("call_id", "tool"),
    "tool_result": ("call_id",),
    "model_reply": ("step",),
    "approval_gate": ("id",),
    "waiting": ("id",),
    "signal": ("code",),
    "compaction": ("kind", "ref"),
}


def resumable_prefix(events: Sequence[Event]) -> list[Event]:
    """The log without its closing events when the run ended cancelled or failed.

    A run stopped by Ctrl-C, or failed because the model's API or a toolset was down, goes
    on from where it stopped; its closing events stay in the store as a record of the stop.
    A run marked failed because it kept killing its process stays failed.
    """
    end = len(events)
    closing = events[end - 1] if end else None
    if isinstance(closing, DoneEvent) and closing.status in ("cancelled", "failed"):
        last = events[end - 2] if end > 1 else None
        if isinstance(last, ErrorEvent) and last.code == "crashed":
            return list(events)  # it kept killing its process: that ending is final
        end -= 1
        if isinstance(last, ErrorEvent) and not last.recoverable:
            end -= 1
    return list(events[:end])


def without_stops(events: Sequence[Event]) -> list[Event]:
    """The log without the stops it went on after: the closing events of a cancel or a failure
    that a retry continued past, and the wait they cut, announced again after them (``Run``
    does that, so the log's tail says what the run waits for). The loop produced neither; a
    rebuild must not meet them."""
    out: list[Event] = []
    at = 0
    for _ in range(len(events)):  # bounded: each pass takes at least one event
        if at >= len(events):
            break
        event = events[at]
        at += 1
        if not (
            isinstance(event, DoneEvent) and event.status in ("cancelled", "failed") and at < len(events)
        ):
            out.append(event)
            continue
        if out and isinstance(out[-1], ErrorEvent) and not out[-1].recoverable:
            out.pop()  # the failure the stop closed
        wait = out[-1] if out and isinstance(out[-1], WaitingEvent) else None
        if wait is not None:  # skip its announcement again: [gate,] waiting, of the same id
            gated = len(out) > 1 and isinstance(out[-2], ApprovalGateEvent) and out[-2].id == wait.id
            expected = [ApprovalGateEvent, WaitingEvent] if gated else [WaitingEvent]
            following = events[at : at + len(expected)]
            if [type(e) for e in following] == expected and all(
                getattr(e, "id", None) == wait.id for e in following
            ):
                at += len(expected)
    return out


@dataclass(slots=True, frozen=True)
class Recovered:
    """A recorded run, ready to be rebuilt: its row, the log to run against, and its start."""

    row: RunRow
    log: list[Event]
    last_seq: int  # the seq live events continue after (closing events of a stop included)
    attempts: int
    start: RunStart | None  # None: killed before its start was durable (it starts over)


async def recover(
    store: EventStore, run_id: str, *, max_attempts: int, force: bool, persona: str = ""
) -> Recovered:
    """Take over the run ``run_id`` (or a unique prefix of it) for this process.

    A run that already finished, or still runs in a live process, is refused. One whose
    process died (recorded as running) counts an attempt; past ``max_attempts`` it is closed
    as failed, so it cannot kill another process.
    """
    from steward.ownership import owner_alive, process_owner

    row = await store.find_run(run_id)
    everything = await store.events(row.id)
    # Rewinds were made from outside the loop: the rebuild does not meet them again.
    recorded = [e for e in everything if not isinstance(e, RewindEvent)]
    last_seq = everything[-1].seq if everything else 0
    first = recorded[0] if recorded else None
    if recorded and not isinstance(first, RunStart):
        raise StewardError(f"run {row.id} has no recorded start; there is nothing to resume")
    prefix = resumable_prefix(recorded)
    if recorded and len(prefix) == len(recorded) and isinstance(recorded[-1], DoneEvent):
        done = recorded[-1]
        if row.status != done.status:  # the process died between the event and the row
            await store.set_status(row.id, done.status, done.end_status, output=done.message)
        raise RunError("the run already finished; start a new one", run_id=row.id, status=done.status)
    if isinstance(first, RunStart) and first.persona != persona:
        # Its tools and policy were the persona's: going on as another would change them.
        started = (
            f"as persona {first.persona!r} (--persona {first.persona})"
            if first.persona
            else "without a persona"
        )
        raise ConfigError(f"run {row.id} was started {started}; continue it the same way")
    check_workspace_there(row, first)
    attempts = row.attempts
    if row.status == "running":  # its process stopped without closing it: a crash
        if row.owner and not force and owner_alive(row.owner):
            raise StewardError(
                f"run {row.id} is still running in process {row.owner}; wait for it or stop it "
                "first (if that process is gone, resume with --force)"
            )
        attempts += 1
        if attempts > max_attempts:
            await _close_crashed(store, row, last_seq, attempts, max_attempts)
    await store.set_status(row.id, "running", attempts=attempts, owner=process_owner())
    start = first if isinstance(first, RunStart) else None
    return Recovered(row, without_stops(prefix), last_seq, attempts, start)


def check_workspace_there(row: RunRow, first: Event | None = None) -> None:
    """A run goes on only in the folder it started in (its files, checkpoints and protected
    paths are that folder's); refused before anything about the run changes."""
    import os
    from pathlib import Path

    workspace = first.workspace if isinstance(first, RunStart) else row.workspace
    if not workspace:  # a row from before workspaces were recorded: the run's own check decides
        return
    try:
        there = Path(workspace).is_dir() and os.access(workspace, os.R_OK | os.X_OK)
    except (OSError, ValueError):
        there = False
    if not there:
        raise ConfigError(
            f"run {row.id} works in {workspace}, which is not a folder this user can read now. A run "
            f"goes on only where it started: put the folder back at {workspace} (or make it readable) "
            "and resume it, or start a new run. The run is unchanged"
        )


async def _close_crashed(store: EventStore, row: RunRow, last_seq: int, attempts: int, limit: int) -> None:
    message = (
        f"The run stopped its process {attempts - 1} times (the limit is {limit}); "
        "it is marked failed so it does not crash again."
    )
    closing: list[Event] = [
        ErrorEvent(code="crashed", message=message, recoverable=False),
        DoneEvent(status="failed", end_status=None, message=message, steps=0, tool_calls=0, usage={}),
    ]
    for seq, event in enumerate(closing, start=last_seq + 1):  # the log goes on after its last seq
        event.seq, event.run_id, event.session_id, event.ts = seq, row.id, row.session_id, time.time()
    await store.append(row.id, closing)
    await store.set_status(row.id, "failed", output=message, attempts=attempts)
    raise RunError(message, run_id=row.id, status="failed")


class Replay:
    """A cursor over a run's recorded events, consumed as the loop emits them again."""

    def __init__(self, state: RunState, events: Sequence[Event], last_seq: int | None = None) -> None:
        self.state = state
        self._events = list(events)
        self._pos = 0
        #: The seq of the last recorded event, closing events of a stop included: live events
        #: continue after it.
        self.last_seq = last_seq if last_seq is not None else (self._events[-1].seq if self._events else 0)
        #: The log's last event while nothing live has happened after it (what a call that
        #: starts now was doing when the process stopped).
        self.ended_on: Event | None = None
        #: The approval gate the run last went through (its call hash, for an approved call).
        self.gate: ApprovalGateEvent | None = None

    def ended(self) -> bool:
        """Whether the log is used up (from here on the run is live)."""
        return self._pos >= len(self._events)

    def peek(self) -> Event | None:
        return None if self.ended() else self._events[self._pos]

    def stamp(self, event: Event) -> None:
        """The loop emitted ``event``: it must be the recorded one here; it takes its time and seq."""
        if self.ended():
            self.ended_on = None  # the run has moved on live
            return
        recorded = self._events[self._pos]
        if recorded.type != event.type or any(
            getattr(recorded, key) != getattr(event, key) for key in _KEYS.get(event.type, ())
        ):
            raise self.diverged(f"'{event.type}'" + _keys(event), recorded)
        self._pos += 1
        event.ts, event.seq = recorded.ts, recorded.seq
        if isinstance(recorded, ApprovalGateEvent):
            self.gate = recorded
        if self._pos >= len(self._events):  # live again from here, after the closing events of a stop
            self.state.seq, self.ended_on = self.last_seq, recorded

    def diverged(self, what: str, recorded: Event) -> ReplayError:
        return ReplayError(
            f"cannot rebuild the run: at seq {recorded.seq} the log has '{recorded.type}'{_keys(recorded)} "
            f"but the loop now produces {what}. The run was recorded with other tools, settings or "
            "Steward version; resume it with those, or start a new run",
            run_id=self.state.run_id,
            status="diverged",
        )

    def peek_at(self, offset: int) -> Event | None:
        """The recorded event ``offset`` places ahead (left in place: the loop emits its copy)."""
        at = self._pos + offset
        return self._events[at] if at < len(self._events) else None

    def modes(self, live: ModeSwitch) -> RecordedModes:
        """The recorded stand-in for the run's mode switch."""
        return RecordedModes(self, live)

    def attach(self, model: Model, toolset: Toolset, clock: Clock) -> tuple[Model, Toolset, Clock]:
        """The recorded stand-ins for a run's model, toolset and clock."""
        return RecordedModel(self, model), RecordedToolset(self, toolset), RecordedClock(self, clock)


class RecordedModes:
    """Mode switches as the log has them while it lasts (each in force again where it was
    recorded), then the ones asked live."""

    def __init__(self, replay: Replay, live: ModeSwitch) -> None:
        self.replay, self.live = replay, live

    def take(self) -> str | None:
        if self.replay.ended():
            return self.live.take()
        recorded = self.replay.peek()
        if not isinstance(recorded, ModeEvent):
            return None
        self.live.policy.mode = "autonomous" if recorded.mode == "autonomous" else "structured"
        return recorded.mode


def _keys(event: Event) -> str:
    keys = ", ".join(f"{k}={getattr(event, k)!r}" for k in _KEYS.get(event.type, ()))
    return f" ({keys})" if keys else ""


_MAX_NOTICES = 8  # notices before one reply (a model gives one at most; the bound keeps the loop finite)


class RecordedModel(Model):
    """Answers from the log while it lasts (replies, retries, summaries); then asks ``model``."""

    def __init__(self, replay: Replay, model: Model) -> None:
        self.replay, self.model, self.name = replay, model, model.name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        replay = self.replay
        if replay.ended():
            async for item in self.model.stream(request):
                yield item
            return
        recorded = replay.peek()
        # What the model said about reaching it (a fallback) came before its reply: say it again.
        for _ in range(_MAX_NOTICES):
            if not (isinstance(recorded, SignalEvent) and recorded.code == NOTICE_SIGNAL):
                break
            yield Notice(recorded.message)
            recorded = replay.peek()
        if recorded is None:  # the log ends after the notice: the reply itself was never recorded
            async for item in self.model.stream(request):
                yield item
            return
        match recorded:
            case ErrorEvent(code="model_retry", message=message):
                # A retry happened here: fail the same way, so the loop records it again.
                raise ModelError(message, provider=self.name, retryable=True, retry_after=0.0)
            case ModelReplyEvent() if request.purpose == "step":
                self.model.replayed()
                yield response_from(recorded)
            case CompactionEvent(text=text, usage=usage) if request.purpose != "step":
                yield ModelResponse(AssistantMessage(text=text), Usage.from_dict(usage), model=self.name)
            case _:
                what = "a summary" if request.purpose != "step" else "the model's reply"
                assert recorded is not None
                raise replay.diverged(f"a request for {what}", recorded)

    async def aclose(self) -> None:
        await self.model.aclose()

    def warnings(self) -> list[str]:
        return self.model.warnings()


class RecordedToolset(WrapperToolset):
    """Returns each call's recorded result while the log lasts; then runs the real tools."""

    def __init__(self, replay: Replay, toolset: Toolset) -> None:
        super().__init__(toolset)
        self.replay = replay
        self.earlier: tuple[NestedCall, ...] = ()  # the calls a program made before its last gate

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        return await self.wrapped.get_tools(ctx)

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        replay = self.replay
        if replay.ended():
            return await self._live(name, arguments, ctx)
        # The calls a program made from inside this one (execute_code) come first: they are
        # handed to the loop as the live program hands them (``steward.tools._code_calls``).
        taken, nested, ended = recorded_calls(replay.peek_at, ctx.on_call, INTERRUPTED)
        # The notes the tool and the wrappers returned (blocked, egress, ...) come before the result.
        notes: list[tuple[str, str]] = []
        while isinstance(note := replay.peek_at(taken + len(notes)), SignalEvent):
            notes.append((note.code, note.message))
        recorded = replay.peek_at(taken + len(notes))
        match recorded:
            case ToolResultEvent(output=output, status=status):
                result = ToolResult(
                    output, is_error=status == "failed", category=recorded.error_category,
                    duration_ms=recorded.duration_ms, notes=tuple(notes), nested=nested,
                )  # fmt: skip
                self.wrapped.replayed(name, arguments, result, ctx)
                return result
            case ApprovalGateEvent():  # asked (again, if it was approved and interrupted before)
                self.earlier = nested  # a stopped program's calls, before the gate
                raise asked_again(recorded, name, arguments, nested)
            case _ if ended:  # the process stopped while the program ran: after the calls it made
                return ToolResult(INTERRUPTED, is_error=True, category="interrupted", duration_ms=0.0)
            case _:
                assert recorded is not None
                raise replay.diverged(f"a call of {name}", recorded)

    async def _live(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """A call past the log's end: run, unless the log ends with it begun (or approved)."""
        replay = self.replay
        stopped, replay.ended_on = replay.ended_on, None
        cut_short = isinstance(stopped, ToolUse) or (
            isinstance(stopped, ApprovalResultEvent) and stopped.decision == "approved" and replay.gate
        )
        if cut_short and await self._idempotent(name, ctx):
            return await self.wrapped.call_tool(name, arguments, ctx)  # running it again changes nothing
        match stopped:
            case ToolUse():  # it began, then the process stopped: never run it again silently
                return ToolResult(INTERRUPTED, is_error=True, category="interrupted", duration_ms=0.0)
            case ApprovalResultEvent(decision="approved") if replay.gate is not None:
                raise asked_after_a_stop(replay.gate, name, arguments, self.earlier, _CUT_AFTER_APPROVAL)
            case _:
                return await self.wrapped.call_tool(name, arguments, ctx)

    async def _idempotent(self, name: str, ctx: ToolContext) -> bool:
        spec = await self.wrapped.spec_of(name, ctx)
        return spec is not None and spec.idempotent


class RecordedClock:
    """Says the time is up exactly where the log does; a rebuild itself is never cut short."""

    def __init__(self, replay: Replay, clock: Clock) -> None:
        self.replay, self.clock = replay, clock

    def remaining(self) -> float | None:
        if self.replay.ended():
            return self.clock.remaining()
        recorded = self.replay.peek()
        return 0.0 if isinstance(recorded, SignalEvent) and recorded.code == RUN_TIMEOUT else None

    def stop(self) -> None:
        self.clock.stop()
