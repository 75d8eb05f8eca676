"""Purged means gone: the text leaves every table of the store, the keyword index's included."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.memory.longterm import LongTermMemory, Scope
from steward.testing.fake_embed import HashEmbedder

HOME = Scope(user="ada", persona="", workspace="/projects/app")
SECRET = "quixotically zanzibarian passphrase"


async def _tables_holding(engine: AsyncEngine, needle: str) -> list[str]:
    """The tables with a row whose any column holds ``needle`` (text or bytes)."""
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            names = (
                await conn.execute(sa.text("SELECT name FROM sqlite_master WHERE type = 'table'"))
            ).scalars()
        else:
            names = (
                await conn.execute(sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
            ).scalars()
        holding = []
        for name in list(names):
            rows = (await conn.execute(sa.text(f'SELECT * FROM "{name}"'))).all()
            for row in rows:
                for value in row:
                    data = value if isinstance(value, bytes) else str(value).encode()
                    if needle.encode() in data:
                        holding.append(name)
                        break
                else:
                    continue
                break
    return holding


async def test_a_purged_item_leaves_no_trace_in_any_table(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, embedder=HashEmbedder(), clock=clock)
    item = (await memory.remember(HOME, f"the vault {SECRET} opens the door", tags=["zanzibarian"])).item
    for n in range(20):  # other items keep the keyword index busy around it
        await memory.remember(HOME, f"ordinary note {n} about doors")
    await memory.index_pending()
    assert (await memory.recall(HOME, "zanzibarian"))[0].item.id == item.id
    assert "memory_items" in await _tables_holding(engine, "zanzibar")
    if engine.dialect.name == "sqlite":
        assert "memory_fts_data" in await _tables_holding(engine, "zanzibar")  # the index holds the word
    assert await memory.forget(HOME, item.id, purge=True)
    assert await _tables_holding(engine, "zanzibar") == []
    assert await _tables_holding(engine, "quixot") == []
    if engine.dialect.name == "sqlite":  # nor in the file's free pages or its write-ahead log
        database = Path(engine.url.database or "")
        for path in database.parent.glob(database.name + "*"):
            assert b"zanzibar" not in path.read_bytes(), path.name
    found = await memory.recall(HOME, "zanzibarian passphrase", k=50)
    assert item.id not in {f.item.id for f in found} and all(f.keyword_rank is None for f in found)
    assert len(found) == 20


async def test_a_hidden_item_keeps_its_text(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, clock=clock)
    item = (await memory.remember(HOME, f"the vault {SECRET}")).item
    assert await memory.forget(HOME, item.id)
    assert "memory_items" in await _tables_holding(engine, "zanzibar")
    assert await memory.recall(HOME, "zanzibarian") == []


async def test_purge_expired_leaves_no_trace_either(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, embedder=HashEmbedder(), clock=clock)
    await memory.remember(HOME, f"the vault {SECRET}", ttl_s=60)
    await memory.remember(HOME, "a note that stays")
    await memory.index_pending()
    clock.advance(61)
    assert await memory.purge_expired() == 1
    assert await _tables_holding(engine, "zanzibar") == []
    assert [i.text for i in await memory.items(HOME, include_hidden=True)] == ["a note that stays"]
