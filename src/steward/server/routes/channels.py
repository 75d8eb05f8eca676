"""The chat channels' webhook: ``POST /v1/channels/webhook/NAME``, a message a user wrote, signed
with the channel's secret (its signature is its authentication: no token), and what it does."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from steward.errors import StewardError
from steward.jobs.store import Job, JobError
from steward.server import schemas as s
from steward.server.channels import (
    ACK,
    AGAIN,
    BUSY,
    MAX_SKEW_S,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Delivered,
    Inbound,
    Wait,
    decision_of,
    signature,
    user_key,
    waiting_for,
)
from steward.server.errors import ApiError
from steward.server.outbox import Kind, Message
from steward.server.roots import workspace_for
from steward.server.state import ServerState, State

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from steward.config import ChannelSettings
    from steward.memory.session_store import SessionRow

log = logging.getLogger("steward.server")
router = APIRouter(prefix="/v1/channels", tags=["channels"])


@dataclass(slots=True)
class _Conversation:
    """One inbound message of a channel's user, and what it does."""

    state: ServerState
    name: str
    channel: ChannelSettings
    message: Inbound

    @property
    def key(self) -> str:
        return user_key(self.name, self.message.user)

    async def receive(self) -> Delivered:
        given = self.message.id
        marker = f"in:{self.name}:{self.message.user}:{given}"
        if given is not None and not await self.state.outbox.add(
            Message(marker, self.name, self.message.user, "received", "", status="none")
        ):
            return Delivered(status="duplicate", detail=f"message {given!r} was received before; dropped")
        try:
            return await self._route()
        except BaseException:
            if given is not None:  # not handled: a repeat of it is handled then
                with contextlib.suppress(Exception):
                    await self.state.outbox.forget(marker)
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
        if not await self.state.outbox.shown(f"{job.id}:{wait.id}"):
            # Its message failed to go out (the bridge was down): the user writes because they
            # wait for something, so it is sent again rather than left unseen for good.
            if await self.state.outbox.send_again(f"{job.id}:{wait.id}"):
                self.state.poke_channels()
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
        last = await self.state.outbox.last_started(self.name, self.message.user)
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
        await self.state.outbox.add(Message(key, self.name, self.message.user, kind, text, job.id))
        self.state.poke_channels()


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
    # Digits (and a fraction) only: float() also reads "nan", "inf" and "1e400", none a time.
    if _UNIX_SECONDS.fullmatch(timestamp.strip()) is None:
        return "with a timestamp that is not Unix seconds (digits, e.g. 1700000000)"
    skew = abs(time.time() - float(timestamp))
    return None if skew <= MAX_SKEW_S else f"signed {int(skew)} s away from now (a replay?)"


_UNIX_SECONDS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")


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


@router.post(
    "/webhook/{name}",
    response_model=Delivered,
    status_code=202,
    responses=_PROBLEMS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": Inbound.model_json_schema()}},
        }
    },
)
async def webhook(name: str, request: Request, state: State) -> Any:
    """A message a user wrote in chat channel NAME, signed with the channel's secret."""
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
    message = _parse(body)
    # Taken once, by whichever server on the store sees it first: a captured message sent again
    # (with or without an id) does nothing, however soon.
    taken = signature(channel.secret, body, str(request.headers.get(TIMESTAMP_HEADER)).strip())
    if not await state.outbox.take_signature(name, taken, time.time(), KEEP_SIGNATURES_S):
        log.warning("channel %s: dropped a signed message received before (a replay?)", name)
        return Delivered(status="duplicate", detail="this signed message was received before; dropped")
    try:
        return await _Conversation(state, name, channel, message).receive()
    except BaseException:
        with contextlib.suppress(Exception):  # not handled: a repeat of it is handled then
            await state.outbox.give_back_signature(taken)
        raise


# A signature is kept while its timestamp is accepted: from MAX_SKEW_S before now to after.
KEEP_SIGNATURES_S = 2 * MAX_SKEW_S + 60
