"""A loopback LLM server that speaks the OpenAI and Anthropic wire formats.

``FakeLLMServer`` is a real HTTP server on 127.0.0.1 (an ephemeral port) so provider code is
tested through the official SDKs, their retries and a real socket. Replies are scripted in a
neutral form (``FakeReply``) and served in order, whichever API asks:

* ``POST …/chat/completions`` answers in the OpenAI Chat Completions format: streamed as
  ``data: {chunk}`` lines with text, reasoning and tool-call fragments split over several
  chunks, a usage chunk when ``stream_options.include_usage`` is set, then ``data: [DONE]``;
  or one JSON body when not streaming.
* ``POST …/messages`` answers in the Anthropic Messages format: ``message_start``,
  ``content_block_*`` events with ``text_delta`` / ``thinking_delta`` / ``signature_delta`` /
  ``input_json_delta`` pieces, ``message_delta`` with usage and ``message_stop``; or JSON.

A reply can instead be an HTTP error with the provider's real error body
(``FakeReply.error(429, headers={"retry-after-ms": "10"})``), arrive late (``delay``), stall in
the middle of a stream (``stall``), break off with an in-stream error (``stream_error``), break
off with no end at all (``cut_after``), trickle forever (``trickle``), leave out its usage
(``usage=False``) or carry malformed tool-call arguments (a string). A request's ``max_tokens``
is honoured: a longer reply stops there with the "length" finish reason.
"Fail K times, then succeed" is K error replies followed by a good one. Every request is
recorded in ``server.requests`` (path, lower-cased headers, JSON body).

``FakeLLMServer(quirks=...)`` makes the Chat Completions endpoint behave like a local server
(``LLAMA_CPP_PYTHON`` is all of them, as llama-cpp-python 0.3 with chatml-function-calling):

* ``null_content_refused``: a message whose ``content`` is null gets HTTP 500 with a
  pydantic-style validation body; the scripted reply waits for the next request.
* ``tools_need_choice``: tools without ``tool_choice`` are not shown to the model, so the
  reply's tool calls are dropped (its text, or ``NO_TOOLS_TEXT``, is the answer).
* ``no_stream_with_tools``: a streamed request with tools and ``tool_choice`` whose reply
  calls a tool gets 200 with event-stream headers and then a closed, empty body (the server
  cannot stream a tool choice); the scripted reply waits for the next request. A text reply
  streams normally.
* ``stream_ignored``: every request gets one JSON body, ``"stream": true`` or not (as some
  proxies and older servers answer).

Every wait is bounded: delays and stalls end early when the server closes, and sockets time
out after ``SOCKET_TIMEOUT`` seconds. Closing the server joins all of its threads.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self, get_args

__all__ = [
    "LLAMA_CPP_PYTHON",
    "NO_TOOLS_TEXT",
    "QUIRKS",
    "FakeLLMServer",
    "FakeReply",
    "FakeToolCall",
    "Quirk",
    "RecordedRequest",
]

SOCKET_TIMEOUT = 10.0
# A trickling reply stops after this many pieces even if nobody closes it (a bound, not a plan).
TRICKLE_MOST = 100_000

Quirk = Literal["null_content_refused", "tools_need_choice", "no_stream_with_tools", "stream_ignored"]
QUIRKS: frozenset[Quirk] = frozenset(get_args(Quirk))
LLAMA_CPP_PYTHON: frozenset[Quirk] = frozenset(
    {"null_content_refused", "tools_need_choice", "no_stream_with_tools"}
)
#: What a model answers when ``tools_need_choice`` hid the tools it was scripted to call.
NO_TOOLS_TEXT = "I have no tools to call."

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
    breaks a stream off after its first event with the provider's in-stream error.

    Both wire formats: ``cut_after=N`` sends the first N chunks (OpenAI) or events (Anthropic)
    then closes the connection with no end (no finish reason, no ``[DONE]``; no
    ``message_delta``/``message_stop``). ``trickle`` (seconds) starts the text and then sends
    one more piece of it every ``trickle`` seconds until the client or the server closes.
    ``usage=False`` leaves usage out everywhere. ``honour_max_tokens`` (on) stops a reply
    longer than the request's ``max_tokens`` (counted in pieces) there, with the "length" /
    "max_tokens" reason, as ``truncated=True`` does for any reply. OpenAI only:
    ``send_done=False`` ends a complete stream without ``data: [DONE]``, ``send_finish=False``
    without a finish reason.
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

    @classmethod
    def error(
        cls, status: int, message: str = "", *, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> FakeReply:
        """An HTTP error reply with the provider's error body."""
        return cls(status=status, error_message=message, headers=dict(headers or {}), delay=delay)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What a client sent: method, path, headers (lower-case names) and the JSON body."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: JSON


