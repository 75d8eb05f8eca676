"""``steward serve``: the HTTP API under ``/v1``, live events as Server-Sent Events, the web page.

Every run the API starts is a job of the queue (the run's id is the job's id), so whoever runs
it (this server's own workers, or a fleet behind it) records it in the shared store, and any
server on that store can show it, stream it live and take replies to it. A client that drops
its stream cancels nothing; it comes back with ``Last-Event-ID`` and misses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steward.config import PROVIDERS, ServerSettings
from steward.errors import StewardError
from steward.events import ApprovalGateEvent, WaitingEvent
from steward.jobs.api import Queue
from steward.jobs.store import Job, JobError
from steward.server import schemas as s
from steward.server.hub import EventHub
from steward.server.tokens import Tokens
from steward.store.events import EventStore, RunRow

if TYPE_CHECKING:
    from steward.jobs.worker import Worker

log = logging.getLogger("steward.server")

PAGE = Path(__file__).parent / "page"
DRAIN_S = 10.0  # how long a stopping server lets its runs reach their next step
MAX_SEQ = 2**31 - 1  # the store's seq column is a 32-bit INTEGER on PostgreSQL; larger fails the query
_PROBLEM = "application/problem+json"
_SSE_MESSAGE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The event's seq (send it back as Last-Event-ID)."},
        "event": {"type": "string", "description": "The event's type, e.g. tool_result."},
        "data": {
            "type": "string",
            "description": "The event as JSON (seq, run_id, ts, type, data...).",
        },
    },
}
# The errors a /v1 route may answer, documented as they are sent (problem details, not FastAPI's
# JSON shapes; its own 422 is replaced by this one).
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"content": {_PROBLEM: {"schema": s.Problem.model_json_schema()}}}
    for status in (400, 401, 403, 404, 409, 413, 422)
}


class ApiError(Exception):
    """A request that cannot be served; ``detail`` names the fix."""

    def __init__(self, status: int, detail: str, title: str = "") -> None:
        super().__init__(detail)
        self.status, self.detail, self.title = status, detail, title


@dataclass(slots=True)
class ServerOptions:
    store_url: str
    home: Path  # the folder the server was started in: the default workspace
    tokens: Tokens
    settings: ServerSettings = field(default_factory=ServerSettings)
    workers: int = 2  # worker slots of this server's own pool; 0: an API node in front of a fleet
    worker_roles: tuple[str, ...] = ()

    def roots(self) -> list[Path]:
        given = [self.home / r for r in self.settings.roots] or [self.home]
        return [r.resolve() for r in given]


@dataclass(slots=True)
class ServerState:
    options: ServerOptions
    store: EventStore
    queue: Queue
    hub: EventHub
    #: Tell this server's own workers that a job was queued here (others hear it from the store).
    poke_workers: Callable[[], None] = lambda: None


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.steward
    return state


State = Annotated[ServerState, Depends(_state)]


# --- errors: JSON problem details, never a traceback -----------------------------------------


def _problem(status: int, detail: str, title: str = "") -> JSONResponse:
    titles = {400: "Bad request", 401: "Unauthorized", 404: "Not found", 409: "Conflict", 413: "Too large"}
    body = s.Problem(title=title or titles.get(status, "Error"), status=status, detail=detail)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body.model_dump(), status_code=status, media_type=_PROBLEM, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(_r: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return _problem(exc.status, exc.detail, exc.title)

    async def steward_error(_r: Request, exc: Exception) -> JSONResponse:
        # Our own errors name the fix; a job that cannot change the way asked is a conflict.
        text = str(exc)
        if text.startswith("no ") and "in the store" in text:  # an unknown job, run or session
            return _problem(404, text)
        return _problem(409, text) if isinstance(exc, JobError) else _problem(400, text)

    async def invalid(_r: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = []
        for error in exc.errors()[:5]:
            where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
        detail = "; ".join(parts) or "the request is not valid"
        # A NUL is allowed by the document's types but kept by no store: the request, not its
        # shape, is what is wrong.
        return _problem(400 if "NUL" in detail else 422, detail, "Invalid request")

    async def http_error(_r: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        response = _problem(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})  # a 405's Allow (RFC 9110)
        return response

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error serving %s %s", request.method, request.url.path)
        return _problem(500, f"the server failed ({type(exc).__name__}); its log has the details", "Error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StewardError, steward_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


class BodyLimit:
    """Refuse a request body larger than ``limit`` bytes (413), declared or streamed, and an
    address with a NUL in it (no store keeps one; PostgreSQL fails on it)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _problem(413, f"the request body is over {self.limit // 1024} KiB")(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b"").lower():
            await _problem(400, "the address may not contain NUL characters (%00)")(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._too_large(scope, receive, send)
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the server reads no more than it declared
            return
        # A body sent in chunks with no length: read (up to the limit) before the app sees it.
        chunks: list[bytes] = []
        size = 0
        for _ in range(10**6):  # bounded by the limit: each chunk adds to the size
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await _problem(413, f"the request body is over {self.limit // 1024} KiB")(
                    scope, receive, send
                )
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)


