"""Long-term memory, inspected and forgotten over the API: list, search (with ``explain``), show,
hide or purge, export.

Every token of a server is its operator's today (``steward serve --new-token`` makes no lesser
kind), so the list and the export may span every scope, and an item is shown or forgotten by id
whoever's it is. Search, which is what a run does, always has one scope: ``user`` is "local"
unless given, ``persona`` "" and ``workspace`` the server's first root; its queries filter that
scope in SQL, as a run's recall does. A workspace named here must lie under the server's roots,
as a run's must.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import StreamingResponse

from steward.errors import StewardError
from steward.server import schemas as s
from steward.server.errors import ERRORS, ApiError
from steward.server.roots import under_roots
from steward.server.state import Authorized, ServerState, State
from steward.store.schema import memory_items

if TYPE_CHECKING:
    from steward.embed.base import Embedder
    from steward.memory.longterm import Found, LongTermMemory, MemoryItem, Scope

router = APIRouter(prefix="/v1", dependencies=[Authorized], responses=ERRORS, tags=["memory"])

MAX_ID = 2**31 - 1  # ids are a 32-bit INTEGER on PostgreSQL: a larger one is no item, not an error
EXPORT_PAGE = 500
_PERSONA = r"^([A-Za-z0-9_.-]{1,64})?$"

User = Annotated[str | None, Query(min_length=1, max_length=200, description="A job's user key, or local.")]
Persona = Annotated[str | None, Query(pattern=_PERSONA, description='A persona\'s name; "" for none.')]
_WORKSPACE = "A folder under the server's roots (or relative to the first)."
Workspace = Annotated[str | None, Query(max_length=4096, description=_WORKSPACE)]
Kind = Annotated[str | None, Query(min_length=1, max_length=64, description="fact, session_summary, ...")]
ItemId = Annotated[int, Path(ge=1, le=MAX_ID, description="The item's id (m12 is 12).")]


class MemoryService:
    """The server's ``LongTermMemory``, made at its first use from the configuration of the
    folder the server was started in: its ``[memory]`` settings and embedder (a local model
    is loaded once, not per request)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._memory: LongTermMemory | None = None
        self._embedder: Embedder | None = None
        self._lock = asyncio.Lock()

    def by_id(self) -> LongTermMemory:
        """For showing and forgetting by id, which need no embedder: they work even when the
        configured one cannot be made."""
        from steward.memory.longterm import LongTermMemory

        return self._memory or LongTermMemory(self.state.store.engine)

    async def get(self) -> LongTermMemory:
        async with self._lock:
            if self._memory is None:
                self._memory = await asyncio.to_thread(self._make)
            return self._memory

    def _make(self) -> LongTermMemory:
        from steward.config import load_config
        from steward.embed.resolve import embedder_from_config
        from steward.memory.longterm import LongTermMemory

        try:
            config = load_config(self.state.options.home)
            self._embedder = embedder_from_config(config)
        except StewardError as exc:  # the server's configuration, not the request, is wrong
            raise ApiError(409, f"the server's [memory] settings: {exc}", "Server configuration") from None
        return LongTermMemory(self.state.store.engine, embedder=self._embedder, settings=config.memory)

    async def aclose(self) -> None:
        if self._memory is not None:
            await self._memory.aclose()
        if self._embedder is not None:
            await self._embedder.aclose()


def _service(request: Request, state: State) -> MemoryService:
    found: MemoryService | None = getattr(request.app.state, "steward_memory", None)
    if found is None:  # no await since the look-up: one service per application
        found = request.app.state.steward_memory = MemoryService(state)
    return found


async def close_memory(app: Any) -> None:
    """Close the embedder the memory routes opened (the server's lifespan calls this)."""
    found: MemoryService | None = getattr(app.state, "steward_memory", None)
    if found is not None:
        await found.aclose()


Memory = Annotated[MemoryService, Depends(_service)]


# ---- the shapes


def _item_out(item: MemoryItem) -> s.MemoryItem:
    scope = s.MemoryScope(user=item.scope.user, persona=item.scope.persona, workspace=item.scope.workspace)
    return s.MemoryItem(
        id=item.id, scope=scope, kind=item.kind, text=item.text, tags=list(item.tags), run_id=item.run_id,
        session_id=item.session_id, created_at=item.created_at, updated_at=item.updated_at,
        expires_at=item.expires_at, hidden_at=item.hidden_at, merged=item.merged,
    )  # fmt: skip


