"""Fixtures for every test."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa

from steward.store.engine import make_engine
from steward.store.events import EventStore, open_store
from steward.store.schema import migrate


@pytest.fixture(autouse=True, scope="session")
def _checkpoints_out_of_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Shadow repositories of test runs go to a temporary state directory, never the user's."""
    import os

    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))


POSTGRES_ENV = "STEWARD_TEST_POSTGRES_URL"


# Fixtures that migrate the store before the test's body runs. A test that uses one gets a copy of
# a database migrated once per worker: the same tables, sooner (migrating a fresh PostgreSQL
# database takes most of a second; copying a migrated one, a fraction of that). Every other test
# gets an empty database, as the store's own first migration is part of what it runs.
MIGRATED_BY = frozenset({"engine", "store"})


async def _execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


class MigratedTemplates:
    """Databases migrated on first use, once per worker, and copied for each test that wants one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sqlite_file: Path | None = None
        self.postgres: dict[str, str] = {}  # server URL -> name of its template database

    def sqlite_copy(self, path: Path) -> None:
        if self.sqlite_file is None:
            made = self.root / "template.db"
            asyncio.run(_migrate(f"sqlite:///{made}"))
            assert not made.with_name(made.name + "-wal").exists()  # the file alone is the database
            self.sqlite_file = made
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.sqlite_file, path)

    def postgres_template(self, base: str) -> str:
        if base not in self.postgres:
            name = f"steward_template_{uuid.uuid4().hex[:10]}"
            asyncio.run(_execute(base, f'CREATE DATABASE "{name}"'))
            self.postgres[base] = name  # dropped at the end of the session even if migrate fails
            asyncio.run(_migrate(sa.make_url(base).set(database=name).render_as_string(hide_password=False)))
        return self.postgres[base]


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    templates = MigratedTemplates(tmp_path_factory.mktemp("migrated"))
    try:
        yield templates
    finally:
        for base, name in templates.postgres.items():
            asyncio.run(_execute(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_templates: MigratedTemplates
) -> Iterator[str]:
    """A database of its own for the test, on SQLite and (when configured) PostgreSQL: empty, or
    already migrated when the test uses a fixture that migrates it (``MIGRATED_BY``)."""
    migrated = not MIGRATED_BY.isdisjoint(request.fixturenames)
    if request.param == "sqlite":
        path = tmp_path / "queue" / "steward.db"
        if migrated:
            migrated_templates.sqlite_copy(path)
        yield f"sqlite:///{path}"
        return
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip("set STEWARD_TEST_POSTGRES_URL to run the PostgreSQL tests")
    name = f"steward_jobs_{uuid.uuid4().hex[:10]}"
    template = f' TEMPLATE "{migrated_templates.postgres_template(base)}"' if migrated else ""
    asyncio.run(_execute(base, f'CREATE DATABASE "{name}"{template}'))
    try:
        yield sa.make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_execute(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[EventStore]:
    """An open event store on each engine of ``db_url`` (the store suite has its own, over
    ``store_url``, with the tables dropped between tests)."""
    opened = await open_store(db_url)
    try:
        yield opened
    finally:
        await opened.close()
