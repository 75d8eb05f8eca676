"""Notes, tasks and continuations over the API (issue 23).

``GET /v1/notes`` lists notes newest first (a workspace named must lie under the server's roots,
as a run's must; without one, every workspace's: the operator's view, as for memory);
``DELETE /v1/notes/{id}`` removes one. ``GET /v1/runs/{id}/work`` is what one run kept beside
its plan: its task list (from its log), the notes it left, and each "are you done?" it was asked.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from steward.errors import ToolError
from steward.server.errors import ERRORS, ApiError
from steward.server.roots import under_roots
from steward.server.runs import find_job
from steward.server.state import Authorized, State

router = APIRouter(prefix="/v1", dependencies=[Authorized], responses=ERRORS, tags=["notes"])

MAX_ID = 2**31 - 1  # ids are a 32-bit INTEGER on PostgreSQL: a larger one is no note, not an error


class NoteOut(BaseModel):
    id: int
    workspace: str = Field(description="The resolved folder the note belongs to.")
    about: str = Field(
        description="file:PATH (relative to the workspace) or run:ID (a job's id is its run's)."
    )
    text: str
    run_id: str | None = Field(description="The run that wrote it; null: a person.")
    persona: str
    created_at: float


class Notes(BaseModel):
    notes: list[NoteOut]


class TaskOut(BaseModel):
    id: int
    text: str
    done: bool


class ContinuationOut(BaseModel):
    seq: int
    number: int
    asked: bool = Field(description="True: asked whether it was done, and it went on; false: the bound.")
    reasons: list[str]
    verifier_exit: int | None


class RunWork(BaseModel):
    tasks: list[TaskOut]
    notes: list[NoteOut] = Field(description="The notes the run left, newest first.")
    continuations: list[ContinuationOut]


@router.get("/notes", response_model=Notes)
async def list_notes(
    state: State,
    workspace: Annotated[
        str | None, Query(max_length=4096, description="A folder under the server's roots.")
    ] = None,
    about: Annotated[str | None, Query(max_length=4096, description="file:PATH, job:ID or run:ID.")] = None,
    run_id: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Notes:
    from steward.memory.notes import NoteStore, about_key

    folder = under_roots(state.options, workspace, "workspace") if workspace is not None else None
    wanted = None
    if about is not None:
        if folder is None:
            raise ApiError(400, "about needs a workspace: a file path is relative to one")
        try:
            wanted = [about_key(about, folder)]
        except ToolError as exc:
            raise ApiError(400, str(exc)) from None
    found = await NoteStore(state.store.engine).list(
        workspace=str(folder) if folder is not None else None, about=wanted, run_id=run_id, limit=limit
    )
    return Notes(notes=[NoteOut.model_validate(n.as_dict()) for n in found])


@router.delete("/notes/{note_id}", response_model=dict[str, bool])
async def remove_note(note_id: Annotated[int, Path(ge=1, le=MAX_ID)], state: State) -> dict[str, bool]:
    from steward.memory.notes import NoteStore

    if not await NoteStore(state.store.engine).remove(note_id):
        raise ApiError(404, f"no note {note_id}", "Not Found")
    return {"removed": True}


@router.get("/runs/{run_id}/work", response_model=RunWork, tags=["runs"])
async def run_work(run_id: str, state: State) -> RunWork:
    """The run's task list, the notes it left and the continuations it was asked."""
    from steward.events import ContinuationEvent
    from steward.memory.notes import NoteStore
    from steward.memory.tasks import tasks_from_events

    job = await find_job(state, run_id)
    events = await state.store.events(job.id)
    written = await NoteStore(state.store.engine).list(run_id=job.id)
    asked: list[dict[str, Any]] = [
        {
            "seq": e.seq,
            "number": e.number,
            "asked": e.asked,
            "reasons": e.reasons,
            "verifier_exit": e.verifier_exit,
        }
        for e in events
        if isinstance(e, ContinuationEvent)
    ]
    return RunWork(
        tasks=[TaskOut.model_validate(t) for t in tasks_from_events(events).as_dicts()],
        notes=[NoteOut.model_validate(n.as_dict()) for n in written],
        continuations=[ContinuationOut.model_validate(c) for c in asked],
    )
