"""Sessions: a user's conversation with an agent, one turn per run."""

from __future__ import annotations

from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query

from steward.server import schemas as s
from steward.server.errors import ERRORS, ApiError
from steward.server.runs import start_run
from steward.server.state import Authorized, ServerState, State
from steward.store.schema import jobs as jobs_table
from steward.store.schema import runs as runs_table
from steward.store.schema import sessions as sessions_table

router = APIRouter(prefix="/v1", dependencies=[Authorized], responses=ERRORS)


def session_out(row: Any, last_run: s.LastRun | None = None) -> s.Session:
    return s.Session(
        id=row.id, title=row.title, status="open" if row.is_open else "closed", summary=row.summary,
        created_at=row.created_at, updated_at=row.updated_at, last_run=last_run,
    )  # fmt: skip


async def last_runs(state: ServerState, session_ids: list[str]) -> dict[str, s.LastRun]:
    """Each session's newest run, in one query: its job's status where it is a job (the API's
    runs are), with its run's end once the run has ended."""
    if not session_ids:
        return {}
    r, j = runs_table, jobs_table
    newest = sa.func.row_number().over(
        partition_by=r.c.session_id, order_by=(r.c.created_at.desc(), r.c.id.desc())
    )
    ranked = (
        sa.select(r.c.id, r.c.session_id, r.c.goal, r.c.status, r.c.end_status, r.c.created_at,
                  j.c.status.label("job_status"), newest.label("n"))
        .join(j, j.c.id == r.c.id, isouter=True)
        .where(r.c.session_id.in_(session_ids))
        .subquery()
    )  # fmt: skip
    async with state.store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(ranked).where(ranked.c.n == 1))).mappings().all()
    out = {}
    for row in rows:
        status = row["job_status"] or row["status"]
        if status == "running" and row["status"] in ("done", "failed", "cancelled"):
            status = row["status"]  # its run has ended; its job is being settled
        out[row["session_id"]] = s.LastRun(
            id=row["id"], goal=row["goal"], status=status, end_status=row["end_status"],
            created_at=row["created_at"],
        )  # fmt: skip
    return out


async def _sessions_page(state: ServerState, limit: int, before: str | None) -> tuple[list[Any], bool]:
    """Up to ``limit`` sessions, newest first, older than the session ``before``; and whether
    there are more."""
    from steward.memory.session_store import SessionRow

    t = sessions_table
    query = sa.select(t).order_by(t.c.created_at.desc(), t.c.id.desc()).limit(limit + 1)
    async with state.store.engine.connect() as conn:
        if before is not None:
            anchor = (
                await conn.execute(sa.select(t.c.created_at).where(t.c.id == before))
            ).scalar_one_or_none()
            if anchor is None:
                raise ApiError(400, f"before: no session {before!r}; send the `next` of the page before")
            older = sa.or_(t.c.created_at < anchor, sa.and_(t.c.created_at == anchor, t.c.id < before))
            query = query.where(older)
        rows = (await conn.execute(query)).mappings().all()
    return [SessionRow(**row) for row in rows[:limit]], len(rows) > limit


@router.post("/sessions", response_model=s.Session, status_code=201, tags=["sessions"])
async def create_session(body: s.NewSession, state: State) -> s.Session:
    from steward.memory.session import session_store

    return session_out(await session_store(state.store).create(body.title or "chat"))


@router.get("/sessions", response_model=s.Sessions, tags=["sessions"])
async def list_sessions(
    state: State,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[
        str | None, Query(max_length=64, description="The `next` of the page before: older sessions.")
    ] = None,
) -> s.Sessions:
    """Sessions, newest first, each with its newest run; a page at a time."""
    rows, more = await _sessions_page(state, limit, before)
    runs = await last_runs(state, [r.id for r in rows])
    return s.Sessions(
        sessions=[session_out(r, runs.get(r.id)) for r in rows], next=rows[-1].id if more else None
    )


@router.get("/sessions/{session_id}", response_model=s.SessionDetail, tags=["sessions"])
async def show_session(session_id: str, state: State) -> s.SessionDetail:
    from steward.memory.session import answer_of, session_store

    sessions = session_store(state.store)
    row = await sessions.get(session_id)
    turns = [
        s.TurnOut(run_id=t.run_id, goal=t.goal, status=t.status, end_status=t.end_status,
                  answer=answer_of(t), created_at=t.created_at)
        for t in await sessions.turns(row.id)
    ]  # fmt: skip
    last = (await last_runs(state, [row.id])).get(row.id)
    return s.SessionDetail(**session_out(row, last).model_dump(), turns=turns)


@router.post("/sessions/{session_id}/runs", response_model=s.Run, status_code=201, tags=["runs"])
async def start_in_session(session_id: str, body: s.NewRun, state: State) -> s.Run:
    return await start_run(state, body, session_id)
