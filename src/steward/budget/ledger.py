"""Budgets kept in the store, where every worker process sees the same numbers.

A run charges its own row and the scopes it shares: the runs above it (a parent's budget
covers what it delegates), its job tree, its session. Before a model or tool call that its
lease does not cover, a run *renews* its lease in every scope it charges (``Ledger.renew``), in
one transaction: it records what it spent since it last did, gives back what it held, and holds
a new lease only if the call fits what is left (``spent + held + call <= limit``, the scopes'
rows locked); two children in different processes asking for the last of a tree's tokens
cannot both get it. While the scopes have plenty of room a lease covers several calls (a share
of what is left, so that the runs beside it still get theirs); near a limit, one call. The run
draws on its lease without writing and records its spending when the lease runs out or when
it waits or ends. Leased tool calls count as spent while leased; those not made are given back.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.budget.limits import LEASE_CALLS, LEASE_SHARE, BudgetLimits, Need, Spending, Spent
from steward.models.base import Usage
from steward.store.engine import write_transaction
from steward.store.schema import budget_runs, budget_scopes

_MAX_DEPTH = 16  # jobs above a job that are looked at (delegation goes a few levels at most)
T = TypeVar("T")
Transact = Callable[[Callable[[sa.Connection], Any]], Awaitable[Any]]
"""Runs a sync function in one write transaction, returning what it returns."""


@dataclass(frozen=True, slots=True)
class ScopeState:
    id: str
    limits: BudgetLimits
    spent: Spent


@dataclass(frozen=True, slots=True)
class RunTotals:
    """What one run spent itself, as recorded (``steward.budget.report`` and batches read it)."""

    run_id: str
    model: str
    usage: Usage
    cost_usd: float
    unpriced: bool
    tool_calls: int
    time_s: float

    @property
    def tokens(self) -> int:
        return self.usage.input_tokens + self.usage.output_tokens


@dataclass(frozen=True, slots=True)
class Renewed:
    """A renewal's outcome: the scope that had no room (nothing held then), or None; how the
    scopes stand (this run's spending recorded, its lease not counted as spent); the lease
    (0 where no scope bounds the dimension, then the run needs no lease for it)."""

    refused: str | None
    states: list[ScopeState]
    tokens: int = 0
    cost: float = 0.0
    calls: int = 0


class Ledger:
    """The budget tables of one store."""

    def __init__(
        self,
        engine: AsyncEngine,
        transact: Callable[[Callable[[sa.Connection], Any]], Awaitable[Any]] | None = None,
    ) -> None:
        """``transact``: runs a sync function in one write transaction (``EventStore.transact``:
        on SQLite one hand-off to the store's writer thread); by default an async connection's
        ``run_sync``."""
        self.engine = engine
        self.transact = transact

    async def scopes_of(self, run_id: str, session_id: str | None) -> tuple[list[str], str]:
        """The run scopes above ``run_id`` (the jobs that delegated it, nearest first) and its
        tree's id (the job a person submitted; the run itself when it is no job)."""
        from steward.store.schema import jobs

        above: list[str] = []
        current = run_id
        async with self.engine.connect() as conn:
            for _ in range(_MAX_DEPTH):
                query = sa.select(jobs.c.parent_id).where(jobs.c.id == current)
                parent = (await conn.execute(query)).scalar_one_or_none()
                if parent is None:
                    break
                above.append(f"run:{parent}")
                current = parent
        return above, f"tree:{current}"

    async def open(
        self, run_id: str, model: str, scopes: dict[str, BudgetLimits], charged: list[str]
    ) -> RunTotals:
        """Make the run's row and its scopes' rows where missing; what the run spent so far.

        A scope that exists keeps its limits (its first run set them); a lease this run held
        when its process died is counted as spent (``_release``), not held for good.
        """
        now = time.time()
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                _insert(conn, budget_runs)
                .values(run_id=run_id, model=model, scopes=json.dumps(charged), updated_at=now)
                .on_conflict_do_nothing()
            )
            for scope, limits in scopes.items():
                values = {
                    "limit_tokens": limits.tokens,
                    "limit_cost": limits.cost_usd,
                    "limit_time": limits.time_s,
                    "limit_calls": limits.tool_calls,
                }
                await conn.execute(
                    _insert(conn, budget_scopes)
                    .values(id=scope, updated_at=now, **values)
                    .on_conflict_do_nothing()
                )
            await conn.execute(
                budget_runs.update()
                .where(budget_runs.c.run_id == run_id)
                .values(scopes=json.dumps(charged), model=model)
            )
            row = (
                (await conn.execute(sa.select(budget_runs).where(budget_runs.c.run_id == run_id)))
                .mappings()
                .one()
            )
            await _release(conn, row, charged)
        return _totals(row)

    async def existing(self, ids: list[str]) -> list[str]:
        """Those of ``ids`` that are scopes already (a run above this one may have set no limit)."""
        if not ids:
            return []
        async with self.engine.connect() as conn:
            found = (
                await conn.execute(sa.select(budget_scopes.c.id).where(budget_scopes.c.id.in_(ids)))
            ).scalars()
            return list(found)

    async def renew(
        self, run_id: str, scopes: list[str], spending: Spending, need: Need | None = None
    ) -> Renewed:
        """Record what the run spent since it last did and give back what it held; then, for
        ``need``, hold a lease in every scope: the tokens, money and tool calls of several calls
        while the scopes have plenty of room (a share of what is left, so that the runs beside
        it still get theirs), of just the call near the end. One transaction, whichever it does.
        """
        return await self._transact(lambda conn: _renew(conn, run_id, scopes, spending, need))

    async def _transact(self, work: Callable[[sa.Connection], T]) -> T:
        if self.transact is not None:
            done: T = await self.transact(work)
            return done
        async with write_transaction(self.engine) as conn:
            return await conn.run_sync(work)

    async def states(self, scopes: list[str]) -> list[ScopeState]:
        if not scopes:
            return []
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(sa.select(budget_scopes).where(budget_scopes.c.id.in_(scopes)))
            ).mappings()
            return [_state(row) for row in rows]

    async def scopes_charged(self, run_id: str) -> list[str]:
        """The scopes ``run_id`` counts against (none when it recorded nothing)."""
        async with self.engine.connect() as conn:
            query = sa.select(budget_runs.c.scopes).where(budget_runs.c.run_id == run_id)
            text = (await conn.execute(query)).scalar_one_or_none()
        return [str(s) for s in json.loads(text)] if text else []

    async def run(self, run_id: str) -> RunTotals | None:
        """What ``run_id`` spent itself, or None when it recorded nothing."""
        async with self.engine.connect() as conn:
            row = (
                (await conn.execute(sa.select(budget_runs).where(budget_runs.c.run_id == run_id)))
                .mappings()
                .first()
            )
        return _totals(row) if row is not None else None