class FakeLLMServer:
    """Serve scripted replies over HTTP on 127.0.0.1; use as a context manager."""

    def __init__(self, replies: Iterable[FakeReply] = (), *, quirks: Iterable[Quirk] = ()) -> None:
        self.quirks: frozenset[Quirk] = frozenset(quirks)
        unknown = self.quirks - QUIRKS
        if unknown:
            raise ValueError(f"unknown quirks {sorted(unknown)}: choose from {sorted(QUIRKS)}")
        self.requests: list[RecordedRequest] = []
        self._replies: deque[FakeReply] = deque(replies)
        self._served = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        if self._httpd is not None:
            raise RuntimeError("FakeLLMServer is already started")
        self._closing.clear()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="FakeLLMServer",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, end pending delays and join every thread (handlers included)."""
        if self._httpd is None:
            return
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=SOCKET_TIMEOUT)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- what tests use ----------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not started; use `with FakeLLMServer(...) as server:`")
        return int(self._httpd.server_address[1])

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def remaining(self) -> int:
        """Scripted replies not served yet."""
        with self._lock:
            return len(self._replies)

    def add(self, *replies: FakeReply) -> None:
        with self._lock:
            self._replies.extend(replies)

    # --- used by the handler -----------------------------------------------------------

    def _take(self, request: RecordedRequest, *, consume: bool) -> tuple[int, FakeReply | None]:
        with self._lock:
            self.requests.append(request)
            if not consume:
                return self._served, None
            self._served += 1
            reply = self._replies.popleft() if self._replies else None
            return self._served, reply

    def _put_back(self, reply: FakeReply) -> None:
        """A reply the server refused to give stays first for the next request."""
        with self._lock:
            self._replies.appendleft(reply)

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when the server is closing."""
        return seconds <= 0 or not self._closing.wait(seconds)


