"""Runs as training data: one record per run, in OpenAI's chat format, with its outcome as a reward.

``chat_record(store, run_id)`` reads a recorded run and returns one JSON-able record::

    {"messages": [...], "tools": [...], "phases": [...], "reward": 1.0, "reward_source": "outcome",
     "outcome": "solved", "run": {...}}

- ``messages``: system, user, assistant and tool messages as OpenAI fine-tuning takes them;
  an assistant's ``tool_calls`` carry ``function.arguments`` as a JSON string, and each tool
  message its ``tool_call_id``.
- ``phases``: one entry per message, the loop's phase of each assistant turn (``plan``,
  ``reason``, ``act``, ``verify``, ``reflect``, ``feedback``, ``end``) and None for the others.
  It sits beside ``messages``, not in them: OpenAI's upload rejects keys it does not know.
- ``tools``: every tool offered to the model during the run, each once, as OpenAI's ``tools``
  parameter: those it started with, then those offered later (found by ``discover_tools``).
- ``reward``: see ``reward``. ``run``: the run's id, goal, model, persona, counts and times.

Everything comes from the store, which holds only redacted text (``steward.store.redaction``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from steward.trajectories._chat import Conversation, arguments_json, conversation

if TYPE_CHECKING:
    from steward.events import Event
    from steward.store.events import EventStore, RunRow

__all__ = [
    "Conversation",
    "arguments_json",
    "chat_record",
    "conversation",
    "offered_tools",
    "record_of",
    "reward",
    "verified",
    "verifier_command",
]

#: The reward of each way a run ends, when no verifier ran (``answered``: a plain-text reply
#: that nothing said was unfinished, the way a chat ends).
OUTCOME_REWARDS: dict[str, float] = {
    "solved": 1.0,
    "answered": 1.0,
    "partial": 0.5,
    "stuck": 0.0,
    "failed": 0.0,
    "cancelled": 0.0,
}


def reward(outcome: str, verified: bool | None = None) -> float:
    """The reward of a run that ended ``outcome`` (its end status, or ``failed``/``cancelled``).

    When a verifier ran (``[limits] verify``), its last verdict wins over what the agent said:
    1.0 when the command exited 0, 0.0 otherwise (a failure, or it did not finish). Otherwise
    solved (or answered) 1.0, partial 0.5, stuck, failed or cancelled 0.0.
    """
    if verified is not None:
        return 1.0 if verified else 0.0
    return OUTCOME_REWARDS.get(outcome, 0.0)


def verified(events: Sequence[Event]) -> bool | None:
    """The verifier's last verdict in a run's log (None: none ran)."""
    from steward.continuation import VERIFY_TOOL
    from steward.events import ToolResultEvent

    for event in reversed(events):
        if isinstance(event, ToolResultEvent) and event.tool == VERIFY_TOOL:
            return event.status == "completed"
    return None


def verifier_command(events: Sequence[Event]) -> str:
    """The command the run's verifier ran ("": none ran)."""
    from steward.continuation import VERIFY_TOOL
    from steward.events import ToolUse

    for event in reversed(events):
        if isinstance(event, ToolUse) and event.tool == VERIFY_TOOL:
            return str(event.input.get("command", ""))
    return ""


def offered_tools(
    at_start: Sequence[dict[str, Any]] | None, later: Sequence[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The tools a run offered (its start's, then the later ones), each name once: its first schema."""
    by_name: dict[str, dict[str, Any]] = {}
    for tool in [*(at_start or ()), *(later or ())]:
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        by_name.setdefault(str(name), tool)
    return list(by_name.values())


async def chat_record(store: EventStore, run_id: str, *, thinking: bool = False) -> dict[str, Any]:
    """One run (its id, or a unique prefix) as a training record (see the module's docstring);
    ``thinking`` adds each assistant turn's reasoning as ``reasoning_content``."""
    row = await store.find_run(run_id)
    events = await store.events(row.id)
    return record_of(row, events, thinking=thinking)


def record_of(row: RunRow, events: Sequence[Event], *, thinking: bool = False) -> dict[str, Any]:
    """The training record of a run from its row and its log."""
    from steward.events import DoneEvent, RunStart

    start = next((e for e in events if isinstance(e, RunStart)), None)
    done = next((e for e in reversed(events) if isinstance(e, DoneEvent)), None)
    if start is None:
        from steward.errors import StewardError

        raise StewardError(f"run {row.id} has no recorded start (it stopped first): nothing to export")
    goal = start.goal  # the event's, redacted as the whole log is
    chat = conversation(start.system, goal, events, thinking=thinking)
    if row.status == "done":
        chat.without_closing_ack()
    outcome = row.end_status or row.status
    check = verified(events)
    usage = done.usage if done is not None else {}
    return {
        "messages": chat.messages,
        "tools": offered_tools(start.tools, done.offered if done is not None else None),
        "phases": chat.phases,
        "reward": reward(outcome, check),
        "reward_source": "verifier" if check is not None else "outcome",
        "outcome": outcome,
        "run": {
            "id": row.id,
            "session_id": row.session_id,
            "goal": goal,
            "model": row.model or start.model,
            "persona": start.persona,
            "workspace": start.workspace,
            "verify": verifier_command(events),
            "status": row.status,
            "end_status": row.end_status,
            "steps": done.steps if done is not None else 0,
            "tool_calls": done.tool_calls if done is not None else 0,
            "input_tokens": int(usage.get("input_tokens", 0)),
            "output_tokens": int(usage.get("output_tokens", 0)),
            "started_at": row.created_at,
            "ended_at": done.ts if done is not None else row.updated_at,
            "final_message": done.message if done is not None else "",
        },
    }
