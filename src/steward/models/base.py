"""Provider-neutral messages and the ``Model`` interface every provider implements.

A provider turns a ``ModelRequest`` into a stream of ``TextDelta`` / ``ThinkingDelta``
items followed by exactly one ``ModelResponse`` (the whole assembled reply with usage).
Nothing here knows about tools' implementations or the loop.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from steward.text import compact_json

# --- messages ---------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class ToolCall:
    """A call the model asked for.

    ``arguments_error`` is set (and ``arguments`` empty) when the provider delivered
    arguments that are not a JSON object; the loop reports it back to the model.
    """

    id: str
    name: str
    arguments: Mapping[str, Any]
    arguments_error: str | None = None

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse streamed tool-call arguments; return ``(arguments, error)``."""
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg} at position {exc.pos}): {raw[:200]}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}: {raw[:200]}"
    return value, None


@dataclass(slots=True, frozen=True)
class Thinking:
    """Reasoning text; ``signature`` is the provider's opaque token that must travel back."""

    text: str
    signature: str | None = None


@dataclass(slots=True, frozen=True)
class SystemMessage:
    content: str
    role: str = field(default="system", init=False)


@dataclass(slots=True, frozen=True)
class UserMessage:
    content: str
    role: str = field(default="user", init=False)


@dataclass(slots=True, frozen=True)
class AssistantMessage:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: tuple[Thinking, ...] = ()
    role: str = field(default="assistant", init=False)


@dataclass(slots=True, frozen=True)
class ToolResultMessage:
    """A tool's output. Not every wire format carries ``is_error`` (Chat Completions does
    not), so the content itself must say what failed; Steward's tools and loop do."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    role: str = field(default="tool", init=False)


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


# --- requests and responses ---------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class ToolSpec:
    """What the model is told about a tool: name, description and JSON schema of arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    #: Where the tool comes from ("" for Python tools, "mcp:SERVER" for an MCP server's). Never
    #: sent to the model; the safety wrapper and discovery read it.
    origin: str = field(default="", compare=False)
    #: The policy's default for this tool when no rule matches: "allow", or "ask" (tools of
    #: MCP servers not trusted by the user's configuration).
    default_action: str = field(default="allow", compare=False)
    #: A digest of what the tool says it does (description and schema); an approval holds
    #: only while it stays the same. "" for tools that cannot change under us.
    fingerprint: str = field(default="", compare=False)
    #: Running it twice with the same arguments does what running it once did (``delegate``
    #: finds the job it made): a call cut short by a crash is run again, not reported interrupted.
    idempotent: bool = field(default=False, compare=False)
    #: The tool says it changes nothing (an MCP tool's ``readOnlyHint``): no workspace
    #: checkpoint is recorded before it runs.
    read_only: bool = field(default=False, compare=False)


def schema_chars(tools: Sequence[ToolSpec]) -> int:
    """The characters these tools' names, descriptions and schemas add to a request."""
    return sum(len(t.name) + len(t.description) + len(compact_json(t.parameters)) for t in tools)


@dataclass(slots=True, frozen=True)
class ModelRequest:
    """One call to a model.

    The system prompt is ``system`` followed by ``context``: ``system`` is the static part
    (the same string on every call, which providers may mark cacheable), ``context`` the part
    rebuilt for this call (the working-memory view).
    """

    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    context: str = ""
    #: "step" for the agent's own turns; "summary" for compression requests (steward.memory.compression),
    #: which scripted models answer with an excerpt instead of their next scripted reply.
    purpose: str = "step"

    @property
    def system_text(self) -> str:
        """The whole system prompt as one text."""
        if not self.context:
            return self.system
        return f"{self.system}\n\n{self.context}" if self.system else self.context


@dataclass(slots=True)
class Usage:
    """Token usage: as the provider reported it, or estimated here when it reported none.

    ``input_tokens`` is the whole prompt, cached parts included (OpenAI's ``prompt_tokens``;
    Anthropic's input + cache read + cache write); the cache fields are parts of that total.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0
    #: Some of these counts were estimated here (``steward.models.tokens``), because the server
    #: reported no usage (llama-cpp-python's streams, some proxies).
    estimated: bool = False

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.requests += other.requests
        self.estimated = self.estimated or other.estimated

    @classmethod
    def from_dict(cls, data: Mapping[str, int]) -> Usage:
        """The usage ``as_dict`` recorded (unknown keys ignored)."""
        counts = {k: int(data.get(k, 0)) for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                                     "cache_write_tokens", "requests")}  # fmt: skip
        return cls(**counts, estimated=bool(data.get("estimated", False)))

    def as_dict(self) -> dict[str, int]:
        out = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "requests": self.requests,
        }
        if self.estimated:  # only then: reported usage keeps the shape it always had
            out["estimated"] = True
        return out


@dataclass(slots=True, frozen=True)
class TextDelta:
    text: str


@dataclass(slots=True, frozen=True)
class ThinkingDelta:
    text: str


@dataclass(slots=True, frozen=True)
class ModelResponse:
    message: AssistantMessage
    usage: Usage
    model: str = ""
    stop_reason: str = ""


@dataclass(slots=True, frozen=True)
class Retrying:
    """The attempt failed in a way a later one may not (see ``steward.models.retry``)."""

    message: str


@dataclass(slots=True, frozen=True)
class Notice:
    """Something the user should hear once about how the model is reached (e.g. a server that
    cannot stream tool calls, so whole replies are asked for from now on)."""

    message: str


#: The code of the signal event a ``Notice`` is recorded as.
NOTICE_SIGNAL = "model_notice"

StreamItem = TextDelta | ThinkingDelta | Retrying | Notice | ModelResponse


class Model(ABC):
    """A language model behind one provider.

    Implement ``stream``; it must yield zero or more deltas and then exactly one
    ``ModelResponse``. Raise ``ModelError`` (with a message naming the fix) for failures
    that the provider's own bounded retries could not overcome.
    """

    #: ``provider:model`` as the user wrote it, for events and messages.
    name: str = "model"

    def replayed(self) -> None:  # noqa: B027 - a hook most models do not need
        """A reply recorded earlier was used instead of asking again (a run being rebuilt).

        Models that answer from a position in a script move past that reply here.
        """

    @abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        """Stream one reply."""

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Return the whole reply (collects ``stream``)."""
        items = self.stream(request)
        try:
            async for item in items:
                if isinstance(item, ModelResponse):
                    return item
        finally:
            # Close the generator now (and with it any HTTP stream), not at garbage collection.
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
        raise RuntimeError(f"{self.name}: stream ended without a response")

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections; called once the model is no longer used."""

    def check(self) -> None:  # noqa: B027 - optional hook
        """Raise ``ModelError`` for a configuration that cannot work (no key), without I/O."""

    async def probe(self) -> str:
        """Whether the model's server answers, in a few words (``steward doctor``), or a
        ``ModelError`` naming the fix. No model call is made: nothing is billed."""
        return "nothing to reach"

    def warnings(self) -> list[str]:
        """What the user should hear once the model is no longer used (e.g. unused script)."""
        return []
