"""How a streamed body is cut into lines and events, and what a body that is no stream becomes.

The reader (``_sse``) is fed bytes split where a network may split them; then the provider reads
such bodies from the fake server over a real socket.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from steward.errors import ModelError
from steward.models._sse import LineTooLongError, WholeBodyError, sse_data, sse_lines
from steward.models.base import ModelRequest, ToolSpec, UserMessage
from steward.models.openai_chat import OpenAIChatModel
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall

from .conftest import NEVER, Closing, MakeOpenAI, items_of, reply_of

LS = ToolSpec("ls", "List a directory.", {"type": "object", "properties": {"path": {"type": "string"}}})


async def _reads(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def lines_of(*parts: bytes, most: int = 1 << 20) -> list[str]:
    return [line async for line in sse_lines(_reads(*parts), most)]


async def events_of(*parts: bytes) -> list[str]:
    return [data async for data in sse_data(sse_lines(_reads(*parts)))]


# --- lines ----------------------------------------------------------------------------------


async def test_lines_end_only_at_cr_and_lf_never_at_unicode_line_separators() -> None:
    text = 'data: {"t": "a\u2028b\u0085c\u2029d\x0ce"}'
    assert await lines_of(text.encode() + b"\n") == [text]


async def test_a_crlf_split_between_two_reads_is_one_line_end() -> None:
    # A stray empty line would end the event early and split its two data lines in two events.
    assert await events_of(b"data: a\r", b"\ndata: b\r\n\r\n") == ["a\nb"]


async def test_a_character_split_between_two_reads_is_whole_again() -> None:
    encoded = "data: é€😀\n".encode()
    assert await lines_of(*(encoded[n : n + 1] for n in range(len(encoded)))) == ["data: é€😀"]


async def test_lone_cr_line_ends_and_a_last_line_without_end_are_lines() -> None:
    assert await lines_of(b"one\rtwo\r\nthree\nfour\r") == ["one", "two", "three", "four"]
    assert await lines_of(b"one\n", b"last") == ["one", "last"]


async def test_a_line_that_never_ends_is_bounded() -> None:
    with pytest.raises(LineTooLongError, match="longer than 1,024 bytes"):
        await lines_of(*([b"x" * 100] * 20), most=1024)


# --- events ---------------------------------------------------------------------------------


async def test_comments_event_and_id_fields_and_a_bom_are_skipped() -> None:
    body = "\ufeff: ping\r\nevent: message\r\nid: 7\r\ndata: one\r\n\r\n: ping\r\ndata:two\r\n\r\n"
    assert await events_of(body.encode()) == ["one", "two"]


async def test_a_body_that_opens_a_json_object_is_given_whole() -> None:
    with pytest.raises(WholeBodyError) as caught:
        await events_of(b'\n{"choices": [\n  {"index": 0}\n]}\n')
    assert caught.value.body == '{"choices": [\n  {"index": 0}\n]}'


# --- over a socket --------------------------------------------------------------------------


def ask(*, tools: Sequence[ToolSpec] = ()) -> ModelRequest:
    return ModelRequest(system="Be brief.", messages=[UserMessage("hi")], tools=list(tools))


async def test_a_reply_holding_unicode_line_separators_arrives_whole(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    text = "One\u2028two\u0085three\u2029four."  # sent as UTF-8, as llama.cpp's server does
    server.add(FakeReply(text=text, piece=3))
    assert reply_of(await items_of(make_openai(), ask())).message.text == text


async def test_a_json_body_labelled_as_an_event_stream_is_read_whole(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.quirks = frozenset({"json_as_events"})
    server.add(FakeReply(text="All at once.", tool_calls=[FakeToolCall("ls")]))
    response = reply_of(await items_of(make_openai(), ask(tools=[LS])))
    assert response.message.text == "All at once." and response.message.tool_calls[0].name == "ls"
    assert len(server.requests) == 1 and server.requests[0].body["stream"]


async def test_an_error_object_calling_the_request_invalid_is_not_retryable(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    message = "1 validation error: field required: messages.2.content"
    server.add(FakeReply(stream_error="invalid_request_error", error_message=message))
    with pytest.raises(ModelError, match="calls the request invalid") as caught:
        await items_of(make_openai(), ask())
    assert not caught.value.retryable


async def test_an_error_object_of_a_busy_server_stays_retryable(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.add(FakeReply(stream_error="server_error", error_message="the slot was cancelled"))
    with pytest.raises(ModelError, match="the slot was cancelled") as caught:
        await items_of(make_openai(), ask())
    assert caught.value.retryable


async def test_an_error_field_is_given_as_the_error_object_other_servers_send() -> None:
    body = b'data: {"choices": []}\n\nerror: {"code": 400, "message": "too long"}\n\nerror: plain words\n\n'
    assert await events_of(body) == [
        '{"choices": []}',
        '{"error": {"code": 400, "message": "too long"}}',
        '{"error": "plain words"}',
    ]


async def test_llama_cpp_s_error_line_reaches_the_user_with_the_server_s_words(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    # llama.cpp's server sends a prompt over its context this way once the stream has begun:
    # the words are the fix, and asking again cannot help.
    message = "the request exceeds the available context size, try increasing it"
    server.add(FakeReply(stream_error="exceed_context_size_error", error_message=message, error_field=True))
    with pytest.raises(ModelError, match="exceeds the available context size") as caught:
        await items_of(make_openai(), ask())
    assert not caught.value.retryable


class _WebPage(BaseHTTPRequestHandler):
    """A web server at the base URL (a chat UI's, say): a page for every request."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        page = b"<!DOCTYPE html>\n<html><body>Welcome</body></html>\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def web_page() -> Iterator[str]:
    with ThreadingHTTPServer(("127.0.0.1", 0), _WebPage) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        finally:
            httpd.shutdown()
            thread.join(NEVER)


async def test_a_web_page_where_a_stream_was_asked_for_names_base_url(
    web_page: str, closing: Closing
) -> None:
    model = closing(OpenAIChatModel("m", base_url=web_page, timeout=5, max_retries=0))
    with pytest.raises(
        ModelError, match=r"answered text/html where an event stream .* check base_url"
    ) as caught:
        await items_of(model, ask())
    assert not caught.value.retryable


async def test_an_error_event_s_data_is_given_as_an_error_object() -> None:
    body = (
        b'event: error\ndata: {"message": "upstream timed out"}\n\n'
        b'event: error\ndata: {"error": {"message": "already wrapped"}}\n\n'
        b"event: message\ndata: {}\n\n"
    )
    assert await events_of(body) == [
        '{"error": {"message": "upstream timed out"}}',
        '{"error": {"message": "already wrapped"}}',
        "{}",
    ]


class _GzipStream(BaseHTTPRequestHandler):
    """A proxy that compresses the event stream it passes on (Content-Encoding: gzip)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Packed "}}]},
            {"choices": [{"index": 0, "delta": {"content": "and sent."}, "finish_reason": "stop"}]},
        ]
        events = "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks) + "data: [DONE]\r\n\r\n"
        body = gzip.compress(events.encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


async def test_a_compressed_event_stream_is_read_as_events(closing: Closing) -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), _GzipStream) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        try:
            url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
            model = closing(OpenAIChatModel("m", base_url=url, timeout=5, max_retries=0))
            response = reply_of(await items_of(model, ask()))
        finally:
            httpd.shutdown()
            thread.join(NEVER)
    assert response.message.text == "Packed and sent." and response.stop_reason == "stop"
