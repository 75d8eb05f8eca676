"""`steward run` against local OpenAI-compatible servers and their quirks, end to end.

Each test runs the real command line in a subprocess, with ``[models.openai] base_url``
pointing at the fake server made to behave like a local server (llama-cpp-python's null
content refused, tools hidden without ``tool_choice`` and streamed tool choice answered with an
empty 200; one JSON body for a streamed request; no usage), or at a reply cut short. The run reads a file with a tool and ends with ``agent_step end``:
it must end solved, exit 0, and ``steward runs show`` must tell the story.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward.testing.fake_llm import LLAMA_CPP_PYTHON, FakeLLMServer, FakeReply, FakeToolCall, Quirk

GOAL = "How many lines does notes.txt have?"
READ = FakeToolCall("read_file", {"path": "notes.txt"})
END = FakeToolCall(
    "agent_step",
    {"phase": "end", "summary": "Counted", "end_status": "solved", "end_message": "notes.txt has 2 lines."},
)
# A bound a correct run never reaches: it only keeps a broken one from hanging the suite.
NEVER = 120.0


def script(*, first: FakeReply | None = None, usage: bool = True) -> list[FakeReply]:
    """The model's side of the run: read the file, then end solved (after ``first``, if any)."""
    replies = [
        FakeReply(text="Reading. ", tool_calls=[READ], usage=usage),
        FakeReply(tool_calls=[END], usage=usage),
    ]
    return [first, *replies] if first is not None else replies


def steward_toml(server: FakeLLMServer, *, stream: bool | None = None) -> str:
    lines = [
        'model = "openai:local-model"',
        "[models.openai]",
        f'base_url = "{server.openai_base_url}"',
        "timeout_s = 60",
        "max_retries = 0",
    ]
    if stream is not None:
        lines.append(f"stream = {str(stream).lower()}")
    lines += ["[limits]", "max_output_tokens = 512", "model_retry_backoff_s = 0"]
    return "\n".join(lines) + "\n"


class Steward:
    """``python -m steward ARGS`` in one workspace, with a clean environment."""

    def __init__(self, workspace: Path, home: Path) -> None:
        self.workspace = workspace
        prefixes = ("STEWARD_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
        self.env |= {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_STATE_HOME": str(home / "state"),
            "COLUMNS": "200",
        }

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward", *args],
            cwd=self.workspace,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=NEVER,
        )

    def run(self) -> tuple[subprocess.CompletedProcess[str], str]:
        """Run the goal; the process and ``runs show`` of the run it recorded."""
        proc = self("run", GOAL, "--no-sandbox")
        listed = self("runs", "list")
        assert listed.returncode == 0, listed.stderr
        shown = self("runs", "show", listed.stdout.split()[0])
        assert shown.returncode == 0, shown.stderr
        return proc, shown.stdout

    def recorded(self) -> list[dict[str, Any]]:
        """The events the last run recorded, as ``steward runs export`` gives them."""
        run_id = self("runs", "list").stdout.split()[0]
        exported = self("runs", "export", run_id)
        assert exported.returncode == 0, exported.stderr
        return [json.loads(line) for line in exported.stdout.splitlines()]

    def usage(self) -> dict[str, Any]:
        """The usage the last run's ``done`` event recorded."""
        done = self.recorded()[-1]
        assert done["type"] == "done"
        usage: dict[str, Any] = done["data"]["usage"]
        return usage


@pytest.fixture
def quirky(request: pytest.FixtureRequest) -> Iterator[FakeLLMServer]:
    quirks: frozenset[Quirk] = getattr(request, "param", frozenset())
    with FakeLLMServer(quirks=quirks) as fake:
        yield fake


@pytest.fixture
def steward(tmp_path: Path, workspace: Path) -> Steward:
    return Steward(workspace, tmp_path / "home")


def solved(proc: subprocess.CompletedProcess[str], shown: str) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "notes.txt has 2 lines." in proc.stdout
    assert "▸ read_file" in shown and "■ solved" in shown


