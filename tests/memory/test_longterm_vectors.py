"""Long-term memory by meaning: vectors computed in batches off the write path, merged near-
duplicates, hybrid recall and its explanation, a changed embedder, purges — on both engines."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.config import MemorySettings
from steward.embed.base import Vectors
from steward.errors import ModelError
from steward.memory import vectors
from steward.memory.longterm import LongTermMemory, Scope
from steward.store.schema import memory_items, memory_vectors
from steward.testing.fake_embed import HashEmbedder

HOME = Scope(user="ada", persona="", workspace="/projects/app")


def _memory(
    engine: AsyncEngine, clock: Clock, embedder: HashEmbedder | None = None, **settings: object
) -> LongTermMemory:
    return LongTermMemory(
        engine,
        embedder=embedder if embedder is not None else HashEmbedder(),
        settings=MemorySettings(**settings),  # type: ignore[arg-type]
        clock=clock,
    )


async def _vector_rows(engine: AsyncEngine) -> list[tuple[str, str, int]]:
    async with engine.connect() as conn:
        query = sa.select(memory_vectors.c.content_hash, memory_vectors.c.model, memory_vectors.c.dim)
        rows = (await conn.execute(query.order_by(memory_vectors.c.model))).all()
    return [(row[0], row[1], row[2]) for row in rows]


async def test_writing_calls_no_embedder_and_recall_embeds_what_is_new(
    engine: AsyncEngine, clock: Clock
) -> None:
    embedder = HashEmbedder()
    memory = _memory(engine, clock, embedder)
    for n in range(5):
        await memory.remember(HOME, f"fact number {n} about the build")
    assert embedder.calls == 0 and await _vector_rows(engine) == []
    found = await memory.recall(HOME, "build facts")
    assert len(found) == 5 and all(f.vector_rank is not None and f.similarity is not None for f in found)
    assert embedder.texts == 5 + 1  # the five items in one batch, and the query
    assert len(await _vector_rows(engine)) == 5
    await memory.recall(HOME, "build facts")
    assert embedder.texts == 5 + 2  # nothing embedded again


async def test_a_recall_of_an_unchanged_scope_reads_its_generation_once_and_counts_nothing(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = _memory(engine, clock)
    for n in range(5):
        await memory.remember(HOME, f"fact number {n} about the build")
    await memory.recall(HOME, "build facts")  # embeds the five (which changes the scope)
    await memory.recall(HOME, "build facts")  # finds nothing new to embed: clean from now on
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *rest: object) -> None:
        seen.append(statement)

    sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        found = await memory.recall(HOME, "build facts")
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert len(found) == 5 and all(f.vector_rank is not None for f in found)
    assert sum("FROM memory_scopes" in s for s in seen) == 1, seen  # it was read twice
    assert not [s for s in seen if s.startswith("SELECT count(") and "memory_items" in s], seen


async def test_items_are_embedded_in_batches_of_embed_batch(engine: AsyncEngine, clock: Clock) -> None:
    embedder = HashEmbedder()
    memory = _memory(engine, clock, embedder, embed_batch=4)
    for n in range(10):
        await memory.remember(HOME, f"note {n}: the cache is warm")
    assert await memory.index_pending() == 10
    assert embedder.calls == 3
    assert await memory.index_pending() == 0


async def test_recall_finds_by_meaning_what_the_words_miss(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    item = (await memory.remember(HOME, "PostgreSQL replicas lag on mondays")).item
    await memory.remember(HOME, "lunch is at noon on fridays")
    [found, *_] = await memory.recall(HOME, "postgres replication")
    assert found.item.id == item.id and found.keyword_rank is None and found.vector_rank == 1
    keyword_only = LongTermMemory(engine, clock=clock)
    assert await keyword_only.recall(HOME, "postgres replication") == []


CORPUS = {
    "R1": "postgres replication setup notes from the march outage review, kept by the platform team "
    "with links to every dashboard, alert, graph, ticket, chat thread and runbook we touched that "
    "long week in the old office",
    "R2": "PostgreSQL replicas setup",
    "D1": "the setup wizard asks about replication of user settings across laptops, phones and tablets "
    "at install time, then reboots twice",
    "D2": "PostgreSQL replicas replicas setups-free",
    "D3": "lunch is at noon on fridays",
}
QUERY = "postgres replication setup"


async def test_hybrid_top_two_holds_both_relevant_items_where_each_list_misses_one(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = _memory(engine, clock)
    name = {(await memory.remember(HOME, text)).item.id: key for key, text in CORPUS.items()}
    found = await memory.recall(HOME, QUERY, k=5)
    by_keyword = [name[f.item.id] for f in sorted(found, key=lambda f: f.keyword_rank or 99)]
    by_vector = [name[f.item.id] for f in sorted(found, key=lambda f: f.vector_rank or 99)]
    keyword_alone = [
        name[f.item.id] for f in await LongTermMemory(engine, clock=clock).recall(HOME, QUERY, k=5)
    ]
    assert keyword_alone == by_keyword[: len(keyword_alone)]
    assert set(by_keyword[:2]) == {"R1", "D1"}  # the words miss R2
    assert set(by_vector[:2]) == {"R2", "D2"}  # the vectors miss R1
    assert {name[f.item.id] for f in found[:2]} == {"R1", "R2"}


async def test_explain_gives_each_items_ranks_cosine_and_fused_score(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = _memory(engine, clock)
    for text in CORPUS.values():
        await memory.remember(HOME, text)
    found = await memory.recall(HOME, QUERY, k=5)
    assert sorted(f.vector_rank for f in found if f.vector_rank) == [1, 2, 3, 4, 5]
    for f in found:
        settings = MemorySettings()  # the fusion's constant and the keyword list's weight
        shares = ((settings.keyword_weight, f.keyword_rank), (1.0, f.vector_rank))
        expected = sum(w / (settings.rrf_k + r) for w, r in shares if r is not None)
        assert abs(f.score - expected) < 1e-12
        assert f.similarity is not None and -1.0 <= f.similarity <= 1.0
    by_vector = sorted(found, key=lambda f: f.vector_rank or 99)
    sims = [f.similarity or 0.0 for f in by_vector]
    assert sims == sorted(sims, reverse=True)
    assert [f.score for f in found] == sorted((f.score for f in found), reverse=True)


async def test_near_duplicates_merge_into_the_older_item(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    older = (await memory.remember(HOME, "The deploy key lives in the vault.", tags=["ops"])).item
    clock.advance(5)
    newer = await memory.remember(HOME, "the deploy key lives in the vault!", tags=["secrets"])
    other_kind = await memory.remember(HOME, "the deploy key lives in the vault", kind="session_summary")
    assert not newer.merged and newer.item.id != older.id  # a different hash: merged when embedded
    assert await memory.index_pending() == 3
    items = await memory.items(HOME, include_hidden=True)
    assert sorted(i.id for i in items) == [older.id, other_kind.item.id]
    folded = await memory.get(HOME, older.id)
    assert folded is not None and folded.merged == 2 and folded.tags == ("ops", "secrets")
    assert folded.updated_at == clock.now and folded.text == "The deploy key lives in the vault."
    assert await memory.get(None, newer.item.id) is None


async def test_distinct_texts_are_not_merged(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    await memory.remember(HOME, "the deploy key lives in the vault")
    await memory.remember(HOME, "the api key lives in the config file")
    await memory.index_pending()
    assert len(await memory.items(HOME)) == 2


async def test_near_duplicates_in_other_scopes_are_not_merged(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    await memory.remember(HOME, "The deploy key lives in the vault.")
    await memory.remember(Scope("bob", "", HOME.workspace), "the deploy key lives in the vault!")
    await memory.remember(Scope("ada", "reviewer", HOME.workspace), "the deploy key lives in the vault?")
    await memory.index_pending()
    assert len(await memory.items(None)) == 3


async def test_another_embedder_embeds_everything_again_under_its_name(
    engine: AsyncEngine, clock: Clock
) -> None:
    first = _memory(engine, clock, HashEmbedder(dim=256))
    for text in CORPUS.values():
        await first.remember(HOME, text)
    assert await first.index_pending() == 5
    second_embedder = HashEmbedder(dim=64)
    second = _memory(engine, clock, second_embedder)
    found = await second.recall(HOME, "postgresql replicas")
    assert second_embedder.texts == 5 + 1
    assert all(f.vector_rank is not None for f in found)
    assert sorted({(model, dim) for _, model, dim in await _vector_rows(engine)}) == [
        ("hash:256", 256),
        ("hash:64", 64),
    ]
    # The first embedder's vectors are still there and still its own.
    assert (await first.recall(HOME, "postgresql replicas"))[0].similarity == (
        await first.recall(HOME, "postgresql replicas")
    )[0].similarity


async def test_hidden_items_leave_the_vector_list(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    item = (await memory.remember(HOME, "PostgreSQL replicas lag on mondays")).item
    assert [f.item.id for f in await memory.recall(HOME, "postgres replicas")] == [item.id]
    assert await memory.forget(HOME, item.id)
    assert await memory.recall(HOME, "postgres replicas") == []


async def test_a_change_by_another_process_is_seen_by_the_cached_vectors(
    engine: AsyncEngine, clock: Clock
) -> None:
    mine, theirs = _memory(engine, clock), _memory(engine, clock)
    first = (await mine.remember(HOME, "PostgreSQL replicas lag on mondays")).item
    assert [f.item.id for f in await mine.recall(HOME, "postgres replicas")] == [first.id]
    second = (await theirs.remember(HOME, "postgresql replica lag alerts page the on-call")).item
    await theirs.index_pending()
    found = await mine.recall(HOME, "postgres replicas")
    assert {f.item.id for f in found} == {first.id, second.id}
    assert await theirs.forget(HOME, first.id, purge=True)
    assert [f.item.id for f in await mine.recall(HOME, "postgres replicas")] == [second.id]


async def test_expired_items_leave_the_vector_list(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    await memory.remember(HOME, "PostgreSQL replicas lag on mondays", ttl_s=60)
    assert len(await memory.recall(HOME, "postgres replicas")) == 1
    clock.advance(60)
    assert await memory.recall(HOME, "postgres replicas") == []


async def test_tags_filter_the_vector_list_too(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    tagged = (await memory.remember(HOME, "PostgreSQL replicas lag on mondays", tags=["db"])).item
    await memory.remember(HOME, "PostgreSQL replicas are in eu-west")
    assert [f.item.id for f in await memory.recall(HOME, "postgres replicas", tags=["db"])] == [tagged.id]


async def test_purge_drops_the_vector_unless_another_item_shares_the_text(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = _memory(engine, clock)
    mine = (await memory.remember(HOME, "the shared fact")).item
    theirs = (await memory.remember(Scope("bob", "", ""), "the shared fact")).item
    await memory.index_pending()
    assert len(await _vector_rows(engine)) == 1
    assert await memory.forget(HOME, mine.id, purge=True)
    assert len(await _vector_rows(engine)) == 1
    assert await memory.forget(None, theirs.id, purge=True)
    assert await _vector_rows(engine) == []


async def test_background_indexing_embeds_after_writes(engine: AsyncEngine, clock: Clock) -> None:
    embedder = HashEmbedder()
    memory = _memory(engine, clock, embedder)
    await memory.remember(HOME, "indexed in the background")
    assert await memory.start_indexing() == 1
    await memory.aclose()
    assert len(await _vector_rows(engine)) == 1


async def test_modes_and_backends_are_reported(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    assert memory.mode == "hybrid"
    assert await memory.backend() == "numpy"
    assert await LongTermMemory(engine, clock=clock).backend() == "none"
    await memory.recall(HOME, "anything")
    assert memory.vector_backend == "numpy"  # SQLite, or PostgreSQL without pgvector
    async with engine.connect() as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(memory_items))).scalar() == 0


class _BrokenEmbedder(HashEmbedder):
    """An embedding server that is down."""

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        raise ModelError("embedding server unreachable: connection refused", provider="openai")


async def test_recall_keeps_its_words_when_the_embedder_fails(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock, _BrokenEmbedder())
    item = (await memory.remember(HOME, "the staging database runs on port 5433")).item
    [found] = await memory.recall(HOME, "staging port")
    assert found.item.id == item.id and found.keyword_rank == 1 and found.vector_rank is None


async def test_a_text_embedded_before_joins_the_cached_vectors_at_once(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = _memory(engine, clock)
    await memory.remember(Scope("bob", "", ""), "PostgreSQL replicas lag on mondays")
    await memory.remember(HOME, "lunch is at noon")
    await memory.recall(HOME, "lunch")  # embeds both, caches HOME's vectors
    mine = (await memory.remember(HOME, "PostgreSQL replicas lag on mondays")).item  # its vector exists
    [found, *_] = await memory.recall(HOME, "postgres replicas")
    assert found.item.id == mine.id and found.vector_rank == 1


async def test_scopes_beyond_the_cache_bound_are_reloaded_not_mixed(
    engine: AsyncEngine, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "MAX_CACHED_SCOPES", 1)
    memory = _memory(engine, clock)
    scopes = [Scope(f"user{n}", "", HOME.workspace) for n in range(3)]
    ids = [
        (await memory.remember(scope, f"PostgreSQL replicas of user{n}")).item.id
        for n, scope in enumerate(scopes)
    ]
    for _ in range(2):
        for scope, item_id in zip(scopes, ids, strict=True):
            assert [f.item.id for f in await memory.recall(scope, "postgres replicas")] == [item_id]
