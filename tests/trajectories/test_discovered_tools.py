"""A run that finds tools with ``discover_tools``: its chat record lists every tool the model was
offered, those it started with and those it found, each once."""

from __future__ import annotations

from pathlib import Path

from tests.trajectories.scenarios import GOAL

from steward.agent import Agent
from steward.config import Config, Limits, ToolsSettings
from steward.models.base import AssistantMessage, ModelRequest, ToolCall
from steward.models.scripted import FunctionModel
from steward.store.events import EventStore
from steward.trajectories import chat_record
from steward.trajectories._export import lines

#: Find the file tools, write with one, then find the same tools again, and answer.
REPLIES: list[tuple[str, dict[str, str]] | str] = [
    ("discover_tools", {"query": "write file"}),
    ("write_file", {"path": "notes.txt", "content": "alpha\n"}),
    ("discover_tools", {"query": "write file"}),
    "notes.txt holds alpha.",
]


async def test_tools_found_mid_run_are_in_the_records_tools_each_once(
    store: EventStore, tmp_path: Path
) -> None:
    offered: list[list[str]] = []  # the tool names of each step's request, as the model got them

    def reply(request: ModelRequest) -> AssistantMessage:
        offered.append([spec.name for spec in request.tools])
        n = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        entry = REPLIES[min(n, len(REPLIES) - 1)]
        if isinstance(entry, str):
            return AssistantMessage(text=entry)
        return AssistantMessage(tool_calls=(ToolCall(f"c{n}", entry[0], entry[1]),))

    config = Config(
        limits=Limits(max_steps=10), tools=ToolsSettings(discovery="on", always_offer=["read_file"])
    )
    started = Agent(FunctionModel(reply), config=config, sandbox=False, store=store).start(
        GOAL, workspace=tmp_path
    )
    await started.result()
    assert (tmp_path / "notes.txt").read_text() == "alpha\n"

    # The run found write_file mid-run: it was not offered at first, and was from then on.
    assert "write_file" not in offered[0] and "write_file" in offered[1]
    record = await chat_record(store, started.id)
    names = [tool["function"]["name"] for tool in record["tools"]]
    assert sorted(names) == sorted({name for step in offered for name in step})
    assert len(names) == len(set(names))
    write = next(tool["function"] for tool in record["tools"] if tool["function"]["name"] == "write_file")
    assert set(write["parameters"]["required"]) >= {"path", "content"}
    exported = [line async for line in lines(store, [await store.find_run(started.id)], "chat")]
    assert len(exported) == 1 and '"name":"write_file"' in exported[0]
