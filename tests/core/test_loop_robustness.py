"""What real providers and toolsets get wrong must not break a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, FunctionModel, ToolContext, ToolResult, Toolset, tool
from steward.events import DoneEvent, ToolResultEvent, ToolUse
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage, ToolSpec


@tool
def echo(text: str) -> str:
    """Echo text."""
    return f"echo:{text}"


def scripted(*replies: AssistantMessage) -> tuple[FunctionModel, list[ModelRequest]]:
    seen: list[ModelRequest] = []
    queue = list(replies)

    def reply(request: ModelRequest) -> AssistantMessage:
        seen.append(request)
        return queue.pop(0)

    return FunctionModel(reply), seen


async def test_missing_or_repeated_call_ids_are_made_unique(tmp_path: Path) -> None:
    model, seen = scripted(
        AssistantMessage(
            tool_calls=(ToolCall("", "echo", {"text": "a"}), ToolCall("", "echo", {"text": "b"}))
        ),
        AssistantMessage(tool_calls=(ToolCall("call_0", "echo", {"text": "c"}),)),
        AssistantMessage(tool_calls=(ToolCall("call_0", "echo", {"text": "d"}),)),
        AssistantMessage(text="done"),
    )
    run = Agent(model, tools=[echo], builtin_tools=False).start("go", workspace=tmp_path)
    events = [e async for e in run.stream()]
    ids = [e.call_id for e in events if isinstance(e, ToolUse)]
    assert len(ids) == 4 and len(set(ids)) == 4
    results = [m for m in seen[-1].messages if isinstance(m, ToolResultMessage)]
    assert [r.content for r in results] == ["echo:a", "echo:b", "echo:c", "echo:d"]
    assert len({r.call_id for r in results}) == 4


class Exploding(Toolset):
    def __init__(self, *, on_list: bool) -> None:
        self.on_list = on_list

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        if self.on_list:
            raise RuntimeError("server went away")
        return [ToolSpec("boom", "Explodes.", {"type": "object", "properties": {}})]

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        raise RuntimeError("kaboom")


async def test_a_toolset_raising_in_call_tool_becomes_a_failed_result(tmp_path: Path) -> None:
    model, _ = scripted(
        AssistantMessage(tool_calls=(ToolCall("1", "boom", {}),)), AssistantMessage(text="ok")
    )
    run = Agent(model, toolsets=[Exploding(on_list=False)], builtin_tools=False).start(
        "what does boom say?", workspace=tmp_path
    )
    events = [e async for e in run.stream()]
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.status == "failed" and "RuntimeError: kaboom" in result.output
    assert run.status == "done"


async def test_a_toolset_raising_in_get_tools_fails_the_run_cleanly(tmp_path: Path) -> None:
    model, _ = scripted(AssistantMessage(text="never asked"))
    run = Agent(model, toolsets=[Exploding(on_list=True)], builtin_tools=False).start(
        "go", workspace=tmp_path
    )
    events = [e async for e in run.stream()]
    assert run.status == "failed" and isinstance(events[-1], DoneEvent)
    assert "server went away" in events[-1].message


async def test_a_malformed_agent_step_is_not_counted_as_an_action(tmp_path: Path) -> None:
    bad = AssistantMessage(tool_calls=(ToolCall("1", "agent_step", {"phase": "act", "summary": "s"}),))
    model, _ = scripted(bad, AssistantMessage(text="ok"))
    run = Agent(model, builtin_tools=False).start("go", workspace=tmp_path)
    _ = [e async for e in run.stream()]
    counters = run.state.counters
    assert counters.tool_calls == 0 and counters.consecutive_non_act == 1
    assert counters.errors_by_category["invalid_input"] == 1


async def test_the_users_answer_is_kept_as_a_key_fact(tmp_path: Path) -> None:
    ask = AssistantMessage(
        tool_calls=(
            ToolCall("q", "agent_step", {"phase": "feedback", "summary": "s", "feedback_message": "Which?"}),
        )
    )
    end = {"phase": "end", "summary": "s", "end_status": "solved", "end_message": "ok"}
    model, seen = scripted(ask, AssistantMessage(tool_calls=(ToolCall("e", "agent_step", end),)))
    run = Agent(model, builtin_tools=False).start("go", workspace=tmp_path)
    _ = [e async for e in run.stream()]
    result = await run.answer("the blue one")
    assert result.solved
    assert "User answered 'Which?': the blue one" in seen[-1].system_text


async def test_api_key_env_never_falls_back_to_the_usual_variable(tmp_path: Path, monkeypatch: Any) -> None:
    from steward.config import Config, ProviderSettings
    from steward.errors import ConfigError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key")
    monkeypatch.delenv("MY_VLLM_KEY", raising=False)
    config = Config(
        models={"openai": ProviderSettings(base_url="http://127.0.0.1:9/v1", api_key_env="MY_VLLM_KEY")}
    )
    with pytest.raises(ConfigError, match="api_key_env names MY_VLLM_KEY, which is not set"):
        Agent("openai:local", config=config).start("go", workspace=tmp_path)
