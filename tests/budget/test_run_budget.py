"""A run's own budget (``[budget]`` tokens, cost_usd, tool_calls): the agent is told at 80 %,
and at 100 % the run ends partial with what it did; what it spent is in the store, counted once
even when the run is rebuilt from its log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.budget.models import USAGE, LookupModel, lookup

from steward import Agent, tool
from steward.budget.guard import BUDGET_EXHAUSTED, BUDGET_WARNING
from steward.budget.ledger import Ledger
from steward.config import BudgetSettings, Config
from steward.events import DoneEvent, Event, SignalEvent
from steward.models.base import Usage, UserMessage
from steward.safety.policy.rules import Policy
from steward.store.events import EventStore

# gpt-4o-mini's price in the table: $0.15 per million input tokens, $0.075 cached, $0.60 output.
STEP_COST = (6_000 * 0.15 + 4_000 * 0.075 + 100 * 0.60) / 1_000_000


def agent(model: LookupModel, store: EventStore | None = None, **budget: float) -> Agent:
    config = Config(budget=BudgetSettings(**budget))  # type: ignore[arg-type]
    return Agent(model, tools=[lookup], builtin_tools=False, config=config, store=store, sandbox=False)


async def events_of(a: Agent, tmp_path: Path) -> list[Event]:
    run = a.start("look the keys up", workspace=tmp_path)
    return [e async for e in run.stream()]


def signals(events: list[Event], code: str) -> list[SignalEvent]:
    return [e for e in events if isinstance(e, SignalEvent) and e.code == code]


async def test_tool_calls_warn_at_80_percent_then_end_the_run_partial(
    store: EventStore, tmp_path: Path
) -> None:
    model = LookupModel(calls=20)
    events = await events_of(agent(model, store, tool_calls=5), tmp_path)

    (warning,) = signals(events, BUDGET_WARNING)
    assert "80%" in warning.message and "; the limit is 5 tool calls)" in warning.message
    assert "used (spent " in warning.message and "4 tool calls;" in warning.message  # spent, then the limit
    # The agent reads it: the request after the warning carries it.
    told = [r for r in model.requests if any(isinstance(m, UserMessage) and m.content == warning.message
                                            for m in r.messages)]  # fmt: skip
    assert told, "the warning never reached the model"
    (stop,) = signals(events, BUDGET_EXHAUSTED)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "partial" and done.tool_calls == 5
    assert done.message.startswith("Stopped: this run's budget of 5 tool calls is used up")
    assert "Made 5 tool calls" in done.message  # what it did, for whoever reads the ending
    assert events.index(warning) < events.index(stop)

    totals = await Ledger(store.engine).run(events[0].run_id)
    assert totals is not None and totals.tool_calls == 5 and totals.usage.requests == 5
    assert totals.tokens == 5 * (USAGE.input_tokens + USAGE.output_tokens)
    assert totals.cost_usd == pytest.approx(5 * STEP_COST)


async def test_a_token_budget_stops_before_a_call_that_would_not_fit(tmp_path: Path) -> None:
    """Without a store: the run's own budget, checked before each model call."""
    limit = 45_000
    events = await events_of(agent(LookupModel(calls=20), tokens=limit), tmp_path)
    replies = [e for e in events if e.type == "model_reply"]
    spent = len(replies) * (USAGE.input_tokens + USAGE.output_tokens)
    assert 0 < spent <= limit
    (warning,) = signals(events, BUDGET_WARNING)
    assert "tokens" in warning.message
    (stop,) = signals(events, BUDGET_EXHAUSTED)
    assert "no room for another model call" in stop.message
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "partial"
    # The call's size is written as the spent figures are, with thousands separators.
    size = re.search(r"of about ([\d,]+) tokens", stop.message)
    assert size is not None and int(size[1].replace(",", "")) >= 1_000, stop.message
    assert size[1] == f"{int(size[1].replace(',', '')):,}", stop.message


