"""Reading server-sent events ourselves, so that how a stream ended is known.

An SDK's stream iterator stops the same way whether the server said ``data: [DONE]`` or just
closed the connection halfway through a reply; the difference is whether there is a reply at
all. ``sse_lines`` cuts the body into lines and ``sse_data`` yields each event's ``data`` as
the server sent it and nothing else.

Lines end at ``\\r\\n``, ``\\r`` or ``\\n`` and nowhere else: a general line splitter also
breaks at U+2028, U+0085 and the like, which JSON carries unescaped inside a string (servers
that send UTF-8 as it is, llama.cpp's and vLLM's, do), and a reply whose text held one would
arrive as two halves of a chunk that are neither JSON. A line is bounded: a body that never
breaks its lines is not an event stream, and is not kept in memory whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator

__all__ = [
    "DONE",
    "MOST_LINE_BYTES",
    "LineTooLongError",
    "WholeBodyError",
    "read_bounded",
    "sse_data",
    "sse_lines",
]

#: What OpenAI-compatible servers send as the last event of a complete stream.
DONE = "[DONE]"

#: The longest line kept (and the largest JSON body read in its place): far above any chunk a
#: model sends, a whole tool call writing a large file included.
MOST_LINE_BYTES = 16 * 1024 * 1024

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = "\ufeff"


class LineTooLongError(Exception):
    """A line of the body passed ``MOST_LINE_BYTES`` (or a JSON body did) without ending."""


class WholeBodyError(Exception):
    """The body is one JSON document, not events (some proxies ignore ``"stream": true``)."""

    def __init__(self, body: str) -> None:
        super().__init__("the body is one JSON document")
        self.body = body


async def sse_lines(chunks: AsyncIterator[bytes], most: int = MOST_LINE_BYTES) -> AsyncGenerator[str, None]:
    """The lines of a body read in ``chunks`` (split anywhere), without their line ends.

    Split on bytes: a ``\\r`` or ``\\n`` byte is never part of a longer UTF-8 character, so a
    character cut between two reads is whole again before its line is decoded.
    """
    buffer = bytearray()
    first = True
    async for chunk in chunks:
        scan_from = max(len(buffer) - 1, 0)  # a "\r" left last may be the start of "\r\n"
        buffer += chunk
        start = 0
        for found in _LINE_END.finditer(buffer, scan_from):
            if found.group() == b"\r" and found.end() == len(buffer):
                break  # the "\n" of a "\r\n" may come with the next read
            line, start = bytes(buffer[start : found.start()]), found.end()
            yield _decoded(line, first)
            first = False
        del buffer[:start]
        if len(buffer) > most:
            raise LineTooLongError(f"a line longer than {most:,} bytes")
    if buffer:
        yield _decoded(bytes(buffer.removesuffix(b"\r")), first)


def _decoded(line: bytes, first: bool) -> str:
    text = line.decode("utf-8", errors="replace")
    return text.removeprefix(_BOM) if first else text


async def sse_data(lines: AsyncIterator[str], most: int = MOST_LINE_BYTES) -> AsyncGenerator[str, None]:
    """The ``data`` of each event in ``lines`` (one line each, without its line break).

    Several ``data:`` lines of one event are joined with newlines; comments (``:`` lines, the
    keep-alives some servers send), ``id:`` and ``retry:`` fields are skipped. A failure is
    given as the data ``{"error": ...}`` most servers send, however it came: an ``error:``
    field (llama.cpp's server, the context overflowing for one) or an ``event: error`` whose
    data is the error alone (some proxies). A
    last event whose blank line never came is still given: the caller judges whether it is
    whole. A body whose first line opens a JSON object is no event stream: it is read whole
    (up to ``most`` characters) and raised as ``WholeBodyError``.
    """
    pending: list[str] = []
    size, first, failed = 0, True, False
    async for line in lines:
        if first and line.lstrip().startswith("{"):
            raise WholeBodyError(await _rest(line, lines, most))
        first = first and not line.strip()
        if not line:
            if pending:
                yield _error_data("\n".join(pending)) if failed else "\n".join(pending)
            pending, size, failed = [], 0, False
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            failed = value.strip() == "error"
        elif name in ("data", "error"):
            pending.append(value if name == "data" else _error_data(value))
            size += len(value)
            if size > most:
                raise LineTooLongError(f"an event longer than {most:,} characters")
    if pending:
        yield _error_data("\n".join(pending)) if failed else "\n".join(pending)


def _error_data(value: str) -> str:
    """``{"error": value}`` as JSON text (``value`` as it is when it says ``error`` itself)."""
    try:
        error = json.loads(value)
    except json.JSONDecodeError:
        error = value
    if isinstance(error, dict) and "error" in error:
        return value
    return json.dumps({"error": error})


async def _rest(first: str, lines: AsyncIterator[str], most: int) -> str:
    parts, size = [first], len(first)
    async for line in lines:
        size += len(line) + 1
        if size > most:
            raise LineTooLongError(f"a JSON body longer than {most:,} characters")
        parts.append(line)
    return "\n".join(parts)


async def read_bounded(chunks: AsyncIterator[bytes], most: int = MOST_LINE_BYTES) -> bytes:
    """A whole body read in ``chunks``, up to ``most`` bytes (then ``LineTooLongError``)."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > most:
            raise LineTooLongError(f"a body longer than {most:,} bytes")
    return bytes(body)
