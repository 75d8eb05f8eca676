"""The job queue on both engines: submit, priorities, idempotency, one active job per user, claims
that never overlap, leases taken over with a fence, dead letters, waiting, cancel and retry."""

from __future__ import annotations

import asyncio
import time

import pytest

from steward.jobs.store import JobError, JobStore, LeaseLost
from steward.store.engine import write_transaction
from steward.store.events import EventStore, open_store
from steward.store.schema import jobs as jobs_table


async def lease_ran_out(store: EventStore, job_id: str) -> None:
    """The job's lease ends now, as if its worker had been paused past it (no sleeping: a
    lease that short would also run out between two claims on a busy machine)."""
    t = jobs_table
    async with write_transaction(store.engine) as conn:
        await conn.execute(t.update().where(t.c.id == job_id).values(lease_expires_at=time.time() - 1))


def jobs_of(store: EventStore) -> JobStore:
    return JobStore(store.engine, where=store.where)


async def test_jobs_are_claimed_by_priority_then_age_and_only_for_the_worker_s_roles(
    store: EventStore,
) -> None:
    jobs = jobs_of(store)
    low, _ = await jobs.submit("coder", "low", workspace="/w")
    high, new = await jobs.submit("coder", "high", workspace="/w", priority=5)
    other, _ = await jobs.submit("reviewer", "review", workspace="/w", priority=9)
    assert new and high.status == "queued" and high.fence == 0
    first = await jobs.claim("w1", roles=["coder"])
    second = await jobs.claim("w1", roles=["coder"])
    assert first is not None and second is not None
    assert [first.job.id, second.job.id] == [high.id, low.id]
    assert first.job.status == "running" and first.job.lease_owner == "w1" and first.fence == 1
    assert await jobs.claim("w1", roles=["coder"]) is None
    anyone = await jobs.claim("w2")  # no roles: any role
    assert anyone is not None and anyone.job.id == other.id
    assert [j.id for j in await jobs.list(status=["running"])] == [other.id, high.id, low.id]  # newest first


async def test_an_idempotency_key_returns_the_first_job_even_when_submitted_at_once(
    store: EventStore,
) -> None:
    jobs = jobs_of(store)
    results = await asyncio.gather(
        *(jobs.submit("coder", f"goal {n}", workspace="/w", idempotency_key="deploy-42") for n in range(5))
    )
    assert len({job.id for job, _ in results}) == 1
    assert sum(1 for _, new in results if new) == 1
    again, new = await jobs.submit("coder", "other goal", workspace="/w", idempotency_key="deploy-42")
    assert not new and again.id == results[0][0].id and again.goal == results[0][0].goal


async def test_a_user_has_at_most_one_active_job(store: EventStore) -> None:
    jobs = jobs_of(store)
    first, _ = await jobs.submit("coder", "one", workspace="/w", user_key="alice")
    with pytest.raises(JobError, match=f"user 'alice' already has an active job {first.id}"):
        await jobs.submit("coder", "two", workspace="/w", user_key="alice")
    bob, _ = await jobs.submit("coder", "bob's", workspace="/w", user_key="bob")
    assert bob.id != first.id
    claim = await jobs.claim("w1", roles=["coder"])
    assert claim is not None and claim.job.id == first.id
    await jobs.finish(claim, "done", result="ok")
    later, new = await jobs.submit("coder", "three", workspace="/w", user_key="alice")
    assert new and later.status == "queued"


async def test_claims_from_separate_connections_never_take_the_same_job(store_url: str) -> None:
    stores = [await open_store(store_url) for _ in range(4)]
    try:
        queues = [jobs_of(s) for s in stores]
        for n in range(12):
            await queues[0].submit("coder", f"job {n}", workspace="/w")

        async def drain(queue: JobStore, worker: str) -> list[str]:
            taken = []
            while (claim := await queue.claim(worker)) is not None:
                taken.append(claim.job.id)
            return taken

        taken = await asyncio.gather(*(drain(q, f"w{i}") for i, q in enumerate(queues)))
        everything = [job_id for part in taken for job_id in part]
        assert len(everything) == 12 and len(set(everything)) == 12
    finally:
        for s in stores:
            await s.close()


async def test_an_expired_lease_is_taken_over_and_the_old_worker_is_fenced(store: EventStore) -> None:
    jobs = jobs_of(store)
    submitted, _ = await jobs.submit("coder", "work", workspace="/w")
    old = await jobs.claim("frozen", lease_s=30)
    assert old is not None
    assert await jobs.claim("other") is None  # the lease still holds
    await lease_ran_out(store, old.job.id)
    new = await jobs.claim("other", lease_s=30)
    assert new is not None and new.takeover and new.job.id == submitted.id
    assert new.fence == old.fence + 1 and new.job.attempts == 1 and new.job.lease_owner == "other"
    with pytest.raises(LeaseLost):
        await jobs.heartbeat(old)  # the frozen worker wakes up: it holds nothing any more
    with pytest.raises(LeaseLost):
        await jobs.finish(old, "done", result="late")
    assert (await jobs.heartbeat(new)).lease_owner == "other"
    done = await jobs.finish(new, "done", result="on time")
    assert done.status == "done" and done.result == "on time" and done.finished_at is not None


