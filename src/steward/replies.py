"""A model's reply as a run takes it: call ids made unique, its events, and back from its event."""

from __future__ import annotations

from collections.abc import Callable

from steward.events import Event, ModelReplyEvent, TextEvent, ThinkingEvent
from steward.models.base import AssistantMessage, ModelResponse, Thinking, ToolCall, Usage


def with_unique_ids(message: AssistantMessage, seen: set[str], step: int) -> AssistantMessage:
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


def reply_event(
    step: int, message: AssistantMessage, usage: Usage, price: Callable[[Usage], float | None] | None = None
) -> ModelReplyEvent:
    """The reply as recorded: everything a rebuilt run needs to take it instead of asking again,
    and what it cost (``price``: the run's, ``RunState.price``)."""
    calls = [
        {"id": c.id, "name": c.name, "arguments": dict(c.arguments), "arguments_error": c.arguments_error}
        for c in message.tool_calls
    ]
    thinking = [{"text": t.text, "signature": t.signature} for t in message.thinking]
    return ModelReplyEvent(
        step=step, text=message.text, tool_calls=calls, thinking=thinking, usage=usage.as_dict(),
        cost_usd=None if price is None else price(usage), priced=price is not None,
    )  # fmt: skip


def response_from(event: ModelReplyEvent) -> ModelResponse:
    """The reply a ``model_reply`` event recorded."""
    calls = tuple(
        ToolCall(c["id"], c["name"], c.get("arguments") or {}, c.get("arguments_error"))
        for c in event.tool_calls
    )
    thinking = tuple(Thinking(t.get("text", ""), t.get("signature")) for t in event.thinking)
    return ModelResponse(AssistantMessage(event.text, calls, thinking), Usage.from_dict(event.usage))


def text_events(message: AssistantMessage) -> list[Event]:
    """The reply's whole thinking and text, as the events the log keeps (deltas are live-only)."""
    events: list[Event] = [ThinkingEvent(text=t.text) for t in message.thinking if t.text]
    if message.text:
        events.append(TextEvent(text=message.text))
    return events
