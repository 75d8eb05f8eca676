"""The shapes of the HTTP API's requests and replies (they are the OpenAPI document at /docs)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Mode = Literal["structured", "autonomous"]
JobStatus = Literal["queued", "running", "waiting", "done", "failed", "cancelled", "dead"]

_GOAL = Field(min_length=1, max_length=20_000, description="What the agent should achieve.")
_NAME = r"^[A-Za-z0-9_.-]{1,64}$"


def _no_nul(value: Any, depth: int = 0) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("text may not contain NUL characters (\\u0000)")
    elif isinstance(value, dict) and depth < 32:
        for key, item in value.items():
            _no_nul(key, depth + 1)
            _no_nul(item, depth + 1)
    elif isinstance(value, list) and depth < 32:
        for item in value:
            _no_nul(item, depth + 1)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error that names it

    @model_validator(mode="before")
    @classmethod
    def _text_without_nul(cls, data: Any) -> Any:
        # Neither store keeps a NUL in text (PostgreSQL refuses it): refused here, by name.
        _no_nul(data)
        return data


class Problem(BaseModel):
    """An error (RFC 9457 problem details): ``detail`` says what to fix."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    store: str
    workers: int = Field(description="Worker slots this server runs (0: an API node in front of a fleet).")


class NewSession(_Body):
    title: str = Field("", max_length=200)


class LastRun(BaseModel):
    """The newest run of a session, as it stands now."""

    id: str
    goal: str
    status: str = Field(description="queued, running, waiting, done, failed, cancelled or dead.")
    end_status: str | None = Field(description="solved, answered, partial or stuck, once it is done.")
    created_at: float


class Session(BaseModel):
    id: str
    title: str
    status: Literal["open", "closed"] = Field(description="Closed: no more runs in it.")
    summary: str
    created_at: float
    updated_at: float
    last_run: LastRun | None = Field(None, description="Its newest run; none before the first.")


class TurnOut(BaseModel):
    run_id: str
    goal: str
    status: str
    end_status: str | None
    answer: str
    created_at: float


class SessionDetail(Session):
    turns: list[TurnOut]


class Sessions(BaseModel):
    sessions: list[Session]
    next: str | None = Field(
        None, description="More, older sessions: send this as `before` for the next page; none at the end."
    )


class NewRun(_Body):
    goal: str = _GOAL
    persona: str = Field("", pattern=r"^([A-Za-z0-9_.-]{1,64})?$", description="Empty: no persona.")
    model: str | None = Field(None, max_length=300, description="provider:model; default: the persona's.")
    workspace: str | None = Field(
        None,
        max_length=4096,
        description="A folder under one of the server's roots; default: its first root.",
    )
    mode: Mode | None = Field(None, description="Policy mode of the run; default: as configured.")
    output_schema: dict[str, Any] | None = Field(None, description="A JSON Schema the answer must match.")
    priority: int = Field(0, ge=-1000, le=1000)


class NewRunInSession(NewRun):
    session_id: str | None = Field(None, max_length=64, description="Default: a new session.")


class Pending(BaseModel):
    kind: Literal["question", "approval", "job"]
    id: str
    question: str
    tool: str | None = None
    input: dict[str, Any] | None = None
    reason: str | None = None
    deadline: float | None = None
    default: str | None = None


class Run(BaseModel):
    id: str
    session_id: str | None
    goal: str
    persona: str
    model: str | None
    workspace: str
    mode: str | None
    status: JobStatus
    end_status: str | None
    output: str
    error: str | None
    attempts: int
    created_at: float
    updated_at: float
    pending: Pending | None


class Runs(BaseModel):
    runs: list[Run]


class Approve(_Body):
    approval_id: str | None = Field(None, max_length=100)


class Deny(_Body):
    reason: str = Field("", max_length=4000)
    approval_id: str | None = Field(None, max_length=100)


class AnswerIn(_Body):
    text: str = Field(min_length=1, max_length=20_000)


class ModeIn(_Body):
    mode: Mode


class NewJob(_Body):
    role: str = Field("", pattern=r"^([A-Za-z0-9_.-]{1,64})?$", description="The persona; empty: none.")
    goal: str = _GOAL
    workspace: str | None = Field(None, max_length=4096)
    priority: int = Field(0, ge=-1000, le=1000)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    user: str | None = Field(
        None, min_length=1, max_length=200, description="At most one active job per user."
    )
    max_attempts: int = Field(3, ge=1, le=100)
    output_schema: dict[str, Any] | None = None


class Job(BaseModel):
    id: str
    role: str
    goal: str
    workspace: str
    priority: int
    status: JobStatus
    attempts: int
    max_attempts: int
    parent_id: str | None
    session_id: str | None
    user: str | None
    result: str | None
    error: str | None
    lease_owner: str | None
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None


class Jobs(BaseModel):
    jobs: list[Job]
    next: str | None = Field(
        None, description="More, older jobs: send this as `before` for the next page; none at the end."
    )


class WorkerOut(BaseModel):
    id: str
    jobs: list[str]


class Workers(BaseModel):
    workers: list[WorkerOut]


class PersonaOut(BaseModel):
    name: str
    role: str
    goal: str
    tools: list[str] | None
    model: str | None
    source: str


class Personas(BaseModel):
    personas: list[PersonaOut]


# ---- long-term memory (steward.memory.longterm), the operator's view


class MemoryScope(BaseModel):
    """Whose memory an item is: one user, one persona ("" for none), one workspace."""

    user: str
    persona: str
    workspace: str = Field(description="The workspace's resolved path on the server.")


class MemoryItem(BaseModel):
    id: int
    scope: MemoryScope
    kind: str = Field(description='"fact" (remembered), "session_summary", "turns" (archived), ...')
    text: str
    tags: list[str]
    run_id: str | None
    session_id: str | None
    created_at: float
    updated_at: float
    expires_at: float | None = Field(description="After this it is never recalled; none: it lives on.")
    hidden_at: float | None = Field(description="Hidden (forgotten, kept): never recalled; none: visible.")
    merged: int = Field(description="Writes folded into it: 1 when written once.")


class MemoryItems(BaseModel):
    items: list[MemoryItem]
    next: int | None = Field(
        None, description="More, older items: send this as `before` for the next page; none at the end."
    )


class MemoryExplain(BaseModel):
    """Why an item came back: its place in each list and the score that fused them."""

    keyword_rank: int | None = Field(description="1-based rank by words (BM25); none: not in that list.")
    vector_rank: int | None = Field(description="1-based rank by meaning; none: not in it, or no embedder.")
    score: float = Field(description="The reciprocal-rank-fusion score the items are ordered by.")
    similarity: float | None = Field(description="Cosine with the query, when vectors were compared.")


class MemoryHit(BaseModel):
    item: MemoryItem
    explain: MemoryExplain | None = Field(None, description="With explain=true only.")


class MemorySearch(BaseModel):
    query: str
    scope: MemoryScope
    mode: Literal["keyword", "hybrid"] = Field(
        description="keyword: no [memory] embedder, recall by words only; hybrid: by words and meaning."
    )
    vector_backend: str = Field(description="none, numpy, pgvector or sqlite-vec.")
    hits: list[MemoryHit]


class MemoryForgotten(BaseModel):
    id: int
    purged: bool = Field(description="true: deleted for good; false: hidden (kept, never recalled).")
    item: MemoryItem | None = Field(None, description="The hidden item; none once purged.")
