"""The spans of a real scripted run with tools: names, GenAI attributes and their parents."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.telemetry.conftest import attrs, named, parent_of, traced

from steward import Agent
from steward.errors import ModelError
from steward.events import ToolUse
from steward.models.anthropic_messages import AnthropicModel
from steward.models.base import Model, ModelRequest, StreamItem
from steward.models.scripted import ScriptedModel
from steward.store.events import open_store
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    if key == "missing":
        raise FileNotFoundError(f"key {key} not found")
    return f"value of {key} is hunter2-secret"


def act(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


END = {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "All done."}}


def agent(replies: list[dict[str, Any]], **config: Any) -> Agent:
    model = ScriptedModel.from_data(replies)
    model.name = "openai:gpt-test"
    return Agent(model, tools=[lookup], builtin_tools=False, config=traced(**config), sandbox=False)


async def test_a_run_is_one_invoke_agent_span_with_a_step_span_per_step_and_chat_and_tool_spans_under_them(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    run = agent([act("lookup", key="a"), act("lookup", key="missing"), END]).start(
        "look it up", workspace=tmp_path
    )
    call_ids = [e.call_id async for e in run.stream() if isinstance(e, ToolUse)]
    assert run.snapshot().solved
    got = spans.get_finished_spans()
    (root,) = named(got, "invoke_agent")
    assert root.name == "invoke_agent steward" and root.parent is None
    a = attrs(root)
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.request.model"] == "gpt-test"
    assert a["gen_ai.agent.id"] == run.id and a["gen_ai.conversation.id"] == run.id
    assert a["steward.run.status"] == "done" and a["steward.run.end_status"] == "solved"
    steps = named(got, "step")
    assert [attrs(s)["steward.step"] for s in steps] == [1, 2, 3]
    # A step that calls a tool directly is acting, as runs show and the export count it.
    assert [attrs(s).get("steward.phase") for s in steps] == ["act", "act", "end"]
    assert all(parent_of(s, got) is root for s in steps)
    chats = named(got, "chat ")
    assert [c.name for c in chats] == ["chat gpt-test"] * 3
    assert [parent_of(c, got) for c in chats] == steps  # each model call under its own step
    for chat in chats:
        c = attrs(chat)
        assert c["gen_ai.operation.name"] == "chat" and c["gen_ai.provider.name"] == "openai"
        assert c["gen_ai.response.model"] and c["gen_ai.usage.input_tokens"] > 0
        assert "gen_ai.input.messages" not in c  # content only when asked for
    tools = named(got, "execute_tool")
    assert [t.name for t in tools] == ["execute_tool lookup"] * 2
    assert [parent_of(t, got) for t in tools] == steps[:2]
    assert [attrs(t)["gen_ai.tool.call.id"] for t in tools] == call_ids
    ok, failed = tools
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR and attrs(failed)["error.type"]
    assert attrs(root)["gen_ai.usage.input_tokens"] == sum(
        attrs(c)["gen_ai.usage.input_tokens"] for c in chats
    )
    assert len({s.context.trace_id for s in got if s.context is not None}) == 1


async def test_content_is_recorded_only_when_asked_and_secret_values_are_redacted(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("API_TOKEN=hunter2-secret\n")
    run = agent([act("lookup", key="a"), END], record_content=True).start("look it up", workspace=tmp_path)
    assert (await run.result()).solved
    got = spans.get_finished_spans()
    (tool,) = named(got, "execute_tool")
    result = attrs(tool)["gen_ai.tool.call.result"]
    assert "value of a" in str(result) and "hunter2-secret" not in str(result)
    assert attrs(tool)["gen_ai.tool.call.arguments"] == '{"key": "a"}'
    second = named(got, "chat ")[1]
    messages = str(attrs(second)["gen_ai.input.messages"])
    assert "look it up" in messages and "hunter2-secret" not in messages


async def test_with_tracing_off_no_span_is_made(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    model = ScriptedModel.from_data([act("lookup", key="a"), END])
    run = Agent(model, tools=[lookup], builtin_tools=False, sandbox=False).start("x", workspace=tmp_path)
    assert (await run.result()).solved and run.trace is None
    assert spans.get_finished_spans() == ()


async def test_remember_recall_and_forget_are_memory_operations_under_their_tool_spans(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    script = [
        act("remember", text="Deploys use blue-green switching."),
        act("recall", query="deploys"),
        act("forget", id="m1"),
        END,
    ]
    store = await open_store(f"sqlite:///{tmp_path / 'steward.db'}")
    try:
        model = ScriptedModel.from_data(script)
        built = Agent(
            model, builtin_tools=False, config=traced(record_content=True), store=store, sandbox=False
        )
        ws = tmp_path / "ws"
        ws.mkdir()
        assert (await built.start("keep it", workspace=ws).result()).solved
        await built.aclose()
    finally:
        await store.close()
    got = spans.get_finished_spans()
    upsert, search, delete = (_one(got, name) for name in ("upsert_memory", "search_memory", "delete_memory"))
    assert parent_of(upsert, got).name == "execute_tool remember"
    assert parent_of(search, got).name == "execute_tool recall"
    assert parent_of(delete, got).name == "execute_tool forget"
    assert (
        attrs(upsert)["gen_ai.memory.record.id"] == "m1" and attrs(delete)["gen_ai.memory.record.id"] == "m1"
    )
    assert attrs(search)["gen_ai.memory.record.count"] == 1
    assert attrs(search)["gen_ai.memory.query.text"] == "deploys"  # content recording is on here
    assert all(attrs(s)["gen_ai.memory.store.id"] == "steward.long_term" for s in (upsert, search, delete))


def _one(spans: Sequence[ReadableSpan], operation: str) -> ReadableSpan:
    (found,) = [s for s in spans if attrs(s).get("gen_ai.operation.name") == operation]
    return found


async def test_each_span_of_a_traced_run_ends_once(
    spans: InMemorySpanExporter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="opentelemetry"):
        result = await agent([act("lookup", key="a"), END]).run("look it up", workspace=tmp_path)
    assert result.solved and len(named(spans.get_finished_spans(), "chat ")) == 2
    assert not [r for r in caplog.records if "ended span" in r.getMessage()], caplog.text


class FailingFirst(Model):
    """The scripted model, whose first ``failures`` calls fail with ``error`` before any reply."""

    def __init__(self, inner: ScriptedModel, error: ModelError, failures: int = 1) -> None:
        self.inner, self.error, self.failures = inner, error, failures
        self.name = inner.name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        async for item in self.inner.stream(request):
            yield item


def _failing(replies: list[dict[str, Any]], error: ModelError, failures: int = 1) -> Agent:
    model = ScriptedModel.from_data(replies)
    model.name = "openai:gpt-test"
    return Agent(
        FailingFirst(model, error, failures),
        tools=[lookup],
        builtin_tools=False,
        config=traced(),
        sandbox=False,
    )


async def test_a_retried_model_call_is_a_failed_chat_span_then_the_retry_its_own(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    overloaded = ModelError("the provider is overloaded", provider="openai", retryable=True, retry_after=0.0)
    result = await _failing([act("lookup", key="a"), END], overloaded).run("look it up", workspace=tmp_path)
    assert result.solved
    got = spans.get_finished_spans()
    steps = named(got, "step")
    first, retried, second = named(got, "chat ")
    assert [parent_of(c, got) for c in (first, retried, second)] == [steps[0], steps[0], steps[1]]
    assert first.status.status_code is StatusCode.ERROR and attrs(first)["error.type"] == "model_retry"
    assert "gen_ai.usage.input_tokens" not in attrs(first)
    for chat in (retried, second):
        assert chat.status.status_code is StatusCode.UNSET
        assert attrs(chat)["gen_ai.usage.input_tokens"] > 0 and attrs(chat)["gen_ai.response.model"]
    assert attrs(named(got, "invoke_agent")[0])["gen_ai.usage.input_tokens"] == sum(
        attrs(c)["gen_ai.usage.input_tokens"] for c in (retried, second)
    )


async def test_a_model_call_that_fails_the_run_is_a_failed_chat_span(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    refused = ModelError("the key was refused", provider="openai", retryable=False)
    result = await _failing([END], refused).run("look it up", workspace=tmp_path)
    assert not result.solved
    got = spans.get_finished_spans()
    (chat,) = named(got, "chat ")
    assert chat.status.status_code is StatusCode.ERROR and attrs(chat)["error.type"] == "model_error"
    assert "refused" in (chat.status.description or "")
    (root,) = named(got, "invoke_agent")
    assert root.status.status_code is StatusCode.ERROR and parent_of(chat, got) is named(got, "step")[0]


async def test_cached_tokens_reported_by_the_provider_are_on_each_chat_span_and_summed_on_the_run_s(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the anthropic SDK looks for profiles under ~/.config
    end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}
    with FakeLLMServer() as server:
        server.add(
            FakeReply(
                tool_calls=[FakeToolCall("lookup", {"key": "a"})], cached_tokens=100, cache_write_tokens=30
            ),
            FakeReply(tool_calls=[FakeToolCall("agent_step", end)], cached_tokens=120),
        )
        model = AnthropicModel(
            "claude-test", base_url=server.anthropic_base_url, api_key="sk-ant-test", max_retries=0
        )
        try:
            agent = Agent(model, tools=[lookup], builtin_tools=False, config=traced(), sandbox=False)
            result = await agent.run("look a up", workspace=str(tmp_path))
        finally:
            await model.aclose()
    assert result.solved, result.output
    got = spans.get_finished_spans()
    chats = [attrs(c) for c in named(got, "chat ")]
    assert [c["gen_ai.usage.cache_read.input_tokens"] for c in chats] == [100, 120]
    assert [c.get("gen_ai.usage.cache_creation.input_tokens") for c in chats] == [30, None]
    (run,) = (attrs(s) for s in named(got, "invoke_agent"))
    assert run["gen_ai.usage.cache_read.input_tokens"] == 220
    assert run["gen_ai.usage.cache_creation.input_tokens"] == 30
    assert run["gen_ai.usage.input_tokens"] == sum(c["gen_ai.usage.input_tokens"] for c in chats)
