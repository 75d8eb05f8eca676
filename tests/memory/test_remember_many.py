"""``remember_many``: many items in one transaction, with ``remember``'s rules — on both engines."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.config import MemorySettings
from steward.errors import StewardError
from steward.memory.batch import NewItem
from steward.memory.longterm import KeptItem, LongTermMemory, Scope, scope_generation
from steward.store.schema import memory_items
from steward.testing.fake_embed import HashEmbedder

HOME = Scope(user="ada", persona="", workspace="/projects/app")
AWAY = Scope(user="bob", persona="", workspace="/projects/app")


async def _count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(memory_items))).scalar_one())


async def test_many_items_are_written_and_recalled_by_their_words(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, clock=clock)
    written = await memory.remember_many(
        HOME,
        [
            NewItem("The staging database runs on port 5433", tags=("infra",)),
            NewItem("Deploys need two approvals", kind="rule", session_id="s1"),
        ],
    )
    assert [w.merged for w in written] == [False, False]
    assert written[0].item.tags == ("infra",) and written[1].item.kind == "rule"
    [found] = await memory.recall(HOME, "which port does staging use?")
    assert found.item.id == written[0].item.id
    assert await memory.get(HOME, written[1].item.id) == written[1].item


async def test_the_same_text_merges_into_an_existing_item_and_within_the_batch(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = LongTermMemory(engine, clock=clock)
    first = await memory.remember(HOME, "Tests run with pytest -x", tags=["tests"])
    clock.advance(5)
    written = await memory.remember_many(
        HOME,
        [
            NewItem("tests RUN with  pytest -x", tags=("ci",)),
            NewItem("Lint with ruff", tags=("a",)),
            NewItem("lint with RUFF", tags=("b",)),
        ],
    )
    assert [w.merged for w in written] == [True, False, True]
    assert written[0].item.id == first.item.id and written[0].item.merged == 2
    assert written[0].item.tags == ("tests", "ci")
    assert written[1].item.id == written[2].item.id
    lint = await memory.get(HOME, written[1].item.id)
    assert lint is not None and lint.merged == 2 and lint.tags == ("a", "b")
    assert await _count(engine) == 2


async def test_the_same_text_in_another_scope_is_its_own_item(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, clock=clock)
    mine = await memory.remember(HOME, "The VPN password rotates monthly")
    [theirs] = await memory.remember_many(AWAY, [NewItem("The VPN password rotates monthly")])
    assert not theirs.merged and theirs.item.id != mine.item.id and theirs.item.scope == AWAY


async def test_a_bad_item_writes_nothing_and_names_the_item(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, clock=clock)
    with pytest.raises(StewardError, match="item 2: nothing to remember"):
        await memory.remember_many(HOME, [NewItem("fine"), NewItem("   ")])
    with pytest.raises(StewardError, match="item 1: ttl_s must be positive"):
        await memory.remember_many(HOME, [NewItem("fine", ttl_s=0)])
    assert await _count(engine) == 0


async def test_expiry_follows_ttl_and_the_default(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, settings=MemorySettings(ttl_days=1), clock=clock)
    short, default = await memory.remember_many(HOME, [NewItem("short lived", ttl_s=60), NewItem("a day")])
    assert short.item.expires_at == clock.now + 60 and default.item.expires_at == clock.now + 86_400
    clock.advance(120)
    assert [f.item.text for f in await memory.recall(HOME, "short lived")] == []


async def test_the_scope_generation_moves_once_per_batch(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, clock=clock)
    await memory.remember_many(HOME, [NewItem(f"fact number {n}") for n in range(30)])
    async with engine.connect() as conn:
        assert await scope_generation(conn, HOME) == 1


async def test_a_batch_is_seen_by_vectors_already_cached(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, embedder=HashEmbedder(), clock=clock)
    await memory.remember(HOME, "the cat sleeps on the sofa")
    assert await memory.recall(HOME, "cat sofa")  # the scope's vectors are now cached
    await memory.remember_many(HOME, [NewItem("postgres replicas lag on mondays")])
    found = await memory.recall(HOME, "postgres replicas lag on mondays")
    assert found[0].item.text == "postgres replicas lag on mondays" and found[0].vector_rank == 1


async def test_restore_keeps_times_counts_and_hidden_state(engine: AsyncEngine, clock: Clock) -> None:
    memory = LongTermMemory(engine, clock=clock)
    kept = KeptItem(
        scope=HOME,
        kind="fact",
        text="an old hidden fact",
        tags=("x",),
        run_id="r1",
        session_id=None,
        created_at=10.0,
        updated_at=20.0,
        expires_at=None,
        hidden_at=30.0,
        merged=3,
    )
    [written] = await memory.restore(
        [
            kept,
        ]
    )
    item = await memory.get(None, written.item.id)
    assert item is not None
    assert (item.created_at, item.updated_at, item.hidden_at, item.merged, item.run_id) == (
        10.0,
        20.0,
        30.0,
        3,
        "r1",
    )
    assert await memory.recall(HOME, "old hidden fact") == []
