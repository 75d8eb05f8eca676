"""The whole agent loop against real provider code over a real loopback socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from steward import Agent, Limits
from steward.events import ErrorEvent
from steward.models.anthropic_messages import AnthropicModel
from steward.models.openai_chat import OpenAIChatModel
from steward.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall

PLAN = FakeToolCall(
    "agent_step",
    {
        "phase": "plan",
        "summary": "Plan",
        "plan": {"goal": "count lines", "sub_tasks": [{"id": 1, "title": "count"}]},
    },
)
COUNT = FakeToolCall("bash", {"command": "wc -l < notes.txt"})
VERIFY = FakeToolCall("agent_step", {"phase": "verify", "summary": "2 lines", "key_facts": ["notes.txt has 2 lines"],
                                     "sub_task_outcome": "done"})  # fmt: skip


async def run_agent(model: Any, workspace: Path) -> tuple[Any, list[Any]]:
    agent = Agent(model, limits=Limits(max_steps=10))
    run = agent.start("How many lines does notes.txt have?", workspace=workspace)
    try:
        events = [e async for e in run.stream()]
    finally:
        await model.aclose()
    return run.snapshot(), events


async def test_openai_wire_format_drives_a_full_run(server: FakeLLMServer, workspace: Path) -> None:
    server.add(
        FakeReply(tool_calls=[PLAN], piece=3),
        FakeReply(text="Counting. ", tool_calls=[COUNT], piece=2),
        FakeReply(tool_calls=[VERIFY]),
        FakeReply(text="<think>two lines counted</think>notes.txt has 2 lines."),
    )
    model = OpenAIChatModel("gpt-test", base_url=server.openai_base_url, api_key="k", max_retries=0)
    result, events = await run_agent(model, workspace)
    assert result.answered and result.output == "notes.txt has 2 lines."  # a question, answered in text
    assert result.usage.requests == 4 and result.usage.input_tokens == 48
    tool_result = next(e for e in events if e.type == "tool_result")
    assert tool_result.tool == "bash" and tool_result.output.startswith("2")
    assert any(e.type == "thinking" and e.text == "two lines counted" for e in events)
    third = server.requests[2].body
    assert third["messages"][0]["role"] == "system"
    assert "--- Agent Working Memory ---" in third["messages"][0]["content"]
    assert "[PLAN v1]  Goal: count lines" in third["messages"][0]["content"]
    tool_message = next(m for m in third["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] and tool_message["content"].startswith("{")  # the plan ack
    bash_result = [m for m in third["messages"] if m["role"] == "tool"][-1]
    assert bash_result["content"].startswith("2")
    assert {t["function"]["name"] for t in third["tools"]} >= {
        "agent_step",
        "bash",
        "read_file",
        "recall_output",
    }


async def test_anthropic_wire_format_drives_a_full_run(server: FakeLLMServer, workspace: Path) -> None:
    server.add(
        FakeReply(thinking="I should plan.", tool_calls=[PLAN], signature="sig-1"),
        FakeReply(tool_calls=[COUNT]),
        FakeReply(tool_calls=[VERIFY]),
        FakeReply(text="notes.txt has 2 lines."),
    )
    model = AnthropicModel("claude-test", base_url=server.anthropic_base_url, api_key="k", max_retries=0)
    result, events = await run_agent(model, workspace)
    assert result.answered and result.output == "notes.txt has 2 lines."
    assert any(e.type == "thinking" and e.text == "I should plan." and not e.partial for e in events)
    second = server.requests[1].body
    static, view = second["system"]
    assert static["cache_control"] == {"type": "ephemeral"} and "agent_step" in static["text"]
    assert view["text"].startswith("--- Agent Working Memory ---")
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    kinds = [block["type"] for block in assistant["content"]]
    assert kinds[0] == "thinking" and assistant["content"][0]["signature"] == "sig-1"
    fourth = server.requests[3].body
    results = [b for m in fourth["messages"] if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b["type"] == "tool_result"]  # fmt: skip
    assert any(str(r["content"]).startswith("2") for r in results)


async def test_malformed_tool_arguments_go_back_to_the_model(server: FakeLLMServer, workspace: Path) -> None:
    server.add(
        FakeReply(tool_calls=[FakeToolCall("read_file", '{"path": "notes.txt"')]),
        FakeReply(tool_calls=[FakeToolCall("read_file", {"path": "notes.txt"})]),
        FakeReply(text="Read it."),
    )
    model = OpenAIChatModel("gpt-test", base_url=server.openai_base_url, api_key="k", max_retries=0)
    result, events = await run_agent(model, workspace)
    assert result.answered
    error = next(e for e in events if e.type == "error")
    assert error.recoverable and "not valid JSON" in error.message
    second = server.requests[1].body
    assert "not valid JSON" in next(m for m in second["messages"] if m["role"] == "tool")["content"]


async def test_rejected_key_mid_run_fails_the_run_with_the_fix(
    server: FakeLLMServer, workspace: Path
) -> None:
    server.add(FakeReply(tool_calls=[PLAN]), FakeReply.error(401, "invalid x-api-key"))
    model = OpenAIChatModel("gpt-test", base_url=server.openai_base_url, api_key="k", max_retries=0)
    result, events = await run_agent(model, workspace)
    assert result.status == "failed"
    error = next(e for e in events if e.type == "error")
    assert not error.recoverable and "OPENAI_API_KEY" in error.message
    assert events[-1].type == "done"


def steward_cli(workspace: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "steward", *args], cwd=workspace, env={**base, **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_steward_run_with_an_openai_compatible_server(server: FakeLLMServer, workspace: Path) -> None:
    server.add(FakeReply(tool_calls=[COUNT]), FakeReply(text="2 lines."))
    proc = steward_cli(
        workspace, "run", "count the lines of notes.txt", "--model", "openai:local-model",
        OPENAI_BASE_URL=server.openai_base_url, OPENAI_API_KEY="k",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # answered: it counted, then said so in text
    assert proc.stdout.strip() == "2 lines."
    assert "■ answered" in proc.stderr
    assert server.requests[0].body["model"] == "local-model"


def test_steward_run_with_ollama(server: FakeLLMServer, workspace: Path) -> None:
    server.add(FakeReply(text="Hello from a local model."))
    proc = steward_cli(workspace, "run", "say hello", "--json", "-m", "ollama:qwen3:8b",
                       OLLAMA_BASE_URL=server.openai_base_url)  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # answered
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["type"] == "done" and done["data"]["message"] == "Hello from a local model."
    assert server.requests[0].body["model"] == "qwen3:8b"


def test_unreachable_server_is_one_line_naming_the_url(workspace: Path) -> None:
    proc = steward_cli(workspace, "run", "x", "-m", "openai:m", OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                       OPENAI_API_KEY="k")  # fmt: skip
    assert proc.returncode == 1
    assert "127.0.0.1:9" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_openai_key_names_the_variable(workspace: Path) -> None:
    proc = steward_cli(workspace, "run", "x", "-m", "openai:gpt-4o-mini")
    assert proc.returncode == 2  # a configuration problem, found before the run starts
    assert "OPENAI_API_KEY" in proc.stderr and "Traceback" not in proc.stderr


def test_provider_settings_come_from_steward_toml(server: FakeLLMServer, workspace: Path) -> None:
    server.add(FakeReply(text="configured."))
    (workspace / "steward.toml").write_text(
        f'model = "openai:from-config"\n[models.openai]\nbase_url = "{server.openai_base_url}"\n'
        'api_key_env = "MY_SERVER_KEY"\nmax_retries = 0\n'
    )
    proc = steward_cli(workspace, "run", "hello", MY_SERVER_KEY="secret-123")
    assert proc.returncode == 3, proc.stderr  # answered
    assert proc.stdout.strip() == "configured."
    request = server.requests[0]
    assert request.body["model"] == "from-config"
    assert request.headers.get("authorization") == "Bearer secret-123"


async def test_a_stream_broken_midway_is_retried_with_backoff(server: FakeLLMServer, workspace: Path) -> None:
    server.add(FakeReply(text="partial", stream_error="overloaded_error"), FakeReply(text="Recovered."))
    model = AnthropicModel("claude-test", base_url=server.anthropic_base_url, api_key="k", max_retries=0)
    agent = Agent(model, limits=Limits(model_retries=2, model_retry_backoff_s=0.01))
    run = agent.start("hello", workspace=workspace)
    events = [e async for e in run.stream()]
    await model.aclose()
    assert run.status == "done" and run.snapshot().output == "Recovered."
    retry = next(e for e in events if isinstance(e, ErrorEvent))
    assert retry.code == "model_retry" and retry.recoverable
    assert len(server.requests) == 2


async def test_retries_are_bounded(server: FakeLLMServer, workspace: Path) -> None:
    server.add(*[FakeReply(text="x", stream_error="overloaded_error") for _ in range(3)])
    model = AnthropicModel("claude-test", base_url=server.anthropic_base_url, api_key="k", max_retries=0)
    agent = Agent(model, limits=Limits(model_retries=2, model_retry_backoff_s=0.01))
    run = agent.start("hello", workspace=workspace)
    events = [e async for e in run.stream()]
    await model.aclose()
    assert run.status == "failed"
    assert [e.code for e in events if isinstance(e, ErrorEvent)] == [
        "model_retry",
        "model_retry",
        "model_error",
    ]
    assert len(server.requests) == 3
