"""Long-term memory: items an agent remembered or a run archived, recalled by words and meaning.

Every item belongs to a ``Scope`` (user, persona, workspace), and every query here puts that
scope in its SQL ``WHERE``: one scope's items cannot reach another's run, whatever the query.
Only the operator's tools (CLI, API) pass ``scope=None``, meaning every scope.

A write is one short transaction and calls no model: the text is keyword-indexed at once (FTS5
triggers on SQLite, a generated tsvector on PostgreSQL). The same text again in the same scope
(equal ``content_hash``) is not a new row: the existing item is bumped (``merged``, tags,
``updated_at``). Vectors come later, in batches (``index_pending``, ``start_indexing``, and
``recall``, which first embeds its scope's new items when the scope changed since it last
looked); a newly embedded item within ``merge_similarity`` of an older one of its scope and kind
is folded into it, its row deleted. Every change to a scope bumps its generation
(``memory_scopes``) in the same transaction, which is how a process knows its cached vectors of
that scope are still true.

Two concurrent writes of the same new text on PostgreSQL can both insert; the copies are then
folded together when they are embedded (their cosine is 1). Without an embedder they stay two.

Recall is the keyword list fused with the vector list by reciprocal rank fusion
(``steward.memory.hybrid``); without an embedder it is the keyword list alone. Hidden items
(``forget``) are kept and listable but never recalled; purged ones are deleted with their keyword
index entry and, when no other item shares their text, their vector. Expired items are never
recalled and ``purge_expired`` deletes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.config import MemorySettings
from steward.embed.base import content_hash, from_bytes, normalise, to_bytes
from steward.errors import StewardError
from steward.memory.hybrid import CANDIDATES, fuse_lists, keyword_rows
from steward.memory.vectors import CacheChange, Tuning, Vector, VectorIndex, VectorQuery
from steward.store.engine import like_pattern, write_transaction
from steward.store.schema import memory_items, memory_scopes, memory_vectors

if TYPE_CHECKING:
    from steward.embed.base import Embedder
    from steward.memory.batch import NewItem
    from steward.tools.base import ToolContext

_log = logging.getLogger(__name__)
_DAY_S = 86_400.0
#: Items ``recall`` embeds before searching, so fresh items are never missed (more: ``index_pending``).
RECALL_INDEX_LIMIT = 2_000
#: Texts embedded at once after which PostgreSQL's statistics are refreshed.
_ANALYZE_AFTER = 1_000


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory: a user ("local" for the CLI), a persona ("" for none) and a workspace."""

    user: str
    persona: str
    workspace: str

    @classmethod
    def of(cls, ctx: ToolContext) -> Scope:
        """The run's scope; the workspace resolved, as the CLI and the API resolve theirs."""
        return cls(user=ctx.user, persona=ctx.persona, workspace=str(ctx.workspace.resolve()))


@dataclass(frozen=True, slots=True)
class KeptItem:
    """An item as written or exported, before the store gives it an id: its scope, its times,
    how many writes it holds, hidden or not."""

    scope: Scope
    kind: str
    text: str
    tags: tuple[str, ...]
    run_id: str | None
    session_id: str | None
    created_at: float
    updated_at: float
    expires_at: float | None
    hidden_at: float | None
    merged: int


@dataclass(frozen=True, slots=True)
class MemoryItem(KeptItem):
    """An item as stored."""

    id: int


@dataclass(frozen=True, slots=True)
class Written:
    item: MemoryItem
    merged: bool  # True when the text was folded into an existing item (same hash)


@dataclass(frozen=True, slots=True)
class Found:
    item: MemoryItem
    score: float  # fused RRF score
    keyword_rank: int | None  # 1-based rank in the BM25 list, None when not in it
    vector_rank: int | None  # 1-based rank in the vector list, None when not in it / no embedder
    similarity: float | None  # cosine with the query, when vectors were compared


def normalise_tags(tags: Sequence[str]) -> tuple[str, ...]:
    """Tags as stored: case-folded, inner spaces as ``-``, empty ones dropped, each once, in order."""
    out: list[str] = []
    for tag in tags:
        clean = "-".join(tag.casefold().split())
        if clean and clean not in out:
            out.append(clean)
    return tuple(out)


def tags_column(tags: Sequence[str]) -> str:
    """Tags as the ``tags`` column holds them."""
    # " a b ": every tag has a space on both sides, so one tag is found with LIKE '% a %'.
    return f" {' '.join(tags)} " if tags else ""


def scope_where(scope: Scope) -> list[sa.ColumnElement[bool]]:
    """The SQL that keeps a query inside ``scope``."""
    items = memory_items
    return [
        items.c.scope_user == scope.user,
        items.c.scope_persona == scope.persona,
        items.c.scope_workspace == scope.workspace,
    ]


