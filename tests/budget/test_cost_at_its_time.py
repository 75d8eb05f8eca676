"""A run's cost is what its model calls cost when they were made: each reply and summary records
it on its event, and ``steward runs show`` reads it there, whatever the prices are now. Events
recorded before they carried their cost are priced at the prices of today."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tests.budget.models import LookupModel, lookup

from steward import Agent, tool
from steward.budget.ledger import Ledger
from steward.config import BudgetSettings, Config, load_config
from steward.events import CompactionEvent, ModelReplyEvent
from steward.store.events import EventStore, open_store

MODEL = "openai:my-model"


def prices(per_mtok: float) -> str:
    """A ``[prices]`` entry for ``MODEL``: ``per_mtok`` for input, 4x for output, 1/4 cached."""
    return (
        f'[prices."{MODEL}"]\ninput_per_mtok = {per_mtok}\noutput_per_mtok = {4 * per_mtok}\n'
        f"cached_input_per_mtok = {per_mtok / 4}\n"
    )


def reply_cost(per_mtok: float) -> float:
    """What one of ``LookupModel``'s replies costs at ``prices(per_mtok)`` (4,000 of its 10,000
    input tokens cached, 100 out)."""
    return (6_000 * per_mtok + 4_000 * per_mtok / 4 + 100 * 4 * per_mtok) / 1_000_000


def configure(ws: Path, price: str) -> None:
    (ws / "steward.toml").write_text(f'[store]\nurl = "sqlite:///{ws / "steward.db"}"\n{price}')


def record(ws: Path, model: str = MODEL) -> str:
    """A run of three replies (two lookups and the end), at the prices ``ws``'s config has now."""

    async def run() -> str:
        config = load_config(ws, user_file=ws / "none.toml")
        async with await open_store(f"sqlite:///{ws / 'steward.db'}") as store:
            agent = Agent(LookupModel(calls=2, name=model), tools=[lookup], builtin_tools=False,
                          config=config, store=store, sandbox=False)  # fmt: skip
            started = agent.start("look the keys up", workspace=ws)
            assert (await started.result()).end_status == "solved"
            return started.id

    return asyncio.run(run())


def runs_show(ws: Path, run_id: str) -> str:
    shown = subprocess.run([sys.executable, "-m", "steward", "runs", "show", run_id, "-w", str(ws)],
                           capture_output=True, text=True, timeout=120,
                           env={"XDG_CONFIG_HOME": str(ws / "c"), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    spent = [line for line in shown.stdout.splitlines() if line.startswith("spent:")]
    assert spent, shown.stdout
    return spent[0]


def test_runs_show_keeps_the_price_a_run_was_recorded_at(tmp_path: Path) -> None:
    configure(tmp_path, prices(2.0))
    run_id = record(tmp_path)
    configure(tmp_path, prices(20.0))  # the price went up after the run
    spent = runs_show(tmp_path, run_id)
    assert f"${3 * reply_cost(2.0):.4f}" in spent, spent
    assert f"${3 * reply_cost(20.0):.4f}" not in spent


def test_a_reply_recorded_before_replies_carried_their_cost_is_priced_at_todays_prices(
    tmp_path: Path,
) -> None:
    configure(tmp_path, prices(2.0))
    run_id = record(tmp_path)
    # The log as an older Steward wrote it: its replies have no cost, nor the mark that they do.
    with sqlite3.connect(tmp_path / "steward.db") as db:
        rows = db.execute("SELECT seq, data FROM events WHERE run_id = ? AND type = 'model_reply'", (run_id,))
        for seq, data in rows.fetchall():
            old = {k: v for k, v in json.loads(data).items() if k not in ("cost_usd", "priced")}
            db.execute(
                "UPDATE events SET data = ? WHERE run_id = ? AND seq = ?", (json.dumps(old), run_id, seq)
            )
    configure(tmp_path, prices(20.0))
    spent = runs_show(tmp_path, run_id)
    assert f"${3 * reply_cost(20.0):.4f}" in spent, spent


def test_a_reply_that_had_no_price_stays_cost_unknown_when_a_price_is_added(tmp_path: Path) -> None:
    configure(tmp_path, "")
    run_id = record(tmp_path)  # no price is known for the model
    configure(tmp_path, prices(2.0))
    spent = runs_show(tmp_path, run_id)
    assert "cost unknown" in spent and "$" not in spent
    assert f'no price was known for {MODEL} when it ran; [prices."{MODEL}"] prices later runs' in spent


@tool
def long_lookup(key: str) -> str:
    """Look a key up (a long answer: its output is compacted by a summary call).

    Args:
        key: The key.
    """
    return f"value of {key}: " + "a long answer, " * 600


async def test_each_reply_and_summary_records_its_cost_and_they_add_up_to_what_the_budget_counted(
    store: EventStore, tmp_path: Path
) -> None:
    model = LookupModel(calls=2, tool="long_lookup")  # gpt-4o-mini, priced by the table
    config = Config(budget=BudgetSettings(tokens=10**9))
    agent = Agent(model, tools=[long_lookup], builtin_tools=False, config=config, store=store, sandbox=False)
    run = agent.start("look the keys up", workspace=tmp_path)
    assert (await run.result()).end_status == "solved"
    events = await store.events(run.id)
    calls = [e for e in events if isinstance(e, ModelReplyEvent | CompactionEvent)]
    assert sum(isinstance(e, CompactionEvent) for e in calls) == 2, "each long output was summarised"
    assert all(e.priced and e.cost_usd is not None and e.cost_usd > 0 for e in calls)
    totals = await Ledger(store.engine).run(run.id)
    assert totals is not None
    assert totals.cost_usd == pytest.approx(sum(e.cost_usd or 0.0 for e in calls))
