"""Runs as the API shows and starts them: a run is a job of the queue, seen with its run's row
and what its log says it waits for."""

from __future__ import annotations

from typing import Any

from steward.errors import StewardError
from steward.events import ApprovalGateEvent, WaitingEvent
from steward.jobs.store import Job, JobError
from steward.server import schemas as s
from steward.server.errors import ApiError
from steward.server.roots import check_model, workspace_for
from steward.server.state import ServerState
from steward.store.events import EventStore, RunRow


async def find_job(state: ServerState, job_id: str) -> Job:
    """The job (or run) ``job_id``; a 404 when there is none."""
    try:
        return await state.queue.jobs.get(job_id)
    except JobError as exc:
        raise ApiError(404, str(exc)) from None


async def pending_of(store: EventStore, run_id: str) -> s.Pending | None:
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


async def run_out(state: ServerState, job: Job, row: RunRow | None = None) -> s.Run:
    row = row or await state.store.get_run(job.id)
    status: s.JobStatus = job.status
    if row is not None and status == "running" and row.status in ("done", "failed", "cancelled"):
        status = row.status  # type: ignore[assignment] # its run has ended (in one write with its done event); the job follows
    pending = await pending_of(state.store, job.id) if status == "waiting" else None
    output = row.output if row is not None and status == "done" else (job.result or "")
    return s.Run(
        id=job.id, session_id=job.session_id, goal=job.goal, persona=job.role,
        model=job.model or (row.model if row else None) or None, workspace=job.workspace, mode=job.mode,
        status=status, end_status=row.end_status if row else None, output=output, error=job.error,
        attempts=job.attempts, created_at=job.created_at, updated_at=job.updated_at, pending=pending,
    )  # fmt: skip


def checked_schema(given: dict[str, Any] | None) -> dict[str, Any] | None:
    """``given`` when it is a JSON Schema that can be applied (a 400 that says why otherwise):
    tried on a few answers now, so a ``$ref`` that loops fails the request, not the run's end."""
    if given is None:
        return None
    from steward.answers import check_answer, check_schema

    try:
        check_schema(given)
        for sample in ("null", "{}", "[]", '""', "0"):
            check_answer(sample, given)
    except StewardError as exc:
        raise ApiError(400, f"output_schema: {exc}") from None
    return given


async def queued(state: ServerState, job: Job) -> s.Run:
    """A job queued again by a reply: this server's workers look now, and its followers read."""
    state.poke_workers()
    state.hub.poke(job.id)
    return await run_out(state, job)


async def check_wait(state: ServerState, job: Job, approval_id: str | None) -> None:
    if approval_id is None:
        return
    pending = await pending_of(state.store, job.id)
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
    model = check_model(options, body.model, workspace)
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
        output_schema=checked_schema(body.output_schema), session_id=session.id, model=model,
        mode=body.mode,
    )  # fmt: skip
    job = await handle.get()
    await sessions.touch(session.id)
    state.poke_workers()
    return await run_out(state, job)
