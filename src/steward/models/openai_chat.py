"""OpenAI Chat Completions, and every server that speaks it (vLLM, llama.cpp, LM Studio, Ollama, OpenRouter).

Built on the official ``openai`` SDK (imported on first use) for the connection, the key and
the error types; the reply's events are read here (``_sse``) because a stream that ends
without a finish reason or ``[DONE]`` was cut short and is not a reply.

One call, one deadline: ``timeout_s`` bounds the whole call, retries and all, not the gap
between two chunks (a slow local model keeps producing tokens and would never trip that).
The retries are this module's, not the SDK's (whose retries are off), on the schedule every
provider shares (``_resend``): rate limits, overloads and dropped connections are tried again
up to ``max_retries`` times, honouring ``retry-after``, but a request the server calls invalid
is sent once, and the same 5xx twice for the same request is not sent a third time (a busy
503, "Loading model", still is). What the retries met is ``RetriesSpentError``,
which the loop's ``RetryingModel`` does not multiply; a reply that broke off after it started
is left to it.

Servers that cannot stream a tool choice (llama-cpp-python answers 200 and closes the body
empty) get the same request again at once as a whole reply; when the server ended the body
itself and the whole reply brings a tool call, the endpoint is remembered for the process and
each model reaching it says so once (``Notice``). A connection that dropped before anything
came is asked again whole too, but says nothing about the server and is not remembered.
``stream = false`` in ``[models.X]`` asks for whole replies from the start.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, aclosing
from typing import TYPE_CHECKING, Any

from ..errors import ModelError
from . import _openai_wire as wire
from ._deadline import before, bounded, deadline_after
from ._errors import is_invalid_request, readable, status_error, timeout_error, unreachable_error
from ._resend import Attempts, retry_after
from ._sse import DONE, LineTooLongError, WholeBodyError, read_bounded, sse_data, sse_lines
from .base import Model, ModelRequest, ModelResponse, Notice, StreamItem

if TYPE_CHECKING:
    from openai import APIError, APIStatusError, AsyncOpenAI
    from openai._response import AsyncAPIResponse

__all__ = ["OpenAIChatModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Sent when a custom server needs no key: the SDK refuses to start without one.
PLACEHOLDER_API_KEY = "steward-no-key"
DEFAULT_MAX_RETRIES = 2
PROBE_TIMEOUT_S = 10.0  # asking for the model list is quick, or the server is not answering

# Endpoints (base URL, model) that cannot stream a tool choice, learned in this process.
_WHOLE_REPLY_ENDPOINTS: set[tuple[str, str]] = set()


class _CannotStream(Exception):  # noqa: N818 - control flow inside this module, never raised out
    """A streamed request with tools ended before any piece of the reply came.

    ``said``: the server ended the body itself (empty, or with an error object), as one that
    cannot stream a tool choice does; otherwise the connection dropped, which says nothing
    about the server and is not remembered.
    """

    def __init__(self, *, said: bool) -> None:
        super().__init__("nothing came")
        self.said = said


class OpenAIChatModel(Model):
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    ``provider`` labels messages and config hints (``ollama`` reuses this class); the key is
    read from ``api_key`` or the ``api_key_env`` variable, the base URL from ``base_url`` or
    the ``base_url_env`` variable. ``timeout`` is in seconds for a whole call; ``max_retries``
    is how many more times a failed request may be sent (2 when ``None``). ``stream``: None
    streams and falls back by itself, True always streams, False asks for whole replies.
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
        self._retries = DEFAULT_MAX_RETRIES if max_retries is None else max_retries
        #: False: whole replies only ([models.X] stream = false); None: stream, falling back by itself.
        self._stream = stream
        self._api_key_env = api_key_env
        self._base_url_env = base_url_env
        self._client: AsyncOpenAI | None = None
        self._streamed_tool_call = False
        self._noticed = False

    @property
    def base_url(self) -> str:
        """The endpoint requests go to (explicit, then the environment, then OpenAI's)."""
        return self._base_url or os.environ.get(self._base_url_env) or DEFAULT_BASE_URL

    @property
    def streams_tools(self) -> bool | None:
        """True: a tool call came in a streamed reply; False: tool calls are asked for as whole
        replies (configured, or fallen back to); None: not known yet."""
        if self._stream is False or self.fell_back:
            return False
        return True if self._streamed_tool_call else None

    @property
    def fell_back(self) -> bool:
        """This endpoint could not stream a tool call, and gets whole replies from now on."""
        return self._endpoint in _WHOLE_REPLY_ENDPOINTS

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        # The SDK's first import and client (half a CPU-second, many seconds on a loaded machine)
        # are this process's start, not the server's answer: the call's deadline starts after.
        self._get_client().chat.completions  # noqa: B018 - reading it loads the SDK's chat part
        deadline = deadline_after(self._timeout)
        if not self._streams(request):
            if self._stream is None and not self._noticed:  # fallen back, maybe by another model
                self._noticed = True
                yield Notice(self._fallback_notice)
            async for item in self._whole(request, deadline):
                yield item
            return
        may_fall_back = self._stream is None and bool(request.tools)
        try:
            async for item in self._streamed(request, deadline, may_fall_back=may_fall_back):
                yield item
        except _CannotStream as exc:
            said = exc.said
        else:
            return
        # Nothing came, not even a piece: ask again at once for a whole reply. Only a server that
        # ended the body itself and then gives a tool call whole cannot stream one (a dropped
        # connection, or a text reply, says nothing about the server).
        items = [item async for item in self._whole(request, deadline)]
        if said and any(isinstance(item, ModelResponse) and item.message.tool_calls for item in items):
            _WHOLE_REPLY_ENDPOINTS.add(self._endpoint)
            if not self._noticed:
                self._noticed = True
                yield Notice(self._fallback_notice)
        for item in items:
            yield item

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # --- the two ways of asking ----------------------------------------------------------

    def _streams(self, request: ModelRequest) -> bool:
        if self._stream is None:
            return not (request.tools and self.fell_back)
        return self._stream

    async def _streamed(
        self, request: ModelRequest, deadline: float | None, *, may_fall_back: bool
    ) -> AsyncIterator[StreamItem]:
        reply = wire.ReplyAssembler()
        whole: str | None = None
        async with AsyncExitStack() as stack:
            response = await self._send(stack, request, streaming=True, deadline=deadline)
            label = response.headers.get("content-type", "")
            if "json" in label:
                # A server that ignores "stream": true and answers whole; the reply is just as good.
                whole = await self._read(response, deadline)
            else:
                lines = sse_lines(response.iter_bytes())
                events = await stack.enter_async_context(aclosing(sse_data(lines)))
                try:
                    async for delta in self._deltas(events, reply, deadline, may_fall_back=may_fall_back):
                        yield delta
                except WholeBodyError as exc:  # the same, labelled as something else
                    whole = exc.body
        if whole is not None:
            for item in self._whole_reply(whole, request):
                yield item
            return
        if not reply.complete and reply.chunks == 0 and label and "event-stream" not in label:
            # A web page or a plain text where events were asked for: another kind of server.
            raise self._not_a_stream(f"it answered {label.split(';')[0]} where an event stream was asked for")
        if not reply.complete:
            raise self._cut(reply, may_fall_back=may_fall_back, said=True, tools=bool(request.tools))
        for delta in reply.finish():
            yield delta
        response_item = reply.response(self.model, request)
        self._streamed_tool_call = self._streamed_tool_call or bool(response_item.message.tool_calls)
        yield response_item

    async def _deltas(
        self,
        events: AsyncIterator[str],
        reply: wire.ReplyAssembler,
        deadline: float | None,
        *,
        may_fall_back: bool,
    ) -> AsyncIterator[StreamItem]:
        """The pieces of a streamed reply as its events come, until ``[DONE]`` or the end."""
        import httpx2

        try:
            async for data in bounded(events, deadline, self._timeout_error):
                if data.strip() == DONE:
                    reply.done = True
                    return
                chunk = self._json(data, f"chunk {reply.chunks + 1}")
                if "error" in chunk and not chunk.get("choices"):
                    if may_fall_back and not reply.delivered:
                        raise _CannotStream(said=True)
                    raise self._failed(chunk["error"], "stream")
                for delta in reply.add_chunk(chunk):
                    yield delta
        except httpx2.TimeoutException as exc:  # a gap longer than the client's own timeout
            raise self._timeout_error() from exc
        except httpx2.TransportError as exc:  # the connection dropped while the reply came
            raise self._cut(reply, may_fall_back=may_fall_back, said=False, tools=False) from exc
        except LineTooLongError as exc:
            raise self._not_a_stream(str(exc)) from exc

    def _cut(self, reply: wire.ReplyAssembler, *, may_fall_back: bool, said: bool, tools: bool) -> Exception:
        """A stream that ended before its end: a server that cannot stream a tool choice when
        nothing came yet (and falling back is allowed), else a reply that broke off.

        ``said``: the server closed the body itself; ``tools``: the request offered tools.
        """
        if may_fall_back and not reply.delivered:
            return _CannotStream(said=said)
        error = self._broke_off(reply)
        if said and tools and not reply.delivered and self._stream is True:
            # stream = true was asked for, on a server that ends a streamed tool choice empty.
            error = ModelError(
                f"{error} The server may not stream tool calls (llama-cpp-python cannot): remove "
                f"stream = true from [models.{self.provider}] to let Steward ask it for whole replies.",
                provider=self.provider,
                retryable=True,
            )
        return error

    async def _whole(self, request: ModelRequest, deadline: float | None) -> AsyncIterator[StreamItem]:
        async with AsyncExitStack() as stack:
            response = await self._send(stack, request, streaming=False, deadline=deadline)
            raw = await self._read(response, deadline)
        for item in self._whole_reply(raw, request):
            yield item

    async def _read(self, response: AsyncAPIResponse[Any], deadline: float | None) -> str:
        import httpx2

        try:
            raw = await before(deadline, read_bounded(response.iter_bytes()), self._timeout_error)
        except httpx2.TimeoutException as exc:
            raise self._timeout_error() from exc
        except httpx2.TransportError as exc:
            raise self._broke_off(wire.ReplyAssembler()) from exc
        except LineTooLongError as exc:
            raise self._not_a_stream(str(exc)) from exc
        return raw.decode("utf-8", errors="replace")

    def _whole_reply(self, raw: str, request: ModelRequest) -> list[StreamItem]:
        """A whole reply's pieces: its reasoning and text at once, then the response."""
        body = self._json(raw, "whole reply")
        if "error" in body and not body.get("choices"):
            raise self._failed(body["error"], "reply")
        reply = wire.ReplyAssembler()
        return [*reply.add_whole(body), *reply.finish(), reply.response(self.model, request)]

    async def _send(
        self, stack: AsyncExitStack, request: ModelRequest, *, streaming: bool, deadline: float | None
    ) -> AsyncAPIResponse[Any]:
        """Send the request, again after what may pass (up to ``max_retries`` times); the
        response is open until ``stack`` closes."""
        import openai

        client = self._get_client()
        arguments = self._arguments(request, streaming)
        attempts = Attempts(self._retries, deadline)
        for attempt in attempts:
            call = client.chat.completions.with_streaming_response.create(**arguments)
            try:
                return await before(deadline, stack.enter_async_context(call), self._timeout_error)
            except openai.APIStatusError as exc:
                # A busy server (503 while it loads the model) says the same every time, and passes.
                repeated = attempts.repeated(exc.status_code, _detail(exc))
                error = self._status_error(exc, retries=attempt, repeated=repeated)
                # Kept with the failure: a wait past the call's deadline is left to the loop.
                error.retry_after = retry_after(exc.response.headers) or error.retry_after
                await attempts.after(error, attempt, exc.response.headers)
            except openai.APIConnectionError as exc:  # timeouts too
                # A server starting up or restarting may answer a moment later.
                await attempts.after(self._error(exc), attempt, worth_it=True)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _arguments(self, request: ModelRequest, streaming: bool) -> dict[str, Any]:
        import openai

        limit = openai.omit if request.max_tokens is None else request.max_tokens
        return {
            "model": self.model,
            "messages": wire.messages(request),
            "tools": wire.tools(request.tools) or openai.omit,
            # OpenAI's default when tools are offered; some servers show them only when named.
            "tool_choice": "auto" if request.tools else openai.omit,
            "stream": streaming,
            "stream_options": {"include_usage": True} if streaming else openai.omit,
            "temperature": openai.omit if request.temperature is None else request.temperature,
            # OpenAI's own API wants the newer name; other servers know the older one.
            "max_tokens": openai.omit if self._is_openai else limit,
            "max_completion_tokens": limit if self._is_openai else openai.omit,
        }

    # --- client and errors ---------------------------------------------------------------

    @property
    def _is_openai(self) -> bool:
        return self.base_url.rstrip("/") == DEFAULT_BASE_URL

    @property
    def _endpoint(self) -> tuple[str, str]:
        return self.base_url.rstrip("/"), self.model

    @property
    def _fallback_notice(self) -> str:
        label = self.provider
        return (
            f"{label}: {self.base_url} cannot stream tool calls; asking for whole replies from now on "
            f"(set stream = false in [models.{label}] to skip the first try)"
        )

    def _get_client(self) -> AsyncOpenAI:
        if self._client is None:
            import openai

            self._check_url()

            self._client = openai.AsyncOpenAI(
                api_key=self._resolve_api_key(),
                base_url=self.base_url,
                # Kept as the bound on each gap (connect, between two chunks); the deadline
                # bounds the whole call.
                timeout=openai.not_given if self._timeout is None else self._timeout,
                max_retries=0,  # retried here, so that one rule decides what is sent again
            )
        return self._client

    def check(self) -> None:
        self._check_url()
        self._resolve_api_key()

    def _check_url(self) -> None:
        """A base URL the HTTP client cannot even try (no scheme, a bad port) named as such."""
        from urllib.parse import urlsplit

        url, label = self.base_url, self.provider
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - reading it checks it
        except ValueError as exc:
            problem = str(exc).lower().rstrip(".")
        else:
            problem = "" if parts.scheme in ("http", "https") and parts.hostname else "not an http(s) URL"
        if problem:
            raise ModelError(
                f"{label}: the base URL {url!r} cannot be used ({problem}): set {self._base_url_env} "
                f"or base_url in [models.{label}] to http://HOST:PORT/v1.",
                provider=label,
            )

    async def probe(self) -> str:
        import openai

        self.check()
        bound = min(self._timeout or PROBE_TIMEOUT_S, PROBE_TIMEOUT_S)
        client = self._get_client().with_options(max_retries=0, timeout=bound)
        try:
            listed = await client.models.list()
        except openai.NotFoundError:  # a server without the list (some local ones) still answers
            return f"{self.base_url} answers"
        except openai.APITimeoutError as exc:  # its own bound, not the one of a model call
            raise timeout_error(self.provider, self.base_url, bound, what="the model list") from exc
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

    def _timeout_error(self) -> ModelError:
        return timeout_error(self.provider, self.base_url, self._timeout)

    def _json(self, data: str, what: str) -> dict[str, Any]:
        try:
            parsed = json.loads(data)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ModelError(
                f"{self.provider}: the reply from {self.base_url} is not what an OpenAI-compatible "
                f"server sends ({what} is not a JSON object): {' '.join(data.split())[:200]!r}",
                provider=self.provider,
                retryable=True,
            )
        return parsed

    def _broke_off(self, reply: wire.ReplyAssembler) -> ModelError:
        # Not a reply: whatever came is only the start of one (the README promises a retry).
        return ModelError(
            f"{self.provider}: the reply from {self.base_url} broke off after {reply.chunks} chunks "
            "(no finish_reason): the server closed the stream early; check its log if this repeats.",
            provider=self.provider,
            retryable=True,
        )

    def _not_a_stream(self, why: str) -> ModelError:
        return ModelError(
            f"{self.provider}: the reply from {self.base_url} is not what an OpenAI-compatible server "
            f"sends ({why}): check base_url in [models.{self.provider}].",
            provider=self.provider,
        )

    def _failed(self, error: object, what: str) -> ModelError:
        """An error object in place of a reply; one whose words call the request invalid is final."""
        fields: Mapping[Any, Any] = error if isinstance(error, Mapping) else {"message": error}
        detail, code = str(fields.get("message") or error), fields.get("code")
        status = code if isinstance(code, int) else 0
        invalid = is_invalid_request(status, detail, str(fields.get("type") or ""))
        return ModelError(
            f"{self.provider}: the {what} failed: {readable(detail)}"
            + (": the server calls the request invalid, so it is not sent again" if invalid else ""),
            provider=self.provider,
            retryable=not invalid,
        )

    def _status_error(self, exc: APIStatusError, *, retries: int, repeated: bool) -> ModelError:
        return status_error(self.provider, exc.status_code, _detail(exc), retries=retries,
                            key_env=self._api_key_env, model=self.model, url=self.base_url,
                            kind=exc.type, repeated=repeated and exc.status_code >= 500)  # fmt: skip

    def _error(self, exc: APIError) -> ModelError:
        """One line naming the fix, for an error of the SDK's."""
        import openai

        label, url = self.provider, self.base_url
        if isinstance(exc, openai.APITimeoutError):
            return timeout_error(label, url, self._timeout)
        if isinstance(exc, openai.APIConnectionError):
            return unreachable_error(label, url, self._base_url_env, retryable=not _is_connect_error(exc))
        if isinstance(exc, openai.APIStatusError):
            return self._status_error(exc, retries=0, repeated=False)
        return ModelError(
            f"{label}: the stream failed: {readable(_detail(exc))}", provider=label, retryable=True
        )


def _detail(exc: APIError) -> str:
    """The server's own error message, on one line."""
    body = exc.body
    text: object = exc.message
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            text = inner["message"]
        elif isinstance(inner, str) and inner:
            text = inner
    return str(text)[:4000]  # whole: status_error makes it readable (pydantic lists run long)


def _is_connect_error(exc: BaseException) -> bool:
    import httpx2

    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, httpx2.ConnectError):
            return True
        cause = cause.__cause__
    return False
