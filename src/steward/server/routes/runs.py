"""Runs: start, list, show, cancel, reply to what they wait for, switch mode, follow live."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.sse import EventSourceResponse
from pydantic import BaseModel, Field

from steward.jobs.store import JobError
from steward.server import schemas as s
from steward.server.errors import ERRORS, ApiError
from steward.server.runs import check_wait, find_job, queued, run_out, start_run
from steward.server.state import Authorized, State

router = APIRouter(prefix="/v1", dependencies=[Authorized], responses=ERRORS)

MAX_SEQ = 2**31 - 1  # the store's seq column is a 32-bit INTEGER on PostgreSQL; larger fails the query
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


@router.post("/runs", response_model=s.Run, status_code=201, tags=["runs"])
async def create_run(body: s.NewRunInSession, state: State) -> s.Run:
    return await start_run(state, body, body.session_id)


@router.get("/runs", response_model=s.Runs, tags=["runs"])
async def list_runs(
    state: State, session_id: str | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> s.Runs:
    rows = await state.store.runs(limit, session_id=session_id)
    out = []
    for row in rows:
        with contextlib.suppress(JobError):  # runs of the command line are not jobs: not shown
            out.append(await run_out(state, await state.queue.jobs.get(row.id), row))
    return s.Runs(runs=out)


@router.get("/runs/{run_id}", response_model=s.Run, tags=["runs"])
async def show_run(run_id: str, state: State) -> s.Run:
    return await run_out(state, await find_job(state, run_id))


@router.post("/runs/{run_id}/cancel", response_model=s.Run, tags=["runs"])
async def cancel_run(run_id: str, state: State) -> s.Run:
    job = await state.queue.job((await find_job(state, run_id)).id).cancel("cancelled over the API")
    state.hub.poke(job.id)
    return await run_out(state, job)


@router.post("/runs/{run_id}/approve", response_model=s.Run, tags=["approvals"])
async def approve(run_id: str, body: s.Approve, state: State) -> s.Run:
    job = await find_job(state, run_id)
    await check_wait(state, job, body.approval_id)
    return await queued(state, await state.queue.job(job.id).approve(wait_id=body.approval_id))


@router.post("/runs/{run_id}/deny", response_model=s.Run, tags=["approvals"])
async def deny(run_id: str, body: s.Deny, state: State) -> s.Run:
    job = await find_job(state, run_id)
    await check_wait(state, job, body.approval_id)
    return await queued(state, await state.queue.job(job.id).deny(body.reason, wait_id=body.approval_id))


@router.post("/runs/{run_id}/answer", response_model=s.Run, tags=["approvals"])
async def answer(run_id: str, body: s.AnswerIn, state: State) -> s.Run:
    job = await find_job(state, run_id)
    if not body.text.strip():
        raise ApiError(400, "the answer is empty; say what the agent should know")
    return await queued(state, await state.queue.job(job.id).answer(body.text))


@router.post("/runs/{run_id}/mode", response_model=s.Run, tags=["runs"])
async def switch_mode(run_id: str, body: s.ModeIn, state: State) -> s.Run:
    job = await find_job(state, run_id)
    return await run_out(state, await state.queue.job(job.id).switch_mode(body.mode))


@router.get(
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
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description="Send events after this seq.")] = None,
    follow: Annotated[bool, Query(description="Stay open until the run ends.")] = True,
    last_event_id: Annotated[
        str | None, Header(description="Resume after this seq (set by EventSource).")
    ] = None,
) -> EventSourceResponse:
    """The run's events as Server-Sent Events, from ``after`` / ``Last-Event-ID`` on."""
    # Checked before the stream starts: once it has, an error can no longer be a status.
    job = await find_job(state, run_id)
    seq = after or 0
    if last_event_id is not None:
        given = last_event_id.strip()  # ASCII digits only: "²".isdigit() is true, int("²") fails
        if not (given.isascii() and given.isdigit() and len(given) <= 10 and int(given) <= MAX_SEQ):
            raise ApiError(400, "Last-Event-ID is the seq of the last event received, a whole number")
        seq = max(seq, int(given))
    stream = state.hub.follow(job.id, seq, keepalive_s=state.options.settings.keepalive_s, follow=follow)
    return EventSourceResponse(stream, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


class GraphNode(BaseModel):
    id: str = Field(description="run:ID, task:RUN/N, file:PATH or memory:ID.")
    kind: str = Field(description="run, task, file or memory.")
    label: str
    status: str | None = Field(None, description="A run's or a sub-task's status; null for files and memory.")
    data: dict[str, Any] = Field(default_factory=dict)


class GraphEdge(BaseModel):
    source: str
    target: str
    kind: str = Field(description="plans, depends_on, child_job, subtask_of, touched, read or remembered.")
    data: dict[str, Any] = Field(default_factory=dict)


class RunGraph(BaseModel):
    root: str = Field(description="The run asked about (run:ID).")
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    truncated: bool = Field(description="True when a bound (files, memory items, child runs) cut something.")


@router.get("/runs/{run_id}/graph", response_model=RunGraph, tags=["runs"])
async def run_graph(
    run_id: str,
    state: State,
    depth: Annotated[int, Query(ge=0, le=3, description="Levels of child jobs to include.")] = 2,
) -> RunGraph:
    """How the run relates to its plan's sub-tasks, child jobs, the files it read or changed and
    the memory items it wrote (``steward runs graph``); derived from the store's records."""
    from steward.memory.graph import graph_for_run

    job = await find_job(state, run_id)
    return RunGraph.model_validate((await graph_for_run(state.store.engine, job.id, depth=depth)).as_dict())


class SpentLine(BaseModel):
    name: str = Field(description="The phase (plan, act, verify...) or the tool.")
    count: int = Field(description="Steps in that phase, or calls of that tool.")
    tokens: int
    cost_usd: float | None = Field(description="US dollars; null when the model has no known price.")
    time_s: float


class BudgetLine(BaseModel):
    scope: str = Field(description="run:ID (a run and the jobs it delegated), tree:ROOT or session:ID.")
    limits: dict[str, float] = Field(description="tokens, cost_usd, time_s, tool_calls (0: no limit).")
    spent: dict[str, float]


class RunSpent(BaseModel):
    model: str
    tokens: int
    usage: dict[str, int]
    cost_usd: float | None
    time_s: float
    tool_calls: int
    phases: list[SpentLine]
    tools: list[SpentLine]
    budgets: list[BudgetLine] = Field(description="The budgets the run counts against, as they stand.")


@router.get("/runs/{run_id}/spent", response_model=RunSpent, tags=["runs"])
async def run_spent(run_id: str, state: State) -> RunSpent:
    """What the run spent: tokens, money and time in all, per phase and per tool, and the
    budgets (``[budget]``) it counts against."""
    from pathlib import Path

    from steward.budget.ledger import Ledger
    from steward.budget.report import run_cost
    from steward.config import load_config
    from steward.errors import ConfigError

    job = await find_job(state, run_id)
    try:
        prices = load_config(Path(job.workspace)).prices
    except ConfigError:  # the run is still worth showing: table prices only
        prices = {}
    cost = run_cost(await state.store.events(job.id), prices)
    ledger = Ledger(state.store.engine)
    budgets = [
        BudgetLine(scope=s.id, limits=_dims(s.limits), spent=_dims(s.spent))
        for s in await ledger.states(await ledger.scopes_charged(job.id))
    ]
    return RunSpent.model_validate({**cost.as_dict(), "budgets": budgets})


def _dims(value: Any) -> dict[str, float]:
    return {d: float(getattr(value, d)) for d in ("tokens", "cost_usd", "time_s", "tool_calls")}
