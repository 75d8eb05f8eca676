"""``find_skill``'s search: skills by their name, description, SKILL.md and the files it links.

Each skill is one or more search entries: its SKILL.md (name and description as the title,
the body as the text), and each file of its folder that SKILL.md links to (``[deploy
steps](reference/deploy.md)``), so a word that only a linked file holds still finds the skill,
with that file to load. Keyword ranking is the rules' BM25 (``_search.rank``); with an embedder
it is fused with a ranking by meaning (``steward.embed.fusion.fuse``). A skill is listed once,
at its best entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from steward.rules._read import read_text
from steward.rules._search import Entry, rank
from steward.rules.agents_md import _link_targets
from steward.rules.skills import SKILL_MD, Skill, split_front_matter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from steward.embed.base import Embedder

MAX_LINKED_FILES = 20  # per skill
_FILE_CHARS = 50_000  # of each file, for the search
_RESULTS = 5


@dataclass(slots=True, frozen=True)
class SkillHit:
    """A skill that matches, and the file to load first (None: its SKILL.md)."""

    skill: Skill
    file: str | None


def _linked_files(skill: Skill, body: str) -> list[str]:
    """The skill's own files its SKILL.md links to, folder-relative, in link order."""
    found: list[str] = []
    for _, target in _link_targets(body):
        if "://" in target or target.startswith(("mailto:", "#", "/")) or "\x00" in target:
            continue
        relative = PurePosixPath(target.split("#", 1)[0].split("?", 1)[0])
        if not relative.parts or ".." in relative.parts or relative.name == SKILL_MD:
            continue
        shown = relative.as_posix()
        if shown not in found:
            found.append(shown)
    return found[:MAX_LINKED_FILES]


def skill_entries(skills: Sequence[Skill]) -> list[tuple[Skill, str | None, Entry]]:
    """The search entries of ``skills``: (skill, linked file or None, entry)."""
    out: list[tuple[Skill, str | None, Entry]] = []
    for skill in skills:
        title = f"{skill.name} {skill.description}"
        head = read_text(skill.folder / SKILL_MD, skill.folder, _FILE_CHARS)
        body = ""
        if head is not None:
            try:
                body = split_front_matter(head.text)[1]
            except ValueError:
                body = ""
        out.append((skill, None, Entry(title, SKILL_MD, body)))
        for file in _linked_files(skill, body):
            text = read_text(skill.folder.joinpath(*PurePosixPath(file).parts), skill.folder, _FILE_CHARS)
            if text is not None:  # missing, outside the folder, or binary: not searched
                out.append((skill, file, Entry(title, file, text.text)))
    return out


async def search_skills(
    skills: Sequence[Skill], query: str, *, embedder: Embedder | None = None, limit: int = _RESULTS
) -> list[SkillHit]:
    """The skills matching ``query``, best first, each with the file that matched best."""
    entries = skill_entries(skills)
    if not entries:
        return []
    order = rank([e for _, _, e in entries], query)
    if embedder is not None:
        from steward.embed.fusion import fuse
        from steward.tools._meaning import by_meaning

        texts = [f"{e.title}\n{e.path}\n{e.content}" for _, _, e in entries]
        order = [f.key for f in fuse(order, await by_meaning(embedder, query, texts))]
    hits: list[SkillHit] = []
    for index in order:
        skill, file, _ = entries[index]
        if all(hit.skill.name != skill.name for hit in hits):
            hits.append(SkillHit(skill, file))
        if len(hits) == limit:
            break
    return hits
