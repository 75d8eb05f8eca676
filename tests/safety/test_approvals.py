"""Approvals through the loop: pause, approve once or always, deny, expire, bind to one call."""

from __future__ import annotations

import asyncio
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, ScriptedModel, tool
from steward.config import Config, PolicySettings
from steward.events import ApprovalGateEvent, ApprovalResultEvent, SignalEvent, ToolResultEvent
from steward.safety.policy.approvals import call_hash
from steward.safety.policy.rules import Policy

DEPLOYS: list[str] = []


@tool
def deploy(target: str) -> str:
    """Deploy to a target.

    Args:
        target: Where to deploy.
    """
    DEPLOYS.append(target)
    return f"deployed to {target}"


END = {"agent_step": {"phase": "end", "summary": "e", "end_status": "solved", "end_message": "finished"}}


def call(target: str) -> dict[str, Any]:
    return {"tool": "deploy", "args": {"target": target}}


@pytest.fixture(autouse=True)
def _clean() -> None:
    DEPLOYS.clear()


def agent(replies: list[dict[str, Any]], *, policy: Policy | None = None, **settings: Any) -> Agent:
    config = Config(policy=PolicySettings(**settings)) if settings else Config()
    return Agent(
        ScriptedModel.from_data(replies),
        tools=[deploy],
        builtin_tools=False,
        policy=policy or Policy.from_lists(ask=["deploy"]),
        config=config,
    )


async def test_an_ask_pauses_the_run_with_an_approval_gate(tmp_path: Path) -> None:
    run = agent([call("prod"), END]).start("ship it", workspace=tmp_path)
    events = [e async for e in run.stream()]
    assert [e.type for e in events][-2:] == ["approval_gate", "waiting"]
    gate = events[-2]
    assert isinstance(gate, ApprovalGateEvent)
    assert gate.tool == "deploy" and gate.input == {"target": "prod"} and gate.default == "deny"
    assert gate.deadline > time.time()
    assert run.status == "waiting" and run.pending is not None and run.pending.kind == "approval"
    assert DEPLOYS == []


async def test_approving_runs_exactly_that_call_once(tmp_path: Path) -> None:
    run = agent([call("prod"), END]).start("ship it", workspace=tmp_path)
    _ = [e async for e in run.stream()]
    events = [e async for e in run.approve_stream()]
    assert isinstance(events[0], ApprovalResultEvent) and events[0].decision == "approved"
    assert DEPLOYS == ["prod"]
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.output == "deployed to prod"
    assert run.status == "done"


async def test_denying_tells_the_model_why_and_runs_nothing(tmp_path: Path) -> None:
    run = agent([call("prod"), END]).start("ship it", workspace=tmp_path)
    _ = [e async for e in run.stream()]
    events = [e async for e in run.deny_stream(reason="not on a Friday")]
    assert DEPLOYS == []
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.status == "failed" and "the user denied this call: not on a Friday" in result.output
    assert result.error_category == "permission"
    assert run.status == "done"


async def test_an_approval_never_approves_a_different_call(tmp_path: Path) -> None:
    run = agent([call("staging"), call("prod"), END]).start("ship", workspace=tmp_path)
    _ = [e async for e in run.stream()]
    events = [e async for e in run.approve_stream()]
    assert DEPLOYS == ["staging"]
    assert events[-1].type == "waiting"  # the second call, other arguments: asked again
    assert run.pending is not None and run.pending.approval is not None
    assert run.pending.approval.arguments == {"target": "prod"}
    assert run.pending.approval.call_hash == call_hash("deploy", {"target": "prod"})


async def test_an_approval_is_good_for_one_call_only(tmp_path: Path) -> None:
    run = agent([call("prod"), call("prod"), END]).start("ship twice", workspace=tmp_path)
    _ = [e async for e in run.stream()]
    events = [e async for e in run.approve_stream()]
    assert DEPLOYS == ["prod"]
    assert events[-1].type == "waiting"  # the same call again: asked again
    assert run.pending is not None and run.pending.approval is not None
    assert run.pending.approval.arguments == {"target": "prod"}
    result = await run.approve()
    assert DEPLOYS == ["prod", "prod"] and result.solved


