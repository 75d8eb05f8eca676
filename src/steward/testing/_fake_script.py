"""The scripted replies of ``FakeLLMServer``, in provider-neutral form (see ``fake_llm``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JSON", "FakeReply", "FakeToolCall", "pieces"]

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class FakeToolCall:
    """A tool call in a scripted reply; a ``str`` for ``arguments`` is sent verbatim (even if not JSON)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def raw_arguments(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))

    def input_object(self) -> Any:
        """The arguments as a JSON value (for non-streamed Anthropic replies)."""
        if not isinstance(self.arguments, str):
            return dict(self.arguments)
        try:
            return json.loads(self.arguments)
        except json.JSONDecodeError:
            return {}


@dataclass(frozen=True, slots=True)
class FakeReply:
    """One scripted answer, in provider-neutral form.

    ``piece`` is how many characters each streamed fragment carries. OpenAI-only knobs:
    ``reasoning_field`` (``"reasoning_content"`` as vLLM/DeepSeek, ``"reasoning"`` as
    OpenRouter/LM Studio), ``tool_call_ids`` (``False`` as some local servers) and
    ``whole_tool_calls`` (each call in one chunk). Anthropic-only: ``signature`` and
    ``redacted_thinking``. ``stream_error`` (an error type such as ``"overloaded_error"``)
    breaks a stream off after its first event with the provider's in-stream error;
    ``error_field`` sends that error as llama.cpp's server does, an ``error:`` line (OpenAI).

    Both wire formats: ``cut_after=N`` sends the first N chunks (OpenAI) or events (Anthropic)
    then closes the connection with no end (no finish reason, no ``[DONE]``; no
    ``message_delta``/``message_stop``). ``trickle`` (seconds) starts the text and then sends
    one more piece of it every ``trickle`` seconds until the client or the server closes.
    ``usage=False`` leaves usage out everywhere. ``honour_max_tokens`` (on) stops a reply
    longer than the request's ``max_tokens`` (counted in pieces) there, with the "length" /
    "max_tokens" reason, as ``truncated=True`` does for any reply. OpenAI only:
    ``send_done=False`` ends a complete stream without ``data: [DONE]``, ``send_finish=False``
    without a finish reason. ``drop_after=N`` sends the first N events in chunked encoding and
    drops the connection without its last chunk: the client sees a broken body, not an end.
    """

    text: str = ""
    thinking: str = ""
    tool_calls: Sequence[FakeToolCall] = ()
    input_tokens: int = 12
    output_tokens: int = 7
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    piece: int = 4
    reasoning_field: str = "reasoning_content"
    tool_call_ids: bool = True
    whole_tool_calls: bool = False
    signature: str = "sig-fake"
    redacted_thinking: str = ""
    status: int = 200
    error_message: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    stall: float = 0.0
    stream_error: str = ""
    cut_after: int | None = None
    trickle: float = 0.0
    usage: bool = True
    honour_max_tokens: bool = True
    truncated: bool = False
    send_done: bool = True
    send_finish: bool = True
    drop_after: int | None = None
    error_field: bool = False

    @classmethod
    def error(
        cls, status: int, message: str = "", *, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> FakeReply:
        """An HTTP error reply with the provider's error body."""
        return cls(status=status, error_message=message, headers=dict(headers or {}), delay=delay)


def pieces(text: str, size: int) -> list[str]:
    """``text`` in fragments of ``size`` characters, as a stream sends it."""
    size = max(size, 1)
    return [text[start : start + size] for start in range(0, len(text), size)]
