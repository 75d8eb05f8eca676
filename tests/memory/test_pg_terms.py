"""PostgreSQL's keyword postings (``memory_terms``) follow every change to an item, are built for
a store made before them, and rank under the scope's own WHERE."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.memory.batch import NewItem
from steward.memory.hybrid import CANDIDATES
from steward.memory.longterm import LongTermMemory, Scope
from steward.store.schema import LATEST_VERSION, current_version, migrate

HOME = Scope(user="ada", persona="", workspace="/projects/app")
OTHER = Scope(user="eve", persona="", workspace="/projects/app")


def _postgres_only(engine: AsyncEngine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's keyword postings")


async def _lexemes(engine: AsyncEngine, item_id: int) -> set[str]:
    async with engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT lexeme FROM memory_terms WHERE item_id = :id"), {"id": item_id}
        )
        return set(found.scalars())


async def test_postings_follow_writes_merges_and_deletes(engine: AsyncEngine, clock: Clock) -> None:
    _postgres_only(engine)
    memory = LongTermMemory(engine, clock=clock)
    item = (await memory.remember(HOME, "the boiler service is booked with Hannah")).item
    assert {"boiler", "servic", "book", "hannah"} <= await _lexemes(engine, item.id)
    # The same text again with a tag is a merge: the tag's lexeme joins the item's postings.
    merged = await memory.remember(HOME, "the boiler service is booked with Hannah", tags=["plumbing"])
    assert merged.merged and "plumb" in await _lexemes(engine, item.id)
    assert [f.item.id for f in await memory.recall(HOME, "plumbing")] == [item.id]
    # Hidden: the postings stay (the item is listable) but recall never returns it.
    assert await memory.forget(HOME, item.id)
    assert await _lexemes(engine, item.id) and await memory.recall(HOME, "boiler") == []
    assert await memory.forget(HOME, item.id, purge=True)
    assert await _lexemes(engine, item.id) == set()
    brief = (await memory.remember(HOME, "the parking permit renews in March", ttl_s=60)).item
    assert "permit" in await _lexemes(engine, brief.id)
    clock.advance(120)
    assert await memory.purge_expired() == 1
    assert await _lexemes(engine, brief.id) == set()


async def test_a_store_made_before_the_postings_gets_them(engine: AsyncEngine, clock: Clock) -> None:
    _postgres_only(engine)
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(HOME, [NewItem(f"note {n} about the weekly report") for n in range(30)])
    target = (await memory.remember(HOME, "the weekly report goes to Grace on Fridays")).item
    async with engine.begin() as conn:  # the store as version 13 left it: no postings table
        await conn.execute(sa.text("DROP TABLE memory_terms"))
        await conn.execute(sa.text("DROP FUNCTION memory_terms_sync() CASCADE"))
        await conn.execute(sa.text("UPDATE schema_version SET version = 13"))
    assert await migrate(engine) == LATEST_VERSION - 13
    assert await current_version(engine) == LATEST_VERSION
    assert "grace" in await _lexemes(engine, target.id)
    assert [f.item.id for f in await memory.recall(HOME, "who gets the report, Grace?", k=1)] == [target.id]
    later = (await memory.remember(HOME, "Grace moved the report to Mondays")).item  # the trigger again
    assert "monday" in await _lexemes(engine, later.id)


async def test_a_scope_beyond_the_store_s_best_matches_still_finds_its_own(
    engine: AsyncEngine, clock: Clock
) -> None:
    """Another scope holds the store's best matches (more than the first pass ranks): this
    scope's weaker match is still found, and neither scope ever sees the other's items."""
    _postgres_only(engine)
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(OTHER, [NewItem(f"invoice invoice {n}: invoice overdue") for n in range(400)])
    mine = (await memory.remember(HOME, "a long note that mentions one invoice among many other words")).item
    async with engine.begin() as conn:
        await conn.execute(sa.text("ANALYZE memory_items"))
    found = await memory.recall(HOME, "overdue invoice", k=5)
    assert [f.item.id for f in found] == [mine.id]
    # Asked from the other scope, words only this scope's item holds find nothing at all.
    assert await memory.recall(OTHER, "one invoice among many other words", k=5) == []
    theirs = await memory.recall(OTHER, "invoice", k=CANDIDATES)
    assert len(theirs) == CANDIDATES and all(f.item.scope == OTHER for f in theirs)
