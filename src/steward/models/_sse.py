"""Reading server-sent events ourselves, so that how a stream ended is known.

An SDK's stream iterator stops the same way whether the server said ``data: [DONE]`` or just
closed the connection halfway through a reply; the difference is whether there is a reply at
all. ``sse_data`` yields each event's ``data`` as the server sent it and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

__all__ = ["DONE", "sse_data"]

#: What OpenAI-compatible servers send as the last event of a complete stream.
DONE = "[DONE]"


async def sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The ``data`` of each event in ``lines`` (one line each, without its line break).

    Several ``data:`` lines of one event are joined with newlines; comments (``:`` lines, the
    keep-alives some servers send), ``event:``, ``id:`` and ``retry:`` fields are skipped. A
    last event whose blank line never came is still given: the caller judges whether it is
    whole.
    """
    pending: list[str] = []
    async for line in lines:
        if not line:
            if pending:
                yield "\n".join(pending)
                pending = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            pending.append(value.removeprefix(" "))
    if pending:
        yield "\n".join(pending)
