"""Fixtures for every test."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa


@pytest.fixture(autouse=True, scope="session")
def _checkpoints_out_of_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Shadow repositories of test runs go to a temporary state directory, never the user's."""
    import os

    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))


POSTGRES_ENV = "STEWARD_TEST_POSTGRES_URL"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/queue/steward.db"
        return
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip("set STEWARD_TEST_POSTGRES_URL to run the PostgreSQL tests")
    name = f"steward_jobs_{uuid.uuid4().hex[:10]}"

    async def execute(statement: str) -> None:
        conn = await asyncpg.connect(base, timeout=5)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(execute(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
