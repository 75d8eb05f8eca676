"""The guard as a wrapper: what it passes down with one call, what comes back with the result."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from steward.errors import ApprovalRequired
from steward.safety.policy.guard import Guard
from steward.safety.policy.rules import Policy
from steward.safety.policy.wrapper import GuardedToolset
from steward.tools.base import FunctionToolset, ToolContext, ToolResult, tool


class Inner(FunctionToolset):
    """``deploy`` and a stand-in ``bash`` that keep the context each call was given."""

    def __init__(self) -> None:
        self.seen: list[ToolContext] = []

        @tool
        def deploy(ctx: ToolContext, target: str) -> ToolResult:
            """Deploy to a target.

            Args:
                target: Where to deploy.
            """
            self.seen.append(ctx)
            return ToolResult(f"deployed to {target}", notes=(("egress", f"reached {target}"),))

        @tool(name="bash")
        def fake_bash(ctx: ToolContext, command: str) -> str:
            """Pretend to run a command.

            Args:
                command: The command line.
            """
            self.seen.append(ctx)
            return f"ran {command}"

        super().__init__([deploy, fake_bash])


def guarded(policy: Policy) -> tuple[GuardedToolset, Inner]:
    inner = Inner()
    return GuardedToolset(inner, guard=Guard(), policy=policy), inner


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, run_id="r1")


async def test_a_blocked_call_comes_back_with_its_note(ctx: ToolContext) -> None:
    toolset, inner = guarded(Policy.from_lists(deny=["deploy(prod)"]))
    result = await toolset.call_tool("deploy", {"target": "prod"}, ctx)
    assert result.is_error and result.content.startswith("Not run: denied by the rule deny deploy(prod)")
    assert result.notes == (("blocked", "deploy: denied by the rule deny deploy(prod) (config)"),)
    assert inner.seen == []


async def test_an_auto_approval_is_noted_before_what_the_call_noted(ctx: ToolContext) -> None:
    toolset, _ = guarded(Policy.from_lists(ask=["deploy"], mode="autonomous"))
    result = await toolset.call_tool("deploy", {"target": "prod"}, ctx)
    assert result.content == "deployed to prod"
    assert [kind for kind, _ in result.notes] == ["auto_approved", "egress"]
    assert result.notes[1] == ("egress", "reached prod")


async def test_the_network_goes_down_with_the_call_it_was_granted_to_only(ctx: ToolContext) -> None:
    toolset, inner = guarded(Policy.from_lists(allow=["bash(curl *)"]))
    await toolset.call_tool("bash", {"command": "curl https://example.com"}, ctx)
    await toolset.call_tool("bash", {"command": "ls"}, ctx)
    assert [c.allow_network for c in inner.seen] == [True, False]
    assert not ctx.allow_network  # the caller's context never changes
    assert inner.seen[0].run_id == "r1" and inner.seen[0].scopes is ctx.scopes  # the same run


async def test_an_approval_is_good_for_exactly_the_approved_call(ctx: ToolContext) -> None:
    toolset, inner = guarded(Policy.from_lists(ask=["deploy"]))
    with pytest.raises(ApprovalRequired) as asked:
        await toolset.call_tool("deploy", {"target": "prod"}, ctx)
    approved = replace(ctx, step=3, approved=asked.value.call_hash)

    result = await toolset.call_tool("deploy", {"target": "prod"}, approved)

    assert result.content == "deployed to prod"
    assert [(c.step, c.approved) for c in inner.seen] == [(3, None)]  # used up: nothing inside sees it
    with pytest.raises(ApprovalRequired):  # another call of the run: asked again
        await toolset.call_tool("deploy", {"target": "prod"}, replace(ctx, step=4))
    with pytest.raises(ApprovalRequired):  # other arguments, even with the approval at hand
        await toolset.call_tool("deploy", {"target": "staging"}, approved)
    assert len(inner.seen) == 1
