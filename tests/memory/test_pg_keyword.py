"""PostgreSQL's keyword list leaves out words found in most items when rarer ones are there, as
SQLite's does: each word's share read from the planner's statistics of the tsv column."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.memory.batch import NewItem
from steward.memory.longterm import LongTermMemory, Scope
from steward.memory.pgsearch import selective_lexemes

HOME = Scope(user="ada", persona="", workspace="/projects/app")


async def _chosen(engine: AsyncEngine, terms: list[str]) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(sa.select(selective_lexemes(terms)))).scalar_one())


async def _analyze(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.text("ANALYZE memory_items"))


async def test_common_words_are_left_out_when_rarer_ones_are_there(engine: AsyncEngine, clock: Clock) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's keyword ranking")
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(HOME, [NewItem(f"note {n} about the weekly reports") for n in range(300)])
    target = await memory.remember(HOME, "the weekly report goes to Grace on Fridays")
    await _analyze(engine)
    assert await _chosen(engine, ["weekly", "report", "grace"]) == ["grace"]
    assert await _chosen(engine, ["weekly", "reporting"]) == ["report", "week"]  # all common: all kept
    # A word PostgreSQL drops (it has no lexeme) is never kept alone.
    assert await _chosen(engine, ["weekly", "the"]) == ["week"]
    found = await memory.recall(HOME, "who gets the weekly report, Grace?", k=3)
    assert found[0].item.id == target.item.id


async def test_a_small_or_unanalysed_store_keeps_every_word(engine: AsyncEngine, clock: Clock) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's keyword ranking")
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(HOME, [NewItem(f"note {n} about the weekly report") for n in range(300)])
    assert await _chosen(engine, ["weekly", "grace"]) == ["grace", "week"]  # no statistics yet
    async with engine.begin() as conn:
        await conn.execute(sa.text("DELETE FROM memory_items WHERE id > 50"))
    await _analyze(engine)
    assert await _chosen(engine, ["weekly", "grace"]) == ["grace", "week"]  # 50 items


async def test_a_query_of_operators_and_quotes_is_only_words(engine: AsyncEngine, clock: Clock) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's keyword ranking")
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(HOME, [NewItem(f"note {n} about the weekly report") for n in range(300)])
    await memory.remember(HOME, "O'Brien's key is under the mat")
    await _analyze(engine)
    found = await memory.recall(HOME, "weekly' OR 1=1); -- brien's key:*", k=3)
    assert found[0].item.text == "O'Brien's key is under the mat"


def _scans_of(node: dict[str, Any], relation: str) -> int:
    """How many times the plan under ``node`` read ``relation`` (its executed loops)."""
    own = int(node.get("Actual Loops", 0)) if node.get("Relation Name") == relation else 0
    return own + sum(_scans_of(child, relation) for child in node.get("Plans", []))


async def test_the_statistics_are_read_once_a_recall_however_many_words(
    engine: AsyncEngine, clock: Clock
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's keyword ranking")
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(HOME, [NewItem(f"note {n} about the weekly report") for n in range(300)])
    target = await memory.remember(HOME, "the weekly report goes to Grace on Fridays")
    await _analyze(engine)
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        found = await memory.recall(
            HOME, "weekly report notes: does Grace get it on Fridays or Mondays?", k=1
        )
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert found[0].item.id == target.item.id
    # One statement: it ranked every match (one item holds "grace"), so the second pass, over
    # every match when the best ones leave too few in the scope, would rank the same again.
    ranked = [(s, p) for s, p in seen if "memory_terms" in s]
    assert len(ranked) == 1
    for statement, parameters in ranked:
        async with engine.connect() as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            assert raw is not None
            value = await raw.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", *parameters)
        [plan] = value if isinstance(value, list) else json.loads(value)  # the driver may decode it
        # Before: once per word, and again for the ranking (16 reads for these 8 words).
        assert _scans_of(plan["Plan"], "pg_statistic") == 1


async def test_a_query_of_common_words_ranks_only_the_newest_matches(
    engine: AsyncEngine, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on SQLite: every word common, only the newest matches are ranked, however well an older
    item matches; a rarer word still finds its item wherever it is."""
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's keyword ranking")
    from steward.memory import hybrid
    from steward.memory.hybrid import keyword_rows
    from steward.store.schema import memory_items

    memory = LongTermMemory(engine, clock=clock)
    old = await memory.remember(HOME, "weekly report weekly report weekly report, Grace's favourite")
    await memory.remember_many(HOME, [NewItem(f"note {n} about the weekly report") for n in range(300)])
    await _analyze(engine)
    found = await memory.recall(HOME, "weekly report", k=3)
    assert found[0].item.id == old.item.id  # 301 matches, under RANK_LIMIT: all ranked
    monkeypatch.setattr(hybrid, "RANK_LIMIT", 50)
    async with engine.connect() as conn:
        rows = await keyword_rows(conn, "weekly report", [], [memory_items.c.id], limit=100)
    ids = [row["id"] for row in rows]
    # Two common words: each word's 25th newest match bounds the ranked ones (both are in every
    # item here, so the 25 newest items).
    assert len(ids) == 25 and min(ids) == old.item.id + 276
    assert old.item.id not in {f.item.id for f in await memory.recall(HOME, "weekly report", k=3)}
    # A rare word is ranked over all its matches: the oldest item comes back.
    found = await memory.recall(HOME, "weekly report for grace", k=1)
    assert found[0].item.id == old.item.id
