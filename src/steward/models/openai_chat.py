"""OpenAI Chat Completions, and every server that speaks it (vLLM, llama.cpp, LM Studio, Ollama, OpenRouter).

Built on the official ``openai`` SDK, imported on first use. The SDK's own bounded retries
(with backoff, honouring ``retry-after``) cover rate limits, server errors, timeouts and
connection errors; what is left is raised as one ``ModelError`` naming the fix.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, assert_never

from ..errors import ModelError
from ._errors import status_error, timeout_error, unreachable_error
from ._think import ThinkFilter
from .base import (
    AssistantMessage,
    Message,
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

if TYPE_CHECKING:
    from openai import APIError, AsyncOpenAI
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionChunk,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageParam,
    )
    from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
    from openai.types.completion_usage import CompletionUsage

__all__ = ["OpenAIChatModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Sent when a custom server needs no key: the SDK refuses to start without one.
PLACEHOLDER_API_KEY = "steward-no-key"


class OpenAIChatModel(Model):
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    ``provider`` labels messages and config hints (``ollama`` reuses this class); the key is
    read from ``api_key`` or the ``api_key_env`` variable, the base URL from ``base_url`` or
    the ``base_url_env`` variable. ``timeout`` is in seconds per request; ``max_retries`` is
    handed to the SDK (its default when ``None``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        stream: bool | None = None,
        provider: str = "openai",
        api_key_env: str = "OPENAI_API_KEY",
        base_url_env: str = "OPENAI_BASE_URL",
        name: str | None = None,
    ) -> None:
        self.name = name or f"{provider}:{model}"
        self.model = model
        self.provider = provider
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries
        #: False: whole replies only ([models.X] stream = false); None: stream, falling back by itself.
        self._stream = stream
        self._api_key_env = api_key_env
        self._base_url_env = base_url_env
        self._client: AsyncOpenAI | None = None

    @property
    def base_url(self) -> str:
        """The endpoint requests go to (explicit, then the environment, then OpenAI's)."""
        return self._base_url or os.environ.get(self._base_url_env) or DEFAULT_BASE_URL

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        import openai

        client = self._get_client()
        reply = _ReplyAssembler()
        limit = openai.omit if request.max_tokens is None else request.max_tokens
        try:
            chunks = await client.chat.completions.create(
                model=self.model,
                messages=_messages(request),
                tools=_tools(request.tools) or openai.omit,
                stream=True,
                stream_options={"include_usage": True},
                temperature=openai.omit if request.temperature is None else request.temperature,
                # OpenAI's own API wants the newer name; other servers know the older one.
                max_tokens=openai.omit if self._is_openai else limit,
                max_completion_tokens=limit if self._is_openai else openai.omit,
            )
            async with chunks:
                async for chunk in chunks:
                    for delta in reply.add(chunk):
                        yield delta
        except openai.APIError as exc:
            raise self._error(exc) from exc
        for delta in reply.finish():
            yield delta
        yield reply.response(self.model)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # --- client and errors ---------------------------------------------------------------

    @property
    def _is_openai(self) -> bool:
        return self.base_url.rstrip("/") == DEFAULT_BASE_URL

    def _get_client(self) -> AsyncOpenAI:
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                api_key=self._resolve_api_key(),
                base_url=self.base_url,
                timeout=openai.not_given if self._timeout is None else self._timeout,
                max_retries=openai.DEFAULT_MAX_RETRIES if self._max_retries is None else self._max_retries,
            )
        return self._client

    def check(self) -> None:
        self._resolve_api_key()

    async def probe(self) -> str:
        import openai

        self.check()
        client = self._get_client().with_options(max_retries=0, timeout=min(self._timeout or 10.0, 10.0))
        try:
            listed = await client.models.list()
        except openai.NotFoundError:  # a server without the list (some local ones) still answers
            return f"{self.base_url} answers"
        except openai.APIError as exc:
            raise self._error(exc) from exc
        names = {m.id for m in listed.data}
        if names and not names & {self.model, f"{self.model}:latest"}:
            return f"{self.base_url} answers, but does not list {self.model!r} among its {len(names)} models"
        return f"{self.base_url} answers and lists {self.model!r}" if names else f"{self.base_url} answers"

    def _resolve_api_key(self) -> str:
        key = self._api_key or os.environ.get(self._api_key_env)
        if key:
            return key
        if not self._is_openai:
            return PLACEHOLDER_API_KEY
        label = self.provider
        raise ModelError(
            f"{label}: no API key. Set {self._api_key_env} "
            f"(or api_key_env in [models.{label}] naming another variable), "
            f"or set base_url to a local OpenAI-compatible server.",
            provider=label,
        )

    def _error(self, exc: APIError) -> ModelError:
        """One line naming the fix, for what the SDK's retries could not overcome."""
        import openai

        label, url = self.provider, self.base_url
        retries = openai.DEFAULT_MAX_RETRIES if self._max_retries is None else self._max_retries
        detail = _detail(exc)
        if isinstance(exc, openai.APITimeoutError):
            return timeout_error(label, url, self._timeout)
        if isinstance(exc, openai.APIConnectionError):
            return unreachable_error(label, url, self._base_url_env, retryable=not _is_connect_error(exc))
        if isinstance(exc, openai.APIStatusError):
            return status_error(label, exc.status_code, detail, retries=retries, key_env=self._api_key_env,
                                model=self.model, url=url)  # fmt: skip
        return ModelError(f"{label}: the stream failed: {detail}", provider=label, retryable=True)


