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

``POST …/embeddings`` answers in the OpenAI embeddings format with ``hash_vectors`` of its
``input`` (a string or a list of strings) in ``embed_dim`` dimensions, and takes no scripted
reply: the chat script is not disturbed by it. ``fail_embeddings(K, status)`` makes the next K
such requests fail (with the OpenAI error body, or ``body`` verbatim as a web page, 200 too);
``embed_reversed`` lists the vectors last first, each with its index, as some servers answer.

``FakeLLMServer(quirks=...)`` makes the Chat Completions endpoint behave like a local server
(``LLAMA_CPP_PYTHON``: the first three, as llama-cpp-python 0.3 with chatml-function-calling):

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
* ``json_as_events``: as ``stream_ignored``, but a streamed request's JSON body is labelled
  ``text/event-stream`` (a proxy that keeps the header of the stream it was asked for).

Every wait is bounded: delays and stalls end early when the server closes, and sockets time
out after ``SOCKET_TIMEOUT`` seconds. Closing the server joins all of its threads.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self, get_args

from ._fake_script import JSON, FakeReply, FakeToolCall, pieces
from ._fake_wire import (
    anthropic_error,
    anthropic_message,
    anthropic_sse,
    anthropic_trickle,
    openai_completion,
    openai_embeddings,
    openai_error,
    openai_sse,
    openai_trickle,
)
from .fake_embed import hash_vectors

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

Quirk = Literal[
    "null_content_refused", "tools_need_choice", "no_stream_with_tools", "stream_ignored", "json_as_events"
]
QUIRKS: frozenset[Quirk] = frozenset(get_args(Quirk))
LLAMA_CPP_PYTHON: frozenset[Quirk] = frozenset(
    {"null_content_refused", "tools_need_choice", "no_stream_with_tools"}
)
#: What a model answers when ``tools_need_choice`` hid the tools it was scripted to call.
NO_TOOLS_TEXT = "I have no tools to call."


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What a client sent: method, path, headers (lower-case names) and the JSON body."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: JSON


class FakeLLMServer:
    """Serve scripted replies over HTTP on 127.0.0.1; use as a context manager."""

    def __init__(
        self,
        replies: Iterable[FakeReply] = (),
        *,
        quirks: Iterable[Quirk] = (),
        embed_dim: int = 256,
        embed_reversed: bool = False,
    ) -> None:
        self.quirks: frozenset[Quirk] = frozenset(quirks)
        self.embed_dim, self.embed_reversed = embed_dim, embed_reversed
        self._embed_failures: deque[tuple[int, dict[str, str], str | None]] = deque()
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

    def fail_embeddings(
        self,
        times: int,
        status: int = 503,
        *,
        headers: Mapping[str, str] | None = None,
        body: str | None = None,
    ) -> None:
        """The next ``times`` embedding requests get ``status`` (and ``body`` as text/html, if given)."""
        with self._lock:
            self._embed_failures.extend([(status, dict(headers or {}), body)] * times)

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.split("?")[0].rstrip("/").endswith("/embeddings")]

    # --- used by the handler -----------------------------------------------------------

    def _embed_failure(self) -> tuple[int, dict[str, str], str | None] | None:
        with self._lock:
            return self._embed_failures.popleft() if self._embed_failures else None

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
        if route.endswith("/embeddings"):
            fake._take(recorded, consume=False)
            self._embeddings(body)
            return
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
            error = anthropic_error if anthropic else openai_error
            self._send_json(reply.status, error(reply, model), reply.headers)
            return
        scripted = reply
        reply = _limited(reply if anthropic else _tools_hidden(fake.quirks, body, reply), body)
        whole = {"stream_ignored", "json_as_events"} & fake.quirks
        if not body.get("stream") or (not anthropic and whole):
            build = anthropic_message if anthropic else openai_completion
            label = "text/event-stream" if body.get("stream") and "json_as_events" in whole else None
            self._send_json(200, build(reply, model, served), reply.headers, content_type=label)
        elif anthropic:
            self._send_stream(anthropic_sse(reply, model, served), reply, anthropic_trickle(reply))
        elif _cannot_stream(fake.quirks, body, reply):
            fake._put_back(scripted)
            self._send_stream([], reply, None)
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = openai_sse(reply, model, served, include_usage)
            self._send_stream(events, reply, openai_trickle(reply, model, served))

    def _embeddings(self, body: JSON) -> None:
        fake = self.server.fake
        model = str(body.get("model", "fake-embed"))
        failure = fake._embed_failure()
        if failure is not None:
            status, headers, page = failure
            if page is None:
                self._send_json(status, openai_error(FakeReply.error(status), model), headers)
            else:
                self._send_body(status, page.encode(), headers, "text/html; charset=utf-8")
            return
        given = body.get("input")
        texts = [given] if isinstance(given, str) else given
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            refusal = FakeReply.error(400, "'input' must be a string or a non-empty array of strings")
            self._send_json(400, openai_error(refusal, model))
            return
        vectors = hash_vectors(texts, fake.embed_dim)
        self._send_json(200, openai_embeddings(texts, vectors, model, reverse=fake.embed_reversed))

    def _send_json(
        self,
        status: int,
        payload: JSON,
        headers: Mapping[str, str] | None = None,
        *,
        content_type: str | None = None,
    ) -> None:
        self._send_body(status, json.dumps(payload).encode(), headers, content_type or "application/json")

    def _send_body(
        self, status: int, data: bytes, headers: Mapping[str, str] | None, content_type: str
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_stream(self, events: list[str], reply: FakeReply, repeat: str | None) -> None:
        if reply.drop_after is not None:
            self._send_dropped(events[: reply.drop_after])
            return
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

    def _send_dropped(self, events: list[str]) -> None:
        """``events`` as chunks of a chunked body whose last chunk never comes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        for event in events:
            data = event.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
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
    thinking = pieces(reply.thinking, reply.piece)
    text = pieces(reply.text, reply.piece)
    calls = sum(1 + len(pieces(c.raw_arguments(), reply.piece)) for c in reply.tool_calls)
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
