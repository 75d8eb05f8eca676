"""The shipped task set: at least ten real tasks whose verifiers fail as shipped and pass once
the scripted solution has run (``steward batch examples/tasks.jsonl --model scripted``); what
the batch exports loads with Hugging Face ``datasets``."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from steward.batch.tasks import load_tasks
from steward.batch.verify import run_verifier

Steward = Callable[..., subprocess.CompletedProcess[str]]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks.jsonl"


def test_every_shipped_verifier_fails_on_its_template(tmp_path: Path) -> None:
    tasks = load_tasks(EXAMPLES)
    assert len(tasks) >= 10
    assert all(t.verify and t.scripts for t in tasks)

    async def verdicts() -> dict[str, bool]:
        found = {}
        for task in tasks:
            copy = tmp_path / task.id
            shutil.copytree(task.workspace, copy)
            assert task.verify is not None
            found[task.id] = (await run_verifier(copy, task.verify, task.verify_timeout_s)).passed
        return found

    assert asyncio.run(verdicts()) == {t.id: False for t in tasks}


def test_the_scripted_solutions_pass_every_verifier(tmp_path: Path, steward: Steward) -> None:
    # As the README runs it: two attempts (a pass@2 column), the table printed to a pipe.
    done = steward(
        "batch", str(EXAMPLES), "--model", "scripted", "--attempts", "2", "-j", "2",
        "-o", str(tmp_path / "report"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    failed = [(a["task"], a["verify"]) for a in report["attempts"] if not a["passed"]]
    assert failed == []
    assert report["summary"]["settled"] == 2 * len(load_tasks(EXAMPLES))
    assert report["summary"]["pass@1"] == 1.0
    # Printed to a pipe, the table is whole: no figure is cut short, each time keeps its unit.
    assert "…" not in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("│ ")]
    assert len(rows) == len(load_tasks(EXAMPLES)) and all(row.rstrip("│ ").endswith(" s") for row in rows)
    _loads_with_datasets(tmp_path / "report", tmp_path / "hf", len(load_tasks(EXAMPLES)), attempts=2)


def _loads_with_datasets(report: Path, cache: Path, count: int, *, attempts: int) -> None:
    """The trajectories of every task, together, and the task rows load as Hugging Face datasets."""
    datasets = pytest.importorskip("datasets")
    files = sorted(str(f) for f in (report / "trajectories").glob("*.jsonl"))
    runs = datasets.load_dataset("json", data_files=files, split="train", cache_dir=str(cache))
    assert runs.num_rows == count * attempts
    assert {"messages", "tools", "reward", "task"} <= set(runs.column_names)
    assert set(runs["reward"]) == {1.0}
    tasks = datasets.load_dataset(
        "json", data_files=str(report / "tasks.jsonl"), split="train", cache_dir=str(cache)
    )
    assert tasks.num_rows == count
    assert tasks[0]["prompt"][0]["role"] == "user"
