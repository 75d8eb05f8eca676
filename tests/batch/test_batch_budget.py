"""`steward batch --budget-tokens`: every attempt's run gets the budget (per attempt), and a
resumed batch keeps the one it was started with."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

Steward = Callable[..., subprocess.CompletedProcess[str]]


def test_each_attempt_runs_under_the_budget_given_to_the_batch(
    task_set: Path, steward: Steward, db_url: str, tmp_path: Path
) -> None:
    report_dir = tmp_path / "report"
    done = steward(
        "batch", str(task_set), "--attempts", "2", "--model", "scripted", "--store", db_url,
        "--workers", "2", "-o", str(report_dir), "--budget-tokens", "1000",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((report_dir / "report.json").read_text())
    assert report["budget_per_attempt"] == {"tokens": 1000}
    attempts = report["attempts"]
    assert len(attempts) == 6 and report["summary"]["pass@1"] == 0
    for attempt in attempts:  # each stopped before its first model call: no room in 1,000 tokens
        assert (attempt["end_status"], attempt["tool_calls"]) == ("partial", 0), attempt
        assert "this run's budget has no room for another model call" in attempt["error"], attempt
    greeting = report_dir / "workspaces" / "greeting" / "1" / "hello.txt"
    assert greeting.read_text() == "helo\n"  # its fix was never made


def test_the_batch_help_says_the_budget_is_per_attempt(steward: Steward, steward_env: dict[str, str]) -> None:
    shown = steward("batch", "--help", env=steward_env | {"COLUMNS": "200"})
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    assert "--budget-tokens and --budget-usd are per attempt" in text
    assert "Most tokens each attempt (not the whole batch) may use" in text


def test_a_resumed_batch_refuses_a_new_budget(task_set: Path, steward: Steward, tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    refused = steward("batch", "--resume", str(report_dir), "--budget-usd", "0.10")
    assert refused.returncode == 2
    assert "--budget-usd cannot change a batch under way" in refused.stderr
