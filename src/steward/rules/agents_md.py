"""AGENTS.md in three tiers (seed 001).

1. Always: the root ``AGENTS.md`` of the workspace is part of the static system prompt.
2. By topic: markdown documents the root ``AGENTS.md`` links to (``[Testing](docs/testing.md)``)
   are listed by title in the prompt and read with ``read_rules(topic)``.
3. By place: a nested ``AGENTS.md`` is added to a tool's result the first time a run touches a
   path in its directory's subtree (see ``RulesToolset``).

Only files inside the workspace are used: a link or symlink leading out of it is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from steward.rules._read import StampedCache, Text, Watch, cut_at_line, read_text, real_file
from steward.rules._search import Entry, rank

AGENTS_MD = "AGENTS.md"
MAX_DOCS = 50
"""Linked documents indexed per workspace; links past this many are ignored."""
_MAX_LINKS = 500  # links looked at in AGENTS.md (each is stamped on every check)
_LINK_SCAN_CHARS = 200_000  # links are looked for further than the prompt shows
_DOC_INDEX_CHARS = 200_000  # of each document's text, for the search
_HEADING_SCAN_CHARS = 4_000
_MARKDOWN = (".md", ".markdown")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_INLINE_LINK = re.compile(r"(?<!!)\[([^\]\n]{0,200})\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)\n]*)?\)")
_REFERENCE_LINK = re.compile(r"^ {0,3}\[([^\]\n]{1,200})\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
_REFERENCE_USE = re.compile(r"(?<!!)\[([^\]\n]{1,200})\]\[([^\]\n]{0,200})\]")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_MARKER = re.compile(r"^\[Rules from ((?:[^\]\n]+/)?AGENTS\.md) — they apply to files under ", re.MULTILINE)


def _posix(path: Path, root: Path) -> str:
    relative = path.relative_to(root)
    return PurePosixPath(*relative.parts).as_posix() if relative.parts else "."


# --- tier 1: the root AGENTS.md -----------------------------------------------------------


def root_rules(root: Path, max_chars: int) -> str:
    """The root AGENTS.md as a prompt section (capped, saying so), or "" when there is none."""
    found = read_text(root / AGENTS_MD, root, max_chars)
    if found is None or not found.text.strip():
        return ""
    text = found.text
    if found.truncated:
        text = cut_at_line(text)
        next_line = text.count("\n") + 1
        text += (
            f"\n[AGENTS.md is longer than {max_chars} characters and was cut here; read the rest with "
            f"read_file(path='AGENTS.md', start_line={next_line}).]"
        )
    return f"## Project rules (AGENTS.md)\n\n{text.strip()}"


# --- tier 2: documents linked from the root AGENTS.md -------------------------------------


@dataclass(slots=True, frozen=True)
class LinkedDoc:
    """A markdown document linked from AGENTS.md: its title and workspace-relative path."""

    title: str
    path: str


def _link_targets(markdown: str) -> list[tuple[str, str]]:
    """(text, target) of the inline and reference links, in order, outside code fences."""
    prose = _FENCE.sub("", markdown)
    found = [(m.start(), m.group(1), m.group(2)) for m in _INLINE_LINK.finditer(prose)]
    # A reference definition's label is an id, not prose: the text of a link using it is better.
    uses: dict[str, str] = {}
    for m in _REFERENCE_USE.finditer(prose):
        uses.setdefault((m.group(2) or m.group(1)).lower(), m.group(1))
    found += [
        (m.start(), uses.get(m.group(1).lower(), ""), m.group(2)) for m in _REFERENCE_LINK.finditer(prose)
    ]
    return [(text, target) for _, text, target in sorted(found)]


def _markdown_target(target: str, root: Path) -> Path | None:
    """Where a link to a markdown file points (it may not exist); None for other links."""
    if "://" in target or target.startswith(("mailto:", "#")):
        return None
    target = unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not target.lower().endswith(_MARKDOWN) or "\x00" in target:
        return None
    # A leading '/' means the repository root, as on the forges that render these files.
    return root / target.lstrip("/")


def _clean_title(text: str) -> str:
    return " ".join(text.replace("`", "").replace("*", "").split())


def _first_heading(path: Path, root: Path) -> str:
    head = read_text(path, root, _HEADING_SCAN_CHARS)
    match = _HEADING.search(head.text) if head else None
    return _clean_title(match.group(1)) if match else ""


def _title(text: str, target: str, path: Path, root: Path) -> str:
    title = _clean_title(text)
    # Link text that only repeats the file name says nothing: the document's heading does.
    if not title or title.lower() in {target.lower(), path.name.lower(), "here", "link", "this"}:
        title = _first_heading(path, root) or path.stem.replace("-", " ").replace("_", " ")
    return title[:120]


def _scan_links(root: Path, watch: Watch) -> tuple[LinkedDoc, ...]:
    agents = root / AGENTS_MD
    watch.add(agents)
    found = read_text(agents, root, _LINK_SCAN_CHARS)
    if found is None:
        return ()
    docs: list[LinkedDoc] = []
    seen: set[Path] = set()
    for text, target in _link_targets(found.text)[:_MAX_LINKS]:
        candidate = _markdown_target(target, root)
        if candidate is None:
            continue
        watch.add(candidate)  # also when missing: the document may be written later
        path = real_file(candidate, root)
        if path is None or path in seen or path == root / AGENTS_MD:
            continue
        seen.add(path)
        docs.append(LinkedDoc(_title(text, target, path, root), _posix(path, root)))
        if len(docs) == MAX_DOCS:
            break
    return tuple(docs)


_docs_cache: StampedCache[tuple[LinkedDoc, ...]] = StampedCache()


def linked_docs(root: Path) -> tuple[LinkedDoc, ...]:
    """The markdown documents the root AGENTS.md links to, in link order (cached by file stamps).

    ``root`` is the workspace's real path.
    """
    return _docs_cache.get(root, lambda watch: _scan_links(root, watch))


def topics_section(docs: tuple[LinkedDoc, ...]) -> str:
    if not docs:
        return ""
    lines = [f"- {doc.title} ({doc.path})" for doc in docs]
    return (
        "Reference documents — read one with read_rules(topic) when the task touches its topic:\n"
        + "\n".join(lines)
    )


@dataclass(slots=True, frozen=True)
class Found:
    """The best document for a topic (its text capped) and the titles of the other matches."""

    doc: LinkedDoc
    text: str
    truncated: bool
    others: tuple[LinkedDoc, ...]


def read_docs(root: Path, docs: tuple[LinkedDoc, ...]) -> list[Text | None]:
    """The head of each document, as far as it is searched (None: it cannot be read)."""
    return [read_text(root / doc.path, root, _DOC_INDEX_CHARS) for doc in docs]


def find_doc(
    root: Path,
    docs: tuple[LinkedDoc, ...],
    topic: str,
    max_chars: int,
    *,
    contents: list[Text | None] | None = None,
    meaning: Sequence[int] = (),
) -> Found | None:
    """The linked document that best matches ``topic`` (a path matches exactly), or None.

    ``meaning`` is a ranking of ``docs`` by meaning (best first, from an embedder), fused with
    the keyword ranking; ``contents`` are the documents as ``read_docs`` read them, if it was
    called already.
    """
    if contents is None:
        contents = read_docs(root, docs)
    wanted = topic.strip().removeprefix("./").lstrip("/")
    order = [n for n, doc in enumerate(docs) if doc.path == wanted]
    if not order:
        entries = [Entry(d.title, d.path, c.text if c else "") for d, c in zip(docs, contents, strict=True)]
        order = rank(entries, topic)
        if meaning:
            from steward.embed.fusion import fuse

            order = [f.key for f in fuse(order, meaning)]
    if not order:
        return None
    best = contents[order[0]]
    text = best.text if best else ""
    truncated = best is not None and (best.truncated or len(text) > max_chars)
    return Found(docs[order[0]], text[:max_chars], truncated, tuple(docs[n] for n in order[1:6]))


# --- tier 3: nested AGENTS.md, by place ---------------------------------------------------


def _directories(target: Path, root: Path) -> list[Path]:
    """The directories from ``target``'s (itself, if a directory) up to, not including, ``root``;
    outermost first."""
    try:
        current = target if target.is_dir() else target.parent
    except OSError:
        current = target.parent
    chain: list[Path] = []
    while current != root and current.is_relative_to(root):
        chain.append(current)
        current = current.parent
    # Rules in .git, node_modules, virtual environments and the like were written by others
    # (packages ship their own AGENTS.md): they are not this project's rules.
    if any(part in VENDORED_DIRS or part.startswith(".venv") for part in _parts(target, root)):
        return []
    return chain[::-1]


#: Folders whose AGENTS.md files are not the project's (the file tools skip the same ones).
VENDORED_DIRS = frozenset(
    {".git", "node_modules", ".venv", "venv", "site-packages", "__pycache__", ".steward"}
)


def _parts(target: Path, root: Path) -> tuple[str, ...]:
    try:
        return target.relative_to(root).parts
    except ValueError:
        return ()


def nested_rules(root: Path, target: Path, seen: AbstractSet[str], max_chars: int) -> list[tuple[str, str]]:
    """(path, block) for each AGENTS.md above ``target`` (a real path inside ``root``) that is not
    in ``seen``, outermost first; each block is marked so ``seen_in`` can find it again."""
    blocks: list[tuple[str, str]] = []
    for directory in _directories(target, root):
        rules = directory / AGENTS_MD
        shown = _posix(rules, root)
        if shown in seen:
            continue
        found = read_text(rules, root, max_chars)
        if found is None or not found.text.strip():
            continue
        text = found.text
        if found.truncated:
            text = cut_at_line(text) + (
                f"\n[{shown} is longer than {max_chars} characters and was cut here; read it with "
                "read_file for the rest.]"
            )
        under = _posix(directory, root)
        blocks.append(
            (
                shown,
                f"[Rules from {shown} — they apply to files under {under}/]\n{text.strip()}\n"
                f"[End of rules from {shown}]",
            )
        )
    return blocks


def seen_in(output: str) -> list[str]:
    """The AGENTS.md paths whose rules a recorded tool result carries (in marker order)."""
    return _MARKER.findall(output)
