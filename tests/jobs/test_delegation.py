"""``delegate`` in-process, against a real store on both engines: a call queues one child job and
pauses the run on it, the same call finds that child again, its end is the call's result; roles,
depth and fan-out are checked before anything is queued. And what a child inherits: its tools
within its ancestors', their deny and ask rules, a structured mode, a write switch that is off."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steward.config import load_config
from steward.errors import ApprovalRequired
from steward.jobs.delegation import DelegateToolset, DelegationLimits, ancestors, inherited_layer, narrowed
from steward.jobs.store import Job, JobStore
from steward.personas import Persona, find_persona
from steward.store.events import open_store
from steward.tools.base import ToolContext, ToolResult


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace with the personas ``lead`` and ``helper`` (and no user personas)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    ws = tmp_path / "ws"
    (ws / "personas").mkdir(parents=True)
    (ws / "personas" / "lead.toml").write_text('role = "lead"\ntools = ["read_file", "delegate"]\n')
    (ws / "personas" / "helper.toml").write_text('role = "helper"\ntools = ["bash", "read_file"]\n')
    return ws


@pytest.fixture
async def jobs(db_url: str) -> AsyncIterator[JobStore]:
    store = await open_store(db_url)
    try:
        yield JobStore(store.engine, where=store.where)
    finally:
        await store.close()


def context(job: Job | str, workspace: Path, step: int = 1) -> ToolContext:
    return ToolContext(workspace=workspace, run_id=job if isinstance(job, str) else job.id, step=step)


async def waits_for(tool: DelegateToolset, args: dict[str, Any], ctx: ToolContext) -> str:
    """The call pauses the run on a child job: that job's id."""
    with pytest.raises(ApprovalRequired) as paused:
        await tool.call_tool("delegate", args, ctx)
    assert paused.value.tool == "delegate" and paused.value.waits_for
    assert paused.value.arguments == args
    return paused.value.waits_for


