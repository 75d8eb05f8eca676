"""Sessions, their turns and core memory blocks in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from steward.errors import StewardError, StoreError
from steward.memory.block_store import MemoryStore
from steward.memory.blocks import CoreMemory, MemoryBlock, memory_toolset
from steward.memory.session_store import SessionStore
from steward.store.events import EventStore, open_store
from steward.tools.base import ToolContext


@pytest.fixture
def sessions(store: EventStore) -> SessionStore:
    return SessionStore(store._engine, where=store.where)


@pytest.fixture
def blocks(store: EventStore) -> MemoryStore:
    return MemoryStore(store._engine, where=store.where)


# --- sessions ------------------------------------------------------------------------------------


async def test_create_then_get_round_trips(sessions: SessionStore) -> None:
    created = await sessions.create("fix the tests")
    assert len(created.id) == 12 and int(created.id, 16) >= 0
    assert created.is_open and created.summary == "" and created.previous_id is None
    assert await sessions.get(created.id) == created


async def test_get_accepts_a_unique_prefix(sessions: SessionStore) -> None:
    created = await sessions.create("one")
    assert (await sessions.get(created.id[:6])).id == created.id


async def test_get_of_an_unknown_id_names_the_fix(sessions: SessionStore) -> None:
    with pytest.raises(StewardError, match=r"no session 'nope'.*steward sessions list"):
        await sessions.get("nope")


async def test_get_of_an_ambiguous_prefix_asks_for_more(sessions: SessionStore) -> None:
    await sessions.create("one")
    await sessions.create("two")
    with pytest.raises(StewardError, match="ambiguous; give more of it"):
        await sessions.get("")


async def test_get_treats_like_wildcards_literally(sessions: SessionStore) -> None:
    await sessions.create("one")
    with pytest.raises(StewardError, match="no session"):
        await sessions.get("%")


async def test_list_is_newest_first_and_bounded(sessions: SessionStore) -> None:
    made = [await sessions.create(f"s{n}") for n in range(3)]
    listed = await sessions.list()
    assert [s.id for s in listed] == [s.id for s in reversed(made)]
    assert [s.id for s in await sessions.list(limit=2)] == [made[2].id, made[1].id]


async def test_latest_open_is_the_most_recently_used_open_session(sessions: SessionStore) -> None:
    assert await sessions.latest_open() is None
    first = await sessions.create("first")
    second = await sessions.create("second")
    latest = await sessions.latest_open()
    assert latest is not None and latest.id == second.id
    await sessions.touch(first.id)
    latest = await sessions.latest_open()
    assert latest is not None and latest.id == first.id
    await sessions.close(first.id, "done")
    latest = await sessions.latest_open()
    assert latest is not None and latest.id == second.id


async def test_close_sets_summary_and_closed_at(sessions: SessionStore) -> None:
    created = await sessions.create("work")
    closed = await sessions.close(created.id, "Fixed the parser; tests pass.")
    assert closed.summary == "Fixed the parser; tests pass."
    assert closed.closed_at is not None and not closed.is_open
    again = await sessions.close(created.id, "Better summary.")
    assert again.summary == "Better summary." and again.closed_at == closed.closed_at


async def test_touch_and_close_of_an_unknown_session_name_the_fix(sessions: SessionStore) -> None:
    with pytest.raises(StewardError, match="no session 'gone'"):
        await sessions.touch("gone")
    with pytest.raises(StewardError, match="no session 'gone'"):
        await sessions.close("gone", "x")


async def test_previous_summary_comes_from_the_continued_session(sessions: SessionStore) -> None:
    first = await sessions.create("first")
    second = await sessions.create("second", previous_id=first.id[:8])
    assert second.previous_id == first.id
    assert await sessions.previous_summary(second.id) is None  # not closed yet: no summary
    await sessions.close(first.id, "User wants short answers; parser fixed.")
    assert await sessions.previous_summary(second.id) == "User wants short answers; parser fixed."
    assert await sessions.previous_summary(first.id) is None


async def test_create_refuses_an_unknown_previous_session(sessions: SessionStore) -> None:
    with pytest.raises(StewardError, match="no session 'missing'"):
        await sessions.create("x", previous_id="missing")


async def test_turns_are_the_goals_and_answers_of_the_sessions_runs(
    store: EventStore, sessions: SessionStore
) -> None:
    session = await sessions.create("chat")
    other = await sessions.create("other")
    await store.create_run("r1", goal="what is in here?", session_id=session.id)
    await store.set_status("r1", "done", "solved", output="Three files.")
    await store.create_run("x1", goal="elsewhere", session_id=other.id)
    await store.create_run("r2", goal="fix the bug", session_id=session.id)
    await store.set_status("r2", "failed")
    await store.create_run("r3", goal="and now?", session_id=session.id)
    turns = await sessions.turns(session.id)
    assert [(t.run_id, t.goal, t.output, t.status, t.end_status) for t in turns] == [
        ("r1", "what is in here?", "Three files.", "done", "solved"),
        ("r2", "fix the bug", "", "failed", None),
        ("r3", "and now?", "", "running", None),
    ]
    assert turns[0].created_at <= turns[1].created_at <= turns[2].created_at
    assert [t.run_id for t in await sessions.turns(session.id, last=2)] == ["r2", "r3"]
    assert await sessions.turns("no-such-session") == []


# --- core memory blocks --------------------------------------------------------------------------


async def test_load_of_an_empty_store_gives_the_default_blocks(blocks: MemoryStore) -> None:
    loaded = await blocks.load()
    assert loaded.blocks == CoreMemory.default().blocks


async def test_saved_blocks_load_back_with_their_definitions(blocks: MemoryStore) -> None:
    await blocks.save(MemoryBlock("user", "Name: Ada", 50))
    await blocks.save(MemoryBlock("user", "Name: Ada\nLikes tea.", 50))  # overwrites
    assert await blocks.blocks() == [MemoryBlock("user", "Name: Ada\nLikes tea.", 50)]
    loaded = await blocks.load()
    user = loaded.get("user")
    default_user = CoreMemory.default().get("user")
    assert user.value == "Name: Ada\nLikes tea."
    assert (user.limit_chars, user.description) == (default_user.limit_chars, default_user.description)
    assert loaded.labels == ("user", "project")


async def test_stored_blocks_without_a_definition_are_kept_after_the_defined_ones(
    blocks: MemoryStore,
) -> None:
    await blocks.save(MemoryBlock("style", "Tabs.", 300))
    loaded = await blocks.load(definitions=CoreMemory([MemoryBlock("user", description="who")]))
    assert loaded.labels == ("user", "style")
    assert loaded.get("style") == MemoryBlock("style", "Tabs.", 300)


async def test_scopes_are_separate(blocks: MemoryStore) -> None:
    await blocks.save(MemoryBlock("project", "agent-wide"))
    await blocks.save(MemoryBlock("project", "this session only"), scope="s1")
    assert (await blocks.load()).get("project").value == "agent-wide"
    assert (await blocks.load("s1")).get("project").value == "this session only"
    assert await blocks.delete("project", scope="s1") is True
    assert await blocks.delete("project", scope="s1") is False
    assert await blocks.blocks("s1") == []


async def test_tool_edits_persist_across_a_reopen(store_url: str, tmp_path: Path) -> None:
    async with await open_store(store_url) as store:
        saved = MemoryStore(store._engine, where=store.where)
        memory = await saved.load()
        tools = memory_toolset(memory, saved.save)
        ctx = ToolContext(workspace=tmp_path)
        result = await tools.call_tool("memory_append", {"label": "project", "text": "Tests: pytest -q"}, ctx)
        assert not result.is_error, result.content
    async with await open_store(store_url) as store:
        reloaded = await MemoryStore(store._engine).load()
    assert reloaded.get("project").value == "Tests: pytest -q"
    assert reloaded.render() == memory.render()


async def test_a_save_that_fails_raises_a_store_error_naming_the_block(
    store: EventStore, blocks: MemoryStore
) -> None:
    async with store._engine.begin() as conn:
        await conn.execute(sa.text("DROP TABLE memory_blocks"))  # any database failure will do
    with pytest.raises(StoreError, match=r"could not save memory block 'user'.*keeps its previous value"):
        await blocks.save(MemoryBlock("user", "x"))
