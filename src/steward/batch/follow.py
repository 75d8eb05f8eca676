"""Following a batch's jobs to their end: each ended attempt is settled once (its verifier run,
its figures read from its run's log) and kept in ``attempts/<task>/<n>.json`` of the batch's
directory, so that a batch followed again (``--resume``) settles only what is left."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from steward.atomic import write_atomic
from steward.batch.plan import Attempt, Manifest
from steward.batch.verify import run_verifier
from steward.errors import StewardError
from steward.events import DoneEvent
from steward.store.schema import jobs as jobs_table

if TYPE_CHECKING:
    from steward.store.events import EventStore

_ENDED = ("done", "failed", "cancelled", "dead")
POLL_S = 0.25  # how often the jobs' states are read (one query for the whole batch)
_VERIFYING_AT_ONCE = 4


@dataclass(frozen=True, slots=True)
class Outcome:
    """One settled attempt, as the report reads it."""

    task: str
    attempt: int
    job: str
    job_status: str  # done, failed, cancelled or dead
    end_status: str | None  # how its run ended: solved, answered, partial, stuck (None: no end)
    passed: bool
    verify: dict[str, Any] | None  # the verifier's verdict (``Verdict.as_dict``), if there is one
    steps: int
    tool_calls: int
    tokens: int
    usage: dict[str, Any]
    cost_usd: float | None  # None: not recorded
    seconds: float | None  # from its first claim to its end
    workspace: str
    error: str | None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Outcome:
        return cls(**raw)


@dataclass(frozen=True, slots=True)
class Counts:
    total: int
    queued: int = 0
    running: int = 0
    waiting: int = 0
    verifying: int = 0
    passed: int = 0
    failed: int = 0

    @property
    def settled(self) -> int:
        return self.passed + self.failed


def outcome_path(directory: Path, attempt: Attempt) -> Path:
    return directory / "attempts" / attempt.task / f"{attempt.number}.json"


def settled_outcomes(manifest: Manifest) -> dict[str, Outcome]:
    """The attempts settled so far, by key (read from the batch's directory)."""
    found: dict[str, Outcome] = {}
    for attempt in manifest.runs:
        path = outcome_path(manifest.directory, attempt)
        with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
            found[attempt.key] = Outcome.from_dict(json.loads(path.read_text(encoding="utf-8")))
    return found


class Follower:
    """Watches the manifest's jobs; settles each as it ends."""

    def __init__(self, manifest: Manifest, store: EventStore, tell: Callable[[str], None]) -> None:
        self.manifest, self.store = manifest, store
        self._told: set[str] = set()
        self._say = tell
        self.outcomes = settled_outcomes(manifest)
        self._settling: dict[str, asyncio.Task[None]] = {}
        self._verifying = asyncio.Semaphore(_VERIFYING_AT_ONCE)

    async def follow(self, stop: asyncio.Event, on_change: Callable[[Counts], None]) -> bool:
        """Until every attempt is settled (True) or ``stop`` is set (False)."""
        try:
            for _ in range(10**9):  # bounded by the batch's end or the stop
                try:
                    counts = await self.look()
                except (OSError, sa_exc.DBAPIError, StewardError) as exc:  # the store hiccups: look again
                    self._tell(f"the store could not be read ({type(exc).__name__}: {exc}); trying again")
                else:
                    on_change(counts)
                    if counts.settled == counts.total:
                        return True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_S)
                if stop.is_set():
                    return False
            return False
        finally:
            for task in self._settling.values():
                task.cancel()  # an attempt verified halfway is verified again when followed again
            await asyncio.gather(*self._settling.values(), return_exceptions=True)
            self._settling.clear()

    def _tell(self, problem: str) -> None:
        if problem not in self._told and len(self._told) < 20:  # each problem once, a few at most
            self._told.add(problem)
            self._say(problem)

    async def look(self) -> Counts:
        """Read the jobs' states; start settling those that ended."""
        for key, task in list(self._settling.items()):
            if task.done():
                del self._settling[key]
                failed = task.exception()
                if failed is not None:  # the store hiccuped while settling: settled again next look
                    self._tell(f"an attempt could not be settled yet ({type(failed).__name__}: {failed})")
        open_runs = [a for a in self.manifest.runs if a.key not in self.outcomes and a.job is not None]
        states = await self._states([a.job for a in open_runs if a.job is not None])
        tally = {"queued": 0, "running": 0, "waiting": 0}
        for attempt in open_runs:
            row = states.get(attempt.job or "")
            status = row["status"] if row is not None else "queued"
            if status in _ENDED and row is not None:
                if attempt.key not in self._settling:
                    self._settling[attempt.key] = asyncio.create_task(self._settle(attempt, row))
            elif status in tally:
                tally[status] += 1
        passed = sum(1 for o in self.outcomes.values() if o.passed)
        unqueued = sum(a.job is None for a in self.manifest.runs)
        return Counts(
            total=len(self.manifest.runs), queued=tally["queued"] + unqueued,
            running=tally["running"], waiting=tally["waiting"], verifying=len(self._settling), passed=passed,
            failed=len(self.outcomes) - passed,
        )  # fmt: skip

    async def _states(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        t = jobs_table
        columns = (t.c.id, t.c.status, t.c.started_at, t.c.finished_at, t.c.error)
        found: dict[str, dict[str, Any]] = {}
        async with self.store.engine.connect() as conn:
            for start in range(0, len(ids), 500):  # a bounded IN list per query
                rows = await conn.execute(sa.select(*columns).where(t.c.id.in_(ids[start : start + 500])))
                found.update({row["id"]: dict(row) for row in rows.mappings()})
        return found

    async def _settle(self, attempt: Attempt, row: dict[str, Any]) -> None:
        task = self.manifest.task(attempt.task)
        job_id = attempt.job or ""
        done = next((e for e in reversed(await self.store.events(job_id)) if isinstance(e, DoneEvent)), None)
        end_status = done.end_status if done is not None else None
        verdict = None
        ran = row["status"] in ("done", "failed") and done is not None  # its run got to an end
        if task.verify is not None and ran:
            async with self._verifying:
                verdict = await _verdict(Path(attempt.workspace), task.verify, task.verify_timeout_s)
        passed = bool(verdict["passed"]) if verdict is not None else (ran and end_status == "solved")
        usage, tokens, cost = await self._spent(job_id, done)
        started, finished = row["started_at"], row["finished_at"]
        outcome = Outcome(
            task=attempt.task, attempt=attempt.number, job=job_id, job_status=row["status"],
            end_status=end_status, passed=passed, verify=verdict, steps=done.steps if done else 0,
            tool_calls=done.tool_calls if done else 0, tokens=tokens, usage=usage, cost_usd=cost,
            seconds=finished - started if started and finished else None, workspace=attempt.workspace,
            error=row["error"],
        )  # fmt: skip
        path = outcome_path(self.manifest.directory, attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(asdict(outcome), indent=1) + "\n")
        self.outcomes[attempt.key] = outcome

    async def _spent(self, run_id: str, done: DoneEvent | None) -> tuple[dict[str, Any], int, float | None]:
        """The run's usage, tokens and cost as the budget ledger recorded them (the cost None when
        its model has no price), else the tokens its end recorded."""
        from steward.budget.ledger import Ledger

        totals = await Ledger(self.store.engine).run(run_id)
        if totals is not None:
            return dict(totals.usage.as_dict()), totals.tokens, None if totals.unpriced else totals.cost_usd
        usage = dict(done.usage) if done is not None else {}
        return usage, int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)), None


async def _verdict(workspace: Path, command: str, timeout_s: float) -> dict[str, Any]:
    """The verifier's verdict; one that could not even run fails the attempt, saying why."""
    try:
        return (await run_verifier(workspace, command, timeout_s)).as_dict()
    except (OSError, StewardError) as exc:
        return {"passed": False, "exit_code": None, "output": f"the verifier could not run: {exc}"}