class _HTTPServer(ThreadingHTTPServer):
    # Handler threads are joined on close (non-daemon, block_on_close) so none outlives a test.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], fake: FakeLLMServer) -> None:
        super().__init__(address, handler)
        self.fake = fake

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (timeout tests do) is expected; anything else is a bug to show.
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_GET(self) -> None:
        self._send_json(404, _no_route("GET", self.path))

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        recorded = RecordedRequest(
            method="POST",
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        route = self.path.split("?")[0].rstrip("/")
        anthropic = route.endswith("/messages")
        known = anthropic or route.endswith("/chat/completions")
        refusal = None if anthropic else _null_content_refusal(fake.quirks, body)
        served, reply = fake._take(recorded, consume=known and refusal is None)
        if not known:
            self._send_json(404, _no_route("POST", self.path))
            return
        if refusal is not None:
            self._send_json(500, refusal)
            return
        if reply is None:
            reply = FakeReply.error(400, f"FakeLLMServer: no scripted reply left for request #{served}")
        if not fake._wait(reply.delay):
            return
        model = str(body.get("model", "fake-model"))
        if reply.status != 200:
            error = _anthropic_error if anthropic else _openai_error
            self._send_json(reply.status, error(reply, model), reply.headers)
            return
        scripted = reply
        reply = _limited(reply if anthropic else _tools_hidden(fake.quirks, body, reply), body)
        if not body.get("stream") or (not anthropic and "stream_ignored" in fake.quirks):
            build = _anthropic_message if anthropic else _openai_completion
            self._send_json(200, build(reply, model, served), reply.headers)
        elif anthropic:
            self._send_stream(_anthropic_sse(reply, model, served), reply, _anthropic_trickle(reply))
        elif _cannot_stream(fake.quirks, body, reply):
            fake._put_back(scripted)
            self._send_stream([], reply, None)
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = _openai_sse(reply, model, served, include_usage)
            self._send_stream(events, reply, _openai_trickle(reply, model, served))

    def _send_json(self, status: int, payload: JSON, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_stream(self, events: list[str], reply: FakeReply, repeat: str | None) -> None:
        # No Content-Length: the body ends when the connection closes, as SSE over HTTP/1.1 may.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        for number, event in enumerate(events):
            self.wfile.write(event.encode())
            self.wfile.flush()
            if number == 0 and not self.server.fake._wait(reply.stall):
                return
        if reply.trickle <= 0 or repeat is None:
            return
        # Ends when the client hangs up (the write fails) or the server closes.
        for _ in range(TRICKLE_MOST):
            if not self.server.fake._wait(reply.trickle):
                return
            self.wfile.write(repeat.encode())
            self.wfile.flush()


# --- wire formats ---------------------------------------------------------------------------


def _no_route(method: str, path: str) -> JSON:
    return {"error": {"message": f"FakeLLMServer: no route for {method} {path}", "type": "not_found"}}


# --- quirks and limits ----------------------------------------------------------------------


def _null_content_refusal(quirks: frozenset[Quirk], body: JSON) -> JSON | None:
    """llama-cpp-python's answer to a null ``content``: its pydantic errors in a 500 body."""
    if "null_content_refused" not in quirks:
        return None
    messages = body.get("messages") or []
    nulls = [
        n for n, m in enumerate(messages) if isinstance(m, dict) and "content" in m and m["content"] is None
    ]
    if not nulls:
        return None
    lines = [
        f"  {{'type': 'string_type', 'loc': ('body', 'messages', {n}, "
        f"'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', "
        f"'input': None}}"
        for n in nulls
    ]
    plural = "s" if len(nulls) > 1 else ""
    message = f"{len(nulls)} validation error{plural}:\n" + "\n".join(lines)
    return {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}}


def _tools_hidden(quirks: frozenset[Quirk], body: JSON, reply: FakeReply) -> FakeReply:
    """Without ``tool_choice`` such a server never shows the tools: no call can come back."""
    if "tools_need_choice" not in quirks or not body.get("tools") or body.get("tool_choice"):
        return reply
    if not reply.tool_calls:
        return reply
    return replace(reply, tool_calls=(), text=reply.text or NO_TOOLS_TEXT)


def _cannot_stream(quirks: frozenset[Quirk], body: JSON, reply: FakeReply) -> bool:
    choice = body.get("tool_choice")
    return (
        "no_stream_with_tools" in quirks
        and bool(body.get("tools"))
        and choice not in (None, "none")
        and bool(reply.tool_calls)
    )


def _limited(reply: FakeReply, body: JSON) -> FakeReply:
    """The reply as a server that honours ``max_tokens`` (counted in pieces) would give it."""
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if not reply.honour_max_tokens or not isinstance(limit, int) or limit <= 0:
        return reply
    thinking = _pieces(reply.thinking, reply.piece)
    text = _pieces(reply.text, reply.piece)
    calls = sum(1 + len(_pieces(c.raw_arguments(), reply.piece)) for c in reply.tool_calls)
    if len(thinking) + len(text) + calls <= limit:
        return reply
    kept_text = text[: max(limit - len(thinking), 0)]
    return replace(
        reply,
        thinking="".join(thinking[:limit]),
        text="".join(kept_text),
        tool_calls=(),
        truncated=True,
        output_tokens=min(reply.output_tokens, limit),
    )


# --- OpenAI Chat Completions ------------------------------------------------------------------


def _openai_sse(reply: FakeReply, model: str, served: int, include_usage: bool) -> list[str]:
    chunks = _openai_chunks(reply, model, served, include_usage)
    if reply.cut_after is not None or reply.trickle > 0:
        # The chunks before the finish chunk, and no end: the connection just closes.
        cut = _openai_chunks(reply, model, served, False)[:-1]
        kept = cut[:1] if reply.trickle > 0 else cut[: reply.cut_after]
        return [f"data: {json.dumps(chunk)}\n\n" for chunk in kept]
    if reply.stream_error:
        message = reply.error_message or f"fake {reply.stream_error}"
        chunks = [chunks[0], {"error": {"message": message, "type": reply.stream_error, "code": None}}]
    done = ["data: [DONE]\n\n"] if reply.send_done else []
    return [*(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks), *done]


def _openai_trickle(reply: FakeReply, model: str, served: int) -> str | None:
    if reply.trickle <= 0:
        return None
    piece = (reply.text or "and so on ")[: max(reply.piece, 1)]
    base = {"id": f"chatcmpl-fake{served}", "object": "chat.completion.chunk", "created": 0, "model": model}
    chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
    return f"data: {json.dumps(chunk)}\n\n"


def _anthropic_sse(reply: FakeReply, model: str, served: int) -> list[str]:
    events = _anthropic_events(reply, model, served)
    if reply.trickle > 0:
        head = {"type": "text", "text": ""}
        events = [
            events[0],
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": head}),
        ]
    elif reply.cut_after is not None:
        end = next(n for n, (name, _) in enumerate(events) if name == "message_delta")
        events = events[:end][: reply.cut_after]
    if reply.stream_error:
        message = reply.error_message or f"fake {reply.stream_error}"
        error = {"type": "error", "error": {"type": reply.stream_error, "message": message}}
        events = [events[0], ("error", error)]
    return [_sse_event(name, data) for name, data in events]


def _anthropic_trickle(reply: FakeReply) -> str | None:
    if reply.trickle <= 0:
        return None
    delta = {"type": "text_delta", "text": (reply.text or "and so on ")[: max(reply.piece, 1)]}
    return _sse_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})


