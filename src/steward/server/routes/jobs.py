"""Jobs of the queue (a run started over the API is one too) and the workers holding them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from steward.jobs.store import Job, JobError
from steward.server import schemas as s
from steward.server.errors import ERRORS, ApiError
from steward.server.roots import workspace_for
from steward.server.runs import checked_schema, find_job
from steward.server.state import Authorized, State

router = APIRouter(prefix="/v1", dependencies=[Authorized], responses=ERRORS, tags=["jobs"])


def job_out(job: Job) -> s.Job:
    return s.Job(
        id=job.id, role=job.role, goal=job.goal, workspace=job.workspace, priority=job.priority,
        status=job.status, attempts=job.attempts, max_attempts=job.max_attempts, parent_id=job.parent_id,
        session_id=job.session_id, user=job.user_key, result=job.result, error=job.error,
        lease_owner=job.lease_owner, created_at=job.created_at, updated_at=job.updated_at,
        started_at=job.started_at, finished_at=job.finished_at,
    )  # fmt: skip


@router.post("/jobs", response_model=s.Job, status_code=201)
async def submit(body: s.NewJob, state: State) -> s.Job:
    if body.user is not None and body.user.startswith("channel:"):
        raise ApiError(400, 'user keys starting "channel:" belong to the chat channels; choose another')
    workspace = workspace_for(state.options, body.workspace)
    handle = await state.queue.submit(
        body.role, body.goal, workspace=workspace, priority=body.priority,
        idempotency_key=body.idempotency_key, user=body.user, max_attempts=body.max_attempts,
        output_schema=checked_schema(body.output_schema),
    )  # fmt: skip
    state.poke_workers()
    return job_out(await handle.get())


@router.get("/jobs", response_model=s.Jobs)
async def list_jobs(
    state: State,
    status: Annotated[list[s.JobStatus] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[
        str | None, Query(max_length=64, description="The `next` of the page before: older jobs.")
    ] = None,
) -> s.Jobs:
    """Jobs, newest first, a page at a time."""
    after = None
    if before is not None:
        try:
            after = await state.queue.jobs.get(before)
        except JobError:
            raise ApiError(400, f"before: no job {before!r}; send the `next` of the page before") from None
    found = await state.queue.list(status=status or (), limit=limit + 1, before=after)
    page = found[:limit]
    return s.Jobs(jobs=[job_out(j) for j in page], next=page[-1].id if len(found) > limit else None)


@router.get("/jobs/{job_id}", response_model=s.Job)
async def show_job(job_id: str, state: State) -> s.Job:
    return job_out(await find_job(state, job_id))


@router.post("/jobs/{job_id}/cancel", response_model=s.Job)
async def cancel_job(job_id: str, state: State) -> s.Job:
    job = await state.queue.job((await find_job(state, job_id)).id).cancel("cancelled over the API")
    state.hub.poke(job.id)
    return job_out(job)


@router.post("/jobs/{job_id}/retry", response_model=s.Job)
async def retry_job(job_id: str, state: State) -> s.Job:
    job = await state.queue.jobs.retry((await find_job(state, job_id)).id)
    state.poke_workers()
    return job_out(job)


@router.get("/workers", response_model=s.Workers)
async def workers(state: State) -> s.Workers:
    held: dict[str, list[str]] = {}
    for job in await state.queue.list(status=("running",), limit=500):
        held.setdefault(job.lease_owner or "?", []).append(job.id)
    return s.Workers(workers=[s.WorkerOut(id=w, jobs=ids) for w, ids in sorted(held.items())])
