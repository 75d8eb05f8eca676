"""The job queue in the store's ``jobs`` table, on SQLite and PostgreSQL alike.

A job asks for one run of a persona (its ``role``) on a goal in a workspace. It is
``queued`` until a worker claims it; ``running`` under that worker's lease, which the
worker's heartbeats keep alive; ``waiting`` while its run waits for a human (the worker slot
is free again); and it ends ``done``, ``failed``, ``cancelled``, or ``dead`` (it killed its
worker ``max_attempts`` times).

Claims are exclusive: one transaction picks the best job and marks it (PostgreSQL
``FOR UPDATE SKIP LOCKED``; SQLite takes the write lock at ``BEGIN IMMEDIATE``). A job whose
lease expired (its worker died, its machine went away) is claimed again by anyone, and
counts one attempt. Every claim increments the job's ``fence``: whatever a worker does for a
job afterwards (heartbeat, wait, release, finish) names the fence it claimed with, and does
nothing once another worker holds a newer one (``LeaseLost``). The job's run log checks the
same fence on every write (``EventStore.log(fence=...)``), so a worker that lost its claim
adds nothing to the run either (``FencedOut``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.errors import StewardError
from steward.store.engine import by_id_or_prefix, write_transaction
from steward.store.schema import jobs as jobs_table

JobStatus = Literal["queued", "running", "waiting", "done", "failed", "cancelled", "dead"]
ACTIVE: tuple[JobStatus, ...] = ("queued", "running", "waiting")
ENDED: tuple[JobStatus, ...] = ("done", "failed", "cancelled", "dead")

_ID_BYTES = 6
EXPIRED_CHECK_S = 1.0  # while there is queued work, expired leases are looked for this often
_QUEUE_ORDER = (jobs_table.c.priority.desc(), jobs_table.c.created_at, jobs_table.c.id)


class JobError(StewardError):
    """A job could not be submitted, found or changed; the message names the fix."""


class LeaseLost(StewardError):  # noqa: N818 - a fact the worker acts on, not a bug
    """The worker's claim on a job is gone: taken over by another worker, or (``cancelled``)
    the job was cancelled while the claim still holds, so the worker settles it."""

    def __init__(self, message: str, *, cancelled: bool = False) -> None:
        super().__init__(message)
        self.cancelled = cancelled


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    role: str
    goal: str
    workspace: str
    priority: int
    idempotency_key: str | None
    user_key: str | None
    parent_id: str | None
    status: JobStatus
    attempts: int
    max_attempts: int
    run_id: str | None
    result: str | None
    error: str | None
    output_schema: dict[str, Any] | None
    lease_owner: str | None
    lease_expires_at: float | None
    fence: int
    cancel_requested: bool
    #: The reply kept for the wait the job's run is in (``steward.jobs.replies``), or None.
    reply: dict[str, Any] | None
    session_id: str | None
    model: str | None
    mode: str | None  # the policy mode asked for its run; None: as configured
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    #: The W3C traceparent its run's spans continue, or None (``steward.telemetry``).
    traceparent: str | None = None
    #: ``[budget]`` values for its run over the configured ones (``--budget-tokens``), or None.
    budget: dict[str, float] | None = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass(frozen=True, slots=True)
class Claim:
    """A job a worker holds: act for it only with this ``fence``."""

    job: Job
    fence: int
    takeover: bool  # an earlier worker's lease had expired: its run goes on from its log


CHANNEL = "steward_jobs"
"""PostgreSQL channel on which the queue says what changed: ``queued:ROLE``, ``cancel:JOB``,
``mode:JOB`` or ``lease:WHEN`` (a job was claimed under a lease that runs out at WHEN, a time)."""


async def _tell(conn: AsyncConnection, payload: str) -> None:
    """Wake listening workers when the transaction commits (PostgreSQL); SQLite workers poll."""
    if conn.dialect.name == "postgresql":
        await conn.execute(sa.select(sa.func.pg_notify(CHANNEL, payload)))


class Wakeups:
    """What a listening worker heard: new work (``work``), and jobs cancelled while they run."""

    def __init__(self) -> None:
        self.work = asyncio.Event()
        self.cancels: dict[str, asyncio.Event] = {}  # job id -> set when it is cancelled
        self.lease = asyncio.Event()  # set when a job was claimed: see ``earliest_lease``
        self.earliest_lease: float | None = None  # the first end of a lease heard of since cleared

    def heard(self, payload: str) -> None:
        kind, _, what = payload.partition(":")
        if kind == "queued":
            self.work.set()
        elif kind == "lease":
            with contextlib.suppress(ValueError):
                when = float(what)
                self.earliest_lease = min(when, self.earliest_lease or when)
                self.lease.set()
        elif kind in ("cancel", "mode") and (event := self.cancels.get(what)) is not None:
            event.set()  # the job's worker reads what was asked at once


@functools.lru_cache(maxsize=64)
def _claim_statement(roles: tuple[str, ...]) -> sa.Update:
    """Pick the best queued job and mark it ours, in one statement (made once per set of roles:
    building it is a good part of a claim's cost). PostgreSQL skips rows another worker is
    claiming; SQLite holds the write lock already (``BEGIN IMMEDIATE``)."""
    t = jobs_table
    best = sa.select(t.c.id).where(t.c.status == "queued")
    if roles:
        best = best.where(t.c.role.in_(list(roles)))
    best = best.order_by(*_QUEUE_ORDER).limit(1).with_for_update(skip_locked=True)
    now = sa.bindparam("now", type_=sa.Double)
    return (
        t.update()
        .where(t.c.id == best.scalar_subquery(), t.c.status == "queued")
        .values(
            status="running", lease_owner=sa.bindparam("worker", type_=sa.Text),
            lease_expires_at=sa.bindparam("expires", type_=sa.Double), fence=t.c.fence + 1, run_id=t.c.id,
            updated_at=now, started_at=sa.func.coalesce(t.c.started_at, now),
        )
        .returning(*t.c)
    )  # fmt: skip


@functools.lru_cache(maxsize=16)
def _held_statement(keys: tuple[str, ...]) -> sa.Update:
    """Set ``keys`` of a job while a claim holds it (made once per set of keys)."""
    t = jobs_table
    held = (t.c.id == sa.bindparam("w_id"), t.c.fence == sa.bindparam("w_fence"), t.c.status == "running")
    return t.update().where(*held).values({key: sa.bindparam(f"v_{key}") for key in keys}).returning(*t.c)


def _job(row: sa.RowMapping | Mapping[str, Any]) -> Job:
    values = dict(row)
    schema = values.pop("output_schema")
    values["output_schema"] = json.loads(schema) if schema else None
    kept = values.pop("reply")
    values["reply"] = json.loads(kept) if kept else None
    budget = values.pop("budget", None)
    values["budget"] = json.loads(budget) if budget else None
    values["cancel_requested"] = bool(values["cancel_requested"])
    return Job(**values)


class JobStore:
    """The queue; ``where`` names the store in error messages."""

    def __init__(self, engine: AsyncEngine, *, where: str = "") -> None:
        self._engine = engine
        self.where = where
        self._expired_due = 0.0  # when this worker next looks for expired leases first

    # --- submitting ---------------------------------------------------------------------

    async def submit(
        self,
        role: str,
        goal: str,
        *,
        workspace: str,
        priority: int = 0,
        idempotency_key: str | None = None,
        user_key: str | None = None,
        parent_id: str | None = None,
        max_attempts: int = 3,
        output_schema: dict[str, Any] | None = None,
        session_id: str | None = None,
        model: str | None = None,
        mode: str | None = None,
        traceparent: str | None = None,
        budget: Mapping[str, float] | None = None,
    ) -> tuple[Job, bool]:
        """Queue a job; return it and whether it is new.

        A second submit with the same ``idempotency_key`` returns the first job. A ``user_key``
        with an active job already (queued, running or waiting) is refused, naming that job.
        ``traceparent``: the trace its run continues (default: the span current here, if any,
        e.g. the parent's ``delegate`` call).
        """
        from steward.telemetry import current_traceparent

        if not goal.strip():
            raise JobError('the goal is empty; say what the agent should do, e.g. "fix the tests"')
        if idempotency_key is not None and (found := await self.by_key(idempotency_key)) is not None:
            return found, False
        now = time.time()
        job_id = secrets.token_hex(_ID_BYTES)
        values = {
            "id": job_id, "role": role, "goal": goal, "workspace": workspace,
            "priority": priority, "idempotency_key": idempotency_key, "user_key": user_key,
            "parent_id": parent_id, "status": "queued", "attempts": 0, "max_attempts": max_attempts,
            "output_schema": json.dumps(output_schema) if output_schema is not None else None,
            "fence": 0, "cancel_requested": False, "created_at": now, "updated_at": now,
            "session_id": session_id, "model": model, "mode": mode,
            "traceparent": traceparent or current_traceparent(),
            "budget": json.dumps(dict(budget)) if budget else None,
        }  # fmt: skip
        try:
            async with write_transaction(self._engine) as conn:
                await conn.execute(jobs_table.insert().values(**values))
                await _tell(conn, f"queued:{role}")
        except sa_exc.IntegrityError:
            if idempotency_key is not None and (found := await self.by_key(idempotency_key)) is not None:
                return found, False  # submitted at the same moment by someone else: theirs
            if user_key is not None and (active := await self.active_for(user_key)) is not None:
                raise JobError(
                    f"user {user_key!r} already has an active job {active.id} ({active.status}); "
                    f"wait for it, or cancel it with `steward jobs cancel {active.id}`"
                ) from None
            raise
        return await self.get(job_id), True

    async def by_key(self, key: str) -> Job | None:
        return await self._one(jobs_table.c.idempotency_key == key)

    async def active_for(self, user_key: str) -> Job | None:
        return await self._one(jobs_table.c.user_key == user_key, jobs_table.c.status.in_(ACTIVE))

    # --- claiming and holding -------------------------------------------------------------

    async def claim(
        self,
        worker: str,
        *,
        roles: Sequence[str] = (),
        lease_s: float = 30.0,
        buried: builtins.list[Job] | None = None,
    ) -> Claim | None:
        """The best job for ``worker`` (highest priority, then oldest), now held under a lease.

        Jobs whose lease expired come first (their run is half done; they are looked for at
        most every ``EXPIRED_CHECK_S`` while there is queued work, and whenever there is none),
        then queued jobs of ``roles`` (any role when empty). A job that has lost
        ``max_attempts`` workers is marked ``dead`` instead of being claimed again (and added to
        ``buried``, for the caller to tell whoever waits for it). None when there is nothing to do.
        """
        now = time.time()
        checked = now >= self._expired_due
        if checked:
            self._expired_due = now + EXPIRED_CHECK_S
            if (taken := await self._take_over(worker, roles, lease_s, now, buried)) is not None:
                return taken
        mark = _claim_statement(tuple(roles))
        values = {"worker": worker, "expires": now + lease_s, "now": now}
        async with write_transaction(self._engine) as conn:
            row = (await conn.execute(mark, values)).mappings().first()
            if row is not None:
                job = _job(row)
                # Idle workers wait no longer than this lease: if this worker dies, one of them
                # takes the job over as it runs out.
                await _tell(conn, f"lease:{values['expires']!r}")
                return Claim(job, job.fence, takeover=False)
        if not checked:  # nothing queued: a job whose worker died is the only work left
            self._expired_due = now + EXPIRED_CHECK_S
            return await self._take_over(worker, roles, lease_s, now, buried)
        return None

    async def _take_over(
        self, worker: str, roles: Sequence[str], lease_s: float, now: float, buried: builtins.list[Job] | None
    ) -> Claim | None:
        """Claim the job whose lease expired longest ago, or None; dead ones are buried."""
        t = jobs_table
        expired = sa.select(t).where(t.c.status == "running", t.c.lease_expires_at < now)
        if roles:
            expired = expired.where(t.c.role.in_(list(roles)))
        expired = expired.order_by(t.c.lease_expires_at).limit(1).with_for_update(skip_locked=True)
        for _ in range(8):  # bounded: each pass claims, or buries one dead job and looks again
            async with write_transaction(self._engine) as conn:
                row = (await conn.execute(expired)).mappings().first()
                if row is None:
                    return None
                job = _job(row)
                attempts = job.attempts + 1
                if attempts >= job.max_attempts:
                    await self._bury(conn, job, attempts, now)
                    if buried is not None:
                        buried.append(job)
                    continue
                changed = dict(
                    status="running", lease_owner=worker, lease_expires_at=now + lease_s, fence=job.fence + 1,
                    attempts=attempts, updated_at=now,
                )  # fmt: skip
                await conn.execute(
                    t.update().where(t.c.id == job.id, t.c.fence == job.fence).values(**changed)
                )
                await _tell(conn, f"lease:{now + lease_s!r}")
            return Claim(replace(job, **changed), job.fence + 1, takeover=True)  # type: ignore[arg-type]
        return None

    async def _bury(self, conn: AsyncConnection, job: Job, attempts: int, now: float) -> None:
        reason = (
            f"its worker stopped {attempts} times while running it (max_attempts is {job.max_attempts}); "
            f"it is dead so it cannot stop another. `steward jobs retry {job.id}` queues it again"
        )
        await conn.execute(
            jobs_table.update()
            .where(jobs_table.c.id == job.id, jobs_table.c.fence == job.fence)
            .values(
                status="dead",
                attempts=attempts,
                error=reason,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=now,
                finished_at=now,
            )
        )

    async def trace(self, claim: Claim, traceparent: str) -> Job:
        """Keep the trace the job's run began (its first span), for whoever goes on with it."""
        return await self._held(claim, traceparent=traceparent)

    async def heartbeat(self, claim: Claim, *, lease_s: float = 30.0) -> Job:
        """Renew the lease; ``LeaseLost`` when another worker holds the job now, or it was
        cancelled (the job then says ``cancel_requested``)."""
        now = time.time()
        job = await self._held(claim, lease_expires_at=now + lease_s, updated_at=now)
        if job.cancel_requested:
            raise LeaseLost(f"job {job.id} was cancelled", cancelled=True)
        return job

    async def wait(self, claim: Claim, *, until: float | None = None) -> Job:
        """The job's run waits for a human: the job gives up its worker until it is answered.

        ``until``: when what it waits for expires (an approval's deadline), kept in the lease
        column, which a waiting job does not otherwise use; ``expired_waits`` finds it then.
        A job cancelled just before ends here instead; the job as it is now.
        """
        job = await self._held(
            claim,
            status="waiting",
            lease_owner=None,
            lease_expires_at=until,
            reply=None,
            updated_at=time.time(),
        )
        return await self._cancelled_if_asked(job)

    async def release(self, claim: Claim) -> Job:
        """Give the job back to the queue (the worker stops; another goes on with its run)."""
        job = await self._held(
            claim,
            status="queued",
            lease_owner=None,
            lease_expires_at=None,
            reply=None,
            updated_at=time.time(),
        )
        if job.cancel_requested:
            return await self._cancelled_if_asked(job)
        await self._wake(claim.job.role)
        return job

    async def give_back(self, claim: Claim, error: str) -> Job:
        """Give the job back after its run broke off with an unexpected ``error``: that counts as
        a worker stopping (as a takeover does), so a job that breaks every time ends ``failed``
        after ``max_attempts`` instead of being claimed again and again for good."""
        now = time.time()
        attempts = claim.job.attempts + 1
        if attempts < claim.job.max_attempts:
            job = await self._held(
                claim, status="queued", attempts=attempts, error=error, lease_owner=None,
                lease_expires_at=None, reply=None, updated_at=now,
            )  # fmt: skip
            if job.cancel_requested:
                return await self._cancelled_if_asked(job)
            await self._wake(claim.job.role)
            return job
        why = (
            f"its run broke off {attempts} times (max_attempts is {claim.job.max_attempts}), last with "
            f"{error}; `steward jobs retry {claim.job.id}` queues it again"
        )
        return await self._held(
            claim, status="failed", attempts=attempts, error=why, lease_owner=None, lease_expires_at=None,
            reply=None, updated_at=now, finished_at=now,
        )  # fmt: skip

    async def _cancelled_if_asked(self, job: Job) -> Job:
        if not job.cancel_requested:
            return job
        ended = await self._stop_idle(job.id, job.error or "cancelled by the user")
        return ended or await self.get(job.id)

    async def _stop_idle(self, job_id: str, reason: str) -> Job | None:
        """Cancel the job if no worker holds it (queued or waiting): the job, or None."""
        t, now = jobs_table, time.time()
        async with write_transaction(self._engine) as conn:
            done = await conn.execute(
                t.update().where(t.c.id == job_id, t.c.status.in_(("queued", "waiting")))
                .values(status="cancelled", cancel_requested=True, error=reason, lease_expires_at=None,
                        reply=None, updated_at=now, finished_at=now)
                .returning(*t.c)
            )  # fmt: skip
            row = done.mappings().first()
        return _job(row) if row is not None else None

    async def parents_of_ended(self, *, limit: int = 20) -> builtins.list[tuple[Job, Job]]:
        """Waiting jobs with a child that has ended, with that child (newest first)."""
        parent, child = jobs_table.alias("parent"), jobs_table.alias("child")
        query = (
            sa.select(parent, child)
            .join(child, child.c.parent_id == parent.c.id)
            .where(parent.c.status == "waiting", child.c.status.in_(ENDED))
            .order_by(child.c.finished_at.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        width = len(jobs_table.c)
        names = [c.name for c in jobs_table.c]
        return [
            (
                _job(dict(zip(names, row[:width], strict=True))),
                _job(dict(zip(names, row[width:], strict=True))),
            )
            for row in rows
        ]

    async def next_lease_expiry(self, roles: Sequence[str] = ()) -> float | None:
        """When the first lease of a running job of ``roles`` (any role when empty) runs out, as
        it stands now (a heartbeat moves it later); None when no job runs. An idle worker waits
        no longer than that, so a job whose worker died is taken over as its lease ends, on every
        engine (PostgreSQL tells of new work, not of a lease running out)."""
        t = jobs_table
        query = sa.select(sa.func.min(t.c.lease_expires_at)).where(t.c.status == "running")
        if roles:
            query = query.where(t.c.role.in_(list(roles)))
        async with self._engine.connect() as conn:
            found = (await conn.execute(query)).scalar_one_or_none()
        return None if found is None else float(found)

    async def expired_waits(self, now: float, *, limit: int = 20) -> builtins.list[Job]:
        """Waiting jobs whose approval's deadline has passed (the default applies to them)."""
        t = jobs_table
        query = sa.select(t).where(t.c.status == "waiting", t.c.lease_expires_at < now)
        async with self._engine.connect() as conn:
            rows = await conn.execute(query.order_by(t.c.lease_expires_at).limit(limit))
            return [_job(row) for row in rows.mappings()]

    async def finish(
        self, claim: Claim, status: Literal["done", "failed", "cancelled"], *, result: str | None = None,
        error: str | None = None,
    ) -> Job:  # fmt: skip
        now = time.time()
        return await self._held(
            claim, status=status, result=result, error=error, lease_owner=None, lease_expires_at=None,
            reply=None, updated_at=now, finished_at=now,
        )  # fmt: skip

    async def _held(self, claim: Claim, **values: object) -> Job:
        """Change the job only while ``claim`` is the newest claim on it and it still runs; the
        job as it is now."""
        keys = tuple(sorted(values))
        params = {f"v_{key}": value for key, value in values.items()} | {
            "w_id": claim.job.id,
            "w_fence": claim.fence,
        }
        async with write_transaction(self._engine) as conn:
            row = (await conn.execute(_held_statement(keys), params)).mappings().first()
        if row is not None:
            return _job(row)
        job = await self.get(claim.job.id)
        raise LeaseLost(
            f"job {job.id} is no longer held by this worker (it is {job.status}, claim {job.fence}, "
            f"this worker's was {claim.fence})"
        )

    # --- a human's hand -----------------------------------------------------------------

    async def requeue(self, job_id: str, *, reply: dict[str, Any] | None = None) -> Job:
        """A waiting job was answered: back in the queue with the ``reply`` (see
        ``steward.jobs.replies``), for any worker to go on with its run. Once: a second reply to
        the same wait finds the job queued already."""
        job = await self.get(job_id)
        if job.status != "waiting":
            raise JobError(f"job {job.id} is {job.status}, not waiting")
        t = jobs_table
        kept = json.dumps(reply) if reply is not None else None
        async with write_transaction(self._engine) as conn:
            done = await conn.execute(
                t.update().where(t.c.id == job.id, t.c.status == "waiting")
                .values(status="queued", reply=kept, lease_expires_at=None, updated_at=time.time())
                .returning(*t.c)
            )  # fmt: skip
            row = done.mappings().first()
            if row is None:
                raise JobError(f"job {job.id} was answered by someone else just now; nothing changed")
            await _tell(conn, f"queued:{job.role}")
        return _job(row)  # as queued (a worker may hold it already)

    async def cancel(self, job_id: str, reason: str = "cancelled by the user", *, _depth: int = 0) -> Job:
        """Cancel a job and the jobs it delegated to: at once if no worker holds it; a running one
        is stopped by its worker (at once on PostgreSQL, within a second or two on SQLite).
        Each change is one conditional statement, so a claim in between cannot make it miss."""
        job = await self.get(job_id)
        t = jobs_table
        for _ in range(4):  # bounded: each pass finds the job idle, running, or ended
            if job.ended:
                raise JobError(f"job {job.id} already ended ({job.status})")
            stopped = await self._stop_idle(job.id, reason)
            if stopped is not None:
                job = stopped
                break
            async with write_transaction(self._engine) as conn:
                asked = await conn.execute(
                    t.update().where(t.c.id == job.id, t.c.status == "running")
                    .values(cancel_requested=True, error=reason, updated_at=time.time())
                )  # fmt: skip
                if asked.rowcount == 1:
                    await _tell(conn, f"cancel:{job.id}")
            job = await self.get(job.id)
            if asked.rowcount == 1:
                break
        if _depth < 8:  # delegation is bounded far below this; the bound only keeps the walk finite
            for child in await self.list(parent_id=job.id, status=ACTIVE, limit=100):
                with contextlib.suppress(JobError):
                    await self.cancel(child.id, f"its parent job {job.id} was cancelled", _depth=_depth + 1)
        return job

    async def cancel_requested(self, job_id: str) -> bool:
        return (await self.asked(job_id))[0]

    async def asked(self, job_id: str) -> tuple[bool, str | None]:
        """What was asked of a running job from outside: whether to cancel it, and its mode."""
        t = jobs_table
        async with self._engine.connect() as conn:
            query = sa.select(t.c.cancel_requested, t.c.mode).where(t.c.id == job_id)
            row = (await conn.execute(query)).first()
        return (False, None) if row is None else (bool(row[0]), row[1])

    async def set_mode(self, job_id: str, mode: str) -> Job:
        """Ask a job's run to go on in ``mode`` ("structured" or "autonomous"): its worker
        switches at the run's next step (at once on PostgreSQL, within a second elsewhere) and
        the run's log records the switch; a queued or waiting job starts again in it."""
        if mode not in ("structured", "autonomous"):
            raise JobError(f"mode {mode!r} is not one of: structured, autonomous")
        job = await self.get(job_id)
        if job.ended:
            raise JobError(f"job {job.id} already ended ({job.status}); its mode cannot change")
        if job.parent_id is not None and mode == "autonomous":  # whoever asks: API, Python, CLI
            raise JobError(
                f"job {job.id} was delegated by job {job.parent_id}: it keeps the mode its parent gave it"
            )
        t = jobs_table
        async with write_transaction(self._engine) as conn:
            await conn.execute(t.update().where(t.c.id == job.id).values(mode=mode, updated_at=time.time()))
            await _tell(conn, f"mode:{job.id}")
        return await self.get(job.id)

    async def _wake(self, role: str) -> None:
        if self._engine.dialect.name == "postgresql":
            async with write_transaction(self._engine) as conn:
                await _tell(conn, f"queued:{role}")

    @contextlib.asynccontextmanager
    async def listen(self) -> AsyncIterator[Wakeups]:
        """Hear the queue's news as it commits (PostgreSQL ``LISTEN``); elsewhere, or when the
        listening connection cannot be made, nothing is heard and workers find work by polling."""
        wakeups = Wakeups()
        if self._engine.dialect.name != "postgresql":
            yield wakeups
            return
        import asyncpg

        url = self._engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            conn = await asyncpg.connect(url, timeout=10)
            await conn.add_listener(CHANNEL, lambda _c, _pid, _ch, payload: wakeups.heard(str(payload)))
        except (TimeoutError, OSError, asyncpg.PostgresError):
            yield wakeups  # polling still finds every job, only later
            return
        try:
            yield wakeups
        finally:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    async def retry(self, job_id: str) -> Job:
        """Queue an ended job (failed, cancelled or dead) again, with its attempts reset."""
        job = await self.get(job_id)
        if job.status not in ("failed", "cancelled", "dead"):
            raise JobError(f"job {job.id} is {job.status}; only a failed, cancelled or dead job is retried")
        try:
            await self._set(
                job, status="queued", attempts=0, error=None, cancel_requested=False, finished_at=None
            )
        except sa_exc.IntegrityError:  # its user has another active job now: one at a time
            active = await self.active_for(job.user_key) if job.user_key is not None else None
            which = f" {active.id} ({active.status})" if active is not None else ""
            raise JobError(
                f"user {job.user_key!r} already has an active job{which}; wait for it or cancel it, "
                f"then retry {job.id}"
            ) from None
        await self._wake(job.role)
        return await self.get(job.id)

    async def _set(self, job: Job, **values: object) -> None:
        t = jobs_table
        async with write_transaction(self._engine) as conn:
            await conn.execute(
                t.update().where(t.c.id == job.id, t.c.status == job.status, t.c.fence == job.fence)
                .values(updated_at=time.time(), **values)
            )  # fmt: skip

    # --- reading ------------------------------------------------------------------------

    async def get(self, job_id: str) -> Job:
        """The job ``job_id`` (or a unique prefix of it)."""
        rows = await by_id_or_prefix(self._engine, jobs_table, job_id)
        if len(rows) == 1:
            return _job(rows[0])
        if rows:
            raise JobError(f"{job_id!r} matches several jobs; give more of the id")
        raise JobError(f"no job {job_id!r} in the store at {self.where}; `steward jobs list` shows them")

    async def list(
        self,
        *,
        status: Sequence[str] = (),
        role: str | None = None,
        parent_id: str | None = None,
        limit: int = 50,
        before: Job | None = None,
    ) -> builtins.list[Job]:
        """Newest first; with ``before`` (a job of the page before), the ones listed after it."""
        t = jobs_table
        query = sa.select(t)
        if before is not None:  # the order below, from just past ``before``
            same = sa.and_(t.c.created_at == before.created_at, t.c.id > before.id)
            query = query.where(sa.or_(t.c.created_at < before.created_at, same))
        if status:
            query = query.where(t.c.status.in_(list(status)))
        if role is not None:
            query = query.where(t.c.role == role)
        if parent_id is not None:
            query = query.where(t.c.parent_id == parent_id)
        query = query.order_by(t.c.created_at.desc(), t.c.id).limit(limit)
        async with self._engine.connect() as conn:
            return [_job(row) for row in (await conn.execute(query)).mappings()]

    async def _one(self, *where: sa.ColumnElement[bool]) -> Job | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(jobs_table).where(*where).limit(1))).mappings().first()
        return _job(row) if row is not None else None
