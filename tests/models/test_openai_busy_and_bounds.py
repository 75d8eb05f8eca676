"""The OpenAI-compatible provider when a server is busy, cannot stream what was asked, or is slow
to list its models: what is sent again, and what the error says."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from steward.errors import ModelError
from steward.models import openai_chat
from steward.models.base import ModelRequest, ModelResponse, Notice, ToolSpec, UserMessage
from steward.models.openai_chat import OpenAIChatModel
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall

from .conftest import NEVER, Closing, MakeOpenAI, items_of

LS = ToolSpec("ls", "List a directory.", {"type": "object", "properties": {"path": {"type": "string"}}})


def ask(*, tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(system="Be brief.", messages=[UserMessage("hi")], tools=tools or [])


async def test_a_server_still_loading_its_model_is_asked_again_until_it_answers(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    # llama.cpp's server answers 503 "Loading model" word for word until the model is in memory:
    # the same busy answer twice is not a request that fails every time.
    loading = FakeReply.error(503, "Loading model", headers={"retry-after-ms": "1"})
    server.add(loading, loading, FakeReply(text="Ready."))
    # The call's own deadline is NEVER: this test is about what is sent again, not how fast.
    items = await items_of(make_openai(max_retries=2, timeout=NEVER), ask())
    (response,) = [item for item in items if isinstance(item, ModelResponse)]
    assert response.message.text == "Ready." and len(server.requests) == 3


async def test_stream_true_on_a_server_that_cannot_stream_tool_calls_names_the_fix(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.quirks = frozenset({"no_stream_with_tools"})
    server.add(FakeReply(tool_calls=[FakeToolCall("ls")]))
    with pytest.raises(ModelError, match=r"remove stream = true from \[models\.openai\]") as caught:
        await items_of(make_openai(stream=True), ask(tools=[LS]))
    assert "\n" not in str(caught.value)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a server stuck on a long request)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        yield listener.getsockname()[1]


async def test_the_model_list_timing_out_names_its_own_bound_not_the_call_s(
    silent_port: int, closing: Closing, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The list's bound is the shorter of the two; a 300 s call bound must not be named.
    monkeypatch.setattr(openai_chat, "PROBE_TIMEOUT_S", 0.2)
    model = closing(OpenAIChatModel("m", base_url=f"http://127.0.0.1:{silent_port}/v1", timeout=300))
    with pytest.raises(ModelError) as caught:
        await asyncio.wait_for(model.probe(), NEVER)
    message = str(caught.value)
    assert "within 0.2s" in message and "model list" in message and "300" not in message


async def test_a_dropped_connection_before_a_tool_call_is_asked_again_but_not_remembered(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    # A connection that breaks says nothing about what the server can stream: the request is
    # sent again whole (this once), and the next one streams again.
    server.add(
        FakeReply(tool_calls=[FakeToolCall("ls")], drop_after=1), FakeReply(tool_calls=[FakeToolCall("ls")])
    )
    model = make_openai()
    items = await items_of(model, ask(tools=[LS]))
    (response,) = [item for item in items if isinstance(item, ModelResponse)]
    assert response.message.tool_calls[0].name == "ls"
    assert not [item for item in items if isinstance(item, Notice)] and not model.fell_back
    assert [r.body["stream"] for r in server.requests] == [True, False]
    server.add(FakeReply(tool_calls=[FakeToolCall("ls")]))
    await items_of(model, ask(tools=[LS]))
    assert server.requests[-1].body["stream"] is True


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://[::1/v1", "localhost:8080/v1"])
async def test_a_base_url_that_cannot_be_used_is_named_before_any_request(url: str, closing: Closing) -> None:
    model = closing(OpenAIChatModel("m", base_url=url, timeout=5))
    for attempt in (model.probe(), items_of(model, ask())):
        with pytest.raises(
            ModelError, match=r"the base URL .* cannot be used .*: set OPENAI_BASE_URL"
        ) as caught:
            await asyncio.wait_for(attempt, NEVER)
        assert not caught.value.retryable and url in str(caught.value)


async def test_a_prompt_over_the_model_s_context_names_both_fixes(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    # llama.cpp's server, word for word (a request over its --ctx-size).
    words = "request (40016 tokens) exceeds the available context size (8192 tokens), try increasing it"
    server.add(*[FakeReply.error(400, words)] * 3)
    with pytest.raises(ModelError) as caught:
        await items_of(make_openai(max_retries=2), ask())
    message = str(caught.value)
    assert "40016 tokens" in message and "--ctx-size" in message and "request_token_budget" in message
    assert not caught.value.retryable and len(server.requests) == 1