def _sse_event(name: str, data: JSON) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _pieces(text: str, size: int) -> list[str]:
    size = max(size, 1)
    return [text[start : start + size] for start in range(0, len(text), size)]


def _openai_usage(reply: FakeReply) -> JSON:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
    }


def _openai_call_id(call: FakeToolCall, served: int, position: int) -> str:
    return call.id or f"call_fake_{served}_{position}"


def _openai_chunks(reply: FakeReply, model: str, served: int, include_usage: bool) -> list[JSON]:
    base = {"id": f"chatcmpl-fake{served}", "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: JSON, finish_reason: str | None = None) -> JSON:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({reply.reasoning_field: piece}) for piece in _pieces(reply.thinking, reply.piece)]
    chunks += [chunk({"content": piece}) for piece in _pieces(reply.text, reply.piece)]
    for position, call in enumerate(reply.tool_calls):
        arguments = call.raw_arguments()
        head: JSON = {"index": position, "type": "function", "function": {"name": call.name, "arguments": ""}}
        if reply.tool_call_ids:
            head["id"] = _openai_call_id(call, served, position)
        if reply.whole_tool_calls:
            head["function"]["arguments"] = arguments
            chunks.append(chunk({"tool_calls": [head]}))
            continue
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [
            chunk({"tool_calls": [{"index": position, "function": {"arguments": piece}}]})
            for piece in _pieces(arguments, reply.piece)
        ]
    chunks.append(chunk({}, _openai_finish(reply) if reply.send_finish else None))
    if include_usage and reply.usage:
        chunks.append({**base, "choices": [], "usage": _openai_usage(reply)})
    return chunks


def _openai_finish(reply: FakeReply) -> str:
    return "length" if reply.truncated else "tool_calls" if reply.tool_calls else "stop"


def _openai_completion(reply: FakeReply, model: str, served: int) -> JSON:
    message: JSON = {"role": "assistant", "content": reply.text or None}
    if reply.thinking:
        message[reply.reasoning_field] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _openai_call_id(call, served, position),
                "type": "function",
                "function": {"name": call.name, "arguments": call.raw_arguments()},
            }
            for position, call in enumerate(reply.tool_calls)
        ]
    completion: JSON = {
        "id": f"chatcmpl-fake{served}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(reply)}],
    }
    if reply.usage:
        completion["usage"] = _openai_usage(reply)
    return completion


