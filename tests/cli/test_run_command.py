"""`steward run` through a real subprocess: progress, NDJSON, exit codes, clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def write_script(path: Path, replies: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump(replies))
    return path


def end(status: str = "solved", message: str = "Finished the job.") -> dict[str, Any]:
    return {"agent_step": {"phase": "end", "summary": "end", "end_status": status, "end_message": message}}


def test_no_model_says_how_to_configure_one(cli: Any, tmp_path: Path) -> None:
    proc = cli("run", "do something")
    assert proc.returncode == 2
    assert "No model configured" in proc.stderr and "steward demo" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_scripted_run_shows_progress_and_prints_the_answer(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    script = write_script(
        tmp_path / "s.yaml",
        [
            {"agent_step": {"phase": "plan", "summary": "Plan", "plan": {"goal": "read notes",
                                                                           "sub_tasks": [{"id": 1, "title": "Read"}]}}},
            {"tool": "read_file", "args": {"path": "notes.txt"}},
            {"agent_step": {"phase": "verify", "summary": "Read it", "sub_task_outcome": "done"}},
            end(message="notes.txt has two lines."),
        ],
    )  # fmt: skip
    proc = cli("run", "read the notes", "--model", f"scripted:{script}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "notes.txt has two lines."
    assert "PLAN" in proc.stderr and "read_file notes.txt" in proc.stderr and "■ solved" in proc.stderr


def test_json_prints_one_event_per_line(cli: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.yaml", [{"tool": "bash", "args": {"command": "echo hi"}}, end()])
    proc = cli("run", "say hi", "--json", "--model", f"scripted:{script}")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["type"] == "run_start" and events[-1]["type"] == "done"
    result = next(e for e in events if e["type"] == "tool_result")
    assert "hi" in result["data"]["output"] and result["data"]["status"] == "completed"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_partial_and_stuck_exit_with_1(cli: Any, tmp_path: Path) -> None:
    for status in ("partial", "stuck"):
        script = write_script(tmp_path / f"{status}.yaml", [end(status, "could not finish")])
        proc = cli("run", "goal", "--quiet", "--model", f"scripted:{script}")
        assert proc.returncode == 1
        assert proc.stdout.strip() == "could not finish"


def test_step_limit_flag_ends_the_run(cli: Any, tmp_path: Path) -> None:
    reason = {"agent_step": {"phase": "reason", "summary": "thinking"}}
    script = write_script(tmp_path / "s.yaml", [reason, reason, reason])
    proc = cli("run", "goal", "--max-steps", "2", "--model", f"scripted:{script}")
    assert proc.returncode == 1
    assert "Stopped at the step limit (2 steps)" in proc.stdout
    assert "1 of 3 scripted replies in" in proc.stderr and "were never used" in proc.stderr


def test_script_running_out_is_a_clear_failure(cli: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.yaml", [{"agent_step": {"phase": "reason", "summary": "x"}}])
    proc = cli("run", "goal", "--model", f"scripted:{script}")
    assert proc.returncode == 1
    assert "all were used" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


def test_unknown_provider_is_a_usage_error(cli: Any) -> None:
    proc = cli("run", "goal", "--model", "gemini:pro")
    assert proc.returncode == 2
    assert "Unknown model provider 'gemini'" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_workspace_is_a_usage_error(cli: Any, tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.yaml", [end()])
    proc = cli("run", "goal", "-w", str(tmp_path / "nope"), "--model", f"scripted:{script}")
    assert proc.returncode == 2
    assert "is not a directory this user can read" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_config_file_is_one_line_naming_the_key(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("[limits]\nmax_stepz = 1\n")
    proc = cli("run", "goal", "--model", "scripted:x.yaml")
    assert proc.returncode == 2
    assert "unknown key 'limits.max_stepz'" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_goal_is_a_usage_error(cli: Any) -> None:
    proc = cli("run")
    assert proc.returncode == 2


def test_a_question_is_answered_from_stdin(cli: Any, tmp_path: Path) -> None:
    ask = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which file?"}}
    script = write_script(tmp_path / "s.yaml", [ask, end(message="ok")])
    proc = cli("run", "goal", "--model", f"scripted:{script}", stdin="notes.txt\n")
    assert proc.returncode == 0, proc.stderr
    assert "Which file?" in proc.stderr


def test_a_question_with_closed_stdin_says_how_to_answer(cli: Any, tmp_path: Path) -> None:
    ask = {"agent_step": {"phase": "feedback", "summary": "ask", "feedback_message": "Which file?"}}
    script = write_script(tmp_path / "s.yaml", [ask, end()])
    proc = cli("run", "goal", "--model", f"scripted:{script}", stdin="")
    assert proc.returncode == 1
    assert "waiting for you" in proc.stderr and "steward answer" in proc.stderr
