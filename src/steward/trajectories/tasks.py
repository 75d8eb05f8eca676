"""Task sets for trainers that make their own rollouts (GRPO): a ``prompt`` and a verifier per task.

A row (``steward runs export --format tasks``, or ``task_file_rows`` over a ``steward batch``
tasks file) is what TRL's ``GRPOTrainer`` takes as a dataset row, and what
``steward.trajectories.environment.StewardEnvironment.reset`` receives::

    {"prompt": [{"role": "user", "content": GOAL}], "task": "3f2a...", "goal": GOAL,
     "verify": "python3 -m unittest -q", "workspace": "/path/to/template",
     "runs": ["ab12..."], "rewards": [1.0], "mean_reward": 1.0}

``verify`` is the command the runs' verifier ran (``[limits] verify``; "" when none ran),
``workspace`` the folder a rollout starts from a copy of. For exported runs it is where they
worked, which they changed: point it at the task's template when there is one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from steward.errors import ConfigError

__all__ = ["task_file_rows", "task_id", "task_rows"]


def task_id(goal: str, verify: str) -> str:
    """A task's id: the same goal checked the same way is the same task."""
    return hashlib.sha256(f"{goal}\0{verify}".encode()).hexdigest()[:12]


def task_rows(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per task of the chat records (``chat_record``), its runs and rewards gathered."""
    rows: dict[str, dict[str, Any]] = {}
    for record in records:
        run = record["run"]
        goal, verify = str(run["goal"]), str(run.get("verify") or "")
        key = task_id(goal, verify)
        row = rows.get(key)
        if row is None:
            row = rows[key] = _row(goal, verify, str(run.get("workspace") or ""), key)
        row["runs"].append(run["id"])
        row["rewards"].append(record["reward"])
    for row in rows.values():
        row["mean_reward"] = round(sum(row["rewards"]) / len(row["rewards"]), 6)
    return list(rows.values())


def task_file_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a ``steward batch`` tasks file (JSONL: goal, workspace, optional verify and
    id), each workspace resolved against the file's folder. As ``steward batch`` reads it: blank
    and ``#`` lines are skipped, and a byte order mark at its start is ignored."""
    path = Path(path)
    rows = []
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"cannot read the tasks file {path}: {why}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            task = json.loads(line)
            goal, workspace = str(task["goal"]), str(task.get("workspace") or "")
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ConfigError(
                f'{path}:{number}: a task is a JSON object with at least a "goal" (and "workspace", "verify")'
            ) from None
        verify = str(task.get("verify") or "")
        where = str((path.parent / workspace).resolve()) if workspace else ""
        row = _row(goal, verify, where, str(task.get("id") or task_id(goal, verify)))
        rows.append(row)
    return rows


def _row(goal: str, verify: str, workspace: str, key: str) -> dict[str, Any]:
    prompt: Sequence[dict[str, str]] = [{"role": "user", "content": goal}]
    return {"prompt": list(prompt), "task": key, "goal": goal, "verify": verify, "workspace": workspace,
            "runs": [], "rewards": [], "mean_reward": None}  # fmt: skip
