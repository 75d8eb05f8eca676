"""A job whose worker stopped is taken over as its lease runs out, on both engines: an idle
worker's wait ends no later than the first lease of a running job, whatever its poll interval."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward.jobs.api import Queue
from steward.jobs.store import JobStore
from steward.jobs.worker import Worker, WorkerSettings
from steward.store.engine import write_transaction
from steward.store.events import EventStore, open_store
from steward.store.schema import jobs as jobs_table


def ended(message: str) -> dict[str, Any]:
    """A scripted reply that ends the run solved with ``message`` (agent_step end)."""
    return {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}}


NEVER_S = 3600.0  # a poll so rare that only the lease's end can wake the worker within the test


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    ws = tmp_path / "ws"
    (ws / "personas").mkdir(parents=True)
    (ws / "personas" / "s.yaml").write_text(yaml.safe_dump([ended("finished")]))
    (ws / "personas" / "closer.toml").write_text('role = "closer"\ntools = []\nmodel = "scripted:s.yaml"\n')
    return ws


async def test_the_next_lease_expiry_is_the_first_running_lease_of_the_roles(
    db_url: str, workspace: Path
) -> None:
    async with await open_store(db_url) as store, Queue(store) as queue:
        jobs = JobStore(store.engine)
        assert await jobs.next_lease_expiry() is None
        await queue.submit("closer", "one", workspace=workspace)
        await queue.submit("closer", "two", workspace=workspace)
        first = await jobs.claim("w1", lease_s=20)
        second = await jobs.claim("w2", lease_s=10)
        assert first is not None and second is not None
        held = {j.id: j.lease_expires_at for j in await jobs.list(status=("running",))}
        assert await jobs.next_lease_expiry() == min(v for v in held.values() if v is not None)
        assert await jobs.next_lease_expiry(("closer",)) == held[second.job.id]
        assert await jobs.next_lease_expiry(("someone-else",)) is None


async def test_an_idle_worker_takes_over_when_the_lease_runs_out_not_at_its_next_poll(
    db_url: str, workspace: Path
) -> None:
    async with await open_store(db_url) as store, Queue(store) as queue:
        handle = await queue.submit("closer", "finish it", workspace=workspace)
        frozen = await JobStore(store.engine).claim("frozen-worker", lease_s=1.0)  # never renewed
        assert frozen is not None and frozen.job.id == handle.id
        settings = WorkerSettings(
            poll_s=NEVER_S, listen_poll_s=NEVER_S, sweep_s=NEVER_S, worker_id="idle-worker"
        )
        stop = asyncio.Event()
        worker = asyncio.create_task(Worker(store, settings).run(stop))
        try:
            job = await handle.wait(timeout=120)  # the outcome, not a duration: only a wake at the
        finally:  # lease's end gets it there before the one-hour poll
            stop.set()
            await worker
    assert job.status == "done" and job.result == "finished", job
    assert job.attempts == 1 and job.fence == frozen.fence + 1  # taken over from the frozen worker


async def test_a_claim_tells_listening_workers_when_its_lease_runs_out(db_url: str, workspace: Path) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite workers are told nothing: they poll, and bound each wait by the store")
    async with await open_store(db_url) as store, Queue(store) as queue:
        jobs = JobStore(store.engine)
        async with jobs.listen() as wakeups:
            await queue.submit("closer", "one", workspace=workspace)
            claim = await jobs.claim("w1", lease_s=7)
            assert claim is not None
            await asyncio.wait_for(wakeups.lease.wait(), timeout=60)
            assert wakeups.earliest_lease == claim.job.lease_expires_at


async def test_a_worker_idle_before_a_claim_takes_it_over_when_its_lease_runs_out(
    db_url: str, workspace: Path
) -> None:
    """PostgreSQL: the worker was already waiting (for an hour) when another claimed the job."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite workers look at the queue every half second: nothing to be told")
    async with await open_store(db_url) as store, Queue(store) as queue:
        settings = WorkerSettings(
            poll_s=NEVER_S, listen_poll_s=NEVER_S, sweep_s=NEVER_S, worker_id="idle-worker"
        )
        stop = asyncio.Event()
        worker = asyncio.create_task(Worker(store, settings).run(stop))
        try:
            warm = await (await queue.submit("closer", "warm up", workspace=workspace)).wait(timeout=120)
            assert warm.status == "done"  # the worker is up, and goes back to waiting
            await _queued_quietly(store, workspace)  # as if it had been there all along
            frozen = await JobStore(store.engine).claim("frozen-worker", lease_s=1.0)
            assert frozen is not None
            job = await queue.job(frozen.job.id).wait(timeout=120)
        finally:
            stop.set()
            await worker
    assert job.status == "done" and job.attempts == 1, job


async def _queued_quietly(store: EventStore, workspace: Path) -> None:
    """A queued job that no worker is told of (a submit would wake the idle one)."""
    now = time.time()
    row = {
        "id": secrets.token_hex(6), "role": "closer", "goal": "finish it", "workspace": str(workspace),
        "priority": 0, "status": "queued", "attempts": 0, "max_attempts": 3, "fence": 0,
        "cancel_requested": False, "created_at": now, "updated_at": now,
    }  # fmt: skip
    async with write_transaction(store.engine) as conn:
        await conn.execute(jobs_table.insert(), [row])
