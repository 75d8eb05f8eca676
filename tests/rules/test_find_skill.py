"""find_skill: skills found by their words, by the files their SKILL.md links, and by meaning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from steward.config import RulesSettings
from steward.rules import RulesToolset
from steward.testing.fake_embed import HashEmbedder
from steward.tools.base import FunctionToolset, ToolContext, ToolResult

Write = Callable[[Path, str], Path]
MakeSkill = Callable[..., Path]


@pytest.fixture
def skills(workspace: Path, make_skill: MakeSkill, write: Write) -> Path:
    base = workspace / ".steward/skills"
    deploy = make_skill(
        base, "deploy", "Ship a release to production.",
        body="# Deploy\n\nRun `make ship`. Details: [the release checklist](reference/checklist.md).",
    )  # fmt: skip
    write(
        deploy / "reference/checklist.md", "# Checklist\n\nRotate the signing certificate before tagging.\n"
    )
    write(deploy / "notes.md", "Unlinked: the word kangaroo appears only here.\n")
    make_skill(base, "triage", "Sort incoming bug reports by severity.", body="Label each report.")
    return base


async def find(ctx: ToolContext, query: str, **options: object) -> ToolResult:
    toolset = RulesToolset(FunctionToolset(), settings=RulesSettings(), **options)  # type: ignore[arg-type]
    return await toolset.call_tool("find_skill", {"query": query}, ctx)


async def test_a_word_in_a_linked_file_finds_the_skill_with_that_file(skills: Path, ctx: ToolContext) -> None:
    result = await find(ctx, "signing certificate")
    assert not result.is_error
    assert result.content.splitlines()[1].startswith("- deploy: Ship a release to production.")
    assert "load_skill(name='deploy', file='reference/checklist.md')" in result.content
    assert "triage" not in result.content


async def test_words_of_the_description_find_the_skill_itself(skills: Path, ctx: ToolContext) -> None:
    result = await find(ctx, "bug severity")
    assert "- triage: Sort incoming bug reports by severity. → load_skill(name='triage')" in result.content
    assert "deploy" not in result.content


async def test_files_the_skill_md_does_not_link_are_not_searched(skills: Path, ctx: ToolContext) -> None:
    result = await find(ctx, "kangaroo")
    assert result.content.startswith("No skill matches 'kangaroo'. Skills: deploy, triage.")


async def test_find_skill_is_offered_beside_load_skill_only_with_skills(
    workspace: Path, ctx: ToolContext, make_skill: MakeSkill
) -> None:
    toolset = RulesToolset(FunctionToolset(), settings=RulesSettings())
    assert [s.name for s in await toolset.get_tools(ctx)] == []
    result = await toolset.call_tool("find_skill", {"query": "x"}, ctx)
    assert result.is_error and "No skills are installed" in result.content


async def test_with_an_embedder_the_rankings_are_fused(skills: Path, ctx: ToolContext) -> None:
    embedder = HashEmbedder(dim=97)  # a space no other test fills the process's vector cache with
    result = await find(ctx, "certificate rotation", embedder=embedder)
    # The vector list holds every entry, so both skills come back; words put deploy first.
    lines = result.content.splitlines()
    assert lines[1].startswith("- deploy:") and "file='reference/checklist.md'" in lines[1]
    assert embedder.calls >= 2  # the entries once, then the query
    texts = embedder.texts
    await find(ctx, "certificate rotation", embedder=embedder)
    assert embedder.texts == texts + 1  # the entries' vectors are cached: only the query again


async def test_an_empty_query_is_refused_with_an_example(skills: Path, ctx: ToolContext) -> None:
    result = await find(ctx, "   ")
    assert result.is_error and "a few words" in result.content
