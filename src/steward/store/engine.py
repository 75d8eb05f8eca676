"""Store URLs to configured async SQLAlchemy engines, and the errors of opening one.

``sqlite:///path/to/file.db`` becomes ``sqlite+aiosqlite`` with WAL, a busy timeout and
foreign keys on every connection; ``postgresql://...`` becomes ``postgresql+asyncpg``.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from steward.errors import ConfigError

ALLOWED_FORMS = "sqlite:///path/to/steward.db or postgresql://user@host:5432/dbname"
SQLITE_BUSY_TIMEOUT_MS = 10_000
POSTGRES_CONNECT_TIMEOUT_S = 5.0
_WAL_SWITCH_WAIT_MS = 50
_WAL_SWITCH_ATTEMPTS = 100
_WRITE = "steward_write"  # execution option: this transaction will write (SQLite: BEGIN IMMEDIATE)

_SQLITE_DRIVERS = frozenset({"sqlite", "sqlite+aiosqlite"})
_POSTGRES_DRIVERS = frozenset({"postgresql", "postgres", "postgresql+asyncpg"})


def parse_url(url: str) -> URL:
    """Validate a store URL and translate it to its async driver; no I/O."""
    try:
        parsed = sa.make_url(url)
    except sa_exc.ArgumentError:
        raise ConfigError(f"store url {url!r} is not a URL; use {ALLOWED_FORMS}") from None
    if parsed.drivername in _SQLITE_DRIVERS:
        if not parsed.database or parsed.database == ":memory:":
            raise ConfigError(f"store url {url!r} names no database file; use {ALLOWED_FORMS}")
        return parsed.set(drivername="sqlite+aiosqlite")
    if parsed.drivername in _POSTGRES_DRIVERS:
        return parsed.set(drivername="postgresql+asyncpg")
    raise ConfigError(f"store url scheme {parsed.drivername!r} is not supported; use {ALLOWED_FORMS}")


def sqlite_path(url: URL) -> Path | None:
    """The database file of a SQLite URL (``None`` for PostgreSQL)."""
    return Path(url.database or "") if url.get_backend_name() == "sqlite" else None


def make_engine(url: str) -> AsyncEngine:
    """A configured engine for a store URL; connects lazily (no I/O here)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "postgresql":
        return create_async_engine(parsed, connect_args={"timeout": POSTGRES_CONNECT_TIMEOUT_S})
    engine = create_async_engine(parsed)
    event.listen(engine.sync_engine, "connect", _sqlite_on_connect)
    event.listen(engine.sync_engine, "begin", _sqlite_on_begin)
    return engine


def make_sync_engine(url: str) -> sa.Engine | None:
    """For SQLite, a synchronous engine on the same file, for the writer thread; else None.

    Appends are on the hot path of every step. aiosqlite hops to its thread once per
    statement (BEGIN, INSERT, COMMIT, the pool's reset), which costs milliseconds per
    transaction; one hop per batch to a thread that runs the whole transaction costs a tenth.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    engine = sa.create_engine(parsed.set(drivername="sqlite"), poolclass=sa.pool.SingletonThreadPool)
    event.listen(engine, "connect", _sqlite_on_connect)  # the writer itself says BEGIN IMMEDIATE
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # The driver's own implicit BEGIN is switched off so that _sqlite_on_begin decides how
    # transactions start: writers take the write lock up front and wait for it (busy_timeout)
    # instead of failing when a read lock cannot be upgraded.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    _switch_to_wal(cursor)
    for pragma in (
        f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}",
        "PRAGMA foreign_keys = ON",
        "PRAGMA synchronous = NORMAL",
    ):
        cursor.execute(pragma)
    cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    # Switching a new database to WAL needs an exclusive lock. Two openers that both wait for
    # it with a long busy timeout can deadlock (each holds the shared lock the other needs), so
    # each attempt waits briefly and gives its locks up before trying again. Once the file is
    # in WAL mode (it stays so) this is a no-op; it only blocks on a brand-new, contended file.
    cursor.execute(f"PRAGMA busy_timeout = {_WAL_SWITCH_WAIT_MS}")
    for attempt in range(_WAL_SWITCH_ATTEMPTS):
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
        except Exception as exc:
            if "locked" not in str(exc) or attempt == _WAL_SWITCH_ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0.0, _WAL_SWITCH_WAIT_MS / 1000))  # noqa: S311 - jitter only
        else:
            return


def _sqlite_on_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


@asynccontextmanager
async def write_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A short transaction that will write; on SQLite it holds the write lock from its start."""
    async with engine.connect() as conn:
        await conn.execution_options(**{_WRITE: True})
        async with conn.begin():
            yield conn


def like_pattern(text: str, *, prefix: bool = False) -> str:
    """``text`` as a LIKE pattern (with ``escape="\\"``): a substring, or a prefix."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%" if prefix else "%" + escaped + "%"


async def by_id_or_prefix(engine: AsyncEngine, table: sa.Table, text: str) -> list[sa.RowMapping]:
    """The row whose id is ``text``, else up to two rows whose id starts with it (two: ambiguous)."""
    async with engine.connect() as conn:
        exact = (await conn.execute(sa.select(table).where(table.c.id == text))).mappings().all()
        if exact:
            return list(exact)
        query = sa.select(table).where(table.c.id.like(like_pattern(text, prefix=True), escape="\\"))
        return list((await conn.execute(query.limit(2))).mappings().all())


def open_error(url: URL, exc: BaseException) -> ConfigError:
    """A one-line error for a database that could not be opened, naming the fix."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]
    path = sqlite_path(url)
    if path is not None:
        return ConfigError(
            f"cannot open the SQLite store {path}: {reason}. Check that the file and its folder "
            "are writable, or point [store] url (STEWARD_DB) at another file."
        )
    where = f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"
    return ConfigError(
        f"cannot open the PostgreSQL store at {where}: {reason}. Check that the server is running "
        "and that [store] url (STEWARD_DB) names the right host, port, user and database."
    )