async def test_an_expired_approval_takes_its_default_deny(tmp_path: Path) -> None:
    run = agent([call("prod"), END], approval_timeout_s=0.05).start("ship", workspace=tmp_path)
    _ = [e async for e in run.stream()]
    await asyncio.sleep(0.1)
    events = [e async for e in run.approve_stream()]  # too late: the default applies
    assert isinstance(events[0], ApprovalResultEvent)
    assert events[0].decision == "expired" and DEPLOYS == []
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert "nobody approved this call before its deadline" in result.output


async def test_an_expired_approval_can_default_to_allow(tmp_path: Path) -> None:
    run = agent([call("prod"), END], approval_timeout_s=0.05, on_timeout="allow").start(
        "ship", workspace=tmp_path
    )
    _ = [e async for e in run.stream()]
    await asyncio.sleep(0.1)
    events = [e async for e in run.expire_stream()]
    assert isinstance(events[0], ApprovalResultEvent)
    assert events[0].decision == "approved" and DEPLOYS == ["prod"]


async def test_approve_always_remembers_the_rule_in_the_project_config(tmp_path: Path) -> None:
    (tmp_path / "steward.toml").write_text("# my settings\n[limits]\nmax_steps = 20\n")
    version = {"tool": "bash", "args": {"command": "curl --version"}}  # the network: asked by default
    a = Agent(ScriptedModel.from_data([version, version, END]), sandbox=False)
    a.config_file = tmp_path / "steward.toml"
    run = a.start("check curl twice", workspace=tmp_path)
    first = [e async for e in run.stream()]
    assert isinstance(first[-2], ApprovalGateEvent) and first[-2].suggestion == "bash(curl*)"
    rest = [e async for e in run.approve_stream(remember=True)]
    assert [e.type for e in rest].count("approval_gate") == 0  # the second call was not asked
    assert sum(1 for e in rest if isinstance(e, ToolResultEvent) and e.status == "completed") == 2
    text = (tmp_path / "steward.toml").read_text()
    assert "# my settings" in text
    assert tomllib.loads(text)["policy"]["allow"] == ["bash(curl*)"]


async def test_an_explicit_ask_rule_offers_no_approve_always(tmp_path: Path) -> None:
    run = agent([call("prod"), END]).start("ship", workspace=tmp_path)
    events = [e async for e in run.stream()]
    assert isinstance(events[-2], ApprovalGateEvent) and events[-2].suggestion is None


async def test_autonomous_mode_approves_asks_and_says_so(tmp_path: Path) -> None:
    policy = Policy.from_lists(ask=["deploy"], mode="autonomous")
    run = agent([call("prod"), END], policy=policy).start("ship", workspace=tmp_path)
    events = [e async for e in run.stream()]
    assert DEPLOYS == ["prod"] and run.status == "done"
    assert any(isinstance(e, SignalEvent) and e.code == "auto_approved" for e in events)


async def test_deny_rules_hold_in_autonomous_mode(tmp_path: Path) -> None:
    policy = Policy.from_lists(deny=["deploy(prod)"], mode="autonomous")
    run = agent([call("prod"), END], policy=policy).start("ship", workspace=tmp_path)
    events = [e async for e in run.stream()]
    assert DEPLOYS == []
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert "denied by the rule deny deploy(prod)" in result.output


async def test_the_write_switch_removes_write_tools(tmp_path: Path) -> None:
    model = ScriptedModel.from_data([{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}, END])
    a = Agent(model, policy=Policy(write=False), sandbox=False)
    run = a.start("write", workspace=tmp_path)
    seen = [e async for e in run.stream()]
    assert not (tmp_path / "a.txt").exists()
    assert "write_file" not in [t.name for t in await a.toolset().get_tools(run._loop.ctx)]
    result = next(e for e in seen if isinstance(e, ToolResultEvent))
    assert result.status == "failed"
