"""Chat channels (seed 004, generalised): people talk to agents from a chat app, through a bridge.

The bridge POSTs what a user writes to ``/v1/channels/webhook/NAME`` as ``{"user", "text"}``
(and, optionally, the chat app's message ``id``: a repeat of it is dropped), signed with the
channel's ``secret`` (``X-Steward-Timestamp``: Unix seconds, ``X-Steward-Signature:
sha256=HEX``, HMAC-SHA256 of ``TIMESTAMP.BODY``; no token); each signed message is taken once.
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

Every message to a user is a row of the outbox (``steward.server.outbox``): sent once, in
order, whichever server finds it first. The webhook itself is ``steward.server.routes.channels``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from steward.events import ApprovalGateEvent, WaitingEvent
from steward.jobs.replies import Decision
from steward.server.outbox import Kind, Message, Outgoing, Seen

if TYPE_CHECKING:
    from steward.config import ChannelSettings
    from steward.server.state import ServerState
    from steward.store.events import EventStore

log = logging.getLogger("steward.server")

SIGNATURE_HEADER = "X-Steward-Signature"
TIMESTAMP_HEADER = "X-Steward-Timestamp"  # Unix seconds when the bridge signed the message
MAX_SKEW_S = 300  # a message signed longer ago (or ahead) than this is refused: no replays
MAX_TEXT = 4000  # characters of a message a user wrote (WhatsApp allows 4096)
MAX_USER = 200
MAX_OUT = 4000  # characters of a message sent to a user; longer results are cut in the middle
SEND_TIMEOUT_S = 10.0  # one message, retries included
ANNOUNCE_WITHIN_S = 86_400.0  # a job that ended longer ago is not announced (after a long outage)
_PER_PASS = 50  # jobs looked at per pass, for waits and for ends each
_IN_FLIGHT = 16  # messages one server sends at once

ACK = "Working on it. I'll write here when it's done, or if I need you."
BUSY = "Still working on your last request. I'll write here when it's done, or if I need you."
AGAIN = "Please reply YES to approve, or NO and why (for example: NO, too risky)."


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


def signed_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers that sign a message to the bridge, as the bridge signs its own: the time now
    and the HMAC of ``TIMESTAMP.BODY`` (a receiver refuses a copy sent again later). Without a
    secret, none."""
    if not secret:
        return {}
    timestamp = str(int(time.time()))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, body, timestamp)}


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
        for job in await self.state.outbox.waits_to_announce(names, _PER_PASS):
            await self._announce_wait(store, job, now)
        for job in await self.state.outbox.ends_to_announce(names, now - ANNOUNCE_WITHIN_S, _PER_PASS):
            await self._announce_end(job)
        self._sending = {task for task in self._sending if not task.done()}
        room = _IN_FLIGHT - len(self._sending)
        for out in await self.state.outbox.claim(names, now, room) if room > 0 else []:
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
        if not await self.state.outbox.add(message):
            await self.state.outbox.renew_fence(message.key, job.fence)

    async def _announce_end(self, job: Seen) -> None:
        who = self._who(job.user_key)
        if who is None:
            return
        kind, text = end_text(job)
        await self.state.outbox.add(Message(f"{job.id}:end:{job.fence}", *who, kind, text, job.id, job.fence))

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
                body = out.body()
                headers = dict(channel.reply_headers) | signed_headers(channel.secret, body)
                notifier = Notifier(
                    url=channel.reply_url, headers=headers, secret=None, timeout_s=SEND_TIMEOUT_S
                )
                # Notify's POST: retried on 5xx and failed connections, bounded, never raises.
                problem = await notifier.post(channel.reply_url, body, out.key)
            if problem is not None:
                log.warning("channel %s: a %s message to %r was not delivered: %s", out.channel, out.kind,
                            out.recipient, problem)  # fmt: skip
            await self.state.outbox.settle(out, problem)
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


async def watch_channels(state: ServerState, stop: asyncio.Event) -> None:
    """The server's channel watcher, until ``stop`` (started by the server's lifespan)."""
    watcher = ChannelWatcher(state, dict(state.options.settings.channels))
    state.poke_channels = watcher.poke
    await watcher.run(stop)