async def refused(tool: DelegateToolset, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    result = await tool.call_tool("delegate", args, ctx)
    assert result.is_error, result
    return result


async def lead_job(jobs: JobStore, workspace: Path, **kwargs: Any) -> Job:
    job, _ = await jobs.submit("lead", "get it done", workspace=str(workspace), **kwargs)
    return job


HELLO = {"role": "helper", "goal": "say hello"}


# --- the call -----------------------------------------------------------------------------


async def test_a_call_queues_one_child_and_waits_for_it(jobs: JobStore, workspace: Path) -> None:
    parent = await lead_job(jobs, workspace, priority=7, max_attempts=5)
    tool = DelegateToolset(jobs)
    assert [spec.name for spec in await tool.get_tools(context(parent, workspace))] == ["delegate"]
    child_id = await waits_for(tool, HELLO, context(parent, workspace))
    (child,) = await jobs.list(parent_id=parent.id)
    assert child.id == child_id and child.parent_id == parent.id
    assert (child.role, child.goal, child.status) == ("helper", "say hello", "queued")
    assert child.workspace == parent.workspace and child.priority == 7 and child.max_attempts == 5
    assert child.user_key is None  # the parent's user may have one active job: its children do not count


async def test_the_same_call_finds_its_child_again_and_another_step_starts_another(
    jobs: JobStore, workspace: Path
) -> None:
    parent = await lead_job(jobs, workspace)
    tool = DelegateToolset(jobs)
    first = await waits_for(tool, HELLO, context(parent, workspace, step=3))
    again = await waits_for(tool, dict(HELLO), context(parent, workspace, step=3))  # the rebuilt run
    padded = await waits_for(
        tool, {"role": " helper ", "goal": "say hello"}, context(parent, workspace, step=3)
    )
    assert again == first and padded == first
    assert [j.id for j in await jobs.list(parent_id=parent.id)] == [first]
    later = await waits_for(tool, HELLO, context(parent, workspace, step=4))
    other_goal = await waits_for(tool, {"role": "helper", "goal": "wave"}, context(parent, workspace, step=3))
    assert len({first, later, other_goal}) == 3
    assert len(await jobs.list(parent_id=parent.id)) == 3


async def test_a_finished_child_is_the_call_s_answer(jobs: JobStore, workspace: Path) -> None:
    parent = await lead_job(jobs, workspace)
    tool = DelegateToolset(jobs)
    child_id = await waits_for(tool, HELLO, context(parent, workspace))
    claim = await jobs.claim("w1", roles=["helper"])
    assert claim is not None and claim.job.id == child_id
    await waits_for(tool, HELLO, context(parent, workspace))  # running: still waiting
    await jobs.finish(claim, "done", result="hello from the helper")
    result = await tool.call_tool("delegate", HELLO, context(parent, workspace))
    assert not result.is_error, result
    assert "hello from the helper" in result.content and child_id in result.content
    assert len(await jobs.list(parent_id=parent.id)) == 1  # no second child


async def test_a_failed_child_is_an_error_with_its_reason(jobs: JobStore, workspace: Path) -> None:
    parent = await lead_job(jobs, workspace)
    tool = DelegateToolset(jobs)
    child_id = await waits_for(tool, HELLO, context(parent, workspace))
    claim = await jobs.claim("w1", roles=["helper"])
    assert claim is not None
    await jobs.finish(claim, "failed", error="the tests would not pass")
    result = await refused(tool, HELLO, context(parent, workspace))
    assert child_id in result.content and "failed" in result.content
    assert "the tests would not pass" in result.content

    cancelled_id = await waits_for(tool, HELLO, context(parent, workspace, step=2))
    await jobs.cancel(cancelled_id, "not needed after all")
    result = await refused(tool, HELLO, context(parent, workspace, step=2))
    assert "cancelled" in result.content and "not needed after all" in result.content


# --- refusals -----------------------------------------------------------------------------


async def test_an_unknown_role_names_the_personas_there_are(jobs: JobStore, workspace: Path) -> None:
    parent = await lead_job(jobs, workspace)
    tool = DelegateToolset(jobs)
    result = await refused(tool, {"role": "nobody", "goal": "x"}, context(parent, workspace))
    assert "nobody" in result.content and "helper" in result.content and "lead" in result.content
    result = await refused(tool, {"role": "../lead", "goal": "x"}, context(parent, workspace))
    assert "persona name" in result.content
    assert await jobs.list(parent_id=parent.id) == []


@pytest.mark.parametrize(
    "args",
    [
        {"role": "", "goal": "x"},
        {"role": "  ", "goal": "x"},
        {"role": "helper", "goal": ""},
        {"role": "helper", "goal": "\n "},
        {"role": "helper"},
        {"goal": "x"},
        {"role": 3, "goal": "x"},
    ],
)
async def test_a_call_without_a_role_or_a_goal_is_refused(
    jobs: JobStore, workspace: Path, args: dict[str, Any]
) -> None:
    parent = await lead_job(jobs, workspace)
    result = await refused(DelegateToolset(jobs), args, context(parent, workspace))
    assert '"role"' in result.content and '"goal"' in result.content
    assert await jobs.list(parent_id=parent.id) == []


async def test_delegation_stops_at_the_depth_limit(jobs: JobStore, workspace: Path) -> None:
    top = await lead_job(jobs, workspace)
    child, _ = await jobs.submit("lead", "part", workspace=str(workspace), parent_id=top.id)
    grandchild, _ = await jobs.submit("lead", "part of it", workspace=str(workspace), parent_id=child.id)
    assert [j.id for j in await ancestors(jobs, grandchild, 10)] == [child.id, top.id]
    assert [j.id for j in await ancestors(jobs, grandchild, 1)] == [child.id]  # bounded
    tool = DelegateToolset(jobs, DelegationLimits(max_depth=2))
    result = await refused(tool, HELLO, context(grandchild, workspace))
    assert "limited to 2 levels" in result.content and "2 deep" in result.content
    assert "yourself" in result.content
    assert await jobs.list(parent_id=grandchild.id) == []
    await waits_for(tool, HELLO, context(child, workspace))  # one level up there is room
    shallow = DelegateToolset(jobs, DelegationLimits(max_depth=1))
    assert "limited to 1 levels" in (await refused(shallow, HELLO, context(child, workspace, 2))).content


async def test_one_job_starts_at_most_max_children(jobs: JobStore, workspace: Path) -> None:
    parent = await lead_job(jobs, workspace)
    tool = DelegateToolset(jobs, DelegationLimits(max_children=2))
    first = await waits_for(tool, HELLO, context(parent, workspace, step=1))
    await waits_for(tool, HELLO, context(parent, workspace, step=2))
    result = await refused(tool, HELLO, context(parent, workspace, step=3))
    assert "limit is 2" in result.content and "yourself" in result.content
    assert len(await jobs.list(parent_id=parent.id)) == 2
    # A child started before the limit was reached is still found (the rebuilt run's call).
    assert await waits_for(tool, HELLO, context(parent, workspace, step=1)) == first


@pytest.mark.parametrize("run_id", ["not-a-job", "0123456789ab"])
async def test_delegate_outside_a_job_is_refused(jobs: JobStore, workspace: Path, run_id: str) -> None:
    await lead_job(jobs, workspace)
    result = await refused(DelegateToolset(jobs), HELLO, context(run_id, workspace))
    assert "only in a job" in result.content
    assert [j.role for j in await jobs.list()] == ["lead"]


@pytest.mark.parametrize("prefix", [0, 4])
async def test_a_run_whose_id_is_only_a_prefix_of_a_job_s_is_not_that_job(
    jobs: JobStore, workspace: Path, prefix: int
) -> None:
    """A run that is no job must not delegate on behalf of whichever job its id (even an empty
    one, a ToolContext's default) happens to be a prefix of."""
    parent = await lead_job(jobs, workspace)
    result = await refused(DelegateToolset(jobs), HELLO, context(parent.id[:prefix], workspace))
    assert "only in a job" in result.content
    assert await jobs.list(parent_id=parent.id) == []


# --- what a child inherits ------------------------------------------------------------------


@pytest.fixture
def quiet_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_config sees no user configuration and no STEWARD_* variables."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in [n for n in os.environ if n.startswith("STEWARD_")]:
        monkeypatch.delenv(name)


def test_a_child_uses_only_tools_every_ancestor_allows(workspace: Path) -> None:
    lead, helper = find_persona("lead", workspace), find_persona("helper", workspace)
    assert helper.allows("bash")
    child = narrowed(helper, [lead])
    assert not child.allows("bash")
    assert child.allows("read_file") and child.allows("recall_output")
    assert not child.allows("delegate")  # the lead's, but not the helper's
    anything = Persona(name="anything")  # tools None: every tool
    assert narrowed(helper, [anything]).allows("bash")
    assert narrowed(anything, [lead]).allows("delegate") and not narrowed(anything, [lead]).allows("bash")
    globbed = Persona(name="memory", tools=("memory_*", "read_file"))
    chain = narrowed(anything, [globbed, lead])  # each ancestor narrows further
    assert chain.allows("read_file") and not chain.allows("memory_get") and not chain.allows("bash")


def test_ancestors_deny_and_ask_rules_are_added(workspace: Path, quiet_config: None) -> None:
    lead = Persona(name="lead", policy={"deny": ["bash(git push*)"], "ask": ["edit_file(src/**)"]})
    top = Persona(name="top", policy={"deny": ["bash(rm *)"]})
    helper = Persona(name="helper", policy={"deny": ["bash(sudo *)"], "allow": ["bash(git *)"]})
    above = [(p, load_config(workspace, persona=p.layer(), environ={})) for p in (lead, top)]
    layer = inherited_layer(helper, above)
    policy = layer["policy"]
    assert sorted(policy["deny"]) == ["bash(git push*)", "bash(rm *)", "bash(sudo *)"]
    assert policy["ask"] == ["edit_file(src/**)"]
    assert policy["allow"] == []  # the child's own allow rule: not every ancestor has it, so it goes
    both = Persona(name="lead", policy={"allow": ["bash(git *)"]})
    kept = inherited_layer(helper, [(both, load_config(workspace, persona=both.layer(), environ={}))])
    assert kept["policy"]["allow"] == ["bash(git *)"]  # every ancestor allows it too: it stays
    config = load_config(workspace, persona=layer, environ={})
    assert {"bash(git push*)", "bash(rm *)", "bash(sudo *)"} <= set(config.policy.deny)
    assert "edit_file(src/**)" in config.policy.ask
    assert helper.policy == {"deny": ["bash(sudo *)"], "allow": ["bash(git *)"]}  # not changed in place


def test_a_structured_parent_makes_its_child_structured(workspace: Path, quiet_config: None) -> None:
    (workspace / "steward.toml").write_text('[policy]\nmode = "autonomous"\n')
    helper = Persona(name="helper", policy={"mode": "autonomous"})
    structured = Persona(name="lead", policy={"mode": "structured"})
    parent_config = load_config(workspace, persona=structured.layer(), environ={})
    assert parent_config.policy.mode == "structured"
    layer = inherited_layer(helper, [(structured, parent_config)])
    assert load_config(workspace, persona=layer, environ={}).policy.mode == "structured"
    # Under an autonomous parent the child keeps its own mode.
    free = Persona(name="free")
    free_config = load_config(workspace, persona=free.layer(), environ={})
    assert free_config.policy.mode == "autonomous"
    layer = inherited_layer(helper, [(free, free_config)])
    assert load_config(workspace, persona=layer, environ={}).policy.mode == "autonomous"


def test_a_parent_that_may_not_write_makes_a_child_that_may_not(workspace: Path, quiet_config: None) -> None:
    reader = Persona(name="reader", policy={"write": False})
    writer = Persona(name="writer", policy={"write": True}, model="scripted:x.yaml")
    grandparent = Persona(name="top")
    above = [(p, load_config(workspace, persona=p.layer(), environ={})) for p in (grandparent, reader)]
    layer = inherited_layer(writer, above)
    assert layer["policy"]["write"] is False and layer["model"] == "scripted:x.yaml"
    assert load_config(workspace, persona=layer, environ={}).policy.write is False
    # A writer above a writer: nothing to take away.
    layer = inherited_layer(writer, [(grandparent, above[0][1])])
    assert load_config(workspace, persona=layer, environ={}).policy.write is True
