"""What a recorded run spent, per phase and per tool (``steward.budget.report``), as ``steward
runs show`` prints it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tests.budget.models import LookupModel, lookup

from steward import Agent, ScriptedModel
from steward.budget.ledger import Ledger
from steward.budget.report import run_cost
from steward.events import ModelReplyEvent, ToolResultEvent
from steward.store.events import open_store

PLAN = {
    "agent_step": {
        "phase": "plan",
        "summary": "plan",
        "plan": {"goal": "g", "sub_tasks": [{"id": 1, "title": "look"}]},
    }
}
ACT = {
    "agent_step": {
        "phase": "act",
        "summary": "look",
        "action": {"tool_name": "lookup", "tool_input": {"key": "a"}},
    }
}
VERIFY = {"agent_step": {"phase": "verify", "summary": "checked"}}
END = {"agent_step": {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}}


async def test_tokens_and_time_are_told_per_phase_and_per_tool(tmp_path: Path) -> None:
    async with await open_store(f"sqlite:///{tmp_path / 'steward.db'}") as store:
        agent = Agent(ScriptedModel.from_data([PLAN, ACT, VERIFY, END]), tools=[lookup], builtin_tools=False,
                      store=store, sandbox=False)  # fmt: skip
        run = agent.start("look it up", workspace=tmp_path)
        assert (await run.result()).end_status == "solved"
        events = await store.events(run.id)
        totals = await Ledger(store.engine).run(run.id)
    cost = run_cost(events)
    assert list(cost.phases) == ["plan", "act", "verify", "end"]
    assert all(line.count == 1 and line.tokens > 0 for line in cost.phases.values())
    assert sum(line.tokens for line in cost.phases.values()) == cost.tokens
    assert totals is not None and cost.tokens == totals.tokens  # the events and the ledger agree
    assert cost.cost_usd == 0.0  # a scripted model is free
    (tool,) = cost.tools.values()
    assert tool.name == "lookup" and tool.count == 1 and tool.tokens == cost.phases["act"].tokens
    assert cost.time_s >= sum(line.time_s for line in cost.tools.values())


def test_runs_show_prints_the_money_per_phase_and_per_tool(tmp_path: Path) -> None:
    db = tmp_path / "steward.db"
    (tmp_path / "steward.toml").write_text(f'[store]\nurl = "sqlite:///{db}"\n')

    async def record() -> str:
        async with await open_store(f"sqlite:///{db}") as store:
            agent = Agent(
                LookupModel(calls=2), tools=[lookup], builtin_tools=False, store=store, sandbox=False
            )
            run = agent.start("look the keys up", workspace=tmp_path)
            await run.result()
            return run.id

    import asyncio

    run_id = asyncio.run(record())
    shown = subprocess.run([sys.executable, "-m", "steward", "runs", "show", run_id, "-w", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, env={"XDG_CONFIG_HOME": str(tmp_path / "c"),
                           "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    # 3 replies of 10,100 tokens, 4,000 of each prompt cached, at gpt-4o-mini's price.
    per_reply = (6_000 * 0.15 + 4_000 * 0.075 + 100 * 0.60) / 1_000_000
    assert "spent: 30,300 tokens (30,000 in, 12,000 of them cached, 300 out)" in out
    assert f"${3 * per_reply:.4f}" in out
    act = next(line for line in out.splitlines() if line.strip().startswith("act "))
    assert "2 steps" in act and "20,200 tokens" in act and f"${2 * per_reply:.4f}" in act
    assert any(line.strip().startswith("lookup") and "2 calls" in line for line in out.splitlines())


@pytest.mark.parametrize("model", ["openai:my-own-model"])
def test_an_unpriced_model_says_how_to_price_it(model: str) -> None:
    from steward.budget.report import lines
    from steward.events import ModelReplyEvent, RunStart

    events = [RunStart(goal="g", model=model, workspace=".", max_steps=5),
              ModelReplyEvent(step=1, text="hi", tool_calls=[], thinking=[], usage={"input_tokens": 5})]  # fmt: skip
    cost = run_cost(events)
    assert cost.cost_usd is None
    assert "cost unknown" in lines(cost)[0] and f'[prices."{model}"]' in lines(cost)[0]


async def test_a_reply_that_used_no_tokens_still_counts_as_its_phases_step(tmp_path: Path) -> None:
    """A reply the model cache served reports no usage: its step is still a step of its phase."""
    async with await open_store(f"sqlite:///{tmp_path / 'steward.db'}") as store:
        agent = Agent(ScriptedModel.from_data([ACT, {"text": "a is 1"}]), tools=[lookup], builtin_tools=False,
                      store=store, sandbox=False)  # fmt: skip
        run = agent.start("look it up", workspace=tmp_path)
        await run.result()
        events = await store.events(run.id)
    served = [
        replace(e, usage=dict.fromkeys(e.usage, 0)) if isinstance(e, ModelReplyEvent) else e for e in events
    ]
    assert {name: line.count for name, line in run_cost(served).phases.items()} == {"act": 1, "end": 1}


async def test_a_step_whose_call_has_no_result_yet_counts_as_acting(tmp_path: Path) -> None:
    """A run waiting for an approval has the model's call and no result: its step acted."""
    async with await open_store(f"sqlite:///{tmp_path / 'steward.db'}") as store:
        call = {"tool": "lookup", "args": {"key": "a"}}
        agent = Agent(ScriptedModel.from_data([call, {"text": "a is 1"}]), tools=[lookup], builtin_tools=False,
                      store=store, sandbox=False)  # fmt: skip
        run = agent.start("look it up", workspace=tmp_path)
        await run.result()
        events = await store.events(run.id)
    waiting = [e for e in events if not isinstance(e, ToolResultEvent)]
    assert {name: line.count for name, line in run_cost(waiting).phases.items()} == {"act": 1, "end": 1}
