"""The rules a run started under hold for its whole life, whoever continues it.

Each test starts a run under some rules (command-line flags, or the configuration of that
moment), lets it wait, and continues it another way: ``steward answer``, ``approve``, ``deny``,
``resume``, ``run --resume``, ``steward stdio`` or the Python API, with nothing of the first
command's flags. The write that the rules forbade must not be on disk afterwards.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward.agent import Agent
from steward.config import load_config
from steward.store.events import open_store

ASK = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which colour?"}}
CURL = {"tool": "bash", "args": {"command": "curl --version"}}  # asks for approval by default
WRITE = {"tool": "write_file", "args": {"path": "colour.txt", "content": "chosen"}}
EDIT_BY_BASH = {"tool": "bash", "args": {"command": "echo chosen > colour.txt"}}
END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "all done"}}


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def start_waiting(cli: Any, tmp_path: Path, replies: list[dict[str, Any]], *flags: str) -> str:
    """A run started with ``flags`` that now waits (stdin is closed); its id."""
    first = cli("run", "pick a colour", "--model", script(tmp_path, replies), "--json", *flags, stdin="")
    assert first.returncode == 1, first.stderr
    last = events_of(first.stdout)[-1]
    assert last["type"] == "waiting", last
    return str(last["run_id"])


@pytest.mark.parametrize(
    ("flags", "replies", "go_on"),
    [
        (["--deny", "write_file(*)"], [ASK, WRITE, END], ["answer", "last", "yes"]),
        (["--deny", "write_file(colour.txt)"], [ASK, WRITE, END], ["resume", "last"]),
        (["--read-only"], [CURL, WRITE, END], ["approve", "last"]),
        (["--read-only"], [CURL, EDIT_BY_BASH, END], ["deny", "last", "--reason", "no"]),
        (["--deny", "write_file", "--read-only"], [ASK, WRITE, END], ["run", "--resume", "last"]),
        (["--ask", "write_file(*)", "--deny", "write_file(colour*)"], [ASK, WRITE, END], ["resume", "last"]),
    ],
)
def test_a_write_the_first_command_forbade_does_not_happen_when_the_run_goes_on(
    cli: Any, tmp_path: Path, flags: list[str], replies: list[dict[str, Any]], go_on: list[str]
) -> None:
    run_id = start_waiting(cli, tmp_path, replies, *flags)
    went_on = cli(*go_on, "--json", stdin="blue\n")  # `resume` prompts for the answer it waits on
    assert went_on.returncode == 0, went_on.stderr
    events = events_of(went_on.stdout)
    assert events[-1]["type"] == "done" and events[-1]["run_id"] == run_id, events[-1]
    assert not (tmp_path / "colour.txt").exists()
    refused = [e for e in events if e["type"] == "tool_result" and e["data"]["status"] == "failed"]
    assert refused, [e["type"] for e in events]


def test_a_run_started_in_structured_mode_still_asks_when_the_config_says_autonomous(
    cli: Any, tmp_path: Path
) -> None:
    (tmp_path / "steward.toml").write_text('[policy]\nmode = "autonomous"\n')
    fetch = {"tool": "bash", "args": {"command": "curl --version > fetched.txt"}}
    start_waiting(cli, tmp_path, [ASK, fetch, END], "--mode", "structured")
    answered = cli("answer", "last", "blue", "--json", stdin="")
    assert answered.returncode == 1, answered.stderr  # it waits again: the call asks
    assert events_of(answered.stdout)[-1]["type"] == "waiting"
    assert not (tmp_path / "fetched.txt").exists()


def test_a_switch_of_mode_given_to_resume_is_recorded_in_the_run(cli: Any, tmp_path: Path) -> None:
    fetch = {"tool": "bash", "args": {"command": "echo fetched > fetched.txt; curl --version"}}
    run_id = start_waiting(cli, tmp_path, [ASK, fetch, END], "--mode", "structured")
    resumed = cli("resume", run_id, "--mode", "autonomous", "--json", stdin="blue\n")
    assert resumed.returncode == 0, resumed.stderr
    assert any(e["type"] == "mode" for e in events_of(resumed.stdout))
    assert (tmp_path / "fetched.txt").read_text() == "fetched\n"


def test_the_step_limit_given_at_the_start_holds_after_an_answer(cli: Any, tmp_path: Path) -> None:
    second = {"tool": "write_file", "args": {"path": "second.txt", "content": "2"}}
    third = {"tool": "write_file", "args": {"path": "third.txt", "content": "3"}}
    start_waiting(cli, tmp_path, [ASK, second, third, END], "--max-steps", "2")
    cli("answer", "last", "blue")
    assert (tmp_path / "second.txt").exists()
    assert not (tmp_path / "third.txt").exists()


def test_stdio_keeps_the_rules_of_the_configuration_the_run_started_with(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text('[policy]\ndeny = ["write_file(*)"]\n')
    model = script(tmp_path, [ASK, WRITE, END])
    first = cli("stdio", "--model", model, stdin=json.dumps({"prompt": "pick", "run_id": "r-1"}) + "\n")
    assert events_of(first.stdout)[-1]["type"] == "waiting", first.stdout
    (tmp_path / "steward.toml").write_text("")  # the rule is gone from the file, not from the run
    second = cli("stdio", "--model", model, stdin=json.dumps({"run_id": "r-1", "answer": "blue"}) + "\n")
    assert events_of(second.stdout)[-1]["type"] == "done", second.stdout
    assert not (tmp_path / "colour.txt").exists()


def test_the_python_api_keeps_the_rules_the_run_started_with(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [ASK, WRITE, END])
    run_id = start_waiting(cli, tmp_path, [ASK, WRITE, END], "--deny", "write_file(*)", "--read-only")

    async def go_on() -> str:
        async with await open_store(f"sqlite:///{tmp_path / '.steward' / 'steward.db'}") as store:
            agent = Agent(model, config=load_config(tmp_path), store=store)  # no rule of its own
            try:
                run = await agent.resume(run_id)
                return (await run.answer("blue")).status
            finally:
                await agent.aclose()

    assert asyncio.run(go_on()) == "done"
    assert not (tmp_path / "colour.txt").exists()
