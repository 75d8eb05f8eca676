"""Typed run events and their one JSON encoding.

Every consumer (the ``--json`` NDJSON stream, ``steward stdio``, the terminal renderer,
later the store and SSE) reads the same events. On the wire an event is::

    {"seq": 3, "run_id": "...", "session_id": null, "ts": 1700000000.123,
     "type": "tool_result", "data": {...the event's own fields...}}

Names follow seed 001 where they fit (``thinking``, ``text``, ``tool_use``,
``tool_result``, ``error``, ``done``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(slots=True, kw_only=True)
class Event:
    """Envelope shared by every event; ``seq`` is gap-free within a run, from 1."""

    type: ClassVar[str] = "event"
    seq: int = 0
    run_id: str = ""
    session_id: str | None = None
    ts: float = 0.0

    def data(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _data_fields(type(self))}

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "ts": round(self.ts, 6),
            "type": self.type,
            "data": self.data(),
        }


_ENVELOPE = frozenset({"seq", "run_id", "session_id", "ts"})
_FIELDS: dict[type[Event], tuple[str, ...]] = {}


def _data_fields(cls: type[Event]) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls) if f.name not in _ENVELOPE)
        _FIELDS[cls] = names
    return names


@dataclass(slots=True)
class RunStart(Event):
    type: ClassVar[str] = "run_start"
    goal: str
    model: str
    workspace: str
    max_steps: int
    persona: str = ""  # the persona the run was started as ("": none); it goes on as the same
    #: The JSON Schema its answer must match (``steward.answers``); None: any text. Resumed with it.
    output_schema: dict[str, Any] | None = None
    #: The rules it started under (``steward.run_rules``); whoever continues it keeps them.
    policy: dict[str, Any] | None = None
    #: The fixed part of its system prompt and the tools offered at its start (OpenAI's ``tools``
    #: shape; None: not recorded), so its log reads back as training data (``steward.trajectories``).
    system: str = ""
    tools: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class StepStart(Event):
    """A model call begins (seed 001's ``iteration``)."""

    type: ClassVar[str] = "step"
    step: int
    max_steps: int


@dataclass(slots=True)
class ThinkingEvent(Event):
    type: ClassVar[str] = "thinking"
    text: str
    partial: bool = False


@dataclass(slots=True)
class TextEvent(Event):
    type: ClassVar[str] = "text"
    text: str
    partial: bool = False


@dataclass(slots=True)
class ModelReplyEvent(Event):
    """The model's whole reply to one request, as it goes into the transcript.

    It is what a rebuilt run takes instead of asking the model again: the text, every tool
    call with its id and arguments, thinking with the provider's signatures, and the usage,
    with what it cost then.
    """

    type: ClassVar[str] = "model_reply"
    step: int
    text: str
    tool_calls: list[dict[str, Any]]
    thinking: list[dict[str, Any]]
    usage: dict[str, int]
    #: What it cost in US dollars at the prices of its time (None: no price was known for the
    #: model). Read only when ``priced``: a reply recorded before replies carried their cost (or
    #: by a run that kept no account of it) has ``priced`` False, and a reader prices its usage.
    cost_usd: float | None = None
    priced: bool = False


@dataclass(slots=True)
class PhaseEvent(Event):
    type: ClassVar[str] = "phase"
    step: int
    phase: str
    summary: str


@dataclass(slots=True)
class PlanEvent(Event):
    type: ClassVar[str] = "plan"
    version: int
    goal: str
    sub_tasks: list[dict[str, Any]]
    current: int | None


@dataclass(slots=True)
class KeyFactEvent(Event):
    type: ClassVar[str] = "key_fact"
    fact: str
    source_step: int
    source_tool: str | None = None


@dataclass(slots=True)
class ToolUse(Event):
    type: ClassVar[str] = "tool_use"
    step: int
    call_id: str
    tool: str
    input: dict[str, Any]


@dataclass(slots=True)
class ToolResultEvent(Event):
    type: ClassVar[str] = "tool_result"
    step: int
    call_id: str
    tool: str
    status: str  # "completed" | "failed"
    output: str
    duration_ms: float
    error_category: str | None = None


@dataclass(slots=True)
class SignalEvent(Event):
    type: ClassVar[str] = "signal"
    code: str
    level: str  # "info" | "warning"
    message: str


@dataclass(slots=True)
class ErrorEvent(Event):
    type: ClassVar[str] = "error"
    code: str
    message: str
    recoverable: bool


@dataclass(slots=True)
class WaitingEvent(Event):
    type: ClassVar[str] = "waiting"
    kind: str  # "question", "approval", or "job" (a delegated job has not ended yet)
    id: str
    question: str


@dataclass(slots=True)
class ApprovalGateEvent(Event):
    """A call waits for a human (seed 001's ``approval_gate``)."""

    type: ClassVar[str] = "approval_gate"
    id: str
    tool: str
    input: dict[str, Any]
    reason: str
    deadline: float
    default: str  # "deny" | "allow": what happens at the deadline
    suggestion: str | None = None  # the rule "approve always" would remember
    call_hash: str = ""  # binds the approval to these exact arguments
    description: str = ""  # what the tool says it does (an MCP server's own description)
    waits_for: str = ""  # a job the call waits for (``delegate``): it goes on when that job ends


@dataclass(slots=True)
class ApprovalResultEvent(Event):
    type: ClassVar[str] = "approval_result"
    id: str
    tool: str
    decision: str  # "approved" | "denied" | "expired"
    by: str  # "user" | "timeout"
    reason: str = ""


@dataclass(slots=True)
class CompactionEvent(Event):
    """Part of the context was replaced by the model's summary; the original stays in the log."""

    type: ClassVar[str] = "compaction"
    kind: str  # "tool_output" | "turns" | "attempt"
    ref: str  # the call id, or which turns
    chars_before: int
    text: str
    by_model: bool
    usage: dict[str, int]
    cost_usd: float | None = None  # what the summary cost then, when ``priced`` (as a model reply's)
    priced: bool = False


@dataclass(slots=True)
class AnswerEvent(Event):
    """A human answered the run's question; the answer is the feedback step's result."""

    type: ClassVar[str] = "answer"
    id: str
    answer: str


@dataclass(slots=True)
class DoneEvent(Event):
    type: ClassVar[str] = "done"
    status: str  # "done" | "failed" | "cancelled"
    # When status is "done": "solved" | "partial" | "stuck" (the agent's agent_step end), or
    # "answered" (a plain-text reply with nothing saying the work was unfinished: steward.ending).
    end_status: str | None
    message: str
    steps: int
    tool_calls: int
    usage: dict[str, int]
    #: The tools offered after the run's start, e.g. found by ``discover_tools`` (OpenAI's
    #: ``tools`` shape; None: none), so its export lists every tool the model saw.
    offered: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class ModeEvent(Event):
    """The run's policy mode was switched while it ran (seed 001: modes switch at run time);
    it applies from the step that follows it."""

    type: ClassVar[str] = "mode"
    mode: str  # "structured" | "autonomous"


@dataclass(slots=True)
class RewindEvent(Event):
    """The workspace was rewound to a checkpoint (``steward rewind``), from outside the loop.

    Appended to the run's log when it happens, even after the run ended; a rebuild of the
    run skips it (the loop never made it)."""

    type: ClassVar[str] = "rewind"
    checkpoint: int
    step: int
    restored: list[str]
    removed: list[str]
    undo_checkpoint: int


# --- continuation (issue 23): a run that said it was done is asked once more -----------------
@dataclass(slots=True)
class ContinuationEvent(Event):
    """A run ended with an answer while its plan or task list had open items, or the configured
    verifier failed (``steward.continuation``). ``asked``: the agent was asked "are you done?"
    and the run goes on; False: the bound (``[limits] max_continuations``) was reached and the
    run ends ``partial``."""

    type: ClassVar[str] = "continuation"
    number: int  # continuations asked so far in the run, this one included
    asked: bool
    reasons: list[str]  # what is not done, one line each
    message: str  # what the agent was told ("" when not asked)
    verifier_exit: int | None = None  # the verifier's exit code (None: none ran, or it timed out)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStart,
        StepStart,
        ThinkingEvent,
        TextEvent,
        ModelReplyEvent,
        PhaseEvent,
        PlanEvent,
        KeyFactEvent,
        ToolUse,
        ToolResultEvent,
        SignalEvent,
        ErrorEvent,
        WaitingEvent,
        ApprovalGateEvent,
        ApprovalResultEvent,
        AnswerEvent,
        CompactionEvent,
        DoneEvent,
        ModeEvent,
        RewindEvent,
        ContinuationEvent,
    )
}


def encode_event(event: Event) -> str:
    """The one JSON encoding of an event (a single line, no trailing newline)."""
    return json.dumps(event.to_dict(), ensure_ascii=False, separators=(",", ":"), default=str)


def decode_event(payload: str | dict[str, Any]) -> Event:
    """Rebuild a typed event from its JSON encoding."""
    raw = json.loads(payload) if isinstance(payload, str) else payload
    cls = EVENT_TYPES.get(raw.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown event type {raw.get('type')!r}")
    return cls(
        **raw.get("data", {}),
        seq=raw.get("seq", 0),
        run_id=raw.get("run_id", ""),
        session_id=raw.get("session_id"),
        ts=raw.get("ts", 0.0),
    )
