"""A run's log read as an OpenAI chat conversation: what the model was sent and what it replied.

The loop's transcript is a view of the log (``steward.loop``): each ``model_reply`` is an
assistant turn, and each of its tool calls is answered by what the log says happened to it (a
``tool_result``, an ``error`` the model had to fix, a human's ``answer``, or the
acknowledgement of an ``agent_step`` phase, computed again here as the loop computed it). User
turns are the goal and what the run told the model on its own (an unfinished answer sent back,
"are you done?", a budget's warning to wrap up). Tool outputs are the full ones: what context
compaction cut stays in the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from steward.budget.guard import BUDGET_WARNING
from steward.continuation import VERIFY_TOOL
from steward.ending import UNFINISHED_ANSWER
from steward.events import (
    AnswerEvent,
    ContinuationEvent,
    ErrorEvent,
    Event,
    ModelReplyEvent,
    SignalEvent,
    ToolResultEvent,
)
from steward.memory.working import ErrorEntry, Step, WorkingMemory, record_phase
from steward.phases import AGENT_STEP, PHASES, AgentStep, StepInputError, parse_agent_step
from steward.text import compact_json

Message = dict[str, Any]

#: What a call reads when the log holds no result for it: a later call in a reply that ended or
#: paused the run (the loop's own words), or a run that stopped before the call ran.
NOT_RUN = "Not run: an earlier call in the same reply ended or paused the run."
_SELF_STEP = "action.tool_name cannot be agent_step; name the tool to run."


@dataclass(slots=True)
class Conversation:
    """The messages of one run, with the phase of each (None for what is not the model's)."""

    messages: list[Message] = field(default_factory=list)
    phases: list[str | None] = field(default_factory=list)

    def add(self, message: Message, phase: str | None = None) -> None:
        self.messages.append(message)
        self.phases.append(phase)

    def without_closing_ack(self) -> None:
        """Drop what answers the final ``end`` step (its acknowledgement): nothing read it."""
        last = max((n for n, phase in enumerate(self.phases) if phase is not None), default=-1)
        if last >= 0 and self.phases[last] == "end" and self.messages[last].get("tool_calls"):
            del self.messages[last + 1 :], self.phases[last + 1 :]


def conversation(system: str, goal: str, events: Sequence[Event], *, thinking: bool = False) -> Conversation:
    """The run's chat: the system prompt (if recorded), the goal, then its turns in order.
    ``thinking``: each assistant turn's reasoning as ``reasoning_content`` (the key Qwen3's and
    other open models' chat templates read; OpenAI's fine-tuning upload does not take it)."""
    chat = Conversation()
    if system:
        chat.add({"role": "system", "content": system})
    chat.add({"role": "user", "content": goal})
    fold = _Fold(run_id=events[0].run_id if events else "", thinking=thinking)
    replies = [n for n, event in enumerate(events) if isinstance(event, ModelReplyEvent)]
    for at, event in enumerate(events):
        match event:
            case ModelReplyEvent():
                nxt = next((n for n in replies if n > at), len(events))
                fold.reply(chat, event, events[at + 1 : nxt])
            case SignalEvent(code=code, message=message) if code in (UNFINISHED_ANSWER, BUDGET_WARNING):
                chat.add({"role": "user", "content": message})
            case ContinuationEvent(asked=True, message=message):
                chat.add({"role": "user", "content": message})
            case ErrorEvent(code="invalid_answer", message=message) if fold.plain_answer_pending(event):
                chat.add({"role": "user", "content": message})
            case _:
                pass
    return chat


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """Tool-call arguments as OpenAI sends and fine-tuning expects them: one JSON string."""
    return json.dumps(dict(arguments), ensure_ascii=False, separators=(",", ":"))


@dataclass(slots=True)
class _Fold:
    """The working memory as the loop kept it (the phases' acknowledgements are read from it)."""

    run_id: str
    thinking: bool = False
    memory: WorkingMemory = field(init=False)
    #: The error event that answers an end call (its answer did not match the output schema).
    _answered: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.memory = WorkingMemory(self.run_id)

    def plain_answer_pending(self, event: ErrorEvent) -> bool:
        """Whether ``event`` went to the model as a user turn (a plain answer's rejection)."""
        return id(event) not in self._answered

    def reply(self, chat: Conversation, reply: ModelReplyEvent, after: Sequence[Event]) -> None:
        if not reply.text and not reply.tool_calls:
            return  # an empty reply is not sent back (the loop nudges with text no event keeps)
        calls = [c for c in reply.tool_calls if isinstance(c, Mapping)]
        message: Message = {"role": "assistant", "content": reply.text}
        reasoning = "\n\n".join(str(t.get("text", "")) for t in reply.thinking if isinstance(t, Mapping))
        if self.thinking and reasoning.strip():
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = [
                {
                    "id": str(c.get("id", "")),
                    "type": "function",
                    "function": {"name": str(c.get("name", "")), "arguments": arguments_json(_args(c))},
                }
                for c in calls
            ]
        chat.add(message, _phase(calls))
        results = _Results(after)
        for call in calls:
            content = self._result(reply.step, call, results)
            chat.add({"role": "tool", "tool_call_id": str(call.get("id", "")), "content": content})

    def _result(self, n: int, call: Mapping[str, Any], results: _Results) -> str:
        call_id, name = str(call.get("id", "")), str(call.get("name", ""))
        if call.get("arguments_error") is not None or name != AGENT_STEP:
            return self._acted(n, call_id, name, _args(call), results)
        try:
            step = parse_agent_step(_args(call))
        except StepInputError:
            return self._bad_call(n, name, results)
        return self._phase_result(n, call_id, step, results)

    def _phase_result(self, n: int, call_id: str, step: AgentStep, results: _Results) -> str:
        match step.phase:
            case "act":
                assert step.action is not None
                if step.action.tool_name == AGENT_STEP:
                    return _SELF_STEP
                return self._acted(n, call_id, step.action.tool_name, step.action.tool_input, results)
            case "feedback":
                answer = results.answer()
                return NOT_RUN if answer is None else json.dumps({"user_answer": answer}, ensure_ascii=False)
            case "end":
                rejected = results.error("invalid_answer")
                if rejected is not None:
                    self._answered.add(id(rejected))
                    return rejected.message
                return compact_json({"acknowledged": True, "end_status": step.end_status})
            case "plan" | "reason" | "verify" | "reflect":
                ack, _ = record_phase(self.memory, step, n)
                self.memory.add_step(Step(n, step.phase, step.thinking, step.summary))
                return compact_json(ack)

    def _acted(self, n: int, call_id: str, tool: str, arguments: dict[str, Any], results: _Results) -> str:
        result = results.tool(call_id)
        if result is None:
            bad = results.error("invalid_tool_call")
            return self._bad_call(n, tool, results, bad) if bad is not None else NOT_RUN
        failed = result.status == "failed"
        self.memory.add_step(
            Step(n, "act", "", "", tool, arguments, result.output, "failed" if failed else "success",
                 result.duration_ms, call_id)
        )  # fmt: skip
        if failed:
            self.memory.add_error(ErrorEntry(n, result.output, tool, result.error_category or "runtime"))
        return result.output

    def _bad_call(self, n: int, tool: str, results: _Results, found: ErrorEvent | None = None) -> str:
        bad = found if found is not None else results.error("invalid_tool_call")
        message = bad.message if bad is not None else NOT_RUN
        self.memory.add_error(ErrorEntry(n, message, tool, "invalid_input"))
        return message


class _Results:
    """The events between one reply and the next: each taken once, in order."""

    def __init__(self, events: Sequence[Event]) -> None:
        self._events = list(events)
        self._taken: set[int] = set()

    def _take(self, wanted: type[Event], match: Callable[[Any], bool] | None = None) -> Event | None:
        for n, event in enumerate(self._events):
            if n not in self._taken and isinstance(event, wanted) and (match is None or match(event)):
                self._taken.add(n)
                return event
        return None

    def tool(self, call_id: str) -> ToolResultEvent | None:
        found = self._take(ToolResultEvent, lambda e: e.call_id == call_id and e.tool != VERIFY_TOOL)
        return found if isinstance(found, ToolResultEvent) else None

    def error(self, code: str) -> ErrorEvent | None:
        found = self._take(ErrorEvent, lambda e: e.code == code)
        return found if isinstance(found, ErrorEvent) else None

    def answer(self) -> str | None:
        found = self._take(AnswerEvent)
        return found.answer if isinstance(found, AnswerEvent) else None


def _args(call: Mapping[str, Any]) -> dict[str, Any]:
    given = call.get("arguments")
    return dict(given) if isinstance(given, Mapping) else {}


def _phase(calls: Sequence[Mapping[str, Any]]) -> str:
    """The phase of an assistant turn: its first ``agent_step``'s (``invalid`` for a malformed
    one), ``act`` for direct tool calls, ``end`` for a reply in plain text (an answer)."""
    for call in calls:
        if call.get("name") == AGENT_STEP:
            phase = _args(call).get("phase")
            named = phase.strip().lower() if isinstance(phase, str) else ""
            return named if named in PHASES else "invalid"  # a malformed step, sent back to be fixed
    return "act" if calls else "end"
