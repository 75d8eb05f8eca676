"""`steward doctor --model`: three tiny real requests to the model, over a real socket to the fake
server, and one line on each thing they show; exit code 1 when runs cannot use the model.

Plain `steward doctor` stays free: it sends the model no request at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from steward.cli.doctor import bare_model_filled
from steward.models.diagnose import GET_TIME, LIMIT, diagnose
from steward.models.openai_chat import OpenAIChatModel
from steward.models.scripted import FunctionModel
from steward.testing.fake_llm import LLAMA_CPP_PYTHON, FakeLLMServer, FakeReply, FakeToolCall

COUNTING = "one, two, three, four, five, six, seven, eight, nine, ten"
STORY = "The keeper climbed the stairs each night to light the lamp above the rocks. " * 6


def good_replies() -> list[FakeReply]:
    """What a capable server answers: streamed text, a tool call, a reply cut at the limit."""
    return [
        FakeReply(text=COUNTING),
        FakeReply(tool_calls=[FakeToolCall("get_time", {"timezone": "UTC"})]),
        FakeReply(text=STORY, output_tokens=120),  # the server stops it at max_tokens
    ]


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def configure(workspace: Path, fake: FakeLLMServer, model: str = "openai:smol") -> None:
    # The sandbox is another line of the doctor's (and needs bubblewrap): off, the exit code is the model's.
    (workspace / "steward.toml").write_text(
        f'model = "{model}"\n[models.openai]\nbase_url = "{fake.openai_base_url}"\n'
        "[sandbox]\nenabled = false\n"
    )


def lines(stdout: str) -> dict[str, str]:
    """The doctor's model-request lines, by what they check."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith("  ") and ": " in line:
            check, _, said = line.strip().partition(": ")
            found.setdefault(check, said)
    return found


# --- the command line -------------------------------------------------------------------------


def test_a_bare_model_flag_gets_an_empty_value_and_a_given_one_is_kept() -> None:
    assert bare_model_filled(["--model"]) == ["--model", ""]
    assert bare_model_filled(["-m", "-w", "x"]) == ["-m", "", "-w", "x"]
    assert bare_model_filled(["--model", "openai:x", "-w", "x"]) == ["--model", "openai:x", "-w", "x"]
    assert bare_model_filled(["--", "--model"]) == ["--", "--model"]


