"""What one run is made of, apart from the loop that drives it.

The closed set of step outcomes, what a paused run waits for, the loop's settings, and the
run's state (working memory, transcript, counters, usage, status). The loop in ``loop.py``
changes this state; events record how it changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from steward import ending
from steward import signals as sig
from steward.answers import check_answer
from steward.errors import ApprovalRequired, ConfigError
from steward.events import (
    AnswerEvent,
    ApprovalGateEvent,
    ApprovalResultEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    SignalEvent,
    ToolResultEvent,
    WaitingEvent,
)
from steward.memory.transcript import Transcript
from steward.memory.working import ErrorEntry, Step, WorkingMemory
from steward.models.base import ToolCall, ToolResultMessage, Usage
from steward.offered import OfferedLater
from steward.phases import AGENT_STEP, EndStatus
from steward.text import compact_json
from steward.tools._code_calls import ProgramPaused
from steward.tools.base import NestedCall, ToolResult

# --- outcomes -------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Continue:
    """Go on with the next call in this reply, or the next step."""


@dataclass(slots=True, frozen=True)
class Finish:
    end_status: RunEnd  # defined below, with the outcomes (annotations are lazy)
    message: str


@dataclass(slots=True, frozen=True)
class Pause:
    pending: Pending


@dataclass(slots=True, frozen=True)
class Fail:
    code: str
    message: str


Outcome = Continue | Finish | Pause | Fail
CONTINUE = Continue()

#: How a finished run ended: the agent's own ``end`` statuses, or ``answered`` (a plain-text
#: reply, with nothing saying the work was unfinished: ``steward.ending``). ``answered`` is not
#: offered to the model.
RunEnd = EndStatus | Literal["answered"]


@dataclass(slots=True, frozen=True)
class Approval:
    """A call that waits for a human: bound to its exact arguments by ``call_hash``."""

    tool: str
    arguments: dict[str, Any]
    call_hash: str
    reason: str
    suggestion: str | None
    deadline: float
    default: Literal["deny", "allow"]
    call: ToolCall
    thinking: str
    summary: str
    description: str = ""
    waits_for: str = ""  # a job the call waits for (a delegation), not a person
    #: For a program's call (``execute_code``): the program's arguments, and its calls before this one.
    program: dict[str, Any] | None = None
    earlier: tuple[NestedCall, ...] = ()


@dataclass(slots=True, frozen=True)
class Pending:
    """What the run waits for: a human's answer or approval, or (``job``) a job it delegated to."""

    id: str
    kind: Literal["question", "approval", "job"]
    question: str
    call_id: str
    approval: Approval | None = None

    def events(self) -> list[Event]:
        """What announces the wait: the approval gate (for an approval), then ``waiting``."""
        gate: list[Event] = [gate_event(self.id, self.approval)] if self.approval is not None else []
        return [*gate, WaitingEvent(kind=self.kind, id=self.id, question=self.question)]


@dataclass(slots=True, frozen=True)
class Resume:
    """How a human answered an approval; the loop acts on it before the next model call."""

    approval: Approval
    approved: bool
    reason: str
    expired: bool = False

    def refusal(self) -> ToolResult:
        """What the model reads for a call that was denied, or whose approval expired."""
        why = f": {self.reason}" if self.reason else ""
        who = "nobody approved this call before its deadline" if self.expired else "the user denied this call"
        text = f"Not run: {who}{why}. Do not retry it; choose another way."
        return ToolResult(text, is_error=True, category="permission", duration_ms=0.0)


@dataclass(slots=True)
class LoopSettings:
    max_steps: int = 50
    max_output_tokens: int | None = 8_192
    """Most tokens one reply may hold, sent with every step's request (None: the provider's default)."""
    repeat_warning: int = 3
    repeat_stop: int = 6
    tool_timeout_s: float = 600.0
    max_empty_replies: int = 3
    model_retries: int = 2
    """Extra attempts after a retryable model failure the provider's own retries did not cover
    (an error inside an already-started stream, a stalled stream)."""
    model_retry_backoff_s: float = 2.0
    approval_timeout_s: float = 600.0
    approval_default: Literal["deny", "allow"] = "deny"
    compact_output_chars: int = 4_000  # 0: never
    compact_skip_tools: frozenset[str] = frozenset({"recall_output", "read_file"})
    summarize_turns: bool = True
    summarize_failed_attempts: bool = True
    run_timeout_s: float = 0.0
    """Seconds the run may spend running (time waiting for a human not counted); 0: no limit."""
    output_schema: Mapping[str, Any] | None = None
    """The JSON Schema a solved run's answer must match (``steward.answers``); None: any text."""
    max_invalid_answers: int = 3
    """Answers in a row that do not match ``output_schema`` before the run fails."""