def scope_unindexed(scope: Scope) -> list[sa.ColumnElement[bool]]:
    """``scope_where`` for a query another index should drive (ids, words): the same test,
    written so that the planner does not walk the scope's index instead. Without statistics,
    SQLite and PostgreSQL both took it and scanned the whole scope to find 50 rows."""
    items = memory_items
    return [
        items.c.scope_user.concat("") == scope.user,
        items.c.scope_persona.concat("") == scope.persona,
        items.c.scope_workspace.concat("") == scope.workspace,
    ]


def visible_where(now: float) -> list[sa.ColumnElement[bool]]:
    """The SQL for items recall may return: not hidden, not expired."""
    items = memory_items
    return [items.c.hidden_at.is_(None), sa.or_(items.c.expires_at.is_(None), items.c.expires_at > now)]


def page_query(
    scope: Scope | None, *, kind: str | None, visible_at: float | None, limit: int, before_id: int | None
) -> sa.Select[Any]:
    """One page of items, newest first: those of ``scope`` (None: every scope) older than
    ``before_id``, visible at ``visible_at`` (None: hidden and expired ones too). A whole scope
    walks ``ix_memory_scope_id`` from its newest item and stops at ``limit``: no scope is sorted."""
    where = scope_where(scope) if scope is not None else []
    if visible_at is not None:
        where += visible_where(visible_at)
    if kind is not None:
        where.append(memory_items.c.kind == kind)
    if before_id is not None:
        where.append(memory_items.c.id < before_id)
    return sa.select(*ITEM_COLUMNS).where(*where).order_by(memory_items.c.id.desc()).limit(max(limit, 0))


def new_item(
    scope: Scope,
    text: str,
    *,
    kind: str,
    tags: Sequence[str],
    run_id: str | None,
    session_id: str | None,
    ttl_s: float | None,
    now: float,
) -> KeptItem:
    """What ``remember`` keeps of its arguments: checked (an error says the fix), the text
    stripped, the tags normalised, the expiry set."""
    text = text.strip()
    if not text:
        raise StewardError("nothing to remember: the text is empty; give the fact to keep")
    if ttl_s is not None and ttl_s <= 0:
        raise StewardError(f"ttl_s must be positive (got {ttl_s}); leave it out to keep the item")
    return KeptItem(
        scope=scope,
        kind=kind,
        text=text,
        tags=normalise_tags(tags),
        run_id=run_id,
        session_id=session_id,
        created_at=now,
        updated_at=now,
        expires_at=None if ttl_s is None else now + ttl_s,
        hidden_at=None,
        merged=1,
    )


def row_values(item: KeptItem) -> dict[str, object]:
    """The ``memory_items`` row of ``item`` (every column but ``id`` and ``tsv``)."""
    return {
        "scope_user": item.scope.user,
        "scope_persona": item.scope.persona,
        "scope_workspace": item.scope.workspace,
        "kind": item.kind,
        "text": item.text,
        "tags": tags_column(item.tags),
        "content_hash": content_hash(item.text),
        "run_id": item.run_id,
        "session_id": item.session_id,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
        "expires_at": item.expires_at,
        "hidden_at": item.hidden_at,
        "merged": item.merged,
    }