# --- auth --------------------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="A token from `steward serve --new-token NAME`.")


async def _authorized(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    state = _state(request)
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(
            401, "send Authorization: Bearer TOKEN (steward serve printed one; --new-token makes more)"
        )
    name = state.options.tokens.check(credentials.credentials)
    if name is None:
        raise ApiError(
            401, "the token is not one of this server's; make one with `steward serve --new-token NAME`"
        )
    return name


# --- helpers -----------------------------------------------------------------------------------


def _under_roots(options: ServerOptions, given: str, what: str) -> Path:
    """``given`` (relative to the first root) resolved, when it lies under one of the roots."""
    roots = options.roots()
    if "\x00" in given:
        raise ApiError(400, f"the {what} path has a NUL byte")
    path = Path(given.strip())
    try:
        resolved = (path if path.is_absolute() else roots[0] / path).resolve()
    except (OSError, RuntimeError):  # a symlink loop, a name too long for the file system
        raise ApiError(400, f"{what} {given!r} cannot be resolved on the server (a symlink loop?)") from None
    if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        raise ApiError(
            403, f"{what} {given!r} is not under the server's roots; allowed: "
            + ", ".join(r.name or "/" for r in roots) + " ([server] roots in its configuration)",
            "Forbidden",
        )  # fmt: skip
    return resolved


def _is(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except OSError:  # a name longer than the file system allows, and the like
        return False


def workspace_for(options: ServerOptions, given: str | None) -> Path:
    """The folder a client named, when it lies under one of the server's roots."""
    if not given:
        return options.roots()[0]
    resolved = _under_roots(options, given, "workspace")
    if not _is(resolved.is_dir):
        raise ApiError(400, f"workspace {given!r} is not a folder on the server; create it first")
    return resolved


def _check_model(options: ServerOptions, model: str | None, workspace: Path) -> str | None:
    """The model a client asked for, a scripted one as the absolute path of its file (which
    must be a file under the roots: the worker then reads exactly what was checked)."""
    if not model:
        return None
    provider, _, name = model.partition(":")
    if provider not in (*PROVIDERS, "scripted") or not name.strip():
        raise ApiError(
            400, f"model {model!r} is not provider:model with provider one of {', '.join(PROVIDERS)}"
        )
    if provider != "scripted":
        return model
    script = _under_roots(options, str(workspace / name.strip()), "model script")
    if not _is(script.is_file):
        raise ApiError(400, f"model script {name.strip()!r} is not a file in the workspace")
    return f"scripted:{script}"


def _job_out(job: Job) -> s.Job:
    return s.Job(
        id=job.id, role=job.role, goal=job.goal, workspace=job.workspace, priority=job.priority,
        status=job.status, attempts=job.attempts, max_attempts=job.max_attempts, parent_id=job.parent_id,
        session_id=job.session_id, user=job.user_key, result=job.result, error=job.error,
        lease_owner=job.lease_owner, created_at=job.created_at, updated_at=job.updated_at,
        started_at=job.started_at, finished_at=job.finished_at,
    )  # fmt: skip


async def _pending(store: EventStore, run_id: str) -> s.Pending | None:
    last = await store.last_seq(run_id)
    tail = await store.events(run_id, after_seq=max(0, last - 2))
    if not tail or not isinstance(tail[-1], WaitingEvent):
        return None
    wait = tail[-1]
    kind = wait.kind if wait.kind in ("question", "approval", "job") else "question"
    pending = s.Pending(kind=kind, id=wait.id, question=wait.question)  # type: ignore[arg-type]
    gate = next((e for e in reversed(tail) if isinstance(e, ApprovalGateEvent)), None)
    if gate is not None and gate.id == wait.id:
        pending.tool, pending.input, pending.reason = gate.tool, gate.input, gate.reason
        pending.deadline, pending.default = gate.deadline, gate.default
    return pending


async def _run_out(state: ServerState, job: Job, row: RunRow | None = None) -> s.Run:
    row = row or await state.store.get_run(job.id)
    status: s.JobStatus = job.status
    if row is not None and status == "running" and row.status in ("done", "failed", "cancelled"):
        status = row.status  # type: ignore[assignment] # its run has ended (in one write with its done event); the job follows
    pending = await _pending(state.store, job.id) if status == "waiting" else None
    output = row.output if row is not None and status == "done" else (job.result or "")
    return s.Run(
        id=job.id, session_id=job.session_id, goal=job.goal, persona=job.role,
        model=job.model or (row.model if row else None) or None, workspace=job.workspace, mode=job.mode,
        status=status, end_status=row.end_status if row else None, output=output, error=job.error,
        attempts=job.attempts, created_at=job.created_at, updated_at=job.updated_at, pending=pending,
    )  # fmt: skip


def _session_out(row: Any) -> s.Session:
    return s.Session(
        id=row.id, title=row.title, status="open" if row.is_open else "closed", summary=row.summary,
        created_at=row.created_at, updated_at=row.updated_at,
    )  # fmt: skip


async def _job(state: ServerState, run_id: str) -> Job:
    try:
        return await state.queue.jobs.get(run_id)
    except JobError as exc:
        raise ApiError(404, str(exc)) from None


# --- routes ------------------------------------------------------------------------------------


def _routes() -> APIRouter:  # noqa: C901, PLR0915 - one place lists the whole API
    api = APIRouter(prefix="/v1", dependencies=[Depends(_authorized)])

    @api.get("/ready", response_model=s.Ready, tags=["health"])
    async def ready(state: State) -> s.Ready:
        """Ready when the store answers."""
        await state.store.last_seq("-")
        return s.Ready(status="ready", store=state.store.dialect, workers=state.options.workers)

    # sessions

    @api.post("/sessions", response_model=s.Session, status_code=201, tags=["sessions"])
    async def create_session(body: s.NewSession, state: State) -> s.Session:
        from steward.memory.session import session_store

        return _session_out(await session_store(state.store).create(body.title or "chat"))

    @api.get("/sessions", response_model=s.Sessions, tags=["sessions"])
    async def list_sessions(state: State, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> s.Sessions:
        from steward.memory.session import session_store

        return s.Sessions(sessions=[_session_out(r) for r in await session_store(state.store).list(limit)])

    @api.get("/sessions/{session_id}", response_model=s.SessionDetail, tags=["sessions"])
    async def show_session(session_id: str, state: State) -> s.SessionDetail:
        from steward.memory.session import answer_of, session_store

        sessions = session_store(state.store)
        row = await sessions.get(session_id)
        turns = [
            s.TurnOut(run_id=t.run_id, goal=t.goal, status=t.status, end_status=t.end_status,
                      answer=answer_of(t), created_at=t.created_at)
            for t in await sessions.turns(row.id)
        ]  # fmt: skip
        return s.SessionDetail(**_session_out(row).model_dump(), turns=turns)

    @api.post("/sessions/{session_id}/runs", response_model=s.Run, status_code=201, tags=["runs"])
    async def start_in_session(session_id: str, body: s.NewRun, state: State) -> s.Run:
        return await start_run(state, body, session_id)

    # runs

    @api.post("/runs", response_model=s.Run, status_code=201, tags=["runs"])
    async def create_run(body: s.NewRunInSession, state: State) -> s.Run:
        return await start_run(state, body, body.session_id)

    @api.get("/runs", response_model=s.Runs, tags=["runs"])
    async def list_runs(
        state: State, session_id: str | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 50
    ) -> s.Runs:
        rows = await state.store.runs(limit, session_id=session_id)
        out = []
        for row in rows:
            with contextlib.suppress(JobError):  # runs of the command line are not jobs: not shown
                out.append(await _run_out(state, await state.queue.jobs.get(row.id), row))
        return s.Runs(runs=out)

    @api.get("/runs/{run_id}", response_model=s.Run, tags=["runs"])
    async def show_run(run_id: str, state: State) -> s.Run:
        return await _run_out(state, await _job(state, run_id))

    @api.post("/runs/{run_id}/cancel", response_model=s.Run, tags=["runs"])
    async def cancel_run(run_id: str, state: State) -> s.Run:
        job = await state.queue.job((await _job(state, run_id)).id).cancel("cancelled over the API")
        state.hub.poke(job.id)
        return await _run_out(state, job)

    @api.post("/runs/{run_id}/approve", response_model=s.Run, tags=["approvals"])
    async def approve(run_id: str, body: s.Approve, state: State) -> s.Run:
        job = await _job(state, run_id)
        await _check_wait(state, job, body.approval_id)
        return await _queued(state, await state.queue.job(job.id).approve(wait_id=body.approval_id))

    @api.post("/runs/{run_id}/deny", response_model=s.Run, tags=["approvals"])
    async def deny(run_id: str, body: s.Deny, state: State) -> s.Run:
        job = await _job(state, run_id)
        await _check_wait(state, job, body.approval_id)
        return await _queued(state, await state.queue.job(job.id).deny(body.reason, wait_id=body.approval_id))

    @api.post("/runs/{run_id}/answer", response_model=s.Run, tags=["approvals"])
    async def answer(run_id: str, body: s.AnswerIn, state: State) -> s.Run:
        job = await _job(state, run_id)
        if not body.text.strip():
            raise ApiError(400, "the answer is empty; say what the agent should know")
        return await _queued(state, await state.queue.job(job.id).answer(body.text))

    @api.post("/runs/{run_id}/mode", response_model=s.Run, tags=["runs"])
    async def switch_mode(run_id: str, body: s.ModeIn, state: State) -> s.Run:
        job = await _job(state, run_id)
        return await _run_out(state, await state.queue.job(job.id).switch_mode(body.mode))

    @api.get(
        "/runs/{run_id}/events",
        tags=["runs"],
        response_model=None,
        responses={
            200: {
                "description": "Server-Sent Events: `id` is the event's seq, `event` its type, `data` the "
                "event as JSON (the NDJSON schema); `: ping` comments keep an idle stream open.",
                # Each message as OpenAPI describes a Server-Sent Event; `data` is the event's JSON.
                "content": {"text/event-stream": {"itemSchema": _SSE_MESSAGE}},
            }
        },
    )
    async def events(
        run_id: str,
        state: State,
        after: Annotated[
            int | None, Query(ge=0, le=MAX_SEQ, description="Send events after this seq.")
        ] = None,
        follow: Annotated[bool, Query(description="Stay open until the run ends.")] = True,
        last_event_id: Annotated[
            str | None, Header(description="Resume after this seq (set by EventSource).")
        ] = None,
    ) -> EventSourceResponse:
        """The run's events as Server-Sent Events, from ``after`` / ``Last-Event-ID`` on."""
        # Checked before the stream starts: once it has, an error can no longer be a status.
        job = await _job(state, run_id)
        seq = after or 0
        if last_event_id is not None:
            given = last_event_id.strip()  # ASCII digits only: "²".isdigit() is true, int("²") fails
            if not (given.isascii() and given.isdigit() and len(given) <= 10 and int(given) <= MAX_SEQ):
                raise ApiError(400, "Last-Event-ID is the seq of the last event received, a whole number")
            seq = max(seq, int(given))
        stream = state.hub.follow(job.id, seq, keepalive_s=state.options.settings.keepalive_s, follow=follow)
        return EventSourceResponse(stream, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # jobs

    @api.post("/jobs", response_model=s.Job, status_code=201, tags=["jobs"])
    async def submit(body: s.NewJob, state: State) -> s.Job:
        if body.user is not None and body.user.startswith("channel:"):
            raise ApiError(400, 'user keys starting "channel:" belong to the chat channels; choose another')
        workspace = workspace_for(state.options, body.workspace)
        handle = await state.queue.submit(
            body.role, body.goal, workspace=workspace, priority=body.priority,
            idempotency_key=body.idempotency_key, user=body.user, max_attempts=body.max_attempts,
            output_schema=_schema(body.output_schema),
        )  # fmt: skip
        state.poke_workers()
        return _job_out(await handle.get())

    @api.get("/jobs", response_model=s.Jobs, tags=["jobs"])
    async def list_jobs(
        state: State,
        status: Annotated[list[s.JobStatus] | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> s.Jobs:
        return s.Jobs(jobs=[_job_out(j) for j in await state.queue.list(status=status or (), limit=limit)])

    @api.get("/jobs/{job_id}", response_model=s.Job, tags=["jobs"])
    async def show_job(job_id: str, state: State) -> s.Job:
        return _job_out(await _job(state, job_id))

    @api.post("/jobs/{job_id}/cancel", response_model=s.Job, tags=["jobs"])
    async def cancel_job(job_id: str, state: State) -> s.Job:
        job = await state.queue.job((await _job(state, job_id)).id).cancel("cancelled over the API")
        state.hub.poke(job.id)
        return _job_out(job)

    @api.post("/jobs/{job_id}/retry", response_model=s.Job, tags=["jobs"])
    async def retry_job(job_id: str, state: State) -> s.Job:
        job = await state.queue.jobs.retry((await _job(state, job_id)).id)
        state.poke_workers()
        return _job_out(job)

    @api.get("/workers", response_model=s.Workers, tags=["jobs"])
    async def workers(state: State) -> s.Workers:
        held: dict[str, list[str]] = {}
        for job in await state.queue.list(status=("running",), limit=500):
            held.setdefault(job.lease_owner or "?", []).append(job.id)
        return s.Workers(workers=[s.WorkerOut(id=w, jobs=ids) for w, ids in sorted(held.items())])

    # personas

    @api.get("/personas", response_model=s.Personas, tags=["personas"])
    async def personas(state: State) -> s.Personas:
        from steward.personas import list_personas, read_persona

        home = state.options.roots()[0]
        out = []
        for name, path in sorted(list_personas(home).items()):
            with contextlib.suppress(StewardError, OSError):  # a broken file is shown by `steward personas`
                p = read_persona(path)
                tools = list(p.tools) if p.tools is not None else None
                out.append(
                    s.PersonaOut(
                        name=name, role=p.role, goal=p.goal, tools=tools, model=p.model, source=str(path.name)
                    )
                )
        return s.Personas(personas=out)

    return api


def _schema(given: dict[str, Any] | None) -> dict[str, Any] | None:
    if given is None:
        return None
    from steward.answers import check_schema

    try:
        check_schema(given)
    except StewardError as exc:
        raise ApiError(400, f"output_schema: {exc}") from None
    return given


async def _queued(state: ServerState, job: Job) -> s.Run:
    """A job queued again by a reply: this server's workers look now, and its followers read."""
    state.poke_workers()
    state.hub.poke(job.id)
    return await _run_out(state, job)


async def _check_wait(state: ServerState, job: Job, approval_id: str | None) -> None:
    if approval_id is None:
        return
    pending = await _pending(state.store, job.id)
    if pending is None or pending.id != approval_id:
        now = f"waits for {pending.id}" if pending is not None else f"is {job.status}"
        raise ApiError(
            409, f"run {job.id} {now}, not for approval {approval_id}; GET the run for what it waits for"
        )


async def start_run(state: ServerState, body: s.NewRun, session_id: str | None) -> s.Run:
    """Queue a run (a job) in a session, a new one unless ``session_id`` names one."""
    from steward.memory.session import session_store

    options = state.options
    workspace = workspace_for(options, body.workspace)
    model = _check_model(options, body.model, workspace)
    # Checked before a session is made for a run that cannot start.
    layer = None
    if body.persona:
        from steward.personas import find_persona

        layer = find_persona(body.persona, workspace).layer()
    if model is None:
        from steward.config import load_config

        if not load_config(workspace, persona=layer).model:
            raise ApiError(
                400, f'no model is configured for workspace {workspace.name!r}: send "model" '
                '(e.g. "openai:gpt-4o-mini"), choose a persona that names one, or set model in its '
                "steward.toml (or STEWARD_MODEL where the server runs)",
            )  # fmt: skip
    sessions = session_store(state.store)
    session = await sessions.get(session_id) if session_id else await sessions.create(body.goal[:60])
    if not session.is_open:
        raise ApiError(409, f"session {session.id} is closed; start a run in a new session")
    handle = await state.queue.submit(
        body.persona, body.goal, workspace=workspace, priority=body.priority,
        output_schema=_schema(body.output_schema), session_id=session.id, model=model, mode=body.mode,
    )  # fmt: skip
    job = await handle.get()
    await sessions.touch(session.id)
    state.poke_workers()
    return await _run_out(state, job)


# --- the application ----------------------------------------------------------------------------


def create_app(options: ServerOptions) -> FastAPI:
    """The server's ASGI application. Nothing is opened until it starts (its lifespan)."""
    from steward.server.channels import channels_router, watch_channels

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from steward.jobs.worker import Worker, WorkerSettings
        from steward.store.events import open_store

        store = await open_store(options.store_url)
        hub = EventHub(store, poll_s=options.settings.poll_s)
        state = app.state.steward = ServerState(options, store, Queue(store), hub)
        stop, now = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(hub.run(stop), name="steward-hub")]
        tasks.append(asyncio.create_task(watch_channels(app, stop), name="steward-channels"))
        if options.workers > 0:
            pool = Worker(store, WorkerSettings(roles=options.worker_roles, concurrency=options.workers))
            state.poke_workers = pool.poke
            tasks.append(asyncio.create_task(_worker_pool(pool, stop, now), name="steward-workers"))
        try:
            yield
        finally:
            # Runs go back to the queue at their next step (a few seconds at most), then at once.
            stop.set()
            await asyncio.wait(tasks, timeout=DRAIN_S)
            now.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=10)
            await store.close()

    app = FastAPI(
        title="Steward",
        version="1",
        summary="Sessions, live runs, approvals and jobs of a Steward deployment.",
        lifespan=lifespan,
        docs_url=None,  # served below from files in the package, not from a CDN: it works offline
        openapi_url="/openapi.json",
        redoc_url=None,
    )
    _install_error_handlers(app)

    @app.get("/v1/health", response_model=s.Health, tags=["health"])
    async def health() -> s.Health:
        """Alive (no token needed)."""
        return s.Health(status="ok")

    app.include_router(_routes(), responses=_ERRORS)
    app.include_router(channels_router())
    _page_routes(app)
    _docs_routes(app)
    if options.settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware, allow_origins=options.settings.cors_origins, allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )  # fmt: skip
    app.add_middleware(BodyLimit, limit=options.settings.max_body_kb * 1024)
    return app


def _page_routes(app: FastAPI) -> None:
    files = {p.name: p for p in PAGE.glob("*") if p.is_file()} if PAGE.is_dir() else {}

    @app.get("/", include_in_schema=False, response_model=None)
    async def index() -> FileResponse | RedirectResponse:
        if "index.html" not in files:
            return RedirectResponse("/docs")
        return FileResponse(files["index.html"], headers=_PAGE_HEADERS)

    @app.get("/page/{name}", include_in_schema=False)
    async def page_file(name: str) -> FileResponse:
        found = files.get(name)  # only the package's own files, by name: no path from the client
        if found is None:
            raise ApiError(404, f"no page file {name!r}")
        return FileResponse(found, headers=_PAGE_HEADERS)


def _docs_routes(app: FastAPI) -> None:
    """Swagger UI at /docs, from the files the fastapi-offline package ships (no CDN)."""
    import fastapi_offline
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse

    static = Path(fastapi_offline.__file__).parent / "static"
    files = {p.name: p for p in static.glob("*") if p.is_file()}

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title="Steward API",
            swagger_js_url="/docs/static/swagger-ui-bundle.js", swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon.png",
        )  # fmt: skip

    @app.get("/docs/static/{name}", include_in_schema=False)
    async def docs_file(name: str) -> FileResponse:
        found = files.get(name)
        if found is None:
            raise ApiError(404, f"no docs file {name!r}")
        return FileResponse(found, headers={"Cache-Control": "max-age=86400"})


# The page runs no script but its own and talks only to this server.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def _worker_pool(pool: Worker, stop: asyncio.Event, now: asyncio.Event) -> None:
    try:
        await pool.run(stop, now)
    except Exception:  # the API goes on; the log says why the pool stopped
        log.exception("the server's worker pool stopped")
