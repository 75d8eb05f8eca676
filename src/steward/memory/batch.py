"""Many long-term memory items written in one transaction: ``LongTermMemory.remember_many`` (new
items, as ``remember`` takes them) and ``restore`` (items as ``steward memory export`` wrote
them, with their own times, counts and hidden state).

The rules are ``remember``'s: a visible item whose text is already visible in its scope (equal
``content_hash``) is folded into the older item, also between items of the same batch; each
scope's generation is bumped once. Everything is checked before the first write, and the writes
are one transaction: a batch is stored whole or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from steward.embed.base import content_hash
from steward.errors import StewardError
from steward.memory.longterm import (
    ITEM_COLUMNS,
    MemoryItem,
    Scope,
    Written,
    bump_generation,
    fold_into,
    normalise_tags,
    row_item,
    scope_unindexed,
    tags_column,
    visible_where,
)
from steward.store.schema import memory_items

#: Content hashes looked up in one query (a bound parameter each).
_LOOKUP = 500


@dataclass(frozen=True, slots=True)
class NewItem:
    """One item for ``remember_many``: what ``remember`` takes."""

    text: str
    kind: str = "fact"
    tags: tuple[str, ...] = ()
    run_id: str | None = None
    session_id: str | None = None
    ttl_s: float | None = None


@dataclass(frozen=True, slots=True)
class KeptItem:
    """An item as exported: its scope, its times, how many writes it holds, hidden or not."""

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


def drafts_of(
    scope: Scope, items: Sequence[NewItem], now: float, ttl_default_s: float | None
) -> list[KeptItem]:
    """``remember``'s checks and defaults on each item; an error names the item (1-based)."""
    out: list[KeptItem] = []
    for number, item in enumerate(items, start=1):
        text = item.text.strip()
        if not text:
            raise StewardError(
                f"item {number}: nothing to remember: the text is empty; give the fact to keep"
            )
        ttl_s = item.ttl_s if item.ttl_s is not None else ttl_default_s
        if ttl_s is not None and ttl_s <= 0:
            raise StewardError(
                f"item {number}: ttl_s must be positive (got {ttl_s}); leave it out to keep it"
            )
        out.append(
            KeptItem(
                scope=scope,
                kind=item.kind,
                text=text,
                tags=normalise_tags(item.tags),
                run_id=item.run_id,
                session_id=item.session_id,
                created_at=now,
                updated_at=now,
                expires_at=None if ttl_s is None else now + ttl_s,
                hidden_at=None,
                merged=1,
            )
        )
    return out


def _visible(item: KeptItem, now: float) -> bool:
    return item.hidden_at is None and (item.expires_at is None or item.expires_at > now)


def _merge(into: KeptItem, other: KeptItem) -> KeptItem:
    """Two items of one batch with the same text: one item, as ``fold_into`` would make it."""
    expiry = (
        None
        if into.expires_at is None or other.expires_at is None
        else max(into.expires_at, other.expires_at)
    )
    return replace(
        into,
        tags=normalise_tags([*into.tags, *other.tags]),
        updated_at=max(into.updated_at, other.updated_at),
        expires_at=expiry,
        merged=into.merged + other.merged,
    )


async def write_many(
    conn: AsyncConnection, items: Sequence[KeptItem], now: float
) -> tuple[list[Written], dict[Scope, int]]:
    """Store ``items`` (checked) in ``conn``'s transaction; what became of each, in order, and the
    new generation of every scope written."""
    out: list[Written | None] = [None] * len(items)
    generations: dict[Scope, int] = {}
    by_scope: dict[Scope, list[int]] = {}
    for index, item in enumerate(items):
        by_scope.setdefault(item.scope, []).append(index)
    for scope, indices in by_scope.items():
        await _write_scope(conn, scope, [(i, items[i]) for i in indices], now, out)
        generations[scope] = await bump_generation(conn, scope)
    return [w for w in out if w is not None], generations


async def _write_scope(
    conn: AsyncConnection,
    scope: Scope,
    items: list[tuple[int, KeptItem]],
    now: float,
    out: list[Written | None],
) -> None:
    existing = await _visible_by_hash(
        conn, scope, sorted({content_hash(item.text) for _, item in items if _visible(item, now)}), now
    )
    fresh: list[KeptItem] = []  # to insert, in order
    fresh_of: list[list[int]] = []  # the batch positions each fresh item stands for
    slot: dict[str, int] = {}  # content hash: its visible fresh item
    for index, item in items:
        digest = content_hash(item.text)
        if _visible(item, now) and digest in existing:
            target = existing[digest]
            folded = await fold_into(
                conn, target, item.tags, now, expires_at=item.expires_at, count=item.merged
            )
            existing[digest] = folded
            out[index] = Written(folded, merged=True)
        elif _visible(item, now) and digest in slot:
            fresh[slot[digest]] = _merge(fresh[slot[digest]], item)
            fresh_of[slot[digest]].append(index)
        else:
            if _visible(item, now):
                slot[digest] = len(fresh)
            fresh.append(item)
            fresh_of.append([index])
    if not fresh:
        return
    values = [_values(item) for item in fresh]
    insert = memory_items.insert().returning(memory_items.c.id, sort_by_parameter_order=True)
    ids = (await conn.execute(insert, values)).scalars().all()
    for row, item_id, positions in zip(values, ids, fresh_of, strict=True):
        stored = row_item({**row, "id": item_id})
        for number, index in enumerate(positions):
            out[index] = Written(stored, merged=number > 0)


def _values(item: KeptItem) -> dict[str, object]:
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


async def _visible_by_hash(
    conn: AsyncConnection, scope: Scope, hashes: Sequence[str], now: float
) -> dict[str, MemoryItem]:
    """The oldest visible item of ``scope`` for each of these texts that has one."""
    found: dict[str, MemoryItem] = {}
    for start in range(0, len(hashes), _LOOKUP):
        chunk = list(hashes[start : start + _LOOKUP])
        query = (
            sa.select(*ITEM_COLUMNS)
            .where(*scope_unindexed(scope), *visible_where(now), memory_items.c.content_hash.in_(chunk))
            .order_by(memory_items.c.id.desc())  # the oldest last: it wins below
        )
        for row in (await conn.execute(query)).mappings().all():
            found[row["content_hash"]] = row_item(row)
    return found
