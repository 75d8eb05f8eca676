"""Toolsets: combining, prefixing and filtering are wrappers, and names never shadow."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward import CombinedToolset, FilteredToolset, FunctionToolset, PrefixedToolset, ToolContext, tool
from steward.errors import ConfigError


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


@tool(name="ping")
def other_ping() -> str:
    """Another ping."""
    return "other"


@tool
def write_note(text: str) -> str:
    """Write a note."""
    return f"wrote {text}"


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path)


async def test_combined_toolset_offers_and_routes(ctx: ToolContext) -> None:
    combined = CombinedToolset([FunctionToolset([ping]), FunctionToolset([write_note])])
    assert [s.name for s in await combined.get_tools(ctx)] == ["ping", "write_note"]
    assert (await combined.call_tool("write_note", {"text": "hi"}, ctx)).content == "wrote hi"


async def test_the_same_name_in_two_toolsets_is_an_error_not_a_shadow(ctx: ToolContext) -> None:
    combined = CombinedToolset([FunctionToolset([ping]), FunctionToolset([other_ping])])
    with pytest.raises(ConfigError, match="offered by two toolsets"):
        await combined.get_tools(ctx)


def test_the_same_name_twice_in_one_toolset_is_an_error() -> None:
    with pytest.raises(ConfigError, match="Two tools are named 'ping'"):
        FunctionToolset([ping, other_ping])


async def test_prefixed_toolset_names_tools_server__tool(ctx: ToolContext) -> None:
    prefixed = PrefixedToolset(FunctionToolset([ping]), "srv")
    assert [s.name for s in await prefixed.get_tools(ctx)] == ["srv__ping"]
    assert (await prefixed.call_tool("srv__ping", {}, ctx)).content == "pong"
    assert (await prefixed.call_tool("ping", {}, ctx)).is_error


async def test_filtered_toolset_hides_and_refuses(ctx: ToolContext) -> None:
    filtered = FilteredToolset(FunctionToolset([ping, write_note]), lambda name: not name.startswith("write"))
    assert [s.name for s in await filtered.get_tools(ctx)] == ["ping"]
    refused = await filtered.call_tool("write_note", {"text": "x"}, ctx)
    assert refused.is_error and "not available to this agent" in refused.content


async def test_combined_list_is_reused_while_nothing_changes(ctx: ToolContext) -> None:
    combined = CombinedToolset([FunctionToolset([ping])])
    assert await combined.get_tools(ctx) is await combined.get_tools(ctx)
