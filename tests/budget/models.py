"""A model for the budget tests: it looks things up, then ends, and reports a fixed usage per
reply as a provider would (cached input tokens included). What it says depends only on the
request, so a run rebuilt from its log asks it the same things."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from steward import tool
from steward.models.base import (
    AssistantMessage,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    ToolCall,
    ToolResultMessage,
    Usage,
)

USAGE = Usage(input_tokens=10_000, output_tokens=100, cache_read_tokens=4_000, requests=1)


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


def end_step(message: str = "looked everything up") -> ToolCall:
    args: dict[str, Any] = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": message}
    return ToolCall("end", "agent_step", args)


class LookupModel(Model):
    """Calls ``tool`` (``lookup``) ``calls`` times (one per reply), then ends the run solved. A
    summary asked of it (compaction) gets a reply with no text, and the same usage."""

    def __init__(
        self, calls: int, *, name: str = "openai:gpt-4o-mini", usage: Usage = USAGE, tool: str = "lookup"
    ) -> None:
        self.calls, self.name, self.usage, self.tool = calls, name, usage, tool
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.requests.append(request)
        done = sum(isinstance(m, ToolResultMessage) for m in request.messages)
        call = ToolCall(f"c{done}", self.tool, {"key": str(done)}) if done < self.calls else end_step()
        u = self.usage
        usage = Usage(u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, 1)
        yield ModelResponse(AssistantMessage(tool_calls=(call,)), usage, model=self.name)
