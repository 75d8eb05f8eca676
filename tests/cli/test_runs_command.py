"""Runs are recorded as they happen; `steward runs` lists them, shows a timeline, exports JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ECHO = {"tool": "bash", "args": {"command": "echo recorded"}}
END = {
    "agent_step": {"phase": "end", "summary": "wrap up", "end_status": "solved", "end_message": "all done"}
}


def test_a_run_is_recorded_and_exported_exactly_as_streamed(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ECHO, {"text": "streamed final answer"}]))
    proc = cli("run", "record me", "--json", "--model", f"scripted:{script}")
    assert proc.returncode == 3, proc.stderr  # answered: it acted, then replied in text
    streamed = [json.loads(line) for line in proc.stdout.splitlines()]
    logged = [e for e in streamed if e["seq"]]  # streamed deltas (seq 0) are not part of the log
    assert [e["seq"] for e in logged] == list(range(1, len(logged) + 1))
    run_id = logged[0]["run_id"]
    listed = cli("runs", "list")
    assert listed.returncode == 0 and run_id in listed.stdout and "answered" in listed.stdout
    assert "record me" in listed.stdout
    exported = cli("runs", "export", run_id)
    assert exported.returncode == 0
    assert [json.loads(line) for line in exported.stdout.splitlines()] == logged


def test_show_prints_the_timeline(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([ECHO, END]))
    cli("run", "timeline", "--model", f"scripted:{script}")
    run_id = cli("runs", "list").stdout.split()[0]
    shown = cli("runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "goal: timeline" in shown.stdout
    assert "▸ bash" in shown.stdout and "ms  exit code: 0" in shown.stdout
    assert "END" in shown.stdout and "■ solved" in shown.stdout


def test_an_unknown_run_names_the_fix(cli: Any, tmp_path: Path) -> None:
    proc = cli("runs", "show", "nope")  # nothing recorded here: and nothing is created by looking
    assert proc.returncode == 2 and "no run 'nope' here: nothing is recorded yet" in proc.stderr
    assert not (tmp_path / ".steward").exists()
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([END]))
    assert cli("run", "x", "--model", f"scripted:{script}").returncode == 0
    proc = cli("runs", "show", "nope")
    assert proc.returncode == 2 and "`steward runs list`" in proc.stderr


def test_the_store_url_can_point_elsewhere(cli: Any, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([END]))
    db = tmp_path / "elsewhere" / "runs.db"
    proc = cli("run", "x", "--model", f"scripted:{script}", STEWARD_DB=f"sqlite:///{db}")
    assert proc.returncode == 0, proc.stderr
    assert db.exists() and not (tmp_path / ".steward" / "steward.db").exists()
    assert "solved" in cli("runs", "list", STEWARD_DB=f"sqlite:///{db}").stdout