@dataclass(slots=True)
class RunState:
    """Everything one run knows; the events are a log of how it got here."""

    run_id: str
    goal: str
    workspace: Path
    memory: WorkingMemory
    transcript: Transcript = field(default_factory=Transcript)
    counters: sig.LoopCounters = field(default_factory=sig.LoopCounters)
    usage: Usage = field(default_factory=Usage)
    #: Prices each model call as the run takes it, for its event (the run's budget sets it:
    #: ``steward.budget``); None: the events carry no cost, and a reader prices their usage.
    price: Callable[[Usage], float | None] | None = None
    status: str = "running"  # running | waiting | done | failed | cancelled
    end_status: RunEnd | None = None
    output: str = ""
    pending: Pending | None = None
    seq: int = 0
    session_id: str | None = None
    raised: frozenset[str] = frozenset()
    empty_replies: int = 0
    call_ids: set[str] = field(default_factory=set)
    resume: Resume | None = None
    #: Seconds spent running in this process so far, up to the last pause (the loop's clock).
    run_time_s: float = 0.0
    #: Final answers rejected by the output schema since a tool last ran.
    invalid_answers: int = 0
    #: Plain-text replies sent back since a tool call last succeeded, because the work was not
    #: done (``steward.ending``).
    unfinished_answers: int = 0
    #: The tools offered after the first request, for the closing event (``steward.offered``).
    offered: OfferedLater = field(default_factory=OfferedLater)

    # --- what a step leaves behind (the loop decides; these record) ---

    def finish(self, status: str, end_status: RunEnd | None, message: str) -> DoneEvent:
        """The run ends (done, failed or cancelled); its closing event."""
        self.status, self.end_status, self.output = status, end_status, message
        c = self.counters
        return DoneEvent(status=status, end_status=end_status, message=message, steps=c.step,
                         tool_calls=c.tool_calls, usage=self.usage.as_dict(),
                         offered=self.offered.tools())  # fmt: skip

    def reply(self, call: ToolCall, content: str, *, error: bool = False, observation: bool = False) -> None:
        """The result the model reads for ``call``."""
        result = ToolResultMessage(call.id, call.name, content, error)
        self.transcript.add_tool_result(result, observation=observation)

    def record_call(
        self, call: ToolCall, tool: str, arguments: dict[str, Any], thinking: str, summary: str,
        result: ToolResult, duration: float,
    ) -> ToolResultEvent:  # fmt: skip
        """Record a finished call everywhere it belongs; its ``tool_result`` event."""
        n = self.counters.step
        self.invalid_answers = 0  # work done since: the next answers count afresh
        if not result.is_error:
            self.unfinished_answers = 0
        category = (result.category or sig.categorize_error(result.content)) if result.is_error else None
        status: Literal["success", "failed"] = "failed" if result.is_error else "success"
        self.memory.add_step(
            Step(n, "act", thinking, summary, tool, arguments, result.content, status, duration, call.id)
        )
        if result.is_error:
            self.memory.add_error(ErrorEntry(n, result.content, tool, category or "runtime"))
        self.counters.record_act(f"{tool} {compact_json(arguments)}", result.is_error, category)
        self.reply(call, result.content, error=result.is_error, observation=True)
        return ToolResultEvent(
            step=n, call_id=call.id, tool=tool, status="failed" if result.is_error else "completed",
            output=result.content, duration_ms=round(duration, 3), error_category=category,
        )  # fmt: skip

    def record_bad_call(self, call: ToolCall, message: str) -> ErrorEvent:
        """A call the model must fix (bad arguments, a malformed step); its ``error`` event."""
        n = self.counters.step
        self.memory.add_error(ErrorEntry(n, message, call.name, "invalid_input"))
        if call.name == AGENT_STEP:  # a malformed step is not an action: no tool ran
            self.counters.record_non_act("invalid")
            self.counters.errors_by_category["invalid_input"] += 1
        else:
            self.counters.record_act(
                f"{call.name} {compact_json(dict(call.arguments))}", True, "invalid_input"
            )
        self.reply(call, message, error=True)
        return ErrorEvent(code="invalid_tool_call", message=message, recoverable=True)

    def signals(self, repeat_threshold: int) -> list[sig.Signal]:
        return sig.compute(
            self.counters,
            repeat_threshold=repeat_threshold,
            failed_sub_task=self.memory.failed_current_sub_task(),
        )

    def new_warnings(self, repeat_threshold: int) -> list[SignalEvent]:
        """The warnings that appeared with this step (each is announced once, when it first shows)."""
        warnings = {s.code: s for s in self.signals(repeat_threshold) if s.level == "warning"}
        new = [SignalEvent(code=s.code, level=s.level, message=s.message) for c, s in warnings.items()
               if c not in self.raised]  # fmt: skip
        self.raised = frozenset(warnings)
        return new


