"""Two runs changing one workspace at once: each call's comparison sees only its own changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from steward import Agent, FunctionModel
from steward.events import SignalEvent
from steward.models.base import AssistantMessage, ModelRequest, ToolCall


def model(n: int) -> FunctionModel:
    calls = [
        ToolCall(f"c{n}-{k}", "bash", {"command": f"echo run{n} >> shared.txt; sleep 0.3"}) for k in range(3)
    ]

    def reply(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage(tool_calls=(calls.pop(0),)) if calls else AssistantMessage(text="done")

    return FunctionModel(reply)


async def test_concurrent_runs_in_one_workspace_do_not_undo_each_other(tmp_path: Path) -> None:
    async def one(n: int) -> list[SignalEvent]:
        events = [e async for e in Agent(model(n)).run_stream(f"append {n}", workspace=tmp_path)]
        return [e for e in events if isinstance(e, SignalEvent) and e.code == "undone"]

    undone = await asyncio.gather(one(1), one(2))
    assert list(undone) == [[], []]  # neither saw the other's placeholders (steward.toml, .git) as its own
    lines = (tmp_path / "shared.txt").read_text().split()
    assert sorted(lines) == ["run1"] * 3 + ["run2"] * 3
    assert not (tmp_path / "steward.toml").exists()  # no placeholder left behind
