"""Tier 3: a nested AGENTS.md joins the first result of a run that touches its subtree."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from steward import Agent, tool
from steward.config import RulesSettings
from steward.events import Event, ToolResultEvent
from steward.models.base import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage, UserMessage
from steward.models.scripted import FunctionModel
from steward.rules import RulesToolset
from steward.run import Run
from steward.store.events import open_store
from steward.tools.base import ToolContext, ToolResult
from steward.tools.builtin import builtin_toolset

Write = Callable[[Path, str], Path]


@pytest.fixture
def tree(workspace: Path, write: Write) -> Path:
    write(workspace / "AGENTS.md", "Root rules.")
    write(workspace / "src/AGENTS.md", "Source rules.")
    write(workspace / "src/api/AGENTS.md", "API rules.")
    write(workspace / "src/api/handlers.py", "def handle():\n    pass\n")
    write(workspace / "src/util.py", "x = 1\n")
    write(workspace / "docs/AGENTS.md", "Docs rules.")
    write(workspace / "docs/intro.md", "Intro.\n")
    write(workspace / "README.md", "Readme.\n")
    return workspace


def rules(settings: RulesSettings | None = None) -> RulesToolset:
    return RulesToolset(builtin_toolset(), settings=settings or RulesSettings())


async def call(toolset: RulesToolset, ctx: ToolContext, name: str, **arguments: Any) -> ToolResult:
    return await toolset.call_tool(name, arguments, ctx)


SRC = "[Rules from src/AGENTS.md — they apply to files under src/]\nSource rules.\n[End of rules from src/AGENTS.md]"
API = (
    "[Rules from src/api/AGENTS.md — they apply to files under src/api/]\nAPI rules.\n"
    "[End of rules from src/api/AGENTS.md]"
)


async def test_first_touch_appends_the_nested_rules_outer_first(tree: Path, ctx: ToolContext) -> None:
    toolset = rules()
    result = await call(toolset, ctx, "read_file", path="src/api/handlers.py")
    assert result.content == f"     1\tdef handle():\n     2\t    pass\n\n{SRC}\n\n{API}"
    assert toolset.rules_seen(ctx) == {"src/AGENTS.md", "src/api/AGENTS.md"}


async def test_rules_are_given_once_per_run(tree: Path, ctx: ToolContext) -> None:
    toolset = rules()
    await call(toolset, ctx, "read_file", path="src/api/handlers.py")
    again = await call(toolset, ctx, "read_file", path="src/api/handlers.py")
    sibling = await call(toolset, ctx, "read_file", path="src/util.py")
    assert "[Rules from" not in again.content and "[Rules from" not in sibling.content
    fresh = ToolContext(workspace=tree)  # another run
    assert API in (await call(toolset, fresh, "read_file", path="src/api/handlers.py")).content


async def test_a_file_in_an_outer_directory_gets_only_the_outer_rules(tree: Path, ctx: ToolContext) -> None:
    toolset = rules()
    result = await call(toolset, ctx, "read_file", path="src/util.py")
    assert result.content.endswith(SRC)
    later = await call(
        toolset, ctx, "edit_file", path="src/api/handlers.py", old_text="pass", new_text="return 1"
    )
    assert later.content.endswith(f"\n\n{API}") and SRC not in later.content


async def test_files_outside_the_subtree_get_no_rules(tree: Path, ctx: ToolContext) -> None:
    toolset = rules()
    assert "[Rules from" not in (await call(toolset, ctx, "read_file", path="README.md")).content
    assert "[Rules from" not in (await call(toolset, ctx, "list_dir", path=".")).content
    assert "Root rules" not in (await call(toolset, ctx, "grep", pattern="Readme")).content
    assert toolset.rules_seen(ctx) == set()


async def test_a_directory_argument_counts_as_inside_it(tree: Path, ctx: ToolContext) -> None:
    result = await call(rules(), ctx, "list_dir", path="docs")
    assert result.content.endswith(
        "[Rules from docs/AGENTS.md — they apply to files under docs/]\nDocs rules.\n[End of rules from docs/AGENTS.md]"
    )


async def test_writing_a_new_file_in_a_subtree_brings_its_rules(tree: Path, ctx: ToolContext) -> None:
    result = await call(rules(), ctx, "write_file", path="src/api/new/module.py", content="y = 2\n")
    assert not result.is_error
    assert result.content.endswith(f"{SRC}\n\n{API}")


async def test_failed_calls_get_no_rules(tree: Path, ctx: ToolContext) -> None:
    toolset = rules()
    result = await call(toolset, ctx, "read_file", path="src/api/missing.py")
    assert result.is_error and "[Rules from" not in result.content
    assert toolset.rules_seen(ctx) == set()


async def test_paths_outside_the_workspace_get_no_rules(tree: Path, ctx: ToolContext, write: Write) -> None:
    write(tree.parent / "AGENTS.md", "Outer rules.")
    result = await call(rules(), ctx, "list_dir", path="..")
    assert result.is_error and "Outer rules" not in result.content


async def test_a_nested_agents_md_symlinked_outside_is_ignored(
    tree: Path, ctx: ToolContext, tmp_path: Path, write: Write
) -> None:
    write(tree / "lib/code.py", "z = 3\n")
    (tree / "lib/AGENTS.md").symlink_to(write(tmp_path / "outside/secret.md", "TOP SECRET"))
    toolset = rules()
    result = await call(toolset, ctx, "read_file", path="lib/code.py")
    assert "TOP SECRET" not in result.content and toolset.rules_seen(ctx) == set()


async def test_long_nested_rules_are_capped_and_say_so(tree: Path, ctx: ToolContext, write: Write) -> None:
    write(tree / "big/AGENTS.md", "".join(f"rule {n}\n" for n in range(1000)))
    write(tree / "big/f.txt", "f\n")
    result = await call(rules(RulesSettings(max_chars=500)), ctx, "read_file", path="big/f.txt")
    block = result.content.split("[Rules from big/AGENTS.md", 1)[1]
    assert len(block) < 700
    assert "[big/AGENTS.md is longer than 500 characters and was cut here; read it with read_file" in block


async def test_agents_md_false_appends_nothing(tree: Path, ctx: ToolContext) -> None:
    toolset = rules(RulesSettings(agents_md=False))
    result = await call(toolset, ctx, "read_file", path="src/api/handlers.py")
    assert "[Rules from" not in result.content and toolset.rules_seen(ctx) == set()


async def test_replayed_results_restore_what_the_run_was_given(tree: Path, ctx: ToolContext) -> None:
    toolset = rules()
    recorded = await call(toolset, ctx, "read_file", path="src/api/handlers.py")
    rebuilt = ToolContext(workspace=tree)
    toolset.replayed("read_file", {"path": "src/api/handlers.py"}, recorded, rebuilt)
    assert toolset.rules_seen(rebuilt) == {"src/AGENTS.md", "src/api/AGENTS.md"}
    after = await call(toolset, rebuilt, "read_file", path="src/api/handlers.py")
    assert "[Rules from" not in after.content


async def test_replay_ignores_other_tools_and_errors(tree: Path, ctx: ToolContext) -> None:
    toolset = rules()
    marker = f"output\n\n{API}"
    toolset.replayed("bash", {"command": "cat x"}, ToolResult(marker), ctx)
    toolset.replayed("read_file", {"path": "x"}, ToolResult(marker, is_error=True), ctx)
    assert toolset.rules_seen(ctx) == set()


# --- one agent, many runs ---------------------------------------------------------------------

Script = Sequence[tuple[str, dict[str, Any]] | str]
READ = ("read_file", {"path": "src/api/handlers.py"})


def by_goal(scripts: Mapping[str, Script]) -> FunctionModel:
    """A model that follows the script of each run's goal (the results so far pick the reply),
    so runs of one agent may interleave."""

    def reply(request: ModelRequest) -> AssistantMessage:
        goal = next(m.content for m in request.messages if isinstance(m, UserMessage))
        done = sum(1 for m in request.messages if isinstance(m, ToolResultMessage))
        entry = scripts[goal][done]
        if isinstance(entry, str):
            return AssistantMessage(text=entry)
        return AssistantMessage(tool_calls=(ToolCall(f"{goal}-{done}", *entry),))

    return FunctionModel(reply)


async def outputs(events: Sequence[Event] | Run) -> list[str]:
    """The tool results of a run's events (or of the run, streamed to its end)."""
    if isinstance(events, Run):
        events = [e async for e in events.stream()]
    return [e.output for e in events if isinstance(e, ToolResultEvent) and e.tool == "read_file"]


