"""A batch's ``trajectories/`` folder loads as one Hugging Face dataset, whichever of its tasks
have a verifier: ``datasets`` takes each column's type from the first file it reads, so a
column that is null in one task's file and an object in another's stops the load."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Steward = Callable[..., subprocess.CompletedProcess[str]]


def test_the_trajectories_of_tasks_with_and_without_a_verifier_load_together(
    task_set: Path, steward: Steward, tmp_path: Path
) -> None:
    datasets = pytest.importorskip("datasets")
    tasks = [json.loads(line) for line in task_set.read_text().splitlines()]
    # The task without a verifier ("notes") named first, so that its file is the one read first.
    ordered = [task | {"id": f"{n}-{task['id']}"} for n, task in enumerate(reversed(tasks))]
    task_set.write_text("".join(json.dumps(task) + "\n" for task in ordered))
    done = steward("batch", str(task_set), "--model", "scripted", "-o", "report")
    assert done.returncode == 0, done.stderr

    files = str(tmp_path / "report" / "trajectories" / "*.jsonl")
    loaded = datasets.load_dataset("json", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    rows = {row["task"]: row for row in loaded}
    assert sorted(rows) == ["0-notes", "1-greeting", "2-add"]
    assert json.loads(rows["0-notes"]["verdict"]) is None
    assert json.loads(rows["2-add"]["verdict"])["exit_code"] == 0
    assert rows["2-add"]["reward"] == 1.0 and rows["0-notes"]["reward"] < 1
