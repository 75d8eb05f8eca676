"""The chat channels' outbox: the ``channel_messages`` table, one row per message, sent once.

Exactly once, with any number of servers on one store and across restarts: every message is a
row under a unique key (the job and the wait it announces, or the job's end), written by
whoever finds it first: the webhook for its own replies, and any server's watcher, which looks
at the channels' jobs every ``poll_s``. A queued message is then claimed by one conditional
update before it is sent. A sender that dies mid-send leaves a claim that runs out after
``SEND_LEASE_S``; the message is then sent again with the same ``X-Steward-Delivery``, so a
receiver can drop the repeat. A user's messages go out in order: one is claimed only once none
before it is still queued or being sent.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from steward.jobs.store import ENDED
from steward.store.engine import write_transaction
from steward.store.schema import channel_messages as messages_table
from steward.store.schema import channel_signatures as signatures_table
from steward.store.schema import jobs as jobs_table

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

SEND_LEASE_S = 30.0  # a message claimed longer ago than this lost its sender: it is sent again

Kind = Literal["ack", "busy", "question", "approval", "again", "result", "failure", "wait", "received"]
Status = Literal["queued", "none"]  # "none": recorded so it is not looked at again, never sent


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

    async def take_signature(self, channel: str, signature: str, now: float, keep_s: float) -> bool:
        """Remember a signed message's ``signature`` for ``keep_s`` seconds; False when it was
        taken before (by any server on the store): the message is a replay. Signatures older
        than that are dropped here: their timestamps are refused by now anyway."""
        t = signatures_table
        try:
            async with write_transaction(self._engine) as conn:
                await conn.execute(t.delete().where(t.c.seen_at < now - keep_s))
                await conn.execute(t.insert().values(signature=signature, channel=channel, seen_at=now))
        except sa_exc.IntegrityError:
            return False
        return True

    async def give_back_signature(self, signature: str) -> None:
        """The message was not handled (the server failed): its repeat is taken then."""
        t = signatures_table
        async with write_transaction(self._engine) as conn:
            await conn.execute(t.delete().where(t.c.signature == signature))

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
