"""Core memory blocks: the rendered prompt section, edits and their errors, and the two tools."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from steward.errors import ConfigError, StoreError, ToolError
from steward.memory.blocks import CoreMemory, MemoryBlock, memory_toolset
from steward.tools.base import ToolContext


def _memory(user: str = "", project: str = "", limit: int = 100) -> CoreMemory:
    return CoreMemory(
        [
            MemoryBlock("user", user, limit, "What you know about the user."),
            MemoryBlock("project", project, limit, "Facts about the project."),
        ]
    )


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path)


# --- defaults and rendering ----------------------------------------------------------------------


def test_default_memory_has_empty_user_and_project_blocks() -> None:
    memory = CoreMemory.default()
    assert memory.labels == ("user", "project")
    assert all(block.value == "" and block.limit_chars == 2000 and block.description for block in memory)


def test_render_labels_each_block_with_its_size_and_limit() -> None:
    memory = _memory(user="Name: Ada\nPrefers short answers.", project="")
    assert memory.render() == (
        "--- Core Memory ---\n"
        "Your durable notes, kept across sessions. Keep them true and short: add a lasting fact with "
        "memory_append(label, text); correct, condense or remove one with memory_replace(label, old, new). "
        "Only facts that stay useful in later sessions belong here; the current task's state does not.\n"
        '<memory label="user" chars="32/100" description="What you know about the user.">\n'
        "Name: Ada\nPrefers short answers.\n"
        "</memory>\n"
        '<memory label="project" chars="0/100" description="Facts about the project.">\n'
        "</memory>\n"
        "--- End Core Memory ---"
    )


def test_render_is_deterministic() -> None:
    assert _memory(user="a", project="b").render() == _memory(user="a", project="b").render()


def test_render_escapes_quotes_in_descriptions() -> None:
    memory = CoreMemory([MemoryBlock("notes", description='say "hi" & <go>')])
    assert 'description="say &quot;hi&quot; &amp; &lt;go&gt;"' in memory.render()


def test_no_blocks_render_nothing() -> None:
    assert CoreMemory().render() == ""


def test_bad_labels_limits_and_duplicates_are_refused() -> None:
    with pytest.raises(ConfigError, match="lower-case"):
        MemoryBlock("User Notes")
    with pytest.raises(ConfigError, match="positive"):
        MemoryBlock("user", limit_chars=0)
    with pytest.raises(ConfigError, match="unique"):
        CoreMemory([MemoryBlock("user"), MemoryBlock("user")])


# --- edits ---------------------------------------------------------------------------------------


def test_append_adds_a_line() -> None:
    memory = _memory(user="Name: Ada")
    block = memory.append("user", "Uses fish shell.")
    assert block.value == "Name: Ada\nUses fish shell."
    assert memory.get("user") == block
    assert memory.append("project", "Tests: pytest").value == "Tests: pytest"


def test_replace_changes_the_one_occurrence() -> None:
    memory = _memory(project="Tests: unittest\nLint: ruff")
    assert memory.replace("project", "unittest", "pytest").value == "Tests: pytest\nLint: ruff"


def test_replace_with_empty_new_deletes() -> None:
    memory = _memory(project="Tests: pytest\nLint: ruff")
    assert memory.replace("project", "\nLint: ruff", "").value == "Tests: pytest"


def test_replace_of_missing_text_shows_the_current_value() -> None:
    memory = _memory(user="Name: Ada")
    with pytest.raises(ToolError) as caught:
        memory.replace("user", "name: ada", "Name: Grace")
    assert "does not occur" in str(caught.value)
    assert "exactly" in str(caught.value)
    assert str(caught.value).endswith("The block currently reads:\nName: Ada")


def test_replace_of_repeated_text_says_how_often_it_occurs() -> None:
    memory = _memory(user="likes tea\nlikes cats")
    with pytest.raises(ToolError, match=r"occurs 2 times.*surrounding text"):
        memory.replace("user", "likes", "loves")
    assert memory.get("user").value == "likes tea\nlikes cats"


def test_replace_in_an_empty_block_points_to_append() -> None:
    with pytest.raises(ToolError, match="is empty; add text with memory_append"):
        _memory().replace("user", "Name", "Name: Ada")


def test_replace_with_empty_old_points_to_append() -> None:
    with pytest.raises(ToolError, match="memory_append"):
        _memory(user="x").replace("user", "", "y")


def test_append_of_empty_text_is_refused() -> None:
    with pytest.raises(ToolError, match="empty"):
        _memory().append("user", "  ")


def test_an_edit_over_the_limit_says_by_how_much_and_changes_nothing() -> None:
    memory = _memory(user="x" * 95, limit=100)
    with pytest.raises(ToolError) as caught:
        memory.append("user", "0123456789")
    message = str(caught.value)
    assert "106 characters, 6 over its limit of 100" in message
    assert "memory_replace" in message
    assert memory.get("user").value == "x" * 95


def test_an_edit_may_shrink_a_block_that_is_over_a_lowered_limit() -> None:
    memory = CoreMemory([MemoryBlock("user", "a" * 30 + "b" * 30, limit_chars=40)])
    assert memory.replace("user", "b" * 30, "b" * 10).chars == 40
    memory = CoreMemory([MemoryBlock("user", "a" * 50 + "b" * 10, limit_chars=40)])
    assert memory.replace("user", "b" * 10, "").chars == 50  # still over, but shorter


def test_unknown_label_lists_the_labels() -> None:
    with pytest.raises(ToolError, match=r"no memory block 'persona'. The blocks are: 'user', 'project'"):
        _memory().append("persona", "x")


# --- the tools -----------------------------------------------------------------------------------


async def test_toolset_offers_replace_and_append_with_documented_arguments(ctx: ToolContext) -> None:
    specs = {spec.name: spec for spec in await memory_toolset(_memory()).get_tools(ctx)}
    assert set(specs) == {"memory_replace", "memory_append"}
    for spec in specs.values():
        assert "survive across sessions" in spec.description
        assert "not the state of" in spec.description
    assert specs["memory_replace"].parameters["required"] == ["label", "old", "new"]
    assert specs["memory_append"].parameters["required"] == ["label", "text"]
    assert all(p["description"] for p in specs["memory_replace"].parameters["properties"].values())


async def test_append_tool_edits_and_reports_the_new_value(ctx: ToolContext) -> None:
    memory = _memory(user="Name: Ada")
    result = await memory_toolset(memory).call_tool(
        "memory_append", {"label": "user", "text": "Likes tea."}, ctx
    )
    assert not result.is_error
    assert (
        result.content
        == "Memory block 'user' saved (20/100 characters). It now reads:\nName: Ada\nLikes tea."
    )
    assert memory.get("user").value == "Name: Ada\nLikes tea."


async def test_replace_tool_errors_go_back_to_the_model(ctx: ToolContext) -> None:
    memory = _memory(user="Name: Ada")
    tools = memory_toolset(memory)
    result = await tools.call_tool("memory_replace", {"label": "user", "old": "Grace", "new": "Ada"}, ctx)
    assert result.is_error
    assert "does not occur" in result.content and "Name: Ada" in result.content
    bad = await tools.call_tool("memory_append", {"label": "user"}, ctx)
    assert bad.is_error and "text" in bad.content


async def test_on_change_is_awaited_with_each_edited_block(ctx: ToolContext) -> None:
    saved: list[MemoryBlock] = []

    async def save(block: MemoryBlock) -> None:
        saved.append(block)

    tools = memory_toolset(_memory(), save)
    await tools.call_tool("memory_append", {"label": "project", "text": "Build: make"}, ctx)
    await tools.call_tool("memory_replace", {"label": "project", "old": "make", "new": "just"}, ctx)
    await tools.call_tool("memory_append", {"label": "nope", "text": "x"}, ctx)  # fails: not saved
    assert [(b.label, b.value) for b in saved] == [("project", "Build: make"), ("project", "Build: just")]


async def test_a_failed_save_undoes_the_edit_and_tells_the_model(ctx: ToolContext) -> None:
    memory = _memory(user="Name: Ada")

    async def broken(block: MemoryBlock) -> None:
        raise StoreError("could not save memory block 'user': disk full")

    result = await memory_toolset(memory, broken).call_tool(
        "memory_append", {"label": "user", "text": "x"}, ctx
    )
    assert result.is_error and "disk full" in result.content
    assert memory.get("user").value == "Name: Ada"


async def test_concurrent_edits_are_saved_in_the_order_they_were_made(ctx: ToolContext) -> None:
    memory = _memory(limit=1000)
    saved: list[str] = []

    async def slow_then_fast(block: MemoryBlock) -> None:
        await asyncio.sleep(0.02 if not saved else 0)
        saved.append(block.value)

    tools = memory_toolset(memory, slow_then_fast)
    await asyncio.gather(
        tools.call_tool("memory_append", {"label": "user", "text": "one"}, ctx),
        tools.call_tool("memory_append", {"label": "user", "text": "two"}, ctx),
    )
    assert saved == ["one", "one\ntwo"]
    assert memory.get("user").value == "one\ntwo"