def _renew(
    conn: sa.Connection, run_id: str, scopes: list[str], spent: Spending, need: Need | None
) -> Renewed:
    # Plain SQL, the same on both engines: building Core statements (coercions, bind parameters,
    # cache keys) cost ~10x the database's own work on SQLite (~1.5 of ~2 ms CPU a renewal).
    sql = _Sql(conn)
    usage, now = spent.usage, time.time()
    tokens, priced = usage.input_tokens + usage.output_tokens, float(spent.cost or 0.0)
    (held_tokens, held_cost), *_ = sql.run(_HELD, run_id) or [(0, 0.0)]
    ids = sql.ids(scopes)
    if scopes:
        calls = spent.untaken - spent.unused_calls
        held = (held_tokens, held_tokens, held_cost, held_cost)
        sql.run(_SETTLE + ids, tokens, priced, float(spent.time_s), calls, *held, now, *scopes)
    # The scopes' rows are locked now (SQLite: the write lock since BEGIN IMMEDIATE; PostgreSQL:
    # the update's row locks), so what is read is what the lease is worked out from.
    found = sql.run(_SCOPES + ids + " ORDER BY id", *scopes) if scopes else []
    rows = [dict(zip(_COLUMNS, row, strict=True)) for row in found]
    refused, lease = (None, (0, 0, 0)) if need is None or not scopes else _lease(rows, need)
    if refused is not None or not any(lease):
        lease = (0, 0, 0)
    else:
        sql.run(_TAKE + ids, lease[0], float(lease[1]), lease[2], *scopes)
    u = usage
    unpriced = spent.cost is None and u.requests > 0
    run = (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.requests, priced)
    sql.run(_RUN, *run, unpriced, float(spent.time_s), spent.calls, lease[0], float(lease[1]), now, run_id)
    return Renewed(refused, [_state(row) for row in rows], lease[0], float(lease[1]), lease[2])


