"""Listing a scope's items reads the page it shows: an index walks the scope newest first and
stops at the limit (no sort of the whole scope), and migration 13 adds that index to older stores."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.cli.memory import _rows, _where
from steward.memory.batch import NewItem
from steward.memory.longterm import LongTermMemory, Scope, page_query
from steward.store.schema import LATEST_VERSION, migrate, schema_version

SCOPE = Scope(user="u", persona="", workspace="/w")
OTHER = Scope(user="u", persona="", workspace="/elsewhere")


async def test_pages_of_a_scope_come_newest_first_and_meet_end_to_end(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(SCOPE, [NewItem(f"note number {n}", kind="fact") for n in range(620)])
    await memory.remember_many(OTHER, [NewItem(f"other note {n}", kind="fact") for n in range(30)])
    pages, before = [], None
    for _ in range(20):  # 620 items in pages of 50: 13 pages
        page = await memory.items(SCOPE, limit=50, before_id=before)
        if not page:
            break
        pages.append(page)
        before = page[-1].id
    ids = [item.id for page in pages for item in page]
    assert len(pages) == 13 and len(ids) == 620 and ids == sorted(ids, reverse=True)
    assert pages[0][0].text == "note number 619"
    # `steward memory list` reads its own pages (of 500): the same items, in the same order.
    listed = [item.id async for item in _rows(engine, _where("u", "", Path("/w"), None, False), 700)]
    assert listed == ids


async def test_a_scopes_page_is_read_from_an_index_not_sorted(engine: AsyncEngine) -> None:
    query = page_query(SCOPE, kind=None, visible_at=1.0, limit=50, before_id=1_000)
    sql = str(query.compile(engine.sync_engine, compile_kwargs={"literal_binds": True}))
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            plan = " | ".join(
                str(row[-1]) for row in await conn.execute(sa.text("EXPLAIN QUERY PLAN " + sql))
            )
            assert "ix_memory_scope_id" in plan and "TEMP B-TREE" not in plan, plan
        else:
            # An empty table would be read whole; without that choice, no sort may be needed.
            await conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
            plan = " | ".join(row[0] for row in await conn.execute(sa.text("EXPLAIN " + sql)))
            assert "ix_memory_scope_id" in plan and "Sort" not in plan, plan


async def test_migration_13_gives_an_older_store_the_index(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.text("DROP INDEX ix_memory_scope_id"))
        await conn.execute(schema_version.update().values(version=12))
    assert await migrate(engine) == LATEST_VERSION - 12  # 13, and those after it
    async with engine.connect() as conn:
        names = await conn.run_sync(lambda c: {i["name"] for i in sa.inspect(c).get_indexes("memory_items")})
    assert "ix_memory_scope_id" in names