def test_plain_doctor_sends_the_model_nothing(cli: Any, tmp_path: Path, fake: FakeLLMServer) -> None:
    configure(tmp_path, fake)
    done = cli("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model: openai:smol:" in done.stdout and "model requests" not in done.stdout
    assert fake.requests == []  # the model list is a GET; no completion was asked for


def test_doctor_model_tries_the_configured_model(cli: Any, tmp_path: Path, fake: FakeLLMServer) -> None:
    configure(tmp_path, fake)
    fake.add(*good_replies())
    done = cli("doctor", "--model")
    assert done.returncode == 0, done.stdout + done.stderr
    said = lines(done.stdout)
    assert said["reachable"] == "yes, it answered as 'smol'"
    assert said["streams text"].startswith("yes, ") and "pieces arrived" in said["streams text"]
    assert said["streams tool calls"] == "yes, get_time was called in a streamed reply"
    assert said["honours max_tokens"] == "yes, asked for at most 16: 16 tokens, stop reason length"
    assert said["reports usage"].startswith("yes: ")
    # Three requests: text, then one tool (get_time), then a long text bounded at 16 tokens.
    bodies = [r.body for r in fake.requests]
    assert [b["model"] for b in bodies] == ["smol"] * 3
    assert [[t["function"]["name"] for t in b.get("tools", [])] for b in bodies] == [[], ["get_time"], []]
    assert bodies[2]["max_tokens"] == LIMIT


def test_doctor_model_spec_tries_that_model(cli: Any, tmp_path: Path, fake: FakeLLMServer) -> None:
    configure(tmp_path, fake)
    fake.add(*good_replies())
    done = cli("doctor", "--model", "openai:other", "-w", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines(done.stdout)["reachable"] == "yes, it answered as 'other'"
    assert {r.body["model"] for r in fake.requests} == {"other"}


def test_a_llama_cpp_python_like_server_is_usable_with_what_it_cannot_do_said(
    cli: Any, tmp_path: Path
) -> None:
    # Streamed tool choice answered with an empty 200, no usage in any reply, tools shown only
    # with tool_choice: as llama-cpp-python 0.3 with chatml-function-calling.
    with FakeLLMServer(quirks=LLAMA_CPP_PYTHON) as server:
        configure(tmp_path, server)
        server.add(*(replace(reply, usage=False) for reply in good_replies()))
        done = cli("doctor", "--model")
        streamed_then_whole = [r.body.get("stream", False) for r in server.requests if r.body.get("tools")]
    assert done.returncode == 0, done.stdout + done.stderr
    said = lines(done.stdout)
    assert said["reachable"] == "yes, it answered as 'smol'"
    assert said["streams text"].startswith("yes, ")
    assert said["streams tool calls"].startswith(
        "only in whole replies: get_time was called once the request was sent again without streaming"
    )
    assert "stream = false in [models.openai]" in said["streams tool calls"]
    limit = said["honours max_tokens"]  # the tokens of the cut reply, counted here
    assert limit.startswith("yes, asked for at most 16: ") and limit.endswith(
        "(estimated), stop reason length"
    )
    assert said["reports usage"] == "no usage: tokens are estimated locally (budgets and the page still work)"
    assert "cannot stream tool calls" in said["note"]  # what the provider says once, said here too
    assert streamed_then_whole == [True, False]


def test_a_model_that_never_calls_a_tool_cannot_run(cli: Any, tmp_path: Path, fake: FakeLLMServer) -> None:
    configure(tmp_path, fake)
    fake.add(FakeReply(text=COUNTING), FakeReply(text="It is noon."), FakeReply(text=STORY[:64]))
    done = cli("doctor", "--model")
    assert done.returncode == 1, done.stdout
    said = lines(done.stdout)["streams tool calls"]
    assert said.startswith("PROBLEM: no tool call came back (it answered 'It is noon.')")
    assert "made for tool use" in said and "Traceback" not in done.stdout + done.stderr


def test_an_unreachable_server_is_asked_once_and_named(cli: Any, tmp_path: Path) -> None:
    with FakeLLMServer() as gone:
        configure(tmp_path, gone)
    done = cli("doctor", "--model")  # the port is closed now
    assert done.returncode == 1
    assert "cannot reach" in next(x for x in done.stdout.splitlines() if x.startswith("model:"))
    said = lines(done.stdout)
    assert said["reachable"].startswith("PROBLEM: openai: cannot reach http://127.0.0.1:")
    assert "is the server running?" in said["reachable"]
    assert said["streams tool calls"] == "not asked: the model could not be reached"
    assert "Traceback" not in done.stdout + done.stderr


def test_a_missing_key_stops_at_the_first_request(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('model = "openai:gpt-4o-mini"\n[sandbox]\nenabled = false\n')
    done = cli("doctor", "--model")
    assert done.returncode == 1
    said = lines(done.stdout)
    assert said["reachable"].startswith("PROBLEM: openai: no API key. Set OPENAI_API_KEY")
    assert said["reports usage"] == "not asked: the model could not be reached"


def test_no_model_configured_is_nothing_to_try(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("[sandbox]\nenabled = false\n")
    done = cli("doctor", "--model")
    assert done.returncode == 1
    assert "model requests: no model to try" in done.stdout and "--model SPEC" in done.stdout


# --- the findings, through the Model interface ---------------------------------------------------


async def test_a_server_that_ignores_max_tokens_is_reported(fake: FakeLLMServer) -> None:
    fake.add(FakeReply(text=COUNTING), FakeReply(tool_calls=[FakeToolCall("get_time")]))
    fake.add(FakeReply(text=STORY, output_tokens=120, honour_max_tokens=False))
    model = OpenAIChatModel("smol", base_url=fake.openai_base_url, max_retries=0)
    try:
        found = await diagnose(model)
    finally:
        await model.aclose()
    assert found.usable  # it can still run: a step is bounded by its timeout
    limit = found.finding("honours max_tokens")
    assert limit.verdict == "note" and "the reply held 120 tokens" in limit.detail


async def test_a_model_configured_for_whole_replies_is_not_said_to_stream(fake: FakeLLMServer) -> None:
    fake.add(*good_replies())
    model = OpenAIChatModel("smol", base_url=fake.openai_base_url, max_retries=0, stream=False)
    try:
        found = await diagnose(model)
    finally:
        await model.aclose()
    assert found.usable and found.notices == ()
    assert found.finding("streams text").detail == "answers whole replies (the text came in one piece)"
    assert found.finding("streams tool calls").detail == (
        "get_time was called in a whole reply (stream = false in [models.openai])"
    )
    assert not any(r.body.get("stream") for r in fake.requests)


async def test_a_request_the_server_refuses_names_the_server_s_words(fake: FakeLLMServer) -> None:
    fake.add(FakeReply(text=COUNTING), FakeReply.error(400, "tools are not supported by this model"))
    fake.add(FakeReply(text=STORY[:64], output_tokens=LIMIT))
    model = OpenAIChatModel("smol", base_url=fake.openai_base_url, max_retries=0)
    try:
        found = await diagnose(model)
    finally:
        await model.aclose()
    assert not found.usable
    tools = found.finding("streams tool calls")
    assert tools.verdict == "problem" and "tools are not supported by this model" in tools.detail


async def test_a_server_that_does_not_answer_in_time_is_a_finding(fake: FakeLLMServer) -> None:
    # Far longer than the bound below (the delay ends when the server closes).
    fake.add(FakeReply(text=COUNTING, delay=60))
    model = OpenAIChatModel("smol", base_url=fake.openai_base_url, max_retries=0)
    try:
        found = await diagnose(model, timeout_s=0.5)
    finally:
        await model.aclose()
    assert not found.usable
    assert found.finding("reachable").detail.startswith("no whole reply within 0.5 s")
    assert {f.verdict for f in found.findings[1:]} == {"not asked"}


async def test_the_anthropic_wire_is_tried_the_same_way(fake: FakeLLMServer) -> None:
    from steward.models.anthropic_messages import AnthropicModel

    fake.add(*good_replies())
    model = AnthropicModel("claude-test", api_key="sk-test", base_url=fake.anthropic_base_url, max_retries=0)
    try:
        found = await diagnose(model)
    finally:
        await model.aclose()
    assert found.usable, found.findings
    assert found.finding("streams tool calls").detail == (
        "get_time was called; whether it could be streamed is not asked of this provider"
    )
    assert fake.requests[1].body["tools"][0]["name"] == GET_TIME.name


async def test_a_model_in_python_is_tried_through_the_same_interface() -> None:
    from steward.models.base import AssistantMessage, ModelRequest, ToolCall

    def answer(request: ModelRequest) -> AssistantMessage:
        if request.tools:
            return AssistantMessage(tool_calls=(ToolCall("c1", "get_time", {}),))
        return AssistantMessage(text="ten words" if request.max_tokens != LIMIT else "short")

    found = await diagnose(FunctionModel(answer, name="function"))
    assert found.usable
    assert found.finding("streams text").detail == "answers whole replies (the text came in one piece)"
    assert found.finding("reports usage").detail == "no usage reported, and none estimated"
