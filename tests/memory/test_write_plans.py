"""A write costs the same in a store of a thousand items and of a million: none of its statements
walks the scope. SQLite plans without statistics (no ANALYZE), so a plan read on a small store is
the plan it keeps on a large one; at 100 k items the scope's walk made ``remember`` 21 ms."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.memory.conftest import Clock, open_engine

from steward.memory.batch import NewItem
from steward.memory.longterm import LongTermMemory, Scope

HOME = Scope(user="ada", persona="", workspace="/projects/app")


@contextmanager
def statements(engine: AsyncEngine) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement the engine runs meanwhile, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if not many:  # an executemany is a plain INSERT of given rows
            seen.append((statement, parameters))

    sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", record)


async def item_plans(engine: AsyncEngine, seen: Sequence[tuple[str, Any]]) -> list[str]:
    """SQLite's plan for each recorded statement that reads ``memory_items``, one line a step."""
    out: list[str] = []
    async with engine.connect() as conn:
        for statement, parameters in seen:
            if "memory_items" not in statement or not statement.lstrip().upper().startswith(
                ("SELECT", "INSERT")
            ):
                continue
            plan = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            out.extend(
                f"{row._mapping['detail']}  <- {statement.split(chr(10))[0][:60]}" for row in plan.all()
            )
    return out


def walks(plans: Sequence[str]) -> list[str]:
    return [p for p in plans if "ix_memory_scope" in p or p.startswith("SCAN memory_items")]


async def test_remember_finds_the_same_text_by_its_hash_not_by_walking_the_scope(
    tmp_path: Path, clock: Clock
) -> None:
    engine = await open_engine(f"sqlite:///{tmp_path / 'steward.db'}")
    try:
        memory = LongTermMemory(engine, clock=clock)
        await memory.remember(HOME, "The staging database runs on port 5433")
        with statements(engine) as seen:
            fresh = await memory.remember(HOME, "Deploys need two approvals")
            again = await memory.remember(HOME, "deploys need two  approvals")
        assert not fresh.merged and again.merged  # both paths ran: insert, then fold
        plans = await item_plans(engine, seen)
        assert any("ix_memory_hash" in p for p in plans), plans
        assert walks(plans) == []
    finally:
        await engine.dispose()


async def test_remember_many_looks_its_texts_up_by_hash(tmp_path: Path, clock: Clock) -> None:
    engine = await open_engine(f"sqlite:///{tmp_path / 'steward.db'}")
    try:
        memory = LongTermMemory(engine, clock=clock)
        await memory.remember(HOME, "Lint with ruff")
        with statements(engine) as seen:
            written = await memory.remember_many(
                HOME, [NewItem("lint with RUFF"), NewItem("Format with ruff")]
            )
        assert [w.merged for w in written] == [True, False]
        plans = await item_plans(engine, seen)
        assert any("ix_memory_hash" in p for p in plans), plans
        assert walks(plans) == []
    finally:
        await engine.dispose()
