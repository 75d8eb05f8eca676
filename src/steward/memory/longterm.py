"""Long-term memory: items an agent remembered or a run archived, recalled by words and meaning.

Every item belongs to a ``Scope`` (user, persona, workspace), and every query here puts that
scope in its SQL ``WHERE``: one scope's items cannot reach another's run, whatever the query.
Only the operator's tools (CLI, API) pass ``scope=None``, meaning every scope.

A write is one short transaction and calls no model: the text is keyword-indexed at once (FTS5
triggers on SQLite, a generated tsvector on PostgreSQL). The same text again in the same scope
(equal ``content_hash``) is not a new row: the existing item is bumped (``merged``, tags,
``updated_at``). Vectors come later, in batches (``index_pending``, which ``recall`` also runs
first); a newly embedded item within ``merge_similarity`` of an older one of its scope is folded
into it, its row deleted.

Recall is the keyword list fused with the vector list by reciprocal rank fusion
(``steward.memory.hybrid``); without an embedder it is the keyword list alone. Hidden items
(``forget``) are kept and listable but never recalled; purged ones are deleted with their keyword
index entry and, when no other item shares their text, their vector. Expired items are never
recalled and ``purge_expired`` deletes them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.config import MemorySettings
from steward.embed.base import content_hash
from steward.errors import StewardError
from steward.memory.hybrid import CANDIDATES, Ranked, fuse_lists, keyword_ids
from steward.store.engine import like_pattern, write_transaction
from steward.store.schema import memory_items, memory_scopes, memory_vectors

if TYPE_CHECKING:
    from steward.embed.base import Embedder
    from steward.memory.vectors import VectorIndex
    from steward.tools.base import ToolContext

_DAY_S = 86_400.0
#: Items ``recall`` embeds before searching, so fresh items are never missed (more: ``index_pending``).
RECALL_INDEX_LIMIT = 2_000


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory: a user ("local" for the CLI), a persona ("" for none) and a workspace."""

    user: str
    persona: str
    workspace: str

    @classmethod
    def of(cls, ctx: ToolContext) -> Scope:
        return cls(user=ctx.user, persona=ctx.persona, workspace=str(ctx.workspace))


@dataclass(frozen=True, slots=True)
class MemoryItem:
    id: int
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


def _tags_column(tags: Sequence[str]) -> str:
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


def visible_where(now: float) -> list[sa.ColumnElement[bool]]:
    """The SQL for items recall may return: not hidden, not expired."""
    items = memory_items
    return [items.c.hidden_at.is_(None), sa.or_(items.c.expires_at.is_(None), items.c.expires_at > now)]


def _item(row: Mapping[Any, Any]) -> MemoryItem:
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


_ITEM_COLUMNS = [c for c in memory_items.c if c.name != "tsv"]


async def bump_generation(conn: AsyncConnection, scope: Scope) -> None:
    """Mark ``scope`` changed, so every process's cached copy of its vectors is reloaded."""
    key = {"scope_user": scope.user, "scope_persona": scope.persona, "scope_workspace": scope.workspace}
    changed = await conn.execute(
        memory_scopes.update()
        .where(*(memory_scopes.c[name] == value for name, value in key.items()))
        .values(generation=memory_scopes.c.generation + 1)
    )
    if changed.rowcount == 0:
        await conn.execute(memory_scopes.insert().values(**key, generation=1))