@pytest.mark.parametrize("shared", [False, True], ids=["own", "in the store"])
async def test_a_money_budget_holds_a_reply_at_the_output_price_so_long_replies_do_not_overrun_it(
    store: EventStore, tmp_path: Path, shared: bool
) -> None:
    """Replies cost 4 times their prompt's tokens here: a call held at the input price would fit
    where its reply then overruns the budget."""
    usage = Usage(input_tokens=1_000, output_tokens=4_000, requests=1)
    step = (1_000 * 0.15 + 4_000 * 0.60) / 1_000_000
    limit = 1.86 * step
    budget = {"session_cost_usd" if shared else "cost_usd": limit}
    made = agent(LookupModel(calls=5, usage=usage), store, **budget)
    run = made.start("look the keys up", workspace=tmp_path, session_id="s-1" if shared else None)
    events = [e async for e in run.stream()]
    assert len([e for e in events if e.type == "model_reply"]) == 1, [e.type for e in events]
    (stop,) = signals(events, BUDGET_EXHAUSTED)
    assert "no room for another model call" in stop.message, stop.message
    totals = await Ledger(store.engine).run(events[0].run_id)
    assert totals is not None and totals.cost_usd <= limit


async def test_a_money_budget_ends_the_run_when_spent(store: EventStore, tmp_path: Path) -> None:
    events = await events_of(agent(LookupModel(calls=20), store, cost_usd=3.5 * STEP_COST), tmp_path)
    replies = [e for e in events if e.type == "model_reply"]
    assert 1 <= len(replies) <= 3  # never past $ (3.5 steps)
    (stop,) = signals(events, BUDGET_EXHAUSTED)
    assert "USD" in stop.message or "no room for another model call" in stop.message
    if "no room" in stop.message:  # the call's size in money too: the budget that refused it is one
        assert re.search(r"of about [\d,]+ tokens, \$\d+\.\d{4}\)", stop.message), stop.message
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "partial"
    totals = await Ledger(store.engine).run(events[0].run_id)
    assert totals is not None and totals.cost_usd <= 3.5 * STEP_COST


async def test_a_run_within_its_budget_is_not_touched(store: EventStore, tmp_path: Path) -> None:
    events = await events_of(agent(LookupModel(calls=2), store, tool_calls=10, tokens=1_000_000), tmp_path)
    assert not signals(events, BUDGET_WARNING) and not signals(events, BUDGET_EXHAUSTED)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "solved"


async def test_a_run_without_a_budget_still_records_what_it_spent(store: EventStore, tmp_path: Path) -> None:
    events = await events_of(agent(LookupModel(calls=3), store), tmp_path)
    totals = await Ledger(store.engine).run(events[0].run_id)
    assert totals is not None and totals.model == "openai:gpt-4o-mini"
    assert totals.usage.requests == 4 and totals.tool_calls == 3 and totals.time_s > 0
    assert totals.cost_usd == pytest.approx(4 * STEP_COST)


async def test_a_resumed_run_keeps_what_it_spent_and_counts_nothing_twice(
    store: EventStore, tmp_path: Path
) -> None:
    """Paused for an approval, then rebuilt by another agent (another process, in effect)."""

    def asking(model: LookupModel) -> Agent:
        a = agent(model, store, tool_calls=5)
        a._policy = Policy.from_lists(ask=["lookup"])  # every call waits for a person
        return a

    run = asking(LookupModel(calls=10)).start("look the keys up", workspace=tmp_path)
    result = await run.result()
    assert result.waiting
    for _ in range(4):  # approve four calls across four "restarts"
        again = await asking(LookupModel(calls=10)).resume(run.id)
        result = await again.approve()
        assert result.waiting
    last = await asking(LookupModel(calls=10)).resume(run.id)
    result = await last.approve()
    assert not result.waiting and result.end_status == "partial"  # the 5th call used the budget up
    totals = await Ledger(store.engine).run(run.id)
    assert totals is not None and totals.tool_calls == 5
    assert totals.usage.requests == 5  # each reply asked once: none asked again while rebuilding
    assert totals.tokens == 5 * (USAGE.input_tokens + USAGE.output_tokens)
    events = await store.events(run.id)
    # Told once, at the 4th call, and that signal was rebuilt (not raised again) after it.
    assert len(signals(events, BUDGET_WARNING)) == 1


