"""The append-only event store: runs and their gap-free event logs.

Events keep the one JSON encoding of ``steward.events``: a row holds the envelope's ``seq``,
``ts`` and ``type`` as columns and the event's ``data`` as JSON text; ``run_id`` and
``session_id`` come from the run, so reading a log back gives events equal to
``decode_event(event.to_dict())``.
"""

from __future__ import annotations

import asyncio
import errno
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.errors import FencedOut, StewardError, StoreError
from steward.events import Event, decode_event
from steward.state_dir import make_dir
from steward.store.engine import (
    by_id_or_prefix,
    make_engine,
    make_sync_engine,
    open_error,
    parse_url,
    sqlite_path,
    write_transaction,
)
from steward.store.redaction import Redact, RedactFor, RunRedaction, redacted
from steward.store.schema import events as events_table
from steward.store.schema import jobs as jobs_table
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
    workspace: str = ""
    model: str = ""
    output: str = ""
    owner: str | None = None
    attempts: int = 0


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
            make_dir(path.parent)
        await migrate(engine)
    except (OSError, TimeoutError, sa_exc.DBAPIError) as exc:
        await engine.dispose()
        raise open_error(parsed, exc) from None
    except BaseException:
        await engine.dispose()
        raise
    return EventStore(engine, make_sync_engine(url), where=_where(parsed))


