"""The local token estimate used when a server reports no usage.

The reference counts were taken with a real byte-pair tokenizer (SmolLM2's, a GPT-2 style
vocabulary of 49 k pieces, the model llama-cpp-python served when this was measured): the
estimate must stay within a quarter of them on prose, code, JSON schemas and shell lines.
"""

from __future__ import annotations

import pytest

from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolSpec, UserMessage
from steward.models.tokens import estimate_tokens, estimate_usage, request_tokens

SAMPLES = {
    "prose": (
        "The agent reads the failing test, finds the off-by-one error in the loop, fixes it and "
        "runs the whole suite again before it reports.",
        31,
    ),
    "code": (
        "def total(items: list[int]) -> int:\n    result = 0\n    for i in range(1, len(items)):\n"
        "        result += items[i]\n    return result\n",
        40,
    ),
    "json": (
        '{"type":"object","properties":{"path":{"type":"string","description":"File path relative '
        'to the workspace."},"limit":{"type":"integer","default":200}},"required":["path"]}',
        46,
    ),
    "shell": (
        "cd src && grep -rn 'def main' --include=*.py . | head -20 && python -m pytest -q "
        "tests/test_cli.py::test_help",
        42,
    ),
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_estimate_is_near_a_real_tokenizer(kind: str) -> None:
    text, real = SAMPLES[kind]
    assert abs(estimate_tokens(text) - real) <= real / 4, (kind, estimate_tokens(text), real)


def test_empty_text_is_no_tokens_and_more_text_is_more() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("word " * 100) > estimate_tokens("word " * 10) > 0


def test_a_request_counts_its_prompt_messages_and_tools() -> None:
    bare = ModelRequest(system="You are a careful agent.", messages=[UserMessage("fix the tests")])
    tool = ToolSpec(
        "read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}
    )
    with_tools = ModelRequest(system=bare.system, messages=bare.messages, tools=[tool])
    assert request_tokens(with_tools) > request_tokens(bare) > estimate_tokens(bare.system)


def test_estimated_usage_is_marked_and_counts_tool_calls() -> None:
    request = ModelRequest(system="s", messages=[UserMessage("go")])
    reply = AssistantMessage(tool_calls=(ToolCall("c1", "read_file", {"path": "src/app.py"}),))
    usage = estimate_usage(request, reply)
    assert usage.estimated and usage.requests == 1
    assert usage.output_tokens > 0 and usage.input_tokens > 0
    assert usage.as_dict()["estimated"] is True
