"""Many long-term memory items written in one transaction: ``LongTermMemory.remember_many`` (new
items, as ``remember`` takes them) and ``restore`` (items as ``steward memory export`` wrote
them, with their own times, counts and hidden state).

The rules are ``remember``'s: a visible item whose text is already visible in its scope (equal
``content_hash``) is folded into the older item, also between items of the same batch; each
scope's generation is bumped once. Everything is checked before the first write, and the writes
are one transaction: a batch is stored whole or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from steward.embed.base import content_hash
from steward.errors import StewardError
from steward.memory.longterm import (
    ITEM_COLUMNS,
    KeptItem,
    MemoryItem,
    Scope,
    Written,
    bump_generation,
    fold_into,
    new_item,
    normalise_tags,
    row_item,
    row_values,
    scope_unindexed,
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


def drafts_of(
    scope: Scope, items: Sequence[NewItem], now: float, ttl_s: Callable[[float | None], float | None]
) -> list[KeptItem]:
    """``remember``'s checks and defaults on each item (``ttl_s``: an item's lifetime, with the
    default applied); an error names the item (1-based)."""
    out: list[KeptItem] = []
    for number, item in enumerate(items, start=1):
        try:
            kept = new_item(
                scope,
                item.text,
                kind=item.kind,
                tags=item.tags,
                run_id=item.run_id,
                session_id=item.session_id,
                ttl_s=ttl_s(item.ttl_s),
                now=now,
            )
        except StewardError as exc:
            raise StewardError(f"item {number}: {exc}") from None
        out.append(kept)
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
    values = [row_values(item) for item in fresh]
    insert = memory_items.insert().returning(memory_items.c.id, sort_by_parameter_order=True)
    ids = (await conn.execute(insert, values)).scalars().all()
    for row, item_id, positions in zip(values, ids, fresh_of, strict=True):
        stored = row_item({**row, "id": item_id})
        for number, index in enumerate(positions):
            out[index] = Written(stored, merged=number > 0)


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