def _row_out(row: Any) -> s.MemoryItem:
    scope = s.MemoryScope(user=row.scope_user, persona=row.scope_persona, workspace=row.scope_workspace)
    return s.MemoryItem(
        id=row.id, scope=scope, kind=row.kind, text=row.text, tags=row.tags.split(), run_id=row.run_id,
        session_id=row.session_id, created_at=row.created_at, updated_at=row.updated_at,
        expires_at=row.expires_at, hidden_at=row.hidden_at, merged=row.merged,
    )  # fmt: skip


def _hit_out(found: Found, explain: bool) -> s.MemoryHit:
    why = None
    if explain:
        why = s.MemoryExplain(
            keyword_rank=found.keyword_rank, vector_rank=found.vector_rank, score=found.score,
            similarity=found.similarity,
        )  # fmt: skip
    return s.MemoryHit(item=_item_out(found.item), explain=why)


def _text(value: str | None, what: str) -> str | None:
    if value is not None and "\x00" in value:
        raise ApiError(400, f"{what} may not contain NUL characters (\\u0000)")
    return value


def _workspace(state: ServerState, given: str | None) -> str | None:
    """A workspace as scopes record it: the resolved path of a folder under the roots."""
    if given is None:
        return None
    return str(under_roots(state.options, given, "workspace"))


def _filters(
    state: ServerState, user: str | None, persona: str | None, workspace: str | None, kind: str | None,
    hidden: bool,
) -> list[sa.ColumnElement[bool]]:  # fmt: skip
    """The WHERE of a listing: each scope part given is matched exactly; one not given spans all."""
    t = memory_items
    where: list[sa.ColumnElement[bool]] = []
    if (given := _text(user, "user")) is not None:
        where.append(t.c.scope_user == given)
    if persona is not None:
        where.append(t.c.scope_persona == persona)
    if (path := _workspace(state, workspace)) is not None:
        where.append(t.c.scope_workspace == path)
    if (wanted := _text(kind, "kind")) is not None:
        where.append(t.c.kind == wanted)
    if not hidden:
        where.append(t.c.hidden_at.is_(None))
        where.append(sa.or_(t.c.expires_at.is_(None), t.c.expires_at > time.time()))
    return where


async def _page(
    state: ServerState, where: list[sa.ColumnElement[bool]], limit: int, before: int | None
) -> tuple[list[s.MemoryItem], bool]:
    """Up to ``limit`` items, newest first, older than the item ``before``; and whether there are more."""
    t = memory_items
    query = sa.select(*[c for c in t.c if c.name != "tsv"]).where(*where)
    if before is not None:
        query = query.where(t.c.id < before)
    query = query.order_by(t.c.id.desc()).limit(limit + 1)
    async with state.store.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [_row_out(r) for r in rows[:limit]], len(rows) > limit


# ---- the routes (/memory/{item_id:int} takes digits only: /memory/search and /export stay theirs)


@router.get("/memory", response_model=s.MemoryItems)
async def list_memory(
    state: State,
    user: User = None,
    persona: Persona = None,
    workspace: Workspace = None,
    kind: Kind = None,
    hidden: Annotated[bool, Query(description="Also hidden or expired ones (kept, never recalled).")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="The `next` of the page before: older items.")
    ] = None,
) -> s.MemoryItems:
    """Remembered items, newest first, a page at a time. A scope part left out spans every
    value of it (the operator's view: every token is the operator's)."""
    where = _filters(state, user, persona, workspace, kind, hidden)
    items, more = await _page(state, where, limit, before)
    return s.MemoryItems(items=items, next=items[-1].id if more else None)


