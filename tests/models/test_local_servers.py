"""The OpenAI-compatible provider against local servers' quirks, over a real socket.

Each quirk is one the fake server copies from a real server (llama-cpp-python 0.3 with the
chatml-function-calling format, mostly): null content refused with a 500, tools hidden without
``tool_choice``, a streamed tool choice answered with an empty 200, streams without usage,
streams cut short. These show how each is met, request by request (``server.requests``
counts what was sent); ``test_local_server_runs`` shows whole runs getting through them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steward.errors import ModelError
from steward.models._errors import RetriesSpentError
from steward.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    Notice,
    Retrying,
    StreamItem,
    TextDelta,
    Thinking,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from steward.models.retry import RetryingModel
from steward.testing.fake_llm import NO_TOOLS_TEXT, FakeLLMServer, FakeReply, FakeToolCall

from .conftest import NEVER, Collect, MakeOpenAI, Streamed, items_of, reply_of

# An upper bound a correct program never reaches: it only keeps a broken one from hanging.

LS = ToolSpec("ls", "List a directory.", {"type": "object", "properties": {"path": {"type": "string"}}})

# What llama-cpp-python 0.3 answers to an assistant turn with "content": null (shortened).
PYDANTIC_500 = (
    "7 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'messages', 1, "
    "'ChatCompletionRequestSystemMessage', 'role'), 'msg': \"Input should be 'system'\"}\n  "
    "{'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', "
    "'content'), 'msg': 'Input should be a valid string', 'input': None}"
)


def ask(text: str = "hi", **fields: Any) -> ModelRequest:
    return ModelRequest(system="Be brief.", messages=[UserMessage(text)], **fields)


async def bounded_collect(collect: Collect, model: Any, request: ModelRequest) -> Streamed:
    return await asyncio.wait_for(collect(model, request), NEVER)


def notices(items: list[StreamItem]) -> list[str]:
    return [item.message for item in items if isinstance(item, Notice)]


# --- 1. content is a string ---------------------------------------------------------------


async def test_an_assistant_turn_with_tool_calls_carries_empty_string_content(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.quirks = frozenset({"null_content_refused"})
    server.add(FakeReply(text="ok"))
    history: list[Message] = [
        UserMessage("list it"),
        AssistantMessage(text="", tool_calls=(ToolCall("call_1", "ls", {"path": "."}),)),
        ToolResultMessage("call_1", "ls", "a.txt"),
    ]
    await bounded_collect(collect, make_openai(), ModelRequest(system="", messages=history))
    assistant = server.requests[0].body["messages"][1]
    assert assistant["content"] == "" and assistant["tool_calls"][0]["id"] == "call_1"


# --- 2. what is sent again, and how often --------------------------------------------------


async def test_a_request_the_server_calls_invalid_is_sent_once_whatever_its_status(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(*[FakeReply.error(500, PYDANTIC_500, headers={"retry-after-ms": "1"})] * 12)
    retrying = RetryingModel(make_openai(max_retries=3), retries=2, backoff_s=0)
    with pytest.raises(ModelError) as caught:
        await bounded_collect(collect, retrying, ask())
    message = str(caught.value)
    assert "rejected (500)" in message and "Input should be a valid string" in message
    assert "sent once" in message and "steward doctor --model openai:gpt-test" in message
    assert "\n" not in message
    assert not caught.value.retryable
    assert len(server.requests) == 1


async def test_the_same_server_error_twice_for_the_same_request_is_not_sent_a_third_time(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(*[FakeReply.error(500, "Engine exploded.", headers={"retry-after-ms": "1"})] * 6)
    retrying = RetryingModel(make_openai(max_retries=3), retries=2, backoff_s=0)
    with pytest.raises(ModelError, match=r"server error \(500\), the same twice .*Engine exploded") as caught:
        await bounded_collect(collect, retrying, ask())
    assert not caught.value.retryable
    assert len(server.requests) == 2


async def test_errors_the_provider_retried_are_not_retried_again_by_the_loop(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(*[FakeReply.error(429, "Slow down.", headers={"retry-after-ms": "1"})] * 9)
    retrying = RetryingModel(make_openai(max_retries=2), retries=2, backoff_s=0)
    with pytest.raises(RetriesSpentError, match=r"rate limited \(429\), still after 2 retries") as caught:
        await bounded_collect(collect, retrying, ask())
    assert caught.value.retryable, "a later run may still get through"
    assert len(server.requests) == 3, "the provider's three tries, not three times three"


async def test_a_wait_longer_than_the_call_is_left_to_the_loop(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    # Waiting 30 s within a call that may take 5 s would only end in a timeout: the failure
    # goes to the loop at once, with the wait the server asked for.
    server.add(FakeReply.error(503, headers={"retry-after": "30"}), FakeReply(text="not asked yet"))
    with pytest.raises(ModelError, match=r"server error \(503\): The server had an error") as caught:
        await bounded_collect(collect, make_openai(max_retries=2, timeout=5.0), ask())
    assert caught.value.retryable and caught.value.retry_after == 30
    assert not isinstance(caught.value, RetriesSpentError)
    assert len(server.requests) == 1


# --- 3. tool_choice ---------------------------------------------------------------------------


async def test_tool_choice_auto_goes_with_every_offer_of_tools_and_only_then(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok"), FakeReply(text="ok"))
    model = make_openai()
    await bounded_collect(collect, model, ask(tools=[LS]))
    await bounded_collect(collect, model, ask())
    assert server.requests[0].body["tool_choice"] == "auto"
    assert "tool_choice" not in server.requests[1].body


async def test_the_fake_hides_tools_without_tool_choice(server: FakeLLMServer, collect: Collect) -> None:
    # The quirk itself, as a raw client without tool_choice meets it.
    import httpx2

    server.quirks = frozenset({"tools_need_choice"})
    server.add(FakeReply(tool_calls=[FakeToolCall("read_file")]))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}
    async with httpx2.AsyncClient() as client:
        answer = (await client.post(f"{server.openai_base_url}/chat/completions", json=body)).json()
    message = answer["choices"][0]["message"]
    assert message["content"] == NO_TOOLS_TEXT and "tool_calls" not in message


# --- 4. servers that cannot stream tool calls ----------------------------------------------------


async def test_a_streamed_tool_choice_that_comes_back_empty_is_asked_for_again_whole(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.quirks = frozenset({"no_stream_with_tools"})
    server.add(
        FakeReply(thinking="The user wants a listing.", tool_calls=[FakeToolCall("ls", {"path": "."})])
    )
    server.add(FakeReply(tool_calls=[FakeToolCall("ls", {"path": "src"})]), FakeReply(text="plain", piece=2))
    model = make_openai()
    assert (model.streams_tools, model.fell_back) == (None, False)  # a tuple: mypy keeps both open

    first = await items_of(model, ask(tools=[LS]))
    (notice,) = notices(first)
    assert notice.startswith(f"openai: {server.openai_base_url} cannot stream tool calls")
    assert "stream = false in [models.openai]" in notice
    response = reply_of(first)
    assert response.message.tool_calls == (ToolCall("call_fake_2_0", "ls", {"path": "."}),)
    assert response.message.thinking == (Thinking("The user wants a listing."),)
    assert response.stop_reason == "tool_calls"
    assert (model.fell_back, model.streams_tools) == (True, False)

    # From now on whole replies for requests with tools, and no second notice.
    second = await items_of(model, ask(tools=[LS]))
    assert not notices(second) and reply_of(second).message.tool_calls[0].arguments == {"path": "src"}
    # A request without tools still streams.
    third = await items_of(model, ask())
    assert [item.text for item in third if isinstance(item, TextDelta)] == ["pl", "ai", "n"]
    assert [r.body["stream"] for r in server.requests] == [True, False, False, True]


async def test_the_fallback_is_remembered_for_the_endpoint_by_a_new_model(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.quirks = frozenset({"no_stream_with_tools"})
    server.add(FakeReply(tool_calls=[FakeToolCall("ls")]), FakeReply(tool_calls=[FakeToolCall("ls")]))
    await items_of(make_openai(model="local-a"), ask(tools=[LS]))
    later = make_openai(model="local-a")
    assert later.fell_back and later.streams_tools is False
    items = await items_of(later, ask(tools=[LS]))
    assert len(notices(items)) == 1, "each model says it once, for the run that uses it"
    assert [r.body["stream"] for r in server.requests] == [True, False, False]
    assert not make_openai(model="local-b").fell_back, "another model on the server is tried afresh"


async def test_a_text_reply_with_tools_streams_normally_on_such_a_server(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.quirks = frozenset({"no_stream_with_tools"})
    server.add(FakeReply(text="No tool needed.", piece=3))
    model = make_openai()
    items = await items_of(model, ask(tools=[LS]))
    assert not notices(items) and reply_of(items).message.text == "No tool needed."
    assert sum(isinstance(item, TextDelta) for item in items) > 1
    assert (model.streams_tools, model.fell_back) == (None, False)  # a tuple: mypy keeps both open


async def test_streams_tools_is_true_once_a_tool_call_was_streamed(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.add(FakeReply(tool_calls=[FakeToolCall("ls")]))
    model = make_openai()
    await items_of(model, ask(tools=[LS]))
    assert model.streams_tools is True and not model.fell_back


async def test_an_in_stream_error_before_any_piece_also_falls_back(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    # Another way a server may refuse to stream a tool choice: an error object as the stream's
    # first event after the role chunk.
    message = "Automatic streaming tool choice is not supported"
    server.add(FakeReply(stream_error="internal_server_error", error_message=message))
    server.add(FakeReply(tool_calls=[FakeToolCall("ls")]))
    model = make_openai()
    items = await items_of(model, ask(tools=[LS]))
    assert len(notices(items)) == 1 and reply_of(items).message.tool_calls[0].name == "ls"
    assert model.fell_back


async def test_stream_true_never_falls_back(server: FakeLLMServer, make_openai: MakeOpenAI) -> None:
    server.quirks = frozenset({"no_stream_with_tools"})
    server.add(FakeReply(tool_calls=[FakeToolCall("ls")]))
    model = make_openai(stream=True)
    with pytest.raises(ModelError, match=r"broke off after 0 chunks \(no finish_reason\)") as caught:
        await items_of(model, ask(tools=[LS]))
    assert caught.value.retryable
    assert len(server.requests) == 1 and not model.fell_back


async def test_stream_false_asks_whole_replies_and_reads_them_whole(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.add(
        FakeReply(text="<think>short</think>Listing.", thinking="why", tool_calls=[FakeToolCall("ls")]),
        FakeReply(
            text="Just text.", reasoning_field="reasoning", thinking="hm", input_tokens=40, output_tokens=4
        ),
    )
    model = make_openai(stream=False)
    assert model.streams_tools is False and not model.fell_back
    first = await items_of(model, ask(tools=[LS]))
    assert not notices(first)
    response = reply_of(first)
    assert response.message.text == "Listing." and response.message.tool_calls[0].name == "ls"
    assert response.message.thinking == (Thinking("whyshort"),)
    second = await items_of(model, ask())
    assert [item.text for item in second if isinstance(item, TextDelta)] == ["Just text."]
    response = reply_of(second)
    assert response.message.thinking == (Thinking("hm"),) and response.stop_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.estimated) == (
        40,
        4,
        False,
    )
    assert [r.body["stream"] for r in server.requests] == [False, False]
    assert "stream_options" not in server.requests[0].body


async def test_a_server_that_answers_whole_to_a_stream_request_is_read_whole(
    server: FakeLLMServer, make_openai: MakeOpenAI
) -> None:
    server.quirks = frozenset({"stream_ignored"})
    server.add(FakeReply(text="All at once.", tool_calls=[FakeToolCall("ls")]))
    model = make_openai()
    items = await items_of(model, ask(tools=[LS]))
    response = reply_of(items)
    assert response.message.text == "All at once." and response.message.tool_calls[0].name == "ls"
    assert not notices(items) and len(server.requests) == 1 and server.requests[0].body["stream"]


# --- 5. a stream cut short ----------------------------------------------------------------------


# 3 chunks: the role chunk and two pieces of text.
@pytest.mark.parametrize("chunks", [0, 3])
async def test_a_stream_cut_short_is_a_retryable_error_not_a_reply(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect, chunks: int
) -> None:
    server.add(FakeReply(text="Two chunks then a closed socket.", cut_after=chunks))
    pattern = rf"openai: the reply from .* broke off after {chunks} chunks \(no finish_reason\)"
    with pytest.raises(ModelError, match=pattern) as caught:
        await bounded_collect(collect, make_openai(), ask())
    assert caught.value.retryable
    assert not isinstance(caught.value, RetriesSpentError), "the loop's retry is the one for this"


async def test_the_loop_retries_a_cut_stream_and_gets_the_good_reply(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="Half an ans", cut_after=3), FakeReply(text="The whole answer."))
    retrying = RetryingModel(make_openai(max_retries=2), retries=2, backoff_s=0)
    streamed = await bounded_collect(collect, retrying, ask())
    assert streamed.response.message.text == "The whole answer."
    assert sum(isinstance(d, Retrying) for d in streamed.deltas) == 1
    assert len(server.requests) == 2


@pytest.mark.parametrize(("done", "finish"), [(False, True), (True, False)])
async def test_a_stream_with_either_end_marker_is_a_whole_reply(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect, done: bool, finish: bool
) -> None:
    server.add(FakeReply(text="Complete enough.", send_done=done, send_finish=finish))
    streamed = await bounded_collect(collect, make_openai(), ask())
    assert streamed.response.message.text == "Complete enough."


# --- 6. one deadline for the whole call ----------------------------------------------------------


async def test_a_reply_that_trickles_forever_fails_with_the_timeout_error(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    # A chunk every 50 ms never leaves a gap the HTTP client's timeout would see: only the
    # bound on the whole call can end this reply.
    server.add(FakeReply(text="and so on ", trickle=0.05))
    with pytest.raises(ModelError, match=r"openai: no reply from .* within 1s\. Raise timeout_s") as caught:
        await bounded_collect(collect, make_openai(timeout=1.0), ask())
    assert caught.value.retryable
    assert len(server.requests) == 1


# --- 7. max_tokens -------------------------------------------------------------------------------


async def test_max_tokens_goes_out_and_a_longer_reply_stops_with_length(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="one two three four five six seven", piece=4))
    streamed = await bounded_collect(collect, make_openai(), ask(max_tokens=3))
    assert server.requests[0].body["max_tokens"] == 3
    assert streamed.response.message.text == "one two thre"
    assert streamed.response.stop_reason == "length"


# --- 8. usage when the server reports none -------------------------------------------------------


@pytest.mark.parametrize("stream", [None, False])
async def test_a_reply_without_usage_gets_an_estimate_marked_as_such(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect, stream: bool | None
) -> None:
    server.add(FakeReply(text="A reply from a server that counts nothing.", usage=False))
    usage = (await bounded_collect(collect, make_openai(stream=stream), ask("How are you?"))).response.usage
    assert usage.estimated
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and usage.requests == 1


async def test_reported_usage_is_not_marked_estimated(
    server: FakeLLMServer, make_openai: MakeOpenAI, collect: Collect
) -> None:
    server.add(FakeReply(text="ok", input_tokens=20, output_tokens=3))
    usage = (await bounded_collect(collect, make_openai(), ask())).response.usage
    assert not usage.estimated and (usage.input_tokens, usage.output_tokens) == (20, 3)
