"""Chat channels (seed 004, generalised): people talk to agents from a chat app, through a bridge.

The bridge POSTs what a user writes to ``/v1/channels/webhook/NAME`` as ``{"user", "text"}``
(and, optionally, the chat app's message ``id``: a repeat of it is dropped), signed with the
channel's ``secret`` (``X-Steward-Signature: sha256=HEX``, HMAC-SHA256 of the body; no token).
What Steward says goes to the channel's ``reply_url`` as ``{"channel", "user", "text",
"job_id", "kind"}``, signed the same way. For each user:

* a first message starts a job in the user's session (one per channel and user, so the agent
  remembers earlier turns) and is acknowledged at once (``ack``);
* while that job is queued or running, a message is told it still is (``busy``): one active
  job per user, by the queue's user key ``channel:NAME:USER``;
* a question of the job goes out as its text (``question``), an approval as its question and
  "reply YES to approve, or NO and why" (``approval``); the user's next message answers it:
  YES / Y / OK approves, NO and a reason denies, anything else is asked again (``again``).
  Only what the user was sent is answered: a message that comes before it is told "still working";
* when the job ends, its result (``result``) or why it did not finish (``failure``) goes out.

Exactly once, with any number of servers on one store and across restarts: every message is a
row of ``channel_messages`` under a unique key (the job and the wait it announces, or the
job's end), written by whoever finds it first: the webhook for its own replies, and any
server's watcher, which looks at the channels' jobs every ``poll_s``. A queued message is
then claimed by one conditional update before it is sent. A sender that dies mid-send leaves
a claim that runs out after ``SEND_LEASE_S``; the message is then sent again with the same
``X-Steward-Delivery``, so a receiver can drop the repeat. A user's messages go out in order:
one is claimed only once none before it is still queued or being sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import exc as sa_exc

from steward.errors import StewardError
from steward.events import ApprovalGateEvent, WaitingEvent
from steward.jobs.replies import Decision
from steward.jobs.store import ENDED, Job, JobError
from steward.server import schemas as s
from steward.server.app import ApiError, ServerState, workspace_for
from steward.store.engine import write_transaction
from steward.store.schema import channel_messages as messages_table
from steward.store.schema import jobs as jobs_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic_core import ErrorDetails
    from sqlalchemy.ext.asyncio import AsyncEngine

    from steward.config import ChannelSettings
    from steward.memory.session_store import SessionRow
    from steward.store.events import EventStore

log = logging.getLogger("steward.server")

SIGNATURE_HEADER = "X-Steward-Signature"
TIMESTAMP_HEADER = "X-Steward-Timestamp"  # Unix seconds when the bridge signed the message
MAX_SKEW_S = 300  # a message signed longer ago (or ahead) than this is refused: no replays
MAX_TEXT = 4000  # characters of a message a user wrote (WhatsApp allows 4096)
MAX_USER = 200
MAX_OUT = 4000  # characters of a message sent to a user; longer results are cut in the middle
SEND_TIMEOUT_S = 10.0  # one message, retries included
SEND_LEASE_S = 30.0  # a message claimed longer ago than this lost its sender: it is sent again
ANNOUNCE_WITHIN_S = 86_400.0  # a job that ended longer ago is not announced (after a long outage)
_PER_PASS = 50  # jobs looked at per pass, for waits and for ends each
_IN_FLIGHT = 16  # messages one server sends at once

ACK = "Working on it. I'll write here when it's done, or if I need you."
BUSY = "Still working on your last request. I'll write here when it's done, or if I need you."
AGAIN = "Please reply YES to approve, or NO and why (for example: NO, too risky)."

Kind = Literal["ack", "busy", "question", "approval", "again", "result", "failure", "wait", "received"]
Status = Literal["queued", "none"]  # "none": recorded so it is not looked at again, never sent


# --- what the bridge sends and is answered ---------------------------------------------------


class Inbound(BaseModel):
    """A message a user wrote in the chat app."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(
        min_length=1, max_length=MAX_USER, description="Who wrote it, as the chat app names them."
    )
    text: str = Field(min_length=1, max_length=MAX_TEXT, description="What they wrote.")
    id: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The chat app's id of the message; a repeat is dropped.",
    )

    @field_validator("user", "text", "id")
    @classmethod
    def _written(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("has a NUL character; send the text as written")
        if value is not None and not value.strip():
            raise ValueError("is only blank space; send what the user wrote")
        return value


class Delivered(BaseModel):
    """What became of a message: the job it started or answered, and what the user is told."""

    status: Literal["started", "busy", "approved", "denied", "answered", "unclear", "duplicate", "resent"]
    job_id: str | None = None
    detail: str


def signature(secret: str, body: bytes, timestamp: str) -> str:
    """The ``X-Steward-Signature`` of an inbound message: ``sha256=`` and the HMAC-SHA256 in hex
    of ``TIMESTAMP.BODY`` (the timestamp is signed too, so a captured message cannot be sent
    again later: it is refused outside ``MAX_SKEW_S``)."""
    signed = timestamp.encode("latin-1", "replace") + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def user_key(channel: str, user: str) -> str:
    """The queue's user key of a channel's user: at most one active job each."""
    return f"channel:{channel}:{user}"


def decision_of(text: str) -> Decision | None:
    """A reply to an approval: YES / Y / OK approves, NO (and why) denies; None: unclear.
    Only the whole reply approves ("yes, but..." is asked again): an approval is not guessed."""
    if text.strip().rstrip(".!").strip().lower() in _YES:
        return Decision(approved=True)
    no = _NO.fullmatch(text)
    return Decision(approved=False, reason=no["reason"].strip()) if no is not None else None


_YES = frozenset({"yes", "y", "ok", "okay"})
_NO = re.compile(r"\s*(?:no|n)\b[\s,.:;!-]*(?P<reason>.*)", re.IGNORECASE | re.DOTALL)


# --- the outbox: one row per message, sent once ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    key: str  # one message per key, whoever records it first
    channel: str
    recipient: str
    kind: Kind
    text: str
    job_id: str | None = None
    fence: int | None = None  # the job's claim whose wait (or end) this announces
    status: Status = "queued"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message this server claimed and now sends."""

    id: int
    key: str
    channel: str
    recipient: str
    kind: str
    text: str
    job_id: str | None
    claim: str

    def body(self) -> bytes:
        payload = {
            "channel": self.channel, "user": self.recipient, "text": self.text, "job_id": self.job_id,
            "kind": self.kind,
        }  # fmt: skip
        return json.dumps(payload, ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Seen:
    """A channel job the watcher found with something to announce."""

    id: str
    user_key: str
    status: str
    fence: int
    result: str | None
    error: str | None


_SEEN = (jobs_table.c.id, jobs_table.c.user_key, jobs_table.c.status, jobs_table.c.fence)
_SEEN_END = (*_SEEN, jobs_table.c.result, jobs_table.c.error)


class Outbox:
    """The ``channel_messages`` table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(self, message: Message) -> bool:
        """Record ``message``; False when its key was recorded already (by anyone)."""
        m = message
        values = {
            "key": m.key, "channel": m.channel, "recipient": m.recipient, "job_id": m.job_id,
            "fence": m.fence, "kind": m.kind, "text": m.text, "status": m.status, "created_at": time.time(),
        }  # fmt: skip
        try:
            async with write_transaction(self._engine) as conn:
                await conn.execute(messages_table.insert().values(**values))
        except sa_exc.IntegrityError:
            return False
        return True

    async def forget(self, key: str) -> None:
        async with write_transaction(self._engine) as conn:
            await conn.execute(messages_table.delete().where(messages_table.c.key == key))

    async def renew_fence(self, key: str, fence: int) -> None:
        """A wait announced under an earlier claim of its job is still the one it waits for (a
        worker took the job over): remembered under this claim, not announced again."""
        t = messages_table
        async with write_transaction(self._engine) as conn:
            await conn.execute(t.update().where(t.c.key == key).values(fence=fence))

    async def shown(self, key: str) -> bool:
        """Whether the message ``key`` went out (or is going): a reply may answer it."""
        t = messages_table
        async with self._engine.connect() as conn:
            found = await conn.execute(sa.select(t.c.status).where(t.c.key == key))
            return found.scalar_one_or_none() in ("sending", "sent")

    async def send_again(self, key: str) -> bool:
        """Queue the message ``key`` again if it failed to go out; whether it did."""
        t = messages_table
        async with write_transaction(self._engine) as conn:
            again = t.update().where(t.c.key == key, t.c.status == "failed")
            return (await conn.execute(again.values(status="queued", claim=None, error=None))).rowcount == 1

    async def last_started(self, channel: str, recipient: str) -> str | None:
        """The job of the user's latest acknowledged first message, if any."""
        t = messages_table
        query = (
            sa.select(t.c.job_id)
            .where(t.c.channel == channel, t.c.recipient == recipient, t.c.kind == "ack")
            .order_by(t.c.id.desc())
            .limit(1)
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).scalar_one_or_none()

    async def waits_to_announce(self, channels: list[str], limit: int) -> list[Seen]:
        """Waiting jobs of ``channels`` whose current claim has no message yet."""
        j, m = jobs_table, messages_table
        told = sa.exists().where(m.c.job_id == j.c.id, m.c.fence == j.c.fence)
        query = sa.select(*_SEEN).where(j.c.status == "waiting", _of(channels), ~told)
        return await self._seen(query.order_by(j.c.updated_at).limit(limit))

    async def ends_to_announce(self, channels: list[str], since: float, limit: int) -> list[Seen]:
        """Jobs of ``channels`` that ended after ``since`` and whose end has no message yet."""
        j, m = jobs_table, messages_table
        told = sa.exists().where(
            m.c.job_id == j.c.id, m.c.fence == j.c.fence, m.c.kind.in_(("result", "failure"))
        )
        query = sa.select(*_SEEN_END).where(
            j.c.status.in_(ENDED), j.c.updated_at > since, _of(channels), ~told
        )
        return await self._seen(query.order_by(j.c.updated_at).limit(limit))

    async def _seen(self, query: sa.Select[Any]) -> list[Seen]:
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [
            Seen(r["id"], r["user_key"], r["status"], r["fence"], r.get("result"), r.get("error"))
            for r in rows
        ]

    async def claim(self, channels: list[str], now: float, limit: int) -> list[Outgoing]:
        """Up to ``limit`` messages to send, now this server's: queued ones, and ones whose sender
        went silent; the oldest of each user only."""
        t = messages_table
        stale = sa.and_(t.c.status == "sending", t.c.claimed_at < now - SEND_LEASE_S)
        # Only the channels this server knows: another server may be configured with more.
        due = (
            sa.select(t)
            .where(sa.or_(t.c.status == "queued", stale), t.c.channel.in_(channels))
            .order_by(t.c.id)
            .limit(limit * 4)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(due)).mappings().all()
        taken: list[Outgoing] = []
        users: set[tuple[str, str]] = set()
        for row in rows:  # bounded by the query's limit
            who = (row["channel"], row["recipient"])
            if who in users or len(taken) >= limit:
                continue
            users.add(who)
            claim = secrets.token_hex(8)
            if await self._take(row, claim, now):
                taken.append(
                    Outgoing(
                        row["id"], row["key"], row["channel"], row["recipient"], row["kind"], row["text"],
                        row["job_id"], claim,
                    )
                )  # fmt: skip
        return taken

    async def _take(self, row: sa.RowMapping, claim: str, now: float) -> bool:
        """Claim one message by a conditional write: as it was read, and none of its user's
        before it still on the way (so a user's messages keep their order)."""
        t, earlier = messages_table, messages_table.alias("earlier")
        before = sa.exists().where(
            earlier.c.channel == t.c.channel, earlier.c.recipient == t.c.recipient, earlier.c.id < t.c.id,
            earlier.c.status.in_(("queued", "sending")),
        )  # fmt: skip
        take = (
            t.update()
            .where(
                t.c.id == row["id"], t.c.status == row["status"], t.c.claim.is_not_distinct_from(row["claim"])
            )
            .where(~before)
            .values(status="sending", claim=claim, claimed_at=now)
        )
        async with write_transaction(self._engine) as conn:
            return (await conn.execute(take)).rowcount == 1

    async def settle(self, out: Outgoing, problem: str | None) -> None:
        t = messages_table
        values: dict[str, Any] = (
            {"status": "sent", "sent_at": time.time(), "error": None}
            if problem is None
            else {"status": "failed", "error": problem[:2000]}
        )
        async with write_transaction(self._engine) as conn:
            await conn.execute(t.update().where(t.c.id == out.id, t.c.claim == out.claim).values(**values))


def _of(channels: list[str]) -> sa.ColumnElement[bool]:
    """Jobs of these channels' users (by an exact prefix: SQLite's LIKE ignores case)."""
    key = jobs_table.c.user_key
    prefixes = [f"channel:{c}:" for c in channels]
    return sa.or_(*(sa.func.substr(key, 1, len(p)) == p for p in prefixes))


# --- what a job waits for, and what its end says ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wait:
    kind: str  # "question", "approval", "job" (a job it delegated to)
    id: str
    question: str
    gate: ApprovalGateEvent | None


async def waiting_for(store: EventStore, run_id: str) -> Wait | None:
    """What the run waits for, from the tail of its log (an approval gate, then ``waiting``)."""
    last = await store.last_seq(run_id)
    tail = await store.events(run_id, after_seq=max(0, last - 2))
    if not tail or not isinstance(tail[-1], WaitingEvent):
        return None
    wait = tail[-1]
    gate = tail[-2] if len(tail) > 1 and isinstance(tail[-2], ApprovalGateEvent) else None
    return Wait(wait.kind, wait.id, wait.question, gate if gate is not None and gate.id == wait.id else None)


def wait_text(wait: Wait, now: float) -> str:
    if wait.kind != "approval":
        return _cut(wait.question)
    text = f"{_cut(wait.question)}\nReply YES to approve, or NO and why."
    if wait.gate is not None and wait.gate.deadline > now:
        minutes = max(1, round((wait.gate.deadline - now) / 60))
        otherwise = "denied" if wait.gate.default == "deny" else "allowed"
        text += f" With no reply within {minutes} min it is {otherwise}."
    return text


def end_text(job: Seen) -> tuple[Kind, str]:
    if job.status == "done":
        return "result", _cut(job.result or "Done.")
    if job.status == "cancelled":
        return "failure", _cut(f"Stopped: {job.error or 'cancelled'}.")
    return "failure", _cut(f"I could not finish that: {job.error or job.result or job.status}")


def _cut(text: str) -> str:
    from steward.text import excerpt

    return excerpt(text, MAX_OUT)


# --- the watcher: announces the channel jobs' waits and ends, sends what is queued -----------------


@dataclass(slots=True)
class ChannelWatcher:
    """One per server; ``run`` until stopped. ``poke`` when a message was queued here."""

    state: ServerState
    outbox: Outbox
    channels: dict[str, ChannelSettings]
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _sending: set[asyncio.Task[None]] = field(default_factory=set)

    def poke(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        if not self.channels:
            return
        poll_s = self.state.options.settings.poll_s
        try:
            for _ in range(10**12):  # until stopped
                if stop.is_set():
                    return
                self._wake.clear()  # before the pass: a poke during it brings the next one at once
                try:
                    await self.tick(time.time())
                except Exception as exc:  # the store is down or busy: the next pass tries again
                    log.warning("channels: a pass failed (%s: %s); trying again", type(exc).__name__, exc)
                await _first(stop.wait(), self._wake.wait(), timeout=poll_s)
        finally:
            await self._let_sends_finish()

    async def tick(self, now: float) -> None:
        """One pass: bounded by ``_PER_PASS`` jobs of each kind and ``_IN_FLIGHT`` messages."""
        names = sorted(self.channels)
        store = self.state.store
        for job in await self.outbox.waits_to_announce(names, _PER_PASS):
            await self._announce_wait(store, job, now)
        for job in await self.outbox.ends_to_announce(names, now - ANNOUNCE_WITHIN_S, _PER_PASS):
            await self._announce_end(job)
        self._sending = {task for task in self._sending if not task.done()}
        room = _IN_FLIGHT - len(self._sending)
        for out in await self.outbox.claim(names, now, room) if room > 0 else []:
            task = asyncio.create_task(self._send(out), name=f"steward-channel-send-{out.id}")
            task.add_done_callback(lambda _t: self.poke())  # the user's next message may go now
            self._sending.add(task)

    def _who(self, key: str) -> tuple[str, str] | None:
        """The channel and user of a user key (the longest channel name that fits)."""
        for name in sorted(self.channels, key=len, reverse=True):
            if key.startswith(prefix := f"channel:{name}:"):
                return name, key.removeprefix(prefix)
        return None

    async def _announce_wait(self, store: EventStore, job: Seen, now: float) -> None:
        who = self._who(job.user_key)
        if who is None:
            return
        wait = await waiting_for(store, job.id)
        if wait is None:  # its log says otherwise (a reply on its way): looked at under its next claim
            message = Message(f"{job.id}:fence:{job.fence}", *who, "wait", "", job.id, job.fence, "none")
        elif wait.kind in ("question", "approval"):
            kind: Kind = "approval" if wait.kind == "approval" else "question"
            message = Message(f"{job.id}:{wait.id}", *who, kind, wait_text(wait, now), job.id, job.fence)
        else:  # it waits for a job it delegated to, not for the user
            message = Message(f"{job.id}:{wait.id}", *who, "wait", "", job.id, job.fence, "none")
        if not await self.outbox.add(message):
            await self.outbox.renew_fence(message.key, job.fence)

    async def _announce_end(self, job: Seen) -> None:
        who = self._who(job.user_key)
        if who is None:
            return
        kind, text = end_text(job)
        await self.outbox.add(Message(f"{job.id}:end:{job.fence}", *who, kind, text, job.id, job.fence))

    async def _send(self, out: Outgoing) -> None:
        """POST one message to its channel's ``reply_url``; a failure is logged, never raised."""
        from steward.jobs.notify import Notifier

        channel = self.channels.get(out.channel)
        try:
            if channel is None or not channel.reply_url:
                problem: str | None = (
                    f"channel {out.channel!r} has no reply_url; set [server.channels] reply_url"
                )
            else:
                notifier = Notifier(
                    url=channel.reply_url, headers=dict(channel.reply_headers), secret=channel.secret or None,
                    timeout_s=SEND_TIMEOUT_S,
                )  # fmt: skip
                # Notify's POST: signed, retried on 5xx and failed connections, bounded, never raises.
                problem = await notifier.post(channel.reply_url, out.body(), out.key)
            if problem is not None:
                log.warning("channel %s: a %s message to %r was not delivered: %s", out.channel, out.kind,
                            out.recipient, problem)  # fmt: skip
            await self.outbox.settle(out, problem)
        except Exception as exc:  # the store: the claim runs out and the message goes again
            log.warning("channel %s: message %s: %s: %s", out.channel, out.key, type(exc).__name__, exc)

    async def _let_sends_finish(self) -> None:
        left = {task for task in self._sending if not task.done()}
        if left:
            _, late = await asyncio.wait(left, timeout=SEND_TIMEOUT_S + 1)
            for task in late:  # its claim runs out; another server (or the next start) sends it
                task.cancel()


async def _first(*waits: Any, timeout: float) -> None:  # noqa: ASYNC109 - a poll's wait
    futures = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(futures, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()


async def watch_channels(app: FastAPI, stop: asyncio.Event) -> None:
    """The server's channel watcher, until ``stop`` (started by the server's lifespan)."""
    state: ServerState = app.state.steward
    watcher = ChannelWatcher(state, Outbox(state.store.engine), dict(state.options.settings.channels))
    app.state.channels = watcher
    await watcher.run(stop)


# --- the webhook ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Conversation:
    """One inbound message of a channel's user, and what it does."""

    state: ServerState
    outbox: Outbox
    name: str
    channel: ChannelSettings
    message: Inbound
    poke: Callable[[], None]  # tell the watcher a message is queued

    @property
    def key(self) -> str:
        return user_key(self.name, self.message.user)

    async def receive(self) -> Delivered:
        given = self.message.id
        marker = f"in:{self.name}:{self.message.user}:{given}"
        if given is not None and not await self.outbox.add(
            Message(marker, self.name, self.message.user, "received", "", status="none")
        ):
            return Delivered(status="duplicate", detail=f"message {given!r} was received before; dropped")
        try:
            return await self._route()
        except BaseException:
            if given is not None:  # not handled: a repeat of it is handled then
                with contextlib.suppress(Exception):
                    await self.outbox.forget(marker)
            raise

    async def _route(self) -> Delivered:
        job = await self.state.queue.jobs.active_for(self.key)
        if job is None:
            return await self._start()
        wait = await waiting_for(self.state.store, job.run_id or job.id) if job.status == "waiting" else None
        # Only a wait the user was shown is answered: a late repeat of "yes" must not approve
        # something the user has not seen yet.
        if wait is None or wait.kind not in ("question", "approval"):
            return await self._busy(job)
        if not await self.outbox.shown(f"{job.id}:{wait.id}"):
            # Its message failed to go out (the bridge was down): the user writes because they
            # wait for something, so it is sent again rather than left unseen for good.
            if await self.outbox.send_again(f"{job.id}:{wait.id}"):
                self.poke()
                return Delivered(status="resent", job_id=job.id, detail="the job's question is sent again")
            return await self._busy(job)
        if wait.kind == "question":
            return await self._answer(job, wait)
        return await self._decide(job, wait)

    async def _start(self) -> Delivered:
        state, text = self.state, self.message.text
        workspace = workspace_for(state.options, self.channel.workspace)
        if self.channel.persona:  # checked before a session is made for a job that cannot start
            from steward.personas import find_persona

            try:
                find_persona(self.channel.persona, workspace)
            except StewardError as exc:
                raise _not_configured(self.name, exc) from None
        session = await self._session()
        try:
            handle = await state.queue.submit(
                self.channel.persona, text, workspace=workspace, user=self.key, session_id=session.id
            )
        except JobError:  # another message of the user started one a moment ago
            if (active := await state.queue.jobs.active_for(self.key)) is not None:
                return await self._busy(active)
            raise
        except StewardError as exc:  # the channel's persona or workspace is wrong: the operator's to fix
            raise _not_configured(self.name, exc) from None
        job = await handle.get()
        await self._say(f"{job.id}:ack", "ack", ACK, job)  # recorded before anything the job says
        self._queued(job)
        return Delivered(status="started", job_id=job.id, detail=ACK)

    async def _session(self) -> SessionRow:
        """The user's session in this channel: the one of their last job, while it is open."""
        from steward.memory.session import session_store

        sessions = session_store(self.state.store)
        last = await self.outbox.last_started(self.name, self.message.user)
        previous = None
        if last is not None:
            with contextlib.suppress(StewardError):  # its job or session was deleted: a new one
                session_id = (await self.state.queue.jobs.get(last)).session_id
                previous = await sessions.get(session_id) if session_id else None
        if previous is not None and previous.is_open:
            await sessions.touch(previous.id)
            return previous
        title = f"{self.name}: {self.message.user}"[:60]
        return await sessions.create(title, previous.id if previous is not None else None)

    async def _busy(self, job: Job) -> Delivered:
        await self._say(f"{job.id}:busy:{secrets.token_hex(6)}", "busy", BUSY, job)
        return Delivered(status="busy", job_id=job.id, detail=BUSY)

    async def _answer(self, job: Job, wait: Wait) -> Delivered:
        try:
            await self.state.queue.job(job.id).answer(self.message.text, wait_id=wait.id)
        except JobError:  # answered a moment ago (another message, the API)
            return await self._busy(job)
        self._queued(job)
        return Delivered(status="answered", job_id=job.id, detail="the answer was given to the job")

    async def _decide(self, job: Job, wait: Wait) -> Delivered:
        decision = decision_of(self.message.text)
        if decision is None:
            await self._say(f"{job.id}:{wait.id}:again:{secrets.token_hex(6)}", "again", AGAIN, job)
            return Delivered(status="unclear", job_id=job.id, detail=AGAIN)
        handle = self.state.queue.job(job.id)
        try:
            if decision.approved:  # the wait the user was shown, or nothing
                await handle.approve(wait_id=wait.id)
            else:
                await handle.deny(decision.reason, wait_id=wait.id)
        except JobError:
            return await self._busy(job)
        self._queued(job)
        if decision.approved:
            return Delivered(status="approved", job_id=job.id, detail="approved; the job goes on")
        return Delivered(status="denied", job_id=job.id, detail=f"denied ({decision.reason or 'no reason'})")

    def _queued(self, job: Job) -> None:
        """The job is (again) in the queue: this server's workers look now, its followers read."""
        self.state.poke_workers()
        self.state.hub.poke(job.id)

    async def _say(self, key: str, kind: Kind, text: str, job: Job) -> None:
        await self.outbox.add(Message(key, self.name, self.message.user, kind, text, job.id))
        self.poke()


def _not_configured(name: str, exc: StewardError) -> ApiError:
    log.error("channel %s cannot start jobs: %s", name, exc)
    return ApiError(503, f"channel {name!r} cannot start jobs: {exc}", "Not configured")


def _parse(body: bytes) -> Inbound:
    try:
        data = json.loads(body)
    except ValueError:  # not JSON, or not UTF-8
        raise ApiError(400, 'the body is not JSON; send {"user": "...", "text": "..."} in UTF-8') from None
    if not isinstance(data, dict):
        raise ApiError(400, 'the body is JSON but not an object; send {"user": "...", "text": "..."}')
    try:
        return Inbound.model_validate(data)
    except ValidationError as exc:
        fixes = "; ".join(_fix(error) for error in exc.errors()[:5])
        raise ApiError(422, fixes, "Invalid request") from None


def _fix(error: ErrorDetails) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "body"
    ctx = error.get("ctx") or {}
    match error["type"]:
        case "missing":
            fix = 'is missing; send {"user": "...", "text": "..."}'
        case "extra_forbidden":
            fix = "is not a field; send user, text and (optionally) id"
        case "string_too_long":
            fix = f"is over {ctx.get('max_length')} characters; send less"
        case "string_too_short":
            fix = "is empty; send what the user wrote"
        case "string_type":
            fix = "must be a string"
        case "value_error":
            fix = str(ctx.get("error", error["msg"]))
        case _:
            fix = error["msg"]
    return f"{where}: {fix}"


def _unsigned(detail: str) -> JSONResponse:
    body = s.Problem(title="Unauthorized", status=401, detail=detail)
    return JSONResponse(
        body.model_dump(), status_code=401, media_type="application/problem+json",
        headers={"WWW-Authenticate": f'HMAC-SHA256 header="{SIGNATURE_HEADER}"'},
    )  # fmt: skip


def _signed(secret: str, body: bytes, given: str | None, timestamp: str | None) -> str | None:
    """Why the message is not the channel's, or None when it is."""
    if not given or not timestamp:
        return "without a signature" if not given else "without a timestamp"
    expected = signature(secret, body, timestamp.strip()).encode()
    if not hmac.compare_digest(given.strip().lower().encode("latin-1", "replace"), expected):
        return "with a signature that is not the channel's"
    try:
        skew = abs(time.time() - float(timestamp))
    except ValueError:
        return "with a timestamp that is not Unix seconds"
    return None if skew <= MAX_SKEW_S else f"signed {int(skew)} s away from now (a replay?)"


# Documented as they are sent: problem details (as the rest of the API's errors are).
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {
        "description": what,
        "content": {"application/problem+json": {"schema": s.Problem.model_json_schema()}},
    }
    for code, what in (
        (400, "Not JSON."),
        (401, "No signature, or not the channel's."),
        (403, "The channel's workspace is not under the server's roots."),
        (404, "No such channel."),
        (413, "The body is too large."),
        (422, "A field is missing or wrong."),
        (503, "The channel has no secret, or cannot start jobs."),
    )
}


def channels_router() -> APIRouter:
    """``POST /v1/channels/webhook/NAME``: its signature is its authentication (no token)."""
    router = APIRouter(prefix="/v1/channels", tags=["channels"])
    schema = Inbound.model_json_schema()

    @router.post(
        "/webhook/{name}",
        response_model=Delivered,
        status_code=202,
        responses=_PROBLEMS,
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}
        },
    )
    async def webhook(name: str, request: Request) -> Any:
        """A message a user wrote in chat channel NAME, signed with the channel's secret."""
        state: ServerState = request.app.state.steward
        channel = state.options.settings.channels.get(name)
        if channel is None:
            raise ApiError(404, f"no channel {name!r} on this server; channels are [server.channels.NAME]")
        if not channel.secret:
            raise ApiError(
                503, f"channel {name!r} has no secret, so no message to it can be trusted; "
                f"set secret in [server.channels.{name}]", "Not configured",
            )  # fmt: skip
        body = await request.body()
        given = request.headers.get(SIGNATURE_HEADER)
        why = _signed(channel.secret, body, given, request.headers.get(TIMESTAMP_HEADER))
        if why is not None:
            where = request.client.host if request.client is not None else "?"
            log.warning("channel %s: refused a message from %s %s", name, where, why)
            return _unsigned(
                f"refused: sent {why}. Sign each message: {TIMESTAMP_HEADER}: the Unix time now, and "
                f"{SIGNATURE_HEADER}: sha256=HEX, the HMAC-SHA256 with the channel's secret of "
                f"TIMESTAMP.BODY (the timestamp, a dot, the raw body); within {MAX_SKEW_S} s"
            )
        watcher: ChannelWatcher | None = getattr(request.app.state, "channels", None)
        outbox = watcher.outbox if watcher is not None else Outbox(state.store.engine)
        poke = watcher.poke if watcher is not None else (lambda: None)
        return await _Conversation(state, outbox, name, channel, _parse(body), poke).receive()

    return router
