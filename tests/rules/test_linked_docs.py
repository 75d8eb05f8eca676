"""Tier 2: markdown documents linked from AGENTS.md are listed by topic and read with read_rules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from steward.config import RulesSettings
from steward.rules import RulesToolset, rules_prompt
from steward.rules._search import Entry, _rank_plain, query_terms, rank
from steward.rules.agents_md import linked_docs
from steward.tools.base import FunctionToolset, ToolContext

Write = Callable[[Path, str], Path]

AGENTS = """# Rules

Read [Testing](docs/testing.md) before writing tests, and [docs/deploy.md](docs/deploy.md)
before a release. Style: see [the style guide][style]. Elsewhere: [web](https://example.com/x.md),
![diagram](docs/diagram.md), [outside](../outside/secret.md), [anchor](#rules), [code](src/app.py).

```
[fenced](docs/fenced.md)
```

[style]: docs/style%20guide.md
"""


@pytest.fixture
def docs_workspace(workspace: Path, tmp_path: Path, write: Write) -> Path:
    write(workspace / "AGENTS.md", AGENTS)
    write(workspace / "docs/testing.md", "# Testing\n\nRun pytest with -q. Fixtures live in conftest.py.\n")
    write(workspace / "docs/deploy.md", "# Deployment checklist\n\nTag the release, then push the tag.\n")
    write(workspace / "docs/style guide.md", "# Style\n\nFormat with ruff; tests are specifications.\n")
    write(workspace / "docs/diagram.md", "# Diagram")
    write(workspace / "docs/fenced.md", "# Fenced")
    write(workspace / "src/app.py", "print('hi')")
    write(tmp_path / "outside/secret.md", "TOP SECRET")
    return workspace


def toolset(settings: RulesSettings | None = None) -> RulesToolset:
    return RulesToolset(FunctionToolset(), settings=settings or RulesSettings())


async def read_rules(ctx: ToolContext, topic: str) -> tuple[str, bool]:
    result = await toolset().call_tool("read_rules", {"topic": topic}, ctx)
    return result.content, result.is_error


def test_only_local_markdown_links_outside_code_are_indexed(docs_workspace: Path) -> None:
    docs = linked_docs(docs_workspace.resolve())
    assert [(d.title, d.path) for d in docs] == [
        ("Testing", "docs/testing.md"),
        ("Deployment checklist", "docs/deploy.md"),  # link text was only the path: the heading
        ("the style guide", "docs/style guide.md"),
    ]


def test_topics_are_listed_in_the_prompt_with_how_to_read_them(docs_workspace: Path) -> None:
    prompt = rules_prompt(docs_workspace, RulesSettings())
    assert (
        "Reference documents — read one with read_rules(topic) when the task touches its topic:\n"
        "- Testing (docs/testing.md)\n"
        "- Deployment checklist (docs/deploy.md)\n"
        "- the style guide (docs/style guide.md)"
    ) in prompt
    assert "Run pytest" not in prompt  # titles only, not the documents


def test_a_symlinked_doc_leading_outside_is_not_indexed(
    workspace: Path, tmp_path: Path, write: Write
) -> None:
    write(workspace / "AGENTS.md", "See [Secret](docs/secret.md).")
    (workspace / "docs").mkdir()
    (workspace / "docs/secret.md").symlink_to(write(tmp_path / "outside/secret.md", "# TOP SECRET"))
    assert linked_docs(workspace.resolve()) == ()


async def test_read_rules_finds_a_document_by_a_word_prefix(docs_workspace: Path, ctx: ToolContext) -> None:
    text, error = await read_rules(ctx, "deploy")
    assert not error
    assert text.startswith("[docs/deploy.md — Deployment checklist]\n# Deployment checklist")
    assert "Tag the release" in text


async def test_read_rules_matches_content_and_lists_the_other_matches(
    docs_workspace: Path, ctx: ToolContext
) -> None:
    text, error = await read_rules(ctx, "test")
    assert not error
    assert text.startswith("[docs/testing.md — Testing]")
    assert text.endswith("Other matching documents: the style guide (docs/style guide.md).")


async def test_read_rules_takes_an_exact_path(docs_workspace: Path, ctx: ToolContext) -> None:
    text, _ = await read_rules(ctx, "./docs/style guide.md")
    assert text.startswith("[docs/style guide.md — the style guide]")


@pytest.mark.parametrize("topic", ['"unbalanced', "NEAR(a b)", "test*", "-deploy OR", "title:x", "(", "é"])
async def test_fts_syntax_in_the_topic_never_crashes(
    docs_workspace: Path, ctx: ToolContext, topic: str
) -> None:
    text, error = await read_rules(ctx, topic)
    assert "failed" not in text
    assert not error or text.startswith("No reference document matches")


async def test_no_match_lists_the_topics(docs_workspace: Path, ctx: ToolContext) -> None:
    text, error = await read_rules(ctx, "kubernetes")
    assert error
    assert text == (
        "No reference document matches 'kubernetes'. Topics: Testing (docs/testing.md); Deployment "
        "checklist (docs/deploy.md); the style guide (docs/style guide.md). Call read_rules with words from "
        "one of these titles, or with its path."
    )


async def test_a_long_document_is_capped_and_says_so(workspace: Path, ctx: ToolContext, write: Write) -> None:
    write(workspace / "AGENTS.md", "See [Big](big.md).")
    write(workspace / "big.md", "# Big\n" + "words " * 1000)
    result = await toolset(RulesSettings(max_chars=500)).call_tool("read_rules", {"topic": "big"}, ctx)
    assert result.content.endswith("[cut at 500 characters; read the rest with read_file(path='big.md')]")
    assert len(result.content) < 700


async def test_read_rules_is_offered_only_when_agents_md_links_documents(
    docs_workspace: Path, ctx: ToolContext
) -> None:
    assert "read_rules" in [s.name for s in await toolset().get_tools(ctx)]
    off = RulesToolset(FunctionToolset(), settings=RulesSettings(agents_md=False))
    assert "read_rules" not in [s.name for s in await off.get_tools(ctx)]
    assert (await off.call_tool("read_rules", {"topic": "testing"}, ctx)).is_error


def test_query_terms_are_plain_words() -> None:
    assert query_terms('Deploy "release"* (NEAR) deploy_x-y') == ["deploy", "release", "near", "x", "y"]


def test_the_plain_ranking_agrees_with_fts_on_the_best_match() -> None:
    entries = [
        Entry("Testing", "docs/testing.md", "run pytest"),
        Entry("Deployment", "docs/deploy.md", "tag and push; tests first"),
    ]
    assert rank(entries, "deploy")[0] == _rank_plain(entries, ["deploy"])[0] == 1
    assert rank(entries, "test") == _rank_plain(entries, ["test"]) == [0, 1]


def test_a_linked_document_written_later_is_picked_up(workspace: Path, write: Write) -> None:
    write(workspace / "AGENTS.md", "See [Testing](docs/testing.md).")
    assert linked_docs(workspace.resolve()) == ()
    write(workspace / "docs/testing.md", "# Testing")
    assert [d.path for d in linked_docs(workspace.resolve())] == ["docs/testing.md"]
