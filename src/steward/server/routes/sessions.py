"""Sessions: a user's conversation with an agent, one turn per run."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from steward.server import schemas as s
from steward.server.errors import ERRORS
from steward.server.runs import start_run
from steward.server.state import Authorized, State

router = APIRouter(prefix="/v1", dependencies=[Authorized], responses=ERRORS)


def session_out(row: Any) -> s.Session:
    return s.Session(
        id=row.id, title=row.title, status="open" if row.is_open else "closed", summary=row.summary,
        created_at=row.created_at, updated_at=row.updated_at,
    )  # fmt: skip


@router.post("/sessions", response_model=s.Session, status_code=201, tags=["sessions"])
async def create_session(body: s.NewSession, state: State) -> s.Session:
    from steward.memory.session import session_store

    return session_out(await session_store(state.store).create(body.title or "chat"))


@router.get("/sessions", response_model=s.Sessions, tags=["sessions"])
async def list_sessions(state: State, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> s.Sessions:
    from steward.memory.session import session_store

    return s.Sessions(sessions=[session_out(r) for r in await session_store(state.store).list(limit)])


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
    return s.SessionDetail(**session_out(row).model_dump(), turns=turns)


@router.post("/sessions/{session_id}/runs", response_model=s.Run, status_code=201, tags=["runs"])
async def start_in_session(session_id: str, body: s.NewRun, state: State) -> s.Run:
    return await start_run(state, body, session_id)
