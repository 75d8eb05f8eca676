"""The job queue for Python programs: submit a job, wait for it, follow its events, reply to it.

async with await Queue.open("postgresql://host/steward") as queue:
    job = await queue.submit("coder", "fix the failing test", workspace="/srv/repo")
    async for event in job.events():      # live, whichever worker runs it
        print(event.type)
    done = await job.wait()               # the Job row: status, result, error
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from steward.errors import StewardError
from steward.jobs.replies import Answer, Decision, reply
from steward.jobs.store import Job, JobError, JobStore

if TYPE_CHECKING:
    from steward.events import Event
    from steward.store.events import EventStore

_POLL_S = 0.2  # how often a follower looks for new events (a read of the log's tail)


class Queue:
    """The job queue of one store."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.jobs = JobStore(store.engine, where=store.where)
        self._owned = False

    @classmethod
    async def open(cls, url: str) -> Queue:
        """The queue in the store at ``url`` (closed by ``aclose`` or ``async with``)."""
        from steward.store.events import open_store

        queue = cls(await open_store(url))
        queue._owned = True
        return queue

    async def aclose(self) -> None:
        if self._owned:
            await self.store.close()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def submit(
        self,
        role: str,
        goal: str,
        *,
        workspace: str | Path = ".",
        priority: int = 0,
        idempotency_key: str | None = None,
        user: str | None = None,
        max_attempts: int = 3,
        output_schema: dict[str, Any] | None = None,
        session_id: str | None = None,
        model: str | None = None,
        mode: str | None = None,
        budget: Mapping[str, float] | None = None,
    ) -> JobHandle:
        """Queue a job for a worker of ``role``. An unknown role, a bad persona file or a
        workspace that is not there is an error now (``ConfigError``), not a dead job later.
        ``budget``: ``[budget]`` values for its run over the configured ones, e.g.
        ``{"tokens": 200_000}`` (the worker that takes the job applies them)."""
        from steward.config import validate_layer
        from steward.personas import find_persona
        from steward.run import check_goal, check_workspace

        check_goal(goal)
        ws = check_workspace(workspace)
        if role:  # no role: the workspace's own settings, no persona
            find_persona(role, ws)
        if mode is not None and mode not in ("structured", "autonomous"):
            raise JobError(f"mode {mode!r} is not one of: structured, autonomous")
        if budget:
            validate_layer({"budget": dict(budget)}, "the job's budget")
        job, new = await self.jobs.submit(
            role, goal, workspace=str(ws), priority=priority, idempotency_key=idempotency_key,
            user_key=user, max_attempts=max_attempts, output_schema=output_schema, session_id=session_id,
            model=model, mode=mode, budget=budget,
        )  # fmt: skip
        if new and session_id is not None:
            # Its run's row now, so the session lists the turn before a worker takes the job
            # (the worker finds it; made first by a quick worker, it is theirs).
            with contextlib.suppress(StewardError):
                await self.store.create_run(
                    job.id, goal=goal, session_id=session_id, workspace=str(ws), model=model or "",
                    status="queued",
                )  # fmt: skip
        return JobHandle(self, job.id)

    def job(self, job_id: str) -> JobHandle:
        return JobHandle(self, job_id)

    async def list(
        self, *, status: Sequence[str] = (), limit: int = 50, before: Job | None = None
    ) -> list[Job]:
        return await self.jobs.list(status=status, limit=limit, before=before)


