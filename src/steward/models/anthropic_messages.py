"""Anthropic Messages API over the official ``anthropic`` SDK (imported on first use).

Raw stream events are assembled here: text (through the ``<think>`` filter as well),
thinking with its signature, redacted thinking and tool calls whose input arrives as JSON
pieces. Thinking blocks travel back on the next request with their signatures, as the API
requires.

A request that fails before its stream starts (429/5xx/529, a timeout, a dropped connection)
is sent again here, by the rule every provider follows (``_resend``; the SDK's own retries are
off); what goes wrong after the stream started (an error event, a stream cut short) is left to
the loop's ``RetryingModel``. One deadline bounds the whole call (``_deadline``), and a server
that reports no usage (a proxy that strips it) gets an estimate (``tokens``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, assert_never

from ..errors import ModelError
from ._deadline import before, bounded, deadline_after
from ._errors import status_error, timeout_error, unreachable_error
from ._resend import Attempts, retry_after
from ._think import ThinkFilter
from .base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    SystemMessage,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
    parse_arguments,
)
from .tokens import estimate_usage

if TYPE_CHECKING:
    from anthropic import APIError, AsyncAnthropic, AsyncStream
    from anthropic.types import (
        ContentBlockParam,
        MessageParam,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawMessageDeltaEvent,
        RawMessageStreamEvent,
        TextBlockParam,
        ToolParam,
    )

__all__ = ["AnthropicModel"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 8192
DEFAULT_MAX_RETRIES = 2  # as the SDK's own default
# Sent when a custom base_url (a proxy, a test server) was given without any key.
PLACEHOLDER_API_KEY = "steward-no-key"
# Redacted thinking has no text, only opaque data; it rides in ``Thinking.signature`` with
# this prefix so it can be sent back as a ``redacted_thinking`` block.
REDACTED_PREFIX = "redacted_thinking:"


class AnthropicModel(Model):
    """A Claude model behind the Anthropic Messages API.

    The key comes from ``api_key`` or ``ANTHROPIC_API_KEY`` (or whatever the SDK finds:
    ``ANTHROPIC_AUTH_TOKEN``, profiles); the base URL from ``base_url`` or
    ``ANTHROPIC_BASE_URL``. ``max_tokens`` is used when a request sets none (the API
    requires one). ``thinking_budget`` turns on extended thinking with that many tokens.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_budget: int | None = None,
        provider: str = "anthropic",
        name: str | None = None,
    ) -> None:
        self.name = name or f"{provider}:{model}"
        self.model = model
        self.provider = provider
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries
        self._max_tokens = max_tokens
        self._thinking_budget = thinking_budget
        self._client: AsyncAnthropic | None = None

    @property
    def base_url(self) -> str:
        return self._base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        import anthropic
        import httpx2

        client = await self._get_client()
        reply = _ReplyAssembler()
        # One bound for the whole call: the SDK's own timeout restarts with every event, so a
        # model that keeps writing slowly would never trip it.
        deadline = deadline_after(self._timeout)
        try:
            events = await self._send(client, request, deadline)
            async with events:
                async for event in bounded(events, deadline, self._timeout_error):
                    for delta in reply.add(event):
                        yield delta
        except anthropic.APIError as exc:
            raise self._error(exc) from exc
        except anthropic.CredentialsError as exc:
            raise self._no_credentials(exc) from exc
        except httpx2.TimeoutException as exc:  # a stalled stream is not wrapped by the SDK
            raise self._timeout_error() from exc
        except httpx2.TransportError as exc:  # the connection dropped while the reply came
            raise (self._broke_off(reply) if reply.events else self._unreachable(retryable=True)) from exc
        if not reply.complete:
            raise self._broke_off(reply)
        for delta in reply.finish():
            yield delta
        yield reply.response(self.model, request)

    async def _send(
        self, client: AsyncAnthropic, request: ModelRequest, deadline: float | None
    ) -> AsyncStream[RawMessageStreamEvent]:
        """The started stream of events; the request is sent again when that is worth it (``_resend``)."""
        import anthropic

        system, messages = _messages(request)
        attempts = Attempts(self._retries, deadline)
        for attempt in attempts:
            started = client.messages.create(
                model=self.model,
                max_tokens=request.max_tokens or self._max_tokens,
                system=system or anthropic.omit,
                messages=messages,
                tools=_tools(request.tools) or anthropic.omit,
                thinking=(
                    anthropic.omit
                    if self._thinking_budget is None
                    else {"type": "enabled", "budget_tokens": self._thinking_budget}
                ),
                stream=True,
                # This SDK version has no temperature argument; the API still takes the field.
                extra_body=None if request.temperature is None else {"temperature": request.temperature},
            )
            try:
                return await before(deadline, started, self._timeout_error)
            except anthropic.APIStatusError as exc:
                repeated = attempts.repeated(exc.status_code, _detail(exc))
                error = self._status_error(exc.status_code, exc.type, _detail(exc), attempt, repeated)
                # Kept with the failure: a wait past the call's deadline is left to the loop.
                error.retry_after = retry_after(exc.response.headers) or error.retry_after
                await attempts.after(error, attempt, exc.response.headers)
            except anthropic.APIConnectionError as exc:  # timeouts too
                await attempts.after(self._error(exc), attempt, worth_it=True)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # --- client and errors ---------------------------------------------------------------

    def check(self) -> None:
        # The client finds the credentials (the key, a token, a profile) without a request;
        # made now, a missing key stops the run before it starts, and the client is kept.
        self._client = self._make_client()

    async def probe(self) -> str:
        import anthropic

        client = self._make_client().with_options(max_retries=0, timeout=min(self._timeout or 10.0, 10.0))
        try:
            await client.models.list(limit=1)
        except anthropic.NotFoundError:  # a compatible server without the list still answers
            return f"{self.base_url} answers"
        except anthropic.APIError as exc:
            raise self._error(exc) from exc
        return f"{self.base_url} answers and accepts the key"

    async def _get_client(self) -> AsyncAnthropic:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> AsyncAnthropic:
        if self._client is not None:
            return self._client
        import anthropic

        key = self._api_key
        has_env_credentials = any(os.environ.get(n) for n in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"))
        if key is None and self.base_url != DEFAULT_BASE_URL and not has_env_credentials:
            key = PLACEHOLDER_API_KEY
        try:
            client = anthropic.AsyncAnthropic(
                api_key=key,
                base_url=self.base_url,
                timeout=anthropic.not_given if self._timeout is None else self._timeout,
                max_retries=0,  # sent again in ``_send``, so that one rule decides for every provider
            )
        except anthropic.CredentialsError as exc:  # a profile named by the environment is broken
            raise self._no_credentials(exc) from exc
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise self._no_credentials(None)  # (its connection pool is still empty: nothing to close)
        return client

    def _no_credentials(self, exc: Exception | None) -> ModelError:
        label = self.provider
        reason = f" ({' '.join(str(exc).split())})" if exc is not None else ""
        return ModelError(
            f"{label}: no API key{reason}. Set ANTHROPIC_API_KEY "
            f"(or api_key_env in [models.{label}] naming another variable).",
            provider=label,
        )

    @property
    def _retries(self) -> int:
        return DEFAULT_MAX_RETRIES if self._max_retries is None else self._max_retries

    def _timeout_error(self) -> ModelError:
        return timeout_error(self.provider, self.base_url, self._timeout)

    def _broke_off(self, reply: _ReplyAssembler) -> ModelError:
        # Not a reply: whatever came is only the start of one (the README promises a retry).
        return ModelError(
            f"{self.provider}: the reply from {self.base_url} broke off after {reply.events} events "
            "(no message_stop): the server closed the stream early; check its log if this repeats.",
            provider=self.provider,
            retryable=True,
        )

    def _unreachable(self, *, retryable: bool) -> ModelError:
        return unreachable_error(self.provider, self.base_url, "ANTHROPIC_BASE_URL", retryable=retryable)

    def _error(self, exc: APIError) -> ModelError:
        import anthropic

        if isinstance(exc, anthropic.APITimeoutError):
            return self._timeout_error()
        if isinstance(exc, anthropic.APIConnectionError):
            return self._unreachable(retryable=not _is_connect_error(exc))
        if isinstance(exc, anthropic.APIStatusError):
            return self._status_error(exc.status_code, exc.type, _detail(exc))
        return ModelError(f"{self.provider}: the stream failed: {_detail(exc)}", provider=self.provider)

    def _status_error(
        self, status: int, kind: str | None, detail: str, retries: int = 0, repeated: bool = False
    ) -> ModelError:
        """``retries``: how many times the request was sent again; ``repeated``: the same 5xx twice."""
        label = self.provider
        if status < 400:  # an error event inside a stream that had started fine
            return ModelError(
                f"{label}: the stream failed ({kind}): {detail}",
                provider=label,
                retryable=kind in _RETRYABLE_KINDS,
            )
        return status_error(label, status, detail, retries=retries, key_env="ANTHROPIC_API_KEY",
                            model=self.model, url=self.base_url, kind=kind, repeated=repeated)  # fmt: skip


_RETRYABLE_KINDS = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})


