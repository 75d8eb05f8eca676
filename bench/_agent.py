"""The agent the per-step benches run: it calls a tiny tool at every step, then ends.

The model is a function (no I/O) and the tool returns its argument, so what a step costs is the
loop's own work plus whatever a bench puts around it (a budget, tracing, a store).
"""

from __future__ import annotations

from steward import Agent, FunctionModel, Limits, tool
from steward.config import Config
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.store.events import EventStore


def ping_agent(steps: int, config: Config, store: EventStore | None = None) -> Agent:
    """An agent whose run calls ``ping`` ``steps`` times, then ends solved."""
    calls = [0]

    def reply(request: ModelRequest) -> AssistantMessage:
        calls[0] += 1
        if calls[0] <= steps:
            return AssistantMessage(tool_calls=(ToolCall(f"c{calls[0]}", "ping", {"i": calls[0]}),))
        end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}
        return AssistantMessage(tool_calls=(ToolCall("end", "agent_step", end),))

    @tool
    async def ping(i: int) -> str:
        """Return i."""
        return str(i)

    # repeat_stop above the step count: the same tool each step is these benches' point, not stuck.
    limits = Limits(max_steps=steps + 5, repeat_stop=steps + 5, repeat_warning=steps + 4)
    return Agent(FunctionModel(reply), tools=[ping], builtin_tools=False, config=config, limits=limits,
                 sandbox=False, store=store, memory=False)  # fmt: skip
