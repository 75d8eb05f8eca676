"""Budgets kept in the store, where every worker process sees the same numbers.

A run charges its own row and the scopes it shares: the runs above it (a parent's budget
covers what it delegates), its job tree, its session. A model call first *holds* what it may
cost in every scope it charges, in one transaction whose conditional ``UPDATE`` succeeds only
if the hold fits what is left (``spent + held + hold <= limit``); two children in different
processes asking for the last of a tree's tokens cannot both get it. When the call returns,
its real usage replaces the hold. A tool call takes one call from its scopes the same way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from steward.budget.limits import BudgetLimits, Spent
from steward.models.base import Usage
from steward.store.engine import write_transaction
from steward.store.schema import budget_runs, budget_scopes

_MAX_DEPTH = 16  # jobs above a job that are looked at (delegation goes a few levels at most)


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


class _Refused(Exception):  # noqa: N818 - rolls the hold back; the caller gets the scope's id
    def __init__(self, scope: str) -> None:
        self.scope = scope


class Ledger:
    """The budget tables of one store."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

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

        A scope that exists keeps its limits (its first run set them); a hold this run left when
        its process died is given back.
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

    async def hold(self, run_id: str, scopes: list[str], tokens: int, cost: float) -> str | None:
        """Hold ``tokens`` and ``cost`` in every scope for a model call; the scope that has no
        room for it (nothing is held then), or None."""
        t = budget_scopes
        try:
            async with write_transaction(self.engine) as conn:
                for scope in scopes:
                    fits = sa.and_(
                        t.c.id == scope,
                        sa.or_(
                            t.c.limit_tokens == 0,
                            t.c.spent_tokens + t.c.held_tokens + tokens <= t.c.limit_tokens,
                        ),
                        sa.or_(t.c.limit_cost == 0, t.c.spent_cost + t.c.held_cost + cost <= t.c.limit_cost),
                        sa.or_(t.c.limit_time == 0, t.c.spent_time < t.c.limit_time),
                    )
                    taken = await conn.execute(
                        t.update()
                        .where(fits)
                        .values(held_tokens=t.c.held_tokens + tokens, held_cost=t.c.held_cost + cost)
                    )
                    _taken(taken.rowcount, scope)
                r = budget_runs
                await conn.execute(
                    r.update()
                    .where(r.c.run_id == run_id)
                    .values(held_tokens=r.c.held_tokens + tokens, held_cost=r.c.held_cost + cost)
                )
        except _Refused as refused:
            return refused.scope
        return None

    async def take_call(self, scopes: list[str]) -> str | None:
        """Count one tool call in every scope; the scope whose calls are used up (nothing is
        counted then), or None. (The run's own row counts it when the run settles.)"""
        t = budget_scopes
        try:
            async with write_transaction(self.engine) as conn:
                for scope in scopes:
                    fits = sa.and_(
                        t.c.id == scope, sa.or_(t.c.limit_calls == 0, t.c.spent_calls < t.c.limit_calls)
                    )
                    taken = await conn.execute(t.update().where(fits).values(spent_calls=t.c.spent_calls + 1))
                    _taken(taken.rowcount, scope)
        except _Refused as refused:
            return refused.scope
        return None

    async def give_back_call(self, scopes: list[str]) -> None:
        """A call counted by ``take_call`` did not run (it waits for an approval)."""
        t = budget_scopes
        async with write_transaction(self.engine) as conn:
            await conn.execute(
                t.update().where(t.c.id.in_(scopes)).values(spent_calls=_at_least_0(t.c.spent_calls - 1))
            )

    async def settle(
        self,
        run_id: str,
        scopes: list[str],
        usage: Usage,
        cost: float | None,
        time_s: float,
        calls: int,
        untaken: int = 0,
    ) -> list[ScopeState]:
        """Record what the run spent since it last settled (its holds given back); how its
        scopes stand now. ``untaken``: tool calls the scopes count now, not one by one by
        ``take_call`` (none of them bounds tool calls)."""
        r, t = budget_runs, budget_scopes
        tokens, priced = usage.input_tokens + usage.output_tokens, cost or 0.0
        async with write_transaction(self.engine) as conn:
            row = (await conn.execute(sa.select(r).where(r.c.run_id == run_id))).mappings().one()
            if scopes:
                await conn.execute(
                    t.update()
                    .where(t.c.id.in_(scopes))
                    .values(
                        spent_tokens=t.c.spent_tokens + tokens,
                        spent_cost=t.c.spent_cost + priced,
                        spent_time=t.c.spent_time + time_s,
                        spent_calls=t.c.spent_calls + untaken,
                        held_tokens=_at_least_0(t.c.held_tokens - row["held_tokens"]),
                        held_cost=_at_least_0(t.c.held_cost - row["held_cost"]),
                        updated_at=time.time(),
                    )
                )
            await conn.execute(
                r.update()
                .where(r.c.run_id == run_id)
                .values(
                    input_tokens=r.c.input_tokens + usage.input_tokens,
                    output_tokens=r.c.output_tokens + usage.output_tokens,
                    cache_read_tokens=r.c.cache_read_tokens + usage.cache_read_tokens,
                    cache_write_tokens=r.c.cache_write_tokens + usage.cache_write_tokens,
                    requests=r.c.requests + usage.requests,
                    cost_usd=r.c.cost_usd + priced,
                    unpriced=sa.or_(r.c.unpriced, sa.literal(cost is None and usage.requests > 0)),
                    time_s=r.c.time_s + time_s,
                    tool_calls=r.c.tool_calls + calls,
                    held_tokens=0,
                    held_cost=0,
                    updated_at=time.time(),
                )
            )
            rows = (
                (await conn.execute(sa.select(t).where(t.c.id.in_(scopes)))).mappings().all()
                if scopes
                else []
            )
        return [_state(row) for row in rows]

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


def _taken(rowcount: int, scope: str) -> None:
    if rowcount != 1:  # the conditional update found no room: the whole transaction rolls back
        raise _Refused(scope)


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
    """Give back a hold the run still has (its process died during a model call)."""
    if not (row["held_tokens"] or row["held_cost"]) or not scopes:
        return
    t = budget_scopes
    await conn.execute(
        t.update()
        .where(t.c.id.in_(scopes))
        .values(
            held_tokens=_at_least_0(t.c.held_tokens - row["held_tokens"]),
            held_cost=_at_least_0(t.c.held_cost - row["held_cost"]),
        )
    )
    await conn.execute(
        budget_runs.update().where(budget_runs.c.run_id == row["run_id"]).values(held_tokens=0, held_cost=0)
    )


def _state(row: sa.RowMapping) -> ScopeState:
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
