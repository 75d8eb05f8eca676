"""Live events of runs for the clients of one server process, whichever worker writes them.

Each followed run has one feed: it reads the run's new events from the store once per change
and keeps the newest of them in memory, so 200 clients following a run cost one read per
change, not 200. A feed learns of a change from PostgreSQL (``LISTEN`` on the channel the store
names each run on as its events commit) and, as the fallback and on SQLite, by looking at the
run's next sequence number every ``poll_s``. A run's end is its ``done`` event, or its job
ending without one (cancelled before it started, dead).

A client that falls behind the feed's memory reads the gap from the store: nothing is lost,
and sequence numbers make sure nothing is sent twice.

A run's wait reaches clients only once its job's row says ``waiting`` (the worker writes that
row just after the run's ``waiting`` event): its ``approval_gate`` and ``waiting`` events are
held back until then, so a client that replies the instant it sees them is never refused for
a run that, by its row, still runs. A feed holding a wait reads again every ``HOLD_POLL_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import sqlalchemy as sa

from steward.events import ApprovalGateEvent, DoneEvent, Event, WaitingEvent, encode_event
from steward.store.events import EVENTS_CHANNEL, EventStore
from steward.store.schema import jobs as jobs_table
from steward.store.schema import runs as runs_table

_KEPT = 2000  # events a feed keeps in memory for followers that are a little behind
_READ = 500  # events read from the store at once
_ENDED = ("done", "failed", "cancelled", "dead")
PING = b": ping\n\n"  # a comment: keeps an idle stream (and the proxies on its way) open
HOLD_POLL_S = 0.05  # how often a feed holding back a wait looks at its job's row again


def sse_message(event: Event) -> bytes:
    """One Server-Sent Event: ``id`` its seq, ``event`` its type, ``data`` its JSON (one line)."""
    return f"id: {event.seq}\nevent: {event.type}\ndata: {encode_event(event)}\n\n".encode()


Status = tuple[str, str | None, float]  # the job's status, its run's status, the job's last change


def _ended(status: Status | None, last: Event | None) -> bool:
    """Whether a run's stream is over: its job ended, or its job is still being settled after its
    run ended (the run's row and its done event are one write). A done event alone is not the
    end: a job retried after it goes on in the same log, under a claim made after that event."""
    if status is None:
        return False
    job, run, changed = status
    if job in _ENDED:
        return True
    return (
        job == "running" and run in ("done", "failed", "cancelled")
        and isinstance(last, DoneEvent) and last.ts >= changed
    )  # fmt: skip


def publishable(events: list[Event], status: Status | None) -> list[Event]:
    """``events`` (the newest of a run's log) but a wait its job's row does not show yet: a
    trailing ``waiting`` (with its ``approval_gate``) is held back until the row says
    ``waiting`` since that event, and a trailing gate while the job still runs."""
    if not events or status is None or status[0] in _ENDED:
        return events  # not a job's run, or an ended one: nothing to reply to
    job, _run, changed = status
    last, cut = events[-1], len(events)
    if isinstance(last, WaitingEvent):
        if job == "waiting" and changed >= last.ts:
            return events
        cut -= 1
        before = events[cut - 1] if cut else None
        if isinstance(before, ApprovalGateEvent) and before.id == last.id:
            cut -= 1
    elif isinstance(last, ApprovalGateEvent) and job == "running":
        cut -= 1
    return events[:cut]


@dataclass(slots=True)
class _Feed:
    run_id: str
    followers: int = 0
    events: list[Event] = field(default_factory=list)  # the newest, in seq order
    last_seq: int = 0
    ended: bool = False  # its job ended, or its run did and the feed holds its last event
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # replaced on each change
    stale: asyncio.Event = field(default_factory=asyncio.Event)  # set: read the store now
    holding: bool = False  # a wait is held back until its job's row shows it

    def line(self, event: Event) -> bytes:
        """The event's SSE message, encoded once for all the feed's followers."""
        found = self.lines.get(event.seq)
        if found is None:
            found = sse_message(event)
            if self.events and event.seq >= self.events[0].seq:
                self.lines[event.seq] = found
        return found

    lines: dict[int, bytes] = field(default_factory=dict)  # seq -> its SSE message, made once

    def add(self, events: list[Event], ended: bool) -> None:
        events = [e for e in events if e.seq > self.last_seq]  # a read that overlapped another's: once
        if events:
            self.events.extend(events)
            del self.events[:-_KEPT]
            self.last_seq = events[-1].seq
            first = self.events[0].seq
            for seq in [k for k in self.lines if k < first]:
                del self.lines[seq]
        self.ended = self.ended or ended
        if events or self.ended:
            changed, self.changed = self.changed, asyncio.Event()
            changed.set()


class EventHub:
    """Feeds of the runs this server's clients follow; ``run`` keeps them fed until stopped."""

    def __init__(self, store: EventStore, *, poll_s: float = 0.5, fallback_poll_s: float = 2.0) -> None:
        self.store = store
        self.poll_s = poll_s
        self.fallback_poll_s = fallback_poll_s  # PostgreSQL: tells of changes; polling only backs it up
        self._feeds: dict[str, _Feed] = {}
        self._listening = False
        self._wake = asyncio.Event()
        self._closed = False
        self._opening: dict[str, asyncio.Future[_Feed]] = {}  # feeds being opened, by run

    @property
    def listening(self) -> bool:
        return self._listening

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        async with self._listen():
            full_due = 0.0
            for _ in range(10**12):  # until stopped
                if stop.is_set():
                    return
                # Every feed when its poll is due; in between only those PostgreSQL named.
                due = loop.time() >= full_due
                feeds = [
                    f for f in self._feeds.values() if not f.ended and (due or f.stale.is_set() or f.holding)
                ]
                if due:
                    full_due = loop.time() + (self.fallback_poll_s if self._listening else self.poll_s)
                self._wake.clear()  # before reading: what is heard meanwhile wakes the next pass
                with contextlib.suppress(Exception):  # a store that is down: try again next tick
                    await self._tick(feeds)
                next_pass = full_due - loop.time()
                if any(f.holding for f in self._feeds.values()):
                    next_pass = min(next_pass, HOLD_POLL_S)
                await _either(stop, self._wake, timeout=max(0.0, next_pass))

    async def _tick(self, feeds: list[_Feed]) -> None:
        if not feeds:
            return
        # Statuses first, events second: an end read here has all its events read below.
        statuses = await self._statuses([f.run_id for f in feeds])
        for feed in feeds:
            feed.stale.clear()
            status = statuses.get(feed.run_id)
            for _ in range(1000):  # bounded: each pass reads up to _READ newer events
                read = await self.store.events(feed.run_id, after_seq=feed.last_seq, limit=_READ)
                new = publishable(read, status)
                feed.holding = len(new) < len(read)
                last = feed.events[-1] if not new and feed.events else (new[-1] if new else None)
                feed.add(new, ended=len(read) < _READ and _ended(status, last))
                if len(read) < _READ:
                    break

    async def _statuses(self, run_ids: list[str]) -> dict[str, Status]:
        j, r = jobs_table, runs_table
        query = sa.select(j.c.id, j.c.status, r.c.status, j.c.updated_at).join(
            r, r.c.id == j.c.id, isouter=True
        )
        async with self.store.engine.connect() as conn:
            rows = await conn.execute(query.where(j.c.id.in_(run_ids)))
            return {row[0]: (row[1], row[2], row[3]) for row in rows}

    @contextlib.asynccontextmanager
    async def _listen(self) -> AsyncIterator[None]:
        if self.store.dialect != "postgresql":
            yield
            return
        import asyncpg

        url = self.store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            conn = await asyncpg.connect(url, timeout=10)
            await conn.add_listener(EVENTS_CHANNEL, lambda _c, _pid, _ch, run_id: self._heard(str(run_id)))
        except (TimeoutError, OSError, asyncpg.PostgresError):
            yield  # polling still finds every event, only later
            return
        self._listening = True
        try:
            yield
        finally:
            self._listening = False
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    def _heard(self, run_id: str) -> None:
        feed = self._feeds.get(run_id)
        if feed is not None:
            feed.stale.set()
            self._wake.set()

    async def follow(
        self, run_id: str, after_seq: int = 0, *, keepalive_s: float = 15.0, follow: bool = True
    ) -> AsyncIterator[bytes]:
        """The run's events after ``after_seq`` as Server-Sent Events, as they come, until the
        run ends; a ``: ping`` comment after ``keepalive_s`` of silence. What is there at once
        goes as one chunk (one write for many events). Without ``follow``: what is recorded
        now, then the end."""
        if not follow:
            async for event in self._recorded(run_id, after_seq):
                yield sse_message(event)
            return
        # Registered again here, without an await in between: a feed its last follower left
        # while this one waited for it to open is fed again (or the newer one is used).
        feed = self._feeds.setdefault(run_id, await self._feed(run_id))
        feed.followers += 1
        seq = after_seq
        try:
            quiet_since = time.monotonic()
            for _ in range(10**12):  # until the run ends or the client goes
                changed = feed.changed
                pending = await self._after(feed, seq)
                if pending:
                    seq = pending[-1].seq
                    quiet_since = time.monotonic()
                    yield b"".join(feed.line(event) for event in pending)
                    continue
                if (feed.ended and seq >= feed.last_seq) or self._closed:
                    return
                left = keepalive_s - (time.monotonic() - quiet_since)
                if left <= 0:
                    quiet_since = time.monotonic()
                    yield PING
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await changed.wait()
        finally:
            feed.followers -= 1
            if feed.followers == 0:
                self._feeds.pop(run_id, None)

    async def _recorded(self, run_id: str, seq: int) -> AsyncIterator[Event]:
        status = (await self._statuses([run_id])).get(run_id)  # before the events, as in _tick
        for _ in range(10**6):  # bounded by the log's length
            batch = await self.store.events(run_id, after_seq=seq, limit=_READ)
            for event in publishable(batch, status) if len(batch) < _READ else batch:
                yield event
            if len(batch) < _READ:
                return
            seq = batch[-1].seq

    async def _feed(self, run_id: str) -> _Feed:
        """The run's feed; the first follower opens it, those arriving meanwhile wait for that
        (200 clients opening one run's stream at once make three reads, not 600)."""
        feed = self._feeds.get(run_id)
        if feed is not None:
            return feed
        opening = self._opening.get(run_id)
        if opening is None:
            opening = self._opening[run_id] = asyncio.ensure_future(self._open(run_id))
            opening.add_done_callback(lambda _f: self._opening.pop(run_id, None))
        return await asyncio.shield(opening)  # one client going away does not cancel the others' open

    async def _open(self, run_id: str) -> _Feed:
        status = (await self._statuses([run_id])).get(run_id)  # before the events, as in _tick
        last = await self.store.last_seq(run_id)
        # The feed keeps what comes from here on; a client further behind reads the store.
        read = await self.store.events(run_id, after_seq=max(0, last - 50))
        kept = publishable(read, status)
        # What was appended between the two reads is kept too; a wait held back is read again.
        last = read[len(kept)].seq - 1 if len(kept) < len(read) else (read[-1].seq if read else last)
        feed = self._feeds.setdefault(run_id, _Feed(run_id, last_seq=last))
        if not feed.events and feed.last_seq == last:
            feed.events = kept
            feed.holding = len(kept) < len(read)
            feed.ended = _ended(status, kept[-1] if kept else None)
            if feed.holding:
                self._wake.set()  # the hub's loop polls it from now on
        return feed

    async def _after(self, feed: _Feed, seq: int) -> list[Event]:
        """The events after ``seq``: from the feed, or from the store for what it no longer keeps."""
        first_kept = feed.events[0].seq if feed.events else feed.last_seq + 1
        if seq + 1 >= first_kept:
            return [e for e in feed.events if e.seq > seq]
        gap = await self.store.events(feed.run_id, after_seq=seq, limit=_READ)
        return [e for e in gap if e.seq < first_kept] or [e for e in feed.events if e.seq > seq]

    def close(self) -> None:
        """The server is stopping: every stream ends now (cleanly; clients resume elsewhere or later)."""
        self._closed = True
        for feed in self._feeds.values():
            changed, feed.changed = feed.changed, asyncio.Event()
            changed.set()

    def poke(self, run_id: str) -> None:
        """Something of ``run_id`` changed here (a reply, a cancel): read it now."""
        self._heard(run_id)


async def _either(a: asyncio.Event, b: asyncio.Event, *, timeout: float) -> None:  # noqa: ASYNC109
    """Until ``a`` or ``b`` is set, or ``timeout`` seconds (the waits are not left behind)."""
    waits = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