def row_item(row: Mapping[Any, Any]) -> MemoryItem:
    """An item from its row (every column but ``tsv``)."""
    return MemoryItem(
        id=row["id"],
        scope=Scope(row["scope_user"], row["scope_persona"], row["scope_workspace"]),
        kind=row["kind"],
        text=row["text"],
        tags=tuple(row["tags"].split()),
        run_id=row["run_id"],
        session_id=row["session_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
        hidden_at=row["hidden_at"],
        merged=row["merged"],
    )


ITEM_COLUMNS = [c for c in memory_items.c if c.name != "tsv"]


async def bump_generation(conn: AsyncConnection, scope: Scope) -> int:
    """Mark ``scope`` changed (every process's cached copy of its vectors is then stale); return
    its new generation. One atomic upsert, so concurrent writers never collide on the row."""
    key = {"scope_user": scope.user, "scope_persona": scope.persona, "scope_workspace": scope.workspace}
    upsert = _insert(conn.dialect.name, memory_scopes).values(**key, generation=1)
    upsert = upsert.on_conflict_do_update(
        index_elements=list(key), set_={"generation": memory_scopes.c.generation + 1}
    )
    return int((await conn.execute(upsert.returning(memory_scopes.c.generation))).scalar_one())


async def scope_generation(conn: AsyncConnection, scope: Scope) -> int:
    query = sa.select(memory_scopes.c.generation).where(
        memory_scopes.c.scope_user == scope.user,
        memory_scopes.c.scope_persona == scope.persona,
        memory_scopes.c.scope_workspace == scope.workspace,
    )
    return (await conn.execute(query)).scalar_one_or_none() or 0


async def fold_into(
    conn: AsyncConnection,
    into: MemoryItem,
    tags: Sequence[str],
    now: float,
    *,
    expires_at: float | None,
    count: int,
) -> MemoryItem:
    """Fold ``count`` writes carrying ``tags`` into the item ``into``: it lives on, refreshed
    (a later expiry wins; no expiry on either side means none)."""
    union = normalise_tags([*into.tags, *tags])
    expiry = None if into.expires_at is None or expires_at is None else max(into.expires_at, expires_at)
    values = {
        "merged": into.merged + count,
        "tags": tags_column(union),
        "updated_at": now,
        "expires_at": expiry,
    }
    await conn.execute(memory_items.update().where(memory_items.c.id == into.id).values(**values))
    return MemoryItem(
        id=into.id,
        scope=into.scope,
        kind=into.kind,
        text=into.text,
        tags=union,
        run_id=into.run_id,
        session_id=into.session_id,
        created_at=into.created_at,
        updated_at=now,
        expires_at=expiry,
        hidden_at=into.hidden_at,
        merged=into.merged + count,
    )


class LongTermMemory:
    """The store of long-term memory items, their vectors, and hybrid recall over them."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        embedder: Embedder | None = None,
        settings: MemorySettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._engine = engine
        self._embedder = embedder
        self._settings = settings if settings is not None else MemorySettings()
        self._clock = clock
        self._backend: VectorIndex | None = None
        self._index_lock = asyncio.Lock()
        self._embed_lock = asyncio.Lock()
        self._background: asyncio.Task[int] | None = None
        self._watermark: dict[str, int] = {}  # model: every item up to this id had its turn
        self._clean: dict[Scope, int] = {}  # scope: a generation at which all its items had vectors

    @property
    def mode(self) -> str:
        """ "keyword" (no embedder) or "hybrid"."""
        return "keyword" if self._embedder is None else "hybrid"

    @property
    def vector_backend(self) -> str:
        """ "none" without an embedder; else the backend found at first use ("numpy" until then)."""
        if self._embedder is None:
            return "none"
        return "numpy" if self._backend is None else self._backend.name

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

    async def backend(self) -> str:
        """``vector_backend`` after probing the store (pgvector is found on first use): for
        ``steward doctor``, which should say which one recall uses before any recall ran."""
        if self._embedder is not None:
            await self._vector_index()
        return self.vector_backend

    # --- writing --------------------------------------------------------------------------------

    async def remember(
        self,
        scope: Scope,
        text: str,
        *,
        tags: Sequence[str] = (),
        kind: str = "fact",
        run_id: str | None = None,
        session_id: str | None = None,
        ttl_s: float | None = None,
    ) -> Written:
        """Keep ``text`` in ``scope``; the same text already there is bumped instead. No model call."""
        now = self._clock()
        kept = new_item(
            scope,
            text,
            kind=kind,
            tags=tags,
            run_id=run_id,
            session_id=session_id,
            ttl_s=self._ttl_s(ttl_s),
            now=now,
        )
        values = row_values(kept)
        async with write_transaction(self._engine) as conn:
            # A new text (the usual case) is one statement: inserted unless already visible here,
            # and on PostgreSQL the scope's generation bumped by the same statement.
            inserting = _remember_statement(conn.dialect.name)
            params = {**{f"v_{name}": value for name, value in values.items()}, "now": now}
            found = (await conn.execute(inserting, params)).first()
            new_id = None if found is None else found[0]
            change = (
                CacheChange(before=found[1] - 1, after=found[1])
                if found is not None and len(found) > 1
                else await _change(conn, scope)
            )
            if new_id is not None:
                item = row_item({**values, "id": new_id})
                await self._known_vector(conn, item, change)
            else:
                # The text's hash drives the lookup (one or two rows), not the scope (every item).
                by_hash = memory_items.c.content_hash == values["content_hash"]
                same_text = [*scope_unindexed(scope), *visible_where(now), by_hash]
                same = (
                    (
                        await conn.execute(
                            sa.select(*ITEM_COLUMNS).where(*same_text).order_by(memory_items.c.id).limit(1)
                        )
                    )
                    .mappings()
                    .one()
                )
                expires_at = kept.expires_at
                item = await fold_into(conn, row_item(same), kept.tags, now, expires_at=expires_at, count=1)
                change.expires[item.id] = _expiry(item.expires_at)
        self._note(scope, change)
        return Written(item, merged=new_id is None)

    async def remember_many(self, scope: Scope, items: Sequence[NewItem]) -> list[Written]:
        """``remember`` for many items in one transaction: each is checked first (an error names
        it and nothing is written), the same text is merged as ``remember`` merges it (also
        within the batch), and the scope's generation is bumped once."""
        from steward.memory.batch import drafts_of

        now = self._clock()
        return await self._write_many(drafts_of(scope, items, now, self._ttl_s), now)

    def _ttl_s(self, ttl_s: float | None) -> float | None:
        """An item's own lifetime, else ``[memory] ttl_days``'."""
        days = self._settings.ttl_days
        return ttl_s if ttl_s is not None or days is None else days * _DAY_S

    async def restore(self, items: Sequence[KeptItem]) -> list[Written]:
        """Items as ``steward memory export`` wrote them (any scopes), with their own times,
        counts and hidden state, in one transaction; visible ones merge as ``remember`` does."""
        for number, item in enumerate(items, start=1):
            if not item.text.strip():
                raise StewardError(f"item {number}: the text is empty; every item needs its text")
        return await self._write_many(list(items), self._clock())

    async def _write_many(self, items: Sequence[KeptItem], now: float) -> list[Written]:
        from steward.memory.batch import write_many

        if not items:
            return []
        async with write_transaction(self._engine) as conn:
            written, generations = await write_many(conn, items, now)
        for scope, generation in generations.items():
            # A cached copy of the scope is reloaded at its next search (before=-1 never matches):
            # a batch can be large, and some of its texts may already have vectors.
            self._note(scope, CacheChange(before=-1, after=generation))
        return written

    async def _known_vector(self, conn: AsyncConnection, item: MemoryItem, change: CacheChange) -> None:
        """A new item whose text already has a vector (another scope's, a hidden item's) is never
        pending: it joins the cached vectors of its scope here instead."""
        if self._embedder is None or self._backend is None:
            return
        model = self._embedder.name
        found = await conn.execute(
            sa.select(memory_vectors.c.dim, memory_vectors.c.vector).where(
                memory_vectors.c.content_hash == content_hash(item.text), memory_vectors.c.model == model
            )
        )
        row = found.one_or_none()
        if row is not None:
            change.added[item.id] = (model, from_bytes(row[1], row[0]), _expiry(item.expires_at))

    async def forget(self, scope: Scope | None, item_id: int, *, purge: bool = False) -> bool:
        """Hide the item (kept, never recalled), or with ``purge`` delete it, its keyword entry and
        its vector when no other item has the same text. False when no such item is in ``scope``
        (or, without ``purge``, it is already hidden)."""
        where = [memory_items.c.id == item_id, *(scope_where(scope) if scope is not None else [])]
        async with write_transaction(self._engine) as conn:
            row = (await conn.execute(sa.select(*ITEM_COLUMNS).where(*where))).mappings().one_or_none()
            if row is None:
                return False
            item = row_item(row)
            if purge:
                await _purge(conn, memory_items.c.id == item_id, [row["content_hash"]])
            elif item.hidden_at is not None:
                return False
            else:
                now = self._clock()
                await conn.execute(
                    memory_items.update()
                    .where(memory_items.c.id == item_id)
                    .values(hidden_at=now, updated_at=now)
                )
            change = await _change(conn, item.scope)
            change.removed.add(item_id)
        self._note(item.scope, change)
        if purge:
            await _checkpoint(self._engine)
        return True

    async def purge_expired(self) -> int:
        """Delete every item whose time is up, in every scope; return how many."""
        now = self._clock()
        expired = memory_items.c.expires_at.is_not(None) & (memory_items.c.expires_at <= now)
        async with write_transaction(self._engine) as conn:
            rows = (
                await conn.execute(
                    sa.select(
                        memory_items.c.scope_user,
                        memory_items.c.scope_persona,
                        memory_items.c.scope_workspace,
                        memory_items.c.content_hash,
                        memory_items.c.id,
                    ).where(expired)
                )
            ).all()
            if not rows:
                return 0
            await _purge(conn, expired, sorted({row[3] for row in rows}))
            changes = {}
            for scope in {Scope(row[0], row[1], row[2]) for row in rows}:
                changes[scope] = await _change(conn, scope)
                changes[scope].removed.update(
                    row[4] for row in rows if Scope(row[0], row[1], row[2]) == scope
                )
        for scope, change in changes.items():
            self._note(scope, change)
        await _checkpoint(self._engine)
        return len(rows)

    # --- reading --------------------------------------------------------------------------------

    async def get(self, scope: Scope | None, item_id: int) -> MemoryItem | None:
        """The item, hidden or expired too (the operator's ``show``), when it is in ``scope``."""
        where = [memory_items.c.id == item_id, *(scope_where(scope) if scope is not None else [])]
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(*ITEM_COLUMNS).where(*where))).mappings().one_or_none()
        return None if row is None else row_item(row)

    async def items(
        self,
        scope: Scope | None,
        *,
        kind: str | None = None,
        include_hidden: bool = False,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[MemoryItem]:
        """Items newest first (pages: ``before_id`` = the last id seen). Hidden and expired ones
        only with ``include_hidden``."""
        now = None if include_hidden else self._clock()
        query = page_query(scope, kind=kind, visible_at=now, limit=limit, before_id=before_id)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [row_item(row) for row in rows]

    async def recall(
        self,
        scope: Scope,
        query: str,
        *,
        k: int = 5,
        tags: Sequence[str] = (),
        kinds: Sequence[str] | None = None,
    ) -> list[Found]:
        """The ``k`` items of ``scope`` that best match ``query``, by words and (with an embedder)
        meaning, fused; each says its ranks in both lists and its cosine with the query."""
        if k <= 0:
            return []
        now = self._clock()
        vector = await self._query_vector(query)
        async with self._reading() as conn:
            generation = 0 if vector is None else await scope_generation(conn, scope)
            if vector is None or self._clean.get(scope) == generation:
                return await self._recall_in(conn, scope, query, vector, generation, k, tags, kinds, now)
        # The scope changed since its items last all had vectors: its new ones are embedded first
        # (a scope that did not change costs no more than the generation read above).
        vector = await self._catch_up(scope, generation, vector)
        async with self._reading() as conn:
            generation = 0 if vector is None else await scope_generation(conn, scope)
            return await self._recall_in(conn, scope, query, vector, generation, k, tags, kinds, now)

    @contextlib.asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        """A connection for a recall's reads. On PostgreSQL it is in autocommit: no BEGIN and
        ROLLBACK round trips around the reads (each statement saw a snapshot of its own in READ
        COMMITTED anyway), and pgvector's settings can stay with the server connection
        (``PgVectorIndex._nearest``). SQLite opens no transaction for reads either way."""
        async with self._engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    async def _recall_in(
        self,
        conn: AsyncConnection,
        scope: Scope,
        query: str,
        vector: Vector | None,
        generation: int,
        k: int,
        tags: Sequence[str],
        kinds: Sequence[str] | None,
        now: float,
    ) -> list[Found]:
        """``recall`` in one connection, ``generation`` the scope's as ``conn`` reads it."""
        conditions = [*visible_where(now), *_filters(tags, kinds)]
        # The keyword list comes with its rows; the vector list's others are read under the
        # same WHERE, so a candidate hidden, purged or expired meanwhile (or, were a backend
        # ever wrong, of another scope) is dropped here.
        by_words = [*scope_unindexed(scope), *conditions]
        vector_hits: list[tuple[int, float]] = []
        vector_rows: Sequence[sa.RowMapping] = ()
        if vector is not None and self._embedder is not None:
            search = VectorQuery(
                key=scope,
                scope_where=scope_where(scope),
                where=[*scope_where(scope), *conditions],
                filtered=bool(tags) or kinds is not None,
                model=self._embedder.name,
                vector=vector,
                limit=CANDIDATES,
                now=now,
                generation=generation,
            )
            index = await self._vector_index()
            if conn.dialect.name == "postgresql":
                both = await self._both_lists(conn, index, search, query, by_words)
                vector_hits, vector_rows, word_rows = both
            else:  # SQLite: one process's CPU does both either way
                vector_hits = await index.search(conn, search)
                word_rows = await keyword_rows(conn, query, by_words, ITEM_COLUMNS)
        else:
            word_rows = await keyword_rows(conn, query, by_words, ITEM_COLUMNS)
        rows = {row["id"]: row for row in word_rows}
        settings = self._settings
        ranked = fuse_lists(
            list(rows), vector_hits, k=settings.rrf_k, keyword_weight=settings.keyword_weight
        )[: k * 4 + CANDIDATES]
        for row in vector_rows:
            rows.setdefault(row["id"], row)
        missing = [r.id for r in ranked if r.id not in rows]
        if missing:
            by_id = memory_items.c.id.in_(missing)
            select = sa.select(*ITEM_COLUMNS).where(by_id, *scope_unindexed(scope), *conditions)
            rows.update((row["id"], row) for row in (await conn.execute(select)).mappings().all())
        ordered = sorted(
            (r for r in ranked if r.id in rows), key=lambda r: (-r.score, -rows[r.id]["updated_at"], -r.id)
        )
        # Items are made only of the rows returned (a recall reads some 90 rows to return 5).
        return [
            Found(row_item(rows[r.id]), r.score, r.keyword_rank, r.vector_rank, r.similarity)
            for r in ordered[:k]
        ]

    async def _both_lists(
        self,
        conn: AsyncConnection,
        index: VectorIndex,
        search: VectorQuery,
        query: str,
        by_words: Sequence[sa.ColumnElement[bool]],
    ) -> tuple[list[tuple[int, float]], Sequence[sa.RowMapping], Sequence[sa.RowMapping]]:
        """The vector list on ``conn`` and the keyword list on a second pooled connection, at
        once: on PostgreSQL each is a server process of its own, so a hybrid recall waits for the
        slower of the two instead of their sum. pgvector's list comes with its items' rows, as
        the keyword list does (a round trip less; NumPy's rows are read after fusing). Should
        either fail, the other is cancelled and its connection goes back to the pool."""
        from steward.memory.pgsearch import PgVectorIndex

        async def by_meaning() -> tuple[list[tuple[int, float]], Sequence[sa.RowMapping]]:
            if not isinstance(index, PgVectorIndex):
                return await index.search(conn, search), ()
            rows = [row._mapping for row in await index.search_rows(conn, search, ITEM_COLUMNS)]
            return [(int(row["id"]), float(row["similarity"])) for row in rows], rows

        async def by_words_elsewhere() -> list[sa.RowMapping]:
            async with self._reading() as other:
                return await keyword_rows(other, query, by_words, ITEM_COLUMNS)

        async with asyncio.TaskGroup() as group:
            meaning = group.create_task(by_meaning())
            words = group.create_task(by_words_elsewhere())
        return *meaning.result(), words.result()

    # --- vectors ----------------------------------------------------------------------------------

    async def index_pending(self, *, limit: int = 10_000) -> int:
        """Embed up to ``limit`` visible items that have no vector under the embedder's name, in
        batches of ``embed_batch``, then fold each into an older item of its scope and kind whose
        cosine reaches ``merge_similarity``; return how many texts were embedded."""
        embedded, _ = await self._index(limit=limit, after_id=0)
        return embedded

    def start_indexing(self) -> asyncio.Task[int]:
        """``index_pending`` in the background (one at a time), for callers that just wrote; the
        task is kept here until ``aclose``. A failure is logged, not raised into the caller."""
        if self._background is None or self._background.done():
            self._background = asyncio.create_task(self._index_quietly())
        return self._background

    async def aclose(self) -> None:
        """Wait for background indexing to finish."""
        if self._background is not None:
            await asyncio.gather(self._background, return_exceptions=True)

    async def _index_quietly(self) -> int:
        try:
            return await self.index_pending()
        except StewardError as exc:
            _log.warning("indexing long-term memory failed: %s", exc)
            return 0

    async def _vector_index(self) -> VectorIndex:
        if self._backend is None:
            from steward.memory.pgsearch import choose_index

            async with self._index_lock:
                if self._backend is None:
                    self._backend = await choose_index(self._engine, Tuning.of(self._settings))
        return self._backend

    async def _index(self, *, limit: int, after_id: int) -> tuple[int, bool]:
        """(texts embedded, whether every pending item after ``after_id`` had its turn)."""
        embedder = self._embedder
        if embedder is None or limit <= 0:
            return 0, embedder is None
        index = await self._vector_index()
        async with self._embed_lock:  # one indexer per process: the same text is not embedded twice
            now = self._clock()
            async with self._engine.connect() as conn:
                newest = (await conn.execute(sa.select(sa.func.max(memory_items.c.id)))).scalar() or 0
                pending = await _pending(conn, embedder.name, now, limit=limit, after_id=after_id)
            embedded = 0
            for start in range(0, len(pending), self._settings.embed_batch):
                batch = pending[start : start + self._settings.embed_batch]
                embedded += await self._embed_batch(index, embedder, batch)
            await self._merge_near_duplicates(index, embedder.name, pending)
            if embedded >= _ANALYZE_AFTER and self._engine.dialect.name == "postgresql":
                # Fresh statistics after a bulk load: without them the planner joins vectors by a
                # nested loop of index probes (60 ms at 5 k items where a hash join takes a few).
                async with self._engine.begin() as conn:
                    await conn.execute(sa.text("ANALYZE memory_items, memory_vectors"))
                await _vacuum_terms(self._engine)
            complete = len(pending) < limit
            if complete:
                self._watermark[embedder.name] = max(self._watermark.get(embedder.name, 0), newest)
        return embedded, complete

    async def _embed_batch(self, index: VectorIndex, embedder: Embedder, batch: list[_Pending]) -> int:
        texts = {row.digest: row.text for row in batch}  # one text per hash
        vectors = normalise(await embedder.embed(list(texts.values()), query=False))
        if vectors.shape[0] != len(texts):
            raise StewardError(
                f"embedder {embedder.name} returned {vectors.shape[0]} vectors for {len(texts)} texts"
            )
        by_hash = dict(zip(texts, vectors, strict=True))
        for row in batch:
            row.vector = by_hash[row.digest]
        now = self._clock()
        values = [
            {
                "content_hash": h,
                "model": embedder.name,
                "dim": int(v.shape[0]),
                "vector": to_bytes(v),
                "created_at": now,
            }
            for h, v in by_hash.items()
        ]
        changes: dict[Scope, CacheChange] = {}
        async with write_transaction(self._engine) as conn:
            await conn.execute(_insert(conn.dialect.name, memory_vectors).on_conflict_do_nothing(), values)
            await index.store(conn, embedder.name, by_hash)
            for row in batch:
                if row.scope not in changes:
                    changes[row.scope] = await _change(conn, row.scope)
                changes[row.scope].added[row.id] = (
                    embedder.name,
                    by_hash[row.digest],
                    _expiry(row.expires_at),
                )
        for scope, change in changes.items():
            self._note(scope, change)
        return len(by_hash)

    async def _merge_near_duplicates(self, index: VectorIndex, model: str, fresh: list[_Pending]) -> None:
        """Fold each newly embedded item into the nearest older visible item of its scope and kind,
        when their cosine reaches ``merge_similarity``. The newer row is deleted: its words are
        (nearly) the older one's; its tags and count go to the older item."""
        by_scope: dict[Scope, list[_Pending]] = {}
        for row in sorted(fresh, key=lambda r: r.id):
            if row.vector is not None:
                by_scope.setdefault(row.scope, []).append(row)
        for scope, rows in by_scope.items():
            now = self._clock()
            async with self._engine.connect() as conn:
                query = VectorQuery(
                    key=scope,
                    scope_where=scope_where(scope),
                    where=[*scope_where(scope), *visible_where(now)],
                    filtered=False,
                    model=model,
                    vector=np.stack([row.vector for row in rows if row.vector is not None]),
                    limit=3,
                    now=now,
                    generation=await scope_generation(conn, scope),
                )
                nearest = await index.nearest_older(conn, query, [row.id for row in rows])
            for row, hits in zip(rows, nearest, strict=True):
                near = [item_id for item_id, sim in hits if sim >= self._settings.merge_similarity]
                if near:  # candidates folded away meanwhile are skipped by _fold_near's read
                    await self._fold_near(row, near, now)

    async def _fold_near(self, row: _Pending, candidates: list[int], now: float) -> bool:
        where = [*scope_unindexed(row.scope), *visible_where(now)]  # the ids drive it, not the scope
        async with write_transaction(self._engine) as conn:
            found = await conn.execute(
                sa.select(*ITEM_COLUMNS).where(memory_items.c.id.in_([row.id, *candidates]), *where)
            )
            rows = {r["id"]: row_item(r) for r in found.mappings().all()}
            new = rows.get(row.id)
            target = next((rows[c] for c in candidates if c in rows and rows[c].kind == row.kind), None)
            if new is None or target is None:
                return False
            folded = await fold_into(conn, target, new.tags, now, expires_at=new.expires_at, count=new.merged)
            await conn.execute(memory_items.delete().where(memory_items.c.id == new.id))
            await _drop_orphan_vectors(conn, [row.digest])
            change = await _change(conn, row.scope)
            change.removed.add(new.id)
            change.expires[target.id] = _expiry(folded.expires_at)
        self._note(row.scope, change)
        return True

    async def _query_vector(self, query: str) -> Vector | None:
        """The query's vector; None without an embedder, for an empty query, or when embedding fails."""
        embedder = self._embedder
        if embedder is None or not query.strip():
            return None
        try:
            vectors = normalise(await embedder.embed([query], query=True))
        except StewardError as exc:  # the words still find what they match
            _log.warning("recall by meaning is off for this query: %s", exc)
            return None
        vector: Vector = vectors[0]
        return vector

    async def _catch_up(self, scope: Scope, generation: int, vector: Vector) -> Vector | None:
        """Embed the items written since the last catch-up, so that a recall never misses a
        fresh one; ``scope`` is clean at ``generation`` once every pending item had its turn.
        ``vector`` back, or None when embedding fails (the words still find what they match)."""
        embedder = self._embedder
        if embedder is None:
            return None
        try:
            after = self._watermark.get(embedder.name, 0)
            _, complete = await self._index(limit=RECALL_INDEX_LIMIT, after_id=after)
        except StewardError as exc:
            _log.warning("recall by meaning is off for this query: %s", exc)
            return None
        if complete:
            self._clean[scope] = generation
        return vector

    def _note(self, scope: Scope, change: CacheChange) -> None:
        if self._backend is not None:
            self._backend.note(scope, change)


@dataclass(slots=True)
class _Pending:
    """An item to embed."""

    id: int
    scope: Scope
    kind: str
    digest: str
    text: str
    expires_at: float | None
    vector: Vector | None = None


async def _pending(
    conn: AsyncConnection, model: str, now: float, *, limit: int, after_id: int
) -> list[_Pending]:
    """Visible items after ``after_id`` whose text has no vector under ``model``, oldest first."""
    items, vectors = memory_items, memory_vectors
    has_vector = sa.select(vectors.c.content_hash).where(
        vectors.c.content_hash == items.c.content_hash, vectors.c.model == model
    )
    query = (
        sa.select(
            items.c.id,
            items.c.scope_user,
            items.c.scope_persona,
            items.c.scope_workspace,
            items.c.kind,
            items.c.content_hash,
            items.c.text,
            items.c.expires_at,
        )
        .where(items.c.id > after_id, *visible_where(now), ~has_vector.exists())
        .order_by(items.c.id)
        .limit(limit)
    )
    return [
        _Pending(r[0], Scope(r[1], r[2], r[3]), r[4], r[5], r[6], r[7])
        for r in (await conn.execute(query)).all()
    ]


async def _change(conn: AsyncConnection, scope: Scope) -> CacheChange:
    """Bump ``scope``'s generation; the change to note in the vector cache once committed."""
    after = await bump_generation(conn, scope)
    return CacheChange(before=after - 1, after=after)


def _insert(dialect: str, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT that can say what to do on a conflict (both engines spell it the same)."""
    return postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)


@functools.cache
def _remember_statement(dialect: str) -> sa.Executable:
    """``remember``'s one statement, built once (its parameters: ``v_`` and each column of
    ``row_values``, and ``now``): the item inserted unless the same text is visible in its
    scope, RETURNING its id (no row when it was not inserted). On PostgreSQL the scope's
    generation is bumped by the same statement, which then always returns one row, (the new id
    or NULL, the generation): a round trip less (SQLite has no INSERT inside a WITH)."""
    items = memory_items
    names = [c.name for c in ITEM_COLUMNS if c.name != "id"]
    given = {name: sa.bindparam(f"v_{name}", type_=items.c[name].type) for name in names}
    # The same test as ``scope_unindexed`` and ``visible_where``, the hash driving the lookup.
    same = sa.select(items.c.id).where(
        items.c.scope_user.concat("") == given["scope_user"],
        items.c.scope_persona.concat("") == given["scope_persona"],
        items.c.scope_workspace.concat("") == given["scope_workspace"],
        items.c.hidden_at.is_(None),
        sa.or_(items.c.expires_at.is_(None), items.c.expires_at > sa.bindparam("now", type_=sa.Float)),
        items.c.content_hash == given["content_hash"],
    )
    row = sa.select(*(value.label(name) for name, value in given.items())).where(~same.exists())
    inserting = items.insert().from_select(names, row).returning(items.c.id)
    if dialect != "postgresql":
        return inserting
    inserted = inserting.cte("inserted")
    key = {column: given[column] for column in ("scope_user", "scope_persona", "scope_workspace")}
    bump = postgresql.insert(memory_scopes).values(**key, generation=1)
    bumped = (
        bump.on_conflict_do_update(
            index_elements=list(key), set_={"generation": memory_scopes.c.generation + 1}
        )
        .returning(memory_scopes.c.generation)
        .cte("bumped")
    )
    return sa.select(
        sa.select(inserted.c.id).scalar_subquery(), sa.select(bumped.c.generation).scalar_subquery()
    )


def _expiry(expires_at: float | None) -> float:
    return math.inf if expires_at is None else expires_at


def _filters(tags: Sequence[str], kinds: Sequence[str] | None) -> list[sa.ColumnElement[bool]]:
    """SQL for recall's filters: every tag given, one of the kinds given."""
    where: list[sa.ColumnElement[bool]] = [
        memory_items.c.tags.like(like_pattern(f" {tag} "), escape="\\") for tag in normalise_tags(tags)
    ]
    if kinds is not None:
        where.append(memory_items.c.kind.in_(list(kinds)))
    return where


async def _drop_orphan_vectors(conn: AsyncConnection, hashes: Sequence[str]) -> None:
    """Delete the vectors of these texts that no item holds any more."""
    if not hashes:
        return
    held = sa.select(memory_items.c.id).where(memory_items.c.content_hash == memory_vectors.c.content_hash)
    await conn.execute(
        memory_vectors.delete().where(memory_vectors.c.content_hash.in_(list(hashes)), ~held.exists())
    )


async def _purge(conn: AsyncConnection, where: sa.ColumnElement[bool], hashes: Sequence[str]) -> None:
    """Delete the items ``where`` selects, their vectors no other item shares, and their words.

    On SQLite, deleted content is overwritten with zeros (``secure_delete``) and the FTS5 index
    is merged so the words leave its segments now (a delete only adds a tombstone there).
    PostgreSQL's tsvector goes with its row."""
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        await conn.exec_driver_sql("PRAGMA secure_delete = ON")
    await conn.execute(memory_items.delete().where(where))
    await _drop_orphan_vectors(conn, hashes)
    if sqlite:
        await conn.execute(sa.text("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')"))


async def _vacuum_terms(engine: AsyncEngine) -> None:
    """PostgreSQL's keyword postings vacuumed after a bulk load: a keyword query reads them by
    index only, which skips the table only on pages VACUUM marked all-visible. Right after
    90 k items were added, before autovacuum came, the planner read the table instead: keyword
    p95 at 100 k items was 41 ms in bench/memory.py, 15 ms with this. Outside a transaction,
    as VACUUM must be."""
    async with engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await autocommit.execute(sa.text("VACUUM (ANALYZE) memory_terms"))


async def _checkpoint(engine: AsyncEngine) -> None:
    """On SQLite, copy the write-ahead log into the file and empty it, so purged words do not
    live on in the log's old pages (best effort: a reader still in the log keeps its part)."""
    if engine.dialect.name == "sqlite":
        async with engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await autocommit.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
