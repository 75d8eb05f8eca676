"""Steward adapter for the peer harness in ``../shared/bench/peers`` (see bench/README.md).

The fake model is a ``FunctionModel``: on every call it measures what it was sent (system
prompt with the working-memory view, user, assistant text, tool results and tool-call
arguments), counts the tool results, and asks for the next chunk or answers.
The agent uses the default budget settings with a 32k-token request budget.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator

from common import (  # type: ignore[import-not-found]
    SYSTEM_PROMPT,
    AgentHandle,
    amodel_delay,
    chunk,
    next_action,
    record_call,
    recording,
    user_prompt,
)

from steward import Agent, FunctionModel, Limits, tool
from steward.models.base import AssistantMessage, ModelRequest, StreamItem, ToolCall, ToolResultMessage

DISTS = ("steward",)
COLD_IMPORT = "from steward import Agent"
LABEL = "Steward Agent"


def _chars(request: ModelRequest) -> int:
    total = len(request.system) + len(request.context)
    for m in request.messages:
        if isinstance(m, AssistantMessage):
            total += len(m.text) + sum(len(c.arguments_json()) for c in m.tool_calls)
        else:
            total += len(m.content)
    return total


def make(n: int, s: int) -> AgentHandle:
    def reply(request: ModelRequest) -> AssistantMessage:
        if recording():
            record_call(_chars(request))
        seen = sum(1 for m in request.messages if isinstance(m, ToolResultMessage))
        act = next_action(seen, n)
        if act.kind == "tool":
            return AssistantMessage(tool_calls=(ToolCall(f"call_{act.i}", "read_chunk", act.args),))
        return AssistantMessage(text=act.text)

    class DelayedModel(FunctionModel):
        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
            await amodel_delay()
            async for item in super().stream(request):
                yield item

    @tool
    async def read_chunk(i: int) -> str:
        """Return chunk number i of the document."""
        text: str = chunk(i, s)  # `common` is the harness's module, not type-checked here
        return text

    agent = Agent(
        DelayedModel(reply, name="bench"),
        tools=[read_chunk],
        builtin_tools=False,
        instructions=SYSTEM_PROMPT,
        limits=Limits(max_steps=n + 5, request_token_budget=32_000),
    )
    workspace = tempfile.mkdtemp(prefix="steward-bench-")
    prompt = user_prompt(n)

    async def arun() -> str:
        return (await agent.run(prompt, workspace=workspace)).output

    def run() -> str:
        return agent.run_sync(prompt, workspace=workspace).output

    return AgentHandle(run=run, arun=arun, reentrant=True)
