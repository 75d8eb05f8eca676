"""The task file of a batch: one JSON object per line, checked whole before anything is queued.

A task::

    {"id": "fix-mean", "goal": "Make the tests pass", "workspace": "tasks/fix-mean",
     "verify": "python3 -m unittest -q", "script": "tasks/fix-mean/solution.yaml"}

``id`` names the task in the report and in file names; ``workspace`` is a template directory
(relative to the task file) that each attempt gets a fresh copy of; ``verify`` (optional) is a
command run in that copy after the run ends: exit 0 passes. Without one, an attempt passes when
its run ends ``solved``. ``script`` (optional; a file or a list of files, used in turn by the
attempts) is the scripted model's replies, played when the batch runs with ``--model
scripted``. ``verify_timeout_s`` bounds the verifier (default 120 s); ``meta`` is copied to the
report as it is. Blank lines and lines starting with ``#`` are skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steward.errors import ConfigError

_KEYS = ("id", "goal", "workspace", "verify", "script", "verify_timeout_s", "meta")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_EXAMPLE = '{"id": "fix-mean", "goal": "Make the tests pass", "workspace": "tasks/fix-mean"}'
MAX_TASKS = 10_000  # a task file longer than this is a mistake, not a batch
DEFAULT_VERIFY_TIMEOUT_S = 120.0


class BatchError(ConfigError):
    """A batch cannot start or go on as asked; the message names the line or flag, and the fix."""


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    goal: str
    workspace: Path  # the template, resolved
    line: int  # where it is in the task file, for messages
    verify: str | None = None
    scripts: tuple[Path, ...] = ()
    verify_timeout_s: float = DEFAULT_VERIFY_TIMEOUT_S
    meta: dict[str, Any] = field(default_factory=dict)

    def script_for(self, attempt: int) -> Path | None:
        """The scripted model's replies for attempt ``attempt`` (from 1): the scripts in turn."""
        return self.scripts[(attempt - 1) % len(self.scripts)] if self.scripts else None


def load_tasks(path: Path) -> list[Task]:
    """Every task of ``path``; ``BatchError`` naming the first bad line and its fix."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark (some editors write one) is no task
    except FileNotFoundError:
        raise BatchError(f"no task file at {path}; give a JSON-lines file, one task per line") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchError(f"the task file {path} cannot be read: {exc}") from None
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines()[: MAX_TASKS * 2], start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        task = _task(raw, path, number)
        if task.id in seen:
            raise BatchError(
                f"{path}:{number}: task id {task.id!r} is used on line {seen[task.id]} already; "
                "give each task its own id"
            )
        seen[task.id] = number
        tasks.append(task)
    if not tasks:
        raise BatchError(f"{path} has no task; write one JSON object per line, e.g. {_EXAMPLE}")
    if len(tasks) > MAX_TASKS:
        raise BatchError(f"{path} has more than {MAX_TASKS} tasks; split it into several batches")
    return tasks


def _task(raw: str, path: Path, number: int) -> Task:
    where = f"{path}:{number}"
    try:
        item = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BatchError(
            f"{where}: not JSON ({exc.msg}); write one object per line, e.g. {_EXAMPLE}"
        ) from None
    if not isinstance(item, dict):
        raise BatchError(f"{where}: a task is a JSON object, e.g. {_EXAMPLE}")
    unknown = sorted(set(item) - set(_KEYS))
    if unknown:
        raise BatchError(f"{where}: unknown key(s) {', '.join(unknown)}; a task has: {', '.join(_KEYS)}")
    for key in ("id", "goal", "workspace"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise BatchError(f"{where}: {key!r} is missing or not a text; e.g. {_EXAMPLE}")
    if not _ID.fullmatch(item["id"]):
        raise BatchError(
            f"{where}: id {item['id']!r} must start with a letter or a digit, then be letters, digits, "
            "'.', '_' or '-' (it names files), at most 80 characters"
        )
    base = path.resolve().parent
    workspace = (base / item["workspace"]).resolve()
    if not workspace.is_dir():
        raise BatchError(
            f"{where}: the workspace template {item['workspace']!r} is not a directory (looked at "
            f"{workspace}); it is relative to the task file"
        )
    verify = item.get("verify")
    if verify is not None and (not isinstance(verify, str) or not verify.strip()):
        raise BatchError(f'{where}: "verify" is a command line, e.g. "python3 -m unittest -q"')
    timeout = item.get("verify_timeout_s", DEFAULT_VERIFY_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        raise BatchError(f'{where}: "verify_timeout_s" is seconds, more than 0 and at most 600')
    meta = item.get("meta", {})
    if not isinstance(meta, dict):
        raise BatchError(f'{where}: "meta" is a JSON object copied to the report')
    return Task(
        id=item["id"], goal=item["goal"], workspace=workspace, line=number, verify=verify,
        scripts=_scripts(item.get("script"), base, where), verify_timeout_s=float(timeout), meta=meta,
    )  # fmt: skip


def _scripts(value: object, base: Path, where: str) -> tuple[Path, ...]:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise BatchError(f'{where}: "script" is a file, or a list of files, of scripted replies')
    found = []
    for name in names:
        script = (base / name).resolve()
        if not script.is_file():
            raise BatchError(f"{where}: the script {name!r} is not a file (looked at {script})")
        found.append(script)
    return tuple(found)
