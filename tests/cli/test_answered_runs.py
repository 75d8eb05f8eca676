"""`answered` at the command line: its own exit code (3), its own final line, and `runs show` /
`runs list` tell it from `solved`; estimated tokens are shown as such."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from steward.cli.render import TerminalRenderer, tokens_label
from steward.events import DoneEvent, RunStart
from steward.store.events import open_store

LOOKED = {"tool": "bash", "args": {"command": "echo 42"}}
PLAN = {
    "agent_step": {
        "phase": "plan",
        "summary": "plan",
        "plan": {"goal": "g", "sub_tasks": [{"id": 1, "title": "Echo"}, {"id": 2, "title": "Check it"}]},
    }
}


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


def test_plain_text_after_acting_ends_answered_with_exit_3(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [LOOKED, {"text": "It prints 42."}])
    proc = cli("run", "run echo 42", "--no-sandbox", "--model", model)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == "It prints 42."
    assert "■ answered" in proc.stderr and "■ solved" not in proc.stderr

    listed = cli("runs", "list")
    run_id = listed.stdout.split()[0]
    assert " answered " in listed.stdout
    shown = cli("runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert f"run {run_id} · answered ·" in shown.stdout
    assert "■ answered · 2 steps" in shown.stdout and "It prints 42." in shown.stdout


def test_plain_text_twice_with_an_open_plan_ends_partial_with_exit_1(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [PLAN, LOOKED, {"text": "Done."}, {"text": "Done, really."}])
    proc = cli("run", "run echo 42 and check it", "--no-sandbox", "--model", model)
    assert proc.returncode == 1, proc.stderr
    assert "■ partial" in proc.stderr
    assert "Your plan says sub-task 1 'Echo' is open (and 1 more)" in proc.stderr  # the nudge, shown
    assert proc.stdout.startswith("Done, really.\n\nDone: nothing. Not done: 1 Echo; 2 Check it.")
    shown = cli("runs", "show", "last").stdout  # the timeline keeps the nudge, as a warning
    assert "⚠ Your plan says sub-task 1 'Echo' is open (and 1 more)" in shown
    assert shown.index("⚠ Your plan says") < shown.index("■ partial")


def test_the_help_names_every_exit_code(cli: Any) -> None:
    for args in (("--help",), ("run", "--help")):
        text = " ".join(cli(*args).stdout.split())
        assert "0 solved; 3 answered (the agent answered without saying the goal was done)" in text
        assert "1 partial, stuck or failed" in text


def test_estimated_tokens_are_shown_as_estimated(cli: Any, tmp_path: Path) -> None:
    assert tokens_label({"input_tokens": 1000, "output_tokens": 234, "estimated": True}) == (
        "~1,234 tokens (estimated)"
    )
    assert tokens_label({"input_tokens": 1000, "output_tokens": 234}) == "1,234 tokens"
    assert tokens_label({}) == ""

    usage = {"input_tokens": 1200, "output_tokens": 34, "requests": 1, "estimated": True}
    done = DoneEvent(status="done", end_status="answered", message="hi", steps=1, tool_calls=0, usage=usage)
    err = io.StringIO()
    TerminalRenderer(err=Console(file=err, width=200), out=Console(file=io.StringIO())).show(done)
    assert "■ answered · 1 step · 0 tool calls · ~1,234 tokens (estimated)" in err.getvalue()

    async def record() -> None:  # a run recorded by a server that reported no usage
        async with await open_store(f"sqlite:///{tmp_path}/.steward/steward.db") as store:
            await store.create_run("run-est", goal="say hi", workspace=str(tmp_path))
            start = RunStart(goal="say hi", workspace=str(tmp_path), model="local", max_steps=5)
            for n, event in enumerate((start, done), start=1):
                event.run_id, event.seq, event.ts = "run-est", n, 1.0
            await store.append("run-est", [start, done])
            await store.set_status("run-est", "done", "answered", output="hi")

    asyncio.run(record())
    shown = cli("runs", "show", "run-est")
    assert shown.returncode == 0, shown.stderr
    assert "■ answered · 1 step · ~1,234 tokens (estimated) · hi" in shown.stdout