class EventStore:
    """Runs and their event logs.

    ``append`` writes at once and checks the log against the database. A running run writes
    through ``log``: events are queued and committed by one writer in batches (group commit),
    and ``RunLog.flush`` waits until everything queued is durable. The loop flushes before
    anything with side effects, so a crash loses at most events it can make again.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        sync_engine: sa.Engine | None = None,
        *,
        where: str = "",
        redaction: RedactFor | None = None,
    ) -> None:
        """``redaction``: a run's workspace -> what redacts what is written for the run (by
        default the secrets a run in that workspace has; see ``steward.store.redaction``)."""
        self._engine = engine
        self._redaction = RunRedaction(engine, redaction)
        self._writer = _Writer(engine, sync_engine, where, self._redaction)
        self.where = where

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    @property
    def engine(self) -> AsyncEngine:
        """The database, for the stores that share it (sessions, memory blocks, archive)."""
        return self._engine

    async def __aenter__(self) -> EventStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        try:
            await self._writer.close()
        finally:
            await self._engine.dispose()

    async def transact(self, work: Callable[[sa.Connection], T]) -> T:
        """Run ``work`` in one short write transaction and return what it returns.

        On SQLite ``work`` runs whole in the writer's thread, on its plain connection (BEGIN
        IMMEDIATE): one hand-off to a thread, where aiosqlite hands off once per statement,
        cursor and fetch (a dozen hand-offs for a transaction of three statements). On PostgreSQL
        it runs on an async connection through ``run_sync``.
        """
        return await self._writer.transact(work)

    async def create_run(
        self,
        run_id: str,
        *,
        goal: str,
        session_id: str | None = None,
        workspace: str = "",
        model: str = "",
        owner: str | None = None,
        status: str = "running",
    ) -> None:
        now = time.time()
        row = {
            "id": run_id,
            "session_id": session_id,
            "goal": goal,
            "status": status,
            "workspace": workspace,
            "model": model,
            "owner": owner,
        }
        try:
            async with write_transaction(self._engine) as conn:
                await conn.execute(runs_table.insert().values(**row, created_at=now, updated_at=now))
        except sa_exc.IntegrityError:
            raise StewardError(f"run {run_id} already exists; use a new run id") from None
        except (OSError, sa_exc.DBAPIError) as exc:
            raise write_error(self.where, exc, f"could not create run {run_id}") from None
        self._redaction.remember(run_id, workspace)

    def log(self, run_id: str, *, session_id: str | None, last_seq: int, fence: int | None = None) -> RunLog:
        """A buffered writer for one run's log, continuing after ``last_seq``.

        With a ``fence`` (the claim of the job that drives the run; a job's run has the job's
        id), each batch is written only while the job's row still carries that fence, checked in
        the same transaction: once another worker claims the job, nothing more of this writer
        reaches the log (``FencedOut``). On PostgreSQL the check holds the job's row (``FOR
        SHARE``) until the batch commits, so a claim waits for the batch, or the batch sees the claim.
        """
        return RunLog(self._writer, run_id, session_id, last_seq, fence)

    async def append(self, run_id: str, events: Sequence[Event]) -> None:
        """Append events whose ``seq`` continue the run's log exactly (no gap, no duplicate)."""
        if not events:
            return
        try:
            # Redacted before the transaction: reading secret files must not hold the database.
            (workspace,) = (await self._redaction.workspaces([run_id])).values()
            rows = await asyncio.to_thread(self._rows, run_id, workspace, events)
            async with write_transaction(self._engine) as conn:
                session_id, last = await self._lock_run(conn, run_id)
                _check_continues(run_id, session_id, last, events)
                await conn.execute(events_table.insert(), rows)
        except sa_exc.IntegrityError:
            # Only reachable if another writer slipped in; the key keeps the log gap-free anyway.
            raise StewardError(
                f"events {events[0].seq}..{events[-1].seq} of run {run_id} were already written "
                "by another writer; nothing was appended"
            ) from None
        except (OSError, sa_exc.DBAPIError) as exc:
            raise write_error(
                self.where, exc, f"could not record run {run_id} past seq {events[0].seq - 1}"
            ) from None

    def _rows(self, run_id: str, workspace: str, events: Sequence[Event]) -> list[dict[str, object]]:
        redact = self._redaction.redactor(workspace)
        return [_row(run_id, event, redact) for event in events]

    async def set_status(
        self,
        run_id: str,
        status: str,
        end_status: str | None = None,
        *,
        output: str | None = None,
        owner: str | None = None,
        attempts: int | None = None,
    ) -> None:
        values: dict[str, object] = {"status": status, "end_status": end_status, "updated_at": time.time()}
        values["owner"] = owner
        if output is not None:
            (workspace,) = (await self._redaction.workspaces([run_id])).values()
            values["output"] = await asyncio.to_thread(lambda: self._redaction.redactor(workspace)(output))
        if attempts is not None:
            values["attempts"] = attempts
        # Like every write, a locked, full or unreachable database is one clear line, not a
        # driver's traceback (Agent.resume writes here first).
        try:
            async with write_transaction(self._engine) as conn:
                result = await conn.execute(
                    runs_table.update().where(runs_table.c.id == run_id).values(**values)
                )
                if result.rowcount == 0:
                    raise _no_run(run_id)
        except (OSError, sa_exc.DBAPIError) as exc:
            raise write_error(self.where, exc, f"could not update run {run_id}") from None

    async def delete_run(self, run_id: str) -> bool:
        """Forget a run and its log; whether there was one."""
        async with write_transaction(self._engine) as conn:
            await conn.execute(events_table.delete().where(events_table.c.run_id == run_id))
            gone = await conn.execute(runs_table.delete().where(runs_table.c.id == run_id))
        return bool(gone.rowcount)

    async def events(self, run_id: str, after_seq: int = 0, *, limit: int | None = None) -> list[Event]:
        """The run's events with ``seq > after_seq``, in order, as typed events (the first ``limit``)."""
        query = (
            sa.select(events_table, runs_table.c.session_id)
            .join(runs_table, runs_table.c.id == events_table.c.run_id)
            .where(events_table.c.run_id == run_id, events_table.c.seq > after_seq)
            .order_by(events_table.c.seq)
            .limit(limit)
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

    async def first_event(self, run_id: str) -> Event | None:
        """The run's first recorded event (its ``run_start``), without reading the whole log."""
        found = await self.events(run_id, limit=1)
        return found[0] if found else None

    async def last_seq(self, run_id: str) -> int:
        async with self._engine.connect() as conn:
            return await _last_seq(conn, run_id)

    async def runs(self, limit: int = 50, *, session_id: str | None = None) -> list[RunRow]:
        """The most recently created runs (of one session, if given), newest first."""
        query = sa.select(runs_table).order_by(runs_table.c.created_at.desc(), runs_table.c.id.desc())
        if session_id is not None:
            query = query.where(runs_table.c.session_id == session_id)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query.limit(limit))).mappings().all()
        return [RunRow(**row) for row in rows]

    async def get_run(self, run_id: str) -> RunRow | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(runs_table).where(runs_table.c.id == run_id))).mappings()
            found = row.one_or_none()
        return None if found is None else RunRow(**found)

    async def find_run(self, prefix: str, *, last: Sequence[str] = ()) -> RunRow:
        """The run whose id is ``prefix`` or starts with it; a clear error otherwise.

        ``"last"`` is the newest run, or the newest whose status is in ``last`` if given.
        """
        if not prefix.strip():
            raise StewardError("give a run id (or a unique prefix of one); `steward runs list` shows them")
        if prefix == "last":
            query = sa.select(runs_table).order_by(runs_table.c.created_at.desc(), runs_table.c.id.desc())
            if last:
                query = query.where(runs_table.c.status.in_(list(last)))
            async with self._engine.connect() as conn:
                newest = (await conn.execute(query.limit(1))).mappings().one_or_none()
            if newest is None:
                which = f"{' or '.join(last)} run" if last else "run"
                raise StewardError(f"no {which} in the store at {self.where}; `steward runs list` shows them")
            return RunRow(**newest)
        rows = await by_id_or_prefix(self._engine, runs_table, prefix)
        if len(rows) == 1:
            return RunRow(**rows[0])
        if not rows:
            raise StewardError(
                f"no run {prefix!r} in the store at {self.where}; `steward runs list` shows them"
            )
        raise StewardError(f"run id {prefix!r} is ambiguous; give more of it (`steward runs list`)")

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