@router.get("/memory/search", response_model=s.MemorySearch)
async def search_memory(
    state: State,
    memory: Memory,
    q: Annotated[str, Query(min_length=1, max_length=4000, description="What to recall, in words.")],
    k: Annotated[int, Query(ge=1, le=100, description="How many items at most.")] = 5,
    user: Annotated[str, Query(min_length=1, max_length=200, description="Whose memory.")] = "local",
    persona: Annotated[str, Query(pattern=_PERSONA, description='"" for none.')] = "",
    workspace: Workspace = None,
    explain: Annotated[
        bool, Query(description="Give each item's keyword rank, vector rank, fused score and similarity.")
    ] = False,
) -> s.MemorySearch:
    """Recall as a run of that scope would: by words (BM25) fused with meaning when an embedder
    is configured. One scope only; nothing of another scope can come back."""
    from steward.memory.longterm import Scope

    query = _text(q, "q") or ""
    if not query.strip():
        raise ApiError(400, "q is empty: give the words to recall by")
    path = _workspace(state, workspace) or str(state.options.roots()[0])
    scope = Scope(user=_text(user, "user") or "local", persona=persona, workspace=path)
    recall = await memory.get()
    found = await recall.recall(scope, query, k=k)
    mode: Literal["keyword", "hybrid"] = "hybrid" if recall.mode == "hybrid" else "keyword"
    return s.MemorySearch(
        query=query, scope=_scope_out(scope), mode=mode, vector_backend=recall.vector_backend,
        hits=[_hit_out(f, explain) for f in found],
    )  # fmt: skip


def _scope_out(scope: Scope) -> s.MemoryScope:
    return s.MemoryScope(user=scope.user, persona=scope.persona, workspace=scope.workspace)


_JSONL = {
    200: {
        "description": "One item a line (JSON Lines), newest first: every field but vectors.",
        "content": {"application/x-ndjson": {"itemSchema": {"$ref": "#/components/schemas/MemoryItem"}}},
    }
}


@router.get("/memory/export", response_class=StreamingResponse, responses=_JSONL)  # type: ignore[arg-type]
async def export_memory(
    state: State,
    user: User = None,
    persona: Persona = None,
    workspace: Workspace = None,
    kind: Kind = None,
    hidden: Annotated[
        bool, Query(description="Hidden and expired items too (their hidden_at and expires_at say so).")
    ] = True,
) -> StreamingResponse:
    """Every item of the scopes asked (all when none is), as JSON Lines, read a page at a time."""
    where = _filters(state, user, persona, workspace, kind, hidden)  # a bad filter fails before streaming

    async def lines() -> AsyncIterator[str]:
        before: int | None = None
        while True:
            items, more = await _page(state, where, EXPORT_PAGE, before)
            for item in items:
                yield json.dumps(item.model_dump(), ensure_ascii=False) + "\n"
            if not more:
                return
            before = items[-1].id

    headers = {"Content-Disposition": 'attachment; filename="steward-memory.jsonl"'}
    return StreamingResponse(lines(), media_type="application/x-ndjson", headers=headers)


# The tools, the CLI and the page name an item m12: that form is the same route (unlisted).
@router.get("/memory/m{item_id:int}", response_model=s.MemoryItem, include_in_schema=False)
@router.get("/memory/{item_id:int}", response_model=s.MemoryItem)
async def show_memory(item_id: ItemId, memory: Memory) -> s.MemoryItem:
    """One item, hidden or not."""
    item = await memory.by_id().get(None, item_id)
    if item is None:
        raise ApiError(404, f"no memory item {item_id}; GET /v1/memory lists them")
    return _item_out(item)


@router.delete("/memory/m{item_id:int}", response_model=s.MemoryForgotten, include_in_schema=False)
@router.delete("/memory/{item_id:int}", response_model=s.MemoryForgotten)
async def forget_memory(
    item_id: ItemId,
    memory: Memory,
    purge: Annotated[
        bool, Query(description="Delete it for good (its text leaves the store) instead of hiding it.")
    ] = False,
) -> s.MemoryForgotten:
    """Forget an item: hidden (kept, listed with hidden=true, never recalled), or purged."""
    recall = memory.by_id()
    done = await recall.forget(None, item_id, purge=purge)
    kept = None if purge else await recall.get(None, item_id)  # hidden before: hiding again is no error
    if not done and kept is None:
        raise ApiError(404, f"no memory item {item_id}; GET /v1/memory lists them")
    return s.MemoryForgotten(id=item_id, purged=purge, item=_item_out(kept) if kept else None)


# Last: any other /memory/X (after /search and /export, and the digits above) is a mistyped id,
# answered with the forms an id takes rather than the framework's bare "Not Found".
@router.get("/memory/{given}", include_in_schema=False)
@router.delete("/memory/{given}", include_in_schema=False)
async def not_a_memory_id(given: str) -> None:
    if given in ("search", "export"):  # a DELETE of a route of its own, which takes GET only
        raise HTTPException(405, f"/v1/memory/{given} takes GET only", headers={"Allow": "GET"})
    raise ApiError(404, f"{given!r} is not a memory id: give 12 or m12, as GET /v1/memory lists them")
