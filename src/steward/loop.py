"""The agent loop: one step at a time, each ending in one of a closed set of outcomes.

A step builds the request (static prompt + working-memory view + budgeted transcript),
streams the model's reply, routes every tool call (an ``agent_step`` phase, a direct tool
call, or ``recall_output``), records what happened, and updates the loop signals.
Streaming adapters, rendering, transports, persistence and the rebuilding of a recorded run
live elsewhere: they consume the events, or hand the loop a recorded model, toolset and clock
(``steward.recovery``). The loop never knows whether it is live or replaying.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, assert_never

from steward import events as ev
from steward import run_state as rs
from steward import signals as sig
from steward.clock import Clock, RunClock
from steward.context import BuiltRequest, ContextBuilder
from steward.errors import ApprovalRequired, ConfigError
from steward.memory.compression import Compressor
from steward.memory.working import Step, attempt_failed, record_phase
from steward.models.base import AssistantMessage, Model, ModelResponse, ToolCall
from steward.phases import AGENT_STEP, AGENT_STEP_SPEC, AgentStep, EndStatus, StepInputError, parse_agent_step
from steward.replies import reply_event, text_events, with_unique_ids
from steward.reply_stream import stream_reply
from steward.text import compact_json
from steward.tools._code_calls import denied_events, result_events, resumed_call, while_calling
from steward.tools.base import ToolContext, ToolResult, Toolset
from steward.tools.deadline import DeadlineToolset

if TYPE_CHECKING:
    from steward.memory.blocks import CoreMemory

Items = AsyncIterator[ev.Event | rs.Outcome]


class StepGuard(Protocol):
    """What a run's budgets (``steward.budget``) do around each of its steps: hooks the loop
    calls, not a layer every event of a step passes through."""

    def before(self, loop: Loop, steps: Items) -> Items:
        """The step's items: ``steps`` as they are, or with a check around them."""
        ...

    def after(self, loop: Loop, outcome: rs.Outcome) -> Awaitable[tuple[Sequence[ev.Event], rs.Outcome]]:
        """What follows the step: events, and its outcome (``outcome``, or one that replaces it)."""
        ...