async def test_a_job_that_keeps_losing_its_worker_becomes_dead(store: EventStore) -> None:
    jobs = jobs_of(store)
    submitted, _ = await jobs.submit("coder", "crashy", workspace="/w", max_attempts=2)
    first = await jobs.claim("w1", lease_s=30)
    assert first is not None
    await lease_ran_out(store, first.job.id)
    second = await jobs.claim("w2", lease_s=30)
    assert second is not None and second.job.attempts == 1
    await lease_ran_out(store, second.job.id)
    assert await jobs.claim("w3") is None
    dead = await jobs.get(submitted.id)
    assert dead.status == "dead" and dead.attempts == 2 and "stopped 2 times" in (dead.error or "")
    retried = await jobs.retry(dead.id)
    assert retried.status == "queued" and retried.attempts == 0


async def test_a_waiting_job_frees_its_worker_and_an_answer_puts_it_back(store: EventStore) -> None:
    jobs = jobs_of(store)
    await jobs.submit("coder", "ask me", workspace="/w")
    claim = await jobs.claim("w1")
    assert claim is not None
    await jobs.wait(claim)
    assert (await jobs.get(claim.job.id)).status == "waiting"
    assert await jobs.claim("w2") is None  # nothing to do until someone answers
    with pytest.raises(LeaseLost):
        await jobs.heartbeat(claim)
    await jobs.requeue(claim.job.id)
    again = await jobs.claim("w2")
    assert again is not None and not again.takeover and again.job.run_id == claim.job.id
    assert again.fence == claim.fence + 1 and again.job.attempts == 0  # a wait is not a crash


async def test_cancel_and_retry(store: EventStore) -> None:
    jobs = jobs_of(store)
    queued, _ = await jobs.submit("coder", "never mind", workspace="/w")
    cancelled = await jobs.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    with pytest.raises(JobError, match="already ended"):
        await jobs.cancel(queued.id)
    await jobs.submit("coder", "stop me", workspace="/w")
    claim = await jobs.claim("w1")
    assert claim is not None
    asked = await jobs.cancel(claim.job.id[:6])  # a prefix is enough
    assert asked.status == "running" and asked.cancel_requested
    with pytest.raises(LeaseLost, match="cancelled"):
        await jobs.heartbeat(claim)  # the worker learns it at its next heartbeat and stops the run
    ended = await jobs.finish(claim, "cancelled", error="stopped by the user")
    assert ended.status == "cancelled"
    assert (await jobs.retry(ended.id)).status == "queued"
    with pytest.raises(JobError, match="no job 'nope'"):
        await jobs.get("nope")
    with pytest.raises(JobError, match="goal is empty"):
        await jobs.submit("coder", "  ", workspace="/w")


async def test_a_worker_whose_job_was_taken_over_can_record_nothing_more_for_its_run(
    store: EventStore,
) -> None:
    """The fence holds in the store itself: whatever the old worker still has queued or adds later
    is refused, in the same transaction that would have written it, and the new worker's log goes on."""
    from steward.errors import FencedOut
    from steward.events import SignalEvent

    def event(seq: int, text: str) -> SignalEvent:
        made = SignalEvent(code="note", level="info", message=text)
        made.seq, made.run_id, made.ts = seq, job.id, float(seq)
        return made

    jobs = jobs_of(store)
    job, _ = await jobs.submit("coder", "fenced", workspace="/w")
    first = await jobs.claim("w1", lease_s=30)
    assert first is not None
    await store.create_run(job.id, goal=job.goal, workspace="/w", status="queued")  # as the worker does
    old = store.log(job.id, session_id=None, last_seq=0, fence=first.fence)
    old.add(event(1, "by the first worker"))
    await old.flush()
    await lease_ran_out(store, job.id)
    second = await jobs.claim("w2")  # the first worker was paused past its lease
    assert second is not None and second.takeover and second.fence == first.fence + 1
    old.add(event(2, "by the first worker, after the takeover"))
    with pytest.raises(FencedOut, match="taken over by another worker"):
        await old.flush()
    with pytest.raises(FencedOut):
        old.add(event(3, "and again"))
    new = store.log(job.id, session_id=None, last_seq=1, fence=second.fence)
    new.add(event(2, "by the second worker"))
    await new.flush()
    assert [(e.seq, getattr(e, "message", "")) for e in await store.events(job.id)] == [
        (1, "by the first worker"),
        (2, "by the second worker"),
    ]
    unfenced = store.log(job.id, session_id=None, last_seq=2)  # a run no job drives: any writer
    unfenced.add(event(3, "plain"))
    await unfenced.flush()
