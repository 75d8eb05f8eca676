"""``steward worker``: claims jobs of its roles and drives each job's run to its end or its next wait.

A job drives exactly one recorded run, whose id is the job's id. A worker that claims a new job
starts that run; one that takes a job over (its earlier worker's lease expired) or picks up a job
that was answered resumes the run from its log, so a call that was running when a worker died is
reported to the model as interrupted, never run again. While a run goes on, the worker renews the
job's lease; when the lease is lost (another worker took the job over, or it was cancelled) the
run is stopped at once, with every process it started. A run that waits for a human gives its
worker slot back (``JobStore.wait``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.jobs.store import Claim, JobStore, LeaseLost
from steward.ownership import process_owner

if TYPE_CHECKING:
    from steward.store.events import EventStore


@dataclass(slots=True, frozen=True)
class WorkerSettings:
    roles: tuple[str, ...] = ()  # empty: any role
    concurrency: int = 1
    lease_s: float = 30.0
    heartbeat_s: float = 10.0
    poll_s: float = 1.0  # how often an idle worker looks for work (with jitter)
    worker_id: str = field(default_factory=process_owner)


class Worker:
    """Runs jobs from ``store`` until ``stop`` is set; then releases what it holds for takeover."""

    def __init__(self, store: EventStore, settings: WorkerSettings) -> None:
        self.store, self.settings = store, settings
        self.jobs = JobStore(store.engine, where=store.where)
        self._running: dict[asyncio.Task[None], Claim] = {}

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        while not stop.is_set():
            while len(self._running) < s.concurrency and not stop.is_set():
                claim = await self.jobs.claim(s.worker_id, roles=s.roles, lease_s=s.lease_s)
                if claim is None:
                    break
                task = asyncio.create_task(self._job(claim))
                self._running[task] = claim
            idle = s.poll_s * (0.5 + random.random())  # noqa: S311 - jitter, not a secret
            waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(stop.wait()), *self._running}
            done, _ = await asyncio.wait(waits, timeout=idle, return_when=asyncio.FIRST_COMPLETED)
            for task in [t for t in done if t in self._running]:
                del self._running[task]
            for future in waits - done:
                if future not in self._running:
                    future.cancel()
        await self._release_all()

    async def _release_all(self) -> None:
        """Stop the runs still going (their processes too) and give their jobs back to the queue."""
        for task in list(self._running):
            task.cancel()
        for task, claim in list(self._running.items()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            with contextlib.suppress(LeaseLost):
                await self.jobs.release(claim)
        self._running.clear()

    async def _job(self, claim: Claim) -> None:
        from steward.agent import Agent
        from steward.config import load_config
        from steward.personas import find_persona

        job = claim.job
        workspace = Path(job.workspace)
        try:
            persona = find_persona(job.role, workspace)
            config = load_config(workspace, persona=persona.layer(), persona_source=str(persona.source))
            agent = await Agent.open(config, workspace=workspace, store=self.store, persona=persona)
        except Exception as exc:  # a job that cannot even start fails, with the reason
            await self.jobs.finish(claim, "failed", error=f"{type(exc).__name__}: {exc}")
            return
        beat = asyncio.create_task(self._heartbeats(claim, asyncio.current_task()))
        try:
            if job.run_id is None:
                run = agent.start(job.goal, workspace=workspace, run_id=job.id)
                await self.jobs.attach_run(claim, run.id)
            else:
                # Taken over, or answered: the run goes on from its log (force: the queue, not
                # the process table, decides that its earlier worker is gone).
                run = await agent.resume(job.run_id, force=True)
            async for _event in run.stream():
                pass
            await self._settle(claim, run.status, run.state.end_status, run.state.output)
        except LeaseLost:
            pass  # another worker holds it now, or it was cancelled and is settled there
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
            await agent.aclose()

    async def _settle(self, claim: Claim, status: str, end_status: str | None, output: str) -> None:
        match status:
            case "waiting":
                await self.jobs.wait(claim)
            case "done":
                await self.jobs.finish(claim, "done", result=output)
            case "cancelled":
                await self.jobs.finish(claim, "cancelled", error=output)
            case _:
                await self.jobs.finish(claim, "failed", error=output)

    async def _heartbeats(self, claim: Claim, job_task: asyncio.Task[None] | None) -> None:
        """Renew the lease; when it is lost, stop the job's run (its processes with it)."""
        s = self.settings
        while True:
            await asyncio.sleep(s.heartbeat_s)
            try:
                job = await self.jobs.heartbeat(claim, lease_s=s.lease_s)
            except LeaseLost as lost:
                if job_task is not None:
                    job_task.cancel(str(lost))
                if lost.cancelled:
                    with contextlib.suppress(LeaseLost):
                        await self.jobs.finish(claim, "cancelled", error="cancelled by the user")
                return
            if job.ended:
                return
