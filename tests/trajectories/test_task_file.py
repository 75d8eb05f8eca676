"""``task_file_rows`` reads a ``steward batch`` tasks file as the batch does, named as the
README names it (a string path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steward.errors import ConfigError
from steward.trajectories.tasks import task_file_rows


def test_a_tasks_file_named_by_a_string_gives_its_rows_with_comments_and_a_bom_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tasks" / "fix-add").mkdir(parents=True)
    line = {"id": "fix-add", "goal": "Make add() add.", "workspace": "tasks/fix-add", "verify": "true"}
    (tmp_path / "tasks.jsonl").write_text(
        "\ufeff# the example set\n\n" + json.dumps(line) + "\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    (row,) = task_file_rows("tasks.jsonl")
    assert row["task"] == "fix-add" and row["prompt"] == [{"role": "user", "content": "Make add() add."}]
    assert row["workspace"] == str((tmp_path / "tasks" / "fix-add").resolve()) and row["verify"] == "true"


def test_a_missing_tasks_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the tasks file .*nothing\.jsonl"):
        task_file_rows(str(tmp_path / "nothing.jsonl"))
