"""``steward worker``: claims jobs of its roles and drives each job's run to its end or its next wait.

A job drives exactly one recorded run, whose id is the job's id. The claim makes the run's row
(or takes it over) under the claim's fence, and the worker goes on with the run from its log:
from the start for a new job; past the wait for an answered one; and for a job taken over from
a worker that died, with the call that was running then reported to the model as
interrupted, never run again. Whatever the worker records for the run is refused by the
store once another worker holds a newer claim (``FencedOut``), so a worker that was paused
past its lease and comes back adds nothing and runs nothing more for that job.

While a run goes on, the worker renews the job's lease; when the lease is lost or the job is
cancelled the run is stopped at once, with every process it started. A run that waits for a
human, or for a job it delegated to, gives its worker slot back (``JobStore.wait``).

Stopping: the first stop request ends claiming and lets each run reach its next step (a safe
point: no call is cut short), for at most ``drain_s``; a second one stops them at once. Either
way the jobs go back to the queue and another worker goes on with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.errors import ConfigError, FencedOut, ModelError, ReplayError, RunError, StewardError
from steward.events import StepStart
from steward.jobs import presence
from steward.jobs.replies import Decision, replied, reply
from steward.jobs.store import Claim, Job, JobError, JobStore, LeaseLost, Wakeups
from steward.ownership import process_owner

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from steward.agent import Agent
    from steward.events import Event
    from steward.jobs.notify import Notifier
    from steward.run import Run
    from steward.store.events import EventStore

_PAST_EXPIRY_S = 0.05  # how long after a lease runs out an idle worker looks for it
_ANY_ATTEMPTS = 10**9  # the queue counts a job's lost workers (``max_attempts``), not the run
#: How a run ends that makes its job ``done`` (the run's row keeps which of the two it was):
#: the agent said the goal was reached, or it answered without saying so. Partial or stuck
#: runs did not do what was asked: their jobs fail.
FINISHED = frozenset({"solved", "answered"})


@dataclass(slots=True, frozen=True)
class WorkerSettings:
    roles: tuple[str, ...] = ()  # empty: any role
    concurrency: int = 1
    lease_s: float = 30.0
    heartbeat_s: float = 10.0
    poll_s: float = 0.5  # how often an idle worker looks for work (with jitter) when nothing tells it
    listen_poll_s: float = 5.0  # the same while PostgreSQL tells it of new work (a fallback only)
    cancel_check_s: float = 1.0  # how often a running job's cancellation is looked for (SQLite)
    drain_s: float = 30.0  # how long a stopping worker lets its runs reach their next step
    sweep_s: float = 5.0  # how often waiting jobs are looked at: expired approvals, ended children
    worker_id: str = field(default_factory=process_owner)


class Worker:
    """Runs jobs from ``store`` until ``stop`` is set; then releases what it holds for takeover."""

    def __init__(self, store: EventStore, settings: WorkerSettings) -> None:
        self.store, self.settings = store, settings
        self.jobs = JobStore(store.engine, where=store.where)
        self._running: dict[asyncio.Task[None], Claim] = {}
        self._draining = False
        self._wakeups = Wakeups()
        self._sweep_due = 0.0
        self._live: dict[str, Run] = {}  # job id -> its run, while this worker drives it

    async def run(self, stop: asyncio.Event, now: asyncio.Event | None = None) -> None:
        """Claim and run jobs until ``stop``; then drain (``now`` cuts the drain short)."""
        present = asyncio.create_task(self._present(stop))
        try:
            await self._serve(stop, now)
        finally:
            present.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await present
            with contextlib.suppress(Exception):
                await presence.gone(self.store.engine, self.settings.worker_id)

    async def _present(self, stop: asyncio.Event) -> None:
        """Say this worker is there, every ``presence.BEAT_S`` (a submit that waits asks)."""
        for beat in range(10**9):  # bounded by the stop
            with contextlib.suppress(Exception):  # the store is down: the queue's own loop says so
                await presence.seen(
                    self.store.engine, self.settings.worker_id, self.settings.roles, starting=beat == 0
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), presence.BEAT_S)
            if stop.is_set():
                return

    async def _serve(self, stop: asyncio.Event, now: asyncio.Event | None) -> None:
        async with self.jobs.listen() as wakeups:
            self._wakeups = wakeups
            listening = self.store.dialect == "postgresql"
            while not stop.is_set():
                wakeups.work.clear()
                try:
                    await self._claim_what_fits(stop)
                    await self._sweep()
                except Exception as exc:  # the store is down or busy: the worker waits and tries again
                    sys.stderr.write(
                        f"steward: worker: the queue could not be read: {type(exc).__name__}: {exc}\n"
                    )
                idle = await self._idle_seconds(listening)
                await self._idle(idle, stop.wait(), wakeups.work.wait())
            await self._drain(now)

    async def _idle_seconds(self, listening: bool) -> float:
        """How long to wait for news before looking at the queue again: the poll (with jitter),
        but no later than the moment the first lease of a running job runs out, when this worker
        has room to take it over (a worker that died tells no one)."""
        s = self.settings
        idle = (s.listen_poll_s if listening else s.poll_s) * (0.5 + random.random())  # noqa: S311
        if len(self._running) >= s.concurrency:
            return idle
        try:
            expiry = await self.jobs.next_lease_expiry(s.roles)
        except Exception:  # the store is down: the poll finds out, and says so
            return idle
        if expiry is None:
            return idle
        # Just past it: the takeover looks for leases that ended before "now".
        return min(idle, max(expiry - time.time(), 0.0) + _PAST_EXPIRY_S)

    def poke(self) -> None:
        """Look for work now: a job was queued in this process (a server's own pool)."""
        self._wakeups.work.set()

    async def _claim_what_fits(self, stop: asyncio.Event) -> None:
        s = self.settings
        while len(self._running) < s.concurrency and not stop.is_set():
            buried: list[Job] = []
            claim = await self.jobs.claim(s.worker_id, roles=s.roles, lease_s=s.lease_s, buried=buried)
            for job in buried:
                await self._after_end(await self.jobs.get(job.id), notifier_for(job))
            if claim is None:
                return
            task = asyncio.create_task(self._job(claim))
            self._running[task] = claim

    async def _sweep(self) -> None:
        """Every ``sweep_s``, any worker: approvals nobody answered by their deadline get their
        default (a reply like a person's, kept on the job, which goes back to the queue), and
        jobs waiting for a child that ended are woken (their wake-up can be missed: a child
        cancelled from the command line, a worker that died between the two)."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._sweep_due:
            return
        self._sweep_due = loop.time() + self.settings.sweep_s
        for job in await self.jobs.expired_waits(time.time()):
            with contextlib.suppress(JobError):  # answered, or expired by another worker, meanwhile
                await reply(self.store, self.jobs, job.id, Decision(False, by="timeout"))
        for parent, child in await self.jobs.parents_of_ended():
            await self._wake_if_ended(parent.id, child.id)

    async def _idle(self, seconds: float, *signals: Any) -> None:
        """Wait for a stop, new work, a job to end, or ``seconds``; a job claimed meanwhile
        (PostgreSQL says so) brings the end of the wait forward to the end of its lease."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        futures: set[asyncio.Future[Any]] = {asyncio.ensure_future(s) for s in signals}
        lease = self._wakeups.lease
        for _ in range(10_000):  # bounded: each pass ends the wait, or hears of one more claim
            expiry, self._wakeups.earliest_lease = self._wakeups.earliest_lease, None
            lease.clear()
            if expiry is not None and len(self._running) < self.settings.concurrency:
                deadline = min(deadline, loop.time() + max(expiry - time.time(), 0.0) + _PAST_EXPIRY_S)
            claimed = asyncio.ensure_future(lease.wait())
            done, _ = await asyncio.wait(
                {*futures, claimed, *self._running},
                timeout=max(deadline - loop.time(), 0.0),
                return_when="FIRST_COMPLETED",
            )
            claimed.cancel()
            if done != {claimed}:
                break
        for task in [t for t in done if t in self._running]:
            del self._running[task]
        for future in futures:
            future.cancel()

    async def _drain(self, now: asyncio.Event | None) -> None:
        """Let running jobs reach their next step (at most ``drain_s``), then give them back."""
        self._draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.drain_s
        cut: asyncio.Future[Any] = asyncio.ensure_future(
            now.wait() if now is not None else asyncio.sleep(1e9)
        )
        for _ in range(len(self._running) + 1):  # bounded: each pass sees one more job end, or stops
            left = {t for t in self._running if not t.done()}
            if not left or cut.done() or loop.time() >= deadline:
                break
            await asyncio.wait({*left, cut}, timeout=deadline - loop.time(), return_when="FIRST_COMPLETED")
        cut.cancel()
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

    # --- one job --------------------------------------------------------------------------

    async def _job(self, claim: Claim) -> None:
        job = claim.job
        try:
            agent, notifier = await self._open(job)
        except Exception as exc:  # a job that cannot even start fails, with the reason
            with contextlib.suppress(LeaseLost):
                ended = await self.jobs.finish(claim, "failed", error=f"{type(exc).__name__}: {exc}")
                await self._close_failed_run(job, str(exc))
                await self._after_end(ended, None)
            return
        if job.cancel_requested:  # cancelled while its earlier worker held it: it goes no further
            with contextlib.suppress(LeaseLost):
                await self._after_end(await self.jobs.finish(claim, "cancelled", error=job.error), notifier)
            await agent.aclose()
            return
        cancelled = self._wakeups.cancels.setdefault(job.id, asyncio.Event())
        beat = asyncio.create_task(self._heartbeats(claim, asyncio.current_task(), cancelled))
        outcome: Run | str | None = None  # the run to settle, "release", or None (nothing to do)

        async def stop_beating() -> None:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

        try:
            outcome = await self._go_on(claim, agent, notifier)
            # Settling happens without the heartbeat: once the job is no longer running, a
            # renewal would read as a lost lease and cut the settling (a notification, the
            # parent's wake-up) short.
            await stop_beating()
            if isinstance(outcome, str):
                await self.jobs.release(claim)  # stopping: another worker goes on from this step
            elif outcome is not None:
                await self._settle(claim, outcome, notifier)
        except (LeaseLost, FencedOut):
            pass  # another worker holds it now, or it was cancelled and is settled there
        except (ConfigError, RunError, ModelError) as exc:  # it would fail the same way on any worker
            _report(job, [f"failed: {type(exc).__name__}: {exc}"])
            with contextlib.suppress(LeaseLost, StewardError):
                ended = await self.jobs.finish(claim, "failed", error=str(exc))
                await self._close_failed_run(job, str(exc))
                await self._after_end(ended, notifier)
        except Exception as exc:  # a store that failed, or a bug: another worker tries again, a few times
            error = f"{type(exc).__name__}: {exc}"
            _report(job, [f"given back after {error}"])
            with contextlib.suppress(Exception):
                if (back := await self.jobs.give_back(claim, error)).ended:
                    await self._close_failed_run(job, back.error or error)
                    await self._after_end(back, notifier)
        finally:
            await stop_beating()
            self._wakeups.cancels.pop(job.id, None)
            await agent.aclose()

    async def _close_failed_run(self, job: Job, why: str) -> None:
        """The run row of a job that failed around its run (it could not start, or be rebuilt)
        says so: it is a session's turn, which would otherwise look queued or running for good."""
        with contextlib.suppress(StewardError):
            row = await self.store.get_run(job.id)
            if row is not None and row.status in ("queued", "running"):
                await self.store.set_status(job.id, "failed", None, output=why)

    async def _go_on(self, claim: Claim, agent: Agent, notifier: Notifier) -> Run | str | None:
        """Go on with the job's run: the run when it ended or waits, "release" when this worker
        stops first, None when its run had ended already (the job is settled here)."""
        job = claim.job
        await self._ensure_run(job)
        try:
            run = await agent.resume(
                job.id, force=True, fence=claim.fence, max_attempts=_ANY_ATTEMPTS,
                output_schema=job.output_schema, user=job.user_key,
            )  # fmt: skip
        except RunError as exc:  # its run ended before its last worker could say so
            if exc.status not in ("done", "failed") or isinstance(exc, ReplayError):
                raise
            await self._settle_ended_run(claim, notifier)
            return None
        if job.mode is not None:
            run.switch_mode(job.mode)
        self._live[job.id] = run
        try:
            if run.trace is not None and (began := run.trace.join(claim.job.traceparent)) is not None:
                await self.jobs.trace(claim, began)  # its run's trace, kept for whoever goes on with it
            return run if await self._drive(run, replied(run, job.reply)) else "release"
        finally:
            self._live.pop(job.id, None)

    async def _ensure_run(self, job: Job) -> None:
        """The job's run row: its first claim's worker makes it, later ones find it (resuming
        a run starts from its row, even a run with no event yet)."""
        if await self.store.get_run(job.id) is None:
            with contextlib.suppress(StewardError):  # made a moment ago by an earlier holder
                await self.store.create_run(
                    job.id, goal=job.goal, workspace=job.workspace, status="queued", session_id=job.session_id
                )

    async def _open(self, job: Job) -> tuple[Agent, Notifier]:
        from steward.agent import Agent
        from steward.config import load_config
        from steward.jobs.delegation import DelegateToolset, ancestors, inherited_layer, narrowed
        from steward.jobs.notify import Notifier
        from steward.personas import Persona, find_persona

        workspace = Path(job.workspace)
        # A job without a role runs as the workspace's own settings say (no persona).
        plain = Persona(name="")
        persona = find_persona(job.role, workspace) if job.role else plain
        layer = persona.layer()
        if job.parent_id is not None:  # a delegated job gets no more than the jobs above it had
            chain = await ancestors(self.jobs, job, 16)
            above = [find_persona(j.role, workspace) if j.role else plain for j in chain]
            # Each ancestor as it actually runs: its job's own mode (given at submit or switched
            # since) over what the files say, which may be wider.
            configs = [
                load_config(
                    workspace, persona=p.layer(), overrides={"policy": {"mode": j.mode}} if j.mode else None
                )
                for p, j in zip(above, chain, strict=True)
            ]
            layer = inherited_layer(persona, list(zip(above, configs, strict=True)))
            persona = narrowed(persona, above)
        # What the job was submitted with, over the files (as a flag is over them at the terminal).
        overrides = {k: v for k, v in (("model", job.model), ("budget", job.budget)) if v} or None
        config = load_config(
            workspace, persona=layer, persona_source=str(persona.source or "persona"), overrides=overrides
        )
        if persona.name == "" and not persona.within:  # no persona, nothing above it narrows its tools
            agent = await Agent.open(
                config, workspace=workspace, store=self.store, toolsets=[DelegateToolset(self.jobs)]
            )
            return agent, Notifier.from_config(config)
        delegate = DelegateToolset(self.jobs)
        agent = await Agent.open(
            config, workspace=workspace, store=self.store, persona=persona, toolsets=[delegate]
        )
        return agent, Notifier.from_config(config)

    async def _drive(self, run: Run, first: AsyncIterator[Event] | None) -> bool:
        """Run until it ends or waits (True), or until a stopping worker reaches a safe point.
        ``first``: the stream that starts with the reply kept for the job's wait."""
        stream = first if first is not None else run.stream()
        async with contextlib.aclosing(stream) as events:  # type: ignore[type-var]
            async for event in events:
                if self._draining and isinstance(event, StepStart):
                    return False  # between steps: nothing is cut short
        return True

    async def _settle(self, claim: Claim, run: Run, notifier: Notifier) -> None:
        st = run.state
        match run.status:
            case "waiting":
                pending = run.pending
                approval = pending.approval if pending is not None and pending.kind == "approval" else None
                waiting = await self.jobs.wait(
                    claim, until=approval.deadline if approval is not None else None
                )
                if waiting.ended:  # cancelled just before it began to wait
                    await self._after_end(waiting, notifier)
                elif pending is not None and pending.kind == "job" and pending.approval is not None:
                    await self._wake_if_ended(claim.job.id, pending.approval.waits_for)
                else:
                    _report(waiting, await notifier.notify(waiting, "waiting"))
                return
            case "done" if st.end_status in FINISHED:
                ended = await self.jobs.finish(claim, "done", result=st.output)
            case "done":  # partial or stuck: the run ended without doing what was asked
                why = f"{st.end_status}: {st.output}"
                ended = await self.jobs.finish(claim, "failed", result=st.output, error=why)
            case "cancelled":
                ended = await self.jobs.finish(claim, "cancelled", error=st.output)
            case _:
                ended = await self.jobs.finish(claim, "failed", error=st.output)
        await self._after_end(ended, notifier)

    async def _settle_ended_run(self, claim: Claim, notifier: Notifier) -> None:
        row = await self.store.get_run(claim.job.id)
        finished = row is not None and row.status == "done" and row.end_status in FINISHED
        output = row.output if row is not None else ""
        if finished:
            ended = await self.jobs.finish(claim, "done", result=output)
        else:
            ended = await self.jobs.finish(claim, "failed", error=output or "its run ended without an answer")
        await self._after_end(ended, notifier)

    async def _after_end(self, job: Job, notifier: Notifier | None) -> None:
        """Tell the hook, and the job that delegated to this one if it waits for it."""
        if notifier is not None:
            _report(job, await notifier.notify(job, job.status))
        if job.ended:  # a job that ends leaves no child running (one its budget stopped, say)
            await self._cancel_children(job)
        if job.parent_id is not None:
            await self._wake_if_ended(job.parent_id, job.id)

    async def _cancel_children(self, job: Job) -> None:
        from steward.jobs.store import ACTIVE

        for child in await self.jobs.list(parent_id=job.id, status=ACTIVE, limit=100):
            with contextlib.suppress(JobError):  # ended meanwhile
                await self.jobs.cancel(child.id, f"its parent job {job.id} ended ({job.status})")

    async def _wake_if_ended(self, parent_id: str, child_id: str) -> None:
        """Put ``parent_id`` back in the queue if it waits for ``child_id`` and that has ended.

        Both the child's worker (when the child ends) and the parent's (when the parent starts
        to wait) call this, so whichever comes second sees the other's write; the reply is
        recorded once whoever comes first.
        """
        child = await self.jobs.get(child_id)
        parent = await self.jobs.get(parent_id)
        if not child.ended or parent.status != "waiting":
            return
        with contextlib.suppress(JobError):
            why = f"job {child.id} ended {child.status}"
            await reply(self.store, self.jobs, parent.id, Decision(True, reason=why, by="job", job=child.id))

    async def _heartbeats(
        self, claim: Claim, job_task: asyncio.Task[None] | None, cancelled: asyncio.Event
    ) -> None:
        """Renew the lease; when it is lost or the job is cancelled, stop the job's run (its
        processes with it). A cancellation is heard at once on PostgreSQL and looked for every
        ``cancel_check_s`` otherwise."""
        s = self.settings
        loop = asyncio.get_running_loop()
        renew_at = loop.time() + s.heartbeat_s
        renewed = loop.time()  # the last time the store confirmed the lease
        for _ in range(10**9):  # until the job ends, the lease is lost, or the task is cancelled
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancelled.wait(), timeout=min(s.cancel_check_s, s.heartbeat_s))
            cancelled.clear()  # what woke it is read below: a cancellation or a mode switch
            try:
                if loop.time() >= renew_at:
                    renew_at = loop.time() + s.heartbeat_s
                    job = await self.jobs.heartbeat(claim, lease_s=s.lease_s)
                    renewed = loop.time()
                    if job.ended:
                        return
                cancel, mode = await self.jobs.asked(claim.job.id)
                if cancel:
                    await self.jobs.heartbeat(claim, lease_s=s.lease_s)  # raises: cancelled
                if mode is not None and (run := self._live.get(claim.job.id)) is not None:
                    run.switch_mode(mode)  # taken at the run's next step, and recorded there
            except LeaseLost as lost:
                await self._lost(claim, job_task, lost)
                return
            except Exception as exc:  # the store is unreachable or busy: try again until the lease is up
                if loop.time() - renewed < s.lease_s:
                    renew_at = min(renew_at, loop.time() + s.cancel_check_s)
                    continue
                # The lease has run out unrenewed: another worker may hold the job now.
                _report(claim.job, [f"stopped: the lease could not be renewed ({type(exc).__name__}: {exc})"])
                if job_task is not None:
                    job_task.cancel("the lease could not be renewed")
                return

    async def _lost(self, claim: Claim, job_task: asyncio.Task[None] | None, lost: LeaseLost) -> None:
        """Stop the job's run; a cancelled job is settled here once its run recorded the stop."""
        if job_task is not None:
            job_task.cancel(str(lost))
        if not lost.cancelled:
            return
        if job_task is not None:  # the run records its cancellation first
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait({job_task}, timeout=self.settings.lease_s / 2)
        with contextlib.suppress(LeaseLost):
            ended = await self.jobs.finish(claim, "cancelled", error="cancelled by the user")
            await self._after_end(ended, notifier_for(claim.job))


def notifier_for(job: Job) -> Notifier | None:
    """The hook configured for ``job``'s workspace (None when its configuration cannot be read)."""
    from steward.config import load_config
    from steward.jobs.notify import Notifier

    try:
        return Notifier.from_config(load_config(Path(job.workspace)))
    except Exception:  # a job's broken configuration must not stop the worker
        return None


def _report(job: Job, problems: list[str]) -> None:
    """A hook that could not be told is the operator's to know, never the job's failure."""
    for problem in problems:
        sys.stderr.write(f"steward: worker: job {job.id}: {problem}\n")