class RunLog:
    """One run's side of the writer: checks each event continues the log, then queues it."""

    def __init__(
        self, writer: _Writer, run_id: str, session_id: str | None, last_seq: int, fence: int | None = None
    ) -> None:
        self._writer = writer
        self.fence = fence
        self.run_id = run_id
        self.session_id = session_id
        self.last_seq = last_seq
        self.durable_seq = last_seq
        self.error: StoreError | None = None

    def add(self, event: Event) -> None:
        if self.error is not None:
            raise self.error
        _check_continues(self.run_id, self.session_id, self.last_seq, (event,))
        # Encoded (and redacted) by the writer, off the loop, before its transaction.
        self._writer.put(self, _Op(self, "event", {}, event.seq, event))
        self.last_seq = event.seq

    def status(
        self,
        status: str,
        end_status: str | None = None,
        *,
        output: str | None = None,
        owner: str | None = None,
    ) -> None:
        values: dict[str, object] = {"status": status, "end_status": end_status, "owner": owner}
        if output is not None:
            values["output"] = output
        self._writer.put(self, _Op(self, "status", values, self.last_seq))

    async def flush(self) -> None:
        """Wait until everything this run queued is committed; raise ``StoreError`` if it failed."""
        if self.error is None:
            await self._writer.flush()
        if self.error is not None:
            raise self.error


@dataclass(slots=True)
class _Op:
    log: RunLog
    kind: str  # "event" | "status"
    values: dict[str, object]
    seq: int
    #: An event not yet encoded into ``values`` (``_encode``).
    event: Event | None = None


T = TypeVar("T")
_RETRIES = 3  # a busy database or a dropped PostgreSQL connection is tried again this often