async def test_the_runs_of_a_session_share_its_budget(store: EventStore, tmp_path: Path) -> None:
    first = agent(LookupModel(calls=2), store, session_tool_calls=3).start(
        "look", workspace=tmp_path, session_id="s1"
    )
    assert (await first.result()).end_status == "solved"
    second = agent(LookupModel(calls=5), store, session_tool_calls=3).start(
        "look", workspace=tmp_path, session_id="s1"
    )
    result = await second.result()
    assert (
        result.end_status == "partial" and "the session's budget of 3 tool calls is used up" in result.output
    )
    totals = await Ledger(store.engine).run(second.id)
    assert totals is not None and totals.tool_calls == 1  # what the session had left
    other = agent(LookupModel(calls=2), store, session_tool_calls=3).start(
        "look", workspace=tmp_path, session_id="s2"
    )
    assert (await other.result()).end_status == "solved"  # another session has its own


async def test_a_shared_budget_without_a_call_limit_still_counts_the_calls_once(
    store: EventStore, tmp_path: Path
) -> None:
    """The run's scope in the store bounds tokens only: its calls are counted when the run
    settles, not one by one, and a call given back while it waits for an approval counts once,
    when it runs."""
    a = agent(LookupModel(calls=3), store, tokens=1_000_000)
    a._policy = Policy.from_lists(ask=["lookup"])
    run = a.start("look", workspace=tmp_path)
    result = await run.result()
    for _ in range(3):
        assert result.waiting
        again = agent(LookupModel(calls=3), store, tokens=1_000_000)
        again._policy = Policy.from_lists(ask=["lookup"])
        result = await (await again.resume(run.id)).approve()
    assert result.end_status == "solved"
    (scope,) = await Ledger(store.engine).states([f"run:{run.id}"])
    totals = await Ledger(store.engine).run(run.id)
    assert totals is not None and totals.tool_calls == 3
    assert scope.spent.tool_calls == 3 and scope.spent.tokens == totals.tokens > 0


@tool
def long_lookup(key: str) -> str:
    """Look a key up (a long answer: its output is compacted by a summary call).

    Args:
        key: The key.
    """
    return f"value of {key}: " + "a long answer, " * 600


async def test_the_summaries_compaction_asks_for_count_too(store: EventStore, tmp_path: Path) -> None:
    """Each long output is summarised by the run's model: those calls are spent like the steps'."""
    model = LookupModel(calls=3, tool="long_lookup")
    config = Config(budget=BudgetSettings(tokens=10**9))
    a = Agent(model, tools=[long_lookup], builtin_tools=False, config=config, store=store, sandbox=False)
    events = await events_of(a, tmp_path)
    summaries = [r for r in model.requests if r.purpose != "step"]
    compactions = [e for e in events if e.type == "compaction"]
    assert len(summaries) == len(compactions) == 3, "each long output was summarised"
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "solved"
    totals = await Ledger(store.engine).run(events[0].run_id)
    assert totals is not None and totals.usage.requests == 4 + 3  # the 4 steps' replies and 3 summaries
    assert totals.tokens == 7 * (USAGE.input_tokens + USAGE.output_tokens)
    assert totals.cost_usd == pytest.approx(7 * STEP_COST)


async def test_a_summary_that_would_not_fit_is_not_asked_for(tmp_path: Path) -> None:
    """Without a store: the summary's call is checked before it is made, as a step's is; the
    output then stays as an excerpt, and the run ends partial at its next step."""
    per_call = USAGE.input_tokens + USAGE.output_tokens
    model = LookupModel(calls=5, tool="long_lookup")
    config = Config(budget=BudgetSettings(tokens=int(1.5 * per_call)))
    a = Agent(model, tools=[long_lookup], builtin_tools=False, config=config, sandbox=False)
    events = await events_of(a, tmp_path)
    assert not [r for r in model.requests if r.purpose != "step"], "no room was left for a summary"
    assert len(model.requests) == 1
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.end_status == "partial"
    (stop,) = signals(events, BUDGET_EXHAUSTED)
    assert "no room for another model call" in stop.message
