"""Tables and migrations of the store (SQLAlchemy Core).

The schema only ever moves forward through ``MIGRATIONS``: migration ``n`` (1-based) takes a
database from version ``n - 1`` to ``n``. ``migrate`` applies the missing ones in a single
transaction that holds the database's write lock (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL
advisory lock), so two processes opening the same database at once apply each step once.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.errors import StewardError
from steward.store.engine import write_transaction

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # always 1: a single row
    sa.Column("version", sa.Integer, nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, nullable=True),
    sa.Column("goal", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("end_status", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Index("ix_runs_created_at", "created_at"),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("ts", sa.Double, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),  # the event's ``data`` in its one JSON encoding
)


def _v1_runs_and_events(conn: Connection) -> None:
    runs.create(conn)  # with its index
    events.create(conn)


MIGRATIONS: tuple[Callable[[Connection], None], ...] = (_v1_runs_and_events,)
LATEST_VERSION = len(MIGRATIONS)

_PG_LOCK_KEY = 0x5757_0001  # arbitrary, fixed: "the steward schema" advisory lock


def _migrate(conn: Connection) -> int:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    schema_version.create(conn, checkfirst=True)
    current = conn.execute(sa.select(schema_version.c.version)).scalar_one_or_none()
    if current is None:
        conn.execute(schema_version.insert().values(id=1, version=0))
        current = 0
    if current > LATEST_VERSION:
        raise StewardError(
            f"the store's schema is version {current} but this Steward knows up to {LATEST_VERSION}; "
            "upgrade Steward or point [store] url at another database"
        )
    for step in MIGRATIONS[current:]:
        step(conn)
    # Written even when nothing changed: a database opened read-only fails here, at open time,
    # with a clear error, rather than at the first append.
    conn.execute(schema_version.update().values(version=LATEST_VERSION))
    return LATEST_VERSION - current


async def migrate(engine: AsyncEngine) -> int:
    """Bring the database up to ``LATEST_VERSION``; return how many migrations were applied."""
    async with write_transaction(engine) as conn:
        return await conn.run_sync(_migrate)


async def current_version(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        version = (await conn.execute(sa.select(schema_version.c.version))).scalar_one_or_none()
    return version or 0
