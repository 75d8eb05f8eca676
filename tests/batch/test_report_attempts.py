"""``report.md`` lists every settled attempt after the table, as ``report.json`` does: its job,
how its run ended, the verifier's exit code and why it failed, so that a reader finds the
attempts to look at without opening the JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steward.batch.follow import Outcome
from steward.batch.plan import Attempt, Manifest
from steward.batch.report import write_report
from steward.batch.tasks import Task


def _outcome(task: str, attempt: int, job: str, **given: Any) -> Outcome:
    base: dict[str, Any] = {
        "task": task, "attempt": attempt, "job": job, "job_status": "done", "end_status": "solved",
        "passed": True, "verify": None, "steps": 2, "tool_calls": 1, "tokens": 100, "usage": {},
        "cost_usd": 0.0, "seconds": 1.0, "workspace": "", "error": None,
    }  # fmt: skip
    return Outcome(**(base | given))


def test_report_md_lists_each_attempt_with_its_job_ending_and_verdict(tmp_path: Path) -> None:
    tasks = [
        Task(id="add", goal="fix add", workspace=tmp_path, line=1, verify="python3 -m unittest -q"),
        Task(id="notes", goal="read notes", workspace=tmp_path, line=2),
    ]
    runs = [
        Attempt(task=t, number=n, key=f"batch:b:{t}:{n}", workspace="", model=None, job=f"{t}{n}")
        for t in ("add", "notes")
        for n in (1, 2)
    ]
    manifest = Manifest(
        id="b", directory=tmp_path, tasks_file="tasks.jsonl", persona="coder", model="scripted", mode=None,
        attempts=2, store="sqlite://", tasks=tasks, runs=runs,
    )  # fmt: skip
    outcomes = [
        _outcome("add", 1, "add1", verify={"passed": True, "exit_code": 0, "output": "OK"}),
        _outcome("add", 2, "add2", passed=False, verify={"passed": False, "exit_code": None, "output": "..."}),
        _outcome("notes", 1, "notes1", job_status="failed", end_status="stuck", passed=False,
                 error="stuck: the file | is\nnot there"),
    ]  # fmt: skip
    write_report(manifest, {f"batch:b:{o.task}:{o.attempt}": o for o in outcomes})

    text = (tmp_path / "report.md").read_text()
    attempts = text[text.index("## Attempts") :].splitlines()
    assert "| add | 1 | add1 | solved | exit 0 | yes |  |" in attempts
    assert "| add | 2 | add2 | solved | no exit code | no |  |" in attempts
    assert "| notes | 1 | notes1 | stuck | - | no | stuck: the file \\| is not there |" in attempts
    assert not any("notes2" in line for line in attempts)  # not settled: not listed