async def test_rules_given_to_one_run_are_still_given_to_another_at_the_same_time(tree: Path) -> None:
    both = asyncio.Barrier(2)

    @tool
    async def meet() -> str:
        """Wait until the other run is here too."""
        async with asyncio.timeout(10):
            await both.wait()
        return "met"

    model = by_goal({"first": [READ, ("meet", {}), READ, "done"], "second": [("meet", {}), READ, "done"]})
    agent = Agent(model, tools=[meet], sandbox=False)
    first, second = await asyncio.gather(
        outputs(agent.start("first", workspace=tree)), outputs(agent.start("second", workspace=tree))
    )

    assert API in first[0] and API not in first[1]  # once per run
    assert API in second[0]  # read after the first run had been given them (they met in between)


async def test_a_rebuilt_run_is_not_given_the_same_rules_again(tree: Path, tmp_path: Path) -> None:
    asks = ("agent_step", {"phase": "feedback", "summary": "ask", "feedback_message": "Which handler?"})
    script: Script = [READ, asks, READ, "done"]
    store = await open_store(f"sqlite:///{tmp_path}/state/steward.db")
    try:
        original = Agent(by_goal({"rules": script}), sandbox=False, store=store).start(
            "rules", workspace=tree
        )
        assert (await original.result()).question == "Which handler?"
        # A new process, in effect: nothing shared with the first but the store.
        rebuilt = await Agent(by_goal({"rules": script}), sandbox=False, store=store).resume(original.id)
        after = [e async for e in rebuilt.answer_stream("handle")]
        before = await store.events(original.id)
    finally:
        await store.close()

    assert rebuilt.snapshot().output == "done"
    assert API in (await outputs(before))[0]
    assert (await outputs(after)) == ["     1\tdef handle():\n     2\t    pass"]
