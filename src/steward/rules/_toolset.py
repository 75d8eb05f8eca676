"""``RulesToolset``: skills and rules as tools, and nested AGENTS.md where the agent works."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.errors import ConfigError, ToolError
from steward.rules.agents_md import (
    Found,
    LinkedDoc,
    find_doc,
    linked_docs,
    nested_rules,
    read_docs,
    seen_in,
)
from steward.rules.skills import Skill, find_skills, skill_file, skill_text
from steward.tools._paths import resolve_in_workspace, workspace_root
from steward.tools.base import Tool, ToolContext, ToolResult, Toolset, WrapperToolset, tool

if TYPE_CHECKING:
    from steward.config import RulesSettings
    from steward.embed.base import Embedder
    from steward.models.base import ToolSpec

PATH_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_dir", "glob", "grep"})
"""Built-in tools whose ``path`` argument says where the agent is working."""
LOAD_SKILL, READ_RULES, FIND_SKILL = "load_skill", "read_rules", "find_skill"


def _topics(docs: Sequence[LinkedDoc]) -> str:
    return "; ".join(f"{d.title} ({d.path})" for d in docs)


def _make_tools(settings: RulesSettings, embedder: Embedder | None = None) -> dict[str, Tool]:
    @tool
    def load_skill(ctx: ToolContext, name: str, file: str | None = None) -> str:
        """Load a skill listed in the system prompt: its instructions, then the list of its
        other files. With `file`, load one of those files instead.

        Args:
            name: The skill's name, as listed under Skills.
            file: A file of the skill, relative to its folder, as listed by load_skill(name).
        """
        scan = find_skills(ctx.workspace, settings)
        skill = scan.get(name.strip())
        if skill is None:
            known = ", ".join(s.name for s in scan.skills)
            if not known:
                raise ToolError(
                    "No skills are installed. A skill is a folder with a SKILL.md under one of: "
                    + ", ".join(settings.skill_dirs)
                    + "."
                )
            raise ToolError(
                f"No skill named {name!r}. Known skills: {known}. Call load_skill with one of them."
            )
        cap = ctx.settings.read_cap_chars
        return skill_text(skill, cap) if file is None else skill_file(skill, file, cap)

    @tool
    async def find_skill(ctx: ToolContext, query: str) -> str:
        """Search the installed skills for the one that fits a task: their names, descriptions,
        instructions and the files their SKILL.md links to. Use it when no skill listed under
        Skills obviously fits, or to find which file of a skill covers a detail; then load it
        with load_skill.

        Args:
            query: A few words about the task, e.g. "deploy to staging" or "rotate api keys".
        """
        scan = find_skills(ctx.workspace, settings)
        if not scan.skills:
            raise ToolError("No skills are installed; there is nothing to search.")
        if not query.strip():
            raise ToolError('find_skill needs a few words about the task, e.g. "deploy to staging".')
        return await _found_skills(scan.skills, query, embedder)

    @tool
    async def read_rules(ctx: ToolContext, topic: str) -> str:
        """Read the project document that best matches a topic: the reference documents linked
        from AGENTS.md, listed in the system prompt. Words match titles, paths and text, also as
        prefixes ("deploy" finds "deployment"); a document's exact path always matches.

        Args:
            topic: A few words naming the topic, e.g. "testing" or "release process".
        """
        root = workspace_root(ctx.workspace)
        docs = linked_docs(root) if settings.agents_md else ()
        if not docs:
            raise ToolError(
                "There are no reference documents: AGENTS.md links no markdown file in the workspace."
            )
        found = await _best_doc(root, docs, topic, settings.max_chars, embedder)
        if found is None:
            raise ToolError(
                f"No reference document matches {topic!r}. Topics: {_topics(docs)}. "
                "Call read_rules with words from one of these titles, or with its path."
            )
        parts = [f"[{found.doc.path} — {found.doc.title}]\n{found.text.strip()}"]
        if found.truncated:
            rest = f"read_file(path='{found.doc.path}')"
            parts.append(f"[cut at {settings.max_chars} characters; read the rest with {rest}]")
        if found.others:
            parts.append(f"Other matching documents: {_topics(found.others)}.")
        return "\n\n".join(parts)

    return {LOAD_SKILL: load_skill, READ_RULES: read_rules, FIND_SKILL: find_skill}


async def _best_doc(
    root: Path, docs: tuple[LinkedDoc, ...], topic: str, max_chars: int, embedder: Embedder | None
) -> Found | None:
    """``find_doc``, with the documents also ranked by meaning when there is an embedder."""
    contents = await asyncio.to_thread(read_docs, root, docs)
    meaning: list[int] = []
    if embedder is not None and topic.strip():
        from steward.tools._meaning import by_meaning

        texts = [f"{d.title}\n{d.path}\n{c.text if c else ''}" for d, c in zip(docs, contents, strict=True)]
        # A server that is down: the words still find the document.
        with contextlib.suppress(Exception):
            meaning = await by_meaning(embedder, topic, texts)
    return find_doc(root, docs, topic, max_chars, contents=contents, meaning=meaning)


async def _found_skills(skills: Sequence[Skill], query: str, embedder: Embedder | None) -> str:
    from steward.rules._skill_search import search_skills

    note = ""
    try:
        hits = await search_skills(skills, query, embedder=embedder)
    except Exception as exc:  # an embedder that is down: the words still find skills
        if embedder is None:
            raise
        hits = await search_skills(skills, query)
        note = f"\n(Search by meaning failed: {type(exc).__name__}: {str(exc)[:200]}; matched by words only.)"
    if not hits:
        known = ", ".join(s.name for s in skills[:50])
        return f"No skill matches {query!r}. Skills: {known}. Try other words, or load_skill(name)."
    lines = [f"Skills for {query!r}, best first:"]
    for hit in hits:
        call = f"load_skill(name={hit.skill.name!r}" + (f", file={hit.file!r})" if hit.file else ")")
        lines.append(f"- {hit.skill.name}: {hit.skill.description[:250]} → {call}")
    return "\n".join(lines) + note


OFFER_RECHECK_S = 2.0


class RulesToolset(WrapperToolset):
    """The wrapped tools, plus ``load_skill`` and ``find_skill`` (when there are skills) and
    ``read_rules`` (when AGENTS.md links documents); a nested AGENTS.md is appended to the result of the first
    successful file tool call of a run that touches its subtree."""

    def __init__(
        self, wrapped: Toolset, *, settings: RulesSettings, embedder: Embedder | None = None
    ) -> None:
        super().__init__(wrapped)
        self.settings = settings
        self.embedder = embedder  # find_skill and read_rules rank by meaning too when given
        self._tools: dict[str, Tool] | None = None  # made on first use: constructors do no work
        self._inner: Sequence[ToolSpec] | None = None
        self._inner_names: frozenset[str] = frozenset()
        self._key: tuple[Path, bool, bool] | None = None
        self._specs: Sequence[ToolSpec] = ()
        self._checked: dict[Path, tuple[float, tuple[Path, bool, bool]]] = {}

    def _own(self) -> dict[str, Tool]:
        if self._tools is None:
            self._tools = _make_tools(self.settings, self.embedder)
        return self._tools

    def _offers(self, workspace: Path) -> tuple[Path, bool, bool]:
        # Every step lists tools; checking the skill folders and AGENTS.md links means resolving
        # paths and a few stats (~0.3 ms), so the answer is kept for a moment per workspace. A
        # skill added mid-run shows up within OFFER_RECHECK_S.
        now = time.monotonic()
        known = self._checked.get(workspace)
        if known is not None and now - known[0] < OFFER_RECHECK_S:
            return known[1]
        has_skills = bool(find_skills(workspace, self.settings).skills)
        has_docs = self.settings.agents_md and bool(linked_docs(workspace_root(workspace)))
        offers = (workspace, has_skills, has_docs)
        if len(self._checked) > 64:  # one agent serving many workspaces: keep it bounded
            self._checked.clear()
        self._checked[workspace] = (now, offers)
        return offers

    async def get_tools(self, ctx: ToolContext) -> Sequence[ToolSpec]:
        inner = await self.wrapped.get_tools(ctx)
        key = self._offers(ctx.workspace)
        if inner is self._inner and key == self._key:
            return self._specs  # the same list while nothing changed: context.py caches by identity
        _, has_skills, has_docs = key
        names = frozenset(spec.name for spec in inner)
        offers = ((LOAD_SKILL, has_skills), (FIND_SKILL, has_skills), (READ_RULES, has_docs))
        wanted = [name for name, offered in offers if offered]
        clash = names.intersection(wanted)
        if clash:
            raise ConfigError(
                f"Tool {sorted(clash)[0]!r} is defined twice: by a toolset and by the rules (skills, "
                "AGENTS.md); rename the other tool."
            )
        own = self._own()
        specs = [*inner, *(own[name].spec for name in wanted)] if wanted else inner
        self._inner, self._inner_names, self._key, self._specs = inner, names, key, specs
        return specs

    async def call_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if name in (LOAD_SKILL, READ_RULES, FIND_SKILL) and name not in self._inner_names:
            return await self._own()[name].call(arguments, ctx)
        result = await self.wrapped.call_tool(name, arguments, ctx)
        path = arguments.get("path", ".")
        # Not after errors: their text feeds error categories and the working memory's error
        # list, shown every step; the rules come with the next call that works.
        if (
            result.is_error
            or not self.settings.agents_md
            or name not in PATH_TOOLS
            or not isinstance(path, str)
        ):
            return result
        seen = self._seen(ctx)
        blocks = await asyncio.to_thread(self._nested, ctx.workspace, path, frozenset(seen))
        added = [(shown, block) for shown, block in blocks if shown not in seen]  # seen may have grown
        if not added:
            return result
        seen.update(shown for shown, _ in added)
        note = ""
        if name in ("write_file", "edit_file"):
            # The write happened before the model saw these rules: say so, or it never rechecks.
            note = "\n\n(The change above was made before you saw the rules below: check it against them.)"
        return replace(result, content=result.content + note + "".join(f"\n\n{block}" for _, block in added))

    def rules_seen(self, ctx: ToolContext) -> frozenset[str]:
        """The nested AGENTS.md files whose rules the run of ``ctx`` has been given."""
        return frozenset(self._seen(ctx))

    def _seen(self, ctx: ToolContext) -> set[str]:
        # Per run, not in the wrapper (one agent's toolset serves many runs at once): the run's
        # context holds it (``RunScopes``); a run rebuilt from its log gets it back in ``replayed``.
        return ctx.scope(self, set[str])

    def _nested(self, workspace: Path, path: str, seen: frozenset[str]) -> list[tuple[str, str]]:
        try:
            target = resolve_in_workspace(workspace, path)
        except ToolError:
            return []
        return nested_rules(workspace_root(workspace), target, seen, self.settings.max_chars)

    def replayed(self, name: str, arguments: Mapping[str, Any], result: ToolResult, ctx: ToolContext) -> None:
        # The markers in the recorded result say which rules the run was given.
        if name in PATH_TOOLS and not result.is_error:
            self._seen(ctx).update(seen_in(result.content))
        super().replayed(name, arguments, result, ctx)
