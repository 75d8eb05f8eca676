"""A batch of 3 tasks x 4 attempts, end to end through real ``steward`` processes: on SQLite
with the command's own workers, and on PostgreSQL with a fleet of ``steward worker`` processes
(the command only queues and follows). Some attempts fail by design."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from steward.jobs.store import Job, JobStore
from steward.store.events import open_store

if TYPE_CHECKING:
    from collections.abc import Callable

    Steward = Callable[..., subprocess.CompletedProcess[str]]
    Interrupt = Callable[..., str]


def _jobs(db_url: str) -> list[Job]:
    async def read() -> list[Job]:
        async with await open_store(db_url) as store:
            return await JobStore(store.engine).list(limit=1000)

    return asyncio.run(read())


def _fleet(env: dict[str, str], cwd: Path, db_url: str, count: int) -> list[subprocess.Popen[str]]:
    argv = [sys.executable, "-m", "steward", "worker", "--role", "coder"]
    fleet_env = env | {"STEWARD_DB": db_url}
    return [
        subprocess.Popen(
            argv, cwd=cwd, env=fleet_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]


def _stop(workers: list[subprocess.Popen[str]]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        worker.send_signal(signal.SIGTERM)  # at once: the batch is over
    for worker in workers:
        try:
            worker.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()


def test_a_batch_reports_pass_at_k_from_each_attempts_verifier(
    task_set: Path, steward_env: dict[str, str], steward: Steward, db_url: str, tmp_path: Path
) -> None:
    report_dir = tmp_path / "report"
    fleet = db_url.startswith("postgresql")
    workers = _fleet(steward_env, tmp_path, db_url, 2) if fleet else []
    try:
        done = steward(
            "batch", str(task_set), "--attempts", "4", "--model", "scripted",
            "--store", db_url, "--workers", "0" if fleet else "2", "-o", str(report_dir),
        )  # fmt: skip
    finally:
        _stop(workers)
    assert done.returncode == 0, done.stderr
    report = json.loads((report_dir / "report.json").read_text())
    tasks = {t["task"]: t for t in report["tasks"]}
    assert (tasks["add"]["passed"], tasks["greeting"]["passed"], tasks["notes"]["passed"]) == (2, 4, 0)
    assert tasks["add"]["pass_at"] == pytest.approx({"1": 0.5, "2": 1 - 1 / 6, "3": 1.0, "4": 1.0})
    assert tasks["greeting"]["pass_at"] == pytest.approx({"1": 1.0, "2": 1.0, "3": 1.0, "4": 1.0})
    assert tasks["notes"]["pass_at"] == pytest.approx({"1": 0.0, "2": 0.0, "3": 0.0, "4": 0.0})
    assert report["summary"]["pass@1"] == pytest.approx(0.5)
    assert report["summary"]["pass@4"] == pytest.approx(2 / 3)
    assert report["summary"]["complete"] is True
    by_attempt = {(a["task"], a["attempt"]): a for a in report["attempts"]}
    # The scripts alternate for "add": the wrong fix fails its verifier although its run says solved.
    assert [by_attempt["add", n]["passed"] for n in (1, 2, 3, 4)] == [True, False, True, False]
    assert by_attempt["add", 2]["end_status"] == "solved"
    assert by_attempt["add", 2]["verify"]["exit_code"] == 1
    assert by_attempt["notes", 1]["verify"] is None
    assert by_attempt["notes", 1]["end_status"] == "partial"
    assert all(a["steps"] >= 2 and a["tokens"] > 0 for a in report["attempts"])
    # Each attempt ran in its own copy of the template; the template itself is untouched.
    assert (report_dir / "workspaces" / "add" / "1" / "calc.py").read_text().endswith("a + b\n")
    assert (report_dir / "workspaces" / "add" / "2" / "calc.py").read_text().endswith("a * b\n")
    assert (task_set.parent / "add" / "calc.py").read_text().endswith("a - b\n")
    # Trajectories grouped per task, the verdict as reward.
    lines = (report_dir / "trajectories" / "add.jsonl").read_text().splitlines()
    assert [json.loads(line)["reward"] for line in lines] == [1.0, 0.0, 1.0, 0.0]
    notes = [
        json.loads(line) for line in (report_dir / "trajectories" / "notes.jsonl").read_text().splitlines()
    ]
    assert len(notes) == 4
    assert all(n["reward"] < 1 for n in notes)
    assert "| add | 2/4 | 0.500 | 1.000 |" in (report_dir / "report.md").read_text()
    assert "pass@1 0.500 · pass@4 0.667" in done.stdout
    # Printed to a pipe, the table is whole: no figure is cut short, each time keeps its unit.
    assert "…" not in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("│ ")]
    assert len(rows) == 3 and all(row.rstrip("│ ").endswith(" s") for row in rows)
    # One job per attempt, each ended: nothing ran twice.
    jobs = _jobs(db_url)
    assert len(jobs) == 12
    assert {j.status for j in jobs} <= {"done", "failed"}


def test_an_interrupted_batch_reports_what_finished_and_resumes_without_running_anything_twice(
    task_set: Path, steward: Steward, interrupt: Interrupt, tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'queue.db'}"
    report_dir = tmp_path / "report"
    # --workers 0 and no fleet: the jobs stay queued, so the stop comes while nothing has run.
    err = interrupt(
        str(task_set), "-k", "2", "--model", "scripted", "--store", db_url, "--workers", "0", "-o", str(report_dir),
        ready=lambda: _all_queued(report_dir / "batch.json", 6), what="queueing the 6 attempts",
    )  # fmt: skip
    assert "no worker serves role 'coder' in this store yet" in err
    assert "0 of 6 attempts settled" in err
    assert f"steward batch --resume {report_dir}" in err
    assert json.loads((report_dir / "report.json").read_text())["summary"]["settled"] == 0
    queued = {j.id for j in _jobs(db_url)}
    assert len(queued) == 6

    resumed = steward("batch", "--resume", str(report_dir), "--workers", "2")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((report_dir / "report.json").read_text())
    assert report["summary"]["settled"] == 6
    assert {a["job"] for a in report["attempts"]} == queued  # the same jobs, none queued again
    assert len(_jobs(db_url)) == 6

    again = steward("batch", "--resume", str(report_dir), "--workers", "2")
    assert again.returncode == 0, again.stderr  # all settled: the report is written again, nothing runs
    assert len(_jobs(db_url)) == 6


def _all_queued(manifest: Path, count: int) -> bool:
    """Whether the batch's manifest lists ``count`` attempts, each with its job."""
    try:
        runs = json.loads(manifest.read_text())["runs"]
    except (FileNotFoundError, ValueError):
        return False
    return len(runs) == count and all(r["job"] for r in runs)
