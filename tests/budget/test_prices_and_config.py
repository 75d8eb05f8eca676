"""Money from the price table and from ``[prices]``, and what a wrong ``[budget]`` or
``[prices]`` says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.budget.models import LookupModel, lookup
from typer.testing import CliRunner

from steward import Agent
from steward.budget.ledger import Ledger
from steward.budget.prices import FREE, rates_for
from steward.cli.commands import app
from steward.config import load_config
from steward.errors import ConfigError
from steward.models.base import Usage
from steward.store.events import EventStore


def config_in(tmp_path: Path, text: str) -> Path:
    (tmp_path / "steward.toml").write_text(text)
    return tmp_path


def test_a_known_models_price_comes_from_the_table_with_cached_tokens_priced_as_such() -> None:
    rates = rates_for("openai:gpt-4o-mini", {})
    assert rates is not None
    assert (rates.input_per_mtok, rates.cached_input_per_mtok, rates.output_per_mtok) == (0.15, 0.075, 0.6)
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=400_000)
    assert rates.cost(usage) == pytest.approx(600_000 * 0.15e-6 + 400_000 * 0.075e-6 + 0.6)
    anthropic = rates_for("anthropic:claude-sonnet-4-5", {})
    assert anthropic is not None and anthropic.output_per_mtok == 15.0
    assert anthropic.cache_write_per_mtok > anthropic.input_per_mtok  # writing the cache costs more


def test_local_and_scripted_models_are_free_and_an_unknown_one_has_no_price() -> None:
    assert rates_for("scripted:demo.yaml", {}) == FREE and rates_for("ollama:llama3", {}) == FREE
    assert rates_for("openai:my-own-model", {}) is None
    assert rates_for("function", {}) is None


async def test_a_config_price_overrides_the_table_and_prices_the_run(
    store: EventStore, tmp_path: Path
) -> None:
    ws = config_in(
        tmp_path,
        '[prices."openai:my-model"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\ncached_input_per_mtok = 0.5\n',
    )
    config = load_config(ws, user_file=tmp_path / "none.toml")
    model = LookupModel(calls=1, name="openai:my-model")
    agent = Agent(model, tools=[lookup], builtin_tools=False, config=config, store=store, sandbox=False)
    run = agent.start("look it up", workspace=ws)
    assert (await run.result()).end_status == "solved"
    totals = await Ledger(store.engine).run(run.id)
    per_reply = (6_000 * 2.0 + 4_000 * 0.5 + 100 * 8.0) / 1_000_000
    assert totals is not None and totals.cost_usd == pytest.approx(2 * per_reply) and not totals.unpriced


async def test_a_money_budget_for_a_model_without_a_price_refuses_to_start(tmp_path: Path) -> None:
    config = load_config(config_in(tmp_path, "[budget]\ncost_usd = 0.5\n"), user_file=tmp_path / "none.toml")
    agent = Agent(LookupModel(calls=1, name="openai:my-model"), tools=[lookup], builtin_tools=False,
                  config=config, sandbox=False)  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        agent.start("look it up", workspace=tmp_path)
    assert '[prices."openai:my-model"]' in str(refused.value) and "cost_usd" in str(refused.value)
    assert "(--budget-usd)" in str(refused.value)  # the same budget, given on the command line


async def test_an_unpriced_model_without_a_money_budget_runs_and_its_cost_is_marked_unknown(
    store: EventStore, tmp_path: Path
) -> None:
    agent = Agent(LookupModel(calls=1, name="openai:my-model"), tools=[lookup], builtin_tools=False,
                  store=store, sandbox=False)  # fmt: skip
    run = agent.start("look it up", workspace=tmp_path)
    assert (await run.result()).end_status == "solved"
    totals = await Ledger(store.engine).run(run.id)
    assert totals is not None and totals.unpriced and totals.cost_usd == 0 and totals.tokens > 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[budget]\ntokens = -5\n", "'budget.tokens': Input should be greater than or equal to 0 (got -5)"),
        ("[budget]\nwarn_at = 1.5\n", "'budget.warn_at': Input should be less than or equal to 1 (got 1.5)"),
        ("[budget]\ntoken = 5\n", "unknown key 'budget.token' (allowed here: tokens, cost_usd"),
        ('[budget]\ncost_usd = "a lot"\n', "budget.cost_usd"),
        ('[prices."openai:x"]\ninput_per_mtok = 1.0\n', "prices.openai:x.output_per_mtok"),
        (
            '[prices."openai:x"]\ninput_per_mtok = 1.0\noutput_per_mtok = -2\n',
            "output_per_mtok': Input should be greater than or equal to 0",
        ),
        (
            "[prices.gpt-4o-mini]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n",
            "names no provider, so no model would use it: write the model as --model names it, quoted, e.g. "
            '[prices."openai:gpt-4o-mini"]',
        ),
        (
            '[prices."openai:x"]\ninput = 1.0\n',
            "unknown key 'prices.openai:x.input' (allowed here: input_per_mtok",
        ),
    ],
)
def test_a_wrong_budget_or_price_names_the_key_and_what_is_allowed(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as wrong:
        load_config(config_in(tmp_path, text), user_file=tmp_path / "none.toml")
    assert expected in str(wrong.value) and "steward.toml" in str(wrong.value)


def test_budget_counts_may_be_written_with_k_or_m_and_a_wrong_one_says_what_to_write(tmp_path: Path) -> None:
    text = '[budget]\ntokens = "200k"\ntree_tokens = "1.5M"\ntool_calls = "30"\nsession_tokens = 5000\n'
    budget = load_config(config_in(tmp_path, text), user_file=tmp_path / "none.toml").budget
    assert (budget.tokens, budget.tree_tokens, budget.tool_calls, budget.session_tokens) == (
        200_000,
        1_500_000,
        30,
        5_000,
    )
    with pytest.raises(ConfigError) as wrong:
        load_config(
            config_in(tmp_path, '[budget]\ntokens = "200 thousand"\n'), user_file=tmp_path / "none.toml"
        )
    message = str(wrong.value)
    assert "budget.tokens" in message and 'tokens = "200k"' in message and "tokens = 200000" in message


def test_budget_money_and_time_may_be_written_as_text_and_a_wrong_one_says_what_to_write(
    tmp_path: Path,
) -> None:
    text = '[budget]\ncost_usd = "$0.50"\ntree_cost_usd = "2"\ntime_s = "10m"\nsession_time_s = "1.5h"\n'
    budget = load_config(config_in(tmp_path, text), user_file=tmp_path / "none.toml").budget
    assert (budget.cost_usd, budget.tree_cost_usd, budget.time_s, budget.session_time_s) == (
        0.5,
        2.0,
        600,
        5400,
    )
    for wrong_text, said in (
        (
            'cost_usd = "50 cents"',
            "'budget.cost_usd' cannot be '50 cents': write US dollars: cost_usd = 0.50",
        ),
        ('time_s = "ten minutes"', "'budget.time_s' cannot be 'ten minutes': write seconds: time_s = 600"),
        (
            'tool_calls = "lots"',
            "'budget.tool_calls' cannot be 'lots': write a whole number: tool_calls = 100",
        ),
    ):
        with pytest.raises(ConfigError, match=re.escape(said)):
            load_config(config_in(tmp_path, f"[budget]\n{wrong_text}\n"), user_file=tmp_path / "none.toml")


def test_budget_tokens_on_the_command_line_takes_k_and_m_and_names_the_fix_otherwise() -> None:
    from steward.cli.options import _token_count

    assert (_token_count("200k"), _token_count("1.5M"), _token_count("300")) == (200_000, 1_500_000, 300)
    runner = CliRunner()
    wrong = runner.invoke(app, ["run", "hi", "--budget-tokens", "lots"], env={"COLUMNS": "200"})
    assert wrong.exit_code == 2 and "200k or 1.5M" in wrong.output and "Traceback" not in wrong.output
    none = runner.invoke(app, ["run", "hi", "--budget-tokens", "0"], env={"COLUMNS": "200"})
    assert none.exit_code == 2 and "give 1 or more" in none.output
    from steward.cli.options import _dollars

    assert (_dollars("$0.50"), _dollars("2"), _dollars("0.25 USD")) == (0.5, 2.0, 0.25)
    wrong = runner.invoke(app, ["run", "hi", "--budget-usd", "ten"], env={"COLUMNS": "200"})
    assert wrong.exit_code == 2 and "write 0.50 or $0.50" in wrong.output and "Traceback" not in wrong.output
