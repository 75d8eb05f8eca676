"""Whether a model call's span is current while the provider works: only when an instrumentation
library (``opentelemetry.instrumentation``) is loaded, whose HTTP client spans would hang under it."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.telemetry.conftest import named, traced

from steward import Agent, FunctionModel
from steward.models.base import AssistantMessage, ModelRequest, ToolCall


def _model(seen: list[str]) -> FunctionModel:
    def reply(request: ModelRequest) -> AssistantMessage:
        current = trace.get_current_span()
        seen.append(getattr(current, "name", "") if current.is_recording() else "")
        end = {"phase": "end", "summary": "done", "end_status": "solved", "end_message": "ok"}
        return AssistantMessage(tool_calls=(ToolCall("end", "agent_step", end),))

    return FunctionModel(reply)


@pytest.mark.parametrize("instrumented", [True, False])
async def test_the_chat_span_is_current_for_an_instrumentation_library_only(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instrumented: bool
) -> None:
    if instrumented:  # what an application's instrumentation (httpx's, say) loads
        monkeypatch.setitem(sys.modules, "opentelemetry.instrumentation", types.ModuleType("instrumentation"))
    else:
        monkeypatch.delitem(sys.modules, "opentelemetry.instrumentation", raising=False)
    seen: list[str] = []
    agent = Agent(_model(seen), builtin_tools=False, config=traced(), sandbox=False)
    result = await agent.run("end at once", workspace=str(tmp_path))
    assert result.solved, result.output
    (chat,) = named(spans.get_finished_spans(), "chat ")
    assert seen == ([chat.name] if instrumented else [""])
