"""Each call within its own time limit and the run's: a wrapper around a run's toolset.

A call that runs past ``timeout_s`` is cancelled (bash stops its process group) and reported
as timed out; one cut short by the run's time limit says so, since what it did until then is
unknown. A toolset that raises is reported as the call's failure: a broken toolset is the
model's problem to route around, never a crash of the run. ``ApprovalRequired`` passes
through: the run pauses on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from steward.errors import ApprovalRequired
from steward.tools.base import ToolContext, ToolResult, Toolset, WrapperToolset

if TYPE_CHECKING:
    from steward.clock import Clock


class DeadlineToolset(WrapperToolset):
    def __init__(self, wrapped: Toolset, *, timeout_s: float, clock: Clock, run_limit_s: float) -> None:
        super().__init__(wrapped)
        self.timeout_s, self.clock, self.run_limit_s = timeout_s, clock, run_limit_s

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        from steward.clock import timeout

        own, limit = self.timeout_s, self.run_limit_s
        remaining = self.clock.remaining()
        if remaining is not None and remaining <= 0:
            late = f"Not run: the run's time limit ({limit:g} s of running) was reached before it started."
            return ToolResult(late, is_error=True, category="timeout")
        by_run = remaining is not None and remaining < own
        deadline = timeout(min(own, remaining) if remaining is not None else own)
        try:
            async with deadline:
                return await self.wrapped.call_tool(name, arguments, ctx)
        except ApprovalRequired:
            raise
        except TimeoutError as exc:
            if not deadline.expired():  # raised by the tool itself: a failure like any other
                return ToolResult(f"{name} failed: TimeoutError: {exc}", is_error=True)
            if by_run:
                stopped = (
                    f"Stopped by the run's time limit ({limit:g} s of running) before it finished; "
                    "what it did until then is unknown."
                )
                return ToolResult(stopped, is_error=True, category="timeout")
            return ToolResult(f"{name} timed out after {own:g} s", is_error=True)
        except Exception as exc:
            return ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