_OPENAI_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def _openai_error(reply: FakeReply, model: str) -> JSON:
    kind, code = _OPENAI_ERRORS.get(reply.status, ("server_error", None))
    default = {
        401: "Incorrect API key provided.",
        404: f"The model `{model}` does not exist or you do not have access to it.",
        429: "Rate limit reached for requests.",
    }.get(reply.status, f"The server had an error ({reply.status}) while processing your request.")
    return {"error": {"message": reply.error_message or default, "type": kind, "param": None, "code": code}}


_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _anthropic_error(reply: FakeReply, model: str) -> JSON:
    kind = _ANTHROPIC_ERRORS.get(reply.status, "api_error")
    default = {401: "invalid x-api-key", 404: f"model: {model}", 529: "Overloaded"}.get(
        reply.status, f"fake {kind} ({reply.status})"
    )
    return {"type": "error", "error": {"type": kind, "message": reply.error_message or default}}


def _anthropic_usage(reply: FakeReply, output_tokens: int) -> JSON:
    return {
        "input_tokens": reply.input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": reply.cached_tokens,
        "cache_creation_input_tokens": reply.cache_write_tokens,
    }


def _anthropic_blocks(reply: FakeReply, served: int) -> list[tuple[JSON, JSON, list[JSON]]]:
    """Each content block as (complete block, block at ``content_block_start``, its deltas)."""
    blocks: list[tuple[JSON, JSON, list[JSON]]] = []
    if reply.thinking:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(reply.thinking, reply.piece)]
        if reply.signature:
            deltas.append({"type": "signature_delta", "signature": reply.signature})
        full = {"type": "thinking", "thinking": reply.thinking, "signature": reply.signature}
        blocks.append((full, {"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if reply.redacted_thinking:
        redacted = {"type": "redacted_thinking", "data": reply.redacted_thinking}
        blocks.append((redacted, redacted, []))
    if reply.text:
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(reply.text, reply.piece)]
        blocks.append(({"type": "text", "text": reply.text}, {"type": "text", "text": ""}, deltas))
    for position, call in enumerate(reply.tool_calls):
        start = {"type": "tool_use", "id": call.id or f"toolu_fake_{served}_{position}", "name": call.name}
        pieces = _pieces(call.raw_arguments(), reply.piece)
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        blocks.append(({**start, "input": call.input_object()}, {**start, "input": {}}, deltas))
    return blocks


def _anthropic_events(reply: FakeReply, model: str, served: int) -> list[tuple[str, JSON]]:
    message = _anthropic_message(reply, model, served)
    start = {**message, "content": [], "stop_reason": None}
    if reply.usage:
        start["usage"] = _anthropic_usage(reply, 1)
    events: list[tuple[str, JSON]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, (_, block, deltas) in enumerate(_anthropic_blocks(reply, served)):
        start_event = {"type": "content_block_start", "index": index, "content_block": block}
        events.append(("content_block_start", start_event))
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    delta: JSON = {"type": "message_delta", "delta": stop}
    if reply.usage:
        delta["usage"] = {"output_tokens": reply.output_tokens}
    events.append(("message_delta", delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _anthropic_message(reply: FakeReply, model: str, served: int) -> JSON:
    stop = "max_tokens" if reply.truncated else "tool_use" if reply.tool_calls else "end_turn"
    message: JSON = {
        "id": f"msg_fake{served}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [full for full, _, _ in _anthropic_blocks(reply, served)],
        "stop_reason": stop,
        "stop_sequence": None,
    }
    if reply.usage:
        message["usage"] = _anthropic_usage(reply, reply.output_tokens)
    return message
