"""Whole runs against a server with local servers' quirks: the run gets through them.

An ``Agent`` configured by ``steward.toml`` (model ``openai:local-model`` at the fake server's
base URL) reads a file with a tool and ends with ``agent_step``; the fake answers like
llama-cpp-python (``LLAMA_CPP_PYTHON``) or with one quirk, or cuts its streams short. How each
quirk is met, request by request, is in ``test_local_servers``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from steward import Agent
from steward.config import load_config
from steward.testing.fake_llm import LLAMA_CPP_PYTHON, FakeLLMServer, FakeReply, FakeToolCall

# An upper bound a correct program never reaches: it only keeps a broken one from hanging.
NEVER = 60.0

READ = FakeToolCall("read_file", {"path": "notes.txt"})
END = FakeToolCall(
    "agent_step",
    {"phase": "end", "summary": "Read it", "end_status": "solved", "end_message": "notes.txt says hello."},
)


def workspace(tmp_path: Path, server: FakeLLMServer, *, stream: bool | None = None, retries: int = 2) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    stream_line = "" if stream is None else f"stream = {str(stream).lower()}\n"
    (ws / "steward.toml").write_text(
        'model = "openai:local-model"\n'
        "[models.openai]\n"
        f'base_url = "{server.openai_base_url}"\n'
        "max_retries = 0\n"
        "timeout_s = 30\n"
        f"{stream_line}"
        "[limits]\n"
        "max_output_tokens = 512\n"
        f"model_retries = {retries}\n"
        "model_retry_backoff_s = 0\n"
    )
    return ws


async def run_in(
    ws: Path, goal: str = "What does notes.txt say?"
) -> tuple[tuple[str, str | None, str], list[Any]]:
    agent = Agent(config=load_config(ws, user_file=ws / "no-user-config.toml"), sandbox=False)
    events: list[Any] = []
    try:
        run = agent.start(goal, workspace=ws)

        async def drain() -> None:
            events.extend([event async for event in run.stream()])

        await asyncio.wait_for(drain(), NEVER)
        result = run.snapshot()
    finally:
        await agent.aclose()
    return (result.status, result.end_status, result.output), events


def tool_results(events: list[Any]) -> list[Any]:
    return [e for e in events if e.type == "tool_result"]


async def test_a_run_uses_its_tools_on_a_server_that_behaves_like_llama_cpp_python(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    # All the quirks at once: null content refused, tools hidden without tool_choice, no
    # streamed tool choice, no usage in streams.
    server.quirks = LLAMA_CPP_PYTHON
    server.add(FakeReply(tool_calls=[READ], usage=False), FakeReply(tool_calls=[END], usage=False))
    outcome, events = await run_in(workspace(tmp_path, server))
    assert outcome == ("done", "solved", "notes.txt says hello.")
    (result,) = tool_results(events)
    assert result.tool == "read_file" and "hello" in result.output
    notes = [e.message for e in events if e.type == "signal" and e.code == "model_notice"]
    assert len(notes) == 1 and "cannot stream tool calls" in notes[0]
    # The first step tried a stream and fell back; the second asked for a whole reply at once.
    assert [r.body["stream"] for r in server.requests] == [True, False, False]
    assert all(r.body["tool_choice"] == "auto" for r in server.requests)
    second = server.requests[-1].body["messages"]
    assert all(isinstance(m["content"], str) for m in second)


async def test_a_run_with_a_tool_call_works_where_null_content_is_refused(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.quirks = frozenset({"null_content_refused"})
    server.add(FakeReply(tool_calls=[READ]), FakeReply(tool_calls=[END]))
    outcome, events = await run_in(workspace(tmp_path, server))
    assert outcome == ("done", "solved", "notes.txt says hello.")
    assert len(tool_results(events)) == 1
    assert len(server.requests) == 2, "no request was refused"


async def test_a_run_calls_its_tool_where_tools_need_tool_choice(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.quirks = frozenset({"tools_need_choice"})
    server.add(FakeReply(tool_calls=[READ]), FakeReply(tool_calls=[END]))
    outcome, events = await run_in(workspace(tmp_path, server))
    assert outcome == ("done", "solved", "notes.txt says hello.")
    assert [r.tool for r in tool_results(events)] == ["read_file"]


# 3 chunks: the role chunk and two pieces of text. A stream cut before its first piece would,
# with tools offered, be asked again as a whole reply (a server that cannot stream tool calls
# looks just so) unless stream = true.
@pytest.mark.parametrize(("chunks", "stream"), [(0, True), (3, True), (3, None)])
async def test_a_run_retries_a_step_whose_stream_was_cut(
    server: FakeLLMServer, tmp_path: Path, chunks: int, stream: bool | None
) -> None:
    server.add(FakeReply(text="I will read notes.txt now", cut_after=chunks), FakeReply(tool_calls=[READ]))
    server.add(FakeReply(tool_calls=[END]))
    outcome, events = await run_in(workspace(tmp_path, server, stream=stream))
    assert outcome == ("done", "solved", "notes.txt says hello.")
    retries = [e for e in events if e.type == "error" and e.code == "model_retry"]
    assert len(retries) == 1 and "broke off after" in retries[0].message
    assert len(server.requests) == 3


async def test_a_run_whose_every_reply_is_cut_ends_failed_not_solved(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.add(*[FakeReply(text="Half an ans", cut_after=2)] * 2)
    (status, end_status, output), _ = await run_in(workspace(tmp_path, server, retries=1))
    assert (status, end_status) == ("failed", None)
    assert "broke off after 2 chunks (no finish_reason)" in output
    assert len(server.requests) == 2


async def test_stream_false_asks_for_whole_replies_from_the_start(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.quirks = LLAMA_CPP_PYTHON
    server.add(FakeReply(tool_calls=[READ]), FakeReply(tool_calls=[END]))
    outcome, events = await run_in(workspace(tmp_path, server, stream=False))
    assert outcome == ("done", "solved", "notes.txt says hello.")
    assert [r.body["stream"] for r in server.requests] == [False, False]
    assert not [e for e in events if e.type == "signal" and e.code == "model_notice"]
