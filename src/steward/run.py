"""A run: one execution of the loop for one goal, recorded as it goes.

A ``Run`` streams the loop's events and records each in the store as it is shown, waiting for
durability only at barriers (before a tool runs, when the run waits or ends). A run that waits
for a human is answered here (``answer``, ``approve``, ``deny``); a run rebuilt from its log
(``steward.recovery``) goes on from where the log ends.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from steward import run_state as rs
from steward.errors import ConfigError, StewardError, StoreError
from steward.events import Event, RunStart, WaitingEvent
from steward.loop import Loop
from steward.models.base import Usage
from steward.ownership import process_owner
from steward.run_rules import record
from steward.run_state import Pending, RunEnd, RunState

if TYPE_CHECKING:
    from steward.safety.policy.rules import ModeSwitch
    from steward.store.events import EventStore, RunLog
    from steward.telemetry._spans import RunTrace

_E = TypeVar("_E", bound=Event)

# Events that must be durable before the run goes on: a tool is about to run, a human's
# decision is about to be acted on, or the process may stop here.
_BARRIERS = frozenset({"run_start", "tool_use", "approval_result", "answer", "waiting", "done"})


def check_goal(goal: str) -> None:
    if not goal.strip():
        raise ConfigError(
            'The goal is empty. Say what the agent should do, e.g. steward run "fix the tests".'
        )


def check_workspace(workspace: str | Path) -> Path:
    """The workspace as an absolute path, or a ``ConfigError`` naming the fix."""
    try:
        ws = Path(workspace).resolve()
        usable = ws.is_dir() and os.access(ws, os.R_OK | os.X_OK)
    except OSError:
        usable = False
    if not usable:
        raise ConfigError(
            f"Workspace '{workspace}' is not a directory this user can read. "
            "Pass --workspace DIR or cd into one."
        )
    return ws


@dataclass(slots=True)
class RunResult:
    """Where a run stands after ``run``/``answer`` returned."""

    run: Run
    status: str  # done | waiting | failed | cancelled
    end_status: RunEnd | None
    output: str
    steps: int
    usage: Usage
    pending: Pending | None = None

    @property
    def waiting(self) -> bool:
        return self.status == "waiting"

    @property
    def solved(self) -> bool:
        """The agent said the goal was reached (agent_step end solved, or a typed answer)."""
        return self.status == "done" and self.end_status == "solved"

    @property
    def answered(self) -> bool:
        """The agent answered in plain text, without saying the goal was reached."""
        return self.status == "done" and self.end_status == "answered"

    @property
    def question(self) -> str | None:
        return self.pending.question if self.pending else None


class Run:
    """One execution of the loop for one goal. Not started until streamed or awaited."""

    def __init__(
        self,
        loop: Loop,
        *,
        model_name: str,
        max_steps: int,
        remember: Callable[[str], None] | None = None,
        store: EventStore | None = None,
        prepare: Callable[[], Awaitable[None]] | None = None,
        persona: str = "",
        fence: int | None = None,
        modes: ModeSwitch | None = None,
    ) -> None:
        self._prepare = prepare
        self._persona = persona
        self._fence = fence  # the job claim this run's log takes writes from (None: any writer)
        self._loop = loop
        self._store = store
        self._log: RunLog | None = None
        self._suspended: AsyncIterator[Event] | None = None  # the loop, stopped where a rebuild ended
        self._closing: Event | None = None  # the done event of a cancelled run
        self._crash: list[Event] = []  # the closing events of an internal error, not recorded yet
        #: Rebuilt waiting from a log that goes on past the wait (a stop's closing events, e.g. a
        #: cancel while it waited, then a retry): its wait is announced again, so the log's tail
        #: says what it waits for.
        self._announce_wait = False
        self._model_name = model_name
        self._max_steps = max_steps
        self._started = False
        self._remember = remember
        self._modes = modes
        if modes is not None:
            loop.modes = modes
        self.trace: RunTrace | None = None  # its spans, when [telemetry] is on (``steward.telemetry``)

    @property
    def id(self) -> str:
        return self._loop.state.run_id

    @property
    def state(self) -> RunState:
        return self._loop.state

    @property
    def status(self) -> str:
        return self._loop.state.status

    @property
    def pending(self) -> Pending | None:
        return self._loop.state.pending

    @property
    def store_backed(self) -> bool:
        """Whether the run is recorded, so it can be resumed or answered from another process."""
        return self._store is not None

    @property
    def recorded(self) -> bool:
        """Whether the store has the run by now (its row is made): ``steward resume`` finds it."""
        return self._log is not None

    def stream(self) -> AsyncGenerator[Event, None]:
        """Run until done, failed or waiting, yielding every event."""
        events, self._suspended = self._suspended or self._events(), None
        return self._recorded(events)

    async def _recorded(self, events: AsyncIterator[Event]) -> AsyncGenerator[Event, None]:
        """Record each new event of the log in the store (when there is one) as it is shown.

        Events are queued to the store's writer as they come; the stream waits for them to be
        durable only at a barrier (before a tool runs, when the run waits or ends), so a crash
        can lose only events the run can make again, never the record of a side effect.
        """
        trace = self._trace_open()
        try:
            store = self._store
            if store is None:
                try:
                    async for event in events:
                        yield event
                finally:
                    if trace is not None:  # the loop's own cleanup first: the span reads how it ended
                        await _aclose(events)
                return
            st = self._loop.state
            log = await self._opened(store)
            try:
                async for event in events:
                    if event.seq > log.last_seq:
                        log.add(event)
                        if event.type in _BARRIERS:
                            if event.type in ("waiting", "done"):  # one transaction with the event
                                log.status(st.status, st.end_status, output=st.output)
                            await log.flush()
                    elif event.seq:  # rebuilt from the log: recorded and shown before
                        continue
                    yield event
            finally:
                await self._close(events, log)
        except BaseException as exc:
            self._trace_failed(trace, exc)
            raise
        finally:
            self._trace_close(trace)

    def _trace_open(self) -> RunTrace | None:
        """Open the traced stretch's span (when traced); the loop then tells the trace of each
        event it numbers: no layer around the stream (a generator step per event costs more)."""
        trace = self.trace
        if trace is not None:
            trace.begin(None)
            self._loop.watchers = trace.watchers()
        return trace

    @staticmethod
    def _trace_failed(trace: RunTrace | None, exc: BaseException) -> None:
        if trace is not None:
            trace.failed_with(exc)

    def _trace_close(self, trace: RunTrace | None) -> None:
        if trace is not None:
            self._loop.watchers = {}
            trace.end()

    async def _opened(self, store: EventStore) -> RunLog:
        """The run's log in ``store``, the run's row made first when it is new."""
        st = self._loop.state
        if self._log is None:
            if self._prepare is not None:
                await self._prepare()
            await store.create_run(
                st.run_id, goal=st.goal, session_id=st.session_id, workspace=str(st.workspace),
                model=self._model_name, owner=process_owner(),
            )  # fmt: skip
            self._log = store.log(st.run_id, session_id=st.session_id, last_seq=0, fence=self._fence)
        log = self._log
        if st.status == "running":  # going on (again): this process owns the run now
            log.status("running", owner=process_owner())
        return log

    async def _close(self, events: AsyncIterator[Event], log: RunLog) -> None:
        """After a stream: record how the run stands now (and a cancellation, as its ending)."""
        st = self._loop.state
        # Close the loop now, not whenever it is collected: its own cleanup decides whether the
        # run was cancelled, and a cancellation belongs in the log like any other ending.
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
        if log.error is not None:
            return
        with contextlib.suppress(StoreError):  # a closed or broken store: resume recovers
            for event in self._crash:
                log.add(event)
            self._crash = []
            if st.status == "cancelled" and self._closing is None:
                self._closing = self._loop.cancel()
                log.add(self._closing)
            owner = process_owner() if st.status == "running" else None
            log.status(st.status, st.end_status, output=st.output, owner=owner)
            await log.flush()

    async def _rebuild(self, events: list[Event], last_seq: int) -> None:
        """Bring this run to where its log ends, running the loop against the log."""
        from steward.events import AnswerEvent, ApprovalResultEvent
        from steward.recovery import Replay

        loop = self._loop
        replay = Replay(loop.state, events, last_seq)
        loop.model, loop.toolset, loop.clock = replay.attach(loop.model, loop.toolset, loop.clock)
        loop.modes = replay.modes(self._modes) if self._modes is not None else rs.NO_SWITCH
        loop.stamp = replay.stamp
        if self._store is not None:
            self._log = self._store.log(
                self.id, session_id=self.state.session_id, last_seq=last_seq, fence=self._fence
            )
        stream = self._events()
        # Bounded by the log: each pass consumes at least one recorded event or ends.
        for _ in range(len(events) + 2):
            if replay.ended():
                break
            async for _event in stream:
                if replay.ended():
                    break  # the log is used up: the loop stays suspended right here
            else:
                # The loop paused for a human and the log goes on with the answer given then.
                match recorded := replay.peek():
                    case ApprovalResultEvent(decision=decision, reason=reason, by=by):
                        loop.emit(rs.decide(loop.state, decision == "approved", reason=reason, by=by))
                    case AnswerEvent(answer=answer):
                        loop.emit(rs.answer(loop.state, answer))
                    case None:
                        break
                    case _:
                        raise replay.diverged("a wait for a human's answer", recorded)
                stream = self._events()
        if self.state.status == "waiting":
            self._suspended = None
            self._announce_wait = bool(events) and events[-1].seq < last_seq
        else:
            self._suspended = stream

    async def _events(self) -> AsyncIterator[Event]:
        st = self._loop.state
        if st.status == "waiting":  # e.g. a run resumed while it waits: nothing to do yet
            if self._announce_wait and st.pending is not None and not await self._wait_shown(st.pending.id):
                for event in st.pending.events():
                    yield self._loop.emit(event)
            self._announce_wait = False
            return
        if st.status != "running":
            raise RuntimeError(f"run {st.run_id} is {st.status}; start a new run")
        if not self._started:
            self._started = True
            schema = self._loop.settings.output_schema
            modes = self._modes
            from steward.offered import offered

            system, tools = await offered(self._loop)  # for its export as training data
            yield self._loop.emit(
                RunStart(
                    goal=st.goal,
                    model=self._model_name,
                    workspace=str(st.workspace),
                    max_steps=self._max_steps,
                    persona=self._persona,
                    output_schema=dict(schema) if schema is not None else None,
                    policy=record(modes.policy) if modes is not None else None,
                    system=system,
                    tools=tools,
                )
            )
        finished = False
        try:
            async for event in self._loop.run():
                yield event
            finished = True
        except Exception as exc:
            if st.status == "running" and not isinstance(exc, StewardError):  # a bug, not a stop
                self._crash = self._internal_error(exc)
            raise
        finally:
            # Cancelled, or abandoned by its consumer: either way this run will not go on.
            if not finished and st.status == "running":
                st.status = "cancelled"

    def _internal_error(self, exc: Exception) -> list[Event]:
        """The run fails on an exception nothing expected (a bug in Steward or in a toolset's
        code): its closing events, saying so and where to look. It stays resumable."""
        from steward.events import ErrorEvent

        message = (
            f"Internal error: {type(exc).__name__}: {exc}. This is a bug (in Steward or in a tool's "
            f"code), not a stop: `steward runs show {self.id}` shows the run's log up to it, and "
            "STEWARD_DEBUG=1 the traceback on the command line; "
            f"`steward resume {self.id}` goes on after a fix."
        )
        error = self._loop.emit(ErrorEvent(code="internal_error", message=message, recoverable=False))
        return [error, self._loop.emit(self._loop.state.finish("failed", None, message))]

    async def _wait_shown(self, wait_id: str) -> bool:
        """Whether the stored log ends with the wait ``wait_id`` (announced again already)."""
        if self._store is None:
            return False
        last = await self._store.events(self.id, after_seq=max(0, self._loop.state.seq - 1))
        return bool(last) and isinstance(last[-1], WaitingEvent) and last[-1].id == wait_id

    def cancelled(self) -> Event:
        """Mark the run cancelled (its task was cancelled) and return the closing event."""
        if self._closing is None:
            self._closing = self._loop.cancel()
        return self._closing

    async def result(self) -> RunResult:
        """Run to the end (or the next pause) and return where it stands."""
        async for _ in self.stream():
            pass
        return self.snapshot()

    def snapshot(self) -> RunResult:
        st = self._loop.state
        return RunResult(self, st.status, st.end_status, st.output, st.counters.step, st.usage, st.pending)

    def switch_mode(self, mode: str) -> None:
        """Go on in policy ``mode`` ("structured" asks before risky calls; "autonomous"
        approves asks itself, while the guard and deny rules stay) from the next step, which
        records the switch. A run that was built without a policy ignores it."""
        if self._modes is not None and mode in ("structured", "autonomous"):
            self._modes.ask("autonomous" if mode == "autonomous" else "structured")

    def answer_stream(self, text: str) -> AsyncIterator[Event]:
        """Answer the pending question and continue, yielding events (the answer first)."""
        return self._recorded(_prepend(self._emit(rs.answer(self.state, text)), self._events()))

    async def answer(self, text: str) -> RunResult:
        """Answer the pending question and run on; returns the new result."""
        async for _ in self.answer_stream(text):
            pass
        return self.snapshot()

    def _emit(self, event: _E) -> _E:
        self._loop.emit(event)
        return event

    def _check_pending(self, approval_id: str | None) -> Pending:
        pending = self._loop.state.pending
        if pending is None or pending.approval is None:
            raise RuntimeError(f"run {self.id} is {self.status}, not waiting for an approval")
        if approval_id is not None and approval_id != pending.id:
            raise RuntimeError(f"run {self.id} waits for approval {pending.id}, not {approval_id}")
        return pending

    def approve_stream(
        self, approval_id: str | None = None, *, remember: bool = False, by: str = "user"
    ) -> AsyncIterator[Event]:
        """Approve the pending call (once, or ``remember`` its rule) and go on, yielding events.

        Past the approval's deadline its default action applies instead. ``by``: who approved
        (``job``: the job a delegation waited for ended).
        """
        pending = self._check_pending(approval_id)
        result = self._emit(rs.resolve_approval(self.state, True, by=by))
        suggestion = pending.approval.suggestion if pending.approval else None
        if remember and suggestion and self._remember and result.decision == "approved":
            self._remember(suggestion)
        return self._recorded(_prepend(result, self._events()))

    def deny_stream(self, approval_id: str | None = None, reason: str = "") -> AsyncIterator[Event]:
        """Deny the pending call; the model is told, with ``reason``, and goes on."""
        self._check_pending(approval_id)
        denied = self._emit(rs.resolve_approval(self.state, False, reason=reason))
        return self._recorded(_prepend(denied, self._events()))

    def expire_stream(self) -> AsyncIterator[Event]:
        """Apply the pending approval's default action now (its deadline passed)."""
        self._check_pending(None)
        event = self._emit(
            rs.resolve_approval(self.state, False, reason="no answer before the deadline", by="timeout")
        )
        return self._recorded(_prepend(event, self._events()))

    async def approve(self, approval_id: str | None = None, *, remember: bool = False) -> RunResult:
        """Approve the pending call and run on; returns the new result."""
        async for _ in self.approve_stream(approval_id, remember=remember):
            pass
        return self.snapshot()

    async def deny(self, approval_id: str | None = None, reason: str = "") -> RunResult:
        """Deny the pending call and run on; returns the new result."""
        async for _ in self.deny_stream(approval_id, reason):
            pass
        return self.snapshot()


class RunStream:
    """Async-iterable events of one run, with the ``Run`` at hand."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._events = run.stream()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events


async def _prepend(first: Event, rest: AsyncIterator[Event]) -> AsyncIterator[Event]:
    try:
        yield first
        async for event in rest:
            yield event
    finally:  # closing this closes the run's stream too (see Run._close)
        close = getattr(rest, "aclose", None)
        if close is not None:
            await close()


async def _aclose(stream: AsyncIterator[Event]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