async def scope_generation(conn: AsyncConnection, scope: Scope) -> int:
    query = sa.select(memory_scopes.c.generation).where(
        memory_scopes.c.scope_user == scope.user,
        memory_scopes.c.scope_persona == scope.persona,
        memory_scopes.c.scope_workspace == scope.workspace,
    )
    return (await conn.execute(query)).scalar_one_or_none() or 0


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
        self._index: VectorIndex | None = None
        self._index_lock = asyncio.Lock()
        self._background: asyncio.Task[int] | None = None

    @property
    def mode(self) -> str:
        """ "keyword" (no embedder) or "hybrid"."""
        return "keyword" if self._embedder is None else "hybrid"

    @property
    def vector_backend(self) -> str:
        """ "none" without an embedder; else the backend found at first use ("numpy" until then)."""
        if self._embedder is None:
            return "none"
        return "numpy" if self._index is None else self._index.name

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

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
        text = text.strip()
        if not text:
            raise StewardError("nothing to remember: the text is empty; give the fact to keep")
        if ttl_s is not None and ttl_s <= 0:
            raise StewardError(f"ttl_s must be positive (got {ttl_s}); leave it out to keep the item")
        now = self._clock()
        if ttl_s is None and self._settings.ttl_days is not None:
            ttl_s = self._settings.ttl_days * _DAY_S
        expires_at = None if ttl_s is None else now + ttl_s
        clean_tags = normalise_tags(tags)
        digest = content_hash(text)
        async with write_transaction(self._engine) as conn:
            same = (
                (
                    await conn.execute(
                        sa.select(*_ITEM_COLUMNS)
                        .where(
                            *scope_where(scope), *visible_where(now), memory_items.c.content_hash == digest
                        )
                        .order_by(memory_items.c.id)
                        .limit(1)
                    )
                )
                .mappings()
                .one_or_none()
            )
            if same is not None:
                item = await self._fold(conn, _item(same), clean_tags, now, expires_at=expires_at, count=1)
                await bump_generation(conn, scope)
                return Written(item, merged=True)
            values: dict[str, Any] = {
                "scope_user": scope.user,
                "scope_persona": scope.persona,
                "scope_workspace": scope.workspace,
                "kind": kind,
                "text": text,
                "tags": _tags_column(clean_tags),
                "content_hash": digest,
                "run_id": run_id,
                "session_id": session_id,
                "created_at": now,
                "updated_at": now,
                "expires_at": expires_at,
                "hidden_at": None,
                "merged": 1,
            }
            new_id = (
                await conn.execute(memory_items.insert().values(**values).returning(memory_items.c.id))
            ).scalar_one()
            await bump_generation(conn, scope)
        return Written(_item({**values, "id": new_id}), merged=False)

    async def _fold(
        self,
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
            "tags": _tags_column(union),
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

    async def forget(self, scope: Scope | None, item_id: int, *, purge: bool = False) -> bool:
        """Hide the item (kept, never recalled), or with ``purge`` delete it, its keyword entry and
        its vector when no other item has the same text. False when no such item is in ``scope``
        (or, without ``purge``, it is already hidden)."""
        where = [memory_items.c.id == item_id, *(scope_where(scope) if scope is not None else [])]
        async with write_transaction(self._engine) as conn:
            row = (await conn.execute(sa.select(*_ITEM_COLUMNS).where(*where))).mappings().one_or_none()
            if row is None:
                return False
            item = _item(row)
            if purge:
                await conn.execute(memory_items.delete().where(memory_items.c.id == item_id))
                await _drop_orphan_vectors(conn, [row["content_hash"]])
                await _flush_keyword_index(conn)
            elif item.hidden_at is not None:
                return False
            else:
                now = self._clock()
                await conn.execute(
                    memory_items.update()
                    .where(memory_items.c.id == item_id)
                    .values(hidden_at=now, updated_at=now)
                )
            await bump_generation(conn, item.scope)
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
                    ).where(expired)
                )
            ).all()
            if not rows:
                return 0
            await conn.execute(memory_items.delete().where(expired))
            await _drop_orphan_vectors(conn, sorted({row[3] for row in rows}))
            await _flush_keyword_index(conn)
            for scope in {Scope(row[0], row[1], row[2]) for row in rows}:
                await bump_generation(conn, scope)
        return len(rows)

    # --- reading --------------------------------------------------------------------------------

    async def get(self, scope: Scope | None, item_id: int) -> MemoryItem | None:
        """The item, hidden or expired too (the operator's ``show``), when it is in ``scope``."""
        where = [memory_items.c.id == item_id, *(scope_where(scope) if scope is not None else [])]
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(*_ITEM_COLUMNS).where(*where))).mappings().one_or_none()
        return None if row is None else _item(row)

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
        where = scope_where(scope) if scope is not None else []
        if not include_hidden:
            where += visible_where(self._clock())
        if kind is not None:
            where.append(memory_items.c.kind == kind)
        if before_id is not None:
            where.append(memory_items.c.id < before_id)
        query = (
            sa.select(*_ITEM_COLUMNS).where(*where).order_by(memory_items.c.id.desc()).limit(max(limit, 0))
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query.limit(max(limit, 0)))).mappings().all()
        return [_item(row) for row in rows]

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
        where = [*scope_where(scope), *visible_where(now), *_filters(tags, kinds)]
        vector_hits: list[tuple[int, float]] = []
        if self._embedder is not None and query.strip():
            await self.index_pending(limit=RECALL_INDEX_LIMIT)
            vector_hits = await self._vector_hits(scope, query, where)
        async with self._engine.connect() as conn:
            keyword = await keyword_ids(conn, query, where)
        ranked = fuse_lists(keyword, vector_hits, {})
        return await self._found(ranked[: max(k, 0) * 4 + CANDIDATES], where, k)

    async def _found(self, ranked: list[Ranked], where: list[sa.ColumnElement[bool]], k: int) -> list[Found]:
        # The items are read back under the same WHERE: a candidate hidden, purged or expired in
        # the meantime, or (were a backend ever wrong) of another scope, is dropped here.
        if not ranked:
            return []
        ids = [r.id for r in ranked]
        async with self._engine.connect() as conn:
            rows = (
                (await conn.execute(sa.select(*_ITEM_COLUMNS).where(memory_items.c.id.in_(ids), *where)))
                .mappings()
                .all()
            )
        by_id = {row["id"]: _item(row) for row in rows}
        updated = {item_id: item.updated_at for item_id, item in by_id.items()}
        ordered = sorted(
            (r for r in ranked if r.id in by_id), key=lambda r: (-r.score, -updated[r.id], -r.id)
        )
        return [Found(by_id[r.id], r.score, r.keyword_rank, r.vector_rank, r.similarity) for r in ordered[:k]]

    # --- vectors (keyword-only until an embedder is given) -----------------------------------------

    async def index_pending(self, *, limit: int = 10_000) -> int:
        """Embed the items lacking a vector under the embedder's name; return how many texts."""
        if self._embedder is None:
            return 0
        return 0

    async def _vector_hits(
        self, scope: Scope, query: str, where: list[sa.ColumnElement[bool]]
    ) -> list[tuple[int, float]]:
        return []


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


async def _flush_keyword_index(conn: AsyncConnection) -> None:
    """On SQLite, merge the FTS5 index so deleted words leave its segments now (a delete only
    adds a tombstone); PostgreSQL's tsvector goes with its row."""
    if conn.dialect.name == "sqlite":
        await conn.execute(sa.text("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')"))