def _detail(exc: APIError) -> str:
    """The server's own error message, on one line."""
    body = exc.body
    text: object = exc.message
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            text = inner["message"]
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


def _messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if request.system or request.context:
        out.append({"role": "system", "content": request.system_text})
    out.extend(_message(message) for message in request.messages)
    return out


def _message(message: Message) -> ChatCompletionMessageParam:
    match message:
        case SystemMessage():
            return {"role": "system", "content": message.content}
        case UserMessage():
            return {"role": "user", "content": message.content}
        case AssistantMessage():
            return _assistant(message)
        case ToolResultMessage():
            # Chat Completions has no error flag: the content itself must say the call failed.
            return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
        case _:
            assert_never(message)


def _assistant(message: AssistantMessage) -> ChatCompletionAssistantMessageParam:
    # Thinking is not sent back: Chat Completions has no field for it.
    out: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": message.text or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call in message.tool_calls
        ]
    elif not message.text:
        out["content"] = ""
    return out


def _tools(tools: Sequence[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in tools
    ]


# --- response assembly -------------------------------------------------------------------


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _ReplyAssembler:
    """Collects one streamed reply: text through the think filter, reasoning, tool-call fragments."""

    def __init__(self) -> None:
        self.think = ThinkFilter()
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: dict[int, _PendingCall] = {}
        self.usage = Usage(requests=1)
        self.stop_reason = ""
        self.model = ""

    def add(self, chunk: ChatCompletionChunk) -> list[TextDelta | ThinkingDelta]:
        if chunk.usage is not None:
            self._set_usage(chunk.usage)
        self.model = chunk.model or self.model
        out: list[TextDelta | ThinkingDelta] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            # vLLM and DeepSeek name it reasoning_content; OpenRouter and LM Studio, reasoning.
            reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
            if isinstance(reasoning, str) and reasoning:
                out.append(ThinkingDelta(reasoning))
            if delta.content:
                out.extend(self.think.feed(delta.content))
            for fragment in delta.tool_calls or ():
                self._add_fragment(fragment)
            if choice.finish_reason:
                self.stop_reason = choice.finish_reason
        return self._record(out)

    def finish(self) -> list[TextDelta | ThinkingDelta]:
        return self._record(self.think.flush())

    def response(self, requested_model: str) -> ModelResponse:
        thinking = (Thinking("".join(self.thinking)),) if self.thinking else ()
        message = AssistantMessage(text="".join(self.text), tool_calls=self._tool_calls(), thinking=thinking)
        return ModelResponse(
            message=message,
            usage=self.usage,
            model=self.model or requested_model,
            stop_reason=self.stop_reason,
        )

    def _record(self, deltas: list[TextDelta | ThinkingDelta]) -> list[TextDelta | ThinkingDelta]:
        for delta in deltas:
            (self.thinking if isinstance(delta, ThinkingDelta) else self.text).append(delta.text)
        return deltas

    def _add_fragment(self, fragment: ChoiceDeltaToolCall) -> None:
        index = getattr(fragment, "index", None)
        if not isinstance(index, int):
            # Servers that leave out the index: a fragment with a new id starts a new call.
            last = max(self.calls, default=-1)
            starts_new = last < 0 or bool(fragment.id and fragment.id != self.calls[last].id)
            index = last + 1 if starts_new else last
        call = self.calls.setdefault(index, _PendingCall())
        call.id = fragment.id or call.id
        if fragment.function is not None:
            call.name = fragment.function.name or call.name
            if fragment.function.arguments:
                call.arguments.append(fragment.function.arguments)

    def _tool_calls(self) -> tuple[ToolCall, ...]:
        calls = []
        for position, index in enumerate(sorted(self.calls)):
            pending = self.calls[index]
            arguments, error = parse_arguments("".join(pending.arguments))
            call_id = pending.id or f"call_{position}"
            calls.append(ToolCall(call_id, pending.name, arguments, arguments_error=error))
        return tuple(calls)

    def _set_usage(self, usage: CompletionUsage) -> None:
        details = usage.prompt_tokens_details
        cached = details.cached_tokens if details is not None else None
        self.usage = Usage(
            input_tokens=usage.prompt_tokens or 0,
            output_tokens=usage.completion_tokens or 0,
            cache_read_tokens=cached or 0,
            requests=1,
        )