_COLUMNS = ("id", "limit_tokens", "limit_cost", "limit_time", "limit_calls", "spent_tokens", "spent_cost",
            "spent_time", "spent_calls", "held_tokens", "held_cost")  # fmt: skip
_HELD = "SELECT held_tokens, held_cost FROM budget_runs WHERE run_id = ?"
_SETTLE = (
    "UPDATE budget_scopes SET spent_tokens = spent_tokens + ?, spent_cost = spent_cost + ?, "
    "spent_time = spent_time + ?, spent_calls = spent_calls + ?, "
    "held_tokens = CASE WHEN held_tokens < ? THEN 0 ELSE held_tokens - ? END, "
    "held_cost = CASE WHEN held_cost < ? THEN 0 ELSE held_cost - ? END, updated_at = ? WHERE id IN "
)
_TAKE = (
    "UPDATE budget_scopes SET held_tokens = held_tokens + ?, held_cost = held_cost + ?, "
    "spent_calls = spent_calls + ? WHERE id IN "
)
_SCOPES = "SELECT " + ", ".join(_COLUMNS) + " FROM budget_scopes WHERE id IN "  # noqa: S608 - names
_RUN = (
    "UPDATE budget_runs SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
    "cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?, "
    "requests = requests + ?, cost_usd = cost_usd + ?, unpriced = (unpriced OR ?), "
    "time_s = time_s + ?, tool_calls = tool_calls + ?, held_tokens = ?, held_cost = ?, updated_at = ? "
    "WHERE run_id = ?"
)