class JobHandle:
    """One job of a queue; each method reads or changes its row in the store."""

    def __init__(self, queue: Queue, job_id: str) -> None:
        self.queue = queue
        self.id = job_id

    async def get(self) -> Job:
        return await self.queue.jobs.get(self.id)

    async def wait(self, *, timeout: float | None = None, until_waiting: bool = True) -> Job:  # noqa: ASYNC109
        """The job once it ended (or, with ``until_waiting``, waits for a person).
        ``TimeoutError`` after ``timeout`` seconds; the job goes on regardless."""
        async with asyncio.timeout(timeout):
            for _ in range(10**9):  # bounded by the timeout, or by the job's end
                job = await self.get()
                waits = until_waiting and job.status == "waiting" and await _waits_for_person(job, self)
                if job.ended or waits:
                    return job
                await asyncio.sleep(_POLL_S)
        raise AssertionError("unreachable")

    async def events(self, *, after_seq: int = 0, follow: bool = True) -> AsyncIterator[Event]:
        """The events of the job's run from ``after_seq`` on, as they are written, whichever
        worker writes them. With ``follow`` it goes on until the job ends or waits for a person."""
        store = self.queue.store
        seq = after_seq
        for _ in range(10**9):  # bounded by the job's end
            job = await self.get()  # read first: events written before an end are all seen below
            for event in await store.events(self.id, after_seq=seq):
                seq = event.seq
                yield event
            if not follow or job.ended or (job.status == "waiting" and await _waits_for_person(job, self)):
                return
            await asyncio.sleep(_POLL_S)

    async def cancel(self, reason: str = "cancelled by the user") -> Job:
        """Cancel the job and those it delegated to; see ``cancel_job``."""
        return await cancel_job(self.queue.store, self.queue.jobs, self.id, reason)

    async def answer(self, text: str, *, wait_id: str | None = None) -> Job:
        """Answer the job's question (with ``wait_id``: only if it is still that one)."""
        if not text.strip():
            raise JobError("the answer is empty; say what the agent should know")
        return await reply(self.queue.store, self.queue.jobs, self.id, Answer(text), wait_id=wait_id)

    async def approve(self, *, wait_id: str | None = None) -> Job:
        return await reply(self.queue.store, self.queue.jobs, self.id, Decision(True), wait_id=wait_id)

    async def deny(self, reason: str = "", *, wait_id: str | None = None) -> Job:
        decision = Decision(False, reason=reason)
        return await reply(self.queue.store, self.queue.jobs, self.id, decision, wait_id=wait_id)

    async def switch_mode(self, mode: str) -> Job:
        """Go on in ``mode`` ("structured" or "autonomous") from the run's next step."""
        return await self.queue.jobs.set_mode(self.id, mode)


async def _waits_for_person(job: Job, handle: JobHandle) -> bool:
    """Whether a waiting job waits for a person: its log ends with a wait for one (not for a job
    it delegated to; a log that went on past the wait was answered, and its job runs again)."""
    from steward.events import WaitingEvent

    last = await handle.queue.store.last_seq(job.id)
    tail = await handle.queue.store.events(job.id, after_seq=max(0, last - 1))
    return bool(tail) and isinstance(tail[-1], WaitingEvent) and tail[-1].kind != "job"


async def cancel_job(
    store: EventStore, jobs: JobStore, job_id: str, reason: str = "cancelled by the user"
) -> Job:
    """Cancel a job (and the jobs it delegated to). A running one is stopped by its worker, which
    records the end; one that was queued or waiting is ended here: its run's log gets its closing
    ``done`` event, so its followers and its session see it end."""
    job = await jobs.cancel(job_id, reason)
    for ended in [job, *await jobs.list(parent_id=job.id, status=("cancelled",), limit=100)]:
        await _close_idle_run(store, ended)
    return job


async def _close_idle_run(store: EventStore, job: Job) -> None:
    import time

    from steward.events import DoneEvent, StepStart, ToolUse

    row = await store.get_run(job.id)
    if job.status != "cancelled" or row is None or row.status not in ("queued", "waiting"):
        return  # no run yet, or a worker held it and recorded its own end
    log = await store.events(job.id)
    done = DoneEvent(
        status="cancelled", end_status=None, message=f"Cancelled: {job.error or 'by the user'}.",
        steps=sum(isinstance(e, StepStart) for e in log), tool_calls=sum(isinstance(e, ToolUse) for e in log),
        usage={}, seq=(log[-1].seq if log else 0) + 1, run_id=job.id, session_id=row.session_id,
        ts=time.time(),
    )  # fmt: skip
    with contextlib.suppress(StewardError):  # written meanwhile by someone else: theirs stands
        await store.append(job.id, [done])
        await store.set_status(job.id, "cancelled", None, output=done.message)
