"""The store suite runs against SQLite (a temp file) and, when configured, PostgreSQL.

PostgreSQL tests use a private database created for the session and dropped after it, with
the store's tables dropped before each test, so they never touch anyone else's data.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa

from steward.store.events import EventStore, open_store

POSTGRES_ENV = "STEWARD_TEST_POSTGRES_URL"


async def _execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip("set STEWARD_TEST_POSTGRES_URL to run the PostgreSQL tests")
    name = f"steward_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_execute(base, f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_execute(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database, for each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/state/steward.db"
    url: str = request.getfixturevalue("postgres_url")
    asyncio.run(
        _execute(
            url,
            "DROP TABLE IF EXISTS events, runs, sessions, memory_blocks, archive, jobs, channel_messages, channel_signatures, "
            "schema_version CASCADE",
        )
    )
    return url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[EventStore]:
    opened = await open_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()