class Loop:
    """Runs the steps of one run until it finishes, fails or waits for a human."""

    def __init__(
        self,
        *,
        model: Model,
        toolset: Toolset,
        static_prompt: str,
        state: rs.RunState,
        context: ContextBuilder,
        tool_context: ToolContext,
        settings: rs.LoopSettings,
    ) -> None:
        self.model, self.toolset, self.static_prompt = model, toolset, static_prompt
        self.state, self.context, self.ctx, self.settings = state, context, tool_context, settings
        self.clock: Clock = RunClock(settings.run_timeout_s, state)
        #: Core memory blocks, rendered after the static prompt (they change only when edited).
        self.core_memory: CoreMemory | None = None
        #: Told of every event as it is numbered (a rebuild checks it against the log there).
        self.stamp: Callable[[ev.Event], None] | None = None
        self.modes: rs.ModeSource = rs.NO_SWITCH  # mode switches asked while it runs (a step takes them)
        self.step_spec = AGENT_STEP_SPEC  # the agent_step tool offered: full or compact (``steward.phases``)
        self.ending: Callable[[Loop, Items], Items] | None = None  # an answer's ending checked (continuation)
        self.guard: StepGuard | None = None  # around each step, after the ending's check (budgets)
        #: Told of the events of their type as they are numbered, after ``stamp`` (tracing: a
        #: call, where a layer around the run's stream would cost a generator step per event).
        #: Each takes the events of its type only (``Any``: a handler names the type it takes).
        self.watchers: Mapping[str, Callable[[Any], None]] = {}
        #: Told of each step's reply as the loop takes it (tracing ends the model call's span
        #: there, where a layer around the model's stream would cost a frame per piece).
        self.replied: Callable[[ModelResponse], None] | None = None

    def emit(self, event: ev.Event) -> ev.Event:
        st = self.state
        event.run_id, event.session_id, event.ts = st.run_id, st.session_id, time.time()
        # Streamed deltas (partial text and thinking) are for live display only: they carry seq 0
        # and are not part of the run's log; the complete text follows as one event that is.
        if getattr(event, "partial", False):
            return event
        st.seq += 1
        event.seq = st.seq
        if self.stamp is not None:
            self.stamp(event)
        if self.watchers and (told := self.watchers.get(event.type)) is not None:
            told(event)
        return event

    async def run(self) -> AsyncIterator[ev.Event]:
        """Step until the run ends or pauses; the last event is ``done`` or ``waiting``."""
        while True:
            outcome: rs.Outcome = rs.CONTINUE
            if (mode := self.modes.take()) is not None:
                yield self.emit(ev.ModeEvent(mode=mode))
            async for item in self._steps():
                if isinstance(item, ev.Event):
                    yield item
                else:
                    outcome = item
            if self.guard is not None:
                after, outcome = await self.guard.after(self, outcome)
                for event in after:
                    yield event
            if isinstance(outcome, rs.Continue):
                continue
            # Waiting for a human is not running: the clock stops before the wait is announced.
            self.clock.stop()
            match outcome:
                case rs.Finish(end_status=status, message=message):
                    yield self._finish("done", status, message)
                    return
                case rs.Pause(pending=pending):
                    self.state.status, self.state.pending = "waiting", pending
                    for event in pending.events():
                        yield self.emit(event)
                    return
                case _:  # a failure, the one outcome left
                    yield self.emit(
                        ev.ErrorEvent(code=outcome.code, message=outcome.message, recoverable=False)
                    )
                    yield self._finish("failed", None, outcome.message)
                    return

    def _steps(self) -> Items:
        """The next step's items (or an approved call's), through the ending's check and the guard."""
        steps = self._resume() if self.state.resume is not None else self._step()
        if self.ending is not None:
            steps = self.ending(self, steps)
        return steps if self.guard is None else self.guard.before(self, steps)

    def cancel(self) -> ev.Event:
        """Mark the run cancelled and return its closing ``done`` event."""
        return self._finish("cancelled", None, "Cancelled before it finished.")

    def _finish(self, status: str, end_status: rs.RunEnd | None, message: str) -> ev.Event:
        return self.emit(self.state.finish(status, end_status, message))

    @property
    def compressor(self) -> Compressor:
        s = self.settings
        return Compressor(
            self.model, self.state, self.context, self.clock, output_chars=s.compact_output_chars,
            skip_tools=s.compact_skip_tools, summarize_turns=s.summarize_turns,
        )  # fmt: skip

    # --- one step -------------------------------------------------------------------

    async def _step(self) -> Items:
        st, c = self.state, self.state.counters
        if c.step >= c.max_steps or self._timed_out():
            for item in (rs.limit_outcome(st),) if c.step >= c.max_steps else self._time_up():
                yield item
            return
        c.step += 1
        yield self.emit(ev.StepStart(step=c.step, max_steps=c.max_steps))
        folded, built = await self._build(sig.render(st.signals(self.settings.repeat_warning)))
        if folded is not None:  # the oldest turns, folded into a summary first
            yield folded
        if isinstance(built, rs.Fail):
            yield built
            return
        response: ModelResponse | None = None
        request = replace(built.request, max_tokens=self.settings.max_output_tokens)
        async for piece in stream_reply(self, request):
            if isinstance(piece, ModelResponse):
                response = piece
            else:
                yield piece
                if isinstance(piece, rs.Fail | rs.Finish):
                    return
        if response is None:
            yield rs.Fail("model_error", f"{self.model.name}: the reply ended without a response")
            return
        message = self._take(response, built.chars)
        yield self.emit(reply_event(c.step, message, response.usage, st.price))
        if message.text or message.tool_calls:
            # An empty turn would be rejected by some providers when sent back.
            st.transcript.add_assistant(message)
        for event in text_events(message):
            yield self.emit(event)
        async for part in self._route_reply(message.text, message.tool_calls):
            yield part

    def _take(self, response: ModelResponse, chars: int) -> AssistantMessage:
        """A step's reply, counted and told of; its message with ids unique in the run."""
        st = self.state
        st.usage.add(response.usage)
        if self.replied is not None:
            self.replied(response)
        self.context.calibrate(chars, response.usage.input_tokens)
        return with_unique_ids(response.message, st.call_ids, st.counters.step)

    async def _build(self, signals: str) -> tuple[ev.Event | None, BuiltRequest | rs.Fail]:
        """The step's request within its budget; the oldest turns are folded first when due."""
        st, folded = self.state, None
        try:
            tools = [*await self.toolset.get_tools(self.ctx), self.step_spec]
            st.offered.note(tools)
            static = self.static_prompt
            if self.core_memory is not None and len(self.core_memory):
                static += "\n\n" + self.core_memory.render()
            built = self.context.build(static, st.memory, signals, st.transcript, tools)
            if built.fold:
                event = await self.compressor.fold("turns", built.fold)
                folded = self.emit(event) if event is not None else None
                built = self.context.build(static, st.memory, signals, st.transcript, tools, may_fold=False)
        except ConfigError as exc:
            return folded, rs.Fail("config_error", str(exc))
        except Exception as exc:  # a broken toolset (e.g. a crashed server) ends the run cleanly
            return folded, rs.Fail("toolset_error", f"listing tools failed: {type(exc).__name__}: {exc}")
        return folded, built

    async def _route_reply(self, text: str, calls: tuple[ToolCall, ...]) -> Items:
        st = self.state
        if not calls:
            if text.strip():  # an answer, or a claim the state contradicts (``steward.ending``)
                events, end = rs.plain_answer(st, self.settings, text.strip())
                for item in (*map(self.emit, events), end):
                    yield item
                return
            st.empty_replies += 1
            if st.empty_replies >= self.settings.max_empty_replies:
                yield rs.Fail(
                    "empty_reply", f"{self.model.name} returned {st.empty_replies} empty replies in a row"
                )
                return
            st.transcript.add_user("Your reply was empty. Continue with agent_step, call a tool, or answer.")
            yield rs.CONTINUE
            return
        st.empty_replies = 0
        outcome: rs.Outcome = rs.CONTINUE
        for n, call in enumerate(calls):
            async for item in self._route_call(call):
                if isinstance(item, ev.Event):
                    yield item
                else:
                    outcome = item
            if not isinstance(outcome, rs.Continue):
                for skipped in calls[n + 1 :]:
                    st.reply(skipped, "Not run: an earlier call in the same reply ended or paused the run.")
                break
        async for item in self._after_step(outcome):
            yield item

    def _answer(
        self, status: EndStatus, text: str, call: ToolCall | None = None, thinking: str = ""
    ) -> list[ev.Event | rs.Outcome]:
        """A final answer ends the run, unless the run's output schema sends it back to be fixed."""
        events, outcome = rs.final_answer(self.state, self.settings, status, text, call, thinking)
        return [*map(self.emit, events), outcome]

    async def _after_step(self, outcome: rs.Outcome) -> Items:
        st, c = self.state, self.state.counters
        for warning in st.new_warnings(self.settings.repeat_warning):
            yield self.emit(warning)
        if isinstance(outcome, rs.Continue) and c.consecutive_repeats >= self.settings.repeat_stop:
            outcome = rs.Finish(
                "stuck",
                f"Stopped: the same action ({c.last_action}) was repeated {c.consecutive_repeats} times "
                "without progress. " + rs.progress_report(st),
            )
        yield outcome

    # --- routing one call -----------------------------------------------------------------

    async def _route_call(self, call: ToolCall) -> Items:
        if call.arguments_error is not None:
            message = f"Invalid arguments for {call.name}: {call.arguments_error}"
        elif call.name != AGENT_STEP:
            direct = f"Direct tool call: {call.name}"
            async for item in self._act(
                call, call.name, dict(call.arguments), direct, f"Execute {call.name}"
            ):
                yield item
            return
        else:
            try:
                step = parse_agent_step(call.arguments)
            except StepInputError as exc:
                message = f"Invalid agent_step: {exc}. Fix it and call agent_step again."
            else:
                async for item in self._route_phase(call, step):
                    yield item
                return
        yield self.emit(self.state.record_bad_call(call, message))
        yield rs.CONTINUE

    async def _route_phase(self, call: ToolCall, step: AgentStep) -> Items:
        st, mem, n = self.state, self.state.memory, self.state.counters.step
        yield self.emit(ev.PhaseEvent(step=n, phase=step.phase, summary=step.summary or step.end_message))
        match step.phase:
            case "act":
                assert step.action is not None
                if step.action.tool_name == AGENT_STEP:
                    st.reply(call, "action.tool_name cannot be agent_step; name the tool to run.", error=True)
                    yield rs.CONTINUE
                    return
                a = step.action
                async for item in self._act(call, a.tool_name, a.tool_input, step.thinking, step.summary):
                    yield item
            case "feedback":
                mem.add_step(Step(n, "feedback", step.thinking, step.feedback_message))
                st.counters.record_non_act("feedback")
                yield rs.Pause(rs.Pending(f"q-{st.run_id}-{n}", "question", step.feedback_message, call.id))
            case "end":
                assert step.end_status is not None
                for item in self._answer(step.end_status, step.end_message, call, step.thinking):
                    yield item
            case "plan" | "reason" | "verify" | "reflect":
                failed_attempt = step.phase == "plan" and attempt_failed(mem)
                ack, events = record_phase(mem, step, n)
                for event in events:
                    yield self.emit(event)
                mem.add_step(Step(n, step.phase, step.thinking, step.summary))
                st.counters.record_non_act(step.phase)
                # Re-planning after failure: start over from what the attempt taught.
                again = failed_attempt and self.settings.summarize_failed_attempts
                if again and (folded := await self.compressor.fold("attempt", st.transcript.foldable(1))):
                    yield self.emit(folded)
                self.state.reply(call, compact_json(ack))
                yield rs.CONTINUE
            case _:
                assert_never(step.phase)

    async def _act(
        self, call: ToolCall, tool: str, arguments: dict[str, Any], thinking: str, summary: str,
        *, approved: str | None = None,
    ) -> Items:  # fmt: skip
        n = self.state.counters.step
        if approved is None:  # an approved call was announced when it was asked about
            yield self.emit(ev.ToolUse(step=n, call_id=call.id, tool=tool, input=arguments))
        started = time.perf_counter()
        s = self.settings
        toolset = DeadlineToolset(self.toolset, timeout_s=s.tool_timeout_s, clock=self.clock,
                                  run_limit_s=s.run_timeout_s)  # fmt: skip
        result: ToolResult | None = None  # a program's own calls are recorded as it makes them
        try:
            async for got in while_calling(
                toolset, tool, arguments, replace(self.ctx, step=n, approved=approved), call.id
            ):
                if isinstance(got, ToolResult):
                    result = got
                else:
                    yield self.emit(got)
        except ApprovalRequired as request:
            yield rs.Pause(rs.pending_approval(request, call, thinking, summary, s, self.state.seq))
            return
        assert result is not None
        for event in result_events(result):  # its notes
            yield self.emit(event)
        took = result.duration_ms
        duration = took if took is not None else (time.perf_counter() - started) * 1000
        yield self.emit(self.state.record_call(call, tool, arguments, thinking, summary, result, duration))
        if self._timed_out():
            for item in self._time_up():
                yield item
            return
        big = self.compressor.compactable(tool, result)
        if big and (compacted := await self.compressor.output(call.id, tool, arguments, result)):
            yield self.emit(compacted)
        yield rs.CONTINUE

    # --- the run's time limit ---------------------------------------------------------

    def _timed_out(self) -> bool:
        return (remaining := self.clock.remaining()) is not None and remaining <= 0

    def _time_up(self) -> tuple[ev.Event, rs.Finish]:
        """The signal and the ending of a run whose time is up."""
        signal, end = rs.time_up(self.state, self.settings.run_timeout_s)
        return self.emit(signal), end

    async def _resume(self) -> Items:
        """Carry out an answered approval, then go on as after any step."""
        st = self.state
        resume, st.resume = st.resume, None
        assert resume is not None
        a = resume.approval
        outcome: rs.Outcome = rs.CONTINUE
        tool, arguments = resumed_call(self.ctx, a, resume.approved)  # a program's gated call: the program
        if resume.approved:
            act = self._act(a.call, tool, arguments, a.thinking, a.summary, approved=a.call_hash)
            async for item in act:
                if isinstance(item, ev.Event):
                    yield item
                else:
                    outcome = item
        else:
            denied = resume.refusal()
            for event in denied_events(st.counters.step, a.call.id, a, denied):
                yield self.emit(event)
            yield self.emit(st.record_call(a.call, tool, arguments, a.thinking, a.summary, denied, 0.0))
        async for item in self._after_step(outcome):
            yield item
