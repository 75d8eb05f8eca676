"""The "scripted replies never used" warning speaks of runs that ended, never of paused ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ASK = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which file?"}}
END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "done"}}
CURL = {"tool": "bash", "args": {"command": "curl --version"}}  # the network: asks for approval


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(replies))
    return f"scripted:{path}"


def test_a_run_waiting_for_an_answer_gets_no_unused_replies_warning(cli: Any, tmp_path: Path) -> None:
    model = script(tmp_path, [ASK, END])
    paused = cli("run", "pick a file", "--model", model, stdin="")
    assert paused.returncode == 1 and "stays waiting" in paused.stderr, paused.stderr
    assert "never used" not in paused.stderr
    answered = cli("answer", "last", "README.md", "--model", model)
    assert answered.returncode == 0, answered.stderr
    assert "never used" not in answered.stderr


def test_a_run_waiting_for_an_approval_gets_no_unused_replies_warning(cli: Any, tmp_path: Path) -> None:
    paused = cli("run", "check", "--model", script(tmp_path, [CURL, END]), stdin="")
    assert paused.returncode == 1 and "stays waiting" in paused.stderr, paused.stderr
    assert "never used" not in paused.stderr


def test_a_run_that_ended_early_still_warns_about_unused_replies(cli: Any, tmp_path: Path) -> None:
    # A question answered in text ends the run (answered): the last reply is left over.
    proc = cli("run", "what is left?", "--model", script(tmp_path, [{"text": "nothing"}, END]))
    assert proc.returncode == 3, proc.stderr
    assert "1 of 2 scripted replies" in proc.stderr and "never used" in proc.stderr


def test_stdio_gives_no_unused_replies_warning_for_a_waiting_run(cli: Any, tmp_path: Path) -> None:
    proc = cli("stdio", "--model", script(tmp_path, [ASK, END]), stdin=json.dumps({"prompt": "pick"}) + "\n")
    assert proc.returncode == 0, proc.stderr
    assert '"type":"waiting"' in proc.stdout
    assert "never used" not in proc.stderr
