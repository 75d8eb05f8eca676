"""Scope isolation as an attack: no query, however written, reaches another scope's items."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.memory.longterm import LongTermMemory, Scope
from steward.testing.fake_embed import HashEmbedder

VICTIM = Scope(user="alice", persona="ops", workspace="/srv/w")
# Each differs from the victim's scope in one part only, or in how the parts split.
ATTACKERS = [
    Scope(user="mallory", persona="ops", workspace="/srv/w"),
    Scope(user="alice", persona="", workspace="/srv/w"),
    Scope(user="alice", persona="ops", workspace="/srv/w2"),
    Scope(user="alice", persona="ops", workspace="/srv/"),
    Scope(user="alic", persona="eops", workspace="/srv/w"),
    Scope(user="%", persona="%", workspace="%"),
    Scope(user="alice' OR '1'='1", persona="ops", workspace="/srv/w"),
]
QUERIES = [
    "password",
    "text:*",
    "*",
    "password OR secret",
    "NEAR(password secret)",
    '"password',
    "' OR 1=1 --",
    "%",
    "_",
    "pass%",
    "tags:secret",
    "password " * 2000,  # 10 k characters and more
    "",
    "   ",
    "\x00",
    "memory_fts MATCH '*'",
    ") OR (1",
]


async def _plant(memory: LongTermMemory) -> None:
    await memory.remember(VICTIM, "the root password is hunter2, secret", tags=["secret", "%", "_"])
    await memory.remember(VICTIM, "password rotation: every 90 days", kind="session_summary")


async def check_isolation(
    engine: AsyncEngine, clock: Clock, attacker: Scope, embedder: HashEmbedder | None
) -> None:
    """Every query, tag and lookup from ``attacker`` sees only its own items."""
    memory = LongTermMemory(engine, embedder=embedder, clock=clock)
    await _plant(memory)
    await memory.remember(attacker, "an unrelated note of my own")
    for query in QUERIES:
        for tags in ((), ("secret",), ("%",), ("_",)):
            found = await memory.recall(attacker, query, k=50, tags=tags)
            assert all(f.item.scope == attacker for f in found), (query, tags)
            assert not any("hunter2" in f.item.text for f in found)
    assert all(item.scope == attacker for item in await memory.items(attacker, include_hidden=True))
    for item in await memory.items(VICTIM):
        assert await memory.get(attacker, item.id) is None
        assert not await memory.forget(attacker, item.id)
    assert len(await memory.items(VICTIM)) == 2


@pytest.mark.parametrize("attacker", ATTACKERS, ids=lambda s: f"{s.user}|{s.persona}|{s.workspace}")
async def test_no_query_from_another_scope_returns_the_victims_items(
    engine: AsyncEngine, clock: Clock, attacker: Scope
) -> None:
    await check_isolation(engine, clock, attacker, None)


@pytest.mark.parametrize("attacker", ATTACKERS[:3], ids=["user", "persona", "workspace"])
async def test_no_query_reaches_another_scope_by_meaning_either(
    engine: AsyncEngine, clock: Clock, attacker: Scope
) -> None:
    await check_isolation(engine, clock, attacker, HashEmbedder())


async def test_hostile_queries_do_not_fail_in_the_victims_own_scope(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = LongTermMemory(engine, clock=clock)
    await _plant(memory)
    for query in QUERIES:
        found = await memory.recall(VICTIM, query, k=50)
        assert all(f.item.scope == VICTIM for f in found)
    assert len(await memory.recall(VICTIM, "password " * 2000, k=50)) == 2
    assert await memory.recall(VICTIM, "") == []
