"""Leases in the store's budget scopes (``Ledger.renew``): runs at once never lease past a scope's
limit, a lease shrinks to one call's worth near the end, tool calls leased and not made are
given back, and a lease a dead process left is counted, not held for good."""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa
from tests.budget.models import LookupModel, lookup

from steward import Agent
from steward.budget.guard import BUDGET_EXHAUSTED, BUDGET_WARNING
from steward.budget.ledger import Ledger
from steward.budget.limits import BudgetLimits, Need, Spending
from steward.config import BudgetSettings, Config
from steward.events import DoneEvent, SignalEvent
from steward.models.base import Usage
from steward.store.events import EventStore
from steward.store.schema import budget_scopes

SCOPE = "tree:t"
CALL = 300  # tokens a model call may take


async def held(store: EventStore, scope: str = SCOPE) -> tuple[int, float]:
    async with store.engine.connect() as conn:
        query = sa.select(budget_scopes.c.held_tokens, budget_scopes.c.held_cost)
        row = (await conn.execute(query.where(budget_scopes.c.id == scope))).one()
    return int(row[0]), float(row[1])


async def test_runs_at_once_never_lease_past_the_limit_and_leases_shrink_near_it(store: EventStore) -> None:
    limit = 20_000
    limits = {SCOPE: BudgetLimits(tokens=limit)}
    # One run through the store's writer (a thread of its own on SQLite), one through an async
    # connection: the two ways a renewal runs.
    ledgers = {"a": Ledger(store.engine, store.transact), "b": Ledger(store.engine)}
    for run_id, ledger in ledgers.items():
        await ledger.open(run_id, "m", limits, [SCOPE])

    async def spend_all(run_id: str) -> list[int]:
        """Lease, use the whole lease, lease again, until refused."""
        leases: list[int] = []
        used = Spending()
        while True:
            renewed = await ledgers[run_id].renew(run_id, [SCOPE], used, Need(CALL, 0.0, model=True))
            if renewed.refused is not None:
                assert renewed.refused == SCOPE and renewed.tokens == 0
                return leases
            assert renewed.tokens >= CALL
            leases.append(renewed.tokens)
            used = Spending(Usage(renewed.tokens, 0, 0, 0, 1))

    a, b = await asyncio.gather(spend_all("a"), spend_all("b"))
    (state,) = await ledgers["a"].states([SCOPE])
    # Everything leased was used and recorded (the refused renewal recorded the last), no more
    # than the limit, and a run was refused only when a call no longer fitted.
    assert state.spent.tokens == sum(a) + sum(b) <= limit
    assert limit - state.spent.tokens < CALL
    assert await held(store) == (0, 0.0)
    assert max(a + b) > CALL and min(a + b) == CALL  # several calls' worth at first, one at the end
    totals = [await ledgers["a"].run(r) for r in ("a", "b")]
    assert [t.tokens for t in totals if t is not None] == [sum(a), sum(b)]


async def test_tool_calls_leased_and_not_made_are_given_back(store: EventStore) -> None:
    ledger = Ledger(store.engine, store.transact)
    await ledger.open("r", "m", {SCOPE: BudgetLimits(tool_calls=40)}, [SCOPE])
    renewed = await ledger.renew("r", [SCOPE], Spending(), Need(calls=1))
    assert renewed.refused is None and renewed.calls == 10  # a quarter of what is left
    (state,) = await ledger.states([SCOPE])
    assert state.spent.tool_calls == 10  # counted while leased: no other run can take them
    # The run made 3 of them, then ended: 7 given back.
    await ledger.renew("r", [SCOPE], Spending(calls=3, unused_calls=7))
    (state,) = await ledger.states([SCOPE])
    totals = await ledger.run("r")
    assert state.spent.tool_calls == 3 and totals is not None and totals.tool_calls == 3


async def test_a_lease_left_by_a_dead_process_is_counted_when_the_run_goes_on(store: EventStore) -> None:
    limits = {SCOPE: BudgetLimits(tokens=100_000)}
    ledger = Ledger(store.engine, store.transact)
    await ledger.open("r", "m", limits, [SCOPE])
    lease = await ledger.renew("r", [SCOPE], Spending(), Need(CALL, 0.0, model=True))
    assert lease.tokens > CALL and await held(store) == (lease.tokens, 0.0)
    # The process dies holding its lease; the run is resumed elsewhere and opens its budget again.
    await ledger.open("r", "m", limits, [SCOPE])
    (state,) = await ledger.states([SCOPE])
    # What part of the lease it used is not known: all of it counts, nothing stays held.
    assert state.spent.tokens == lease.tokens and await held(store) == (0, 0.0)
    # The run leases again from what is left.
    again = await ledger.renew("r", [SCOPE], Spending(), Need(CALL, 0.0, model=True))
    assert again.refused is None and await held(store) == (again.tokens, 0.0)


async def test_a_tree_budget_kept_by_leases_warns_at_80_percent_and_ends_the_run_at_its_limit(
    store: EventStore, tmp_path: Path
) -> None:
    model = LookupModel(calls=20)
    a = Agent(model, tools=[lookup], builtin_tools=False, store=store, sandbox=False,
              config=Config(budget=BudgetSettings(tree_tool_calls=5)))  # fmt: skip
    events = [e async for e in a.start("look the keys up", workspace=tmp_path).stream()]
    warnings = [e for e in events if isinstance(e, SignalEvent) and e.code == BUDGET_WARNING]
    stops = [e for e in events if isinstance(e, SignalEvent) and e.code == BUDGET_EXHAUSTED]
    assert len(warnings) == 1 and "job tree's budget is 80% used" in warnings[0].message
    assert len(stops) == 1 and events.index(warnings[0]) < events.index(stops[0])
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "partial" and done.tool_calls == 5
    # What the tree counts is what was made: the calls leased and not made were given back.
    run_id = events[0].run_id
    (state,) = await Ledger(store.engine).states([f"tree:{run_id}"])
    totals = await Ledger(store.engine).run(run_id)
    assert state.spent.tool_calls == 5 and totals is not None and totals.tool_calls == 5
    assert await held(store, f"tree:{run_id}") == (0, 0.0)
