"""Tool discovery with an embedder: keyword and meaning fused; without one, keyword alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from steward.config import ToolsSettings
from steward.embed.base import Vectors
from steward.testing.fake_embed import HashEmbedder
from steward.tools.base import ToolContext
from steward.tools.discovery import DISCOVER_TOOL, DiscoveryToolset, found_names

from .test_discovery import BUDGET_CHARS, CATALOG, SpecToolset

ON = ToolsSettings(discovery="on")


def discovery(embedder: object = None) -> DiscoveryToolset:
    return DiscoveryToolset(SpecToolset(CATALOG), settings=ON, budget_chars=BUDGET_CHARS, embedder=embedder)  # type: ignore[arg-type]


async def test_meaning_finds_what_no_keyword_prefix_matches(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path)
    # "tickets" is no prefix of "ticket": BM25 finds nothing; the embedder's stems meet.
    plain = await discovery().call_tool(DISCOVER_TOOL, {"query": "tickets", "limit": 3}, ctx)
    assert plain.content.startswith("No tools match 'tickets'")
    hybrid = await discovery(HashEmbedder(dim=83)).call_tool(
        DISCOVER_TOOL, {"query": "tickets", "limit": 3}, ctx
    )
    assert found_names(hybrid.content)[0] == "github__create_issue"
    assert len(found_names(hybrid.content)) == 3


async def test_keyword_matches_still_lead_when_both_agree(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path)
    query = {"query": "shell command", "limit": 2}
    plain = await discovery().call_tool(DISCOVER_TOOL, query, ctx)
    hybrid = await discovery(HashEmbedder(dim=83)).call_tool(DISCOVER_TOOL, query, ctx)
    assert found_names(plain.content)[0] == found_names(hybrid.content)[0] == "bash"


class BrokenEmbedder:
    name = "broken:1"

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        raise ConnectionError("embedding server down")

    async def aclose(self) -> None:
        return None


async def test_an_embedder_that_fails_leaves_the_keyword_ranking(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path)
    result = await discovery(BrokenEmbedder()).call_tool(DISCOVER_TOOL, {"query": "shell command"}, ctx)
    assert not result.is_error and found_names(result.content)[0] == "bash"
    assert "Search by meaning failed: ConnectionError; matched by words only." in result.content
