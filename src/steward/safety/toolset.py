"""The wrapper that puts the guard and the policy in front of any toolset.

Built-in tools, user tools and MCP servers all pass through it, so there is one safety model
for every tool surface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from steward.errors import ApprovalRequired
from steward.models.base import ToolSpec
from steward.safety.approvals import call_hash
from steward.safety.policy import WRITE_TOOLS, Policy
from steward.safety.types import GuardVerdict
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset


class Judge(Protocol):
    """The guard's interface as the wrapper needs it."""

    def check(self, tool: str, arguments: Mapping[str, Any], *, workspace: Any) -> GuardVerdict: ...


class GuardedToolset(WrapperToolset):
    """Every call is judged by the guard, then decided by the policy: run, refuse, or ask."""

    def __init__(self, wrapped: Toolset, *, guard: Judge, policy: Policy) -> None:
        super().__init__(wrapped)
        self.guard = guard
        self.policy = policy

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        tools = await self.wrapped.get_tools(ctx)
        if self.policy.write:
            return tools
        return [t for t in tools if t.name not in WRITE_TOOLS]  # the write switch: not even offered

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        verdict = self.guard.check(name, arguments, workspace=ctx.workspace)
        decision = self.policy.decide(name, arguments, verdict)
        if decision.action == "deny":
            ctx.notes.append(("blocked", f"{name}: {decision.reason}"))
            return ToolResult(
                f"Not run: {decision.reason}. Choose another way to reach the goal.", is_error=True
            )
        if decision.action == "ask":
            digest = call_hash(name, arguments)
            if digest not in ctx.grants:
                raise ApprovalRequired(
                    tool=name,
                    arguments=dict(arguments),
                    call_hash=digest,
                    reason=decision.reason,
                    suggestion=str(decision.suggestion) if decision.suggestion else None,
                )
            ctx.grants.discard(digest)  # one approval, one call
        elif decision.auto:
            ctx.notes.append(("auto_approved", f"{name}: {decision.reason}"))
        ctx.allow_network, ctx.writable = decision.network, self.policy.write
        try:
            return await self.wrapped.call_tool(name, arguments, ctx)
        finally:
            ctx.allow_network = False