def plain_answer(st: RunState, settings: LoopSettings, text: str) -> tuple[list[Event], Outcome]:
    """How a reply in plain text (no tool call) ends the run, or why it does not (``steward.ending``).

    Nothing saying the work is unfinished, it ends the run ``answered``; with an output schema
    a matching answer ends it ``solved`` (the schema says what a finished answer is). Otherwise
    the reply is sent back once with a nudge, and the next one ends the run ``partial``.
    """
    plan, c = st.memory.plan, st.counters
    open_tasks = [(t.id, t.title) for t in plan.sub_tasks if t.status != "done"] if plan is not None else []
    why = ending.unfinished(
        open_tasks, acted=c.tool_calls > c.failed_tool_calls, goal=st.goal,
        typed=settings.output_schema is not None,
    )  # fmt: skip
    if why is not None:
        st.unfinished_answers += 1
        if st.unfinished_answers >= ending.MAX_UNFINISHED_ANSWERS:
            return [], Finish("partial", f"{text}\n\n{progress_report(st)}")
        st.transcript.add_user(why)
        return [SignalEvent(code=ending.UNFINISHED_ANSWER, level="warning", message=why)], CONTINUE
    if settings.output_schema is not None:
        return final_answer(st, settings, "solved", text)
    return [], Finish("answered", text)


def final_answer(
    st: RunState, settings: LoopSettings, status: EndStatus, text: str, call: ToolCall | None = None,
    thinking: str = "",
) -> tuple[list[Event], Outcome]:  # fmt: skip
    """How a final answer ends the run (``call``: the agent_step end; None: a plain text reply
    that ``plain_answer`` let through).

    With an output schema a solved run's answer must be JSON matching it, and that JSON is the
    output; an answer that does not match goes back to the model to fix, and after
    ``max_invalid_answers`` in a row the run fails.
    """
    answer = text
    if settings.output_schema is not None and status == "solved":
        try:
            value, problem = check_answer(text, settings.output_schema)
        except ConfigError as exc:
            return [], Fail("config_error", str(exc))
        if value is None:
            return _rejected(st, settings, problem or "", call)
        answer = value
    if call is not None:
        st.memory.add_step(Step(st.counters.step, "end", thinking, text))
        st.reply(call, compact_json({"acknowledged": True, "end_status": status}))
    return [], Finish(status, answer)


def _rejected(
    st: RunState, settings: LoopSettings, problem: str, call: ToolCall | None
) -> tuple[list[Event], Outcome]:
    st.invalid_answers += 1
    again = "call agent_step end again with it as end_message" if call else "reply with only that JSON"
    message = (
        f"Your final answer does not match the required output schema: {problem}. The answer must be "
        f"JSON (alone, or in one ```json block) matching the JSON Schema in your instructions: fix it and "
        f"{again}."
    )
    if call is not None:
        st.reply(call, message, error=True)
    else:
        st.transcript.add_user(message)
    if st.invalid_answers >= settings.max_invalid_answers:
        return [], Fail(
            "invalid_answer",
            f"The final answer did not match the output schema {st.invalid_answers} times in a row "
            f"(the last: {problem}). Check that the schema can be met, and say in the goal what the "
            "answer must hold.",
        )
    return [ErrorEvent(code="invalid_answer", message=message, recoverable=True)], CONTINUE


def pending_approval(
    request: ApprovalRequired, call: ToolCall, thinking: str, summary: str, settings: LoopSettings, seq: int
) -> Pending:
    """What the run waits for when a call needs a human's approval."""
    approval = Approval(
        tool=request.tool,
        arguments=request.arguments,
        call_hash=request.call_hash,
        reason=request.reason,
        suggestion=request.suggestion,
        description=request.description,
        deadline=request.deadline
        if request.deadline is not None
        else time.time() + settings.approval_timeout_s,
        default=settings.approval_default,
        call=call,
        thinking=thinking,
        summary=summary,
        waits_for=request.waits_for,
        program=request.program if isinstance(request, ProgramPaused) else None,
        earlier=request.earlier if isinstance(request, ProgramPaused) else (),
    )
    if request.waits_for:
        return Pending(f"j-{request.waits_for}-{seq}", "job", request.reason, call.id, approval)
    question = f"Allow {request.tool} {compact_json(request.arguments)}? ({request.reason})"
    return Pending(f"a-{request.call_hash[:12]}-{seq}", "approval", question, call.id, approval)


