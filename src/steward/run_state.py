"""What one run is made of, apart from the loop that drives it.

The closed set of step outcomes, what a paused run waits for, the loop's settings, and the
run's state (working memory, transcript, counters, usage, status). The loop in ``loop.py``
changes this state; events record how it changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from steward import signals as sig
from steward.context import Transcript
from steward.models.base import ToolCall, Usage
from steward.phases import EndStatus
from steward.working_memory import WorkingMemory

# --- outcomes -------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Continue:
    """Go on with the next call in this reply, or the next step."""


@dataclass(slots=True, frozen=True)
class Finish:
    end_status: EndStatus
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


@dataclass(slots=True, frozen=True)
class Pending:
    """Something only a human can answer; the run waits for it (a question or an approval)."""

    id: str
    kind: Literal["question", "approval"]
    question: str
    call_id: str
    approval: Approval | None = None


@dataclass(slots=True, frozen=True)
class Resume:
    """How a human answered an approval; the loop acts on it before the next model call."""

    approval: Approval
    approved: bool
    reason: str
    expired: bool = False
    from_log: bool = False  # the decision was recorded by an earlier process (a rebuilt run)


@dataclass(slots=True)
class LoopSettings:
    max_steps: int = 50
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
    status: str = "running"  # running | waiting | done | failed | cancelled
    end_status: EndStatus | None = None
    output: str = ""
    pending: Pending | None = None
    seq: int = 0
    session_id: str | None = None
    raised: frozenset[str] = frozenset()
    empty_replies: int = 0
    call_ids: set[str] = field(default_factory=set)
    resume: Resume | None = None
    #: Seconds spent running in this process so far, up to the last pause (see ``Loop``'s clock).
    run_time_s: float = 0.0


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
        f"Made {c.tool_calls} tool calls ({c.failed_tool_calls} failed, {unresolved} errors unresolved). "
        f"Last step: {last or '(none)'}. The goal was not confirmed as reached: {st.goal}"
    )