def _detail(exc: APIError) -> str:
    text = getattr(exc, "api_message", None) or exc.message
    return " ".join(str(text).split())[:300]


def _is_connect_error(exc: BaseException) -> bool:
    import httpx2

    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, httpx2.ConnectError):
            return True
        cause = cause.__cause__
    return False


# --- request mapping ---------------------------------------------------------------------


def _messages(request: ModelRequest) -> tuple[list[TextBlockParam], list[MessageParam]]:
    """The system blocks and the alternating user/assistant turns the API requires."""
    system = [request.system] if request.system else []
    turns: list[tuple[Literal["user", "assistant"], list[ContentBlockParam]]] = []
    for message in request.messages:
        role: Literal["user", "assistant"]
        match message:
            case SystemMessage():
                # The API has one system prompt; later system messages join it.
                system.append(message.content)
                continue
            case UserMessage():
                role = "user"
                blocks: list[ContentBlockParam] = (
                    [{"type": "text", "text": message.content}] if message.content else []
                )
            case AssistantMessage():
                role, blocks = "assistant", _assistant_blocks(message)
            case ToolResultMessage():
                role = "user"
                blocks = [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.call_id,
                        "content": message.content,
                        "is_error": message.is_error,
                    }
                ]
            case _:
                assert_never(message)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return _system_blocks("\n\n".join(system), request.context), [
        _turn(role, blocks) for role, blocks in turns
    ]


