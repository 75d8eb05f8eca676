"""Health, readiness and the personas a client may name."""

from __future__ import annotations

import contextlib

from fastapi import APIRouter

from steward.errors import StewardError
from steward.server import schemas as s
from steward.server.errors import ERRORS
from steward.server.state import Authorized, State

status = APIRouter(prefix="/v1", tags=["health"])
router = APIRouter(prefix="/v1", dependencies=[Authorized], responses=ERRORS)


@status.get("/health", response_model=s.Health)
async def health() -> s.Health:
    """Alive (no token needed)."""
    return s.Health(status="ok")


@status.get("/ready", response_model=s.Ready, dependencies=[Authorized], responses=ERRORS)
async def ready(state: State) -> s.Ready:
    """Ready when the store answers."""
    await state.store.last_seq("-")
    return s.Ready(status="ready", store=state.store.dialect, workers=state.options.workers)


@router.get("/personas", response_model=s.Personas, tags=["personas"])
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