def assistant_turns(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [m for r in server.requests for m in r.body["messages"] if m["role"] == "assistant"]


# --- each quirk of llama-cpp-python -----------------------------------------------------------


@pytest.mark.parametrize("quirky", [frozenset({"null_content_refused"})], indirect=True)
def test_a_server_that_refuses_null_content_gets_none(
    quirky: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(quirky))
    quirky.add(*script())
    solved(*steward.run())
    turns = assistant_turns(quirky)
    assert turns and all(isinstance(m["content"], str) for m in turns)
    assert len(quirky.requests) == 2, "no request was refused"


@pytest.mark.parametrize("quirky", [frozenset({"tools_need_choice"})], indirect=True)
def test_a_server_that_shows_tools_only_with_tool_choice_sees_them(
    quirky: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(quirky))
    quirky.add(*script())
    solved(*steward.run())
    assert all(r.body["tool_choice"] == "auto" for r in quirky.requests)


@pytest.mark.parametrize("quirky", [frozenset({"no_stream_with_tools"})], indirect=True)
def test_a_server_that_cannot_stream_tool_calls_gets_whole_replies_and_says_so_once(
    quirky: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(quirky))
    quirky.add(*script())
    proc, shown = steward.run()
    solved(proc, shown)
    # Streamed and answered empty, asked again whole; whole from then on.
    assert [r.body["stream"] for r in quirky.requests] == [True, False, False]
    notice = "cannot stream tool calls; asking for whole replies from now on"
    assert (proc.stdout + proc.stderr).count(notice) == 1
    notices = [e for e in steward.recorded() if e["type"] == "signal" and notice in e["data"]["message"]]
    assert len(notices) == 1 and notices[0]["data"]["code"] == "model_notice"


@pytest.mark.parametrize("quirky", [frozenset({"stream_ignored"})], indirect=True)
def test_a_server_that_answers_a_stream_with_one_json_body_is_read_whole(
    quirky: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(quirky))
    quirky.add(*script())
    solved(*steward.run())
    assert len(quirky.requests) == 2, "each body was read as the whole reply, nothing sent again"


def test_stream_false_asks_for_whole_replies_from_the_first_request(
    server: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(server, stream=False))
    server.add(*script())
    proc, shown = steward.run()
    solved(proc, shown)
    assert [r.body["stream"] for r in server.requests] == [False, False]
    assert "cannot stream tool calls" not in proc.stderr


def test_a_server_that_sends_no_usage_gets_estimated_tokens(
    server: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(server))
    server.add(*script(usage=False))
    proc, shown = steward.run()
    solved(proc, shown)
    usage = steward.usage()
    assert usage["estimated"] is True and usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert "tokens (estimated)" in proc.stderr and "tokens (estimated)" in shown


def test_a_stream_cut_short_is_tried_again(server: FakeLLMServer, steward: Steward, workspace: Path) -> None:
    (workspace / "steward.toml").write_text(steward_toml(server))
    server.add(*script(first=FakeReply(text="Two chunks then a closed socket.", piece=4, cut_after=3)))
    proc, shown = steward.run()
    solved(proc, shown)
    assert "broke off after 3 chunks" in shown
    assert len(server.requests) == 3


def test_a_run_whose_every_reply_is_cut_fails(
    server: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(server))
    server.add(*[FakeReply(text="Half an answer and then", cut_after=2)] * 3)  # model_retries = 2
    proc, shown = steward.run()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "broke off after 2 chunks" in proc.stderr
    assert "■ failed" in shown and "solved" not in shown
    assert len(server.requests) == 3


# --- all of them at once, as the real server -------------------------------------------------


@pytest.mark.parametrize("quirky", [LLAMA_CPP_PYTHON], indirect=True)
def test_a_run_against_llama_cpp_python_calls_its_tool_and_ends_solved(
    quirky: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(steward_toml(quirky))
    quirky.add(*script(usage=False))
    proc, shown = steward.run()
    solved(proc, shown)
    assert [r.body["stream"] for r in quirky.requests] == [True, False, False]
    assert all(r.body["max_tokens"] == 512 and r.body["tool_choice"] == "auto" for r in quirky.requests)
    assert steward.usage()["estimated"] is True


# --- the Anthropic wire, through a proxy that strips usage ------------------------------------


def test_an_anthropic_run_through_a_proxy_gets_a_cut_reply_again_and_estimates_its_tokens(
    server: FakeLLMServer, steward: Steward, workspace: Path
) -> None:
    (workspace / "steward.toml").write_text(
        'model = "anthropic:claude-local"\n'
        f'[models.anthropic]\nbase_url = "{server.anthropic_base_url}"\nmax_retries = 0\n'
        "[limits]\nmax_output_tokens = 512\nmodel_retry_backoff_s = 0\n"
    )
    server.add(*script(first=FakeReply(text="Reading the fi", cut_after=4), usage=False))
    proc, shown = steward.run()
    solved(proc, shown)
    # (the SDK passes no ping on: the count is of the events that carry the reply)
    assert re.search(r"anthropic: the reply from \S+ broke off after \d events \(no message_stop\)", shown)
    assert [r.body["max_tokens"] for r in server.requests] == [512, 512, 512]
    assert steward.usage()["estimated"] is True
