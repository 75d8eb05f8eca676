"""Fixtures of the long-term memory tests: a migrated store on each engine, and a clock to move."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.store.engine import make_engine
from steward.store.schema import migrate


class Clock:
    """A clock the test moves by hand (expiry without waiting)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def open_engine(url: str) -> AsyncEngine:
    database = sa.make_url(url).database
    if url.startswith("sqlite") and database:
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = make_engine(url)
    await migrate(engine)
    return engine


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated store, on SQLite and (when configured) PostgreSQL."""
    engine = await open_engine(db_url)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()
