"""Budgets and cost: tokens, money, running time and tool calls, per run, per job tree and per
session (``[budget]``), with money from a price table per model (``[prices]``, ``genai-prices``).

``attach_budget`` puts a run's budgets around its loop (``steward.budget.guard``); the store
keeps what is shared (``steward.budget.ledger``); ``steward.budget.report`` tells what a run
spent per phase and per tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from steward.budget.limits import BudgetLimits, Spent

if TYPE_CHECKING:
    from steward.budget.guard import Budget
    from steward.config import Config
    from steward.loop import Loop
    from steward.store.events import EventStore

__all__ = ["BudgetLimits", "Spent", "attach_budget", "budget_for"]


def budget_for(
    config: Config, model: str, store: EventStore | None, run_id: str, session_id: str | None
) -> Budget | None:
    """The budgets of a run of ``model`` as ``config`` sets them; None when there are none and
    nothing to record them in. A budget in money for a model without a price is a ``ConfigError``."""
    from steward.budget.guard import Budget
    from steward.budget.prices import rates_for, unknown_price
    from steward.errors import ConfigError

    b = config.budget
    own, tree, session = BudgetLimits.of(b), BudgetLimits.of(b, "tree_"), BudgetLimits.of(b, "session_")
    if store is None and not (own or tree or session):
        return None
    rates = rates_for(model, config.prices)
    money = [
        name
        for name, limits in (("cost_usd", own), ("tree_cost_usd", tree), ("session_cost_usd", session))
        if limits.cost_usd > 0
    ]
    if rates is None and money:
        # The run's own money budget may have come from the command line rather than a file.
        flag = " (--budget-usd)" if money[0] == "cost_usd" else ""
        raise ConfigError(f"[budget] {money[0]}{flag} is set but {unknown_price(model)} (or remove it)")
    shared: dict[str, BudgetLimits] = {}
    if own and store is not None:  # the jobs it delegates to charge it too
        shared[f"run:{run_id}"] = own
    if tree:
        shared["tree" if store is not None else f"tree:{run_id}"] = tree
    if session and session_id is not None:
        shared[f"session:{session_id}"] = session
    from steward.budget.ledger import Ledger

    ledger = Ledger(store.engine, store.transact) if store is not None else None
    return Budget(run_id, model, rates, own, shared, b.warn_at, ledger, session_id)


def attach_budget(loop: Loop, config: Config, store: EventStore | None) -> None:
    """Put the run's budgets (if any) around ``loop``: its model, its toolset and its steps."""
    st = loop.state
    budget = budget_for(config, loop.model.name, store, st.run_id, st.session_id)
    if budget is not None:
        budget.attach(loop)
