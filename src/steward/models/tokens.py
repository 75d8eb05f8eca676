"""Counting tokens here, for servers that report no usage.

llama-cpp-python's streams (and some proxies) send no usage at all. Budgets, the page's chart
and ``runs show`` still need a figure, so the reply's and the request's tokens are estimated
and the ``Usage`` says so (``estimated``). No tokenizer is loaded (that would mean a model
file per server): the estimate splits text the way byte-pair tokenizers roughly do (common
words whole, longer ones in pieces of five letters, digits in groups of three, other symbols
in pairs). It is a figure for budgets and charts, never billed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from steward.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemMessage,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from steward.text import compact_json

__all__ = ["estimate_tokens", "estimate_usage", "request_tokens", "tools_tokens"]

# A word (letters), a number, or a pair of other visible characters; spaces go with what follows.
_PIECE = re.compile(r"[^\W\d_]+|\d+|[^\w\s]{1,2}|_")
_PER_MESSAGE = 4  # the role and separators each chat message costs in the template


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` is for a byte-pair tokenizer."""
    if not text:
        return 0
    count = 0
    for match in _PIECE.finditer(text):
        piece = match.group()
        if piece[0].isdigit():
            count += -(-len(piece) // 3)
        elif piece[0].isalpha():
            count += -(-len(piece) // 5) if len(piece) > 7 else 1
        else:
            count += 1
    return count


def _message_text(message: Message) -> Iterable[str]:
    match message:
        case SystemMessage(content=text) | UserMessage(content=text):
            yield text
        case ToolResultMessage(content=text, name=name):
            yield name
            yield text
        case AssistantMessage():
            yield message.text
            for call in message.tool_calls:
                yield call.name
                yield call.arguments_json()


def request_tokens(request: ModelRequest) -> int:
    """About how many tokens ``request`` sends (prompt, messages, tool schemas)."""
    total = estimate_tokens(request.system_text) + _PER_MESSAGE
    for message in request.messages:
        total += _PER_MESSAGE + sum(estimate_tokens(text) for text in _message_text(message))
    return total + tools_tokens(request.tools)


def tools_tokens(tools: Sequence[ToolSpec]) -> int:
    """About how many tokens these tools' names, descriptions and schemas add to a request."""
    return sum(estimate_tokens(f"{t.name} {t.description} {compact_json(t.parameters)}") for t in tools)


def estimate_usage(request: ModelRequest, reply: AssistantMessage) -> Usage:
    """The usage of one call whose server reported none, marked as estimated."""
    output = sum(estimate_tokens(text) for text in _message_text(reply))
    output += sum(estimate_tokens(t.text) for t in reply.thinking)
    return Usage(input_tokens=request_tokens(request), output_tokens=output, requests=1, estimated=True)