class _Sql:
    """Plain SQL (``?`` placeholders) on a transaction's connection: SQLite's own connection
    where the transaction runs in a thread of its own (``EventStore.transact``), else through
    SQLAlchemy's driver-level execute (PostgreSQL's ``$1``… placeholders)."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn
        self.postgres = conn.dialect.name == "postgresql"
        raw = conn.connection.driver_connection
        self.raw = raw if isinstance(raw, sqlite3.Connection) else None

    def ids(self, scopes: list[str]) -> str:
        return "(" + ", ".join("?" * len(scopes)) + ")"

    def run(self, sql: str, *params: Any) -> list[Any]:
        if self.raw is not None:
            cursor = self.raw.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
        result = self.conn.exec_driver_sql(_dollars(sql) if self.postgres else sql, params)
        return list(result.fetchall()) if result.returns_rows else []


@functools.lru_cache(maxsize=64)
def _dollars(sql: str) -> str:
    parts = sql.split("?")
    return "".join(part + (f"${n}" if n < len(parts) else "") for n, part in enumerate(parts, 1))


def _lease(rows: Any, need: Need) -> tuple[str | None, tuple[int, float, int]]:
    """The scope with no room for ``need``, or None and the lease: per dimension that some
    scope bounds, the need, or more while there is plenty of room (``LEASE_SHARE`` of the least
    that is left, at most ``LEASE_CALLS`` calls' worth)."""
    left_tokens: float = float("inf")
    left_cost: float = float("inf")
    left_calls: float = float("inf")
    for row in rows:
        if row["limit_tokens"]:
            left_tokens = min(left_tokens, row["limit_tokens"] - row["spent_tokens"] - row["held_tokens"])
        if row["limit_cost"]:
            left_cost = min(left_cost, row["limit_cost"] - row["spent_cost"] - row["held_cost"])
        if row["limit_calls"]:
            left_calls = min(left_calls, row["limit_calls"] - row["spent_calls"])
        if need.model:
            no_time = row["limit_time"] and row["spent_time"] >= row["limit_time"]
            if need.tokens > left_tokens or need.cost > left_cost or no_time:
                return row["id"], (0, 0.0, 0)
        if need.calls > left_calls:
            return row["id"], (0, 0.0, 0)
    at_least = need.model
    tokens = _share(need.tokens if at_least else 0, left_tokens, need.tokens * LEASE_CALLS)
    cost = _share(need.cost if at_least else 0.0, left_cost, need.cost * LEASE_CALLS)
    calls = _share(need.calls, left_calls, LEASE_CALLS)
    return None, (int(tokens), cost, int(calls))


def _share(need: float, left: float, most: float) -> float:
    """``need``, or more (up to ``most``) while ``LEASE_SHARE`` of what is ``left`` allows; 0
    where nothing bounds the dimension (``left`` infinite: no lease is needed)."""
    if left == float("inf"):
        return 0
    more = min(left * LEASE_SHARE, most)
    return max(need, more if isinstance(need, float) else int(more), 0)


def _insert(conn: AsyncConnection, table: sa.Table) -> Any:
    """An INSERT that can skip a row already there, in the engine's dialect."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def _at_least_0(value: Any) -> Any:
    return sa.case((value < 0, 0), else_=value)


async def _release(conn: AsyncConnection, row: sa.RowMapping, scopes: list[str]) -> None:
    """A hold the run still has (its process died while it held a lease) is counted as spent
    in its scopes: the process recorded its spending only when a lease ran out or the run
    waited or ended, so what part of the lease it used is not known, and counting all of it
    is what keeps the scopes' limits (the lease was a share of what was left). Nothing stays
    held for good. (Tool calls leased are counted as spent when leased: they stay so.)"""
    if not (row["held_tokens"] or row["held_cost"]) or not scopes:
        return
    t = budget_scopes
    await conn.execute(
        t.update()
        .where(t.c.id.in_(scopes))
        .values(
            spent_tokens=t.c.spent_tokens + row["held_tokens"],
            spent_cost=t.c.spent_cost + row["held_cost"],
            held_tokens=_at_least_0(t.c.held_tokens - row["held_tokens"]),
            held_cost=_at_least_0(t.c.held_cost - row["held_cost"]),
        )
    )
    await conn.execute(
        budget_runs.update().where(budget_runs.c.run_id == row["run_id"]).values(held_tokens=0, held_cost=0)
    )


def _state(row: sa.RowMapping | dict[str, Any]) -> ScopeState:
    limits = BudgetLimits(row["limit_tokens"], row["limit_cost"], row["limit_time"], row["limit_calls"])
    spent = Spent(row["spent_tokens"], row["spent_cost"], row["spent_time"], row["spent_calls"])
    return ScopeState(row["id"], limits, spent)


def _totals(row: sa.RowMapping) -> RunTotals:
    usage = Usage(
        row["input_tokens"],
        row["output_tokens"],
        row["cache_read_tokens"],
        row["cache_write_tokens"],
        row["requests"],
    )
    return RunTotals(
        row["run_id"],
        row["model"],
        usage,
        row["cost_usd"],
        bool(row["unpriced"]),
        row["tool_calls"],
        row["time_s"],
    )
