"""A batch's directory and its manifest (``batch.json``): the tasks, how they run, and each
attempt's job.

Every attempt is queued under the key ``batch:<batch id>:<task>:<attempt>`` (the queue's
idempotency key), so queueing the batch again, after an interruption, finds the jobs queued
already instead of adding new ones: nothing runs twice. An attempt's workspace is a fresh copy
of its task's template, made just before its job is queued, and never again once it is.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.atomic import write_atomic
from steward.batch.tasks import BatchError, Task

if TYPE_CHECKING:
    from steward.jobs.api import Queue

MANIFEST = "batch.json"
MAX_ATTEMPTS = 100  # attempts a task: pass@k is read at a few
MAX_RUNS = 10_000  # runs a batch: tasks x attempts, each a job, a workspace copy and a trajectory


def too_big(tasks: int, attempts: int, tasks_file: Path) -> str | None:
    """Why a batch of ``tasks`` x ``attempts`` runs is refused, with the fix; None if it is not."""
    if attempts > MAX_ATTEMPTS:
        return (
            f"--attempts {attempts}: at most {MAX_ATTEMPTS} attempts a task; pass@k is read at a few "
            "attempts (e.g. -k 5), and more tasks say more than more attempts of one"
        )
    if tasks * attempts > MAX_RUNS:
        return (
            f"{tasks} tasks x {attempts} attempts is {tasks * attempts:,} runs; a batch holds at most "
            f"{MAX_RUNS:,}: give fewer attempts, or split {tasks_file} into several batches"
        )
    return None


_VERSION = 1
SCRIPTED = "scripted"  # --model scripted: each task's own script of replies
_LEFT_OUT = shutil.ignore_patterns(".steward")  # a template's own state is not part of the task


@dataclass(slots=True)
class Attempt:
    task: str
    number: int  # from 1
    key: str  # the queue's idempotency key
    workspace: str
    model: str | None
    job: str | None = None  # its job's id, once queued


@dataclass(slots=True)
class Manifest:
    id: str
    directory: Path
    tasks_file: str
    persona: str
    model: str | None
    mode: str | None
    attempts: int
    store: str
    tasks: list[Task]
    runs: list[Attempt] = field(default_factory=list)
    created_at: float = 0.0
    #: ``[budget]`` values for each attempt's run (``--budget-tokens``, ``--budget-usd``).
    budget: dict[str, float] = field(default_factory=dict)

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)

    def save(self) -> None:
        body = {
            "version": _VERSION, "id": self.id, "tasks_file": self.tasks_file, "persona": self.persona,
            "model": self.model, "mode": self.mode, "attempts": self.attempts, "store": self.store,
            "created_at": self.created_at, "budget": self.budget,
            "tasks": [_task_dict(t) for t in self.tasks],
            "runs": [asdict(a) for a in self.runs],
        }  # fmt: skip
        write_atomic(self.directory / MANIFEST, json.dumps(body, indent=1) + "\n")

    def forget(self) -> None:
        """Take back a new batch's manifest (and its directory, left empty) when its store never
        opened: nothing was queued, and a batch.json left there would refuse the same command."""
        with contextlib.suppress(OSError):
            (self.directory / MANIFEST).unlink()
            self.directory.rmdir()  # only if nothing else is there

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BatchError(
                f"{directory} holds no batch ({MANIFEST} is not there); give the directory a batch "
                "wrote its report to (-o)"
            ) from None
        except (OSError, ValueError) as exc:
            raise BatchError(f"{path} cannot be read ({exc}); it is not a batch's manifest") from None
        if not isinstance(body, dict) or body.get("version") != _VERSION:
            raise BatchError(f"{path} is not a manifest this version of Steward writes")
        try:
            return cls._from(directory, body)
        except (KeyError, TypeError, ValueError) as exc:
            raise BatchError(
                f"{path} is damaged ({type(exc).__name__}: {exc}); it cannot be resumed"
            ) from None

    @classmethod
    def _from(cls, directory: Path, body: dict[str, Any]) -> Manifest:
        return cls(
            id=body["id"], directory=directory, tasks_file=body["tasks_file"], persona=body["persona"],
            model=body["model"], mode=body["mode"], attempts=body["attempts"], store=body["store"],
            tasks=[_task_from(t) for t in body["tasks"]], runs=[Attempt(**a) for a in body["runs"]],
            created_at=body["created_at"], budget=body.get("budget") or {},
        )  # fmt: skip


def _task_dict(task: Task) -> dict[str, Any]:
    return asdict(task) | {"workspace": str(task.workspace), "scripts": [str(s) for s in task.scripts]}


def _task_from(raw: dict[str, Any]) -> Task:
    return Task(
        **raw | {"workspace": Path(raw["workspace"]), "scripts": tuple(Path(s) for s in raw["scripts"])}
    )


def new_manifest(
    directory: Path, tasks: list[Task], *, tasks_file: Path, persona: str, model: str | None,
    mode: str | None, attempts: int, store: str, budget: dict[str, float] | None = None,
) -> Manifest:  # fmt: skip
    """The plan of a new batch in ``directory`` (written by ``save``); nothing is queued yet."""
    if (directory / MANIFEST).exists():
        raise BatchError(
            f"{directory} holds a batch already; `steward batch --resume {directory}` goes on with it, "
            "or give another report directory with -o"
        )
    if model == SCRIPTED:
        missing = [t for t in tasks if not t.scripts]
        if missing:
            raise BatchError(
                f'{tasks_file}:{missing[0].line}: task {missing[0].id!r} has no "script" for --model '
                'scripted; add "script": "FILE" (the scripted replies), or use a real model'
            )
    batch_id = secrets.token_hex(4)
    manifest = Manifest(
        id=batch_id, directory=directory, tasks_file=str(tasks_file), persona=persona, model=model, mode=mode,
        attempts=attempts, store=store, tasks=tasks, created_at=time.time(), budget=dict(budget or {}),
    )  # fmt: skip
    for task in tasks:
        for number in range(1, attempts + 1):
            script = task.script_for(number)
            chosen = f"{SCRIPTED}:{script}" if model == SCRIPTED and script is not None else model
            where = directory / "workspaces" / task.id / str(number)
            key = f"batch:{batch_id}:{task.id}:{number}"
            manifest.runs.append(Attempt(task.id, number, key, str(where.resolve()), chosen))
    return manifest


async def queue_all(
    manifest: Manifest, queue: Queue, on_queued: Callable[[Attempt], None], stopped: Callable[[], bool]
) -> None:
    """Queue every attempt not queued yet, each in a fresh copy of its template (saved as it
    goes: an interrupted queueing, ``stopped`` or not, is picked up where it stopped)."""
    for attempt in manifest.runs:
        if stopped():
            return
        if attempt.job is not None:
            continue
        found = await queue.jobs.by_key(attempt.key)  # queued before the manifest said so
        if found is None:
            _fresh_copy(manifest.task(attempt.task).workspace, Path(attempt.workspace))
            handle = await queue.submit(
                manifest.persona, manifest.task(attempt.task).goal, workspace=attempt.workspace,
                idempotency_key=attempt.key, model=attempt.model, mode=manifest.mode,
                budget=manifest.budget,
            )  # fmt: skip
            attempt.job = handle.id
        else:
            attempt.job = found.id
        manifest.save()
        on_queued(attempt)


def _fresh_copy(template: Path, where: Path) -> None:
    if where.exists():  # a copy made before an interruption, its job never queued: no run used it
        shutil.rmtree(where)
    where.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(template, where, symlinks=True, ignore=_LEFT_OUT)
    except (OSError, shutil.Error) as exc:
        raise BatchError(f"the template {template} could not be copied to {where}: {exc}") from None
