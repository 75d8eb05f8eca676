"""AnthropicModel against the loopback fake server, through the real SDK and a real socket."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from steward.errors import ModelError
from steward.models.anthropic_messages import AnthropicModel
from steward.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemMessage,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall

from .conftest import Closing, Collect, MakeAnthropic

LS = ToolSpec("ls", "List a directory.", {"type": "object", "properties": {"path": {"type": "string"}}})


def ask(text: str = "hi", *, system: str = "", **fields: Any) -> ModelRequest:
    return ModelRequest(system=system, messages=[UserMessage(text)], **fields)


# --- streaming replies ---------------------------------------------------------------------


async def test_text_streams_as_deltas_then_one_response(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="Hello from the fake server.", piece=5))
    streamed = await collect(make_anthropic(), ask())
    assert len(streamed.deltas) > 1
    assert all(isinstance(d, TextDelta) for d in streamed.deltas)
    assert streamed.text == streamed.response.message.text == "Hello from the fake server."
    assert streamed.response.stop_reason == "end_turn"
    assert streamed.response.model == "claude-test"


async def test_thinking_block_streams_as_thinking_and_keeps_its_signature(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(thinking="First, list the files.", signature="sig-123", text="Listing."))
    streamed = await collect(make_anthropic(), ask())
    assert isinstance(streamed.deltas[0], ThinkingDelta)
    assert streamed.thinking == "First, list the files."
    assert streamed.response.message.thinking == (Thinking("First, list the files.", "sig-123"),)


async def test_think_tags_in_text_become_thinking(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="<thinking>hidden</thinking>Shown.", piece=3))
    streamed = await collect(make_anthropic(), ask())
    assert (streamed.thinking, streamed.response.message.text) == ("hidden", "Shown.")
    assert streamed.response.message.thinking == (Thinking("hidden"),)


async def test_tool_use_input_pieces_are_assembled_per_block(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(
        FakeReply(
            text="Looking.",
            tool_calls=[
                FakeToolCall("ls", {"path": "src"}, id="toolu_a"),
                FakeToolCall("read_file", {"path": "README.md", "limit": 40}, id="toolu_b"),
            ],
            piece=3,
        )
    )
    response = (await collect(make_anthropic(), ask(tools=[LS]))).response
    assert response.message.tool_calls == (
        ToolCall("toolu_a", "ls", {"path": "src"}),
        ToolCall("toolu_b", "read_file", {"path": "README.md", "limit": 40}),
    )
    assert response.stop_reason == "tool_use"


async def test_malformed_tool_input_sets_arguments_error_without_raising(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(tool_calls=[FakeToolCall("ls", '{"path": ', id="toolu_1")]))
    (call,) = (await collect(make_anthropic(), ask())).response.message.tool_calls
    assert call.arguments == {}
    assert call.arguments_error is not None


async def test_usage_counts_cached_input_in_the_prompt(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(
        FakeReply(text="ok", input_tokens=20, output_tokens=9, cached_tokens=100, cache_write_tokens=30)
    )
    usage = (await collect(make_anthropic(), ask())).response.usage
    assert usage.as_dict() == {
        "input_tokens": 150,
        "output_tokens": 9,
        "cache_read_tokens": 100,
        "cache_write_tokens": 30,
        "requests": 1,
    }


# --- what is sent ----------------------------------------------------------------------------


async def test_system_prompt_goes_in_the_system_field(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_anthropic(), ask("hello", system="You are terse."))
    body = server.requests[0].body
    assert server.requests[0].path == "/v1/messages"
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]


async def test_later_system_messages_join_the_system_prompt(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    messages: list[Message] = [UserMessage("hello"), SystemMessage("Budget: 3 steps left.")]
    await collect(make_anthropic(), ModelRequest(system="Base.", messages=messages))
    assert [b["text"] for b in server.requests[0].body["system"]] == ["Base.\n\nBudget: 3 steps left."]


async def test_static_prompt_is_cacheable_and_the_context_follows_it(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    request = ModelRequest(system="Static.", messages=[UserMessage("hi")], context="--- view ---")
    await collect(make_anthropic(), request)
    assert server.requests[0].body["system"] == [
        {"type": "text", "text": "Static.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "--- view ---"},
    ]


async def test_tools_are_sent_with_input_schema(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_anthropic(), ask(tools=[LS]))
    assert server.requests[0].body["tools"] == [
        {
            "name": "ls",
            "description": "List a directory.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ]


async def test_max_tokens_defaults_to_8192(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"), FakeReply(text="ok"))
    model = make_anthropic()
    await collect(model, ask())
    await collect(model, ask(max_tokens=100, temperature=0.5))
    assert [r.body["max_tokens"] for r in server.requests] == [8192, 100]
    assert "temperature" not in server.requests[0].body
    assert server.requests[1].body["temperature"] == 0.5


async def test_thinking_budget_turns_on_extended_thinking(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"), FakeReply(text="ok"))
    await collect(make_anthropic(), ask())
    await collect(make_anthropic(thinking_budget=2048), ask())
    assert "thinking" not in server.requests[0].body
    assert server.requests[1].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_consecutive_tool_results_become_one_user_message(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="done"))
    history: list[Message] = [
        UserMessage("look around"),
        AssistantMessage(
            tool_calls=(ToolCall("toolu_1", "ls", {"path": "."}), ToolCall("toolu_2", "pwd", {}))
        ),
        ToolResultMessage("toolu_1", "ls", "a.txt"),
        ToolResultMessage("toolu_2", "pwd", "no such tool", is_error=True),
    ]
    await collect(make_anthropic(), ModelRequest(system="", messages=history))
    assert server.requests[0].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "look around"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}},
                {"type": "tool_use", "id": "toolu_2", "name": "pwd", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "no such tool",
                    "is_error": True,
                },
            ],
        },
    ]


async def test_consecutive_same_role_messages_are_merged_to_alternate(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    history: list[Message] = [
        UserMessage("one"),
        UserMessage("two"),
        AssistantMessage(text="three"),
        AssistantMessage(text="four"),
        ToolResultMessage("toolu_9", "ls", "x"),
        UserMessage("five"),
    ]
    await collect(make_anthropic(), ModelRequest(system="", messages=history))
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [len(m["content"]) for m in messages] == [2, 2, 2]


async def test_thinking_with_its_signature_is_sent_back_on_the_next_request(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(
        FakeReply(
            thinking="Need a listing.", signature="sig-abc", tool_calls=[FakeToolCall("ls", {}, id="toolu_1")]
        ),
        FakeReply(text="Two files."),
    )
    model = make_anthropic()
    first = (await collect(model, ask("what is here?"))).response.message
    history: list[Message] = [UserMessage("what is here?"), first, ToolResultMessage("toolu_1", "ls", "a b")]
    await collect(model, ModelRequest(system="", messages=history))
    assert server.requests[1].body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Need a listing.", "signature": "sig-abc"},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
        ],
    }


async def test_unsigned_thinking_is_not_sent_back(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    history: list[Message] = [
        UserMessage("q"),
        AssistantMessage(text="a", thinking=(Thinking("from <think> tags"),)),
        UserMessage("q2"),
    ]
    await collect(make_anthropic(), ModelRequest(system="", messages=history))
    assert server.requests[0].body["messages"][1]["content"] == [{"type": "text", "text": "a"}]


async def test_redacted_thinking_is_sent_back_as_it_came(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(redacted_thinking="opaque-bytes", text="Answer."), FakeReply(text="ok"))
    model = make_anthropic()
    first = (await collect(model, ask())).response.message
    await collect(model, ModelRequest(system="", messages=[UserMessage("hi"), first, UserMessage("more")]))
    assert server.requests[1].body["messages"][1]["content"] == [
        {"type": "redacted_thinking", "data": "opaque-bytes"},
        {"type": "text", "text": "Answer."},
    ]


# --- retries and errors ----------------------------------------------------------------------


async def test_overloaded_and_server_errors_are_retried_then_succeed(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    retry_soon = {"retry-after-ms": "10"}
    server.add(
        FakeReply.error(529, headers=retry_soon),
        FakeReply.error(500, headers=retry_soon),
        FakeReply(text="up"),
    )
    streamed = await collect(make_anthropic(max_retries=2), ask())
    assert streamed.response.message.text == "up"
    assert len(server.requests) == 3


async def test_overloaded_after_all_retries_is_a_retryable_model_error(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply.error(529, headers={"retry-after-ms": "10"}))
    with pytest.raises(ModelError, match=r"anthropic: the API is overloaded \(529\)") as caught:
        await collect(make_anthropic(), ask())
    assert caught.value.retryable


async def test_rejected_key_names_the_environment_variable(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply.error(401))
    with pytest.raises(ModelError, match=r"API key was rejected \(401\)\. Set ANTHROPIC_API_KEY") as caught:
        await collect(make_anthropic(), ask())
    assert not caught.value.retryable


async def test_unknown_model_names_the_model(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply.error(404))
    with pytest.raises(ModelError, match=r"model 'claude-nope' was not found at .*--model anthropic:NAME"):
        await collect(make_anthropic(model="claude-nope"), ask())


async def test_overloaded_error_in_the_middle_of_a_stream_is_retryable(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="partial", stream_error="overloaded_error", error_message="Overloaded"))
    with pytest.raises(
        ModelError, match=r"anthropic: the stream failed \(overloaded_error\): Overloaded"
    ) as caught:
        await collect(make_anthropic(), ask())
    assert caught.value.retryable


async def test_unreachable_server_names_the_base_url(closing: Closing, collect: Collect) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}"
    model = closing(AnthropicModel("claude-test", base_url=base_url, api_key="k", timeout=2, max_retries=0))
    with pytest.raises(
        ModelError, match=rf"cannot reach {base_url}: is the server running\? Set ANTHROPIC_BASE_URL"
    ) as caught:
        await collect(model, ask())
    assert not caught.value.retryable, "nothing listens there: retrying later will not help"


async def test_timeout_before_the_reply_is_a_retryable_model_error(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="too late", delay=3))
    with pytest.raises(ModelError, match=r"no reply from .* within 0\.3s") as caught:
        await collect(make_anthropic(timeout=0.3), ask())
    assert caught.value.retryable


async def test_stream_that_stalls_midway_is_a_retryable_model_error(
    server: FakeLLMServer, make_anthropic: MakeAnthropic, collect: Collect
) -> None:
    server.add(FakeReply(text="starts then stops", stall=3))
    with pytest.raises(ModelError, match=r"no reply from .* within 0\.3s") as caught:
        await collect(make_anthropic(timeout=0.3), ask())
    assert caught.value.retryable


async def test_missing_api_key_fails_before_any_request(closing: Closing, collect: Collect) -> None:
    model = closing(AnthropicModel("claude-sonnet-4-5"))
    with pytest.raises(ModelError, match=r"anthropic: no API key\. Set ANTHROPIC_API_KEY"):
        await collect(model, ask())


async def test_broken_credentials_profile_is_a_model_error_naming_the_key(
    closing: Closing, collect: Collect, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "empty"))
    model = closing(AnthropicModel("claude-sonnet-4-5"))
    with pytest.raises(
        ModelError, match=r"anthropic: no API key \(Config file not found .*\)\. Set ANTHROPIC_API_KEY"
    ):
        await collect(model, ask())
