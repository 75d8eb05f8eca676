"""read_rules with an embedder: the keyword ranking of the linked documents fused with one by
meaning; without an embedder, keyword alone as before."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from steward.config import RulesSettings
from steward.embed.base import Embedder, Vectors
from steward.rules import RulesToolset
from steward.testing.fake_embed import HashEmbedder
from steward.tools.base import FunctionToolset, ToolContext, ToolResult

Write = Callable[[Path, str], Path]


@pytest.fixture
def docs(workspace: Path, write: Write) -> Path:
    write(
        workspace / "AGENTS.md", "# Rules\n\nSee [Triage](docs/triage.md) and [Releases](docs/releases.md).\n"
    )
    write(workspace / "docs/triage.md", "# Triage\n\nEvery ticket gets a severity label within a day.\n")
    write(workspace / "docs/releases.md", "# Releases\n\nTag the commit, then ship it.\n")
    return workspace


async def read(ctx: ToolContext, topic: str, embedder: Embedder | None = None) -> ToolResult:
    toolset = RulesToolset(FunctionToolset(), settings=RulesSettings(), embedder=embedder)
    return await toolset.call_tool("read_rules", {"topic": topic}, ctx)


async def test_meaning_finds_a_document_no_keyword_prefix_matches(docs: Path, ctx: ToolContext) -> None:
    plain = await read(ctx, "tickets")  # "tickets" is no prefix of "ticket"
    assert plain.is_error and "No reference document matches 'tickets'" in plain.content
    hybrid = await read(ctx, "tickets", HashEmbedder(dim=89))
    assert not hybrid.is_error and hybrid.content.startswith("[docs/triage.md — Triage]")


async def test_the_keyword_match_still_leads(docs: Path, ctx: ToolContext) -> None:
    hybrid = await read(ctx, "releases", HashEmbedder(dim=89))
    assert hybrid.content.startswith("[docs/releases.md — Releases]")


class Broken:
    name = "broken:2"

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        raise ConnectionError("down")

    async def aclose(self) -> None:
        return None


async def test_an_embedder_that_fails_leaves_the_keyword_match(docs: Path, ctx: ToolContext) -> None:
    result = await read(ctx, "severity label", Broken())
    assert result.content.startswith("[docs/triage.md — Triage]")