def _system_blocks(static: str, context: str) -> list[TextBlockParam]:
    # The static prompt is the same on every call: marking it lets the API cache the prefix
    # (tools and static prompt) while the working-memory view after it changes each step.
    blocks: list[TextBlockParam] = []
    if static:
        blocks.append({"type": "text", "text": static, "cache_control": {"type": "ephemeral"}})
    if context:
        blocks.append({"type": "text", "text": context})
    return blocks


def _turn(role: Literal["user", "assistant"], blocks: list[ContentBlockParam]) -> MessageParam:
    if role == "user":
        return {"role": "user", "content": blocks}
    return {"role": "assistant", "content": blocks}


def _assistant_blocks(message: AssistantMessage) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    for thinking in message.thinking:
        # Only signed thinking can go back; unsigned thinking came from <think> tags.
        if thinking.signature is None:
            continue
        if thinking.signature.startswith(REDACTED_PREFIX):
            blocks.append(
                {"type": "redacted_thinking", "data": thinking.signature.removeprefix(REDACTED_PREFIX)}
            )
        else:
            blocks.append({"type": "thinking", "thinking": thinking.text, "signature": thinking.signature})
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in message.tool_calls
    )
    return blocks


def _tools(tools: Sequence[ToolSpec]) -> list[ToolParam]:
    return [{"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in tools]


# --- response assembly -------------------------------------------------------------------


@dataclass
class _Block:
    kind: str
    parts: list[str] = field(default_factory=list)
    signature: str = ""
    id: str = ""
    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)


class _ReplyAssembler:
    """Collects one streamed message from its raw events."""

    def __init__(self) -> None:
        self.think = ThinkFilter()
        self.blocks: dict[int, _Block] = {}
        self.text: list[str] = []
        self.tag_thinking: list[str] = []
        self.usage = Usage(requests=1)
        self.stop_reason = ""
        self.model = ""
        self.events = 0
        #: message_stop came, or a message_delta with the stop reason (sent after the last
        #: block): either says the reply is whole, so a proxy that drops one is still fine.
        self.complete = False

    def add(self, event: RawMessageStreamEvent) -> list[TextDelta | ThinkingDelta]:
        self.events += 1
        if event.type == "message_start":
            self.model = str(event.message.model or "")
            # A proxy may strip usage: the SDK builds events without checking them.
            usage = getattr(event.message, "usage", None)
            if usage is not None:
                self._set_usage(
                    usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens
                )
                self.usage.output_tokens = usage.output_tokens or 0
        elif event.type == "content_block_start":
            self._start_block(event)
        elif event.type == "content_block_delta":
            return self._delta(event)
        elif event.type == "message_delta":
            self._final_usage(event)
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self.complete = self.complete or bool(event.delta.stop_reason)
        elif event.type == "message_stop":
            self.complete = True
        return []

    def _final_usage(self, event: RawMessageDeltaEvent) -> None:
        final = getattr(event, "usage", None)
        if final is None:
            return
        self.usage.output_tokens = final.output_tokens or 0
        if final.input_tokens is not None:  # newer API versions report final input usage here
            self._set_usage(
                final.input_tokens, final.cache_read_input_tokens, final.cache_creation_input_tokens
            )

    @property
    def usage_reported(self) -> bool:
        # No usage at all, or only zeros (no real reply costs nothing): the server did not count.
        return self.usage.input_tokens > 0 or self.usage.output_tokens > 0

    def finish(self) -> list[TextDelta | ThinkingDelta]:
        return self._record(self.think.flush())

    def response(self, requested_model: str, request: ModelRequest) -> ModelResponse:
        thinking: list[Thinking] = []
        calls: list[ToolCall] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind == "thinking":
                thinking.append(Thinking("".join(block.parts), block.signature or None))
            elif block.kind == "redacted_thinking":
                thinking.append(Thinking("", REDACTED_PREFIX + block.signature))
            elif block.kind == "tool_use":
                raw = "".join(block.parts)
                arguments, error = parse_arguments(raw) if raw else (block.input, None)
                calls.append(ToolCall(block.id, block.name, arguments, arguments_error=error))
        if self.tag_thinking:
            thinking.append(Thinking("".join(self.tag_thinking)))
        message = AssistantMessage(text="".join(self.text), tool_calls=tuple(calls), thinking=tuple(thinking))
        return ModelResponse(
            message=message,
            usage=self.usage if self.usage_reported else estimate_usage(request, message),
            model=self.model or requested_model,
            stop_reason=self.stop_reason,
        )

    def _set_usage(self, uncached: int | None, cache_read: int | None, cache_write: int | None) -> None:
        # Anthropic counts cached input apart; Usage.input_tokens is the whole prompt.
        self.usage.cache_read_tokens = cache_read or 0
        self.usage.cache_write_tokens = cache_write or 0
        self.usage.input_tokens = (
            (uncached or 0) + self.usage.cache_read_tokens + self.usage.cache_write_tokens
        )

    def _start_block(self, event: RawContentBlockStartEvent) -> None:
        block = event.content_block
        if block.type == "tool_use":
            self.blocks[event.index] = _Block(
                "tool_use", id=block.id, name=block.name, input=dict(block.input)
            )
        elif block.type == "redacted_thinking":
            self.blocks[event.index] = _Block("redacted_thinking", signature=block.data)
        elif block.type == "thinking":
            self.blocks[event.index] = _Block("thinking", signature=block.signature or "")
        else:
            self.blocks[event.index] = _Block(block.type)

    def _delta(self, event: RawContentBlockDeltaEvent) -> list[TextDelta | ThinkingDelta]:
        block = self.blocks.setdefault(event.index, _Block("text"))
        delta = event.delta
        if delta.type == "text_delta":
            return self._record(self.think.feed(delta.text))
        if delta.type == "thinking_delta":
            block.parts.append(delta.thinking)
            return [ThinkingDelta(delta.thinking)] if delta.thinking else []
        if delta.type == "signature_delta":
            block.signature += delta.signature
        elif delta.type == "input_json_delta":
            block.parts.append(delta.partial_json)
        return []

    def _record(self, deltas: list[TextDelta | ThinkingDelta]) -> list[TextDelta | ThinkingDelta]:
        """Keep what the think filter let out (thinking blocks keep their own parts)."""
        for delta in deltas:
            (self.tag_thinking if isinstance(delta, ThinkingDelta) else self.text).append(delta.text)
        return deltas
