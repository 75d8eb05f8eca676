"""The agent loop: one step at a time, each ending in one of a closed set of outcomes.

A step builds the request (static prompt + working-memory view + budgeted transcript),
streams the model's reply, routes every tool call (an ``agent_step`` phase, a direct tool
call, or ``recall_output``), records what happened, and updates the loop signals.
Streaming adapters, rendering and transports live elsewhere: they consume the events.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, assert_never

from steward import signals as sig
from steward.context import BuiltRequest, ContextBuilder, fold_summary_limit
from steward.errors import ApprovalRequired, ConfigError, ModelError
from steward.events import (
    AnswerEvent,
    ApprovalGateEvent,
    ApprovalResultEvent,
    CompactionEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    KeyFactEvent,
    ModelReplyEvent,
    PhaseEvent,
    PlanEvent,
    SignalEvent,
    StepStart,
    TextEvent,
    ThinkingEvent,
    ToolResultEvent,
    ToolUse,
    WaitingEvent,
)
from steward.models.base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from steward.phases import AGENT_STEP, AGENT_STEP_SPEC, AgentStep, EndStatus, StepInputError, parse_agent_step
from steward.replay import Replay, ReplayError
from steward.run_state import (
    CONTINUE,
    Approval,
    Continue,
    Fail,
    Finish,
    LoopSettings,
    Outcome,
    Pause,
    Pending,
    Resume,
    RunState,
    limit_outcome,
    progress_report,
    timeout_outcome,
)
from steward.tools.base import ToolContext, ToolResult, Toolset

if TYPE_CHECKING:
    import asyncio

    from steward.memory.blocks import CoreMemory
from steward.working_memory import ErrorEntry, Fact, Step, WorkingMemory, compact_json, plan_event_payload


class Loop:
    """Runs the steps of one run until it finishes, fails or waits for a human."""

    def __init__(
        self,
        *,
        model: Model,
        toolset: Toolset,
        static_prompt: str,
        state: RunState,
        context: ContextBuilder,
        tool_context: ToolContext,
        settings: LoopSettings,
    ) -> None:
        self.model = model
        self.toolset = toolset
        self.static_prompt = static_prompt
        self.state = state
        self.context = context
        self.ctx = tool_context
        self.settings = settings
        #: Core memory blocks, rendered after the static prompt (they change only when edited).
        self.core_memory: CoreMemory | None = None
        #: The recorded log while a run is being rebuilt from it (see ``steward.replay``).
        self.replay: Replay | None = None
        self._replayed = False  # whether the last emitted event came from the recorded log
        self._since: float | None = None  # when the current stretch of running began (monotonic)

    def rebuilding(self) -> bool:
        """Whether the run is still being rebuilt from its recorded log."""
        return self.replay is not None

    def next_recorded(self) -> Event | None:
        """The recorded event the rebuild is at, if the run is being rebuilt."""
        return self.replay.peek() if self.replay is not None else None

    def emit(self, event: Event) -> Event:
        st = self.state
        event.run_id, event.session_id, event.ts = st.run_id, st.session_id, time.time()
        # Streamed deltas (partial text and thinking) are for live display only: they carry seq 0
        # and are not part of the run's log; the complete text follows as one event that is.
        if getattr(event, "partial", False):
            return event
        st.seq += 1
        event.seq = st.seq
        self._replayed = self.replay is not None
        if self.replay is not None:
            event.ts = self.replay.match(event).ts
            if self.replay.done:  # from here on the run is live again
                st.seq, self.replay = self.replay.last_seq, None
        return event

    async def run(self) -> AsyncIterator[Event]:
        """Step until the run ends or pauses; the last event is ``done`` or ``waiting``."""
        while True:
            outcome: Outcome = CONTINUE
            steps = self._resume() if self.state.resume is not None else self._step()
            async for item in steps:
                if isinstance(item, Event):
                    yield item
                else:
                    outcome = item
            if not isinstance(outcome, Continue):
                # Waiting for a human is not running: the clock stops before the wait is announced.
                self._stop_clock()
            match outcome:
                case Continue():
                    continue
                case Finish(end_status=status, message=message):
                    yield self._finish("done", status, message)
                    return
                case Pause(pending=pending):
                    self.state.status, self.state.pending = "waiting", pending
                    if pending.approval is not None:
                        yield self.emit(_gate_event(pending.id, pending.approval))
                    yield self.emit(WaitingEvent(kind=pending.kind, id=pending.id, question=pending.question))
                    return
                case Fail(code=code, message=message):
                    yield self.emit(ErrorEvent(code=code, message=message, recoverable=False))
                    yield self._finish("failed", None, message)
                    return
                case _:
                    assert_never(outcome)

    def cancel(self) -> Event:
        """Mark the run cancelled and return its closing ``done`` event."""
        return self._finish("cancelled", None, "Cancelled before it finished.")

    def _finish(self, status: str, end_status: EndStatus | None, message: str) -> Event:
        st = self.state
        st.status, st.end_status, st.output = status, end_status, message
        return self.emit(
            DoneEvent(
                status=status,
                end_status=end_status,
                message=message,
                steps=st.counters.step,
                tool_calls=st.counters.tool_calls,
                usage=st.usage.as_dict(),
            )
        )

    def _signals(self) -> list[sig.Signal]:
        return sig.compute(
            self.state.counters,
            repeat_threshold=self.settings.repeat_warning,
            failed_sub_task=self.state.memory.failed_current_sub_task(),
        )

    # --- one step -------------------------------------------------------------------

    async def _step(self) -> AsyncIterator[Event | Outcome]:
        st, c = self.state, self.state.counters
        if stop := self._limit_reached():
            for item in stop:
                yield item
            return
        c.step += 1
        self.ctx.step = c.step
        yield self.emit(StepStart(step=c.step, max_steps=c.max_steps))
        events, built = await self._build(sig.render(self._signals()))
        for event in events:  # summaries of old turns, if the request would not fit otherwise
            yield event
        if isinstance(built, Fail):
            yield built
            return
        response: ModelResponse | None = None
        source = self._call_model(built.request) if self.replay is None else self._reply_to(built.request)
        async for piece in source:
            if isinstance(piece, ModelResponse):
                response = piece
            else:
                yield piece
                if isinstance(piece, Fail | Finish):
                    return
        if response is None:
            yield Fail("model_error", f"{self.model.name}: the reply ended without a response")
            return
        st.usage.add(response.usage)
        self.context.calibrate(built.chars, response.usage.input_tokens)
        message = _with_unique_ids(response.message, st.call_ids, c.step)
        yield self.emit(_reply_event(c.step, message, response.usage))
        if message.text or message.tool_calls:
            # An empty turn would be rejected by some providers when sent back.
            st.transcript.add_assistant(message)
        for event in _full_text_events(message):
            yield self.emit(event)
        async for item in self._route_reply(message):
            yield item

    def _limit_reached(self) -> tuple[Event | Outcome, ...]:
        """How the run ends if a limit is reached before the next step; empty if none is."""
        if self.state.counters.step >= self.state.counters.max_steps:
            return (limit_outcome(self.state),)
        if self._timed_out():
            return self._time_up()
        return ()

    async def _call_model(
        self, request: ModelRequest
    ) -> AsyncIterator[Event | ModelResponse | Fail | Finish]:
        """Stream one reply: deltas become partial events; failures become ``Fail``.

        A retryable failure (rate limit, overload, a stream broken or stalled midway) is tried
        again a bounded number of times, with backoff; consumers see an ``error`` event with
        ``recoverable: true`` for each retry. When the run's time is up the reply (or the wait
        before a retry) is cancelled and the run ends.
        """
        attempts = self.settings.model_retries + 1
        delay = 0.0
        for attempt in range(1, attempts + 1):
            stream = self.model.stream(request)  # nothing runs until the first piece is asked for
            try:
                if delay:
                    await self._within_time(lambda: _sleep(delay))  # noqa: B023 - awaited at once
                # Each wait for a piece is bounded, never a yield: a deadline must not cancel
                # whoever consumes the events.
                while (piece := await self._next_piece(stream)) is not None:
                    yield self._shown(piece)
            except _OutOfTime:
                await _aclose(stream)  # a reply cut midway: release its connection now
                for item in self._time_up():
                    yield item
                return
            except ModelError as exc:
                if not exc.retryable or attempt == attempts:
                    yield Fail("model_error", str(exc))
                    return
                delay = self.settings.model_retry_backoff_s * 2 ** (attempt - 1)
                message = f"{exc} (attempt {attempt} of {attempts}; retrying in {delay:g} s)"
                yield self.emit(ErrorEvent(code="model_retry", message=message, recoverable=True))
            except Exception as exc:  # a provider bug must end this run cleanly, not the process
                yield Fail(
                    "model_error", f"{self.model.name} failed unexpectedly: {type(exc).__name__}: {exc}"
                )
                return
            else:
                return

    async def _build(self, signal_text: str) -> tuple[list[Event], BuiltRequest | Fail]:
        """The step's request within its budget; old turns that no longer fit are summarised."""
        st = self.state
        events: list[Event] = []
        try:
            tools = [*await self.toolset.get_tools(self.ctx), AGENT_STEP_SPEC]
            static = self.static_prompt
            if self.core_memory is not None and len(self.core_memory):
                static += "\n\n" + self.core_memory.render()
            built = self.context.build(static, st.memory, signal_text, st.transcript, tools)
            if built.fold:  # the oldest turns outgrew their share: fold them into a summary first
                events.extend([event async for event in self._fold("turns", built.fold)])
                built = self.context.build(
                    static, st.memory, signal_text, st.transcript, tools, may_fold=False
                )
        except ConfigError as exc:
            return events, Fail("config_error", str(exc))
        except Exception as exc:  # a broken toolset (e.g. a crashed server) ends the run cleanly
            return events, Fail("toolset_error", f"listing tools failed: {type(exc).__name__}: {exc}")
        return events, built

    async def _reply_to(self, request: ModelRequest) -> AsyncIterator[Event | ModelResponse | Fail | Finish]:
        """The model's reply: the recorded one while rebuilding a run, else a new one."""
        if self.replay is not None:
            recorded: ModelResponse | None = None
            async for item in self._recorded_reply():
                if isinstance(item, ModelResponse):
                    recorded = item
                else:
                    yield item
                    if isinstance(item, Finish):  # the run's time ran out while it was asked
                        return
            if recorded is not None:
                self.model.replayed()
                yield recorded
                return
        async for piece in self._call_model(request):
            yield piece

    async def _recorded_reply(self) -> AsyncIterator[Event | ModelResponse | Finish]:
        """The recorded reply (and the retries before it), taken instead of asking again."""
        while self.replay is not None and isinstance(retry := self.replay.peek(), ErrorEvent):
            if retry.code != "model_retry":
                break
            yield self.emit(ErrorEvent(code=retry.code, message=retry.message, recoverable=True))
        recorded = self.replay.peek() if self.replay is not None else None
        if isinstance(recorded, ModelReplyEvent):
            yield _response_from(recorded)
        elif _is_time_up(recorded):
            for item in self._time_up():
                yield item
        elif recorded is not None:
            raise ReplayError(
                f"cannot rebuild the run: at seq {recorded.seq} the log has '{recorded.type}' "
                "where the model's reply belongs",
                run_id=self.state.run_id,
                status="diverged",
            )

    async def _route_reply(self, message: AssistantMessage) -> AsyncIterator[Event | Outcome]:
        st = self.state
        if not message.tool_calls:
            if message.text.strip():
                yield Finish("solved", message.text.strip())
                return
            st.empty_replies += 1
            if st.empty_replies >= self.settings.max_empty_replies:
                yield Fail(
                    "empty_reply", f"{self.model.name} returned {st.empty_replies} empty replies in a row"
                )
                return
            st.transcript.add_user("Your reply was empty. Continue with agent_step, call a tool, or answer.")
            yield CONTINUE
            return
        st.empty_replies = 0
        outcome: Outcome = CONTINUE
        for n, call in enumerate(message.tool_calls):
            async for item in self._route_call(call):
                if isinstance(item, Event):
                    yield item
                else:
                    outcome = item
            if not isinstance(outcome, Continue):
                for skipped in message.tool_calls[n + 1 :]:
                    self._reply(
                        skipped, "Not run: an earlier call in the same reply ended or paused the run."
                    )
                break
        async for item in self._after_step(outcome):
            yield item

    async def _after_step(self, outcome: Outcome) -> AsyncIterator[Event | Outcome]:
        st, c = self.state, self.state.counters
        current = self._signals()
        warnings = {s.code: s for s in current if s.level == "warning"}
        for code in warnings.keys() - st.raised:
            s = warnings[code]
            yield self.emit(SignalEvent(code=s.code, level=s.level, message=s.message))
        st.raised = frozenset(warnings)
        if isinstance(outcome, Continue) and c.consecutive_repeats >= self.settings.repeat_stop:
            outcome = Finish(
                "stuck",
                f"Stopped: the same action ({c.last_action}) was repeated {c.consecutive_repeats} times "
                "without progress. " + progress_report(st),
            )
        yield outcome

    # --- routing one call -----------------------------------------------------------------

    async def _route_call(self, call: ToolCall) -> AsyncIterator[Event | Outcome]:
        if call.arguments_error is not None:
            async for item in self._bad_call(
                call, f"Invalid arguments for {call.name}: {call.arguments_error}"
            ):
                yield item
            return
        if call.name != AGENT_STEP:
            summary = f"Execute {call.name}"
            async for item in self._act(
                call, call.name, dict(call.arguments), f"Direct tool call: {call.name}", summary
            ):
                yield item
            return
        try:
            step = parse_agent_step(call.arguments)
        except StepInputError as exc:
            async for item in self._bad_call(
                call, f"Invalid agent_step: {exc}. Fix it and call agent_step again."
            ):
                yield item
            return
        async for item in self._route_phase(call, step):
            yield item

    async def _route_phase(self, call: ToolCall, step: AgentStep) -> AsyncIterator[Event | Outcome]:
        st, mem, n = self.state, self.state.memory, self.state.counters.step
        yield self.emit(PhaseEvent(step=n, phase=step.phase, summary=step.summary or step.end_message))
        match step.phase:
            case "act":
                assert step.action is not None
                if step.action.tool_name == AGENT_STEP:
                    self._reply(
                        call, "action.tool_name cannot be agent_step; name the tool to run.", error=True
                    )
                    yield CONTINUE
                    return
                action = step.action
                async for item in self._act(
                    call, action.tool_name, action.tool_input, step.thinking, step.summary
                ):
                    yield item
            case "feedback":
                mem.add_step(Step(n, "feedback", step.thinking, step.feedback_message))
                st.counters.record_non_act("feedback")
                yield Pause(Pending(f"q-{st.run_id}-{n}", "question", step.feedback_message, call.id))
            case "end":
                assert step.end_status is not None
                mem.add_step(Step(n, "end", step.thinking, step.end_message))
                self._reply(call, compact_json({"acknowledged": True, "end_status": step.end_status}))
                yield Finish(step.end_status, step.end_message)
            case "plan" | "reason" | "verify" | "reflect":
                failed_attempt = step.phase == "plan" and _attempt_failed(mem)
                ack, events = self._record_phase(step, n)
                for event in events:
                    yield self.emit(event)
                mem.add_step(Step(n, step.phase, step.thinking, step.summary))
                st.counters.record_non_act(step.phase)
                if failed_attempt and self.settings.summarize_failed_attempts:
                    # Re-planning after failure: start over from what the attempt taught.
                    async for event in self._fold("attempt", st.transcript.foldable(1)):
                        yield event
                self._reply(call, compact_json(ack))
                yield CONTINUE
            case _:
                assert_never(step.phase)

    def _record_phase(self, step: AgentStep, n: int) -> tuple[dict[str, Any], list[Event]]:
        """Apply a phase that only updates working memory; return its ack and events."""
        mem = self.state.memory
        match step.phase:
            case "plan":
                assert step.plan is not None
                plan = mem.set_plan(step.plan.goal, step.plan.sub_tasks)
                ack = {
                    "acknowledged": True,
                    "plan_version": plan.version,
                    "current_sub_task": plan.current_sub_task,
                }
                return ack, [PlanEvent(**plan_event_payload(plan))]
            case "verify":
                ack = self._verify(step, n)
                added = mem.facts[len(mem.facts) - len(step.key_facts) :] if step.key_facts else []
                events: list[Event] = [KeyFactEvent(f.fact, f.source_step, f.source_tool) for f in added]
                if step.sub_task_outcome and mem.plan is not None:
                    events.append(PlanEvent(**plan_event_payload(mem.plan)))
                return ack, events
            case "reflect":
                error = mem.last_unresolved_error()
                if error is not None:
                    mem.resolve_error(error.step, step.summary)
                return {"acknowledged": True, "resolved_error_step": error.step if error else None}, []
            case _:
                return {"acknowledged": True, "step": n}, []

    def _verify(self, step: AgentStep, n: int) -> dict[str, Any]:
        mem = self.state.memory
        if step.key_facts:
            last_tool = next((s.tool_name for s in reversed(mem.steps) if s.tool_name), None)
            mem.add_key_facts(Fact(f, n, last_tool) for f in step.key_facts)
        current = mem.plan.current_sub_task if mem.plan else None
        if step.sub_task_outcome and current is not None:
            mem.update_sub_task_status(current, step.sub_task_outcome)
            if step.sub_task_outcome == "done":
                current = mem.advance_to_next_sub_task()
        return {
            "acknowledged": True,
            "facts_recorded": len(step.key_facts),
            "sub_task_outcome": step.sub_task_outcome,
            "current_sub_task": current,
        }

    async def _act(
        self,
        call: ToolCall,
        tool: str,
        arguments: dict[str, Any],
        thinking: str,
        summary: str,
        *,
        announce: bool = True,
        approved_from_log: str | None = None,
    ) -> AsyncIterator[Event | Outcome]:
        n = self.state.counters.step
        if announce:
            yield self.emit(ToolUse(step=n, call_id=call.id, tool=tool, input=arguments))
            from_log = self._replayed
        else:  # an approved call: it began in an earlier process if its approval was recorded
            from_log = approved_from_log is not None
        if from_log:
            recorded = self._recorded_call(call, tool, arguments, thinking, summary, approved_from_log)
            async for item in recorded:
                yield item
            return
        started = time.perf_counter()
        try:
            result, cut = await self._run_tool(tool, arguments)
        except ApprovalRequired as request:
            yield Pause(self._approval(call, request, thinking, summary))
            return
        for kind, message in self.ctx.notes:
            yield self.emit(
                SignalEvent(code=kind, level="warning" if kind == "blocked" else "info", message=message)
            )
        self.ctx.notes.clear()
        duration = (time.perf_counter() - started) * 1000
        yield self._record(call, tool, arguments, thinking, summary, result, duration, n, result.category)
        async for item in self._after_call(call, tool, arguments, result, cut=cut):
            yield item

    async def _run_tool(self, tool: str, arguments: dict[str, Any]) -> tuple[ToolResult, bool]:
        """Run one call within its own timeout and the run's; also whether the run's limit cut it.

        Raises ``ApprovalRequired`` when the call waits for a human.
        """
        own, limit = self.settings.tool_timeout_s, self.settings.run_timeout_s
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            late = f"Not run: the run's time limit ({limit:g} s of running) was reached before it started."
            return ToolResult(late, is_error=True, category="timeout"), True
        by_run = remaining is not None and remaining < own
        deadline = _timeout(min(own, remaining) if remaining is not None else own)
        try:
            async with deadline:
                return await self.toolset.call_tool(tool, arguments, self.ctx), False
        except ApprovalRequired:
            raise
        except TimeoutError as exc:
            if not deadline.expired():  # raised by the tool itself: a failure like any other
                return ToolResult(f"{tool} failed: TimeoutError: {exc}", is_error=True), False
            if by_run:
                # Cancelling the call stopped what it started (bash stops its process group).
                stopped = (
                    f"Stopped by the run's time limit ({limit:g} s of running) before it finished; "
                    "what it did until then is unknown."
                )
                return ToolResult(stopped, is_error=True, category="timeout"), True
            return ToolResult(f"{tool} timed out after {own:g} s", is_error=True), False
        except Exception as exc:  # a broken toolset is the model's problem to route around, not a crash
            return ToolResult(f"{tool} failed: {type(exc).__name__}: {exc}", is_error=True), False

    async def _after_call(
        self, call: ToolCall, tool: str, arguments: dict[str, Any], result: ToolResult, *, cut: bool = False
    ) -> AsyncIterator[Event | Outcome]:
        """After a recorded call: the run's end if its time is up, else its output's compaction."""
        if cut or self._timed_out():
            for item in self._time_up():
                yield item
            return
        if self._compactable(tool, result):
            async for event in self._compact_output(call, tool, arguments, result):
                yield event
        yield CONTINUE

    async def _recorded_call(
        self,
        call: ToolCall,
        tool: str,
        arguments: dict[str, Any],
        thinking: str,
        summary: str,
        approved_hash: str | None,
    ) -> AsyncIterator[Event | Outcome]:
        """A call that began in an earlier process: take its outcome from the log, never rerun it.

        ``approved_hash`` is set when the call ran after a recorded approval.
        """
        n, announce = self.state.counters.step, approved_hash is None
        while self.replay is not None and isinstance(note := self.replay.peek(), SignalEvent):
            yield self.emit(SignalEvent(code=note.code, level=note.level, message=note.message))
        recorded = self.replay.peek() if self.replay is not None else None
        match recorded:
            case ToolResultEvent(call_id=call_id) if call_id == call.id:
                result = ToolResult(recorded.output, is_error=recorded.status == "failed")
                self.toolset.replayed(tool, arguments, result, self.ctx)
                yield self._record(
                    call, tool, arguments, thinking, summary, result, recorded.duration_ms, n,
                    recorded.error_category,
                )  # fmt: skip
                async for item in self._after_call(call, tool, arguments, result):
                    yield item
            case ApprovalGateEvent():  # asked (again, if it was approved and interrupted before)
                request = ApprovalRequired(
                    tool=recorded.tool,
                    arguments=recorded.input,
                    call_hash=recorded.call_hash,
                    reason=recorded.reason,
                    suggestion=recorded.suggestion,
                    description=recorded.description,
                )
                yield Pause(self._approval(call, request, thinking, summary, deadline=recorded.deadline))
            case None if announce:
                # The process stopped while the tool ran: whatever it did may or may not have
                # happened. Running it again silently could repeat a side effect.
                yield self._record(
                    call, tool, arguments, thinking, summary, ToolResult(INTERRUPTED, is_error=True), 0.0, n,
                    "interrupted",
                )  # fmt: skip
                yield CONTINUE
            case None:
                # It was approved, then interrupted: the human decides again whether it runs.
                request = ApprovalRequired(
                    tool=tool,
                    arguments=arguments,
                    call_hash=approved_hash or "",
                    reason="it was approved, but the process stopped while it ran, so its outcome is "
                    "unknown; approve to run it again",
                    suggestion=None,
                )
                yield Pause(self._approval(call, request, thinking, summary))
            case _:
                raise ReplayError(
                    f"cannot rebuild the run: at seq {recorded.seq} the log has '{recorded.type}' "
                    f"where the result of call {call.id} belongs",
                    run_id=self.state.run_id,
                    status="diverged",
                )

    def _record(
        self,
        call: ToolCall,
        tool: str,
        arguments: dict[str, Any],
        thinking: str,
        summary: str,
        result: ToolResult,
        duration: float,
        n: int,
        category: str | None = None,
    ) -> Event:
        """Record a finished call everywhere it belongs; return its ``tool_result`` event."""
        st = self.state
        if result.is_error:
            category = category or sig.categorize_error(result.content)
        st.memory.add_step(
            Step(n, "act", thinking, summary, tool, arguments, result.content,
                 "failed" if result.is_error else "success", duration, call.id)
        )  # fmt: skip
        if result.is_error:
            st.memory.add_error(ErrorEntry(n, result.content, tool, category or "runtime"))
        st.counters.record_act(f"{tool} {compact_json(arguments)}", result.is_error, category)
        self._reply(call, result.content, error=result.is_error, observation=True)
        return self.emit(
            ToolResultEvent(
                step=n,
                call_id=call.id,
                tool=tool,
                status="failed" if result.is_error else "completed",
                output=result.content,
                duration_ms=round(duration, 3),
                error_category=category,
            )
        )

    # --- compression ---------------------------------------------------------------------

    def _compactable(self, tool: str, result: ToolResult) -> bool:
        from steward.rules.marks import split_rules

        limit = self.settings.compact_output_chars
        if not limit or len(result.content) <= limit or tool in self.settings.compact_skip_tools:
            return False
        return len(split_rules(result.content)[0]) > limit  # the rules appended do not count

    async def _compact_output(
        self, call: ToolCall, tool: str, arguments: dict[str, Any], result: ToolResult
    ) -> AsyncIterator[Event]:
        """Replace a large output in the transcript by the model's digest of it."""
        from steward.rules.marks import split_rules

        limit, size = self.settings.compact_output_chars, len(result.content)
        mem = self.state.memory
        current = mem.plan.get(mem.plan.current_sub_task) if mem.plan and mem.plan.current_sub_task else None
        body, rules = split_rules(result.content)  # nested rules are given once: kept verbatim
        compacted = await self._summary(
            "tool_output", call.id, body, limit=limit // 2,
            task=current.title if current else "", what=f"{tool} {compact_json(arguments)[:300]}",
        )  # fmt: skip
        if compacted is None:
            return
        text, event = compacted
        pointer = f'recall_output(call_id="{call.id}")'
        heading = f"[{tool} output of {size:,} chars, compacted by the model; {pointer} returns all of it]"
        self.state.transcript.replace_result(call.id, f"{heading}\n{text}{rules}")
        yield event

    async def _fold(self, kind: str, count: int) -> AsyncIterator[Event]:
        """Fold ``count`` transcript entries after the goal into a summary written by the model."""
        tr = self.state.transcript
        if count <= 0:
            return
        first = tr.start + 1
        turns = f"turns {tr.entries[first].turn}-{tr.entries[first + count - 1].turn}"
        budget = self.context.budget_chars
        # The summariser's own request must fit the budget too: long entries are cut shorter.
        cap = max(100, min(2_000, budget // 2 // count))
        compacted = await self._summary(
            kind, turns, tr.render(first, count, cap), limit=fold_summary_limit(budget),
            by_model=kind != "turns" or self.settings.summarize_turns,
        )  # fmt: skip
        if compacted is None:
            return
        text, event = compacted
        heading = (
            "[The previous attempt, summarised before re-planning; the plan, key facts and errors are in "
            "the working memory]"
            if kind == "attempt"
            else f"[Summary of earlier {turns} of this run, written to save context]"
        )
        tr.fold(count, f"{heading}\n{text}")
        yield event

    async def _summary(
        self,
        kind: str,
        ref: str,
        text: str,
        *,
        limit: int,
        task: str = "",
        what: str = "",
        by_model: bool = True,
    ) -> tuple[str, Event] | None:
        """A summary and its event: the recorded one while rebuilding, else the model's.

        Without ``by_model`` (summaries turned off) it is a mechanical excerpt, still recorded.
        """
        from steward.compression import excerpt, summarize

        if self.replay is not None:
            recorded = self.replay.peek()
            if not (isinstance(recorded, CompactionEvent) and recorded.kind == kind and recorded.ref == ref):
                return None  # the original run did not compress here; neither does its rebuild
            usage = Usage(**recorded.usage)
            written, by_model = recorded.text, recorded.by_model
        elif not by_model:
            written, usage = excerpt(text, limit), Usage()
        else:
            try:
                summary = await self._within_time(
                    lambda: summarize(
                        self.model, kind, text, goal=self.state.goal, limit=limit, task=task, what=what
                    )
                )
            except _OutOfTime:
                return None  # no time left to summarise: the text stays; the run ends at the next check
            written, usage, by_model = summary.text, summary.usage, summary.by_model
        self.state.usage.add(usage)
        compaction = CompactionEvent(
            kind=kind, ref=ref, chars_before=len(text), text=written, by_model=by_model, usage=usage.as_dict()
        )
        return written, self.emit(compaction)

    # --- the run's time limit ---------------------------------------------------------

    def _remaining(self) -> float | None:
        """Seconds the run may still spend running, or None when no limit applies.

        The clock runs only while the loop steps live: it starts at the first check after the
        run starts, resumes or is rebuilt, and stops when the run pauses or ends (``run``), so
        time waiting for a human is not counted. A rebuild from the log is never cut short.
        """
        if self.replay is not None:
            return None
        now = time.monotonic()
        if self._since is None:
            self._since = now
        limit = self.settings.run_timeout_s
        return limit - self.state.run_time_s - (now - self._since) if limit > 0 else None

    def _stop_clock(self) -> None:
        if self._since is not None:
            self.state.run_time_s += time.monotonic() - self._since
            self._since = None

    def _timed_out(self) -> bool:
        """Whether the run's time is up: by the clock when live; where the log says so when rebuilt."""
        if self.replay is not None:
            return _is_time_up(self.replay.peek())
        remaining = self._remaining()
        return remaining is not None and remaining <= 0

    def _time_up(self) -> tuple[Event, Finish]:
        """The signal and the ending of a run whose time is up."""
        limit = self.settings.run_timeout_s
        message = f"The run reached its time limit ({limit:g} s of running) and stops here."
        signal = self.emit(SignalEvent(code=RUN_TIMEOUT, level="warning", message=message))
        return signal, timeout_outcome(self.state, limit)

    async def _within_time(self, start: Callable[[], Awaitable[_T]]) -> _T:
        """Await what ``start`` begins; cancelled (``_OutOfTime``) when the run's time is up."""
        remaining = self._remaining()
        if remaining is None:
            return await start()
        if remaining <= 0:
            raise _OutOfTime  # not even started: nothing to cancel
        deadline = _timeout(remaining)
        try:
            async with deadline:
                return await start()
        except TimeoutError:
            if deadline.expired():
                raise _OutOfTime from None
            raise

    async def _next_piece(self, stream: AsyncIterator[StreamItem]) -> StreamItem | None:
        """The reply's next piece (None at its end), within the run's time."""
        return await self._within_time(lambda: anext(stream, None))

    def _shown(self, piece: StreamItem) -> Event | ModelResponse:
        """A piece of the reply as it is passed on: deltas as partial (live-only) events."""
        match piece:
            case TextDelta(text=text):
                return self.emit(TextEvent(text=text, partial=True))
            case ThinkingDelta(text=text):
                return self.emit(ThinkingEvent(text=text, partial=True))
            case ModelResponse():
                return piece
            case _:
                assert_never(piece)

    # --- approvals --------------------------------------------------------------------

    def _approval(
        self,
        call: ToolCall,
        request: ApprovalRequired,
        thinking: str,
        summary: str,
        *,
        deadline: float | None = None,
    ) -> Pending:
        s = self.settings
        approval = Approval(
            tool=request.tool,
            arguments=request.arguments,
            call_hash=request.call_hash,
            reason=request.reason,
            suggestion=request.suggestion,
            description=request.description,
            deadline=deadline if deadline is not None else time.time() + s.approval_timeout_s,
            default=s.approval_default,
            call=call,
            thinking=thinking,
            summary=summary,
        )
        question = f"Allow {request.tool} {compact_json(request.arguments)}? ({request.reason})"
        return Pending(
            f"a-{request.call_hash[:12]}-{self.state.seq}", "approval", question, call.id, approval
        )

    def resolve_approval(self, approved: bool, *, reason: str = "", by: str = "user") -> ApprovalResultEvent:
        """Answer the pending approval; past its deadline the default action applies instead."""
        st = self.state
        pending = st.pending
        if st.status != "waiting" or pending is None or pending.approval is None:
            raise RuntimeError(f"run {st.run_id} is {st.status}, not waiting for an approval")
        approval = pending.approval
        if time.time() > approval.deadline:
            approved, by = approval.default == "allow", "timeout"
            reason = reason or f"the approval expired; the default is to {approval.default}"
        return self.decide(approved, reason=reason, by=by)

    def decide(self, approved: bool, *, reason: str, by: str) -> ApprovalResultEvent:
        """Record the decision on the pending approval; the loop acts on it when run next."""
        st = self.state
        pending = st.pending
        assert pending is not None and pending.approval is not None
        approval = pending.approval
        decision = "approved" if approved else ("expired" if by == "timeout" else "denied")
        event = ApprovalResultEvent(
            id=pending.id, tool=approval.tool, decision=decision, by=by, reason=reason
        )
        self.emit(event)
        st.pending, st.status = None, "running"
        st.resume = Resume(approval, approved, reason, expired=by == "timeout", from_log=self._replayed)
        return event

    async def _resume(self) -> AsyncIterator[Event | Outcome]:
        """Carry out an answered approval, then go on as after any step."""
        resume, self.state.resume = self.state.resume, None
        assert resume is not None
        a = resume.approval
        if resume.approved:
            self.ctx.grants.add(a.call_hash)
            outcome: Outcome = CONTINUE
            async for item in self._act(
                a.call, a.tool, a.arguments, a.thinking, a.summary, announce=False,
                approved_from_log=a.call_hash if resume.from_log else None,
            ):  # fmt: skip
                if isinstance(item, Event):
                    yield item
                else:
                    outcome = item
            self.ctx.grants.discard(a.call_hash)
        else:
            why = f": {resume.reason}" if resume.reason else ""
            who = (
                "nobody approved this call before its deadline"
                if resume.expired
                else "the user denied this call"
            )
            denied = ToolResult(f"Not run: {who}{why}. Do not retry it; choose another way.", is_error=True)
            yield self._record(a.call, a.tool, a.arguments, a.thinking, a.summary, denied, 0.0,
                               self.state.counters.step, "permission")  # fmt: skip
            outcome = CONTINUE
        async for item in self._after_step(outcome):
            yield item

    async def _bad_call(self, call: ToolCall, message: str) -> AsyncIterator[Event | Outcome]:
        st, n = self.state, self.state.counters.step
        st.memory.add_error(ErrorEntry(n, message, call.name, "invalid_input"))
        if call.name == AGENT_STEP:  # a malformed step is not an action: no tool ran
            st.counters.record_non_act("invalid")
            st.counters.errors_by_category["invalid_input"] += 1
        else:
            st.counters.record_act(f"{call.name} {compact_json(dict(call.arguments))}", True, "invalid_input")
        self._reply(call, message, error=True)
        yield self.emit(ErrorEvent(code="invalid_tool_call", message=message, recoverable=True))
        yield CONTINUE

    def _reply(self, call: ToolCall, content: str, *, error: bool = False, observation: bool = False) -> None:
        result = ToolResultMessage(call.id, call.name, content, error)
        self.state.transcript.add_tool_result(result, observation=observation)

    def answer(self, text: str) -> Event:
        """Resume a paused run: the human's answer becomes the result of the feedback step."""
        st = self.state
        if st.status != "waiting" or st.pending is None:
            raise RuntimeError(f"run {st.run_id} is {st.status}, not waiting for an answer")
        event = self.emit(AnswerEvent(id=st.pending.id, answer=text))
        pending, st.pending, st.status = st.pending, None, "running"
        # The answer also becomes a key fact, so it survives any trimming of the transcript.
        st.memory.add_key_facts(
            [Fact(f"User answered {pending.question!r}: {text}", st.counters.step, "user")]
        )
        content = json.dumps({"user_answer": text}, ensure_ascii=False)
        st.transcript.add_tool_result(
            ToolResultMessage(pending.call_id, AGENT_STEP, content), observation=False
        )
        return event


# asyncio is imported on first use, not with the module: `import steward` stays fast.
async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def _timeout(seconds: float) -> asyncio.Timeout:
    import asyncio

    return asyncio.timeout(seconds)


async def _aclose(stream: AsyncIterator[StreamItem]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


_T = TypeVar("_T")

RUN_TIMEOUT = "run_timeout"
"""The code of the signal a run emits when its time limit (``run_timeout_s``) ends it."""


class _OutOfTime(Exception):  # noqa: N818 - control flow inside the loop, never raised past it
    """The run's time limit cut an await short."""


def _is_time_up(event: Event | None) -> bool:
    return isinstance(event, SignalEvent) and event.code == RUN_TIMEOUT


INTERRUPTED = (
    "Interrupted: the process running this call stopped before the call finished, so its outcome "
    "is unknown: it may have done all, some or none of its work. Check the state (read the files, "
    "run a read-only command) before doing it again."
)


def _gate_event(pending_id: str, a: Approval) -> Event:
    return ApprovalGateEvent(
        id=pending_id,
        tool=a.tool,
        input=a.arguments,
        reason=a.reason,
        deadline=a.deadline,
        default=a.default,
        suggestion=a.suggestion,
        call_hash=a.call_hash,
        description=a.description,
    )


def _reply_event(step: int, message: AssistantMessage, usage: Usage) -> ModelReplyEvent:
    calls = [
        {"id": c.id, "name": c.name, "arguments": dict(c.arguments), "arguments_error": c.arguments_error}
        for c in message.tool_calls
    ]
    thinking = [{"text": t.text, "signature": t.signature} for t in message.thinking]
    return ModelReplyEvent(
        step=step, text=message.text, tool_calls=calls, thinking=thinking, usage=usage.as_dict()
    )


def _response_from(event: ModelReplyEvent) -> ModelResponse:
    calls = tuple(
        ToolCall(c["id"], c["name"], c.get("arguments") or {}, c.get("arguments_error"))
        for c in event.tool_calls
    )
    thinking = tuple(Thinking(t.get("text", ""), t.get("signature")) for t in event.thinking)
    return ModelResponse(AssistantMessage(event.text, calls, thinking), Usage(**event.usage))


def _attempt_failed(mem: WorkingMemory) -> bool:
    """Whether a new plan replaces one whose attempt failed (an open error or a failed sub-task)."""
    if mem.plan is None:
        return False
    return mem.last_unresolved_error() is not None or any(t.status == "failed" for t in mem.plan.sub_tasks)


def _with_unique_ids(message: AssistantMessage, seen: set[str], step: int) -> AssistantMessage:
    """Give every call an id unique in the run (some servers send none, or repeat them)."""
    calls = []
    changed = False
    for n, given in enumerate(message.tool_calls, start=1):
        call = given
        if not call.id or call.id in seen:
            call_id = f"call_{step}_{n}"
            while call_id in seen:
                call_id += "x"
            call = ToolCall(call_id, given.name, given.arguments, given.arguments_error)
            changed = True
        seen.add(call.id)
        calls.append(call)
    if not changed:
        return message
    return AssistantMessage(text=message.text, tool_calls=tuple(calls), thinking=message.thinking)


def _full_text_events(message: AssistantMessage) -> list[Event]:
    events: list[Event] = [ThinkingEvent(text=t.text) for t in message.thinking if t.text]
    if message.text:
        events.append(TextEvent(text=message.text))
    return events
