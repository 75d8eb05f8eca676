"""The append-only event store: runs and their gap-free event logs.

Events keep the one JSON encoding of ``steward.events``: a row holds the envelope's ``seq``,
``ts`` and ``type`` as columns and the event's ``data`` as JSON text; ``run_id`` and
``session_id`` come from the run, so reading a log back gives events equal to
``decode_event(event.to_dict())``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.errors import StewardError
from steward.events import Event, decode_event
from steward.store.engine import make_engine, open_error, parse_url, sqlite_path, write_transaction
from steward.store.schema import events as events_table
from steward.store.schema import migrate
from steward.store.schema import runs as runs_table


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    session_id: str | None
    goal: str
    status: str
    end_status: str | None
    created_at: float
    updated_at: float


async def open_store(url: str) -> EventStore:
    """Open (creating if needed) the store at ``url`` and bring its schema up to date.

    ``url`` is ``sqlite:///path/to/file.db`` or ``postgresql://user@host:port/db``. A database
    that cannot be opened raises ``ConfigError`` with a one-line message naming the fix.
    """
    parsed = parse_url(url)
    engine = make_engine(url)
    try:
        path = sqlite_path(parsed)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        await migrate(engine)
    except (OSError, TimeoutError, sa_exc.DBAPIError) as exc:
        await engine.dispose()
        raise open_error(parsed, exc) from None
    except BaseException:
        await engine.dispose()
        raise
    return EventStore(engine)


class EventStore:
    """Runs and their event logs; every write is one short transaction."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def __aenter__(self) -> EventStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._engine.dispose()

    async def create_run(self, run_id: str, *, goal: str, session_id: str | None = None) -> None:
        now = time.time()
        row = {"id": run_id, "session_id": session_id, "goal": goal, "status": "running"}
        try:
            async with write_transaction(self._engine) as conn:
                await conn.execute(runs_table.insert().values(**row, created_at=now, updated_at=now))
        except sa_exc.IntegrityError:
            raise StewardError(f"run {run_id} already exists; use a new run id") from None

    async def append(self, run_id: str, events: Sequence[Event]) -> None:
        """Append events whose ``seq`` continue the run's log exactly (no gap, no duplicate)."""
        if not events:
            return
        try:
            async with write_transaction(self._engine) as conn:
                session_id, last = await self._lock_run(conn, run_id)
                _check_continues(run_id, session_id, last, events)
                await conn.execute(events_table.insert(), [_row(run_id, event) for event in events])
        except sa_exc.IntegrityError:
            # Only reachable if another writer slipped in; the key keeps the log gap-free anyway.
            raise StewardError(
                f"events {events[0].seq}..{events[-1].seq} of run {run_id} were already written "
                "by another writer; nothing was appended"
            ) from None

    async def set_status(self, run_id: str, status: str, end_status: str | None = None) -> None:
        async with write_transaction(self._engine) as conn:
            result = await conn.execute(
                runs_table.update()
                .where(runs_table.c.id == run_id)
                .values(status=status, end_status=end_status, updated_at=time.time())
            )
            if result.rowcount == 0:
                raise _no_run(run_id)

    async def events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        """The run's events with ``seq > after_seq``, in order, as typed events."""
        query = (
            sa.select(events_table, runs_table.c.session_id)
            .join(runs_table, runs_table.c.id == events_table.c.run_id)
            .where(events_table.c.run_id == run_id, events_table.c.seq > after_seq)
            .order_by(events_table.c.seq)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [
            decode_event(
                {
                    "seq": row["seq"],
                    "run_id": row["run_id"],
                    "session_id": row["session_id"],
                    "ts": row["ts"],
                    "type": row["type"],
                    "data": json.loads(row["data"]),
                }
            )
            for row in rows
        ]

    async def last_seq(self, run_id: str) -> int:
        async with self._engine.connect() as conn:
            return await _last_seq(conn, run_id)

    async def runs(self, limit: int = 50) -> list[RunRow]:
        """The most recently created runs, newest first."""
        query = sa.select(runs_table).order_by(runs_table.c.created_at.desc(), runs_table.c.id.desc())
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query.limit(limit))).mappings().all()
        return [RunRow(**row) for row in rows]

    async def get_run(self, run_id: str) -> RunRow | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(runs_table).where(runs_table.c.id == run_id))).mappings()
            found = row.one_or_none()
        return None if found is None else RunRow(**found)

    async def _lock_run(self, conn: AsyncConnection, run_id: str) -> tuple[str | None, int]:
        # Touching the run row first takes its row lock on PostgreSQL, so concurrent appends to
        # one run queue up here instead of racing on the last seq (SQLite holds the write lock).
        touched = await conn.execute(
            runs_table.update()
            .where(runs_table.c.id == run_id)
            .values(updated_at=time.time())
            .returning(runs_table.c.session_id)
        )
        found = touched.one_or_none()
        if found is None:
            raise _no_run(run_id)
        return found.session_id, await _last_seq(conn, run_id)


async def _last_seq(conn: AsyncConnection, run_id: str) -> int:
    query = sa.select(sa.func.coalesce(sa.func.max(events_table.c.seq), 0)).where(
        events_table.c.run_id == run_id
    )
    return int((await conn.execute(query)).scalar_one())


def _check_continues(run_id: str, session_id: str | None, last: int, events: Sequence[Event]) -> None:
    for expected, event in enumerate(events, start=last + 1):
        if event.seq != expected:
            kind = "a duplicate" if event.seq < expected else "a gap"
            raise StewardError(
                f"event seq {event.seq} for run {run_id} would be {kind}: the log ends at "
                f"{expected - 1}, so the next event must have seq {expected}; nothing was appended"
            )
        if event.run_id != run_id or event.session_id != session_id:
            raise StewardError(
                f"event seq {event.seq} belongs to run {event.run_id!r} session {event.session_id!r}, "
                f"not run {run_id!r} session {session_id!r}; nothing was appended"
            )


def _row(run_id: str, event: Event) -> dict[str, object]:
    encoded = event.to_dict()
    data = json.dumps(encoded["data"], ensure_ascii=False, separators=(",", ":"), default=str)
    return {"run_id": run_id, "seq": event.seq, "ts": encoded["ts"], "type": event.type, "data": data}


def _no_run(run_id: str) -> StewardError:
    return StewardError(f"no run {run_id} in the store; call create_run({run_id!r}, goal=...) first")
