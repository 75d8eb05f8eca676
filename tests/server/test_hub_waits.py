"""The event hub shows a run's wait to its followers only once the run's job row says
``waiting``: the worker writes that row just after the ``waiting`` event, and a client that
replies the instant it sees the wait must find the job waiting. A real store (both engines),
a real queue and the server's hub; the test plays the worker's two writes in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steward.events import ApprovalGateEvent, Event, StepStart, WaitingEvent
from steward.jobs.api import Queue
from steward.server.hub import EventHub
from steward.store.events import EventStore


class Follower:
    """A client of the hub: the event types of each chunk it receives, as they come."""

    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self.stream = stream
        self.pending: asyncio.Task[bytes] | None = None

    async def next_types(self, within: float) -> list[str]:
        """The event types of the next chunk; [] when none came ``within`` seconds (the read
        stays pending for the next call: cancelling it would end the stream)."""
        if self.pending is None:
            self.pending = asyncio.ensure_future(anext(self.stream))
        done, _ = await asyncio.wait({self.pending}, timeout=within)
        if not done:
            return []
        chunk, self.pending = self.pending.result(), None
        return [line.split(": ", 1)[1] for line in chunk.decode().splitlines() if line.startswith("event: ")]


async def recorded(hub: EventHub, run_id: str) -> list[str]:
    chunks = [chunk async for chunk in hub.follow(run_id, 0, follow=False)]
    return [
        line.split(": ", 1)[1]
        for c in chunks
        for line in c.decode().splitlines()
        if line.startswith("event: ")
    ]


@pytest.mark.parametrize("follow", [True, False], ids=["live", "recorded"])
async def test_a_wait_reaches_followers_only_once_its_job_row_says_waiting(
    store: EventStore, tmp_path: Path, follow: bool
) -> None:
    queue = Queue(store)
    handle = await queue.submit("", "wait for me", workspace=tmp_path)
    claim = await queue.jobs.claim("worker-1")
    assert claim is not None and claim.job.id == handle.id
    run_id = claim.job.id
    await store.create_run(run_id, goal="wait for me", workspace=str(tmp_path))
    now = time.time()

    def at(seq: int, event: type[Event], **data: Any) -> Event:
        return event(seq=seq, run_id=run_id, ts=now + seq / 1000, **data)

    await store.append(run_id, [at(1, StepStart, step=1, max_steps=5)])
    hub = EventHub(store, poll_s=0.05)
    stop = asyncio.Event()
    feeding = asyncio.create_task(hub.run(stop))
    try:
        # The worker records the wait: gate and waiting, then (a moment later) the job's row.
        gate = at(2, ApprovalGateEvent, id="a1", tool="bash", input={}, reason="ask", deadline=now + 60,
                  default="deny")  # fmt: skip
        await store.append(run_id, [gate, at(3, WaitingEvent, kind="approval", id="a1", question="ok?")])
        if not follow:  # what is recorded now, then the end: without the wait
            assert await recorded(hub, run_id) == ["step"]
            await queue.jobs.wait(claim)
            assert await recorded(hub, run_id) == ["step", "approval_gate", "waiting"]
            return
        client = Follower(hub.follow(run_id, 0, keepalive_s=30))
        assert await client.next_types(5) == ["step"]  # the step, but not the wait: the row says running
        assert await client.next_types(0.5) == []  # held, however long the row lags
        assert (await queue.jobs.get(run_id)).status == "running"
        await queue.jobs.wait(claim)
        assert await client.next_types(5) == ["approval_gate", "waiting"]
        assert (await queue.jobs.get(run_id)).status == "waiting"
    finally:
        stop.set()
        hub.close()
        await feeding
