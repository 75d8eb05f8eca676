"""The keyword query's words and the weighted fusion, as recall uses them."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.embed.fusion import fuse
from steward.memory import hybrid
from steward.memory.hybrid import _keyword_plan, _selective_terms, fuse_lists, keyword_rows, query_terms
from steward.memory.longterm import LongTermMemory, Scope, scope_where
from steward.store.engine import make_engine
from steward.store.schema import memory_items, migrate


def test_function_words_are_left_out_unless_nothing_else_is_there() -> None:
    assert query_terms("How long is my daily commute to work?") == ["long", "daily", "commute", "work"]
    assert query_terms("what is it") == ["what", "is", "it"]  # only function words: searched as they are
    assert query_terms("") == []


def test_a_weight_scales_one_lists_share() -> None:
    plain = {f.key: f.score for f in fuse(["a", "b"], ["b", "a"], k=10)}
    assert plain["a"] == pytest.approx(plain["b"])
    weighted = fuse(["a", "b"], ["b", "a"], k=10, weights=(1.5, 1.0))
    assert [f.key for f in weighted] == ["a", "b"]
    assert weighted[0].score == pytest.approx(1.5 / 11 + 1 / 12)
    with pytest.raises(ValueError, match="2 weights for 1 rankings"):
        fuse(["a"], weights=(1.0, 1.0))


def test_a_heavier_keyword_list_wins_a_crossed_tie() -> None:
    ranked = fuse_lists([7, 8], [(8, 0.9), (7, 0.8)], k=10, keyword_weight=1.5)
    assert [r.id for r in ranked] == [7, 8]
    assert ranked[1].similarity == 0.9 and ranked[1].keyword_rank == 2 and ranked[1].vector_rank == 1


async def test_words_in_most_items_are_left_out_when_rarer_ones_are_there(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/m.db")
    try:
        await migrate(engine)
        memory = LongTermMemory(engine)
        scope = Scope("local", "", str(tmp_path))
        for n in range(300):
            await memory.remember(scope, f"note {n} about the weekly report")
        target = await memory.remember(scope, "the weekly report goes to Grace on Fridays")
        async with engine.connect() as conn:
            assert await _selective_terms(conn, ["weekly", "report", "grace"]) == ["grace"]
            assert await _selective_terms(conn, ["weekly", "report"]) == ["weekly", "report"]
        found = await memory.recall(scope, "who gets the weekly report, Grace?", k=3)
        assert found[0].item.id == target.item.id
    finally:
        await engine.dispose()


async def test_a_query_of_common_words_ranks_only_the_newest_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/m.db")
    try:
        await migrate(engine)
        memory = LongTermMemory(engine)
        scope = Scope("local", "", str(tmp_path))
        old = await memory.remember(
            scope, "weekly report weekly report weekly report, the oldest and best match"
        )
        for n in range(300):
            await memory.remember(scope, f"note {n} about the weekly report")
        async with engine.connect() as conn:
            assert await _keyword_plan(conn, ["weekly", "report"]) == (["weekly", "report"], False)
        found = await memory.recall(scope, "weekly report", k=3)
        assert found[0].item.id == old.item.id  # every match ranked: the densest one first
        monkeypatch.setattr(hybrid, "RANK_LIMIT", 50)
        async with engine.connect() as conn:
            assert await _keyword_plan(conn, ["weekly", "report"]) == (["weekly", "report"], True)
            rows = await keyword_rows(conn, "weekly report", [], [memory_items.c.id], limit=100)
        ids = [row["id"] for row in rows]
        assert len(ids) == 50 and min(ids) == old.item.id + 251  # the newest 50 matches, no older one
        assert old.item.id not in {f.item.id for f in await memory.recall(scope, "weekly report", k=3)}
    finally:
        await engine.dispose()


async def test_a_words_count_is_reused_until_the_store_has_grown(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/m.db")
    try:
        await migrate(engine)
        memory = LongTermMemory(engine)
        scope = Scope("local", "", str(tmp_path))
        for n in range(250):
            await memory.remember(scope, f"alpha item {n}")
        for n in range(10):
            await memory.remember(scope, f"beta thing {n}")
        async with engine.connect() as conn:  # alpha is in nearly every item: left out
            assert await _keyword_plan(conn, ["alpha", "beta"]) == (["beta"], False)
        for n in range(10):  # beta is now common (20 of 270 items), but the store grew < 20%
            await memory.remember(scope, f"beta more {n}")
        async with engine.connect() as conn:
            assert await _keyword_plan(conn, ["alpha", "beta"]) == (["beta"], False)
        for n in range(60):  # 330 items: counted again, and both words are common now
            await memory.remember(scope, f"beta again {n}")
        async with engine.connect() as conn:
            assert await _keyword_plan(conn, ["alpha", "beta"]) == (["alpha", "beta"], False)
    finally:
        await engine.dispose()


async def test_a_small_scope_is_found_under_a_large_one_that_outranks_it(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/m.db")
    try:
        await migrate(engine)
        memory = LongTermMemory(engine)
        big, small = Scope("alice", "", str(tmp_path)), Scope("bob", "", str(tmp_path))
        for n in range(300):  # short texts: BM25 puts each above bob's long ones
            await memory.remember(big, f"gamma ray {n}")
        mine = [
            (
                await memory.remember(
                    small, f"a long note {n} that mentions gamma once among " + "words " * 30
                )
            ).item.id
            for n in range(3)
        ]
        async with engine.connect() as conn:
            rows = await keyword_rows(conn, "gamma", scope_where(small), [memory_items.c.id], limit=50)
        assert sorted(row["id"] for row in rows) == sorted(
            mine
        )  # every match ranked when the top falls short
        assert {f.item.id for f in await memory.recall(small, "gamma", k=5)} == set(mine)
    finally:
        await engine.dispose()
