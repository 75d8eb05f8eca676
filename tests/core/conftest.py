from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, Limits, RunResult, ScriptedModel, Tool, tool
from steward.events import Event


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    if key == "missing":
        raise FileNotFoundError(f"key {key} not found")
    return f"value of {key}"


@dataclass
class Outcome:
    result: RunResult
    events: list[Event]
    model: ScriptedModel
    requests: list[Any] = field(default_factory=list)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


class RecordingScript(ScriptedModel):
    """A scripted model that also keeps every request it was sent."""

    def __init__(self, model: ScriptedModel) -> None:
        super().__init__(model.replies, source=model.source)
        self.requests: list[Any] = []

    def stream(self, request):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        return super().stream(request)


async def run_script(
    workspace: Path,
    replies: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Tool] = (lookup,),
    builtin_tools: bool = False,
    goal: str = "do the task",
    **limits: Any,
) -> Outcome:
    model = RecordingScript(ScriptedModel.from_data(replies))
    agent = Agent(model, tools=tools, builtin_tools=builtin_tools, limits=Limits(**limits))
    run = agent.start(goal, workspace=workspace)
    events = [e async for e in run.stream()]
    return Outcome(run.snapshot(), events, model, model.requests)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def script(workspace: Path) -> Any:
    """``await script(replies, **options)`` runs an agent on the scripted replies."""

    async def go(replies: Sequence[Mapping[str, Any]], **options: Any) -> Outcome:
        return await run_script(workspace, replies, **options)

    return go
