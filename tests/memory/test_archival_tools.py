"""The memory tools on their own: the schemas the model sees, the recalled lines, and the bounds
on what one recall may return."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from steward.config import MemorySettings
from steward.memory.archival import ITEM_CHARS, MIN_RECALL_CHARS, LongTermAccess, archival_toolset
from steward.tools.base import FunctionToolset, ToolContext


def tools(engine: AsyncEngine, budget_chars: int = 100_000, **settings: object) -> FunctionToolset:
    return archival_toolset(LongTermAccess(engine, MemorySettings(**settings)), budget_chars=budget_chars)  # type: ignore[arg-type]


async def test_the_schemas_the_model_sees(engine: AsyncEngine, tmp_path: Path) -> None:
    specs = {s.name: s for s in await tools(engine, recall_k=7).get_tools(ToolContext(workspace=tmp_path))}
    assert list(specs) == ["remember", "recall", "forget"]
    assert specs["remember"].parameters["required"] == ["text"]
    assert specs["remember"].parameters["properties"]["tags"] == {
        "default": [], "items": {"type": "string"}, "type": "array",
        "description": 'Optional words to file it under, e.g. ["deploy", "user-preference"].',
    }  # fmt: skip
    # The configured recall_k is the default the model sees.
    assert specs["recall"].parameters["properties"]["k"]["default"] == 7
    assert specs["forget"].parameters["properties"]["id"]["anyOf"] == [
        {"type": "integer"},
        {"type": "string"},
    ]
    for spec in specs.values():
        assert "Use it" in spec.description or "Forget" in spec.description


async def test_recalled_lines_show_id_date_kind_and_tags(engine: AsyncEngine, tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path, run_id="r1")
    toolset = tools(engine)
    made = await toolset.call_tool(
        "remember", {"text": "Builds use  ccache.\nAlways.", "tags": ["Build Cache", "ci"]}, ctx
    )
    assert made.content.startswith("Remembered as m")
    found = await toolset.call_tool("recall", {"query": "ccache builds"}, ctx)
    ref = made.content.removeprefix("Remembered as ")
    head, text = found.content.split("): ", 1)
    assert head.startswith(f"{ref} (20") and head.endswith(", tags: build-cache ci")
    assert text == "Builds use ccache. Always."  # whitespace folded: one line per item


async def test_one_recall_stays_within_its_share_of_the_budget(engine: AsyncEngine, tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path)
    toolset = tools(engine, budget_chars=2_000)  # a tenth is under the floor: the floor holds
    for n in range(12):
        await toolset.call_tool("remember", {"text": f"Server {n} runs the parser. " + "detail " * 150}, ctx)
    found = await toolset.call_tool("recall", {"query": "parser server", "k": 12}, ctx)
    assert not found.is_error
    lines = found.content.splitlines()
    assert len(found.content) <= MIN_RECALL_CHARS + 200
    assert all(len(line) <= ITEM_CHARS + 40 for line in lines)  # the id, date and tags, then the cut text
    assert lines[-1].endswith("more not shown: ask with other words, or a smaller k)")


async def test_too_many_tags_and_a_blank_query_are_tool_errors(engine: AsyncEngine, tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path)
    toolset = tools(engine)
    many = await toolset.call_tool("remember", {"text": "x", "tags": [f"t{n}" for n in range(11)]}, ctx)
    assert many.is_error and "At most 10 tags; got 11" in many.content
    blank = await toolset.call_tool("recall", {"query": "  "}, ctx)
    assert blank.is_error and "a query of a few words" in blank.content
    wrong = await toolset.call_tool("forget", {"id": "seven"}, ctx)
    assert wrong.is_error and "no memory seven in this scope" in wrong.content
