"""OpenAIChatModel against the loopback fake server, through the real SDK and a real socket."""

from __future__ import annotations

import socket
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from steward.errors import ModelError
from steward.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from steward.models.openai_chat import OpenAIChatModel
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall

from .conftest import Closing, Collect, MakeOpenAI

LS = ToolSpec("ls", "List a directory.", {"type": "object", "properties": {"path": {"type": "string"}}})


def ask(text: str = "hi", *, system: str = "", **fields: Any) -> ModelRequest:
    return ModelRequest(system=system, messages=[UserMessage(text)], **fields)


# --- streaming replies ---------------------------------------------------------------------


async def test_text_streams_as_deltas_then_one_response(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="Hello from the fake server.", piece=5))
    streamed = await collect(make_openai(), ask())
    assert len(streamed.deltas) > 1
    assert all(isinstance(d, TextDelta) for d in streamed.deltas)
    assert streamed.text == streamed.response.message.text == "Hello from the fake server."
    assert streamed.response.stop_reason == "stop"
    assert streamed.response.model == "gpt-test"


async def test_reasoning_content_becomes_thinking(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(thinking="Let me think.", text="42"))
    streamed = await collect(make_openai(), ask())
    assert isinstance(streamed.deltas[0], ThinkingDelta)
    assert streamed.thinking == "Let me think."
    assert streamed.response.message.thinking == (Thinking("Let me think."),)
    assert streamed.response.message.text == "42"


async def test_reasoning_field_of_openrouter_and_lm_studio_becomes_thinking(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(thinking="Hmm.", text="ok", reasoning_field="reasoning"))
    streamed = await collect(make_openai(), ask())
    assert streamed.response.message.thinking == (Thinking("Hmm."),)


async def test_think_tags_in_content_become_thinking(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="<think>weighing options</think>\n\nUse ls.", piece=3))
    streamed = await collect(make_openai(), ask())
    assert streamed.thinking == "weighing options"
    assert streamed.response.message.text == "Use ls."
    assert streamed.response.message.thinking == (Thinking("weighing options"),)


async def test_tool_call_fragments_are_assembled_per_index(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(
        FakeReply(
            tool_calls=[
                FakeToolCall("ls", {"path": "src/steward"}, id="call_a"),
                FakeToolCall("read_file", {"path": "README.md", "limit": 40}, id="call_b"),
            ],
            piece=3,
        )
    )
    response = (await collect(make_openai(), ask(tools=[LS]))).response
    assert response.message.tool_calls == (
        ToolCall("call_a", "ls", {"path": "src/steward"}),
        ToolCall("call_b", "read_file", {"path": "README.md", "limit": 40}),
    )
    assert response.stop_reason == "tool_calls"


async def test_tool_call_sent_whole_in_one_chunk_is_read(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(tool_calls=[FakeToolCall("ls", {"path": "."}, id="call_1")], whole_tool_calls=True))
    response = (await collect(make_openai(), ask())).response
    assert response.message.tool_calls == (ToolCall("call_1", "ls", {"path": "."}),)


async def test_missing_tool_call_ids_are_generated(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(tool_calls=[FakeToolCall("ls"), FakeToolCall("pwd")], tool_call_ids=False))
    calls = (await collect(make_openai(), ask())).response.message.tool_calls
    assert [(c.id, c.name) for c in calls] == [("call_0", "ls"), ("call_1", "pwd")]


async def test_malformed_arguments_set_arguments_error_without_raising(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(tool_calls=[FakeToolCall("ls", '{"path": "src', id="call_1")]))
    (call,) = (await collect(make_openai(), ask())).response.message.tool_calls
    assert call.arguments == {}
    assert call.arguments_error is not None
    assert "not valid JSON" in call.arguments_error


async def test_usage_comes_from_the_final_usage_chunk(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok", input_tokens=120, output_tokens=9, cached_tokens=100))
    usage = (await collect(make_openai(), ask())).response.usage
    assert usage.as_dict() == {
        "input_tokens": 120,
        "output_tokens": 9,
        "cache_read_tokens": 100,
        "cache_write_tokens": 0,
        "requests": 1,
    }


# --- what is sent ----------------------------------------------------------------------------


async def test_request_streams_with_usage_and_sends_the_key(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_openai(model="qwen3:8b"), ask())
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body["model"] == "qwen3:8b"
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}


async def test_system_prompt_is_the_first_message(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_openai(), ask("hello", system="You are terse."))
    assert server.requests[0].body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
    ]


async def test_tools_are_sent_as_functions(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_openai(), ask(tools=[LS]))
    assert server.requests[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "ls",
                "description": "List a directory.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]


async def test_no_tools_key_is_sent_without_tools(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_openai(), ask())
    assert "tools" not in server.requests[0].body


async def test_tool_calls_and_results_are_sent_back_without_thinking(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="done"))
    history: list[Message] = [
        UserMessage("list it"),
        AssistantMessage(
            text="Listing.",
            tool_calls=(ToolCall("call_1", "ls", {"path": "."}),),
            thinking=(Thinking("private reasoning"),),
        ),
        ToolResultMessage("call_1", "ls", "a.txt\nb.txt"),
    ]
    await collect(make_openai(), ModelRequest(system="", messages=history))
    assert server.requests[0].body["messages"] == [
        {"role": "user", "content": "list it"},
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"path":"."}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
    ]