class _Writer:
    """Commits queued writes of every run of one store, a batch per transaction, in order.

    Writes are group-committed: a batch starts as soon as the writer is free and takes
    everything queued by then, so the commit runs (in its thread, or on the server) while the
    loop goes on, and what arrives meanwhile shares the next commit. (Waiting to fill batches
    was measured slower: the loop then waits for a whole commit at each barrier.) ``flush``
    waits only for what was queued before it, so a busy store cannot keep a caller waiting.
    """

    def __init__(
        self, engine: AsyncEngine, sync_engine: sa.Engine | None, where: str, redaction: RunRedaction
    ) -> None:
        self._engine = engine
        self._sync_engine = sync_engine
        self._where = where
        self._redaction = redaction
        self._queue: list[_Op] = []
        self._task: asyncio.Task[None] | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._queued = 0  # ops ever queued
        self._written = 0  # ops whose batch has been written (or has failed)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closed = False

    def put(self, log: RunLog, op: _Op) -> None:
        if self._closed:
            raise StoreError(
                f"the store at {self._where} is closed; run {log.run_id} was not recorded past seq "
                f"{log.durable_seq}. `steward resume {log.run_id}` continues it"
            )
        self._queue.append(op)
        self._queued += 1
        self._start()

    async def flush(self) -> None:
        target = self._queued
        if self._written >= target:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        self._start()
        await asyncio.shield(waiter)

    async def close(self) -> None:
        await self.flush()
        self._closed = True
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        if self._sync_engine is not None:
            self._sync_engine.dispose()

    async def transact(self, work: Callable[[sa.Connection], T]) -> T:
        if self._sync_engine is None:
            async with write_transaction(self._engine) as conn:
                return await conn.run_sync(work)
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="steward-store")
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._transact_sync, work)

    def _transact_sync(self, work: Callable[[sa.Connection], T]) -> T:
        assert self._sync_engine is not None
        with self._sync_engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the driver's own BEGIN is off (engine.py)
            try:
                done = work(conn)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
            return done

    def _draining(self) -> bool:
        return self._task is not None and not self._task.done()

    def _start(self) -> None:
        if not self._draining() and self._queue:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        # Bounded by what is queued: each pass takes the whole queue.
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                fenced = await self._write_with_retries(batch)
            except Exception as exc:  # whatever it was, the waiters must hear of it, not hang
                error = exc if isinstance(exc, StoreError) else write_error(self._where, exc, "failed")
                for op in batch:
                    op.log.error = error
            else:
                for op in batch:
                    if op.log in fenced:
                        op.log.error = op.log.error or _fenced_out(op.log)
                    else:
                        op.log.durable_seq = max(op.log.durable_seq, op.seq)
            self._written += len(batch)
            still = []
            for target, waiter in self._waiters:
                if target <= self._written:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    still.append((target, waiter))
            self._waiters = still

    async def _write_with_retries(self, batch: list[_Op]) -> set[RunLog]:
        """Write the batch; return the logs whose writes were refused (fenced out)."""
        workspaces = await self._redaction.workspaces(op.log.run_id for op in batch)
        for attempt in range(1, _RETRIES + 1):
            try:
                if self._sync_engine is not None:
                    if self._thread is None:
                        self._thread = ThreadPoolExecutor(1, thread_name_prefix="steward-store")
                    loop = asyncio.get_running_loop()
                    return await loop.run_in_executor(self._thread, self._write_sync, batch, workspaces)
                await asyncio.to_thread(_encode, batch, workspaces, self._redaction)
                async with write_transaction(self._engine) as conn:
                    fenced = set()
                    for log in _fenced_logs(batch):
                        held = sa.select(jobs_table.c.id).where(
                            jobs_table.c.id == log.run_id, jobs_table.c.fence == log.fence
                        )
                        if (await conn.execute(held.with_for_update(read=True))).first() is None:
                            fenced.add(log)
                    kept = [op for op in batch if op.log not in fenced]
                    for statement, rows in _statements(kept):
                        await conn.execute(statement, rows)
                    for run_id in dict.fromkeys(op.log.run_id for op in kept if op.kind == "event"):
                        # Followers of the run on any server hear of it when the batch commits.
                        await conn.execute(sa.select(sa.func.pg_notify(EVENTS_CHANNEL, run_id)))
                    return fenced
            except (OSError, sqlite3.Error, sa_exc.DBAPIError) as exc:
                if attempt == _RETRIES or not _transient(exc):
                    log = batch[0].log
                    what = f"could not record run {log.run_id} past seq {log.durable_seq}"
                    raise write_error(self._where, exc, what) from None
                await asyncio.sleep(0.2 * attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _write_sync(self, batch: list[_Op], workspaces: dict[str, str]) -> set[RunLog]:
        # The hot path of every step: plain DB-API calls on the engine's pooled connection
        # (its pragmas set on connect) cost a fraction of building Core statements per batch.
        assert self._sync_engine is not None
        _encode(batch, workspaces, self._redaction)  # in this thread, before the write lock
        with self._sync_engine.connect() as plain:
            raw = plain.connection.driver_connection
            assert raw is not None
            cursor = raw.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            try:
                fenced = set()
                for log in _fenced_logs(batch):  # the write lock is held: no claim comes between
                    cursor.execute(_HELD, (log.run_id, log.fence))
                    if cursor.fetchone() is None:
                        fenced.add(log)
                for sql, params in _plain_statements([op for op in batch if op.log not in fenced]):
                    cursor.executemany(sql, params)
                cursor.execute("COMMIT")
            except BaseException:
                if raw.in_transaction:  # SQLite may have rolled back already (a full disk does)
                    cursor.execute("ROLLBACK")
                raise
            finally:
                cursor.close()
        return fenced


def _encode(batch: list[_Op], workspaces: dict[str, str], redaction: RunRedaction) -> None:
    """Encode the batch's events into rows, and redact them and each run's output (idempotent:
    a retried batch is encoded once)."""
    redactors: dict[str, Redact] = {}
    for op in batch:
        if op.event is None and "output" not in op.values:
            continue
        run_id = op.log.run_id
        if run_id not in redactors:
            redactors[run_id] = redaction.redactor(workspaces.get(run_id, ""))
        if op.event is not None:
            op.values, op.event = _row(run_id, op.event, redactors[run_id]), None
        elif isinstance(output := op.values["output"], str):
            op.values["output"] = redactors[run_id](output)


def _statements(batch: list[_Op]) -> list[tuple[sa.Executable, Any]]:
    """The batch as few statements as possible, in order: runs of events become one insert."""
    out: list[tuple[sa.Executable, Any]] = []
    rows: list[dict[str, object]] = []
    for op in batch:
        if op.kind == "event":
            rows.append(op.values)
            continue
        if rows:
            out.append((events_table.insert(), rows))
            rows = []
        update = runs_table.update().where(runs_table.c.id == op.log.run_id)
        out.append((update.values(**op.values, updated_at=time.time()), None))
    if rows:
        out.append((events_table.insert(), rows))
    return [(statement, params) if params is not None else (statement, {}) for statement, params in out]


EVENTS_CHANNEL = "steward_events"
"""PostgreSQL channel that names a run each time events of it are committed (its followers read
them then; elsewhere they poll by sequence number)."""

_HELD = "SELECT 1 FROM jobs WHERE id = ? AND fence = ?"
_INSERT = "INSERT INTO events (run_id, seq, ts, type, data) VALUES (?, ?, ?, ?, ?)"
_UPDATE = (
    "UPDATE runs SET status = ?, end_status = ?, owner = ?, output = COALESCE(?, output), updated_at = ? "
    "WHERE id = ?"
)


def _plain_statements(batch: list[_Op]) -> list[tuple[str, list[tuple[object, ...]]]]:
    """The batch as DB-API statements (qmark style), in order; runs of events are one executemany."""
    out: list[tuple[str, list[tuple[object, ...]]]] = []
    rows: list[tuple[object, ...]] = []
    for op in batch:
        if op.kind == "event":
            v = op.values
            rows.append((v["run_id"], v["seq"], v["ts"], v["type"], v["data"]))
            continue
        if rows:
            out.append((_INSERT, rows))
            rows = []
        v = op.values
        status = (v["status"], v["end_status"], v["owner"], v.get("output"), time.time(), op.log.run_id)
        out.append((_UPDATE, [status]))
    if rows:
        out.append((_INSERT, rows))
    return out


def _fenced_logs(batch: list[_Op]) -> list[RunLog]:
    """The logs of the batch written under a fence, each once, in order."""
    return list(dict.fromkeys(op.log for op in batch if op.log.fence is not None))


def _fenced_out(log: RunLog) -> FencedOut:
    return FencedOut(
        f"run {log.run_id} was taken over by another worker (this worker's claim {log.fence} is no "
        f"longer the newest); nothing more of this worker was recorded past seq {log.durable_seq}"
    )


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    text = str(exc).lower()
    lost = "connection" in text and ("closed" in text or "lost" in text or "reset" in text)
    return "locked" in text or lost


def write_error(where: str, exc: BaseException, what: str) -> StoreError:
    """A one-line error for a failed write, naming the likely fix."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]
    low = reason.lower()
    if "full" in low or getattr(cause, "errno", None) == errno.ENOSPC:
        fix = "free disk space"
    elif "disk i/o error" in low:
        # SQLite's word for a write the system refused for another reason than space (a file
        # size limit, a failing disk): "check the database" would send the user to the wrong place.
        fix = "check the disk it is on (free space, file size limit, errors)"
    elif "readonly" in low or "read-only" in low or "permission" in low:
        fix = "make the store writable"
    elif "locked" in low:
        fix = "another process holds the database's write lock; stop it or use another store"
    elif "connect" in low or "closed" in low:
        fix = "check that the database server is running"
    else:
        fix = "check the database"
    return StoreError(
        f"the store at {where} {what}: {reason}. Everything recorded before is kept; {fix}, "
        "then `steward resume RUN` continues the run."
    )


def _where(url: sa.URL) -> str:
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    return f"postgresql://{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"


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


def _row(run_id: str, event: Event, redact: Redact) -> dict[str, object]:
    encoded = event.to_dict()
    clean = redacted(encoded["data"], redact)
    data = json.dumps(clean, ensure_ascii=False, separators=(",", ":"), default=str)
    return {"run_id": run_id, "seq": event.seq, "ts": encoded["ts"], "type": event.type, "data": data}


def _no_run(run_id: str) -> StewardError:
    return StewardError(f"no run {run_id} in the store; call create_run({run_id!r}, goal=...) first")
