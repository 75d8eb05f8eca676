"""Sessions (seed 000's clean session memory): conversations of a user with an agent.

A session's memory is its turns, each the goal and final answer of one run, and the summary
of the session it continued from; never the tool events of its runs.
"""

from __future__ import annotations

import builtins
import secrets
import time
from dataclasses import asdict, dataclass

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from steward.errors import StewardError
from steward.store.engine import by_id_or_prefix, write_transaction
from steward.store.schema import runs as runs_table
from steward.store.schema import sessions as sessions_table

_ID_BYTES = 6  # 12 hex digits: short to type, and a prefix is enough (see ``get``)
_ID_ATTEMPTS = 3  # a clash of random ids is tried again this often


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    title: str
    summary: str
    previous_id: str | None
    created_at: float
    updated_at: float
    closed_at: float | None

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True, slots=True)
class Turn:
    """One exchange of a session: what the user asked a run for and its final answer."""

    run_id: str
    goal: str
    output: str  # "" while the run has no final answer (running, waiting, failed)
    status: str
    end_status: str | None
    created_at: float


class SessionStore:
    """Sessions and their turns; ``where`` names the store in error messages."""

    def __init__(self, engine: AsyncEngine, *, where: str = "") -> None:
        self._engine = engine
        self.where = where

    async def create(self, title: str, previous_id: str | None = None) -> SessionRow:
        """Start a session, continuing from ``previous_id`` (an id or a unique prefix) if given."""
        previous = None if previous_id is None else (await self.get(previous_id)).id
        now = time.time()
        for _ in range(_ID_ATTEMPTS):
            row = SessionRow(secrets.token_hex(_ID_BYTES), title, "", previous, now, now, None)
            try:
                async with write_transaction(self._engine) as conn:
                    await conn.execute(sessions_table.insert().values(**asdict(row)))
            except sa_exc.IntegrityError:
                continue  # the random id is taken: draw another
            return row
        raise StewardError(f"could not pick an unused session id in {_ID_ATTEMPTS} tries; try again")

    async def get(self, id_or_prefix: str) -> SessionRow:
        """The session whose id is ``id_or_prefix`` or starts with it; a clear error otherwise."""
        rows = await by_id_or_prefix(self._engine, sessions_table, id_or_prefix)
        if len(rows) == 1:
            return SessionRow(**rows[0])
        if not rows:
            raise StewardError(
                f"no session {id_or_prefix!r} in the store{self._at}; `steward sessions list` shows them"
            )
        raise StewardError(
            f"session id {id_or_prefix!r} is ambiguous; give more of it (`steward sessions list`)"
        )

    async def list(self, limit: int = 20) -> builtins.list[SessionRow]:
        """The most recently created sessions, newest first."""
        query = (
            sa.select(sessions_table)
            .order_by(sessions_table.c.created_at.desc(), sessions_table.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [SessionRow(**row) for row in rows]

    async def latest_open(self) -> SessionRow | None:
        """The open session used most recently (``touch``), if any."""
        query = (
            sa.select(sessions_table)
            .where(sessions_table.c.closed_at.is_(None))
            .order_by(sessions_table.c.updated_at.desc(), sessions_table.c.created_at.desc())
            .limit(1)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().one_or_none()
        return None if row is None else SessionRow(**row)

    async def close(self, session_id: str, summary: str) -> SessionRow:
        """Close a session with its summary (closing again replaces the summary only)."""
        now = time.time()
        await self._update(
            session_id,
            summary=summary,
            updated_at=now,
            closed_at=sa.func.coalesce(sessions_table.c.closed_at, now),
        )
        return await self.get(session_id)

    async def touch(self, session_id: str) -> None:
        """Mark a session as used now (``latest_open`` picks the most recently used)."""
        await self._update(session_id, updated_at=time.time())

    async def turns(self, session_id: str, last: int | None = None) -> builtins.list[Turn]:
        """The session's turns from its runs, oldest first; only the newest ``last`` if given.

        Runs still going are included (with an empty output); leave out the current run by id.
        """
        columns = (
            runs_table.c.id,
            runs_table.c.goal,
            runs_table.c.output,
            runs_table.c.status,
            runs_table.c.end_status,
            runs_table.c.created_at,
        )
        query = (
            sa.select(*columns)
            .where(runs_table.c.session_id == session_id)
            .order_by(runs_table.c.created_at.desc(), runs_table.c.id.desc())
        )
        if last is not None:
            query = query.limit(last)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            Turn(row.id, row.goal, row.output, row.status, row.end_status, row.created_at)
            for row in reversed(rows)
        ]

    async def previous_summary(self, session_id: str) -> str | None:
        """The summary of the session this one continued from; None if none or not written."""
        session = await self.get(session_id)
        if session.previous_id is None:
            return None
        previous = await self._one(sessions_table.c.id == session.previous_id)
        return previous.summary if previous is not None and previous.summary else None

    @property
    def _at(self) -> str:
        return f" at {self.where}" if self.where else ""

    async def _one(self, where: sa.ColumnElement[bool]) -> SessionRow | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(sessions_table).where(where))).mappings().one_or_none()
        return None if row is None else SessionRow(**row)

    async def _update(self, session_id: str, **values: object) -> None:
        async with write_transaction(self._engine) as conn:
            result = await conn.execute(
                sessions_table.update().where(sessions_table.c.id == session_id).values(**values)
            )
        if result.rowcount == 0:
            raise StewardError(
                f"no session {session_id!r} in the store{self._at}; `steward sessions list` shows them"
            )