def gate_event(pending_id: str, a: Approval) -> ApprovalGateEvent:
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
        waits_for=a.waits_for,
    )


def time_up(st: RunState, limit_s: float) -> tuple[SignalEvent, Finish]:
    """The signal and the ending of a run whose time is up."""
    from steward.clock import RUN_TIMEOUT

    message = f"The run reached its time limit ({limit_s:g} s of running) and stops here."
    return SignalEvent(code=RUN_TIMEOUT, level="warning", message=message), timeout_outcome(st, limit_s)


def limit_outcome(st: RunState) -> Finish:
    c = st.counters
    progressed = (c.tool_calls - c.failed_tool_calls) > 0 or (
        st.memory.plan is not None and any(t.status == "done" for t in st.memory.plan.sub_tasks)
    )
    return Finish(
        "partial" if progressed else "stuck",
        f"Stopped at the step limit ({c.max_steps} steps). " + progress_report(st),
    )


def timeout_outcome(st: RunState, limit_s: float) -> Finish:
    """How a run ends at its time limit: partial, whatever it did, with what is done and not."""
    # Not "stuck" even without progress: the run was cut off, not found going in circles.
    return Finish(
        "partial", f"Stopped at the run's time limit ({limit_s:g} s of running). " + progress_report(st)
    )


def progress_report(st: RunState) -> str:
    plan, c = st.memory.plan, st.counters
    if plan is not None:
        done = [f"{t.id} {t.title}" for t in plan.sub_tasks if t.status == "done"]
        open_ = [f"{t.id} {t.title}" for t in plan.sub_tasks if t.status != "done"]
        return f"Done: {'; '.join(done) or 'nothing'}. Not done: {'; '.join(open_) or 'nothing'}."
    last = next((s.summary for s in reversed(st.memory.steps) if s.summary), "")
    unresolved = st.memory.unresolved()
    return (
        f"Made {c.tool_calls:,} tool call{'' if c.tool_calls == 1 else 's'} ({c.failed_tool_calls:,} failed, "
        f"{unresolved} error{'' if unresolved == 1 else 's'} unresolved). "
        f"Last step: {last or '(none)'}. The goal was not confirmed as reached: {st.goal}"
    )


# --- a human's answers ---------------------------------------------------------------------


def resolve_approval(
    st: RunState, approved: bool, *, reason: str = "", by: str = "user"
) -> ApprovalResultEvent:
    """The decision on the pending approval; past its deadline the default action applies instead."""
    pending = st.pending
    if st.status != "waiting" or pending is None or pending.approval is None:
        raise RuntimeError(f"run {st.run_id} is {st.status}, not waiting for an approval")
    approval = pending.approval
    if time.time() > approval.deadline:
        approved, by = approval.default == "allow", "timeout"
        reason = reason or f"the approval expired; the default is to {approval.default}"
    return decide(st, approved, reason=reason, by=by)


def decide(st: RunState, approved: bool, *, reason: str, by: str) -> ApprovalResultEvent:
    """Record the decision on the pending approval (the loop acts on it when run next); its event."""
    pending = st.pending
    assert pending is not None and pending.approval is not None
    approval = pending.approval
    decision = "approved" if approved else ("expired" if by == "timeout" else "denied")
    st.pending, st.status = None, "running"
    st.resume = Resume(approval, approved, reason, expired=by == "timeout")
    return ApprovalResultEvent(id=pending.id, tool=approval.tool, decision=decision, by=by, reason=reason)


def answer(st: RunState, text: str) -> AnswerEvent:
    """The human's answer to the pending question becomes the result of the feedback step."""
    import json

    from steward.memory.working import Fact

    if st.status != "waiting" or st.pending is None:
        raise RuntimeError(f"run {st.run_id} is {st.status}, not waiting for an answer")
    pending, st.pending, st.status = st.pending, None, "running"
    # The answer also becomes a key fact, so it survives any trimming of the transcript.
    st.memory.add_key_facts([Fact(f"User answered {pending.question!r}: {text}", st.counters.step, "user")])
    content = json.dumps({"user_answer": text}, ensure_ascii=False)
    st.transcript.add_tool_result(ToolResultMessage(pending.call_id, AGENT_STEP, content), observation=False)
    return AnswerEvent(id=pending.id, answer=text)


class ModeSource(Protocol):
    def take(self) -> str | None:
        """The policy mode the run switches to at this step (now in force), or None."""


class _NoSwitch:
    def take(self) -> str | None:
        return None


NO_SWITCH: ModeSource = _NoSwitch()