async def test_max_tokens_and_temperature_are_sent_to_compatible_servers(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_openai(), ask(max_tokens=256, temperature=0.2))
    body = server.requests[0].body
    assert (body["max_tokens"], body["temperature"]) == (256, 0.2)
    assert "max_completion_tokens" not in body


async def test_base_url_is_read_from_openai_base_url(
    server: FakeLLMServer, closing: Closing, collect: Collect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.add(FakeReply(text="ok"))
    await collect(closing(OpenAIChatModel("gpt-test", max_retries=0)), ask())
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


async def test_custom_base_url_without_a_key_sends_a_placeholder(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"))
    await collect(make_openai(api_key=None), ask())
    assert server.requests[0].headers["authorization"] == "Bearer steward-no-key"


# --- retries and errors ----------------------------------------------------------------------


async def test_rate_limit_is_retried_then_succeeds(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply.error(429, headers={"retry-after-ms": "10"}), FakeReply(text="finally"))
    streamed = await collect(make_openai(max_retries=2), ask())
    assert streamed.response.message.text == "finally"
    # Steward retries, not the SDK (whose retries are off, so its retry-count header stays 0).
    assert len(server.requests) == 2


async def test_server_errors_are_retried_then_succeed(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    retry_soon = {"retry-after-ms": "10"}
    server.add(
        FakeReply.error(500, headers=retry_soon),
        FakeReply.error(503, headers=retry_soon),
        FakeReply(text="up"),
    )
    streamed = await collect(make_openai(max_retries=2), ask())
    assert streamed.response.message.text == "up"
    assert len(server.requests) == 3


async def test_rate_limit_after_all_retries_is_a_retryable_model_error(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    retry_soon = {"retry-after-ms": "10"}
    server.add(*[FakeReply.error(429, "Slow down.", headers=retry_soon)] * 2)
    with pytest.raises(ModelError, match=r"rate limited \(429\).*after 1 retries: Slow down") as caught:
        await collect(make_openai(max_retries=1), ask())
    assert caught.value.retryable
    assert caught.value.provider == "openai"


async def test_rejected_key_names_the_environment_variable(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply.error(401))
    with pytest.raises(ModelError, match=r"API key was rejected \(401\)\. Set OPENAI_API_KEY") as caught:
        await collect(make_openai(), ask())
    assert not caught.value.retryable


async def test_unknown_model_names_the_model_and_base_url(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply.error(404))
    with pytest.raises(ModelError) as caught:
        await collect(make_openai(model="gpt-nope"), ask())
    message = str(caught.value)
    assert "model 'gpt-nope' was not found at " + server.openai_base_url in message
    assert "--model openai:NAME" in message
    assert not caught.value.retryable


async def test_bad_request_carries_the_server_message(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply.error(400, "This model's maximum context length is 8192 tokens."))
    with pytest.raises(ModelError, match=r"rejected \(400\): This model's maximum context length"):
        await collect(make_openai(), ask())


async def test_error_in_the_middle_of_a_stream_is_a_retryable_model_error(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="partial", stream_error="server_error", error_message="Engine died."))
    with pytest.raises(ModelError, match=r"openai: the stream failed: Engine died\.") as caught:
        await collect(make_openai(), ask())
    assert caught.value.retryable


async def test_unreachable_server_names_the_base_url(closing: Closing, collect: Collect) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    model = closing(OpenAIChatModel("gpt-test", base_url=base_url, api_key="k", timeout=2, max_retries=0))
    with pytest.raises(
        ModelError, match=rf"cannot reach {base_url}: is the server running\? Set OPENAI_BASE_URL"
    ) as caught:
        await collect(model, ask())
    assert not caught.value.retryable, "nothing listens there: retrying later will not help"


async def test_timeout_is_a_retryable_model_error(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="too late", delay=3))
    with pytest.raises(ModelError, match=r"no reply from .* within 0\.3s") as caught:
        await collect(make_openai(timeout=0.3), ask())
    assert caught.value.retryable


async def test_missing_api_key_fails_before_any_request(closing: Closing, collect: Collect) -> None:
    model = closing(OpenAIChatModel("gpt-4o-mini"))
    with pytest.raises(ModelError, match=r"openai: no API key\. Set OPENAI_API_KEY"):
        await collect(model, ask())


async def test_stream_stops_cleanly_when_the_consumer_stops_early(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.add(FakeReply(text="a long answer in many pieces", piece=2))
    stream = make_openai().stream(ask())
    first = await anext(stream)
    assert isinstance(stream, AsyncGenerator)  # a provider's stream is an async generator
    await stream.aclose()
    assert first == TextDelta("a ")


async def test_static_prompt_and_context_form_one_system_message(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    from steward.models.base import ModelRequest, UserMessage

    server.add(FakeReply(text="ok"))
    await collect(make_openai(), ModelRequest(system="Static.", messages=[UserMessage("hi")], context="view"))
    assert server.requests[0].body["messages"][0] == {"role": "system", "content": "Static.\n\nview"}
