"""A scripted model for the telemetry tests: it looks a new key up with ``lookup`` at each step,
then ends the run at step ``steps`` (no I/O: the run never waits on anything)."""

from __future__ import annotations

from steward import FunctionModel
from steward.models.base import AssistantMessage, ModelRequest, ToolCall


def looking_up(steps: int) -> FunctionModel:
    asked = [0]

    def reply(request: ModelRequest) -> AssistantMessage:
        asked[0] += 1
        if asked[0] < steps:
            return AssistantMessage(tool_calls=(ToolCall(f"c{asked[0]}", "lookup", {"key": f"k{asked[0]}"}),))
        end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}
        return AssistantMessage(tool_calls=(ToolCall("end", "agent_step", end),))

    return FunctionModel(reply)
