"""Long-term memory by keyword: write, merge by hash, recall, forget, list — on both engines."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock

from steward.config import MemorySettings
from steward.errors import StewardError
from steward.memory.longterm import LongTermMemory, Scope, scope_generation
from steward.tools.base import ToolContext

HOME = Scope(user="ada", persona="", workspace="/projects/app")


def _memory(engine: AsyncEngine, clock: Clock, **settings: object) -> LongTermMemory:
    return LongTermMemory(engine, settings=MemorySettings(**settings), clock=clock)  # type: ignore[arg-type]


async def test_remembered_text_is_recalled_by_its_words_at_once(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    await memory.remember(HOME, "The staging database runs on port 5433", tags=["infra"])
    await memory.remember(HOME, "Ada prefers short answers in British English")
    found = await memory.recall(HOME, "which port does staging use?")
    assert [f.item.text for f in found] == ["The staging database runs on port 5433"]
    assert found[0].keyword_rank == 1 and found[0].vector_rank is None and found[0].similarity is None
    assert found[0].item.tags == ("infra",) and found[0].item.scope == HOME
    assert memory.mode == "keyword" and memory.vector_backend == "none"


async def test_an_item_matching_more_words_ranks_first(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    await memory.remember(HOME, "deploys go through the release branch")
    await memory.remember(HOME, "the release checklist lives in docs/release.md and deploys need it")
    found = await memory.recall(HOME, "release checklist deploys")
    assert found[0].item.text.startswith("the release checklist")
    assert [f.keyword_rank for f in found] == [1, 2]


async def test_the_same_text_again_merges_into_the_item(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    first = await memory.remember(HOME, "Tests run with  pytest -x", tags=["tests"])
    clock.advance(10)
    again = await memory.remember(HOME, "tests RUN with pytest -x", tags=["ci", "Tests"])
    assert not first.merged and again.merged
    assert again.item.id == first.item.id and again.item.merged == 2
    assert again.item.tags == ("tests", "ci") and again.item.updated_at == clock.now
    assert [i.id for i in await memory.items(HOME)] == [first.item.id]
    assert (await memory.get(HOME, first.item.id)) == again.item


async def test_each_write_moves_its_scopes_generation_once(engine: AsyncEngine, clock: Clock) -> None:
    """A new text and a merged one each bump the scope's generation (what tells every process
    that its cached vectors are stale) exactly once, and only that scope's: on PostgreSQL the
    bump is part of the insert's own statement."""
    memory = _memory(engine, clock)
    other = Scope(user="eve", persona="", workspace="/projects/app")

    async def generations() -> tuple[int, int]:
        async with engine.connect() as conn:
            return await scope_generation(conn, HOME), await scope_generation(conn, other)

    first = (await memory.remember(HOME, "the kiln reaches 1280 degrees")).item
    assert await generations() == (1, 0)
    again = await memory.remember(HOME, "the kiln reaches 1280 degrees", tags=["pottery"])
    assert again.merged and again.item.id == first.id and again.item.tags == ("pottery",)
    assert await generations() == (2, 0)
    await memory.remember(other, "the kiln reaches 1280 degrees")
    await memory.remember(HOME, "glaze firing takes nine hours")
    assert await generations() == (3, 1)
    assert [f.item.merged for f in await memory.recall(HOME, "kiln")] == [2]


async def test_the_same_text_in_another_scope_is_its_own_item(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    mine = await memory.remember(HOME, "the build uses make")
    theirs = await memory.remember(Scope("bob", "", HOME.workspace), "the build uses make")
    assert not theirs.merged and theirs.item.id != mine.item.id


async def test_tags_and_kinds_filter_recall(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    await memory.remember(HOME, "the api key rotates monthly", tags=["security", "ops"])
    await memory.remember(HOME, "the api docs are generated", tags=["docs"], kind="session_summary")
    assert [f.item.tags for f in await memory.recall(HOME, "api", tags=["ops"])] == [("security", "ops")]
    assert [f.item.kind for f in await memory.recall(HOME, "api", kinds=["session_summary"])] == [
        "session_summary"
    ]
    assert await memory.recall(HOME, "api", tags=["security", "docs"]) == []
    assert await memory.recall(HOME, "api", tags=["%"]) == []


async def test_hidden_items_are_listed_only_on_request_and_never_recalled(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = _memory(engine, clock)
    item = (await memory.remember(HOME, "the old server is zeta-7")).item
    assert await memory.forget(HOME, item.id)
    assert not await memory.forget(HOME, item.id)  # already hidden
    assert await memory.recall(HOME, "zeta server") == []
    assert await memory.items(HOME) == []
    [hidden] = await memory.items(HOME, include_hidden=True)
    assert hidden.id == item.id and hidden.hidden_at == clock.now
    again = await memory.remember(HOME, "the old server is zeta-7")
    assert not again.merged and again.item.id != item.id  # a hidden item is not revived


async def test_forget_outside_the_scope_finds_nothing(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    item = (await memory.remember(HOME, "secret plan")).item
    other = Scope("mallory", "", HOME.workspace)
    assert not await memory.forget(other, item.id)
    assert not await memory.forget(other, item.id, purge=True)
    assert await memory.get(other, item.id) is None
    assert (await memory.get(None, item.id)) is not None
    assert [f.item.id for f in await memory.recall(HOME, "secret plan")] == [item.id]


async def test_expired_items_are_not_recalled_and_purge_expired_deletes_them(
    engine: AsyncEngine, clock: Clock
) -> None:
    memory = _memory(engine, clock, ttl_days=1)
    short = (await memory.remember(HOME, "the coffee machine is broken", ttl_s=60)).item
    day = (await memory.remember(HOME, "the coffee order is on Fridays")).item
    keep = (await memory.remember(HOME, "coffee beans come from Lisbon", ttl_s=10 * 86_400)).item
    assert short.expires_at == clock.now + 60 and day.expires_at == clock.now + 86_400
    clock.advance(61)
    assert {f.item.id for f in await memory.recall(HOME, "coffee")} == {day.id, keep.id}
    clock.advance(86_400)
    assert [f.item.id for f in await memory.recall(HOME, "coffee")] == [keep.id]
    assert await memory.purge_expired() == 2
    assert await memory.get(None, short.id) is None and await memory.get(None, day.id) is None
    assert [i.id for i in await memory.items(HOME, include_hidden=True)] == [keep.id]


async def test_items_pages_newest_first(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    ids = [(await memory.remember(HOME, f"note number {n}", kind="note")).item.id for n in range(5)]
    page = await memory.items(HOME, limit=2)
    assert [i.id for i in page] == ids[::-1][:2]
    rest = await memory.items(HOME, limit=10, before_id=page[-1].id)
    assert [i.id for i in rest] == ids[::-1][2:]
    assert await memory.items(HOME, kind="fact") == []


async def test_empty_text_and_bad_ttl_are_refused_with_the_fix(engine: AsyncEngine, clock: Clock) -> None:
    memory = _memory(engine, clock)
    with pytest.raises(StewardError, match="empty"):
        await memory.remember(HOME, "   ")
    with pytest.raises(StewardError, match="ttl_s must be positive"):
        await memory.remember(HOME, "x", ttl_s=0)


def test_a_runs_scope_is_its_user_persona_and_resolved_workspace(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    ctx = ToolContext(workspace=tmp_path / "app" / ".." / "app", persona="reviewer", user="job-user-7")
    assert Scope.of(ctx) == Scope("job-user-7", "reviewer", str((tmp_path / "app").resolve()))
